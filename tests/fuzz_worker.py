"""Property-based fuzzing of tiledispatch's public surface with hypothesis (never shipped):
run by tests/test_fuzz.py in a subprocess, so that a crash (segfault, abort) or a hang
fails that test instead of killing pytest.

    python tests/fuzz_worker.py TARGET N

runs the fuzz target TARGET for N examples with a fixed seed (derandomized: the same
examples each run), prints `TARGET: <count> examples in <seconds> s` and exits 0, or
prints the failing (shrunk) example and exits 1. TD_FUZZ_LAST=PATH makes it write the
example it is about to run into PATH first, so that after a crash or a timeout the parent
can show the example that killed it.

Every call either succeeds, and then its result is checked against the float64 numpy
reference of tiledispatch.reference (inputs are generated in their element type, so they
are already quantized), or raises one of the package's exceptions (td.TileDispatchError
and subclasses) or TypeError / ValueError with a non-empty message. Where the arguments
are certainly valid the call must succeed; where they are certainly invalid it must fail.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import json
import math
import os
import resource
import subprocess
import sys
import time
import traceback

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiledispatch as td
from tiledispatch import _ffi, reference
from tiledispatch.arrays import numpy_dtype
from tiledispatch.codegen import Direction, DType

ALLOWED = (td.TileDispatchError, TypeError, ValueError)
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1

GEMM = td.Dispatcher("gemm", "cpu")
CONV = td.Dispatcher("conv", "cpu")
GEMM_KERNELS = {k.name: k for k in GEMM.kernels}
CONV_KERNELS = {k.name: k for k in CONV.kernels}
GEMM_DTYPES = sorted({k.dtype for k in GEMM.kernels}, key=lambda d: d.code)
CONV_DTYPES = sorted({k.dtype for k in CONV.kernels}, key=lambda d: d.code)
GEMM_BUILT = {(k.dtype, k.layout) for k in GEMM.kernels}
CONV_BUILT = {(k.dtype, k.direction, k.ndim) for k in CONV.kernels}
BUILT = {(lib["op"], lib["target"]) for lib in td.registry().libraries}

# numpy element types that are not tiledispatch's, and ones it knows without a cpu kernel
FOREIGN = [np.dtype(np.float64), np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.int8), np.dtype(bool)]
NO_KERNEL = [numpy_dtype(d) for d in DType if d not in GEMM_DTYPES]

# hostile scalars: out of every C range, of the wrong type, or the right value in another type
HUGE = [2**31, 2**32 + 2, 2**63 - 1, 2**63, 2**64, -2**63, -2**31 - 1, 10**30]
HOSTILE = st.one_of(
    st.sampled_from(HUGE + [0, -1, -7, INT32_MAX]),
    st.sampled_from([1.0, 2.5, -0.0, float("nan"), float("inf"), None, "8", "abc", "", True, False,
                     (1,), [2], b"3", 1j, np.float32(2.0), np.bool_(True)]),
    st.builds(lambda t, v: t(v), st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint64]),
              st.integers(0, 100)),
)


class FuzzFailure(AssertionError):
    pass


# ---- bookkeeping --------------------------------------------------------------------------

_last = None
COUNT = 0


def note(what: str, **kw) -> None:
    """Counts the example and, with TD_FUZZ_LAST, records it before it runs."""
    global _last, COUNT
    COUNT += 1
    path = os.environ.get("TD_FUZZ_LAST")
    if not path:
        return
    if _last is None:
        _last = open(path, "w", encoding="utf-8")
    _last.seek(0)
    _last.truncate()
    _last.write(f"{what}: {kw!r}\n")
    _last.flush()


def attempt(fn, expect: str, what: str):
    """Runs fn. expect: 'ok' (must succeed), 'fail' (must raise an allowed exception) or
    'either'. Returns (True, result) or (False, exception); raises FuzzFailure otherwise."""
    try:
        result = fn()
    except ALLOWED as err:
        if not str(err).strip() or (isinstance(err, td.TileDispatchError) and not err.message.strip()):
            raise FuzzFailure(f"{what}: {type(err).__name__} with an empty message") from err
        if expect == "ok":
            raise FuzzFailure(f"{what}: valid arguments refused: {type(err).__name__}: {err}") from err
        return False, err
    except FuzzFailure:
        raise
    except Exception as err:  # noqa: BLE001 - the point: no other exception may escape
        raise FuzzFailure(f"{what}: raw {type(err).__name__} escaped: {err!r}") from err
    if expect == "fail":
        raise FuzzFailure(f"{what}: invalid arguments accepted, returned {summary(result)}")
    return True, result


def summary(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype}"
    return repr(value)[:200]


def check_close(result, ref, mag, dtype: DType, k: int, what: str) -> None:
    """The result against the reference, except elements whose magnitude reaches the output
    type's range (a large alpha: fp16 overflows to inf, as it should) and all of them where the
    reference itself is not finite (alpha inf or nan)."""
    if not np.isfinite(ref).all() or not np.isfinite(mag).all():
        return
    fmax = float(ml_dtypes.finfo(numpy_dtype(dtype.out)).max)
    keep = mag < fmax / 4
    if not keep.all():
        result, ref, mag = np.asarray(result)[keep], ref[keep], mag[keep]
    cmp = reference.compare(result, ref, mag, dtype, k)
    if not cmp["ok"]:
        raise FuzzFailure(f"{what}: wrong answer: accuracy {cmp['accuracy']:.3f}%, max error {cmp['max_error']}")


def values(shape, dtype, rng) -> np.ndarray:
    """Random values of a numpy dtype (quantized on creation)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return rng.integers(0, 3, size=shape).astype(dtype)
    return (rng.random(size=shape, dtype=np.float32) * 2 - 1).astype(dtype)


def frozen(arrays):
    return [(a, a.copy()) for a in arrays if isinstance(a, np.ndarray)]


def unchanged(pairs, what: str) -> None:
    for now, before in pairs:
        if now.tobytes() != before.tobytes():
            raise FuzzFailure(f"{what}: an input array was modified")


# ---- strategies -------------------------------------------------------------------------------

DIM = st.integers(1, 64)
SEED = st.integers(0, 2**32 - 1)

MATRIX_KINDS = ["c", "c", "c", "f", "T", "pad", "padT", "step", "rev", "ro", "bcast_row", "bcast_col",
                "list", "1d", "3d", "0d"]


def make_matrix(kind: str, rows: int, cols: int, dtype, rng):
    """(the argument, its logical values as an array or None, valid) for one operand."""
    base = values((rows, cols), dtype, rng)
    if kind == "c":
        return base, base, True
    if kind == "f":
        return np.asfortranarray(base), base, True
    if kind == "T":
        return base.T.copy().T, base, True
    if kind == "pad":
        buf = values((rows, cols + 3), dtype, rng)
        buf[:, :cols] = base
        return buf[:, :cols], base, True
    if kind == "padT":
        buf = values((cols, rows + 2), dtype, rng)
        buf[:, :rows] = base.T
        return buf[:, :rows].T, base, True
    if kind == "step":
        buf = values((rows, 2 * cols), dtype, rng)
        buf[:, ::2] = base
        return buf[:, ::2], base, True
    if kind == "rev":
        return base[::-1].copy()[::-1], base, True
    if kind == "ro":
        base.flags.writeable = False
        return base, base, True
    if kind == "bcast_row":
        row = values((1, cols), dtype, rng)
        arr = np.broadcast_to(row, (rows, cols))
        return arr, np.array(arr), rows == 1
    if kind == "bcast_col":
        col = values((rows, 1), dtype, rng)
        arr = np.broadcast_to(col, (rows, cols))
        return arr, np.array(arr), cols == 1
    if kind == "list":
        return base.astype(np.float32).tolist(), None, False
    if kind == "1d":
        return base.reshape(-1), None, False
    if kind == "3d":  # a batch of one (numpy.matmul semantics): the result is (1, M, N)
        return base.reshape(1, rows, cols), base, True
    return np.asarray(base[0, 0]), None, False


def alias_pair(shape_in, dtype_in, shape_out, dtype_out):
    """An input and an out array that share memory (the out array starts where the input does)."""
    n_in = math.prod(shape_in) * np.dtype(dtype_in).itemsize
    n_out = math.prod(shape_out) * np.dtype(dtype_out).itemsize
    buf = np.zeros(max(n_in, n_out) + 16, np.uint8)
    a = buf[:n_in].view(dtype_in).reshape(shape_in)
    out = buf[:n_out].view(dtype_out).reshape(shape_out)
    return a, out


# ---- target: td.gemm ----------------------------------------------------------------------

@st.composite
def gemm_case(draw):
    M, N, K = draw(DIM), draw(DIM), draw(DIM)
    if draw(st.integers(0, 19)) == 0:
        M, N, K = draw(st.sampled_from([(0, N, K), (M, 0, K), (M, N, 0)]))
    dt_kind = draw(st.sampled_from(["kernel"] * 8 + ["foreign", "nokernel", "mixed"]))
    return dict(M=M, N=N, K=K, dt_kind=dt_kind, dt_index=draw(st.integers(0, 99)),
                a_kind=draw(st.sampled_from(MATRIX_KINDS)), b_kind=draw(st.sampled_from(MATRIX_KINDS)),
                k_off=draw(st.sampled_from([0] * 9 + [1, -1])),
                out_kind=draw(st.sampled_from([None] * 4 + ["c", "pad", "f", "ro", "alias_a", "alias_b",
                                                          "shape", "dtype", "list"])),
                layout=draw(st.sampled_from([None] * 6 + ["rcr", "rrr", "crr", "ccr", "RCR", "xyz", ""])),
                kernel=draw(st.sampled_from(["none"] * 6 + ["match", "any", "nope", "", "config"])),
                kernel_index=draw(st.integers(0, 999)),
                alpha=draw(st.sampled_from([1.0, 1.0, 0.5, -2.0, 0.0, 3, np.float32(0.25), np.float64(-1.5),
                                            np.int64(2), 1e-3])),
                target=draw(st.sampled_from([None] * 12 + ["cpu", "nope", "", 5, "sm_90a"])),
                seed=draw(SEED))


