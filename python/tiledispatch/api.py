"""`td.gemm` and `td.conv` on numpy arrays (the host path)."""
from __future__ import annotations

import ctypes
import dataclasses
import math
import os

import numpy as np

from . import _autotune, _ffi, gemm_ex, selection
from .arrays import (_TORCH_DTYPES, DeviceArray, dtype_of, is_device_array, is_torch, matrix_order, numpy_dtype,
                     torch_dtype)
from .arrays import ld_in_order as _ld_in_order
from .codegen import Direction, Layout
from .dispatcher import cached_dispatcher
from .errors import InvalidArgumentError, UnsupportedProblemError
from .problems import INT32_MAX, ConvProblem, GemmProblem, _alpha, _integer, _spatial


_LAYOUT = {(True, False): Layout.RCR, (True, True): Layout.RRR, (False, True): Layout.CRR, (False, False): Layout.CCR}
class _TorchOut(dict):
    """DType -> the torch element type of its output, looked up once."""

    def __missing__(self, dtype):
        value = self[dtype] = torch_dtype(dtype.out)
        return value


_TORCH_OUT = _TorchOut()


dispatcher = cached_dispatcher  # a Dispatcher per (op, target), made once


def _as_order(matrix: np.ndarray, order: str) -> tuple[np.ndarray, int]:
    """The matrix in row ('r') or column ('c') order, copied only when needed, with its ld."""
    ld = _ld_in_order(matrix, order)
    if ld is not None:
        return matrix, ld
    converted = np.ascontiguousarray(matrix) if order == "r" else np.asfortranarray(matrix)
    return converted, _ld_in_order(converted, order)


def _no_broadcast(name: str, array) -> None:
    """Refuses a host array with a zero stride along a dimension longer than 1 (np.broadcast_to):
    it would be copied into a full array, possibly huge, without the caller asking."""
    if isinstance(array, np.ndarray) and any(n > 1 and st == 0 for n, st in zip(array.shape, array.strides)):
        raise InvalidArgumentError(f"{name} has a zero stride (a broadcast array, shape {array.shape}): "
                                   "materialize it first with np.ascontiguousarray if that is intended")


def _check_out(out: np.ndarray, inputs: dict) -> None:
    """A host out array: writeable and sharing no memory with an input (no in-place runs)."""
    if not out.flags.writeable:
        raise InvalidArgumentError("out is read-only: pass a writeable array")
    for name, array in inputs.items():
        if isinstance(array, np.ndarray) and np.may_share_memory(out, array) and np.shares_memory(out, array):
            raise InvalidArgumentError(f"out overlaps {name}: in-place is not supported, pass a separate out array")


def _layout(layout) -> Layout:
    """A layout argument ('rcr' or a Layout) as a Layout."""
    if isinstance(layout, str):
        return Layout.parse(layout)
    if isinstance(layout, Layout):
        return layout
    raise InvalidArgumentError(f"layout must be one of rcr, rrr, crr, ccr, got {layout!r}")


def _host_output(shape, dtype) -> np.ndarray:
    """The output array of a host call: refused, not attempted, where it would take more than
    half the memory available now (a problem that size is a mistake far more often than a
    wish); a MemoryError becomes an InvalidArgumentError."""
    nbytes = int(np.dtype(dtype).itemsize) * math.prod(int(v) for v in shape)
    try:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        available = 0
    if available and nbytes > available // 2:
        raise InvalidArgumentError(f"the output {tuple(shape)} needs {nbytes} bytes, more than half the "
                                   f"{available} bytes of memory available")
    try:
        return np.empty(shape, dtype=dtype)
    except MemoryError:
        raise InvalidArgumentError(f"the output {tuple(shape)} needs {nbytes} bytes: out of host memory") from None


