"""fp8 scaling on the cpu target, e4m3 and e5m2 inputs, bf16 output: per tensor (alpha),
row-wise (one fp32 scale per row of A and per column of B) and block-wise (1x128 blocks of A,
128x128 blocks of B, DeepSeek-V3 style), against float64 products of the dequantized inputs."""
import ml_dtypes
import numpy as np
import pytest

td = pytest.importorskip("tiledispatch")

from test_gemm_epilogue import check, cpu_or_skip  # noqa: E402

FP8 = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}


def quantize(rng, shape, dtype):
    return (rng.standard_normal(shape) * 2).astype(FP8[dtype])


def expand_blocks(scales, rows, cols, block_rows, block_cols):
    return np.repeat(np.repeat(scales.astype(np.float64), block_rows, 0), block_cols, 1)[:rows, :cols]


@pytest.mark.parametrize("dtype", list(FP8))
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (37, 29, 300), (128, 256, 256), (65, 130, 129)])
def test_block_wise(rng, dtype, M, N, K):
    cpu_or_skip()
    a, b = quantize(rng, (M, K), dtype), np.asfortranarray(quantize(rng, (K, N), dtype))
    kb, nb = -(-K // 128), -(-N // 128)
    sa = rng.uniform(0.01, 4, (M, kb)).astype(np.float32)
    sb = rng.uniform(0.01, 4, (kb, nb)).astype(np.float32)
    d = td.gemm(a, b, scale_a=sa, scale_b=sb, target="cpu")
    assert d.dtype == ml_dtypes.bfloat16
    a64 = a.astype(np.float64) * expand_blocks(sa, M, K, 1, 128)
    b64 = b.astype(np.float64) * expand_blocks(sb, K, N, 128, 128)
    check(d, a64 @ b64, np.abs(a64) @ np.abs(b64), "bf16", K)


@pytest.mark.parametrize("dtype", list(FP8))
def test_row_wise_and_per_tensor(rng, dtype):
    cpu_or_skip()
    M, N, K = 45, 70, 200
    a, b = quantize(rng, (M, K), dtype), np.asfortranarray(quantize(rng, (K, N), dtype))
    sa, sb = rng.uniform(0.01, 4, (M, 1)).astype(np.float32), rng.uniform(0.01, 4, (1, N)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = td.gemm(a, b, scale_a=sa, scale_b=sb, target="cpu")
    check(d, (a64 @ b64) * sa * sb, (np.abs(a64) @ np.abs(b64)) * sa * sb, "bf16", K)
    d = td.gemm(a, b, scale_a=np.float32(0.5), scale_b=np.array([3.0], np.float32), target="cpu")
    check(d, 1.5 * (a64 @ b64), 1.5 * (np.abs(a64) @ np.abs(b64)), "bf16", K)
    # row-wise scales with a bias, an activation and an fp32 output: one fused call
    bias = rng.standard_normal(N).astype(np.float32)
    d = td.gemm(a, b, scale_a=sa[:, 0], scale_b=sb[0], bias=bias, activation="relu", out_dtype="fp32", target="cpu")
    x = (a64 @ b64) * sa * sb + bias
    check(d, np.maximum(x, 0), 1.25 * ((np.abs(a64) @ np.abs(b64)) * sa * sb + np.abs(bias)), "fp32", K)


def test_bad_scales(rng):
    cpu_or_skip()
    a, b = quantize(rng, (8, 300), "fp8_e4m3"), quantize(rng, (300, 20), "fp8_e4m3")
    E = td.InvalidArgumentError
    with pytest.raises(E, match=r"scale_a has shape \(8, 2\)"):
        td.gemm(a, b, scale_a=np.ones((8, 2), np.float32), scale_b=np.ones((3, 1), np.float32), target="cpu")
    with pytest.raises(E, match=r"scale_b has shape \(7,\)"):
        td.gemm(a, b, scale_b=np.ones(7, np.float32), target="cpu")
    with pytest.raises(TypeError, match="scale_a must hold real numbers"):
        td.gemm(a, b, scale_a=np.array(["x"] * 8), target="cpu")
    with pytest.raises(E, match="give row-wise scales once"):
        td.gemm(a, b, scale_a=np.ones(8, np.float32), row_scale=np.ones(8, np.float32), target="cpu")
    with pytest.raises(E, match="block-wise scales take one GEMM"):
        td.gemm(np.stack([a, a]), b, scale_a=np.ones((8, 3), np.float32), scale_b=np.ones((3, 1), np.float32),
                target="cpu")
    d = td.Dispatcher("gemm", "cpu")
    generic = next(k.name for k in d.kernels if "generic" in k.name and k.dtype.key == "fp8_e4m3" and k.layout.key == "rcr")
    with pytest.raises(td.KernelRejectedError, match="block-wise scales with a batch are not implemented"):
        d.run(td.GemmProblem(8, 20, 300, "fp8_e4m3", "rcr", batch=2, stride_c=160, block_scale=True),
              0, 0, 0, kernel=generic)
