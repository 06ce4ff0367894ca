"""Which GPUs this process can see: NVIDIA through the driver API (libcuda), AMD through
the KFD topology in sysfs; no CUDA or ROCm Python package is imported. The one place GPUs are
detected: the runtime picks its library with it, and the build's `gpu_targets=auto`
(codegen/targets.py) with it, so this module needs only ctypes and os."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

CC_MAJOR, CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}


KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"


def amd_targets(nodes: str = KFD_NODES) -> tuple:
    """gfx targets of the AMD GPUs the kernel driver (amdgpu/KFD) exposes, e.g. ('gfx942',).
    gfx_target_version is major * 10000 + minor * 100 + stepping: 90402 is gfx942, 90010
    gfx90a. HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES set to '' hide them."""
    if "" in (os.environ.get("HIP_VISIBLE_DEVICES"), os.environ.get("ROCR_VISIBLE_DEVICES")):
        return ()
    found = []
    try:
        entries = sorted(os.listdir(nodes))
    except OSError:
        return ()
    for entry in entries:
        try:
            with open(os.path.join(nodes, entry, "properties"), encoding="ascii") as fh:
                props = dict(line.split(None, 1) for line in fh if len(line.split(None, 1)) == 2)
            version = int(props.get("gfx_target_version", "0"))
        except (OSError, ValueError):
            continue
        if version <= 0:  # a CPU node
            continue
        major, minor, stepping = version // 10000, version // 100 % 100, version % 100
        target = f"gfx{major}{minor}{stepping:x}"
        if target not in found:
            found.append(target)
    return tuple(found)


@functools.lru_cache(maxsize=None)
def device_targets() -> tuple:
    """Build targets of the visible GPUs, e.g. ('sm_90a',) or ('gfx942',); () without any."""
    return nvidia_targets() + amd_targets()


def nvidia_targets() -> tuple:
    """Build targets of the visible NVIDIA GPUs; () without driver or GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return ()
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
    except OSError:
        return ()
    try:
        if cuda.cuInit(0) != 0:
            return ()
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return ()
        found = []
        for ordinal in range(count.value):
            dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
            if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
                continue
            cuda.cuDeviceGetAttribute(ctypes.byref(major), CC_MAJOR, dev)
            cuda.cuDeviceGetAttribute(ctypes.byref(minor), CC_MINOR, dev)
            target = f"sm_{major.value}{minor.value}" + ("a" if major.value >= 9 else "")
            if target not in found:
                found.append(target)
        return tuple(found)
    except (AttributeError, OSError):
        return ()


def device_count() -> int:
    """Visible NVIDIA GPUs (0 without a driver)."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(name)
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    except (OSError, AttributeError):
        return 0
