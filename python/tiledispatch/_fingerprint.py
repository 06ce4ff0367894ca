"""What a measurement was made on: the device (its name and size), the software under it and
the library build. Tuning tables and the autotune cache carry it as their `header`.

    identity("cpu")  -> {"device": "AMD EPYC 7B13", "cores": 2}
    identity("sm_90a") -> {"device": "NVIDIA H200", "sm_count": 132}
    header("sm_90a") -> identity + {"target", "cuda", "driver", "build"}

The identity is what a table is checked against (the device fields: a table measured on
another device is not applied); the whole header is what an autotune cache is checked
against (another driver, CUDA version or build: measured again). GPU fields come from the
driver API (libcuda) for the first visible GPU, or from KFD's sysfs topology on AMD; this
module imports no CUDA package.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import pathlib
import platform
import re

from ._registry import kernels_dir

CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what platform reports."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Processor") and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _libcuda():
    try:
        cuda = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
        return cuda if cuda.cuInit(0) == 0 else None
    except (OSError, AttributeError):
        return None


def nvidia_device(ordinal: int = 0) -> dict:
    """{"device", "sm_count", "cuda"} of a visible NVIDIA GPU ({} without one); "cuda" is the
    CUDA version the driver supports, e.g. "13.0"."""
    cuda = _libcuda()
    if cuda is None:
        return {}
    dev, count, version = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0 or cuda.cuDeviceGetName(name, 256, dev) != 0:
        return {}
    cuda.cuDeviceGetAttribute(ctypes.byref(count), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    return {"device": name.value.decode(errors="replace"), "sm_count": count.value,
            "cuda": f"{version.value // 1000}.{version.value % 1000 // 10}"}


def nvidia_driver() -> str:
    """The NVIDIA kernel driver's version ('' where it cannot be read)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as fh:
            match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", fh.read())
        return match.group(1) if match else ""
    except OSError:
        return ""


def amd_device(nodes: str = "/sys/class/kfd/kfd/topology/nodes") -> dict:
    """{"device", "sm_count"} of the first AMD GPU in the KFD topology (sm_count: its compute
    units), {} without one."""
    try:
        entries = sorted(os.listdir(nodes))
    except OSError:
        return {}
    for entry in entries:
        try:
            with open(os.path.join(nodes, entry, "properties"), encoding="ascii") as fh:
                props = dict(line.split(None, 1) for line in fh if len(line.split(None, 1)) == 2)
            simds, per_cu = int(props.get("simd_count", "0")), int(props.get("simd_per_cu", "0"))
            if simds <= 0 or per_cu <= 0:
                continue  # a CPU node
            with open(os.path.join(nodes, entry, "name"), encoding="ascii") as fh:
                name = fh.read().strip()
            return {"device": name or f"gfx {props.get('gfx_target_version', '?').strip()}",
                    "sm_count": simds // per_cu}
        except (OSError, ValueError):
            continue
    return {}


@functools.lru_cache(maxsize=None)
def _gpu(vendor: str) -> dict:
    return nvidia_device() if vendor == "nvidia" else amd_device()


def identity(target: str) -> dict:
    """The device fields a table's header is checked against: {"device", "cores"} on cpu,
    {"device", "sm_count"} on a GPU target ({} where no such GPU is visible: no check)."""
    if target == "cpu":
        return {"device": cpu_model(), "cores": os.cpu_count() or 1}
    found = _gpu("nvidia" if target.startswith("sm_") else "amd")
    return {key: found[key] for key in ("device", "sm_count") if key in found}


@functools.lru_cache(maxsize=None)
def build_hash(folder: str | None = None) -> str:
    """A hash of a library build: its registry.json and the name, size and modification time
    of every library file it lists (folder: the installed `_kernels`, or a build directory)."""
    base = kernels_dir() if folder is None else pathlib.Path(folder)
    digest = hashlib.sha256()
    try:
        text = (base / "registry.json").read_bytes()
    except OSError:
        return ""
    digest.update(text)
    try:
        libraries = json.loads(text).get("libraries", [])
    except (ValueError, AttributeError):
        libraries = []
    for lib in libraries:
        file = lib.get("file") if isinstance(lib, dict) else None
        if not isinstance(file, str):
            continue
        try:
            st = os.stat(str(base / file))
            digest.update(f"{file}:{st.st_size}:{st.st_mtime_ns}".encode())
        except OSError:
            digest.update(f"{file}:missing".encode())
    return digest.hexdigest()[:16]


def header(target: str, folder: str | None = None) -> dict:
    """The header of a table or an autotune cache made here for `target`: the identity, the
    target, the CUDA and driver versions (GPU) and the build hash."""
    out = dict(identity(target))
    out["target"] = target
    if target.startswith("sm_"):
        found = _gpu("nvidia")
        if found.get("cuda"):
            out["cuda"] = found["cuda"]
        driver = nvidia_driver()
        if driver:
            out["driver"] = driver
    out["build"] = build_hash(folder)
    return out