def _gemm_device(a, b, *, layout, out, kernel, alpha, target):
    """td.gemm on CUDA arrays: no copy, the caller's current stream, an output of the
    caller's kind."""
    da, db = DeviceArray(a), DeviceArray(b)
    if len(da.shape) != 2 or len(db.shape) != 2 or da.shape[1] != db.shape[0]:
        raise InvalidArgumentError(f"gemm takes (M, K) and (K, N) matrices, got {da.shape} and {db.shape}")
    if da.dtype is not db.dtype:
        raise TypeError(f"A and B must share an element type, got {da.dtype.key} and {db.dtype.key}")
    dtype = da.dtype
    (M, K), N = da.shape, db.shape[1]
    d = dispatcher("gemm", target or _device_target())
    oa, ob = da.matrix_order(), db.matrix_order()
    if oa is None or ob is None:
        raise InvalidArgumentError("A and B must each have a unit stride along one dimension "
                                   "(call .contiguous() first)")
    lay = Layout.parse(oa[0] + ob[0] + "r")
    if layout is not None and _layout(layout) is not lay:
        raise InvalidArgumentError(f"the arrays are laid out as {lay.key}, not {layout}: transpose or copy them")
    if out is None:
        out = da.empty((M, N), dtype.out)
    dc = DeviceArray(out)
    if dc.shape != (M, N) or dc.dtype is not dtype.out:
        raise InvalidArgumentError(f"out must be a ({M}, {N}) {dtype.out.key} array")
    oc = dc.matrix_order()
    if oc is None or oc[0] != "r":
        raise InvalidArgumentError("out must be row-major with unit column stride")
    if dc.overlaps(da) or dc.overlaps(db):
        raise InvalidArgumentError("out overlaps an input: in-place is not supported, pass a separate out array")
    problem = GemmProblem(M, N, K, dtype, lay, oa[1], ob[1], oc[1], alpha)
    kernel = _autotune.kernel_for(d, problem, (a, b, out), kernel)
    d.run(problem, da.ptr, db.ptr, dc.ptr, kernel=kernel, stream=da.stream(), timed=False)
    return out


_TORCH_FAST: dict = {}
_FAST: dict = {}    # (the tensors' metadata, alpha) -> the cached part of a _torch_fast call, or False
_TENSOR = None      # torch.Tensor, once a caller has passed one


def _strided_order(strides, rows: int, cols: int):
    """(row_major, ld) of a (rows x cols) matrix with element strides, or None."""
    s0, s1 = strides
    if s1 == 1 and s0 >= cols:
        return True, s0
    if s0 == 1 and s1 >= rows:
        return False, s1
    return None


def _torch_fast(a, b, out, alpha):
    """td.gemm on two torch CUDA tensors with the dispatcher's choice: the lean path that
    keeps the host overhead near the cost of one ctypes call. Everything decided from the
    tensors' metadata (checks, layout, the C problem struct) is cached under that metadata,
    so a repeated call reads a few attributes, looks up one dict and calls C
    (td_gemm_launch with no kernel name: the library selects, its rank cache answering a
    problem it has ranked under the same tuning environment). None when the path does not
    apply (the general path then runs). The key is flat (nested tuples hash slower)."""
    key = (a.dtype, a.shape, a.stride(), b.dtype, b.shape, b.stride(), a.get_device(), b.get_device(), alpha,
           _autotune.mode())  # autotuning on: its winners' entries apart
    if out is not None:
        key += (out.dtype, out.shape, out.stride(), out.get_device())
    entry = _FAST.get(key)
    fresh = entry is None
    if fresh:
        if len(_FAST) > 4096:
            _FAST.clear()
        entry = _FAST[key] = _fast_entry(a, b, out, alpha) or False
    if entry is False:
        return None
    problem, shape, out_dtype, launch, raw_stream, check, dev, lib, pick = entry
    if out is None:  # new_empty: on a's device, and without dtype faster than torch.empty
        out = a.new_empty(shape) if out_dtype is None else a.new_empty(shape, dtype=out_dtype)
    kernel = pick.kernel if pick.ready else pick.resolve(a, b, out)  # autotune, pick log, record
    status = launch(problem, kernel, a.data_ptr(), b.data_ptr(), out.data_ptr(), raw_stream(dev))
    if fresh:  # the first call of this metadata: the library's messages about the tuning tables
        selection.warn_messages(lib, stacklevel=4)
    if status:
        check(status)
    return out


