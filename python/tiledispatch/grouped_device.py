"""Grouped GEMM on CUDA arrays (torch tensors, cupy arrays): `td.grouped_gemm` where its operands
are on the GPU. One C call (td_gemm_grouped_run) on the caller's current stream, no copy of the
operands: a grouped kernel (algorithm cutlass_grouped) runs every group in one launch where it
takes them, otherwise each group runs as its own GEMM (`grouped_gemm_select` says which).

D = alpha * A @ B per group, fp32 accumulation; fused epilogues, output types and row-wise
scales of the grouped call run on the cpu target (numpy arrays) only.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import _ffi, selection
from .arrays import DeviceArray, is_device_array, is_torch
from .dispatcher import cached_dispatcher
from .codegen import Layout
from .errors import InvalidArgumentError, UnsupportedProblemError
from .problems import GemmProblem, _alpha

# TdGemmGroup as 16 int64 words: M N K lda ldb ldc a b d, then the epilogue's 7 pointers (NULL)
_WORDS = 16
assert ctypes.sizeof(_ffi.TdGemmGroup) == 8 * _WORDS


def _host_offsets(offsets) -> np.ndarray:
    """offsets as a host int64 array; a device array is read back here (one copy, which waits for
    the work already queued on its stream)."""
    if is_torch(offsets):
        return offsets.detach().to("cpu").numpy().astype(np.int64)
    if hasattr(offsets, "get") and hasattr(offsets, "__cuda_array_interface__"):  # cupy
        return np.asarray(offsets.get()).astype(np.int64)
    if is_device_array(offsets):
        raise InvalidArgumentError("offsets on the device must be a torch tensor or a cupy array")
    return offsets


def _matrix_order(shape, strides):
    """('r', ld) / ('c', ld) of a matrix of `shape` and element `strides`, or None."""
    rows, cols = shape
    s0, s1 = strides
    if (s1 == 1 or cols == 1) and s0 >= max(cols, 1) and s0 > 0:
        return "r", s0 if rows > 1 else max(cols, 1)
    if (s0 == 1 or rows == 1) and s1 >= max(rows, 1) and s1 > 0:
        return "c", s1 if cols > 1 else max(rows, 1)
    return None


def _unsupported_extras(bias, activation, out_dtype, scale_a, scale_b) -> float:
    """The alpha factor of per-tensor scales; refuses what the GPU grouped call does not run."""
    for name, value in (("bias", bias), ("activation", activation), ("out_dtype", out_dtype)):
        if value is not None:
            raise UnsupportedProblemError(
                f"grouped_gemm on GPU arrays runs D = alpha * A @ B: {name} runs on the cpu target (numpy arrays)")
    factor = 1.0
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is None:
            continue
        if is_torch(s) or is_device_array(s):
            size = int(np.prod(getattr(s, "shape", ()) or (1,)))
            value = float(s.reshape(-1)[0].item()) if size == 1 else None
        else:
            arr = np.asarray(s)
            value = float(arr.reshape(-1)[0]) if arr.size == 1 else None
        if value is None:
            raise UnsupportedProblemError(f"grouped_gemm on GPU arrays takes per-tensor (scalar) {name} only; "
                                          "row-wise scales run on the cpu target (numpy arrays)")
        factor *= _alpha(value, name)
    return factor


# Where a call that allocates its outputs is only asked which kernel it would launch
# (grouped_gemm_select), the outputs are not made: a fresh allocation is 256-byte aligned, and
# this address stands for it (never dereferenced).
_FRESH = 1 << 40


class _Call:
    """One grouped call, checked: its problem, its group table and its outputs (allocate False:
    new outputs are not made, their addresses stand in as _FRESH)."""

    def __init__(self, a, b, offsets, out, alpha, allocate=True):
        listed = isinstance(a, (list, tuple))
        if listed != isinstance(b, (list, tuple)):
            raise InvalidArgumentError("grouped_gemm takes a and b both as lists, or a 2-D a, a 3-D b and offsets")
        self.listed, self.allocate = listed, allocate
        if listed:
            self._from_lists(a, b, offsets, out)
        else:
            self._from_offsets(a, b, offsets, out)
        self.alpha = alpha

    def _from_lists(self, a, b, offsets, out):
        if offsets is not None:
            raise InvalidArgumentError("the list form takes no offsets")
        if out is not None:
            raise InvalidArgumentError("the list form takes no out (it returns new arrays)")
        if len(a) != len(b):
            raise InvalidArgumentError(f"{len(a)} matrices of A but {len(b)} of B")
        if not a:
            raise InvalidArgumentError("grouped_gemm needs at least one group")
        if not all(is_device_array(x) for x in list(a) + list(b)):
            raise InvalidArgumentError("grouped_gemm's list form takes every matrix on the GPU, or every one on the host")
        da, db = [DeviceArray(x) for x in a], [DeviceArray(x) for x in b]
        for i, (x, y) in enumerate(zip(da, db)):
            if len(x.shape) != 2 or len(y.shape) != 2 or x.shape[1] != y.shape[0]:
                raise InvalidArgumentError(f"group {i}: a {x.shape} and b {y.shape} are not (M, K) and (K, N)")
            if x.shape[1] == 0 or y.shape[1] == 0:
                raise InvalidArgumentError(f"group {i}: K and N must be positive, got a {x.shape} and b {y.shape}")
        self.dtype = da[0].dtype
        for x in da + db:
            if x.dtype is not self.dtype:
                raise TypeError(f"every matrix must share one element type, got {self.dtype.key} and {x.dtype.key}")
        self.first = da[0]
        sizes = np.array([(x.shape[0], y.shape[1], x.shape[1]) for x, y in zip(da, db)], dtype=np.int64)
        if self.allocate:
            self.outs = [da[0].empty((x.shape[0], y.shape[1]), self.dtype.out) for x, y in zip(da, db)]
            out_ptrs = [DeviceArray(o).ptr for o in self.outs]
        else:
            out_ptrs = [_FRESH * (i + 1) for i in range(len(da))]
        used = [i for i in range(len(da)) if da[i].shape[0] > 0] or [0]  # empty groups are skipped
        orders_a = [_matrix_order(da[i].shape, da[i].strides) if da[i].shape[0] else ("r", 0) for i in used]
        orders_b = [_matrix_order(db[i].shape, db[i].strides) for i in used]
        self._layout(orders_a, orders_b)
        lda, ldb = np.zeros(len(da), np.int64), np.zeros(len(da), np.int64)
        lda[used], ldb[used] = [o[1] for o in orders_a], [o[1] for o in orders_b]
        self._table(sizes, lda, ldb, sizes[:, 1], [x.ptr for x in da], [y.ptr for y in db], out_ptrs)

    def _from_offsets(self, a, b, offsets, out):
        da, db = DeviceArray(a), DeviceArray(b)
        if len(da.shape) != 2 or len(db.shape) != 3:
            raise InvalidArgumentError(f"grouped_gemm takes a 2-D a and a 3-D b (groups, K, N), got {da.shape} and "
                                       f"{db.shape}")
        if offsets is None:
            raise InvalidArgumentError("grouped_gemm with a 3-D b needs offsets (the cumulative row ends)")
        if da.shape[1] != db.shape[1]:
            raise InvalidArgumentError(f"inner dimensions differ: a is {da.shape}, b is {db.shape}")
        if da.dtype is not db.dtype:
            raise TypeError(f"A and B must share an element type, got {da.dtype.key} and {db.dtype.key}")
        groups, (rows, K), N = db.shape[0], da.shape, db.shape[2]
        ends = _offsets(_host_offsets(offsets), groups, rows)
        if groups == 0:
            raise InvalidArgumentError("grouped_gemm needs at least one group")
        if K == 0 or N == 0:
            raise InvalidArgumentError(f"K and N must be positive, got a {da.shape} and b {db.shape}")
        self.dtype = da.dtype
        self.first = da
        if out is None and self.allocate:
            out = da.empty((rows, N), self.dtype.out)
        if out is None:
            out_ptr, order_d = _FRESH, ("r", N)
        else:
            dd = DeviceArray(out)
            if dd.shape != (rows, N) or dd.dtype is not self.dtype.out:
                raise InvalidArgumentError(f"out must be a ({rows}, {N}) {self.dtype.out.key} array")
            if dd.overlaps(da) or dd.overlaps(db):
                raise InvalidArgumentError("out overlaps an input: pass a separate out array")
            out_ptr, order_d = dd.ptr, _matrix_order(dd.shape, dd.strides)
            if order_d is None or order_d[0] != "r":
                raise InvalidArgumentError("out must be row-major with unit column stride")
        order_a = _matrix_order(da.shape, da.strides)
        order_b = _matrix_order(db.shape[1:], db.strides[1:])
        if order_a is None or order_b is None:
            raise InvalidArgumentError("a and each matrix of b must have a unit stride along one dimension "
                                       "(call .contiguous() first)")
        if groups > 1 and db.strides[0] <= 0:
            raise InvalidArgumentError("b's matrices must not overlap (a positive stride between groups)")
        starts = np.concatenate(([0], ends[:-1]))
        counts = ends - starts
        item, out_item = self.dtype.nbytes, self.dtype.out.nbytes
        sizes = np.stack([counts, np.full(groups, N), np.full(groups, K)], axis=1).astype(np.int64)
        self._layout([order_a], [order_b])
        row_step = order_a[1] if order_a[0] == "r" else 1
        self._table(sizes, np.full(groups, order_a[1]), np.full(groups, order_b[1]), np.full(groups, order_d[1]),
                    da.ptr + starts * row_step * item, db.ptr + np.arange(groups, dtype=np.int64) * db.strides[0] * item,
                    out_ptr + starts * order_d[1] * out_item)
        self.out, self.rows, self.end = out, rows, int(ends[-1]) if groups else 0

    def _layout(self, orders_a, orders_b):
        if any(o is None for o in orders_a + orders_b):
            raise InvalidArgumentError("every matrix must have a unit stride along one dimension (call .contiguous())")
        if len({o[0] for o in orders_a}) > 1 or len({o[0] for o in orders_b}) > 1:
            raise InvalidArgumentError("every matrix of a (and every one of b) must share one layout")
        self.layout = Layout.parse(orders_a[0][0] + orders_b[0][0] + "r")

    def _table(self, sizes, lda, ldb, ldd, pa, pb, pd):
        groups = sizes.shape[0]
        words = np.zeros((groups, _WORDS), dtype=np.int64)
        words[:, 0:3] = sizes
        words[:, 3], words[:, 4], words[:, 5] = lda, ldb, ldd
        words[:, 6] = np.asarray(pa, dtype=np.uint64).view(np.int64)
        words[:, 7] = np.asarray(pb, dtype=np.uint64).view(np.int64)
        words[:, 8] = np.asarray(pd, dtype=np.uint64).view(np.int64)
        words[sizes[:, 0] == 0, 3:9] = 0  # empty groups: skipped, nothing to point at
        self.words = words
        self.groups = groups
        big = sizes.max(axis=0)
        self.problem = GemmProblem(max(int(big[0]), 1), int(big[1]), int(big[2]), self.dtype, self.layout,
                                   alpha=1.0)

    def table(self):
        return ctypes.cast(self.words.ctypes.data, ctypes.POINTER(_ffi.TdGemmGroup))


def _dispatcher(target):
    return cached_dispatcher("gemm", target or selection.device_target())


def grouped_gemm(a, b, offsets=None, *, out=None, alpha=1.0, bias=None, activation=None, out_dtype=None,
                 scale_a=None, scale_b=None, kernel=None, target=None):
    """td.grouped_gemm on CUDA arrays (see its docstring). Offsets on the device are read back to
    the host once (a copy that waits for the work queued before it); the call then runs on the
    caller's current stream and returns without waiting."""
    factor = _unsupported_extras(bias, activation, out_dtype, scale_a, scale_b)
    call = _Call(a, b, offsets, out, _alpha(alpha) * factor)
    problem = GemmProblem(call.problem.M, call.problem.N, call.problem.K, call.dtype, call.layout,
                          alpha=call.alpha)
    d = _dispatcher(target)
    if d.on_host:
        raise UnsupportedProblemError("GPU arrays need a GPU target (target='sm_90a')")
    name = None if kernel is None else (kernel if isinstance(kernel, str) else getattr(kernel, "name", None))
    if not call.listed and call.end < call.rows:
        tail = call.out[call.end:]
        tail.zero_() if is_torch(tail) else tail.fill(0)
    status = d.lib.td_gemm_grouped_run(ctypes.byref(problem.to_c()), None if name is None else name.encode(),
                                       call.table(), call.groups, ctypes.c_void_p(call.first.stream()), None)
    if kernel is None:
        selection.warn_messages(d.lib)
    d.lib.check(status)
    return call.outs if call.listed else call.out


