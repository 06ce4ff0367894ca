"""The lean path of the conv ops on CUDA tensors: a repeated call reuses what the first one
decided.

The general path (the op's checks, the ConvProblem, Dispatcher.run) runs a call's first
time; where the library picked the kernel, it stores a plan here under the tensors' metadata
(element types, shapes, strides, devices) and the op's arguments. A later call with the same
metadata makes the channels-last views, allocates the result and calls td_conv_run once.
Not used during CUDA graph capture (the workspace is sized there), while autotuning, or while
problems are recorded or picks logged: those calls take the general path every time.
"""
from __future__ import annotations

import ctypes

import torch

from . import _autotune, _picklog
from ._plan_cache import PlanCache, torch_raw_stream
from ._torch_views import channels_first, dense_channels_last

_PLANS = PlanCache()



def key(direction: str, a: torch.Tensor, b: torch.Tensor, params: tuple):
    """The metadata key of one op call, or None where the lean path does not apply."""
    if not (a.is_cuda and b.is_cuda) or torch.cuda.is_current_stream_capturing() or _autotune.active() \
            or _picklog.recording() or _picklog.logging_picks():
        return None
    k = (direction, a.dtype, a.shape, a.stride(), b.dtype, b.shape, b.stride(), a.get_device(), b.get_device(), params)
    try:
        hash(k)
    except TypeError:
        return None
    return k


class Plan:
    """What one op call decided from metadata alone: the C problem, the written slot (0: input,
    1: weight, 2: output), the result's channels-last shape and type."""

    __slots__ = ("struct", "ref", "run", "check", "written", "shape", "dtype", "raw_stream")

    def __init__(self, problem_struct, lib, written: int, shape, dtype):
        self.struct = problem_struct
        self.ref = ctypes.byref(problem_struct)
        self.run, self.check = lib.td_conv_run, lib.check
        self.written, self.shape, self.dtype = written, tuple(shape), dtype
        self.raw_stream = torch_raw_stream()


store, lookup, clear = _PLANS.store, _PLANS.lookup, _PLANS.clear


def execute(plan: Plan, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Runs a stored plan on this call's two read tensors, in the library's order (input,
    weight, output without the written one); returns the result as the op does (the
    channels-first view of a channels-last tensor)."""
    reads = [dense_channels_last(a), dense_channels_last(b)]
    result = torch.empty(plan.shape, dtype=plan.dtype, device=a.device)
    ptrs = [t.data_ptr() for t in reads]
    ptrs.insert(plan.written, result.data_ptr())
    status = plan.run(plan.ref, None, ptrs[0], ptrs[1], ptrs[2], None, 0, plan.raw_stream(a.get_device()), None)
    if status:
        plan.check(status)
    return channels_first(result)
