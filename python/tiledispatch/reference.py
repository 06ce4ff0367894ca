"""numpy references (float64 on the same quantized inputs) and the tolerances, in one place.

An output element passes when |out - ref| <= tol(dtype, K) * sum_k |a_k * b_k| (+ a tiny
floor), where the sum of absolute products bounds what cancellation can hide, and
tol = 8 * u_acc * sqrt(K) + u_out: fp32 accumulation (u_acc = 2^-24) over K terms plus
the rounding of the output type (u_out). Atomic stream-K changes only the order of fp32
additions, which this bound covers; nothing is widened for it.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .codegen import Direction, DType

UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp8_e4m3": 2.0 ** -4,
                 "fp8_e5m2": 2.0 ** -3}
FLOOR = 1e-30
# Half the spacing of the output type's subnormals: the rounding error of a result that
# underflows, which no relative tolerance covers.
UNDERFLOW = {"fp32": 2.0 ** -150, "fp16": 2.0 ** -25, "bf16": 2.0 ** -134, "fp8_e4m3": 2.0 ** -10,
             "fp8_e5m2": 2.0 ** -17}


def underflow(dtype: DType) -> float:
    return UNDERFLOW[dtype.out.key]


def tolerance(dtype: DType, k: int) -> float:
    """Relative (to sum |a b|) tolerance of one output element of a length-k reduction."""
    return 8.0 * UNIT_ROUNDOFF["fp32"] * math.sqrt(max(k, 1)) + UNIT_ROUNDOFF[dtype.out.key]


def compare(actual, reference, magnitude, dtype: DType, k: int) -> dict:
    """accuracy (% of elements within tolerance), max_error (absolute), ok."""
    actual = np.asarray(actual).astype(np.float64)
    err = np.abs(actual - reference)
    err = np.where(np.isnan(err), np.inf, err)
    good = err <= tolerance(dtype, k) * magnitude + underflow(dtype) + FLOOR
    return {"accuracy": 100.0 * float(good.mean()) if good.size else 100.0,
            "max_error": float(err.max()) if err.size else 0.0, "ok": bool(good.all())}


def gemm(a, b):
    """(A @ B, |A| @ |B|) in float64."""
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


# The epilogue activations in float64 (the cpu kernels compute them in fp32).
ACTIVATIONS = {
    "none": lambda x: x,
    "relu": lambda x: np.where(x < 0, 0.0, x),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


def gemm_epilogue(a, b, *, alpha=1.0, beta=0.0, c=None, bias=None, bias_along="n", activation="none",
                  row_scale=None, col_scale=None):
    """(pre-activation, D, magnitude) in float64 for D = act(alpha * (A @ B) * row_scale *
    col_scale + beta * C + bias), in that order (docs/abi.md). a and b may be 3-D (a batch;
    numpy.matmul broadcasting). magnitude bounds what rounding can reach: |alpha rs cs| (|A| @
    |B|) + |beta C| + |bias|, times 1.25 under an activation (their slopes are at most 1.13)."""
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    x, mag = alpha * (a64 @ b64), abs(alpha) * (np.abs(a64) @ np.abs(b64))
    for scale, axis in ((row_scale, -2), (col_scale, -1)):
        if scale is not None:
            s = np.asarray(scale, dtype=np.float64)
            s = s[:, None] if axis == -2 else s
            x, mag = x * s, mag * np.abs(s)
    if c is not None and beta:
        c64 = np.asarray(c).astype(np.float64)
        x, mag = x + beta * c64, mag + abs(beta) * np.abs(c64)
    if bias is not None:
        v = np.asarray(bias).astype(np.float64)
        v = v if bias_along == "n" else v[:, None]
        x, mag = x + v, mag + np.abs(v)
    d = ACTIVATIONS[activation or "none"](x)
    return x, d, (mag if (activation or "none") == "none" else 1.25 * mag)


def tolerance_out(out_key: str, k: int) -> float:
    """tolerance() for an output type given by its key (fp32, fp16, bf16)."""
    return 8.0 * UNIT_ROUNDOFF["fp32"] * math.sqrt(max(k, 1)) + UNIT_ROUNDOFF[out_key]


def compare_out(actual, reference, magnitude, out_key: str, k: int, slack: float = 0.0) -> dict:
    """compare() for an output type given by its key; `slack` x magnitude more where the GPU's
    fast tanh / exp computes an activation."""
    actual = np.asarray(actual).astype(np.float64)
    err = np.abs(actual - reference)
    err = np.where(np.isnan(err), np.inf, err)
    good = err <= (tolerance_out(out_key, k) + slack) * magnitude + UNDERFLOW[out_key] + FLOOR
    return {"accuracy": 100.0 * float(good.mean()) if good.size else 100.0,
            "max_error": float(err.max()) if err.size else 0.0, "ok": bool(good.all())}


def _tap_slices(tap, stride, dilation, out_size):
    return tuple(slice(f * d, f * d + (o - 1) * s + 1, s)
                 for f, s, d, o in zip(tap, stride, dilation, out_size))


def conv(problem, x=None, w=None, dy=None):
    """(result, magnitude) in float64 for a ConvProblem; tensors channels-last.

    fwd takes x, w and gives y; bwd_data takes dy, w and gives dx; bwd_weight takes x, dy
    and gives dw.
    """
    P = problem
    nd, G, C, K, N = P.ndim, P.G, P.C, P.K, P.N
    out_size, taps = P.output_size, list(itertools.product(*(range(f) for f in P.filter_size)))
    pad_width = [(0, 0)] + [(p, p) for p in P.padding] + [(0, 0), (0, 0)]

    def grouped(t, ch):
        return np.asarray(t).astype(np.float64).reshape(*t.shape[:-1], G, ch)

    if P.direction is Direction.FWD:
        xp = np.pad(grouped(x, C), pad_width)
        wg = np.asarray(w).astype(np.float64).reshape(G, K, *P.filter_size, C)
        y = np.zeros((N, *out_size, G, K))
        mag = np.zeros_like(y)
        for tap in taps:
            xs = xp[(slice(None),) + _tap_slices(tap, P.stride, P.dilation, out_size)]
            wt = wg[(slice(None), slice(None)) + tap]
            y += np.einsum("...gc,gkc->...gk", xs, wt)
            mag += np.einsum("...gc,gkc->...gk", np.abs(xs), np.abs(wt))
        return y.reshape(P.output_shape), mag.reshape(P.output_shape)
    if P.direction is Direction.BWD_DATA:
        dyg = grouped(dy, K)
        wg = np.asarray(w).astype(np.float64).reshape(G, K, *P.filter_size, C)
        padded = [i + 2 * p for i, p in zip(P.input_size, P.padding)]
        dx = np.zeros((N, *padded, G, C))
        mag = np.zeros_like(dx)
        for tap in taps:
            sl = (slice(None),) + _tap_slices(tap, P.stride, P.dilation, out_size)
            wt = wg[(slice(None), slice(None)) + tap]
            dx[sl] += np.einsum("...gk,gkc->...gc", dyg, wt)
            mag[sl] += np.einsum("...gk,gkc->...gc", np.abs(dyg), np.abs(wt))
        crop = (slice(None),) + tuple(slice(p, p + i) for p, i in zip(P.padding, P.input_size))
        return dx[crop].reshape(P.input_shape), mag[crop].reshape(P.input_shape)
    xp = np.pad(grouped(x, C), pad_width)
    dyg = grouped(dy, K)
    dw = np.zeros((G, K, *P.filter_size, C))
    mag = np.zeros_like(dw)
    lead = "xyz"[:nd]
    for tap in taps:
        xs = xp[(slice(None),) + _tap_slices(tap, P.stride, P.dilation, out_size)]
        spec = f"n{lead}gk,n{lead}gc->gkc"
        dw[(slice(None), slice(None)) + tap] = np.einsum(spec, dyg, xs)
        mag[(slice(None), slice(None)) + tap] = np.einsum(spec, np.abs(dyg), np.abs(xs))
    return dw.reshape(P.weight_shape), mag.reshape(P.weight_shape)
