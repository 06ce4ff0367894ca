"""Resolving `gpu_targets` (the `auto` value finds the GPUs of the build machine)."""
from __future__ import annotations

import os
import shutil
import subprocess

from .model import KNOWN_TARGETS, backend_of
from .toolchain import cutlass_include_dirs, hip_toolchain


def _run(cmd) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def detect_gpus() -> list[str]:
    """Targets of the GPUs on this machine: sm_XY from nvidia-smi, gfxNNN from rocminfo."""
    found = []
    if shutil.which("nvidia-smi"):
        for line in _run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]).split():
            major, _, minor = line.strip().partition(".")
            if major.isdigit() and minor.isdigit():
                target = f"sm_{major}{minor}" + ("a" if int(major) >= 9 else "")
                if target in KNOWN_TARGETS and target not in found:
                    found.append(target)
    if shutil.which("rocminfo"):
        for word in _run(["rocminfo"]).split():
            if word.startswith("gfx") and word in KNOWN_TARGETS and word not in found:
                found.append(word)
    return found


def _missing_toolchain(target: str) -> str:
    """What a detected GPU target lacks to be built here ('' when nothing)."""
    if backend_of(target).key == "hip":
        try:
            hip_toolchain([target])
        except ValueError as err:
            return str(err)
    if backend_of(target).key == "cuda":
        if target != "sm_90a":
            return f"the cuda backend builds sm_90a only in this version, not {target}"
        if not (shutil.which("nvcc") or os.environ.get("CUDACXX")):
            return "nvcc is not on PATH"
        try:
            cutlass_include_dirs()
        except ValueError:
            return "the CUTLASS headers are not installed (pip install --no-deps nvidia-cutlass)"
    return ""


def resolve(requested: list[str], warn) -> list[str]:
    """The build's targets: `auto` is cpu plus each detected GPU whose backend this version has."""
    out = []
    for item in requested:
        item = item.strip()
        if not item:
            continue
        if item == "auto":
            candidates = ["cpu"]
            for gpu in detect_gpus():
                backend = backend_of(gpu)
                missing = _missing_toolchain(gpu)
                if not backend.implemented:
                    warn(f"found a {gpu} GPU, but the {backend.key} backend is not part of this "
                         f"version: building the cpu target only")
                elif missing:
                    warn(f"found a {gpu} GPU, but {missing}: building without it "
                         f"(-Dgpu_targets={gpu} makes that an error)")
                else:
                    candidates.append(gpu)
        else:
            if item not in KNOWN_TARGETS:
                raise ValueError(f"unknown target '{item}' in gpu_targets "
                                 f"(expected auto or some of {', '.join(KNOWN_TARGETS)})")
            candidates = [item]
        for target in candidates:
            if target not in out:
                out.append(target)
    if not out:
        raise ValueError("gpu_targets is empty")
    return out