def _fast_entry(a, b, out, alpha):
    """The cached part of one _torch_fast call, or None where the lean path does not apply."""
    table = _TORCH_FAST.get("dtypes")
    if table is None:
        import torch
        table = _TORCH_FAST["dtypes"] = {getattr(torch, n.split(".")[1]): d for n, d in _TORCH_DTYPES.items()}
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _TORCH_FAST["raw_stream"] = raw or (lambda index: torch.cuda.current_stream(index).cuda_stream)
    dtype = table.get(a.dtype)
    dev = a.get_device()
    if dtype is None or b.dtype != a.dtype or dev < 0 or b.get_device() != dev or a.dim() != 2 or b.dim() != 2:
        return None
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        return None
    a_order, b_order = _strided_order(a.stride(), M, K), _strided_order(b.stride(), K, N)
    if a_order is None or b_order is None:
        return None
    (a_row, lda), (b_row, ldb) = a_order, b_order
    out_dtype = _TORCH_OUT[dtype]
    ldc = N
    if out is not None:
        if tuple(out.shape) != (M, N) or out.dtype != out_dtype or out.stride(1) != 1 or out.get_device() != dev:
            return None
        ldc = out.stride(0)
    d = dispatcher("gemm", _device_target())
    layout = _LAYOUT[(a_row, b_row)]
    struct = _ffi.TdGemmProblem(M, N, K, dtype.code, layout.code, lda, ldb, ldc, alpha, 0, 0, 0)
    pick = _autotune.FastPick(d, GemmProblem(M, N, K, dtype, layout, lda, ldb, ldc, alpha), struct)
    return (ctypes.addressof(struct), (M, N), None if out_dtype == a.dtype else out_dtype,
            d.lib.td_gemm_launch, _TORCH_FAST["raw_stream"], d.lib.check, dev, d.lib, pick)


def _ndim(x) -> int:
    """Dimensions of an array of any kind (a bare __cuda_array_interface__ object has no ndim)."""
    ndim = getattr(x, "ndim", None)
    if ndim is None and hasattr(x, "__cuda_array_interface__"):
        return len(x.__cuda_array_interface__["shape"])
    return 2 if ndim is None else ndim


_device_target = selection.device_target


def _torch_ops():
    """The torch custom ops (tiledispatch._torch_ops imports torch: loaded on first use, by
    a caller that passed torch tensors)."""
    from . import _torch_ops
    return _torch_ops


def _needs_autograd(*tensors) -> bool:
    """True where a torch call must go through the custom op for autograd: grad mode on and
    an input requiring grad."""
    if not any(t.requires_grad for t in tensors):
        return False
    import torch  # the caller's tensors are torch's: already imported
    return torch.is_grad_enabled()