def fuzz_gemm(case):
    note("gemm", **case)
    rng = np.random.default_rng(case["seed"])
    M, N, K = case["M"], case["N"], case["K"]
    i = case["dt_index"]
    valid = min(M, N, K) >= 1
    if case["dt_kind"] == "kernel":
        dt = GEMM_DTYPES[i % len(GEMM_DTYPES)]
        np_a = np_b = numpy_dtype(dt)
    elif case["dt_kind"] == "foreign":
        dt, np_a = None, FOREIGN[i % len(FOREIGN)]
        np_b, valid = np_a, False
    elif case["dt_kind"] == "nokernel":
        dt = None
        np_a = np_b = NO_KERNEL[i % len(NO_KERNEL)] if NO_KERNEL else np.dtype(np.float64)
        valid = False
    else:
        dt = GEMM_DTYPES[i % len(GEMM_DTYPES)]
        np_a, np_b = numpy_dtype(dt), numpy_dtype(GEMM_DTYPES[(i + 1) % len(GEMM_DTYPES)])
        valid = False
    Kb = K + case["k_off"]
    valid &= case["k_off"] == 0
    a, a_val, ok_a = make_matrix(case["a_kind"], M, K, np_a, rng) if M and K else (np.zeros((M, K), np_a), None, True)
    b, b_val, ok_b = make_matrix(case["b_kind"], max(Kb, 0), N, np_b, rng) if Kb > 0 and N else \
        (np.zeros((max(Kb, 0), N), np_b), None, True)
    valid &= ok_a and ok_b
    expect = "ok"
    out_dtype = numpy_dtype(dt.out) if dt is not None else np.dtype(np.float32)
    out, pad_buf = None, None
    ok_kind = case["out_kind"]
    if ok_kind == "c":
        out = np.full((M, N), np.nan, out_dtype)
    elif ok_kind == "pad":
        pad_buf = np.full((M, N + 3), np.nan, out_dtype)
        out = pad_buf[:, :N]
    elif ok_kind == "f":
        out = np.asfortranarray(np.full((M, N), np.nan, out_dtype))
        expect = "either"
    elif ok_kind == "ro":
        out = np.full((M, N), np.nan, out_dtype)
        out.flags.writeable = False
        valid = False
    elif ok_kind in ("alias_a", "alias_b") and valid and dt is not None:
        if ok_kind == "alias_a":
            a, out = alias_pair((M, K), np_a, (M, N), out_dtype)
            a[...] = a_val
        else:
            b, out = alias_pair((K, N), np_b, (M, N), out_dtype)
            b[...] = b_val
        valid = False
    elif ok_kind == "shape":
        out = np.full((M + 1, N), np.nan, out_dtype)
        valid = False
    elif ok_kind == "dtype":
        out = np.full((M, N), np.nan, np.float64)
        valid = False
    elif ok_kind == "list":
        out = [[0.0] * N] * M
        valid = False
    lay = case["layout"]
    if lay is not None and lay not in ("rcr", "rrr", "crr", "ccr"):
        expect = "either" if lay == "RCR" else expect  # a case-insensitive parse is fine too
        valid &= lay == "RCR"
    kernel = None
    names = sorted(GEMM_KERNELS)
    kk = case["kernel"]
    if kk == "match" and dt is not None:
        same = [n for n in names if GEMM_KERNELS[n].dtype is dt and (lay is None or GEMM_KERNELS[n].layout.key == lay)]
        kernel = same[case["kernel_index"] % len(same)] if same else None
    elif kk in ("any", "config"):
        kernel = names[case["kernel_index"] % len(names)]
        kconf = GEMM_KERNELS[kernel]
        if kconf.dtype is not dt or (lay is not None and kconf.layout.key != lay.lower()):
            valid = False
        if kk == "config":
            kernel = kconf
    elif kk in ("nope", ""):
        kernel = "gemm_nope" if kk == "nope" else ""
        if kk == "nope":
            valid = False
        else:
            expect = "either"
    batched = getattr(a, "ndim", 0) == 3 or getattr(b, "ndim", 0) == 3
    if batched and valid:  # the batch's out shape, kernels and layouts: the features target checks them
        expect = "either"
    if not valid:
        expect = "fail"
    args = dict(layout=lay, out=out, kernel=kernel, alpha=case["alpha"])
    if case["target"] is not None:
        args["target"] = case["target"]
        if case["target"] not in ("cpu", ""):  # "": the default target (cpu here)
            expect = "either" if ("gemm", case["target"]) in BUILT else "fail"
    inputs = frozen([a, b])
    ok, result = attempt(lambda: td.gemm(a, b, **args), expect, "td.gemm")
    unchanged(inputs, "td.gemm")
    if not ok:
        return
    if dt is None or a_val is None or b_val is None:
        raise FuzzFailure(f"td.gemm accepted invalid operands: {summary(a)} {summary(b)}")
    shape = (1, M, N) if batched else (M, N)
    if not isinstance(result, np.ndarray) or result.shape != shape or result.dtype != out_dtype:
        raise FuzzFailure(f"td.gemm returned {summary(result)}, expected array{shape} {out_dtype}")
    if out is not None and result is not out:
        raise FuzzFailure("td.gemm did not return the out array it was given")
    result = result.reshape(M, N)
    alpha = float(np.float32(case["alpha"]))
    ref, mag = reference.gemm(a_val, b_val)
    check_close(result, alpha * ref, abs(alpha) * mag, dt, K, "td.gemm")
    if pad_buf is not None and not np.isnan(pad_buf[:, N:].astype(np.float32)).all():
        raise FuzzFailure("td.gemm wrote outside out's columns")


# ---- target: td.conv ----------------------------------------------------------------------

SPATIAL_MAX = {1: 16, 2: 10, 3: 5}


@st.composite
def conv_geometry(draw, ndim=None):
    nd = ndim or draw(st.integers(1, 3))
    hi = SPATIAL_MAX[nd]
    return dict(ndim=nd, N=draw(st.integers(1, 3)), G=draw(st.integers(1, 4)), C=draw(st.integers(1, 16)),
                K=draw(st.integers(1, 16)),
                input=tuple(draw(st.lists(st.integers(1, hi), min_size=nd, max_size=nd))),
                filter=tuple(draw(st.lists(st.integers(1, 4), min_size=nd, max_size=nd))),
                stride=tuple(draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd))),
                pad=tuple(draw(st.lists(st.integers(0, 2), min_size=nd, max_size=nd))),
                dil=tuple(draw(st.lists(st.integers(1, 2), min_size=nd, max_size=nd))),
                direction=draw(st.sampled_from(list(Direction))),
                dtype=draw(st.sampled_from(CONV_DTYPES)))


def out_size(g):
    return tuple((i + 2 * p - d * (f - 1) - 1) // s + 1
                 for i, f, s, p, d in zip(g["input"], g["filter"], g["stride"], g["pad"], g["dil"]))


def conv_problem(g, split_k=0):
    return td.ConvProblem(g["N"], g["G"], g["C"], g["K"], g["input"], g["filter"], g["stride"], g["pad"],
                          g["dil"], g["direction"], g["dtype"], split_k)


def conv_shapes(g):
    o = out_size(g)
    return ((g["N"], *g["input"], g["G"] * g["C"]), (g["G"] * g["K"], *g["filter"], g["C"]),
            (g["N"], *o, g["G"] * g["K"]))


MUTATIONS = ["none"] * 10 + ["groups", "stride", "padding", "dilation", "split_k", "direction", "size_arg",
                             "channels", "rank", "spatial", "dtype_mix", "foreign", "out", "layout"]


@st.composite
def conv_case(draw):
    g = draw(conv_geometry())
    mutation = draw(st.sampled_from(MUTATIONS))
    m = {}
    if mutation in ("groups", "stride", "padding", "dilation", "split_k", "direction", "size_arg"):
        m["value"] = draw(st.one_of(HOSTILE, st.tuples(HOSTILE, HOSTILE), st.integers(-2, 5)))
    elif mutation == "out":
        m["out"] = draw(st.sampled_from(["c", "ro", "alias", "shape", "dtype", "fortran", "list"]))
    elif mutation == "layout":
        m["layout"] = draw(st.sampled_from(["T", "step", "bcast", "ro", "rev"]))
        m["which"] = draw(st.integers(0, 1))
    elif mutation == "foreign":
        m["index"] = draw(st.integers(0, 99))
    return dict(g=g, mutation=mutation, m=m, pass_size=draw(st.booleans()),
                target=draw(st.sampled_from([None] * 12 + ["cpu", "nope", 5])),
                kernel=draw(st.sampled_from(["none"] * 8 + ["match", "nope", "other"])),
                kernel_index=draw(st.integers(0, 999)), seed=draw(SEED))


def _valid_int(v, low):
    return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer)) and low <= int(v) <= INT32_MAX


def _valid_spatial(v, nd, low):
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        v = (v,) * nd
    if not isinstance(v, (tuple, list)) or len(v) != nd:
        return None
    if not all(_valid_int(x, low) for x in v):
        return None
    return tuple(int(x) for x in v)


