"""Resolving `gpu_targets` (the `auto` value finds the GPUs of the build machine)."""
from __future__ import annotations

import os
import shutil

from .. import _cuda
from .model import KNOWN_TARGETS, backend_of
from .toolchain import cutlass_include_dirs, hip_toolchain


def detect_gpus() -> list[str]:
    """Targets of the GPUs this process sees that this version knows, from tiledispatch._cuda
    (the CUDA driver API and the KFD topology; the runtime asks it too). CUDA_VISIBLE_DEVICES
    or HIP_VISIBLE_DEVICES set to '' hides a vendor's GPUs from `auto`."""
    return [target for target in _cuda.device_targets() if target in KNOWN_TARGETS]


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
    if "cpu" not in out:
        warn(f"gpu_targets={','.join(out)} does not include cpu: no cpu library will be built, and host "
             f"(numpy) calls will run on the {out[0]} library (copied to the GPU and back); "
             f"add cpu (-Dgpu_targets=cpu,{','.join(out)}) to build it")
    return out
