"""The GEMM features beyond C = alpha * A @ B: fused epilogues, batches, fp8 row-wise and
block-wise scales (`td.gemm`'s extra arguments) and grouped GEMM (`td.grouped_gemm`). On numpy
arrays the cpu kernels built with `fusion: generic` implement them; on CUDA arrays (torch,
cupy, numba) the sm_90a CUTLASS variants built with a fused epilogue (`fusion`: epilogue or an
activation) and the plain ones for a batch. Every other kernel refuses these problems
(KernelInfo.features), so none is ever silently ignored.

D = act(alpha * (A @ B) * row_scale[i] * col_scale[j] + beta * C + bias), in that order, in
fp32; the order and the element types are in docs/abi.md.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import _ffi, _gemm_plans, selection
from .grouped_device import _offsets
from .grouped_device import grouped_gemm as grouped_gemm_device
from .arrays import DeviceArray, dtype_of, is_device_array, ld_in_order, numpy_dtype, pointer, torch_dtype
from .codegen import Activation, Bias, DType, Layout, OutDType
from .dispatcher import Dispatcher, cached_dispatcher
from .errors import InvalidArgumentError, UnsupportedProblemError
from .problems import GemmProblem, _alpha

SCALE_BLOCK = 128  # block-wise scales: 1 x 128 blocks of A, 128 x 128 blocks of B
OUT_TYPES = (DType.FP32, DType.FP16, DType.BF16)
FP8_OUT_TYPES = (DType.FP8_E4M3, DType.FP8_E5M2)  # for fp8 (OCP) inputs: saturating stores


def _dispatcher(target) -> Dispatcher:
    """The gemm Dispatcher of a target (None: this machine's default), made once."""
    return cached_dispatcher("gemm", target)


def _out_type(out_dtype, dtype: DType) -> tuple[OutDType, DType]:
    """(the problem's out_dtype, the DType of D) from td.gemm's out_dtype argument: fp32, fp16
    or bf16 for any input type, and fp8_e4m3 or fp8_e5m2 for fp8 inputs."""
    if out_dtype is None:
        return OutDType.DEFAULT, dtype.out
    allowed = OUT_TYPES + (FP8_OUT_TYPES if dtype in FP8_OUT_TYPES else ())
    if isinstance(out_dtype, str):
        try:
            key = DType.parse(out_dtype)
        except ValueError:
            key = None
    else:
        try:
            key = next((d for d in allowed if np.dtype(out_dtype) == numpy_dtype(d)), None)
        except TypeError:
            key = None
    if key not in allowed:
        names = ", ".join(d.key for d in allowed[:-1]) + " or " + allowed[-1].key
        fp8 = "" if dtype in FP8_OUT_TYPES else " (fp8_e4m3 and fp8_e5m2 take fp8 inputs)"
        raise InvalidArgumentError(f"out_dtype must be {names} (or their numpy types) for {dtype.key} inputs{fp8}, "
                                   f"got {out_dtype!r}")
    return OutDType.parse(key.key), key


def _matrices(x: np.ndarray, order: str):
    """(array, ld, batch stride) of a 2-D or 3-D operand read in row ('r') or column ('c') order
    per matrix, copied only where its strides do not allow that; batch stride 0 where the
    operand is 2-D or its batch dimension is 1 (broadcast)."""
    item = x.itemsize
    if x.ndim == 2:
        ld = ld_in_order(x, order)
        if ld is None:
            x = np.ascontiguousarray(x) if order == "r" else np.asfortranarray(x)
            ld = ld_in_order(x, order)
        return x, ld, 0
    ld = ld_in_order(x[0], order)
    s0 = x.strides[0]
    if ld is None or (x.shape[0] > 1 and (s0 < 0 or s0 % item)):
        x = np.ascontiguousarray(x) if order == "r" else np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
        ld = ld_in_order(x[0], order)
        s0 = x.strides[0]
    return x, ld, (s0 // item if x.shape[0] > 1 else 0)


def _no_matrix_broadcast(name: str, x: np.ndarray) -> None:
    """A zero stride is allowed along the batch dimension only (A or B shared by the batch)."""
    dims = x.shape[-2:], x.strides[-2:]
    if any(n > 1 and st == 0 for n, st in zip(*dims)):
        raise InvalidArgumentError(f"{name} has a zero stride inside its matrices (a broadcast array, shape "
                                   f"{x.shape}): materialize it first with np.ascontiguousarray if that is intended")


def _vector(name: str, value, length: int, what: str, dtype=None) -> np.ndarray:
    """A 1-D contiguous vector of `length` values (float32 unless dtype is given)."""
    x = np.asarray(value)
    if x.ndim == 2 and 1 in x.shape:
        x = x.reshape(-1)
    if x.ndim != 1 or x.shape[0] != length:
        raise InvalidArgumentError(f"{name} has shape {x.shape}; it needs {length} values ({what})")
    if dtype is None:
        if x.dtype.kind not in "fiu":
            raise TypeError(f"{name} must hold real numbers, got {x.dtype}")
        return np.ascontiguousarray(x, dtype=np.float32)
    if x.dtype != dtype:
        raise TypeError(f"{name} holds {x.dtype}; it must be {dtype} (the output type)")
    return np.ascontiguousarray(x)


def _overlaps(x, y) -> bool:
    return isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.may_share_memory(x, y) \
        and np.shares_memory(x, y)


def _output(name: str, given, shape, dtype: DType, reads: dict) -> np.ndarray:
    """A written array (out or aux): given (checked) or new; row-major matrices."""
    want = numpy_dtype(dtype)
    if given is None:
        try:
            return np.empty(shape, dtype=want)
        except MemoryError:
            raise InvalidArgumentError(f"{name} {tuple(shape)} {want}: out of host memory") from None
    if not isinstance(given, np.ndarray) or given.shape != tuple(shape) or given.dtype != want:
        raise InvalidArgumentError(f"{name} must be a {tuple(shape)} {want} numpy array, got "
                                   f"{getattr(given, 'shape', None)} {getattr(given, 'dtype', type(given).__name__)}")
    if not given.flags.writeable:
        raise InvalidArgumentError(f"{name} is read-only: pass a writeable array")
    for other, array in reads.items():
        if _overlaps(given, array):
            raise InvalidArgumentError(f"{name} overlaps {other}: pass a separate array")
    return given


def _like(name: str, given, out: np.ndarray) -> np.ndarray:
    """An array laid out as `out` (the ABI reads C and writes aux with D's ldc and batch
    stride): `given` where it already is (or is out itself), else a copy broadcast to out's shape."""
    if given.shape == out.shape and given.strides == out.strides:
        return given
    copy = np.empty_like(out)
    try:
        copy[...] = given
    except ValueError:
        raise InvalidArgumentError(f"{name} of shape {given.shape} does not broadcast to the output {out.shape}") from None
    return copy


def _scales(scale_a, scale_b, M: int, N: int, K: int, batched: bool):
    """fp8 scales as (alpha factor, row scales, column scales, block scales (a, b) or None).
    Per-tensor: scalars; row-wise: scale_a (M,) or (M, 1) and scale_b (N,) or (1, N);
    block-wise (1x128 for A, 128x128 for B): scale_a (M, ceil(K/128)), scale_b (ceil(K/128), ceil(N/128))."""
    factor, rows, cols, block = 1.0, None, None, None
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    sa = None if scale_a is None else np.asarray(scale_a)
    sb = None if scale_b is None else np.asarray(scale_b)
    for name, s in (("scale_a", sa), ("scale_b", sb)):
        if s is not None and s.dtype.kind not in "fiu":
            raise TypeError(f"{name} must hold real numbers, got {s.dtype}")
    if sa is not None and sb is not None and sa.shape == (M, kb) and sb.shape == (kb, nb) \
            and not (sb.size == N and sb.shape in ((N,), (1, N)) and sa.size == M):
        if batched:
            raise InvalidArgumentError("block-wise scales take one GEMM, not a batch")
        return 1.0, None, None, (np.ascontiguousarray(sa, dtype=np.float32), np.ascontiguousarray(sb, dtype=np.float32))
    for name, s, length, what in (("scale_a", sa, M, "one per row of A (M)"), ("scale_b", sb, N, "one per column of B (N)")):
        if s is None:
            continue
        if s.size == 1 and s.ndim <= 2 and length != 1:
            factor *= _alpha(float(s.reshape(-1)[0]), name)
            continue
        if s.size != length or (s.ndim == 2 and s.shape not in ((length, 1), (1, length))) or s.ndim > 2:
            raise InvalidArgumentError(
                f"{name} has shape {s.shape}: a scalar (per tensor), {length} values ({what}, row-wise), or with the "
                f"other scale the block-wise shapes scale_a ({M}, {kb}) and scale_b ({kb}, {nb})")
        vector = np.ascontiguousarray(s.reshape(-1), dtype=np.float32)
        if name == "scale_a":
            rows = vector
        else:
            cols = vector
    return factor, rows, cols, block


def _gemm_shape(a: tuple, b: tuple):
    """(batched, batch, M, N, K) of 2-D or 3-D operand shapes, checked (numpy.matmul's batch rule)."""
    batched = len(a) == 3 or len(b) == 3
    batches = [x[0] for x in (a, b) if len(x) == 3]
    batch = max(batches) if batches else 1
    if any(n not in (1, batch) for n in batches):
        raise InvalidArgumentError(f"batch sizes differ: A is {a}, B is {b} (each must be {batch} or 1)")
    (M, K), (K2, N) = a[-2:], b[-2:]
    if K != K2:
        raise InvalidArgumentError(f"inner dimensions differ: A is {a}, B is {b}")
    if 0 in a or 0 in b:
        raise InvalidArgumentError(f"M, N, K and the batch must be positive, got A {a} and B {b}")
    return batched, batch, M, N, K


def _epilogue_args(alpha, beta, c, bias_along, activation, return_aux):
    """(alpha, beta, Activation): the scalar epilogue arguments checked, as both paths take them."""
    alpha = _alpha(alpha)
    if beta is not None and c is None:
        raise InvalidArgumentError("beta needs c (D = ... + beta * C)")
    beta = 0.0 if c is None else _alpha(1.0 if beta is None else beta, "beta")
    if bias_along not in ("n", "m"):
        raise InvalidArgumentError(f"bias_along must be 'n' (one value per column) or 'm' (per row), got {bias_along!r}")
    try:
        act = Activation.parse(activation) if isinstance(activation, str) else (
            Activation.NONE if activation is None else None)
    except ValueError as err:
        raise InvalidArgumentError(str(err)) from None
    if act is None:
        raise InvalidArgumentError(f"activation must be None, 'relu', 'gelu', 'gelu_tanh' or 'silu', got {activation!r}")
    if not isinstance(return_aux, (bool, np.bool_)):
        raise InvalidArgumentError(f"return_aux must be True or False, got {return_aux!r}")
    return alpha, beta, act


def gemm(a, b, *, layout=None, out=None, kernel=None, alpha=1.0, target=None, c=None, beta=None, bias=None,
         bias_along="n", activation=None, aux=None, return_aux=False, row_scale=None, col_scale=None,
         scale_a=None, scale_b=None, out_dtype=None):
    """td.gemm with its extra arguments (see td.gemm's docstring); numpy or CUDA arrays."""
    plan_key = None
    if _is_torch_cuda(a):  # a repeated call on torch tensors: the plan of its first call
        arrays = dict(a=a, b=b, out=out, c=c, bias=bias, aux=aux, row_scale=row_scale, col_scale=col_scale,
                      scale_a=scale_a, scale_b=scale_b)
        plan_key = _gemm_plans.key(arrays, (alpha, beta, bias_along, activation, return_aux, out_dtype, kernel,
                                            layout, target))
        plan = _gemm_plans.lookup(plan_key)
        if plan is not None:
            return _gemm_plans.execute(plan, arrays)
    if any(is_device_array(x) for x in (a, b, out, c, bias, aux, row_scale, col_scale, scale_a, scale_b)):
        return _gemm_device(a, b, layout=layout, out=out, kernel=kernel, alpha=alpha, target=target, c=c, beta=beta,
                            bias=bias, bias_along=bias_along, activation=activation, aux=aux, return_aux=return_aux,
                            row_scale=row_scale, col_scale=col_scale, scale_a=scale_a, scale_b=scale_b,
                            out_dtype=out_dtype, plan_key=plan_key)
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim not in (2, 3) or b.ndim not in (2, 3):
        raise InvalidArgumentError(f"gemm takes 2-D or 3-D (batched) operands, got shapes {a.shape} and {b.shape}")
    dtype = dtype_of(a)
    if dtype_of(b) is not dtype:
        raise TypeError(f"A and B must share an element type, got {a.dtype} and {b.dtype}")
    batched, batch, M, N, K = _gemm_shape(tuple(a.shape), tuple(b.shape))
    _no_matrix_broadcast("a", a)
    _no_matrix_broadcast("b", b)
    alpha, beta, act = _epilogue_args(alpha, beta, c, bias_along, activation, return_aux)
    out_code, out_type = _out_type(out_dtype, dtype)
    factor, rows_fp8, cols_fp8, block = _scales(scale_a, scale_b, M, N, K, batched)
    if rows_fp8 is not None and row_scale is not None or cols_fp8 is not None and col_scale is not None:
        raise InvalidArgumentError("give row-wise scales once: scale_a/scale_b or row_scale/col_scale, not both")
    rows = rows_fp8 if rows_fp8 is not None else (
        None if row_scale is None else _vector("row_scale", row_scale, M, "one per row of D (M)"))
    cols = cols_fp8 if cols_fp8 is not None else (
        None if col_scale is None else _vector("col_scale", col_scale, N, "one per column of D (N)"))
    out_np = numpy_dtype(out_type)
    bias_vec = None
    if bias is not None:
        length, what = (N, "bias_along='n': one per column (N)") if bias_along == "n" else (M, "bias_along='m': one per row (M)")
        bias_vec = _vector("bias", bias, length, what, out_np)
    shape = (batch, M, N) if batched else (M, N)
    inputs = {"a": a, "b": b}
    out = _output("out", out, shape, out_type, inputs)
    c_arr = None
    if c is not None:
        c = np.asarray(c)
        if c.dtype != out_np:
            raise TypeError(f"c holds {c.dtype}; it must be {out_np} (the output type)")
        if _overlaps(c, out) and not (c.shape == out.shape and c.strides == out.strides and pointer(c) == pointer(out)):
            raise InvalidArgumentError("c overlaps out without being out itself: in-place accumulation takes c=out")
        c_arr = _like("c", c, out)
    want_aux = aux is not None or bool(return_aux)
    aux_arr = None
    if want_aux:
        aux_arr = _output("aux", aux, shape, out_type, {**inputs, "out": out, **({"c": c} if c is not None else {})})
    matrix_out = out[0] if batched else out
    if matrix_out.shape[1] > 1 and matrix_out.strides[1] != matrix_out.itemsize or \
            matrix_out.shape[0] > 1 and matrix_out.strides[0] < matrix_out.shape[1] * matrix_out.itemsize or \
            matrix_out.strides[0] % matrix_out.itemsize:
        raise InvalidArgumentError("out must be row-major with unit column stride")
    ldc = matrix_out.strides[0] // matrix_out.itemsize if M > 1 else N
    stride_c = 0
    if batched:
        s0 = out.strides[0]
        if batch > 1 and (s0 % out.itemsize or s0 // out.itemsize < (M - 1) * ldc + N):
            raise InvalidArgumentError("out's matrices must not overlap (a batch stride of at least one matrix)")
        stride_c = s0 // out.itemsize if batch > 1 else 0
    if aux_arr is not None and aux_arr.strides != out.strides:
        raise InvalidArgumentError(f"aux must be laid out as out (strides {out.strides}), got {aux_arr.strides}")

    d = _dispatcher(target)
    if layout is not None:
        try:
            candidates = [layout if isinstance(layout, Layout) else Layout.parse(layout)]
        except (ValueError, TypeError):
            raise InvalidArgumentError(f"layout must be one of rcr, rrr, crr, ccr, got {layout!r}") from None
    else:
        natural = Layout.parse(("r" if _order(a) != "c" else "c") + ("r" if _order(b) == "r" else "c") + "r")
        candidates = [natural] + [lay for lay in Layout if lay is not natural]
    if kernel is not None:
        name = kernel if isinstance(kernel, str) else getattr(kernel, "name", None)
        named = [k for k in d.kernels if k.name == name]
        if named and layout is None:
            candidates = [named[0].layout]
    epilogue = {"c": c_arr, "bias": bias_vec, "aux": aux_arr, "row_scale": rows, "col_scale": cols,
                "scale_a": block[0] if block else None, "scale_b": block[1] if block else None}
    last_error = None
    for lay in candidates:
        a_use, lda, stride_a = _matrices(a, "r" if lay.a_row else "c")
        b_use, ldb, stride_b = _matrices(b, "r" if lay.b_row else "c")
        problem = GemmProblem(M, N, K, dtype, lay, lda, ldb, ldc, alpha * factor,
                              batch=batch if batched else 0, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c,
                              beta=beta, bias=Bias.NONE if bias_vec is None else Bias.parse(bias_along),
                              activation=act, aux=want_aux, row_scale=rows is not None, col_scale=cols is not None,
                              block_scale=block is not None, out_dtype=out_code)
        if kernel is None and not d.is_supported(problem):
            detail = selection.unsupported_detail("gemm", d.target, problem)
            last_error = UnsupportedProblemError(
                f"no {dtype.key} {lay.key} gemm kernel for target {d.target} implements this problem "
                f"({'batch ' + str(batch) + ' of ' if batched else ''}{M}x{N}x{K} with its epilogue or scales)"
                + (f": {detail}" if detail else "")
                + ("" if d.target == "cpu" else "; the cpu kernels built with fusion: generic do (target='cpu')"))
            continue
        d.run(problem, a_use, b_use, out, kernel=kernel, epilogue=epilogue)
        return (out, aux_arr) if return_aux else out
    raise last_error


# ---- CUDA arrays ----------------------------------------------------------------------------------


def _device(name: str, x) -> DeviceArray:
    if not is_device_array(x):
        raise InvalidArgumentError(f"{name} must be a CUDA array like the others (torch, cupy, numba), got "
                                   f"{type(x).__name__}: host and device arrays do not mix in one call")
    return DeviceArray(x)


def _device_matrices(name: str, x: DeviceArray):
    """(order 'r' or 'c', ld, batch stride) of a 2-D or 3-D CUDA operand used in place (no copy);
    batch stride 0 where it is 2-D or its batch dimension is 1 (shared by the batch)."""
    if len(x.shape) not in (2, 3):
        raise InvalidArgumentError(f"{name} must be 2-D or 3-D (batched), got shape {x.shape}")
    rows, cols = x.shape[-2:]
    s0, s1 = x.strides[-2:]
    if (s1 == 1 or cols == 1) and s0 >= max(cols, 1) and s0 > 0:
        order, ld = "r", s0
    elif (s0 == 1 or rows == 1) and s1 >= max(rows, 1) and s1 > 0:
        order, ld = "c", s1
    else:
        raise InvalidArgumentError(f"{name} (shape {x.shape}, strides {x.strides}) needs a unit stride along one "
                                   "dimension of its matrices (call .contiguous() first)")
    if len(x.shape) == 2 or x.shape[0] == 1:
        return order, ld, 0
    stride = x.strides[0]
    span = (rows - 1) * ld + cols if order == "r" else (cols - 1) * ld + rows
    if stride < span:
        raise InvalidArgumentError(f"{name}'s matrices overlap or run backwards (batch stride {stride}, one matrix "
                                   f"spans {span} elements): call .contiguous() first")
    return order, ld, stride


def _device_vector(name: str, x, length: int, what: str, dtype: DType) -> DeviceArray:
    """A CUDA vector of `length` values of `dtype`, unit stride ((n,), (n, 1) or (1, n))."""
    v = _device(name, x)
    if v.dtype is not dtype:
        raise TypeError(f"{name} holds {v.dtype.key}; it must be {dtype.key}")
    shape = v.shape
    if len(shape) == 2 and 1 in shape:
        strides = [st for n, st in zip(shape, v.strides) if n != 1]
        shape = (shape[0] * shape[1],)
    else:
        strides = list(v.strides)
    if len(shape) != 1 or shape[0] != length:
        raise InvalidArgumentError(f"{name} has shape {v.shape}; it needs {length} values ({what})")
    if length > 1 and strides and strides[0] != 1:
        raise InvalidArgumentError(f"{name} must be contiguous (stride 1), got strides {v.strides}")
    return v


def _device_block(name: str, x: DeviceArray, shape: tuple) -> DeviceArray:
    """A block-wise scale array on the device: float32, `shape`, row-major and contiguous."""
    if x.dtype is not DType.FP32:
        raise TypeError(f"{name} holds {x.dtype.key}; block-wise scales are float32")
    if tuple(x.shape) != shape or x.strides != (shape[1], 1) and shape[0] * shape[1] > 1:
        raise InvalidArgumentError(f"{name} must be a contiguous row-major {shape} float32 array, got shape "
                                   f"{x.shape}, strides {x.strides}")
    return x


def _device_scales(scale_a, scale_b, M: int, N: int, K: int, batched: bool):
    """fp8 scales on CUDA arrays: (alpha factor, row scales, column scales, block scales (a, b)
    or None). Per tensor: Python numbers; row-wise: CUDA float32 vectors scale_a (M,) and
    scale_b (N,); block-wise: scale_a (M, ceil(K/128)) and scale_b (ceil(K/128), ceil(N/128)),
    contiguous row-major float32 (the shapes decide, as on the numpy path)."""
    kb, nb = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
    if is_device_array(scale_a) and is_device_array(scale_b):
        sa, sb = DeviceArray(scale_a), DeviceArray(scale_b)
        row_wise = tuple(sa.shape) in ((M,), (M, 1)) and tuple(sb.shape) in ((N,), (1, N))
        if tuple(sa.shape) == (M, kb) and tuple(sb.shape) == (kb, nb) and not row_wise:
            if batched:
                raise InvalidArgumentError("block-wise scales take one GEMM, not a batch")
            return 1.0, None, None, (_device_block("scale_a", sa, (M, kb)), _device_block("scale_b", sb, (kb, nb)))
    factor, rows, cols = 1.0, None, None
    for name, s, length, what in (("scale_a", scale_a, M, "one per row of A (M)"),
                                  ("scale_b", scale_b, N, "one per column of B (N)")):
        if s is None:
            continue
        if not is_device_array(s):
            value = np.asarray(s)
            if value.size != 1 or value.dtype.kind not in "fiu":
                raise InvalidArgumentError(f"{name}: with CUDA arrays a per-tensor scale is a number and a row-wise "
                                           f"one a CUDA float32 vector of {length} values")
            factor *= _alpha(float(value.reshape(-1)[0]), name)
            continue
        vector = _device_vector(name, s, length, what, DType.FP32)
        if name == "scale_a":
            rows = vector
        else:
            cols = vector
    return factor, rows, cols, None


def _is_torch_cuda(x) -> bool:
    return type(x).__name__ == "Tensor" and type(x).__module__.startswith("torch") and x.is_cuda


def _gemm_device(a, b, *, layout, out, kernel, alpha, target, c, beta, bias, bias_along, activation, aux,
                 return_aux, row_scale, col_scale, scale_a, scale_b, out_dtype, plan_key=None):
    """td.gemm's extra arguments on CUDA arrays: no copies (operands are used in place), the
    caller's current stream, outputs of the caller's kind; the same argument checks as the
    numpy path, and overlap checks on the arrays' address ranges. With plan_key (torch
    tensors), a call that ran stores its plan there for the calls with the same metadata."""
    given = dict(a=a, b=b, out=out, c=c, bias=bias, aux=aux, row_scale=row_scale, col_scale=col_scale,
                 scale_a=scale_a, scale_b=scale_b)
    da, db = _device("a", a), _device("b", b)
    if len(da.shape) not in (2, 3) or len(db.shape) not in (2, 3):
        raise InvalidArgumentError(f"gemm takes 2-D or 3-D (batched) operands, got shapes {da.shape} and {db.shape}")
    dtype = da.dtype
    if db.dtype is not dtype:
        raise TypeError(f"A and B must share an element type, got {dtype.key} and {db.dtype.key}")
    batched, batch, M, N, K = _gemm_shape(tuple(da.shape), tuple(db.shape))
    oa, lda, stride_a = _device_matrices("a", da)
    ob, ldb, stride_b = _device_matrices("b", db)
    lay = Layout.parse(oa + ob + "r")
    if layout is not None:
        try:
            want = layout if isinstance(layout, Layout) else Layout.parse(layout)
        except (ValueError, TypeError):
            raise InvalidArgumentError(f"layout must be one of rcr, rrr, crr, ccr, got {layout!r}") from None
        if want is not lay:
            raise InvalidArgumentError(f"the arrays are laid out as {lay.key}, not {want.key}: transpose or copy them")
    alpha, beta, act = _epilogue_args(alpha, beta, c, bias_along, activation, return_aux)
    out_code, out_type = _out_type(out_dtype, dtype)
    factor, rows_fp8, cols_fp8, block = _device_scales(scale_a, scale_b, M, N, K, batched)
    if rows_fp8 is not None and row_scale is not None or cols_fp8 is not None and col_scale is not None:
        raise InvalidArgumentError("give row-wise scales once: scale_a/scale_b or row_scale/col_scale, not both")
    rows = rows_fp8 if rows_fp8 is not None else (
        None if row_scale is None else _device_vector("row_scale", row_scale, M, "one per row of D (M)", DType.FP32))
    cols = cols_fp8 if cols_fp8 is not None else (
        None if col_scale is None else _device_vector("col_scale", col_scale, N, "one per column of D (N)", DType.FP32))
    bias_vec = None
    if bias is not None:
        length, what = (N, "bias_along='n': one per column (N)") if bias_along == "n" else (M, "bias_along='m': one per row (M)")
        bias_vec = _device_vector("bias", bias, length, what, out_type)
    shape = (batch, M, N) if batched else (M, N)
    dc = _device("c", c) if c is not None else None
    if out is None:
        out = da.empty(shape, out_type)
    dout = _device("out", out)
    if dout.shape != shape or dout.dtype is not out_type:
        raise InvalidArgumentError(f"out must be a {shape} {out_type.key} array, got {dout.shape} {dout.dtype.key}")
    reads = {"a": da, "b": db, "bias": bias_vec, "row_scale": rows, "col_scale": cols,
             "scale_a": block[0] if block else None, "scale_b": block[1] if block else None}
    _device_output_checks("out", dout, M, N, batched, {**reads, "c": dc} if dc is None or dc.ptr != dout.ptr else reads)
    ldc = dout.strides[-2] if M > 1 else N
    stride_c = dout.strides[0] if batched and batch > 1 else 0
    if dc is not None:
        if dc.dtype is not out_type:
            raise TypeError(f"c holds {dc.dtype.key}; it must be {out_type.key} (the output type)")
        if dc.shape != dout.shape or dc.strides != dout.strides:
            raise InvalidArgumentError(f"c must be laid out as out (shape {dout.shape}, strides {dout.strides}: C is read "
                                       f"with D's layout), got {dc.shape} {dc.strides}; c=out accumulates in place")
        if dc.ptr != dout.ptr and dc.overlaps(dout):
            raise InvalidArgumentError("c overlaps out without being out itself: in-place accumulation takes c=out")
    want_aux = aux is not None or bool(return_aux)
    daux = None
    if want_aux:
        if aux is None:
            aux = da.empty(shape, out_type)
        daux = _device("aux", aux)
        if daux.shape != shape or daux.dtype is not out_type:
            raise InvalidArgumentError(f"aux must be a {shape} {out_type.key} array, got {daux.shape} {daux.dtype.key}")
        if daux.strides != dout.strides:
            raise InvalidArgumentError(f"aux must be laid out as out (strides {dout.strides}), got {daux.strides}")
        _device_output_checks("aux", daux, M, N, batched, {**reads, "out": dout, "c": dc})
    problem = GemmProblem(M, N, K, dtype, lay, lda, ldb, ldc, alpha * factor,
                          batch=batch if batched else 0, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c,
                          beta=beta, bias=Bias.NONE if bias_vec is None else Bias.parse(bias_along),
                          activation=act, aux=want_aux, row_scale=rows is not None, col_scale=cols is not None,
                          block_scale=block is not None, out_dtype=out_code)
    if target is None:
        target = selection.device_target()
    d = _dispatcher(target)
    if d.on_host:
        raise InvalidArgumentError(f"the arrays are CUDA arrays but target {d.target} runs on the host")
    detail = selection.unsupported_detail("gemm", d.target, problem)
    if detail:
        raise UnsupportedProblemError(detail)
    # no kernel taking the problem: the library's error names each kernel's reason
    epilogue = {"c": None if dc is None else dc.ptr, "bias": None if bias_vec is None else bias_vec.ptr,
                "aux": None if daux is None else daux.ptr, "row_scale": None if rows is None else rows.ptr,
                "col_scale": None if cols is None else cols.ptr,
                "scale_a": block[0].ptr if block else None, "scale_b": block[1].ptr if block else None}
    d.run(problem, da.ptr, db.ptr, dout.ptr, kernel=kernel, stream=da.stream(), timed=False, epilogue=epilogue)
    if plan_key is not None:
        _gemm_plans.store(plan_key, _gemm_plans.Plan(
            problem.to_c(), kernel, d.lib, _gemm_plans.raw_stream(), da.obj.get_device(), shape,
            torch_dtype(out_type), want_aux, bool(return_aux), given))
    return (out, aux) if return_aux else out


def _device_output_checks(name: str, x: DeviceArray, M: int, N: int, batched: bool, reads: dict) -> None:
    """A written CUDA array: row-major matrices with unit column stride, matrices that do not
    overlap each other, sharing no memory with what the call reads."""
    s0, s1 = x.strides[-2:]
    if N > 1 and s1 != 1 or M > 1 and s0 < N:
        raise InvalidArgumentError(f"{name} must be row-major with unit column stride, got strides {x.strides}")
    ldc = s0 if M > 1 else N
    if batched and x.shape[0] > 1 and x.strides[0] < (M - 1) * ldc + N:
        raise InvalidArgumentError(f"{name}'s matrices must not overlap (a batch stride of at least one matrix)")
    for other, array in reads.items():
        if array is not None and x.overlaps(array):
            raise InvalidArgumentError(f"{name} overlaps {other}: pass a separate array")


def _order(x: np.ndarray):
    """'r' or 'c': how the matrices of a 2-D or 3-D array are laid out (None: neither)."""
    matrix = x[0] if x.ndim == 3 else x
    if ld_in_order(matrix, "r") is not None:
        return "r"
    if ld_in_order(matrix, "c") is not None:
        return "c"
    return None


# ---- grouped GEMM ------------------------------------------------------------------------------------


def grouped_gemm(a, b, offsets=None, *, out=None, alpha=1.0, bias=None, activation=None, out_dtype=None,
                 scale_a=None, scale_b=None, kernel=None, target=None):
    """Grouped GEMM (mixture of experts), one C call for every group (td_gemm_grouped_run).
    On numpy arrays it runs on the cpu target; on CUDA arrays (torch tensors, cupy arrays) on the
    GPU, on the caller's current stream, as one launch of a grouped kernel where one takes every
    group (`td.grouped_gemm_select` names it) and as one GEMM per group otherwise.

    Offsets form (torch._grouped_mm): a (rows, K) holds the tokens sorted by group, b
    (groups, K, N) one matrix per group, offsets (groups,) the cumulative row ends: group g
    is a[offsets[g-1]:offsets[g]] @ b[g] (offsets[-1] = 0); an empty group (equal offsets) is
    allowed. Returns (rows, N); rows after offsets[-1] are zero. bias: (groups, N), one row
    per group.
    List form: grouped_gemm([a0, a1, ...], [b0, b1, ...]) with a_i (M_i, K_i) and b_i
    (K_i, N_i) (M_i may be 0) returns the list of products; bias: a list of (N_i,) vectors.
    alpha, activation and out_dtype as td.gemm's, for every group. scale_a / scale_b: fp8
    row-wise scales, one per row of A and one per column of each group's B (offsets form:
    scale_a (rows,), scale_b (groups, N); list form: lists of (M_i,) and (N_i,) vectors).
    On CUDA arrays: D = alpha * A @ B (fp8: scalar scale_a / scale_b, per tensor), the form of
    torch._grouped_mm (offsets int32, on the device or the host; on the device they are read back
    to the host once, a copy that waits for the work queued before it); returns arrays of the
    inputs' kind (torch tensors for torch inputs). bias, activation, out_dtype and row-wise
    scales run on the cpu target only.
    """
    listed = isinstance(a, (list, tuple))
    if (listed and any(is_device_array(x) for x in list(a) + list(b if isinstance(b, (list, tuple)) else [b]))) or \
            (not listed and any(is_device_array(x) for x in (a, b, out))):
        return grouped_gemm_device(a, b, offsets, out=out, alpha=alpha, bias=bias, activation=activation,
                                   out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, kernel=kernel, target=target)
    if listed != isinstance(b, (list, tuple)):
        raise InvalidArgumentError("grouped_gemm takes a and b both as lists, or a 2-D a, a 3-D b and offsets")
    if listed:
        if offsets is not None:
            raise InvalidArgumentError("the list form takes no offsets")
        if len(a) != len(b):
            raise InvalidArgumentError(f"{len(a)} matrices of A but {len(b)} of B")
        if not a:
            raise InvalidArgumentError("grouped_gemm needs at least one group")
        a_list, b_list = [np.asarray(x) for x in a], [np.asarray(x) for x in b]
    else:
        a, b = np.asarray(a), np.asarray(b)
        if a.ndim != 2 or b.ndim != 3:
            raise InvalidArgumentError(f"grouped_gemm takes a 2-D a and a 3-D b (groups, K, N), got {a.shape} and {b.shape}")
        if offsets is None:
            raise InvalidArgumentError("grouped_gemm with a 3-D b needs offsets (the cumulative row ends)")
        if a.shape[1] != b.shape[1]:
            raise InvalidArgumentError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")
        ends = _offsets(offsets, b.shape[0], a.shape[0])
        if b.shape[0] == 0:
            raise InvalidArgumentError("grouped_gemm needs at least one group")
        starts = np.concatenate(([0], ends[:-1]))
        a_list = [a[s:e] for s, e in zip(starts, ends)]
        b_list = [b[g] for g in range(b.shape[0])]
    for i, (x, y) in enumerate(zip(a_list, b_list)):
        if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
            raise InvalidArgumentError(f"group {i}: a {x.shape} and b {y.shape} are not (M, K) and (K, N)")
        if x.shape[1] == 0 or y.shape[1] == 0:
            raise InvalidArgumentError(f"group {i}: K and N must be positive, got a {x.shape} and b {y.shape}")
    dtype = dtype_of(a_list[0])
    for i, x in enumerate(a_list + b_list):
        if dtype_of(x) is not dtype:
            raise TypeError(f"every matrix must share one element type, got {dtype.key} and {x.dtype}")
    alpha = _alpha(alpha)
    try:
        act = Activation.NONE if activation is None else Activation.parse(activation)
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"activation must be None, 'relu', 'gelu', 'gelu_tanh' or 'silu', got {activation!r}") from None
    out_code, out_type = _out_type(out_dtype, dtype)
    out_np = numpy_dtype(out_type)
    groups = len(a_list)
    biases = [None] * groups
    if bias is not None:
        if listed:
            if not isinstance(bias, (list, tuple)) or len(bias) != groups:
                raise InvalidArgumentError(f"bias must be a list of {groups} vectors in the list form")
            biases = [_vector(f"bias[{i}]", v, b_list[i].shape[1], "one per column (N)", out_np)
                      for i, v in enumerate(bias)]
        else:
            full = np.asarray(bias)
            if full.shape != (groups, b.shape[2]):
                raise InvalidArgumentError(f"bias has shape {full.shape}; it needs ({groups}, {b.shape[2]}): one row per group")
            biases = [_vector(f"bias[{i}]", full[i], b.shape[2], "one per column (N)", out_np) for i in range(groups)]
    rows_scales, cols_scales = [None] * groups, [None] * groups
    if scale_a is not None:
        if listed:
            if not isinstance(scale_a, (list, tuple)) or len(scale_a) != groups:
                raise InvalidArgumentError(f"scale_a must be a list of {groups} vectors in the list form")
            rows_scales = [_vector(f"scale_a[{i}]", v, a_list[i].shape[0], "one per row of A") for i, v in enumerate(scale_a)]
        else:
            full = _vector("scale_a", scale_a, a.shape[0], "one per row of a")
            rows_scales = [full[s:e] for s, e in zip(starts, ends)]
    if scale_b is not None:
        if listed:
            if not isinstance(scale_b, (list, tuple)) or len(scale_b) != groups:
                raise InvalidArgumentError(f"scale_b must be a list of {groups} vectors in the list form")
            cols_scales = [_vector(f"scale_b[{i}]", v, b_list[i].shape[1], "one per column of B") for i, v in enumerate(scale_b)]
        else:
            full = np.asarray(scale_b)
            if full.size != groups * b.shape[2] or full.shape not in ((groups, b.shape[2]), (groups, 1, b.shape[2])):
                raise InvalidArgumentError(f"scale_b has shape {full.shape}; it needs ({groups}, {b.shape[2]}): one row "
                                           "per group")
            full = full.reshape(groups, b.shape[2])
            cols_scales = [_vector(f"scale_b[{i}]", full[i], b.shape[2], "one per column of B") for i in range(groups)]
    if listed:
        if out is not None:
            raise InvalidArgumentError("the list form takes no out (it returns new arrays)")
        outs = [np.empty((x.shape[0], y.shape[1]), out_np) for x, y in zip(a_list, b_list)]
    else:
        out = _output("out", out, (a.shape[0], b.shape[2]), out_type, {"a": a, "b": b})
        if out.shape[1] > 1 and out.strides[1] != out.itemsize:
            raise InvalidArgumentError("out must be row-major with unit column stride")
        out[ends[-1]:] = 0
        outs = [out[s:e] for s, e in zip(starts, ends)]
    first = next((i for i in range(groups) if a_list[i].shape[0] > 0), 0)
    lay = Layout.parse(("c" if _order(a_list[first]) == "c" else "r") + ("r" if _order(b_list[first]) == "r" else "c") + "r")
    table = (_ffi.TdGemmGroup * groups)()
    keep = []
    for i in range(groups):
        x, y, o = a_list[i], b_list[i], outs[i]
        M, K, N = x.shape[0], x.shape[1], y.shape[1]
        if M == 0:
            table[i] = _ffi.TdGemmGroup(0, N, K)
            continue
        x, lda = _as_matrix(x, "r" if lay.a_row else "c", ld_in_order)
        y, ldb = _as_matrix(y, "r" if lay.b_row else "c", ld_in_order)
        ldc = o.strides[0] // o.itemsize if M > 1 else N
        keep += [x, y]
        ep = _ffi.TdGemmEpilogue(bias=None if biases[i] is None else pointer(biases[i]),
                                 row_scale=None if rows_scales[i] is None else pointer(rows_scales[i]),
                                 col_scale=None if cols_scales[i] is None else pointer(cols_scales[i]))
        table[i] = _ffi.TdGemmGroup(M, N, K, lda, ldb, ldc, pointer(x), pointer(y), pointer(o), ep)
    sizes = [(x.shape[0], y.shape[1], x.shape[1]) for x, y in zip(a_list, b_list)]
    big = max(sizes)
    problem = GemmProblem(max(big[0], 1), big[1], big[2], dtype, lay, alpha=alpha,
                          bias=Bias.N if bias is not None else Bias.NONE, activation=act, out_dtype=out_code,
                          row_scale=scale_a is not None, col_scale=scale_b is not None)
    d = _dispatcher(target)
    if not d.on_host:
        raise UnsupportedProblemError(f"grouped_gemm runs on the cpu target for now (target='cpu'), not {d.target}")
    name = None if kernel is None else (kernel if isinstance(kernel, str) else getattr(kernel, "name", None))
    status = d.lib.td_gemm_grouped_run(ctypes.byref(problem.to_c()), None if name is None else name.encode(),
                                       table, groups, None, None)
    if kernel is None:
        selection.warn_messages(d.lib)
    d.lib.check(status)
    return outs if listed else out


def _as_matrix(x: np.ndarray, order: str, ld_in_order):
    ld = ld_in_order(x, order)
    if ld is None:
        x = np.ascontiguousarray(x) if order == "r" else np.asfortranarray(x)
        ld = ld_in_order(x, order)
    return x, ld