def fuzz_conv(case):
    note("conv", **case)
    g = dict(case["g"])
    rng = np.random.default_rng(case["seed"])
    nd, mut, m = g["ndim"], case["mutation"], case["m"]
    dt = g["dtype"]
    np_dt, out_dt = numpy_dtype(dt), numpy_dtype(dt.out)
    expect = "ok"
    kwargs = {}
    # a mutated keyword argument: its effect on the geometry where valid, else a refusal
    if mut in ("stride", "padding", "dilation", "groups", "split_k", "direction"):
        v = m["value"]
        kwargs[mut] = v
        if mut == "groups":
            if not _valid_int(v, 1):
                expect = "fail"
            elif int(v) != g["G"]:
                expect = "either"  # the channels may or may not divide; checked after success
        elif mut == "split_k":
            if not _valid_int(v, 0):
                expect = "fail"
            elif int(v) > 0:
                expect = "either"  # the cpu kernels may ignore or refuse a split count
        elif mut == "direction":
            expect = "fail"
        else:
            key = {"stride": "stride", "padding": "pad", "dilation": "dil"}[mut]
            parsed = _valid_spatial(v, nd, 0 if mut == "padding" else 1)
            if isinstance(v, (bytes, bytearray)):
                return  # read as its byte values: bug_bytes_as_sizes
            if parsed is None:
                expect = "fail"
            elif max(parsed) > 64:
                return  # a huge valid pad: a huge output (see the xfail target conv_huge_output)
            else:
                g[key] = parsed
    if "direction" not in kwargs:
        kwargs["direction"] = g["direction"].key if rng.integers(2) else g["direction"]
    direction = g["direction"]
    if expect != "fail" and any(o <= 0 for o in out_size(g)):
        expect = "fail"
    if "groups" not in kwargs:
        kwargs["groups"] = g["G"]
    for key, name in (("stride", "stride"), ("pad", "padding"), ("dil", "dilation")):
        if name not in kwargs:
            kwargs[name] = g[key] if rng.integers(2) else (g[key][0] if len(set(g[key])) == 1 else g[key])
    if expect == "fail":
        x_shape, w_shape, y_shape = ((g["N"], *g["input"], g["G"] * g["C"]), (g["G"] * g["K"], *g["filter"], g["C"]),
                                     (g["N"], *[max(o, 1) for o in out_size(g)], g["G"] * g["K"]))
    else:
        x_shape, w_shape, y_shape = conv_shapes(g)
    x, w, y = values(x_shape, np_dt, rng), values(w_shape, np_dt, rng), values(y_shape, np_dt, rng)
    if direction is Direction.FWD:
        first, second, result_shape = x, w, y_shape
    elif direction is Direction.BWD_DATA:
        first, second, result_shape = y, w, x_shape
        if case["pass_size"] or mut == "size_arg" or expect == "fail":
            kwargs["input_size"] = g["input"]
        elif tuple(g["input"]) != tuple((o - 1) * s - 2 * p + d * (f - 1) + 1 for o, s, p, d, f in
                                        zip(out_size(g), g["stride"], g["pad"], g["dil"], g["filter"])):
            kwargs["input_size"] = g["input"]
    else:
        first, second, result_shape = x, y, w_shape
        if case["pass_size"] or mut == "size_arg" or expect == "fail":
            kwargs["filter_size"] = g["filter"]
        elif tuple(g["filter"]) != tuple((i + 2 * p - 1 - (o - 1) * s) // d + 1 for i, o, s, p, d in
                                         zip(g["input"], out_size(g), g["stride"], g["pad"], g["dil"])):
            kwargs["filter_size"] = g["filter"]
    if mut == "size_arg":
        name = "input_size" if direction is Direction.BWD_DATA else "filter_size"
        if direction is Direction.FWD:
            name = "input_size"  # ignored by fwd
        v = m["value"]
        kwargs[name] = v
        if isinstance(v, (bytes, bytearray)):
            return  # read as its byte values: bug_bytes_as_sizes
        if direction is not Direction.FWD:
            # a tuple or list of sizes; a bare int is not documented for input_size / filter_size
            parsed = _valid_spatial(v, nd, 1) if isinstance(v, (tuple, list)) else None
            if parsed is None and isinstance(v, (int, np.integer)) and _valid_spatial(v, nd, 1) is not None:
                expect = "either"
                parsed = "int"
            if parsed != "int" and parsed != tuple(g["input" if name == "input_size" else "filter"]):
                expect = "either" if parsed is not None else "fail"
    if mut == "channels":
        which = rng.integers(2)
        arrays = [first, second]
        arrays[which] = values(arrays[which].shape[:-1] + (arrays[which].shape[-1] + 1,), np_dt, rng)
        first, second = arrays
        expect = "either"  # another channel count may be a valid problem; checked after success
    elif mut == "rank":
        first = first.reshape(first.shape + (1,)) if rng.integers(2) else first.reshape(-1)
        expect = "fail"
    elif mut == "spatial":
        second = values(second.shape[:1] + tuple(s + 1 for s in second.shape[1:-1]) + second.shape[-1:], np_dt, rng)
        expect = "either" if direction is not Direction.FWD else "ok"  # fwd: a bigger filter, maybe valid
        if direction is Direction.FWD:
            g["filter"] = tuple(f + 1 for f in g["filter"])
            if any(o <= 0 for o in out_size(g)):
                expect = "fail"
    elif mut == "dtype_mix":
        other = CONV_DTYPES[(CONV_DTYPES.index(dt) + 1) % len(CONV_DTYPES)]
        second = second.astype(numpy_dtype(other))
        expect = "fail"
    elif mut == "foreign":
        fd = (FOREIGN + NO_KERNEL)[m["index"] % len(FOREIGN + NO_KERNEL)]
        first, second = values(first.shape, fd, rng), values(second.shape, fd, rng)
        expect = "fail"
    elif mut == "layout":
        arrays = [first, second]
        arr = arrays[m["which"]]
        kind = m["layout"]
        if kind == "T":
            arr = np.ascontiguousarray(np.moveaxis(arr, -1, 0)).transpose(list(range(1, arr.ndim)) + [0])
        elif kind == "step":
            buf = np.repeat(arr, 2, axis=-1)
            buf[..., ::2] = arr
            arr = buf[..., ::2]
        elif kind == "bcast":
            arr = np.broadcast_to(arr[:1], arr.shape)
            if arr.shape[0] > 1:
                expect = "fail"
        elif kind == "ro":
            arr = arr.copy()
            arr.flags.writeable = False
        elif kind == "rev":
            arr = arr[::-1].copy()[::-1]
        arrays[m["which"]] = arr
        first, second = arrays
    out, alias = None, False
    if mut == "out":
        kind = m["out"]
        out = np.full(result_shape, np.nan, out_dt)
        if kind == "ro":
            out.flags.writeable = False
            expect = "fail"
        elif kind == "alias":
            src, out = alias_pair(first.shape, first.dtype, result_shape, out_dt)
            src[...] = first
            first = src
            expect = "fail"
        elif kind == "shape":
            out = np.full((result_shape[0] + 1,) + result_shape[1:], np.nan, out_dt)
            expect = "fail"
        elif kind == "dtype":
            out = np.full(result_shape, np.nan, np.float64)
            expect = "fail"
        elif kind == "fortran":
            out = np.asfortranarray(out)
            if sum(s > 1 for s in result_shape) > 1:
                expect = "fail"
        elif kind == "list":
            out = out.tolist()
            expect = "fail"
        if out is not None and not isinstance(out, list):
            kwargs["out"] = out
        elif isinstance(out, list):
            kwargs["out"] = out
    kernel_choice = case["kernel"]
    if kernel_choice != "none":
        names = sorted(CONV_KERNELS)
        if kernel_choice == "nope":
            kwargs["kernel"] = "conv_nope"
            expect = "fail"
        elif kernel_choice == "match":
            same = [n for n in names if CONV_KERNELS[n].dtype is dt and CONV_KERNELS[n].direction is direction
                    and CONV_KERNELS[n].ndim == nd]
            kwargs["kernel"] = same[case["kernel_index"] % len(same)]
        else:
            name = names[case["kernel_index"] % len(names)]
            kwargs["kernel"] = name
            k = CONV_KERNELS[name]
            if not (k.dtype is dt and k.direction is direction and k.ndim == nd):
                expect = "fail" if expect != "either" else "either"
    if case["target"] is not None:
        kwargs["target"] = case["target"]
        if case["target"] != "cpu":
            expect = "either" if ("conv", case["target"]) in BUILT else "fail"
    inputs = frozen([first, second])
    ok, result = attempt(lambda: td.conv(first, second, **kwargs), expect, "td.conv")
    unchanged(inputs, "td.conv")
    if not ok:
        return
    # what the call meant, from its actual arguments
    G = int(kwargs["groups"])
    s = _valid_spatial(kwargs["stride"], nd, 1)
    p = _valid_spatial(kwargs["padding"], nd, 0)
    d = _valid_spatial(kwargs["dilation"], nd, 1)
    if direction is Direction.FWD:
        xin, win = np.asarray(first), np.asarray(second)
        problem = td.ConvProblem(xin.shape[0], G, xin.shape[-1] // G, win.shape[0] // G, xin.shape[1:-1],
                                 win.shape[1:-1], s, p, d, direction, dt)
        ref, mag = reference.conv(problem, x=np.array(xin), w=np.array(win))
    elif direction is Direction.BWD_DATA:
        dy, win = np.asarray(first), np.asarray(second)
        problem = td.ConvProblem(dy.shape[0], G, win.shape[-1], dy.shape[-1] // G, tuple(result.shape[1:-1]),
                                 win.shape[1:-1], s, p, d, direction, dt)
        if problem.output_size != tuple(dy.shape[1:-1]):
            raise FuzzFailure(f"td.conv bwd_data: dy {dy.shape} does not fit {problem} but was accepted")
        ref, mag = reference.conv(problem, dy=np.array(dy), w=np.array(win))
    else:
        xin, dy = np.asarray(first), np.asarray(second)
        problem = td.ConvProblem(xin.shape[0], G, xin.shape[-1] // G, dy.shape[-1] // G, xin.shape[1:-1],
                                 tuple(result.shape[1:-1]), s, p, d, direction, dt)
        if problem.output_size != tuple(dy.shape[1:-1]):
            raise FuzzFailure(f"td.conv bwd_weight: dy {dy.shape} does not fit {problem} but was accepted")
        ref, mag = reference.conv(problem, x=np.array(xin), dy=np.array(dy))
    want_shape = (problem.input_shape, problem.weight_shape, problem.output_shape)[
        {Direction.FWD: 2, Direction.BWD_DATA: 0, Direction.BWD_WEIGHT: 1}[direction]]
    if not isinstance(result, np.ndarray) or result.shape != want_shape or result.dtype != out_dt:
        raise FuzzFailure(f"td.conv returned {summary(result)}, expected array{want_shape} {out_dt}")
    if "out" in kwargs and result is not kwargs["out"]:
        raise FuzzFailure("td.conv did not return the out array it was given")
    check_close(result, ref, mag, dt, problem.reduction_length, "td.conv")


# ---- target: problem classes --------------------------------------------------------------

INT_OR_HOSTILE = st.one_of(st.integers(-3, 70), HOSTILE)


@st.composite
def problem_case(draw):
    if draw(st.booleans()):
        fields = {f: draw(INT_OR_HOSTILE if draw(st.integers(0, 3)) == 0 else st.integers(1, 64))
                  for f in ("M", "N", "K")}
        for f in ("lda", "ldb", "ldc", "splits", "raster", "swizzle"):
            if draw(st.integers(0, 2)) == 0:
                fields[f] = draw(INT_OR_HOSTILE)
        if draw(st.integers(0, 2)) == 0:
            fields["dtype"] = draw(st.one_of(st.sampled_from(list(DType) + ["fp32", "bf16", "fp64", "FP16", ""]),
                                             HOSTILE))
        if draw(st.integers(0, 2)) == 0:
            fields["layout"] = draw(st.one_of(st.sampled_from(["rcr", "ccr", "rxr", "RRR"]), HOSTILE))
        if draw(st.integers(0, 3)) == 0:
            fields["alpha"] = draw(st.one_of(st.floats(allow_nan=True), st.sampled_from([None, "1", 2, np.float16(1)])))
        return "gemm", fields
    nd = draw(st.integers(0, 4))
    fields = {f: draw(INT_OR_HOSTILE if draw(st.integers(0, 3)) == 0 else st.integers(1, 16))
              for f in ("N", "G", "C", "K")}

    def spatial(low, high):
        return draw(st.one_of(st.tuples(*[st.integers(low, high)] * nd) if nd else st.just(()),
                              st.integers(low, high), HOSTILE,
                              st.lists(INT_OR_HOSTILE, min_size=0, max_size=4).map(tuple)))
    fields["input_size"] = spatial(1, 16) if draw(st.integers(0, 3)) else draw(HOSTILE)
    fields["filter_size"] = spatial(1, 4)
    for f, low in (("stride", 1), ("padding", 0), ("dilation", 1)):
        if draw(st.booleans()):
            fields[f] = spatial(low, 3)
    if draw(st.integers(0, 2)) == 0:
        fields["direction"] = draw(st.one_of(st.sampled_from(list(Direction) + ["fwd", "bwd_weight", "bwd", 1]),
                                             HOSTILE))
    if draw(st.integers(0, 2)) == 0:
        fields["dtype"] = draw(st.one_of(st.sampled_from(list(DType) + ["fp16", "int8"]), HOSTILE))
    if draw(st.integers(0, 2)) == 0:
        fields["split_k"] = draw(INT_OR_HOSTILE)
    return "conv", fields


def _enum_ok(cls, value) -> bool:
    if isinstance(value, cls):
        return True
    if isinstance(value, str):
        return any(value in (m.key, getattr(m, "token", m.key)) for m in cls)
    return False


def _int_in(value, low, high) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and \
        low <= int(value) <= high


def conv_reference(problem, x, w, y):
    """The float64 reference of a conv problem's written tensor from the other two
    (fwd: y from x, w; bwd_data: dx from dy, w; bwd_weight: dw from x, dy) and its magnitude."""
    if problem.direction is Direction.FWD:
        return reference.conv(problem, x=x, w=w)
    if problem.direction is Direction.BWD_DATA:
        return reference.conv(problem, dy=y, w=w)
    return reference.conv(problem, x=x, dy=y)


# what a size argument is never read as (an integer or a sequence of integers only)
NOT_SIZES = (str, bytes, bytearray, memoryview, dict, set, frozenset)


