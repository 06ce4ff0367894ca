"""fp8 GEMMs with block-wise scales on the GPU (the cutlass_blockwise kernels, sm_90a): one fp32
scale per 1x128 block of A (scale_a, M x ceil(K/128)) and per 128x128 block of B (scale_b,
ceil(K/128) x ceil(N/128)), both row-major, B indexed as K x N; D = alpha * sum over K blocks of
(A_blk B_blk) scale_a scale_b in bf16. Against float64 products of the dequantized inputs (the
cpu test's reference, tests/test_fp8_scaling.py) and, where torch runs block-wise scaled fp8 on
this GPU, against torch's error on the same inputs. Skipped without a GPU, torch or a library
with these kernels; run by `bash bench/gpu_run.sh build` then
`python3 -m pytest tests/test_gpu_fp8_blockwise.py`."""
import math

import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import DType

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
GPU = next((t for t in device_targets() if t in td.registry().targets), None)
KERNELS = [k for k in td.registry().kernels("gemm", GPU) if k.family == "cutlass_blockwise"] if GPU else []
pytestmark = pytest.mark.skipif(
    not KERNELS, reason=f"no GPU library with cutlass_blockwise kernels (GPUs seen: {device_targets() or 'none'}, "
                        f"libraries: {td.registry().targets})")

BLOCK = 128
TORCH_FP8 = {DType.FP8_E4M3: "float8_e4m3fn", DType.FP8_E5M2: "float8_e5m2"}
# (M, N, K): K 128..8192, odd M, N not a multiple of 128 (a partial last scale block of B),
# K not a multiple of 128 (a partial last scale block along K)
SHAPES = [(1, 8, 128), (37, 200, 128), (129, 136, 256), (255, 392, 1040), (1001, 1000, 4096), (333, 4104, 8192),
          (2048, 2048, 2048)]


def operands(dtype, M, N, K, gen):
    """A (M x K, row-major) and B (K x N, column-major: B^T row-major) fp8 in [-2, 2), and their
    scales in [0.01, 4)."""
    fp8 = getattr(torch, TORCH_FP8[dtype])
    a = ((torch.rand(M, K, generator=gen, device="cuda") * 4 - 2)).to(fp8)
    bt = ((torch.rand(N, K, generator=gen, device="cuda") * 4 - 2)).to(fp8)
    kb, nb = -(-K // BLOCK), -(-N // BLOCK)
    sa = torch.rand(M, kb, generator=gen, device="cuda") * 3.99 + 0.01
    sb = torch.rand(kb, nb, generator=gen, device="cuda") * 3.99 + 0.01
    return a, bt.t(), sa.contiguous(), sb.contiguous()


def dequantized(a, b, sa, sb):
    """A and B in float64 with their scales applied block by block."""
    M, K = a.shape
    N = b.shape[1]
    sa64 = sa.double().repeat_interleave(BLOCK, 1)[:, :K]
    sb64 = sb.double().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:K, :N]
    return a.double() * sa64, b.double() * sb64


def run(d, kernel, a, b, sa, sb, alpha=1.0):
    M, K = a.shape
    N = b.shape[1]
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    dtype = DType.FP8_E4M3 if a.dtype == torch.float8_e4m3fn else DType.FP8_E5M2
    problem = td.GemmProblem(M, N, K, dtype, "rcr", a.stride(0), b.stride(1), N, alpha=alpha, block_scale=True)
    d.run(problem, a.data_ptr(), b.data_ptr(), out.data_ptr(), kernel=kernel.name if kernel else None,
          stream=torch.cuda.current_stream().cuda_stream,
          epilogue={"scale_a": sa.data_ptr(), "scale_b": sb.data_ptr()})
    torch.cuda.synchronize()
    return out


def check(out, ref, mag, K, what):
    err = (out.double() - ref).abs()
    tol = reference.tolerance(DType.FP8_E4M3, K)  # bf16 output: the same for e4m3 and e5m2
    bad = ~(err <= tol * mag + reference.underflow(DType.FP8_E4M3) + reference.FLOOR)
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} of {out.numel()} outside tolerance, max error "
                                 f"{float(err.nan_to_num(math.inf).max())}")
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_block_wise_matches_float64(kernel, M, N, K, gen):
    d = td.Dispatcher("gemm", GPU)
    a, b, sa, sb = operands(kernel.dtype, M, N, K, gen)
    out = run(d, kernel, a, b, sa, sb, alpha=0.5)
    a64, b64 = dequantized(a, b, sa, sb)
    rel = check(out, 0.5 * (a64 @ b64), 0.5 * (a64.abs() @ b64.abs()), K, f"{kernel.name} {M}x{N}x{K}")
    assert rel < 1e-2