def grouped_gemm_select(a, b, offsets=None, *, out=None, target=None) -> str:
    """The grouped kernel td.grouped_gemm(a, b, offsets, out=out) launches once for every group, or
    "" where it runs each group as its own GEMM (no grouped kernel takes the call; host arrays,
    which run on the cpu target). Offsets on the device are read back to the host."""
    host = not (is_device_array(b) or (isinstance(b, (list, tuple)) and b and is_device_array(b[0])))
    if host:
        return ""
    call = _Call(a, b, offsets, out, 1.0, allocate=False)
    d = _dispatcher(target)
    buf = ctypes.create_string_buffer(_ffi.NAME_BUFFER)
    d.lib.check(d.lib.td_gemm_grouped_select(ctypes.byref(call.problem.to_c()), call.table(), call.groups, buf,
                                             _ffi.NAME_BUFFER))
    return buf.value.decode()


def _offsets(offsets, groups: int, rows: int) -> np.ndarray:
    """Cumulative row ends, checked: integers, one per group, non-decreasing, within [0, rows]."""
    x = np.asarray(offsets)
    if x.ndim != 1 or x.dtype.kind not in "iu":
        raise InvalidArgumentError(f"offsets must be a 1-D integer array, got {x.dtype} of shape {x.shape}")
    if x.shape[0] != groups:
        raise InvalidArgumentError(f"offsets has {x.shape[0]} values, b has {groups} groups")
    x = x.astype(np.int64)
    if groups and x[0] < 0:
        raise InvalidArgumentError(f"offsets must not be negative (offsets[0] = {x[0]})")
    bad = np.nonzero(np.diff(x) < 0)[0]
    if bad.size:
        i = int(bad[0]) + 1
        raise InvalidArgumentError(f"offsets must be non-decreasing (offsets[{i}] = {x[i]} < offsets[{i - 1}] = {x[i - 1]})")
    if groups and x[-1] > rows:
        raise InvalidArgumentError(f"offsets[-1] = {x[-1]} is beyond the {rows} rows of a")
    return x