def gemm(a, b, *, layout=None, out=None, kernel=None, alpha: float = 1.0, target=None, c=None, beta=None,
         bias=None, bias_along="n", activation=None, aux=None, return_aux=False, row_scale=None, col_scale=None,
         scale_a=None, scale_b=None, out_dtype=None):
    """C = alpha * A @ B through the dispatcher.

    On CUDA arrays (torch, cupy, numba) the kernel runs on the caller's current stream
    with no copy and returns an array of the caller's kind; numpy arrays take the host
    path (copied to the GPU and back on a GPU target). Two torch tensors (without layout,
    out, kernel, target) go through torch.ops.tiledispatch.gemm, autograd included; CUDA
    tensors that need no gradient run the op's implementation directly (the same kernel,
    without the custom op's dispatch cost). The result of torch tensors is a torch tensor.

    a (M x K) and b (K x N) share one element type: float32, float16, ml_dtypes.bfloat16,
    float8_e4m3fn or float8_e5m2 (output: float32, float16, else bfloat16). Row- or
    column-major inputs, padded leading dimensions included, are used in place; `layout`
    ('rcr', 'rrr', 'crr', 'ccr') forces one, copying what does not match. `out`, when
    given, must be a writeable row-major (M x N) array of the output type sharing no memory
    with a or b (in-place is not supported). `kernel` runs a named one. M, N and K must be
    positive. Broadcast numpy inputs (a zero stride, np.broadcast_to) are refused rather than
    silently copied: pass np.ascontiguousarray(x) to materialize them.

    Fused epilogue, batches and fp8 scales (numpy arrays: the cpu target's generic kernels; CUDA
    arrays: the sm_90a CUTLASS fused variants, used in place on the caller's current stream,
    with C and aux laid out as out, contiguous vectors, fp8 row-wise scales only):
    D = act(alpha * (A @ B) * row_scale *
    col_scale + beta * C + bias). c (broadcastable to D, D's type; c=out accumulates in place),
    beta (default 1 with c), bias (D's type; bias_along "n": N values, "m": M values),
    activation ("relu", "gelu", "gelu_tanh", "silu"), aux (an array for the pre-activation) or
    return_aux=True (returns (D, aux)), row_scale (M) and col_scale (N) float32, out_dtype
    (fp32, fp16, bf16). 3-D a and/or b: a batch (numpy.matmul semantics; a 2-D operand or a
    batch of 1 is shared by the batch). scale_a / scale_b (fp8): scalars (per tensor),
    row-wise (M,) and (N,), or block-wise (M, ceil(K/128)) and (ceil(K/128), ceil(N/128)).
    """
    global _TENSOR
    if c is not None or beta is not None or bias is not None or activation is not None or aux is not None \
            or return_aux is not False or row_scale is not None or col_scale is not None or scale_a is not None \
            or scale_b is not None or out_dtype is not None or _ndim(a) > 2 or _ndim(b) > 2:
        return gemm_ex.gemm(a, b, layout=layout, out=out, kernel=kernel, alpha=alpha, target=target, c=c, beta=beta,
                            bias=bias, bias_along=bias_along, activation=activation, aux=aux, return_aux=return_aux,
                            row_scale=row_scale, col_scale=col_scale, scale_a=scale_a, scale_b=scale_b,
                            out_dtype=out_dtype)
    alpha = _alpha(alpha)
    if _TENSOR is None and type(a).__name__ == "Tensor" and is_torch(a):
        _TENSOR = type(a)  # torch.Tensor, found without importing torch
    if type(a) is _TENSOR and type(b) is _TENSOR and kernel is None and layout is None and target is None:
        if a.is_cuda and (out is not None or not _needs_autograd(a, b)):
            result = _torch_fast(a, b, out, alpha)
            if result is not None:
                return result
        if out is None:
            return _torch_ops().gemm(a, b, alpha)
    if is_device_array(a) or is_device_array(b):
        return _gemm_device(a, b, layout=layout, out=out, kernel=kernel, alpha=alpha, target=target)
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise InvalidArgumentError(f"gemm takes two matrices, got shapes {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise InvalidArgumentError(f"inner dimensions differ: A is {a.shape}, B is {b.shape}")
    if 0 in a.shape or 0 in b.shape:
        raise InvalidArgumentError(f"M, N and K must be positive, got A {a.shape} and B {b.shape}")
    _no_broadcast("a", a)
    _no_broadcast("b", b)
    dtype = dtype_of(a)
    if dtype_of(b) is not dtype:
        raise TypeError(f"A and B must share an element type, got {a.dtype} and {b.dtype}")
    M, K = a.shape
    N = b.shape[1]
    d = dispatcher("gemm", target)

    if layout is not None:
        candidates = [_layout(layout)]
    else:
        found_a, found_b = matrix_order(a), matrix_order(b)
        natural = Layout.parse((found_a[0] if found_a else "r") + (found_b[0] if found_b else "c") + "r")
        built = {k.layout for k in d.kernels if k.dtype is dtype}
        candidates = [natural] + [lay for lay in Layout if lay is not natural and lay in built]
    if kernel is not None:
        name = kernel if isinstance(kernel, str) else getattr(kernel, "name", None)
        if not isinstance(name, str):
            raise InvalidArgumentError(f"kernel must be a kernel name (a str) or a kernel config, got {kernel!r}")
        named = [k for k in d.kernels if k.name == name]
        if named and layout is None:
            candidates = [named[0].layout]

    out_dtype = numpy_dtype(dtype.out)
    if out is None:
        out = np.empty((M, N), dtype=out_dtype)
    elif not isinstance(out, np.ndarray) or out.shape != (M, N) or out.dtype != out_dtype:
        raise InvalidArgumentError(f"out must be a ({M}, {N}) {out_dtype} numpy array, "
                                   f"got {getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)}")
    else:
        _check_out(out, {"a": a, "b": b})
    order_c = matrix_order(out)
    if order_c is None or order_c[0] != "r":
        raise InvalidArgumentError("out must be row-major with unit column stride")

    last_error = None
    for lay in candidates:
        a_use, lda = _as_order(a, "r" if lay.a_row else "c")
        b_use, ldb = _as_order(b, "r" if lay.b_row else "c")
        problem = GemmProblem(M, N, K, dtype, lay, lda, ldb, order_c[1], alpha)
        if kernel is None and not d.is_supported(problem):
            detail = selection.unsupported_detail("gemm", d.target, problem)
            last_error = UnsupportedProblemError(
                f"no {dtype.key} {lay.key} gemm kernel for target {d.target} supports {M}x{N}x{K}"
                + (f": {detail}" if detail else ""))
            continue
        d.run(problem, a_use, b_use, out, kernel=_autotune.kernel_for(d, problem, (a_use, b_use, out), kernel))
        return out
    raise last_error


def _check_channels_last(name: str, array, shape: tuple):
    if tuple(array.shape) != tuple(shape):
        raise InvalidArgumentError(f"{name} must have shape {tuple(shape)}, got {tuple(array.shape)}")
    if not is_device_array(array):
        _no_broadcast(name, array)
        return np.ascontiguousarray(array)
    d = DeviceArray(array)
    expect, acc = [], 1
    for size in reversed(d.shape):
        expect.insert(0, acc)
        acc *= size
    if any(size > 1 and stride != want for size, stride, want in zip(d.shape, d.strides, expect)):
        raise InvalidArgumentError(
            f"{name} must be contiguous channels-last {tuple(shape)} (strides {d.strides}): for torch, "
            "t.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1) maps (N, C, H, W) onto it")
    return array


def conv(x, w, *, stride=1, padding=0, dilation=1, groups: int = 1, direction="fwd",
         input_size=None, filter_size=None, out=None, kernel=None, target=None, split_k: int = 0):
    """Grouped convolution, channels-last, through the dispatcher.

    fwd:        conv(x, w)   x (N, *spatial, G*C), w (G*K, *filter, C) -> y (N, *out, G*K)
    bwd_data:   conv(dy, w, direction="bwd_data")   -> dx (N, *input_size, G*C)
    bwd_weight: conv(x, dy, direction="bwd_weight") -> dw (G*K, *filter_size, C)
    input_size / filter_size default to the sizes implied by the other tensors.
    numpy arrays run through the host path (copied to the device and back on a GPU
    target); CUDA arrays of torch/cupy/numba run in place on the caller's current stream
    and the result is an array of the same kind. Two torch tensors (without out, kernel,
    target, split_k) go through the torch.ops.tiledispatch conv ops, autograd included; the
    result is the channels-last view of a new tensor. A torch tensor in channels_last memory
    format (N, C, H, W), permuted to (N, H, W, C), is exactly this layout (no copy); its
    weight (G*K, C, Y, X) likewise, permuted to (G*K, Y, X, C).
    split_k (bwd_weight on kernels with a batch split, sm_90a `..._s<max>`): the number of
    batch slices, at most the kernel's maximum and the batch (0: the kernel's choice).
    stride, padding, dilation, groups and split_k are Python or numpy integers (or tuples of
    them) within the C int range; anything else raises InvalidArgumentError. A numpy `out`
    must be writeable and share no memory with the inputs (in-place is not supported).
    Broadcast numpy inputs (a zero stride, np.broadcast_to) are refused rather than silently
    copied: pass np.ascontiguousarray(x) to materialize them.
    """
    if isinstance(split_k, (int, np.integer)) and split_k < 0:
        raise InvalidArgumentError(f"split_k must not be negative, got {split_k}")
    split_k = _integer(split_k, "split_k", 0, INT32_MAX)
    if isinstance(direction, str):
        direction = Direction.parse(direction)
    if not isinstance(direction, Direction):
        raise InvalidArgumentError(f"unknown direction {direction!r} (expected fwd, bwd_data or bwd_weight)")
    if is_torch(x) and is_torch(w) and out is None and kernel is None and target is None and not split_k:
        return _torch_ops().conv_channels_last(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups,
                                               direction=direction, input_size=input_size, filter_size=filter_size)
    on_device = is_device_array(x) or is_device_array(w)
    if on_device:
        if not (is_device_array(x) and is_device_array(w)) or (out is not None and not is_device_array(out)):
            raise InvalidArgumentError("mixing host (numpy) and device arrays in one call")
        dtype = DeviceArray(x).dtype
        if DeviceArray(w).dtype is not dtype:
            raise TypeError(f"both tensors must share an element type, got {dtype.key} and {DeviceArray(w).dtype.key}")
    else:
        x, w = np.asarray(x), np.asarray(w)
        dtype = dtype_of(x)
        if dtype_of(w) is not dtype:
            raise TypeError(f"both tensors must share an element type, got {x.dtype} and {w.dtype}")
    ndim = len(x.shape) - 2
    if ndim not in (1, 2, 3) or len(w.shape) != len(x.shape):
        raise InvalidArgumentError(
            f"expected tensors of rank 3, 4 or 5 (N, *spatial, channels), got {tuple(x.shape)} and {tuple(w.shape)}")
    G = _integer(groups, "groups", 1, INT32_MAX)

    def per_group(total, what):
        if total % G:
            raise InvalidArgumentError(f"{what} {total} is not divisible by groups={G}")
        return total // G

    s, p, dl = (_spatial(stride, ndim, "stride"), _spatial(padding, ndim, "padding", low=0),
                _spatial(dilation, ndim, "dilation"))
    if direction is Direction.FWD:
        N, C, K = x.shape[0], per_group(x.shape[-1], "input channels"), per_group(w.shape[0], "filters")
        problem = ConvProblem(N, G, C, K, x.shape[1:-1], w.shape[1:-1], s, p, dl, direction, dtype)
        tensors = [_check_channels_last("x", x, problem.input_shape),
                   _check_channels_last("w", w, problem.weight_shape), None]
        slot = 2
    elif direction is Direction.BWD_DATA:
        dy = x
        N, K, C = dy.shape[0], per_group(dy.shape[-1], "output channels"), w.shape[-1]
        fil = w.shape[1:-1]
        if input_size is None:
            input_size = tuple((o - 1) * si - 2 * pi + di * (f - 1) + 1
                               for o, si, pi, di, f in zip(dy.shape[1:-1], s, p, dl, fil))
        problem = ConvProblem(N, G, C, K, input_size, fil, s, p, dl, direction, dtype)
        tensors = [None, _check_channels_last("w", w, problem.weight_shape),
                   _check_channels_last("dy", dy, problem.output_shape)]
        slot = 0
    else:
        dy = w
        N, C, K = x.shape[0], per_group(x.shape[-1], "input channels"), per_group(dy.shape[-1], "output channels")
        if filter_size is None:
            filter_size = tuple((i + 2 * pi - 1 - (o - 1) * si) // di + 1
                                for i, o, si, pi, di in zip(x.shape[1:-1], dy.shape[1:-1], s, p, dl))
        problem = ConvProblem(N, G, C, K, x.shape[1:-1], filter_size, s, p, dl, direction, dtype)
        if problem.output_size != tuple(dy.shape[1:-1]):
            raise InvalidArgumentError(
                f"dy has spatial size {tuple(dy.shape[1:-1])}, the problem gives {problem.output_size}: "
                "pass filter_size")
        tensors = [_check_channels_last("x", x, problem.input_shape), None,
                   _check_channels_last("dy", dy, problem.output_shape)]
        slot = 1
    if any(v <= 0 for v in problem.output_size):
        raise InvalidArgumentError(f"the output would be empty: output size {problem.output_size}")
    if split_k:
        problem = dataclasses.replace(problem, split_k=int(split_k))
    shape = (problem.input_shape, problem.weight_shape, problem.output_shape)[slot]
    if on_device:
        if out is None:
            out = DeviceArray(x).empty(shape, dtype.out)
        elif DeviceArray(out).dtype is not dtype.out:
            raise InvalidArgumentError(f"out must be a contiguous {shape} {dtype.out.key} array")
        tensors[slot] = _check_channels_last("out", out, shape)
        d = dispatcher("conv", target or _device_target("conv"))
        d.run(problem, *tensors, kernel=_autotune.kernel_for(d, problem, tensors, kernel), timed=False)
        return out
    out_dtype = numpy_dtype(dtype.out)
    if out is None:
        out = _host_output(shape, out_dtype)
    elif not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != out_dtype \
            or not out.flags.c_contiguous:
        raise InvalidArgumentError(f"out must be a contiguous {shape} {out_dtype} array")
    else:
        _check_out(out, {"x": x, "w": w})
    tensors[slot] = out
    d = dispatcher("conv", target)
    d.run(problem, *tensors, kernel=_autotune.kernel_for(d, problem, tensors, kernel))
    return out
