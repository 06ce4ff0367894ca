"""Which NVIDIA GPUs this process can see, through the driver API (libcuda), without
importing any CUDA Python package."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

CC_MAJOR, CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}


@functools.lru_cache(maxsize=None)
def device_targets() -> tuple:
    """Build targets of the visible NVIDIA GPUs, e.g. ('sm_90a',); () without driver or GPU."""
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
