"""The lean path of td.gemm's extra arguments (epilogue, batch, out dtype, fp8 scales) on torch
CUDA tensors: a repeated call reuses what the first one decided.

The general path (gemm_ex._gemm_device) checks every argument and builds the C problem; on
success it stores a plan here under the arguments' metadata (element types, shapes, strides,
devices, the scalar arguments). A later call with the same metadata reads a few attributes,
allocates the outputs it must, checks the address overlaps (addresses are not metadata, so
they are checked on every call) and calls td_gemm_run_ex once.
"""
from __future__ import annotations

import ctypes

from . import _ffi
from ._plan_cache import PlanCache, torch_raw_stream
from .errors import InvalidArgumentError

# the array arguments of td.gemm, in the order of the key
ARRAYS = ("a", "b", "out", "c", "bias", "aux", "row_scale", "col_scale", "scale_a", "scale_b")
# the epilogue operands of TdGemmEpilogue that name a caller's array (aux is an output)
EPILOGUE = ("c", "bias", "aux", "row_scale", "col_scale", "scale_a", "scale_b")

_PLANS = PlanCache()
_TENSOR: list = [None]


def _tensor_type():
    if _TENSOR[0] is None:
        import torch
        _TENSOR[0] = torch.Tensor
    return _TENSOR[0]


raw_stream = torch_raw_stream


def key(arrays: dict, scalars: tuple):
    """The metadata key of one call, or None where the lean path does not apply (an array that is
    not a torch CUDA tensor, a per-tensor scale that is not a plain number)."""
    tensor = _tensor_type()
    parts = [scalars]
    for name in ARRAYS:
        x = arrays[name]
        if x is None:
            parts.append(None)
        elif type(x) is tensor or isinstance(x, tensor):
            if not x.is_cuda:
                return None
            parts.append((x.dtype, x.shape, x.stride(), x.get_device()))
        elif name in ("scale_a", "scale_b") and type(x) in (int, float):
            parts.append(("number", x))
        else:
            return None
    k = tuple(parts)
    try:
        hash(k)
    except TypeError:  # an unhashable scalar argument: the general path reports it
        return None
    return k


def _extent(x) -> tuple:
    """[low, high) byte offsets from the tensor's address that its elements cover."""
    item = x.element_size()
    if x.numel() == 0:
        return 0, 0
    low = sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.stride())) * item
    high = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.stride())) * item + item
    return low, high


class Plan:
    """What one call decided from metadata alone."""

    __slots__ = ("struct", "ref", "kernel", "run", "check", "raw_stream", "device", "shape", "out_dtype",
                 "want_aux", "return_aux", "reads", "extents", "epilogue")

    def __init__(self, problem_struct, kernel, lib, raw_stream, device, shape, out_dtype, want_aux, return_aux,
                 arrays):
        self.struct = problem_struct
        self.ref = ctypes.byref(problem_struct)
        self.kernel = None if kernel is None else kernel.encode()
        self.run, self.check = lib.td_gemm_run_ex, lib.check
        self.raw_stream, self.device = raw_stream, device
        self.shape, self.out_dtype = shape, out_dtype
        self.want_aux, self.return_aux = want_aux, return_aux
        tensor = _tensor_type()
        present = [n for n in ARRAYS if isinstance(arrays[n], tensor)]
        # what the outputs must not overlap: every array the call reads
        self.reads = [n for n in present if n not in ("out", "aux")]
        self.extents = {n: _extent(arrays[n]) for n in present}
        self.epilogue = [n for n in EPILOGUE if isinstance(arrays[n], tensor)]


store, lookup, clear = _PLANS.store, _PLANS.lookup, _PLANS.clear


def _overlap(plan: Plan, ptrs: dict, written: str, others) -> str | None:
    lo, hi = plan.extents[written]
    w0, w1 = ptrs[written] + lo, ptrs[written] + hi
    for other in others:
        if other == "c" and written == "out" and ptrs["c"] == ptrs["out"]:
            continue  # c = out: in-place accumulation, laid out as out (the plan checked it)
        o_lo, o_hi = plan.extents[other]
        if w0 < ptrs[other] + o_hi and ptrs[other] + o_lo < w1:
            return other
    return None


def execute(plan: Plan, arrays: dict):
    """Runs a stored plan on this call's tensors; returns what td.gemm returns."""
    a = arrays["a"]
    ptrs = {n: arrays[n].data_ptr() for n in plan.extents}
    out, aux = arrays["out"], arrays["aux"]
    if out is None:
        out = a.new_empty(plan.shape, dtype=plan.out_dtype)
    else:
        bad = _overlap(plan, ptrs, "out", plan.reads)
        if bad:
            raise InvalidArgumentError(f"out overlaps {bad}: pass a separate array")
    if plan.want_aux:
        if aux is None:
            aux = a.new_empty(plan.shape, dtype=plan.out_dtype)
        else:  # a fresh out cannot overlap it; the caller's out can
            bad = _overlap(plan, ptrs, "aux", plan.reads + (["out"] if "out" in plan.extents else []))
            if bad:
                raise InvalidArgumentError(f"aux overlaps {bad}: pass a separate array")
    values = {n: ptrs[n] for n in plan.epilogue}
    if plan.want_aux:
        values["aux"] = aux.data_ptr()
    epilogue = _ffi.TdGemmEpilogue(**values)
    status = plan.run(plan.ref, plan.kernel, ptrs["a"], ptrs["b"], out.data_ptr(), ctypes.byref(epilogue), None, 0,
                      plan.raw_stream(plan.device), None)
    if status:
        plan.check(status)
    return (out, aux) if plan.return_aux else out