def test_only_blockwise_and_cublaslt_kernels_take_block_scales_and_the_library_picks_one(gen):
    d = td.Dispatcher("gemm", GPU)
    problem = td.GemmProblem(300, 520, 1024, "fp8_e4m3", "rcr", block_scale=True)
    takers = set()
    for k in td.registry().kernels("gemm", GPU):
        takes = k.family in ("cutlass_blockwise", "cublaslt") and k.dtype is DType.FP8_E4M3 and k.layout.key == "rcr"
        assert d.is_supported(problem, k.name) == takes, k.name
        if takes:
            takers.add(k.name)
    assert d.select(problem) in takers
    a, b, sa, sb = operands(DType.FP8_E4M3, 300, 520, 1024, gen)
    out = run(d, None, a, b, sa, sb)
    a64, b64 = dequantized(a, b, sa, sb)
    check(out, a64 @ b64, a64.abs() @ b64.abs(), 1024, "picked kernel")


def test_plain_problems_never_reach_a_blockwise_kernel():
    d = td.Dispatcher("gemm", GPU)
    plain = td.GemmProblem(256, 256, 256, "fp8_e4m3", "rcr")
    assert "blockwise" not in d.select(plain)
    for k in KERNELS:
        assert not d.is_supported(plain, k.name)


def test_misaligned_sizes_are_refused_with_the_reason():
    d = td.Dispatcher("gemm", GPU)
    for M, N, K in ((64, 100, 256), (64, 256, 200)):  # N % 8, K % 16
        problem = td.GemmProblem(M, N, K, "fp8_e4m3", "rcr", block_scale=True)
        assert not any(d.is_supported(problem, k.name) for k in KERNELS)
        with pytest.raises(td.UnsupportedProblemError):
            d.select(problem)


def test_repeated_runs_with_new_scales_stay_correct(gen):
    """A repeated launch on the same operands reuses CUTLASS's parameters; new scale pointers
    must not."""
    d = td.Dispatcher("gemm", GPU)
    kernel = KERNELS[0]
    a, b, sa, sb = operands(kernel.dtype, 200, 264, 512, gen)
    a64, b64 = dequantized(a, b, sa, sb)
    for _ in range(2):
        check(run(d, kernel, a, b, sa, sb), a64 @ b64, a64.abs() @ b64.abs(), 512, "repeat")
    sa2 = sa * 2
    a64, b64 = dequantized(a, b, sa2, sb)
    check(run(d, kernel, a, b, sa2, sb), a64 @ b64, a64.abs() @ b64.abs(), 512, "new scale_a")


def torch_block_scaled(a, b, sa, sb):
    """torch's block-wise scaled fp8 product (bf16), or pytest.skip with torch's reason.
    torch wants scale_a (M, K/128) outer-dim-major and scale_b (K/128, N/128) likewise."""
    sa_t = sa.t().contiguous().t()
    sb_t = sb.t().contiguous().t()
    F = torch.nn.functional
    try:
        if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
            return F.scaled_mm(a, b, sa_t, F.ScalingType.BlockWise1x128, sb_t, F.ScalingType.BlockWise128x128,
                               output_dtype=torch.bfloat16)
        return torch._scaled_mm(a, b, scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as err:
        pytest.skip(f"torch {torch.__version__} runs no block-wise scaled fp8 GEMM here: {str(err)[:200]}")


@pytest.mark.parametrize("M,N,K", [(256, 512, 1024), (1024, 2048, 4096), (4096, 4096, 8192)])
def test_accuracy_is_torchs_or_better(M, N, K, gen):
    """The same inputs through torch (cuBLASLt's block-wise fp8): our relative error within
    1.25x of torch's (both round to bf16 last)."""
    d = td.Dispatcher("gemm", GPU)
    a, b, sa, sb = operands(DType.FP8_E4M3, M, N, K, gen)
    theirs = torch_block_scaled(a, b, sa, sb)
    ours = run(d, None, a, b, sa, sb)
    a64, b64 = dequantized(a, b, sa, sb)
    ref = a64 @ b64
    rel_ours = float((ours.double() - ref).norm() / ref.norm())
    rel_theirs = float((theirs.double() - ref).norm() / ref.norm())
    assert rel_ours <= 1.25 * rel_theirs + 1e-6, (rel_ours, rel_theirs)


def test_td_gemm_on_device_arrays_reaches_the_blockwise_kernel(gen):
    """td.gemm(a, b, scale_a=, scale_b=) on CUDA tensors with the block-wise shapes."""
    a, b, sa, sb = operands(DType.FP8_E4M3, 129, 264, 640, gen)
    out = td.gemm(a, b, scale_a=sa, scale_b=sb)
    torch.cuda.synchronize()
    a64, b64 = dequantized(a, b, sa, sb)
    assert tuple(out.shape) == (129, 264) and out.dtype == torch.bfloat16
    check(out, a64 @ b64, a64.abs() @ b64.abs(), 640, "td.gemm")