def _alpha_ok(value) -> bool:
    """alpha as GemmProblem takes it: a real number (no bool), finite, within float32."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    try:
        x = float(value)
    except OverflowError:
        return False
    return math.isfinite(x) and abs(x) <= 3.4028234663852886e38


def predict_problem(op, fields) -> str:
    """'ok' or 'fail': what the problem class must do with these fields (its documented checks)."""
    if op == "gemm":
        from tiledispatch.codegen import Layout
        ok = all(_int_in(fields[f], 1, INT64_MAX) for f in ("M", "N", "K"))
        ok &= all(_int_in(fields[f], 0, INT64_MAX) for f in ("lda", "ldb", "ldc") if f in fields)
        ok &= all(_int_in(fields[f], 0, INT32_MAX) for f in ("splits", "raster", "swizzle") if f in fields)
        ok &= _enum_ok(DType, fields.get("dtype", DType.FP32)) and _enum_ok(Layout, fields.get("layout", "rcr"))
        ok &= _alpha_ok(fields.get("alpha", 1.0))
        return "ok" if ok else "fail"
    ok = all(_int_in(fields[f], 1, INT32_MAX) for f in ("N", "G", "C", "K"))
    ok &= _int_in(fields.get("split_k", 0), 0, INT32_MAX)
    ok &= _enum_ok(DType, fields.get("dtype", DType.FP32)) and _enum_ok(Direction, fields.get("direction", "fwd"))
    size = fields["input_size"]
    if isinstance(size, NOT_SIZES):
        return "fail"
    try:
        nd = len(tuple(size))
    except TypeError:
        return "fail"
    if nd not in (1, 2, 3):
        return "fail"
    for f, low in (("input_size", 1), ("filter_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1)):
        v = fields.get(f, 0 if f == "padding" else 1)
        if isinstance(v, NOT_SIZES):
            return "fail"
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            v = (v,) * nd
        try:
            v = tuple(v)
        except TypeError:
            return "fail"
        ok &= len(v) == nd and all(_int_in(x, low, INT32_MAX) for x in v)
    return "ok" if ok else "fail"


def fuzz_problem(case):
    op, fields = case
    note("problem", op=op, fields=fields)
    cls = td.GemmProblem if op == "gemm" else td.ConvProblem
    expect = predict_problem(op, fields)
    if op == "conv":
        fields = dict(fields)
        args = [fields.pop(f) for f in ("N", "G", "C", "K", "input_size", "filter_size")]
        ok, p = attempt(lambda: cls(*args, **fields), expect, f"ConvProblem (expected {expect})")
        fields.update(zip(("N", "G", "C", "K", "input_size", "filter_size"), args))
    else:
        ok, p = attempt(lambda: cls(**fields), expect, f"GemmProblem (expected {expect})")
    if not ok:
        return
    # accepted: every integer field a Python int inside its C type, and the C struct faithful
    if op == "gemm":
        for f, low, high in (("M", 1, INT64_MAX), ("N", 1, INT64_MAX), ("K", 1, INT64_MAX), ("lda", 0, INT64_MAX),
                             ("ldb", 0, INT64_MAX), ("ldc", 0, INT64_MAX), ("splits", 0, INT32_MAX),
                             ("raster", 0, INT32_MAX), ("swizzle", 0, INT32_MAX)):
            v = getattr(p, f)
            if type(v) is not int or not low <= v <= high:
                raise FuzzFailure(f"GemmProblem accepted {f}={fields.get(f)!r} as {v!r}")
            if f in fields and not _valid_int(fields[f], -2**63) and not isinstance(fields[f], (int, np.integer)):
                raise FuzzFailure(f"GemmProblem accepted the non-integer {f}={fields[f]!r}")
            if f in fields and isinstance(fields[f], (bool, np.bool_)):
                raise FuzzFailure(f"GemmProblem accepted the bool {f}={fields[f]!r}")
        ok, c = attempt(p.to_c, "either", "GemmProblem.to_c")
        if ok and (c.M, c.N, c.K, c.lda, c.ldb, c.ldc, c.splits, c.dtype, c.layout) != \
                (p.M, p.N, p.K, p.lda, p.ldb, p.ldc, p.splits, p.dtype.code, p.layout.code):
            raise FuzzFailure(f"GemmProblem.to_c does not hold the problem's values: {p}")
        if ok:
            need = p.required_elements()
            if any(n < 1 for n in need):
                raise FuzzFailure(f"required_elements {need} for {p}")
        return
    for f in ("N", "G", "C", "K", "split_k"):
        v = getattr(p, f)
        if type(v) is not int or not (0 if f == "split_k" else 1) <= v <= INT32_MAX:
            raise FuzzFailure(f"ConvProblem accepted {f}={fields.get(f)!r} as {v!r}")
        if f in fields and isinstance(fields[f], (bool, np.bool_)):
            raise FuzzFailure(f"ConvProblem accepted the bool {f}={fields[f]!r}")
    for f, low in (("input_size", 1), ("filter_size", 1), ("stride", 1), ("padding", 0), ("dilation", 1)):
        v = getattr(p, f)
        if not isinstance(v, tuple) or len(v) != p.ndim or p.ndim not in (1, 2, 3) or \
                any(type(x) is not int or not low <= x <= INT32_MAX for x in v):
            raise FuzzFailure(f"ConvProblem accepted {f}={fields.get(f)!r} as {v!r}")
    c = p.to_c()
    if (c.base.N, c.base.G, c.base.C, c.base.K, c.ndim, c.dtype, c.base.direction, c.base.split_k) != \
            (p.N, p.G, p.C, p.K, p.ndim, p.dtype.code, p.direction.code, p.split_k):
        raise FuzzFailure(f"ConvProblem.to_c does not hold the problem's values: {p}")
    if tuple((c.base.input_d, c.base.input_h, c.base.input_w)[3 - p.ndim:]) != p.input_size:
        raise FuzzFailure(f"ConvProblem.to_c input size differs: {p}")


# ---- target: Dispatcher methods -------------------------------------------------------------

@st.composite
def dispatcher_case(draw):
    op = draw(st.sampled_from(["gemm", "conv"]))
    method = draw(st.sampled_from(["select", "is_supported", "workspace_size", "cost", "model_select", "tuned",
                                   "run", "run", "run", "ctor"]))
    kernel = draw(st.sampled_from(["none", "none", "match", "any", "nope", "", "other_op", "long", "nul",
                                   "config", "wrong_type_problem"]))
    if op == "gemm":
        geom = dict(M=draw(DIM), N=draw(DIM), K=draw(DIM), dtype=draw(st.sampled_from(GEMM_DTYPES)),
                    layout=draw(st.sampled_from(["rcr", "rrr", "crr", "ccr"])),
                    pads=draw(st.tuples(*[st.sampled_from([0, 0, 0, 1, 5])] * 3)),
                    splits=draw(st.sampled_from([0, 0, 1, 2, 3, 7, 64, 4096, 4097, INT32_MAX])),
                    raster=draw(st.sampled_from([0, 1, 2, 3, 1000])),
                    swizzle=draw(st.sampled_from([0, 1, 2, 4, 8, 3, 16])),
                    alpha=draw(st.sampled_from([1.0, 0.5, -1.0, 0.0])))
    else:
        geom = draw(conv_geometry())
        geom["split_k"] = draw(st.sampled_from([0, 0, 0, 1, 2, 3, 4096, 4097, INT32_MAX]))
    arrays = draw(st.sampled_from(["ok"] * 6 + ["short", "dtype", "ro", "alias", "none", "workspace_small",
                                                "workspace_ok", "list", "negative_stride"]))
    return dict(op=op, method=method, kernel=kernel, geom=geom, arrays=arrays, index=draw(st.integers(0, 999)),
                seed=draw(SEED))


def _kernel_arg(case, registry_names, matching):
    k, i = case["kernel"], case["index"]
    if k == "none":
        return None, "ok"
    if k == "match":
        return (matching[i % len(matching)], "ok") if matching else (None, "ok")
    if k == "any":
        name = registry_names[i % len(registry_names)]
        return name, "ok" if name in matching else "fail"
    if k == "config":
        name = registry_names[i % len(registry_names)]
        kconf = (GEMM_KERNELS if case["op"] == "gemm" else CONV_KERNELS)[name]
        return kconf, "ok" if name in matching else "fail"
    if k == "nope":
        return "nope_kernel", "fail"
    if k == "":
        return "", "either"
    if k == "other_op":
        other = sorted(CONV_KERNELS if case["op"] == "gemm" else GEMM_KERNELS)
        return other[i % len(other)], "fail"
    if k == "long":
        return "x" * 5000, "fail"
    if k == "nul":
        base = matching[i % len(matching)] if matching else "k"
        return base + "\x00junk", "either"
    return None, "ok"


def fuzz_dispatcher(case):
    note("dispatcher", **case)
    rng = np.random.default_rng(case["seed"])
    op, g, method = case["op"], case["geom"], case["method"]
    if method == "ctor":
        ops = [op, "GEMM", "", None, 5, "conv2d"]
        targets = ["cpu", None, "nope", "", 5, "sm_90a", "gfx942"]
        o, t = ops[case["index"] % len(ops)], targets[(case["index"] // 7) % len(targets)]
        expect = "ok" if o in ("gemm", "conv") and (t in ("cpu", None, "") or (o, t) in BUILT) else \
            "either" if o in ("gemm", "conv") and t in ("sm_90a", "gfx942") else "fail"
        ok, made = attempt(lambda: td.Dispatcher(o, t), expect, f"td.Dispatcher({o!r}, {t!r})")
        if ok and (made.op != o or made.target != "cpu" and t in ("cpu", None, "")):
            raise FuzzFailure(f"td.Dispatcher({o!r}, {t!r}) gave {made!r}")
        return
    d = GEMM if op == "gemm" else CONV
    if op == "gemm":
        lay = g["layout"]
        M, N, K = g["M"], g["N"], g["K"]
        ar, br = lay[0] == "r", lay[1] == "r"
        lda = (K if ar else M) + g["pads"][0]
        ldb = (N if br else K) + g["pads"][1]
        ldc = N + g["pads"][2]
        problem = td.GemmProblem(M, N, K, g["dtype"], lay, lda if g["pads"][0] else 0, ldb if g["pads"][1] else 0,
                                 ldc if g["pads"][2] else 0, g["alpha"], g["splits"], g["raster"], g["swizzle"])
        matching = sorted(n for n, k in GEMM_KERNELS.items() if k.dtype is g["dtype"] and k.layout.key == lay)
        supported = bool(matching)
        kred = K
        if g["splits"] > 4096 or g["raster"] > 2 or g["swizzle"] not in (0, 1, 2, 4, 8):
            supported = False  # the C checks of the knobs
    else:
        problem = conv_problem(g, g["split_k"])
        matching = sorted(n for n, k in CONV_KERNELS.items() if k.dtype is g["dtype"]
                          and k.direction is g["direction"] and k.ndim == g["ndim"])
        supported = bool(matching) and all(o > 0 for o in problem.output_size) and g["split_k"] <= 4096
        kred = problem.reduction_length
    names = sorted(GEMM_KERNELS if op == "gemm" else CONV_KERNELS)
    kernel, expect = _kernel_arg(case, names, matching)
    if not supported:
        expect = "fail" if method in ("select", "model_select", "run", "cost", "workspace_size") else "either"
    if case["kernel"] == "wrong_type_problem":
        other = conv_problem(dict(ndim=1, N=1, G=1, C=1, K=1, input=(4,), filter=(3,), stride=(1,), pad=(0,),
                                  dil=(1,), direction=Direction.FWD, dtype=DType.FP32)) if op == "gemm" \
            else td.GemmProblem(4, 4, 4)
        ok, _ = attempt(lambda: getattr(d, method if method != "run" else "select")(other), "fail",
                        f"Dispatcher({op}).{method}(wrong problem type)")
        return
    what = f"Dispatcher({op}).{method}"
    if method == "select":
        ok, name = attempt(lambda: d.select(problem), "ok" if supported else "fail", what)
        if ok and name not in matching:
            raise FuzzFailure(f"{what} picked {name!r}, not one of the matching kernels {matching}")
        return
    if method == "model_select":
        ok, name = attempt(lambda: d.model_select(problem), "ok" if supported else "fail", what)
        if ok and name not in matching:
            raise FuzzFailure(f"{what} picked {name!r}, not one of the matching kernels {matching}")
        return
    if method == "tuned":
        ok, name = attempt(lambda: d.tuned(problem), "either", what)
        if ok and name is not None and name not in matching:
            raise FuzzFailure(f"{what} gave {name!r}, not one of the matching kernels {matching}")
        return
    if method == "is_supported":
        ok, yes = attempt(lambda: d.is_supported(problem, kernel), "either" if expect != "ok" else "ok", what)
        if ok:
            if not isinstance(yes, bool):
                raise FuzzFailure(f"{what} returned {yes!r}")
            kname = kernel if isinstance(kernel, str) or kernel is None else kernel.name
            if kernel is None and yes != supported:
                raise FuzzFailure(f"{what} says {yes}, but matching kernels are {matching} (supported={supported})")
            if kernel is not None and yes and kname not in matching and "\x00" not in kname and kname != "":
                raise FuzzFailure(f"{what} says kernel {kname} supports a problem of another kind")
        return
    if method == "cost":
        ok, cost = attempt(lambda: d.cost(problem, kernel), "either", what)
        if ok and cost is not None and (not isinstance(cost, float) or not math.isfinite(cost) or cost < 0):
            raise FuzzFailure(f"{what} returned {cost!r}")
        return
    if method == "workspace_size":
        ok, size = attempt(lambda: d.workspace_size(problem, kernel), "either" if expect != "ok" else expect, what)
        if ok and (not isinstance(size, int) or size < 0 or size > 1 << 34):
            raise FuzzFailure(f"{what} returned {size!r}")
        return
    # run: real arrays in the problem's layout, some of them wrong
    in_dt, out_dt = numpy_dtype(problem.dtype), numpy_dtype(problem.dtype.out)
    if op == "gemm":
        a = values((M, K), in_dt, rng)
        b = values((K, N), in_dt, rng)
        a_buf = np.zeros((M, lda), in_dt) if ar else np.zeros((K, lda), in_dt)
        if ar:
            a_buf[:, :K] = a
        else:
            a_buf[:, :M] = a.T
        b_buf = np.zeros((K, ldb), in_dt) if br else np.zeros((N, ldb), in_dt)
        if br:
            b_buf[:, :N] = b
        else:
            b_buf[:, :K] = b.T
        c_buf = np.full((M, ldc), np.nan, out_dt)
        tensors = [a_buf, b_buf, c_buf]
        written = 2
    else:
        shapes = (problem.input_shape, problem.weight_shape, problem.output_shape)
        written = {Direction.FWD: 2, Direction.BWD_DATA: 0, Direction.BWD_WEIGHT: 1}[problem.direction]
        shapes = [tuple(max(x, 1) for x in s) for s in shapes]  # an empty output: refused anyway
        tensors = [np.full(s, np.nan, out_dt) if i == written else values(s, in_dt, rng) for i, s in enumerate(shapes)]
    kw = {}
    mode = case["arrays"]
    victim = case["index"] % 3
    if mode == "short":
        flat = tensors[victim].reshape(-1)
        need = problem.required_elements()[victim]  # the last row needs no padding
        tensors[victim] = flat[:max(min(need, flat.size) - 1 - case["index"] % 7, 0)]
        expect = "fail"
    elif mode == "dtype":
        tensors[victim] = tensors[victim].astype(np.float64)
        expect = "fail"
    elif mode == "ro":
        tensors[written].flags.writeable = False
        expect = "fail"
    elif mode == "alias":
        src = (written + 1) % 3
        n = min(tensors[src].nbytes, tensors[written].nbytes)
        if n:
            view = tensors[written].reshape(-1).view(np.uint8)
            tensors[src] = view[:tensors[src].nbytes].view(tensors[src].dtype) if \
                tensors[src].nbytes <= view.nbytes and tensors[src].nbytes % tensors[src].itemsize == 0 else tensors[src]
            if np.shares_memory(tensors[src], tensors[written]):
                expect = "fail"
    elif mode == "none":
        tensors[victim] = None
        expect = "fail"
    elif mode == "workspace_small":
        kw = dict(workspace=np.zeros(8, np.uint8), workspace_bytes=64)
        expect = "fail"
    elif mode == "workspace_ok":
        kw = dict(workspace=np.zeros(1 << 16, np.uint8))
        expect = "either" if expect != "fail" else "fail"
    elif mode == "list":
        tensors[victim] = tensors[victim].tolist()
        expect = "fail"
    elif mode == "negative_stride":
        if tensors[victim].size > 1:
            tensors[victim] = tensors[victim].reshape(-1)[::-1]
            expect = "fail"
    if not supported:
        expect = "fail"
    inputs = frozen([t for i, t in enumerate(tensors) if i != written])
    ok, ms = attempt(lambda: d.run(problem, *tensors, kernel=kernel, **kw), expect, what)
    unchanged(inputs, what)
    if not ok:
        return
    if not isinstance(ms, float) or ms < 0 or not math.isfinite(ms):
        raise FuzzFailure(f"{what} returned the time {ms!r}")
    if mode in ("alias", "workspace_ok", "negative_stride") and expect != "ok" and mode != "workspace_ok":
        return
    if op == "gemm":
        result = tensors[2][:, :N]
        ref, mag = reference.gemm(a, b)
        alpha = float(np.float32(g["alpha"]))
        check_close(result, alpha * ref, abs(alpha) * mag, problem.dtype, kred, what)
        if g["pads"][2] and not np.isnan(tensors[2][:, N:].astype(np.float32)).all():
            raise FuzzFailure(f"{what} wrote outside C's columns")
    else:
        x, w, y = tensors
        ref, mag = conv_reference(problem, x, w, y)
        check_close(tensors[written], ref, mag, problem.dtype, kred, what)


# ---- target: the C ABI through ctypes ----------------------------------------------------------

I64 = st.one_of(st.integers(-2, 70), st.sampled_from([0, -1, 2**31, 2**32 + 2, 2**62 + 1, 2**63 - 1, -2**63,
                                                       2**40, 2**21]))
I32 = st.one_of(st.integers(-2, 8), st.sampled_from([INT32_MAX, -2**31, 4096, 4097, 2**16, 100]))
FLOAT = st.one_of(st.sampled_from([1.0, 0.5, -1.0, 0.0]), st.floats(allow_nan=True, allow_infinity=True, width=32))


@st.composite
def abi_case(draw):
    op = draw(st.sampled_from(["gemm", "conv"]))
    small = draw(st.integers(0, 2)) > 0  # mostly a valid small problem with some hostile fields
    if op == "gemm":
        fields = dict(M=draw(DIM), N=draw(DIM), K=draw(DIM), dtype=draw(st.integers(0, 4)), layout=draw(st.integers(0, 3)),
                      lda=0, ldb=0, ldc=0, alpha=draw(st.sampled_from([1.0, 0.5, -1.0])), splits=draw(st.integers(0, 9)),
                      raster=draw(st.integers(0, 2)), swizzle=draw(st.sampled_from([0, 1, 2, 4, 8])))
        if draw(st.booleans()):
            for f in ("lda", "ldb", "ldc"):
                fields[f] = draw(st.sampled_from([0, 0, 70, 80, 128]))
        hostile = {"M": I64, "N": I64, "K": I64, "lda": I64, "ldb": I64, "ldc": I64, "dtype": I32, "layout": I32,
                   "splits": I32, "raster": I32, "swizzle": I32, "alpha": FLOAT}
    else:
        g = draw(conv_geometry())
        nd = g["ndim"]
        pad3 = lambda t, fill: (fill,) * (3 - nd) + tuple(t)  # noqa: E731
        fields = dict(N=g["N"], G=g["G"], C=g["C"], K=g["K"], ndim=nd, dtype=g["dtype"].code,
                      direction=g["direction"].code, split_k=draw(st.sampled_from([0, 0, 0, 1, 3])))
        for names, vals in ((("input_d", "input_h", "input_w"), pad3(g["input"], 1)),
                            (("filter_z", "filter_y", "filter_x"), pad3(g["filter"], 1)),
                            (("stride_d", "stride_h", "stride_w"), pad3(g["stride"], 1)),
                            (("pad_d", "pad_h", "pad_w"), pad3(g["pad"], 0)),
                            (("dilation_d", "dilation_h", "dilation_w"), pad3(g["dil"], 1))):
            fields.update(zip(names, vals))
        hostile = {f: I32 for f in fields}
    n_hostile = draw(st.integers(0, 1 if small else 6))
    for f in draw(st.lists(st.sampled_from(sorted(hostile)), min_size=n_hostile, max_size=n_hostile, unique=True)):
        fields[f] = draw(hostile[f])
    fn = draw(st.sampled_from(["is_supported", "select", "tuned", "model_select", "cost", "workspace_size",
                               "run_host", "run_host", "run_host", "run", "legacy"]))
    kernel = draw(st.sampled_from(["null", "null", "empty", "match", "any", "nope"]))
    return dict(op=op, fields=fields, fn=fn, kernel=kernel, index=draw(st.integers(0, 999)), seed=draw(SEED),
                null=draw(st.sampled_from([None] * 8 + [0, 1, 2])), size=draw(st.sampled_from([256] * 6 + [1, 8, 0])))


def _gemm_required(f):
    """(a, b, c) elements of a valid small gemm problem, or None where the problem is not one."""
    M, N, K = f["M"], f["N"], f["K"]
    if not (1 <= M <= 256 and 1 <= N <= 256 and 1 <= K <= 256) or not 0 <= f["layout"] <= 3:
        return None
    if not (0 <= f["raster"] <= 2) or f["swizzle"] not in (0, 1, 2, 4, 8):
        return None  # the C checks of the cuda knobs
    a_row = f["layout"] in (0, 1)  # rcr rrr crr ccr: A r r c c, B c r r c
    b_row = f["layout"] in (1, 2)
    lda = f["lda"] or (K if a_row else M)
    ldb = f["ldb"] or (N if b_row else K)
    ldc = f["ldc"] or N
    if not (0 <= f["lda"] <= 4096 and 0 <= f["ldb"] <= 4096 and 0 <= f["ldc"] <= 4096):
        return None
    if lda < (K if a_row else M) or ldb < (N if b_row else K) or ldc < N:
        return "bad_ld"
    a = (M - 1) * lda + K if a_row else (K - 1) * lda + M
    b = (K - 1) * ldb + N if b_row else (N - 1) * ldb + K
    return (a, b, (M - 1) * ldc + N), a_row, b_row, lda, ldb, ldc


def _conv_problem_from(f):
    """The ConvProblem a valid small TdConvProblem describes, else None."""
    nd = f["ndim"]
    if nd not in (1, 2, 3) or f["dtype"] not in [d.code for d in CONV_DTYPES] or f["direction"] not in (0, 1, 2):
        return None
    sl = slice(3 - nd, 3)
    try:
        p = td.ConvProblem(f["N"], f["G"], f["C"], f["K"],
                           (f["input_d"], f["input_h"], f["input_w"])[sl],
                           (f["filter_z"], f["filter_y"], f["filter_x"])[sl],
                           (f["stride_d"], f["stride_h"], f["stride_w"])[sl],
                           (f["pad_d"], f["pad_h"], f["pad_w"])[sl],
                           (f["dilation_d"], f["dilation_h"], f["dilation_w"])[sl],
                           Direction.from_code(f["direction"]) if hasattr(Direction, "from_code")
                           else [d for d in Direction if d.code == f["direction"]][0],
                           DType.from_code(f["dtype"]), f["split_k"])
    except ALLOWED:
        return None
    unused = [(f["input_d"], f["filter_z"], f["stride_d"], f["dilation_d"]), (f["input_h"], f["filter_y"], f["stride_h"],
                                                                             f["dilation_h"])][:3 - nd]
    if any(v != 1 for t in unused for v in t) or any(v != 0 for v in (f["pad_d"], f["pad_h"])[:3 - nd]):
        return None  # unused dims not 1 / 0: the library may refuse or ignore them
    if any(o <= 0 for o in p.output_size) or max(p.required_elements()) > 1 << 22 or p.split_k > 4096:
        return None
    if any(v > 64 for v in p.input_size + p.padding + p.stride + p.dilation):
        return None
    return p


def _gemm_invalid(f) -> bool:
    """True where the C checks must refuse the TdGemmProblem (the overflow checks aside)."""
    if min(f["M"], f["N"], f["K"]) <= 0 or not 0 <= f["dtype"] < len(DType) or not 0 <= f["layout"] <= 3:
        return True
    if not 0 <= f["splits"] <= 4096 or not 0 <= f["raster"] <= 2 or f["swizzle"] not in (0, 1, 2, 4, 8):
        return True
    a_row, b_row = f["layout"] in (0, 1), f["layout"] in (1, 2)
    mins = (f["K"] if a_row else f["M"], f["N"] if b_row else f["K"], f["N"])
    return any(ld < 0 or (ld and ld < low) for ld, low in zip((f["lda"], f["ldb"], f["ldc"]), mins))


def _conv_invalid(f) -> bool:
    """True where the C checks must refuse the TdConvProblem (the overflow checks aside)."""
    nd = f["ndim"]
    if nd not in (1, 2, 3) or not 0 <= f["dtype"] < len(DType) or f["direction"] not in (0, 1, 2):
        return True
    if min(f["N"], f["G"], f["C"], f["K"]) <= 0 or not 0 <= f["split_k"] <= 4096:
        return True
    for dim in ("dhw"[3 - nd:]):
        z = {"d": "z", "h": "y", "w": "x"}[dim]
        i, fi, s, p, d = (f["input_" + dim], f["filter_" + z], f["stride_" + dim], f["pad_" + dim],
                          f["dilation_" + dim])
        if i <= 0 or fi <= 0 or s <= 0 or d <= 0 or p < 0 or i + 2 * p - d * (fi - 1) - 1 < 0:
            return True
    return False


def fuzz_abi(case):
    note("abi", **case)
    op, f, fn = case["op"], case["fields"], case["fn"]
    lib = _ffi.library(op, "cpu")
    names = sorted(GEMM_KERNELS if op == "gemm" else CONV_KERNELS)
    if op == "gemm":
        p = _ffi.TdGemmProblem()
        for k, v in f.items():
            setattr(p, k, v)
        valid = _gemm_required(f)
        kinds = {(k.dtype.code, k.layout.code): n for n, k in GEMM_KERNELS.items()}
        matching = [n for n, k in GEMM_KERNELS.items() if (k.dtype.code, k.layout.code) == (f["dtype"], f["layout"])]
        if not (0 <= f["splits"] <= 4096):
            valid = None
    else:
        p = _ffi.TdConvProblem()
        for k, v in f.items():
            setattr(p if k in ("ndim", "dtype") else p.base, k, v)
        cp = _conv_problem_from(f)
        valid = cp
        matching = [n for n, k in CONV_KERNELS.items() if cp is not None and k.dtype is cp.dtype and
                    k.direction is cp.direction and k.ndim == cp.ndim]
    invalid = _gemm_invalid(f) if op == "gemm" else _conv_invalid(f)
    ref_p = ctypes.byref(p)
    kk = case["kernel"]
    kernel = {"null": None, "empty": b"", "nope": b"nope_kernel"}.get(kk)
    if kk == "match":
        kernel = matching[case["index"] % len(matching)].encode() if matching else None
    elif kk == "any":
        kernel = names[case["index"] % len(names)].encode()
    what = f"{op} {fn}"

    def status_ok(status, allowed):
        if status not in allowed:
            raise FuzzFailure(f"{what}: status {status}, expected one of {allowed}")
        if status < 0 and not lib.last_error().strip():
            raise FuzzFailure(f"{what}: status {status} with no td_last_error message")

    pre = op if op == "gemm" else "conv"
    if fn in ("select", "tuned", "model_select"):
        size = case["size"]
        buf = ctypes.create_string_buffer(max(size, 1))
        status = getattr(lib, f"td_{pre}_{fn}")(ref_p, buf if size else None, size)
        status_ok(status, (0, -1, -2, -3))
        if status == 0 and invalid and fn != "tuned":
            raise FuzzFailure(f"{what}: a kernel for an invalid problem: {f}")
        if status == 0 and size >= 256:
            name = buf.value.decode()
            if name and name not in names:
                raise FuzzFailure(f"{what}: returned the unknown kernel {name!r}")
            if fn != "tuned" and not name:
                raise FuzzFailure(f"{what}: success with an empty name")
            if name and valid is not None and valid != "bad_ld" and name not in matching:
                raise FuzzFailure(f"{what}: picked {name} for a problem of another kind ({f})")
        if status == 0 and 0 < size < 256:
            if len(buf.raw[:size].split(b"\x00")[0]) >= size:
                raise FuzzFailure(f"{what}: name not NUL-terminated within {size} bytes")
        if fn in ("select", "model_select") and valid not in (None, "bad_ld") and matching and size >= 256 \
                and status != 0:
            raise FuzzFailure(f"{what}: a valid small problem with kernels {matching[:2]}... refused: "
                              f"{status} {lib.last_error()}")
        return
    if fn == "is_supported":
        status = getattr(lib, f"td_{pre}_is_supported")(ref_p, kernel)
        status_ok(status, (0, 1, -1, -2, -3))
        if status == 1 and invalid:
            raise FuzzFailure(f"{what}: says an invalid problem is supported: {f}")
        return
    if fn == "cost":
        cost = ctypes.c_double(-1.0)
        status = getattr(lib, f"td_{pre}_cost")(ref_p, kernel, ctypes.byref(cost))
        status_ok(status, (0, -1, -2, -3))
        if status == 0 and (not math.isfinite(cost.value) or cost.value < 0):
            raise FuzzFailure(f"{what}: cost {cost.value}")
        if status == 0 and invalid:
            raise FuzzFailure(f"{what}: a cost for an invalid problem: {f}")
        return
    if fn == "workspace_size":
        size = ctypes.c_size_t(12345)
        status = getattr(lib, f"td_{pre}_workspace_size")(ref_p, kernel, ctypes.byref(size))
        status_ok(status, (0, -1, -2, -3))
        if status == 0 and size.value > 1 << 34:
            raise FuzzFailure(f"{what}: workspace {size.value} bytes")
        if status == 0 and invalid:
            raise FuzzFailure(f"{what}: a workspace size for an invalid problem: {f}")
        return
    if fn == "legacy":
        if op == "gemm":
            M, N, K = f["M"], f["N"], f["K"]
            status = lib.dispatcher_is_supported(M, N, K)
            status_ok(status, (0, 1, -1, -2))
            if valid is None or valid == "bad_ld" or f["layout"] != 0:
                return
            a, b = values((M, K), np.float32, np.random.default_rng(case["seed"])), None
            b = values((K, N), np.float32, np.random.default_rng(case["seed"] + 1))
            c = np.full((M, N), np.nan, np.float32)
            bt = np.ascontiguousarray(b.T)  # rcr: B column-major
            status = lib.dispatcher_run_gemm(a.ctypes.data, bt.ctypes.data, c.ctypes.data, M, N, K, None)
            status_ok(status, (0,))
            ref, mag = reference.gemm(a, b)
            check_close(c, ref, mag, DType.FP32, K, what)
        else:
            status = lib.conv_dispatcher_is_supported(ctypes.byref(p.base))
            status_ok(status, (0, 1, -1, -2))
        return
    # run_host / run: buffers sized by our own reading of the problem; NULL where asked
    rng = np.random.default_rng(case["seed"])
    time_ms = ctypes.c_float(0.0)
    fn_c = getattr(lib, f"td_{pre}_run_host") if fn == "run_host" else getattr(lib, f"td_{pre}_run")
    extra = () if fn == "run_host" else (None, 0, None)
    if op == "gemm":
        if valid is None or valid == "bad_ld" or f["dtype"] not in [d.code for d in GEMM_DTYPES]:
            # not a problem we can size buffers for: NULL pointers, which must be refused cleanly
            status = fn_c(ref_p, kernel, None, None, None, *extra, ctypes.byref(time_ms))
            status_ok(status, (-1, -2, -3))
            return
        (na, nb, nc), a_row, b_row, lda, ldb, ldc = valid
        dt = DType.from_code(f["dtype"])
        in_dt, out_dt = numpy_dtype(dt), numpy_dtype(dt.out)
        a_buf, b_buf = values(na, in_dt, rng), values(nb, in_dt, rng)
        c_buf = np.full(nc, np.nan, out_dt)
        bufs = [a_buf, b_buf, c_buf]
        if case["null"] is not None:
            bufs[case["null"]] = None
        ptrs = [None if x is None else x.ctypes.data for x in bufs]
        status = fn_c(ref_p, kernel, *ptrs, *extra, ctypes.byref(time_ms))
        if case["null"] is not None:
            status_ok(status, (-1, -2, -3))
            return
        ok_kernel = kernel in (None, b"") or kernel.decode() in matching
        status_ok(status, (0,) if ok_kernel and matching else (0, -1, -2, -3))
        if status != 0:
            return
        if not (ok_kernel and matching):
            raise FuzzFailure(f"{what}: ran kernel {kernel} on a problem of another kind ({f})")
        M, N, K = f["M"], f["N"], f["K"]
        idx = lambda r, c, row, ld: r * ld + c if row else c * ld + r  # noqa: E731
        ii = np.arange(M)[:, None]
        kk_ = np.arange(K)[None, :]
        A = a_buf[idx(ii, kk_, a_row, lda)]
        B = b_buf[idx(np.arange(K)[:, None], np.arange(N)[None, :], b_row, ldb)]
        C = c_buf[(np.arange(M)[:, None] * ldc + np.arange(N)[None, :])]
        alpha = float(np.float32(f["alpha"]))
        ref, mag = reference.gemm(A, B)
        check_close(C, alpha * ref, abs(alpha) * mag, dt, K, what)
        mask = np.ones(nc, bool)
        mask[(np.arange(M)[:, None] * ldc + np.arange(N)[None, :]).reshape(-1)] = False
        if mask.any() and not np.isnan(c_buf[mask].astype(np.float32)).all():
            raise FuzzFailure(f"{what}: wrote outside C's elements (ldc {ldc})")
        return
    cp = valid
    if cp is None:
        status = fn_c(ref_p, kernel, None, None, None, *extra, ctypes.byref(time_ms))
        status_ok(status, (-1, -2, -3))
        return
    shapes = (cp.input_shape, cp.weight_shape, cp.output_shape)
    written = {Direction.FWD: 2, Direction.BWD_DATA: 0, Direction.BWD_WEIGHT: 1}[cp.direction]
    in_dt, out_dt = numpy_dtype(cp.dtype), numpy_dtype(cp.dtype.out)
    bufs = [np.full(s, np.nan, out_dt) if i == written else values(s, in_dt, rng) for i, s in enumerate(shapes)]
    ptrs = [x.ctypes.data for x in bufs]
    if case["null"] is not None:
        ptrs[case["null"]] = None
    status = fn_c(ref_p, kernel, *ptrs, *extra, ctypes.byref(time_ms))
    if case["null"] is not None:
        status_ok(status, (-1, -2, -3))
        return
    ok_kernel = kernel in (None, b"") or kernel.decode() in matching
    status_ok(status, (0,) if ok_kernel and matching and cp.split_k <= 1 else (0, -1, -2, -3))
    if status != 0:
        return
    if not (ok_kernel and matching):
        raise FuzzFailure(f"{what}: ran kernel {kernel} on a problem of another kind ({f})")
    x, w, y = bufs
    ref, mag = conv_reference(cp, x, w, y)
    check_close(bufs[written], ref, mag, cp.dtype, cp.reduction_length, what)


# ---- target: the command line ------------------------------------------------------------------

CLI_INT = st.one_of(st.integers(1, 48).map(str), st.sampled_from(
    ["0", "-1", "-7", "2147483648", "4294967298", "9223372036854775807", "99999999999999999999", "1.5", "abc", "",
     "0x10", "1e3", "--", "nan"]))


@st.composite
def cli_argv(draw):
    cmd = draw(st.sampled_from(["gemm", "gemm", "conv", "conv", "list"]))
    opts = []
    if cmd == "gemm":
        argv = ["gemm"] + [draw(CLI_INT) for _ in range(draw(st.sampled_from([3, 3, 3, 3, 2, 4])))]
        if draw(st.booleans()):
            opts += ["--dtype", draw(st.sampled_from([d.key for d in DType] + ["fp64", ""]))]
        if draw(st.booleans()):
            opts += ["--layout", draw(st.sampled_from(["rcr", "rrr", "crr", "ccr", "xxx"]))]
    elif cmd == "conv":
        argv = ["conv"]
        for name in ("--N", "--G", "--C", "--K"):
            if draw(st.booleans()):
                opts += [name, draw(st.one_of(st.integers(1, 4).map(str), CLI_INT))]
        nd = draw(st.integers(1, 3))
        small = st.integers(1, {1: 16, 2: 10, 3: 5}[nd]).map(str)
        opts += ["--input"] + [draw(st.one_of(small, small, small, CLI_INT)) for _ in range(nd)]
        for name, vals in (("--filter", st.integers(1, 4)), ("--stride", st.integers(1, 3)),
                           ("--pad", st.integers(0, 2)), ("--dilation", st.integers(1, 2))):
            if draw(st.booleans()):
                count = draw(st.sampled_from([1, nd, nd + 1]))
                opts += [name] + [draw(st.one_of(vals.map(str), vals.map(str), CLI_INT)) for _ in range(count)]
        if draw(st.booleans()):
            opts += ["--direction", draw(st.sampled_from([d.key for d in Direction] + ["up"]))]
        if draw(st.booleans()):
            opts += ["--dtype", draw(st.sampled_from([d.key for d in DType] + ["fp64"]))]
        if draw(st.integers(0, 3)) == 0:
            opts += ["--split-k", draw(st.sampled_from(["0", "1", "2", "-1", "4097", "2147483648", "x"]))]
    else:
        argv = ["list"]
        if draw(st.booleans()):
            opts += ["--op", draw(st.sampled_from(["gemm", "conv", "nope"]))]
        if draw(st.booleans()):
            opts += ["--filter", draw(st.sampled_from(["gemm_*", "*fp16*", "[", "", "conv_fwd_*,gemm_bf16*", "*"]))]
        if draw(st.booleans()):
            opts += ["--json"]
        if draw(st.booleans()):
            opts += ["--target", draw(st.sampled_from(["cpu", "nope", "sm_90a"]))]
        return argv + opts
    if draw(st.booleans()):
        opts += ["--validate"]
    if draw(st.integers(0, 3)) == 0:
        opts += ["--kernel", draw(st.sampled_from(sorted(GEMM_KERNELS if cmd == "gemm" else CONV_KERNELS)
                                                  + ["nope", ""]))]
    if draw(st.integers(0, 4)) == 0:
        opts += ["--target", draw(st.sampled_from(["cpu", "nope"]))]
    if draw(st.integers(0, 4)) == 0:
        opts += ["--repeat", draw(st.sampled_from(["0", "1", "-3", "x"]))]
    if draw(st.integers(0, 4)) == 0:
        opts += ["--seed", draw(st.sampled_from(["0", "7", "-1", "x", "99999999999999999999"]))]
    if draw(st.integers(0, 6)) == 0:
        opts += [draw(st.sampled_from(["--bogus", "extra", "--validate=1"]))]
    return argv + opts


def check_cli_output(argv, code, out, err, what):
    """gemm/conv: one JSON object on stdout and exit 0 or 1; list: exit 0 (or 1, or argparse's 2 for a
    usage error, with the usage on stderr); never a traceback."""
    if "Traceback" in err:
        raise FuzzFailure(f"{what} {argv}: a traceback on stderr:\n{err[-3000:]}")
    if argv[0] == "list":
        if code not in (0, 1, 2) or (code == 2 and "usage:" not in err):
            raise FuzzFailure(f"{what} {argv}: exit {code}, stderr {err[-500:]}")
        if code == 0 and "--json" in argv:
            try:
                data = json.loads(out)
            except ValueError:
                raise FuzzFailure(f"{what} {argv}: --json printed no JSON: {out[:300]!r}") from None
            if not isinstance(data, list):
                raise FuzzFailure(f"{what} {argv}: --json printed {type(data).__name__}")
        if code == 1 and not err.strip():
            raise FuzzFailure(f"{what} {argv}: exit 1 without a message")
        return
    if code not in (0, 1):
        raise FuzzFailure(f"{what} {argv}: exit {code} (expected 0 or 1); stdout {out[-500:]!r} stderr {err[-500:]!r}")
    lines = [line for line in out.splitlines() if line.strip()]
    if len(lines) != 1:
        raise FuzzFailure(f"{what} {argv}: expected one JSON line on stdout, got {out[-1000:]!r}")
    try:
        data = json.loads(lines[0])
    except ValueError:
        raise FuzzFailure(f"{what} {argv}: stdout is not JSON: {out[-1000:]!r}") from None
    if not isinstance(data, dict) or data.get("status") not in ("success", "error"):
        raise FuzzFailure(f"{what} {argv}: bad JSON {data!r}")
    if (code == 0) != (data["status"] == "success"):
        raise FuzzFailure(f"{what} {argv}: exit {code} with status {data['status']}")
    if data["status"] == "error":
        if data.get("code") not in (-1, -2, -3) or not str(data.get("error", "")).strip():
            raise FuzzFailure(f"{what} {argv}: error JSON without a code or message: {data}")
        if data.get("validation") is not None:
            raise FuzzFailure(f"{what} {argv}: validation failed (a wrong answer): {data}")
        return
    names = GEMM_KERNELS if argv[0] == "gemm" else CONV_KERNELS
    if data.get("kernel") not in names:
        raise FuzzFailure(f"{what} {argv}: ran an unknown kernel: {data}")
    if "--validate" in argv and data.get("validation", {}).get("accuracy") != 100.0:
        raise FuzzFailure(f"{what} {argv}: success without a full validation: {data}")


def fuzz_cli_inproc(argv):
    note("cli_inproc", argv=argv)
    from tiledispatch import cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            code = -99
    check_cli_output(argv, code, out.getvalue(), err.getvalue(), "tiledispatch (in process)")


def fuzz_cli(argv):
    note("cli", argv=argv)
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    check_cli_output(argv, proc.returncode, proc.stdout, proc.stderr, "python -m tiledispatch")


# ---- target: several threads at once --------------------------------------------------------------

@st.composite
def threads_case(draw):
    jobs = []
    for _ in range(draw(st.integers(2, 6))):
        if draw(st.booleans()):
            jobs.append(("gemm", dict(M=draw(DIM), N=draw(DIM), K=draw(DIM), dtype=draw(st.sampled_from(GEMM_DTYPES)),
                                      layout=draw(st.sampled_from(["rcr", "rrr", "crr", "ccr"])),
                                      splits=draw(st.sampled_from([0, 1, 3])), bad=draw(st.integers(0, 5)) == 0,
                                      seed=draw(SEED))))
        else:
            g = draw(conv_geometry())
            g["input"] = tuple(i + (f - 1) * d for i, f, d in zip(g["input"], g["filter"], g["dil"]))
            g["input"] = tuple(min(i, SPATIAL_MAX[g["ndim"]] + 4) for i in g["input"])
            jobs.append(("conv", dict(g=g, bad=draw(st.integers(0, 5)) == 0, seed=draw(SEED))))
    return jobs


def _thread_job(job):
    """One job of fuzz_threads: runs and checks itself; returns None or the failure."""
    op, spec = job
    rng = np.random.default_rng(spec["seed"])
    try:
        if op == "gemm":
            dt = spec["dtype"]
            problem = td.GemmProblem(spec["M"], spec["N"], spec["K"], dt, spec["layout"], splits=spec["splits"])
            lay = problem.layout
            a, b = values((problem.M, problem.K), numpy_dtype(dt), rng), values((problem.K, problem.N), numpy_dtype(dt), rng)
            a_mem = a if lay.a_row else np.asfortranarray(a)
            b_mem = b if lay.b_row else np.asfortranarray(b)
            c = np.full((problem.M, problem.N), np.nan, numpy_dtype(dt.out))
            if spec["bad"]:  # a refusal in one thread must not disturb the others' messages or results
                try:
                    GEMM.run(problem, a_mem, b_mem, c[:, :0] if problem.N > 1 else c.astype(np.float64))
                except td.TileDispatchError as err:
                    if not err.message.strip():
                        return f"{job}: a refusal with an empty message"
                else:
                    return f"{job}: a too-small C accepted"
            GEMM.run(problem, a_mem, b_mem, c)
            ref, mag = reference.gemm(a, b)
            check_close(c, ref, mag, dt, problem.K, f"thread {job}")
        else:
            g = spec["g"]
            if any(o <= 0 for o in out_size(g)):
                return None
            problem = conv_problem(g)
            shapes = (problem.input_shape, problem.weight_shape, problem.output_shape)
            written = {Direction.FWD: 2, Direction.BWD_DATA: 0, Direction.BWD_WEIGHT: 1}[problem.direction]
            in_dt, out_dt = numpy_dtype(problem.dtype), numpy_dtype(problem.dtype.out)
            t = [np.full(sh, np.nan, out_dt) if i == written else values(sh, in_dt, rng) for i, sh in enumerate(shapes)]
            if spec["bad"]:
                try:
                    CONV.run(problem, *[x.reshape(-1)[:-1] if i == written else x for i, x in enumerate(t)])
                except td.TileDispatchError as err:
                    if not err.message.strip():
                        return f"{job}: a refusal with an empty message"
                else:
                    return f"{job}: a too-small output accepted"
            CONV.run(problem, *t)
            x, w, y = t
            ref, mag = conv_reference(problem, x, w, y)
            check_close(t[written], ref, mag, problem.dtype, problem.reduction_length, f"thread {job}")
    except FuzzFailure as err:
        return str(err)
    except Exception as err:  # noqa: BLE001
        return f"{job}: {type(err).__name__}: {err}"
    return None


_POOL = None


def fuzz_threads(jobs):
    """Valid gemm and conv runs (some after a refusal) from several Python threads at once
    (docs/abi.md: every function is safe to call from several threads at once)."""
    global _POOL
    note("threads", jobs=jobs)
    if _POOL is None:
        import concurrent.futures
        _POOL = concurrent.futures.ThreadPoolExecutor(6)
    for failure in _POOL.map(_thread_job, jobs):
        if failure:
            raise FuzzFailure(failure)


# ---- targets recording known bugs (xfail in tests/test_fuzz.py) --------------------------------

@st.composite
def bad_kernel_arg(draw):
    return dict(where=draw(st.sampled_from(["gemm_kernel", "gemm_layout", "conv_kernel", "select_kernel",
                                            "is_supported_kernel", "workspace_kernel"])),
                value=draw(st.sampled_from([5, 1.5, ["rcr"], b"rcr", object()])))


def fuzz_bug_kernel_type(case):
    """A `kernel` or `layout` argument of the wrong type (not str, config or None) must raise
    TypeError/ValueError or a package error, not an AttributeError."""
    note("bug_kernel_type", **case)
    a = np.ones((4, 4), np.float32)
    v, where = case["value"], case["where"]
    problem = td.GemmProblem(4, 4, 4)
    calls = {"gemm_kernel": lambda: td.gemm(a, a, kernel=v), "gemm_layout": lambda: td.gemm(a, a, layout=v),
             "conv_kernel": lambda: td.conv(np.ones((1, 4, 4), np.float32), np.ones((4, 3, 4), np.float32), kernel=v),
             "select_kernel": lambda: GEMM.cost(problem, v),
             "is_supported_kernel": lambda: GEMM.is_supported(problem, v),
             "workspace_kernel": lambda: GEMM.workspace_size(problem, v)}
    attempt(calls[where], "fail", f"{where}={v!r}")


def fuzz_bug_alpha_overflow(value):
    """alpha beyond float range must raise TypeError/ValueError or a package error."""
    note("bug_alpha_overflow", alpha=value)
    a = np.ones((4, 4), np.float32)
    attempt(lambda: td.gemm(a, a, alpha=value), "fail", f"td.gemm(alpha={value!r})")


def fuzz_bug_conv_huge_output(pad):
    """A valid but huge padding makes td.conv allocate the whole output before any size
    check: MemoryError (or, without an address-space limit, gigabytes) instead of a clean
    refusal."""
    note("bug_conv_huge_output", pad=pad)
    x, w = np.ones((1, 4, 1), np.float32), np.ones((1, 3, 1), np.float32)
    attempt(lambda: td.conv(x, w, padding=pad), "fail", f"td.conv(padding={pad})")


def fuzz_bug_negative_stride_unit_dim(case):
    """A view with a negative stride along a dimension of size 1 (x[::-1] of a one-row matrix
    or a batch of one) is refused by Dispatcher.run ('has a negative stride'), though td.gemm
    and td.conv take it as a contiguous array without copying it; any other negative-stride
    input is copied and works."""
    note("bug_negative_stride_unit_dim", **case)
    rng = np.random.default_rng(case["seed"])
    n = case["n"]
    if case["where"] in ("gemm_a", "gemm_b"):
        a, b = values((1, n), np.float32, rng), values((n, 3), np.float32, rng)
        if case["where"] == "gemm_b":
            a, b = values((2, 1), np.float32, rng), values((1, n), np.float32, rng)
        a_in = a[::-1] if case["where"] == "gemm_a" else a
        b_in = b[::-1] if case["where"] == "gemm_b" else b
        ok, c = attempt(lambda: td.gemm(a_in, b_in), "ok", f"td.gemm with {case['where']} reversed")
        ref, mag = reference.gemm(a, b)
        check_close(c, ref, mag, DType.FP32, a.shape[1], "td.gemm")
        return
    x, w = values((1, n, 4), np.float32, rng), values((4, 3, 4), np.float32, rng)
    ok, y = attempt(lambda: td.conv(x[::-1], w), "ok", "td.conv with x[::-1] of batch 1")
    problem = td.ConvProblem(1, 1, 4, 4, (n,), (3,))
    ref, mag = reference.conv(problem, x=x, w=w)
    check_close(y, ref, mag, DType.FP32, problem.reduction_length, "td.conv")


def fuzz_bug_bytes_as_sizes(case):
    """bytes (or a dict, a set) where a convolution takes an integer or a tuple of integers
    must be refused; they are read as their elements (b'3' as 51)."""
    note("bug_bytes_as_sizes", **case)
    x, w = np.ones((1, 8, 1), np.float32), np.ones((1, 1, 1), np.float32)
    v = case["value"]
    if case["where"] == "conv":
        attempt(lambda: td.conv(x, w, **{case["field"]: v}), "fail", f"td.conv({case['field']}={v!r})")
    else:
        attempt(lambda: td.ConvProblem(1, 1, 1, 1, (8,), (1,), **{case["field"]: v}), "fail",
                f"td.ConvProblem({case['field']}={v!r})")


# ---- the GEMM features: epilogue arguments, batches, fp8 scales, grouped GEMM -----------------

OUT_KEYS = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", np.dtype(ml_dtypes.bfloat16): "bf16",
            np.dtype(ml_dtypes.float8_e4m3fn): "fp8_e4m3"}
# an argument of the epilogue: a right one (by its role) or a hostile value
FEATURE_VALUE = st.one_of(st.sampled_from(["good"] * 6 + ["wrong_length", "wrong_dtype", "2d", "empty", "scalar"]),
                          HOSTILE)


def _feature_arg(kind, role_len, out_dtype, rng):
    """A value of one epilogue argument: by role (good: role_len values of the output type)."""
    if not isinstance(kind, str) or kind not in ("good", "wrong_length", "wrong_dtype", "2d", "empty", "scalar"):
        return kind
    if kind == "good":
        return values((role_len,), out_dtype, rng)
    if kind == "wrong_length":
        return values((role_len + 1,), out_dtype, rng)
    if kind == "wrong_dtype":
        return np.ones(role_len, np.float64)
    if kind == "2d":
        return np.ones((2, role_len), out_dtype)
    if kind == "empty":
        return np.zeros(0, out_dtype)
    return np.float32(0.5)


@st.composite
def features_case(draw):
    return dict(M=draw(st.integers(1, 24)), N=draw(st.integers(1, 24)), K=draw(st.integers(1, 150)),
                batch=draw(st.sampled_from([None, None, 1, 3, 0])), broadcast=draw(st.sampled_from([None, "a", "b"])),
                dtype=draw(st.sampled_from(["fp32", "bf16", "fp16", "fp8_e4m3"])),
                bias=draw(st.one_of(st.none(), FEATURE_VALUE)), along=draw(st.sampled_from(["n", "m", "x", 3])),
                activation=draw(st.sampled_from([None, "relu", "gelu", "gelu_tanh", "silu", "tanh", "", 2, b"relu"])),
                beta=draw(st.one_of(st.none(), st.sampled_from([0.0, 0.5, -2.0]), HOSTILE)),
                c=draw(st.sampled_from([None, "good", "out", "row", "wrong_shape", "wrong_dtype"])),
                aux=draw(st.sampled_from([None, "return", "good", "wrong_shape", "readonly"])),
                row_scale=draw(st.one_of(st.none(), FEATURE_VALUE)), col_scale=draw(st.one_of(st.none(), FEATURE_VALUE)),
                out_dtype=draw(st.sampled_from([None, "fp32", "bf16", "fp16", "fp8_e4m3", np.float32, 7])),
                grouped=draw(st.sampled_from([None, None, "offsets", "list", "bad_offsets"])),
                seed=draw(st.integers(0, 2**31 - 1)))


def fuzz_features(case):
    note("features", **case)
    rng = np.random.default_rng(case["seed"])
    M, N, K, dtype = case["M"], case["N"], case["K"], DType.parse(case["dtype"])
    if case["grouped"]:
        return _fuzz_grouped(case, rng, dtype)
    batch = case["batch"]
    a_shape = (M, K) if batch is None or case["broadcast"] == "a" else (batch, M, K)
    b_shape = (K, N) if batch is None or case["broadcast"] == "b" else (batch, K, N)
    a, b = values(a_shape, numpy_dtype(dtype), rng), values(b_shape, numpy_dtype(dtype), rng)
    out_dtype = case["out_dtype"]
    # fp8_e4m3 output is valid for fp8 inputs only (refused otherwise: the attempt checks the error)
    fp8_out = out_dtype == "fp8_e4m3" and dtype is DType.FP8_E4M3
    out_key = out_dtype if out_dtype in ("fp32", "bf16", "fp16") or fp8_out else (
        "fp32" if out_dtype is np.float32 else dtype.out.key)
    out_np = numpy_dtype(DType.parse(out_key))
    shape = (M, N) if batch is None else (batch, M, N)
    kw = {"target": "cpu", "activation": case["activation"], "out_dtype": out_dtype}
    if case["bias"] is not None:
        kw["bias"] = _feature_arg(case["bias"], N if case["along"] != "m" else M, out_np, rng)
        kw["bias_along"] = case["along"]
    for name, length in (("row_scale", M), ("col_scale", N)):
        if case[name] is not None:
            kw[name] = _feature_arg(case[name], length, np.float32, rng)
    out = None
    if case["c"] is not None and 0 not in shape:
        c = {"good": lambda: values(shape, out_np, rng), "row": lambda: values((N,), out_np, rng),
             "wrong_shape": lambda: np.ones((M + 1, N), out_np), "wrong_dtype": lambda: np.ones(shape, np.float64),
             "out": lambda: values(shape, out_np, rng)}[case["c"]]()
        kw["c"] = c
        if case["c"] == "out":
            out = kw["out"] = c
    if case["beta"] is not None:
        kw["beta"] = case["beta"]
    if case["aux"] == "return":
        kw["return_aux"] = True
    elif case["aux"] is not None and 0 not in shape:
        aux = np.zeros((M, N + 1) if case["aux"] == "wrong_shape" else shape, out_np)
        aux.flags.writeable = case["aux"] != "readonly"
        kw["aux"] = aux
    before = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    what = f"td.gemm(a{a.shape}, b{b.shape}, {', '.join(f'{k}={summary(v)}' for k, v in kw.items())})"
    ok, result = attempt(lambda: td.gemm(a, b, **kw), "either", what)
    if not ok:
        return
    d, aux = result if kw.get("return_aux") else (result, kw.get("aux"))
    beta = 0.0 if "c" not in kw else (1.0 if kw.get("beta") is None else float(kw["beta"]))
    pre, ref, mag = reference.gemm_epilogue(
        a, b, beta=beta, c=before.get("c"), bias=before.get("bias"), bias_along=kw.get("bias_along", "n"),
        activation=kw["activation"] or "none", row_scale=kw.get("row_scale"), col_scale=kw.get("col_scale"))
    if d.shape != ref.shape or d.dtype != out_np:
        raise FuzzFailure(f"{what}: returned {d.shape} {d.dtype}, expected {ref.shape} {out_np}")
    finite = np.isfinite(ref) & np.isfinite(mag) & (mag < float(ml_dtypes.finfo(out_np).max) / 4)
    for name, got, want in (("D", d, ref), ("aux", aux, pre)):
        if got is None:
            continue
        cmp = reference.compare_out(np.asarray(got)[finite], want[finite], mag[finite], OUT_KEYS[out_np], K)
        if not cmp["ok"]:
            raise FuzzFailure(f"{what}: wrong {name}: accuracy {cmp['accuracy']:.3f}%, max error {cmp['max_error']}")


def _fuzz_grouped(case, rng, dtype):
    M, N, K = case["M"], case["N"], case["K"]
    groups = 1 + case["seed"] % 5
    if case["grouped"] == "list":
        sizes = [int(m) for m in rng.integers(0, M + 1, groups)]
        a = [values((m, K), numpy_dtype(dtype), rng) for m in sizes]
        b = [values((K, N), numpy_dtype(dtype), rng) for _ in sizes]
        ok, outs = attempt(lambda: td.grouped_gemm(a, b, activation=case["activation"]), "either", "grouped list")
        if ok:
            for x, y, o in zip(a, b, outs):
                _, ref, mag = reference.gemm_epilogue(x, y, activation=case["activation"] or "none")
                check_close(o, ref, mag, dtype, K, "grouped list")
        return
    a, b = values((M, K), numpy_dtype(dtype), rng), values((groups, K, N), numpy_dtype(dtype), rng)
    offsets = np.sort(rng.integers(0, M + 1, groups))
    if case["grouped"] == "bad_offsets":
        bad = [offsets + M + 1, "abc", offsets.astype(np.float32), offsets[:-1], offsets.reshape(1, -1), -offsets - 1]
        if groups > 1:
            bad.append(offsets[::-1] + np.arange(groups))
        offsets = bad[int(rng.integers(len(bad)))]
    what = f"td.grouped_gemm(a{a.shape}, b{b.shape}, offsets={summary(offsets)})"
    ok, d = attempt(lambda: td.grouped_gemm(a, b, offsets, activation=case["activation"]), "either", what)
    if ok:
        start = 0
        for g, end in enumerate(offsets):
            _, ref, mag = reference.gemm_epilogue(a[start:end], b[g], activation=case["activation"] or "none")
            check_close(d[start:end], ref, mag, dtype, K, what)
            start = end
        if np.asarray(d[offsets[-1]:], np.float32).any():
            raise FuzzFailure(f"{what}: rows after the last offset are not zero")


TARGETS = {
    "problems": (problem_case(), fuzz_problem),
    "features": (features_case(), fuzz_features),
    "abi": (abi_case(), fuzz_abi),
    "dispatcher": (dispatcher_case(), fuzz_dispatcher),
    "gemm": (gemm_case(), fuzz_gemm),
    "conv": (conv_case(), fuzz_conv),
    "cli_inproc": (cli_argv(), fuzz_cli_inproc),
    "cli": (cli_argv(), fuzz_cli),
    "threads": (threads_case(), fuzz_threads),
    "bug_kernel_type": (bad_kernel_arg(), fuzz_bug_kernel_type),
    "bug_alpha_overflow": (st.sampled_from([2**1024, -2**1024, 10**400]), fuzz_bug_alpha_overflow),
    "bug_conv_huge_output": (st.sampled_from([2**31 - 1, 2**30]), fuzz_bug_conv_huge_output),
    "bug_bytes_as_sizes": (st.fixed_dictionaries(dict(where=st.sampled_from(["conv", "problem"]),
                                                      field=st.sampled_from(["stride", "padding", "dilation"]),
                                                      value=st.sampled_from([b"\x02", b"3", {2: 0}, {1}]))),
                           fuzz_bug_bytes_as_sizes),
    "bug_negative_stride_unit_dim": (st.fixed_dictionaries(dict(where=st.sampled_from(["gemm_a", "gemm_b", "conv_x"]),
                                                                n=st.integers(3, 16), seed=SEED)),
                                     fuzz_bug_negative_stride_unit_dim),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in TARGETS:
        print(f"usage: fuzz_worker.py TARGET N  (targets: {', '.join(TARGETS)})", file=sys.stderr)
        return 2
    name, n = argv[0], int(argv[1])
    os.environ.setdefault("TILEDISPATCH_TARGET", "cpu")  # td.gemm / the command: the cpu library
    # a bounded address space: a runaway allocation is a MemoryError here, not the machine's OOM killer
    limit = int(os.environ.get("TD_FUZZ_MEMORY_GB", "8")) << 30
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    strategy, body = TARGETS[name]

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(case):
        body(case)

    start = time.monotonic()
    try:
        run()
    except Exception as err:  # noqa: BLE001 - reported, with the example hypothesis printed above
        traceback.print_exc()
        print(f"{name}: FAILED after {COUNT} examples in {time.monotonic() - start:.1f} s: "
              f"{type(err).__name__}: {err}", flush=True)
        return 1
    print(f"{name}: {COUNT} examples in {time.monotonic() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
