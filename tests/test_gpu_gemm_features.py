"""td.gemm's extra arguments on CUDA tensors (the sm_90a CUTLASS fused-epilogue variants and
the batched plain ones): every activation, beta with C aliasing D, bias along N and M, row and
column scales, aux, output types, batches with strides and a broadcast B, odd sizes, against
a float64 reference on the same quantized inputs; through the kernel the dispatcher chooses
and through each fused kernel by name. Skipped without a GPU, torch or an sm_90a library;
run by bench/gpu_run.sh on the H200."""
import re

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import Activation, Bias

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
GPU = next((t for t in device_targets() if t in td.registry().targets), None)
pytestmark = pytest.mark.skipif(
    GPU is None, reason=f"no GPU with a library in this installation (GPUs seen: {device_targets() or 'none'}, "
                        f"libraries: {td.registry().targets})")

TORCH = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn",
         "fp8_e5m2": "float8_e5m2"}
DEFAULT_OUT = {"fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "bf16", "fp8_e5m2": "bf16"}
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
FUSION_ACT = {"fepi": "none", "frelu": "relu", "fgelu": "gelu", "fgelu_tanh": "gelu_tanh", "fsilu": "silu"}
# CUTLASS's activation functors use the GPU's fast tanh / exp: a little more than the
# output type's rounding (the fp32-output variants here apply no activation)
ACT_SLACK = 2e-3


def tt(key):
    return getattr(torch, TORCH[key])


def fused_kernels():
    if GPU is None:
        return []
    return [k for k in td.registry().kernels("gemm", GPU)
            if k.family == "cutlass" and getattr(k.knobs, "fusion", "none") != "none"]


def skinny_generic_kernels():
    if GPU is None:
        return []
    return [k for k in td.registry().kernels("gemm", GPU)
            if k.family == "skinny" and getattr(k.knobs, "fusion", "none") == "generic"]


def rand(shape, key, gen, low=-1.0, high=1.0):
    """A CUDA tensor of `key` values quantized from uniform [low, high)."""
    x = torch.rand(*shape, generator=gen) * (high - low) + low
    return x.to(tt(key)).cuda()


def host(x):
    return None if x is None else x.double().cpu().numpy()


def check(actual, ref, mag, out_key, k, activation="none"):
    err = np.abs(host(actual) - ref)
    err = np.where(np.isnan(err), np.inf, err)
    slack = ACT_SLACK if activation != "none" else 0.0
    tol = (reference.tolerance_out(out_key, k) + slack) * mag + reference.UNDERFLOW[out_key] + reference.FLOOR
    bad = ~(err <= tol)
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} wrong, max error {float(err.max()):.3g}; "
                           f"first at {np.argwhere(bad)[0].tolist()}")


def problem_operands(dtype, M, N, K, gen, batch=None):
    """A (M x K) row-major and B (K x N) column-major (rcr) CUDA tensors, optionally batched."""
    lead = () if batch is None else (batch,)
    a = rand(lead + (M, K), dtype, gen)
    w = rand(lead + (N, K), dtype, gen)
    return a, w.transpose(-1, -2)


def run_case(dtype, M, N, K, gen, *, activation="none", beta=0.0, in_place=False, bias_along=None, scales=False,
             aux=False, out_dtype=None, kernel=None):
    out_key = out_dtype or DEFAULT_OUT[dtype]
    a, b = problem_operands(dtype, M, N, K, gen)
    c = rand((M, N), out_key, gen) if beta else None
    c_ref = host(c)
    bias = rand((N if bias_along == "n" else M,), out_key, gen) if bias_along else None
    rs = rand((M,), "fp32", gen, 0.5, 2.0) if scales else None
    cs = rand((N,), "fp32", gen, 0.5, 2.0) if scales else None
    out = c if in_place else None
    result = td.gemm(a, b, alpha=1.5, c=c, beta=beta if c is not None else None, bias=bias,
                     bias_along=bias_along or "n", activation=None if activation == "none" else activation,
                     row_scale=rs, col_scale=cs, out=out, return_aux=aux, out_dtype=out_dtype, kernel=kernel)
    d, x = result if aux else (result, None)
    torch.cuda.synchronize()
    assert isinstance(d, torch.Tensor) and d.is_cuda and d.dtype == tt(out_key) and d.shape == (M, N)
    if in_place:
        assert d.data_ptr() == c.data_ptr()
    pre, ref, mag = reference.gemm_epilogue(host(a), host(b), alpha=1.5, beta=beta, c=c_ref, bias=host(bias),
                                            bias_along=bias_along or "n", activation=activation,
                                            row_scale=host(rs), col_scale=host(cs))
    check(d, ref, mag, out_key, K, activation)
    if aux:
        check(x, pre, mag, out_key, K)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261205)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("M", [1, 17, 256])
def test_each_activation_through_the_chosen_kernel(gen, dtype, activation, M):
    run_case(dtype, M, 24, 40, gen, activation=activation, beta=0.5, bias_along="n", scales=True)


@pytest.mark.parametrize("bias_along", ["n", "m", None])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
def test_beta_and_bias_along_n_and_m(gen, bias_along, beta):
    run_case("bf16", 17, 24, 40, gen, activation="gelu", beta=beta, bias_along=bias_along)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_c_aliasing_d_accumulates_in_place(gen, dtype):
    run_case(dtype, 129, 136, 200, gen, beta=1.0, in_place=True, bias_along="m", activation="relu")


def test_aux_holds_the_pre_activation(gen):
    run_case("bf16", 17, 24, 40, gen, activation="gelu", beta=0.5, bias_along="n", aux=True)


@pytest.mark.parametrize("dtype, out_dtype", [("bf16", "fp32"), ("fp8_e4m3", "fp16"), ("fp8_e4m3", None),
                                              ("fp8_e4m3", "fp8_e4m3")])
def test_output_types(gen, dtype, out_dtype):
    K = 48 if dtype == "fp8_e4m3" else 40  # fp8 rows of K need 16 bytes (TMA)
    run_case(dtype, 17, 24, K, gen, beta=0.5 if dtype != "fp8_e4m3" else 0.0, bias_along="n", scales=True,
             out_dtype=out_dtype)


def test_an_fp8_d_saturates_through_our_fused_kernel(gen):
    """fp8 D from the fused CUTLASS variant: values past fp8_e4m3's 448 are stored as +-448
    (satfinite), never inf or NaN; the rest rounded as the reference."""
    name = "gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_fepi_ofp8e4m3_sm90a"
    if name not in {k.name for k in td.registry().kernels("gemm", GPU)}:
        pytest.skip(f"{name} is not in this build")
    M, N, K = 130, 144, 256
    a, b = problem_operands("fp8_e4m3", M, N, K, gen)
    rs = rand((M,), "fp32", gen, 0.5, 2.0)
    d = td.gemm(a, b, alpha=20.0, row_scale=rs, out_dtype="fp8_e4m3", kernel=name)
    torch.cuda.synchronize()
    assert d.dtype == torch.float8_e4m3fn and d.shape == (M, N)
    got = host(d)
    assert np.isfinite(got).all() and np.abs(got).max() == 448.0
    _, ref, mag = reference.gemm_epilogue(host(a), host(b), alpha=20.0, row_scale=host(rs))
    clipped = np.clip(ref, -448.0, 448.0)
    err = np.abs(got - clipped)
    tol = reference.tolerance_out("fp8_e4m3", K) * mag + reference.UNDERFLOW["fp8_e4m3"]
    assert (err <= tol).all(), float(err.max())


def test_fp8_row_wise_scales_through_scale_a_and_scale_b(gen):
    M, N, K = 33, 40, 64
    a, b = problem_operands("fp8_e4m3", M, N, K, gen)
    sa, sb = rand((M, 1), "fp32", gen, 0.5, 2.0), rand((1, N), "fp32", gen, 0.5, 2.0)
    d = td.gemm(a, b, scale_a=sa, scale_b=sb)
    torch.cuda.synchronize()
    _, ref, mag = reference.gemm_epilogue(host(a), host(b), row_scale=host(sa).reshape(-1),
                                          col_scale=host(sb).reshape(-1))
    check(d, ref, mag, "bf16", K)


@pytest.mark.parametrize("name", [k.name for k in fused_kernels()])
def test_each_fused_kernel_by_name(gen, name):
    kernel = next(k for k in fused_kernels() if k.name == name)
    act = FUSION_ACT["f" + re.search(r"_f(epi|relu|gelu_tanh|gelu|silu)(?:_|$)", name).group(1)]
    out = re.search(r"_o(fp32|fp16|bf16)_", name)
    out_dtype = out.group(1) if out else None
    dtype = kernel.dtype.key
    K = 48 if kernel.dtype.nbytes == 1 else 40
    for M in (1, 17):
        run_case(dtype, M, 24, K, gen, activation=act, beta=0.5, bias_along="m" if M == 17 else "n", scales=True,
                 aux="_aux_" in name, out_dtype=out_dtype, kernel=name)


@pytest.mark.parametrize("name", [k.name for k in skinny_generic_kernels()])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_each_skinny_generic_kernel_by_name(gen, name, activation):
    """The decode GEMM's generic epilogue: every activation; one block row of A and two (M 17),
    N not a multiple of the block's 16 rows of B; K long enough to split (the epilogue in the
    summing kernel) and short (in the GEMM kernel); C aliasing D, a bias along N and M, scales,
    aux and an fp32 D."""
    dtype = next(k for k in skinny_generic_kernels() if k.name == name).dtype.key
    for M, N, K in ((1, 40, 64), (5, 136, 8192), (17, 24, 128)):
        run_case(dtype, M, N, K, gen, activation=activation, beta=0.5, bias_along="n", scales=True, aux=True,
                 kernel=name)
    run_case(dtype, 16, 72, 4096, gen, activation=activation, beta=1.0, in_place=True, bias_along="m", kernel=name)
    run_case(dtype, 3, 56, 2048, gen, activation=activation, bias_along="n", out_dtype="fp32", kernel=name)


def test_a_plain_skinny_kernel_refuses_an_epilogue(gen):
    plain = [k for k in td.registry().kernels("gemm", GPU) if k.family == "skinny" and k.knobs.fusion == "none"]
    if not plain:
        pytest.skip("no skinny kernel in this build")
    dtype = plain[0].dtype.key
    a, b = problem_operands(dtype, 4, 64, 256, gen)
    with pytest.raises(td.KernelRejectedError, match="this kernel implements no bias along N"):
        td.gemm(a, b, bias=rand((64,), DEFAULT_OUT[dtype], gen), kernel=plain[0].name)


def test_a_fused_kernel_refuses_another_activation(gen):
    a, b = problem_operands("bf16", 17, 24, 40, gen)
    with pytest.raises(td.KernelRejectedError, match="applies activation gelu, the problem asks for relu"):
        td.gemm(a, b, activation="relu", kernel="gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fgelu_sm90a")


def batch_check(a, b, d, out_key, K, **epilogue):
    torch.cuda.synchronize()
    _, ref, mag = reference.gemm_epilogue(host(a), host(b), **epilogue)
    check(d, ref, mag, out_key, K, epilogue.get("activation", "none"))


@pytest.mark.parametrize("activation", [None, "silu"])
def test_batch_with_strides(gen, activation):
    """A batch of 5 with padded batch strides (each matrix a slice of a taller buffer)."""
    batch, M, N, K = 5, 17, 24, 40
    a = rand((batch, M + 3, K), "bf16", gen)[:, :M]
    w = rand((batch, N + 8, K), "bf16", gen)[:, :N]
    b = w.transpose(-1, -2)
    out = torch.empty(batch, M + 1, N, dtype=torch.bfloat16, device="cuda")[:, :M]
    bias = rand((N,), "bf16", gen) if activation else None
    d = td.gemm(a, b, out=out, activation=activation, bias=bias)
    assert d.data_ptr() == out.data_ptr()
    batch_check(a, b, d, "bf16", K, activation=activation or "none", bias=host(bias))


def test_batch_with_a_shared_b_folds_into_one_gemm(gen):
    batch, M, N, K = 6, 17, 24, 40
    a = rand((batch, M, K), "bf16", gen)
    b = rand((N, K), "bf16", gen).t()
    d = td.gemm(a, b, activation="gelu")
    assert d.shape == (batch, M, N)
    batch_check(a, b, d, "bf16", K, activation="gelu")
    plain = td.gemm(a, b)  # the plain variants fold it too
    batch_check(a, b, plain, "bf16", K)


def test_batch_with_a_shared_a_runs_on_cublaslt_or_is_refused(gen):
    """A 2-D A shared by a batch of B (batch stride 0): the cutlass kernels refuse it with the
    reason; the selection runs it on the cuBLASLt kernel where the build has it, else refuses it."""
    a = rand((17, 40), "bf16", gen)
    b = rand((4, 24, 40), "bf16", gen).transpose(-1, -2)
    with pytest.raises(td.KernelRejectedError, match="A or B broadcast over the batch"):
        td.gemm(a, b, kernel="gemm_bf16_rcr_standard_128x128x64_c1x1_coop_sm90a")
    vendor = "gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"
    if vendor not in {k.name for k in td.registry().kernels("gemm", GPU)}:
        with pytest.raises(td.UnsupportedProblemError):
            td.gemm(a, b)
        return
    d = td.gemm(a, b)
    assert d.shape == (4, 17, 24)
    batch_check(a.expand(4, -1, -1), b, d, "bf16", 40)


def test_plain_batch(gen):
    batch, M, N, K = 32, 128, 256, 64
    a = rand((batch, M, K), "fp16", gen)
    b = rand((batch, N, K), "fp16", gen).transpose(-1, -2)
    d = td.gemm(a, b)
    batch_check(a, b, d, "fp16", K)


@pytest.mark.parametrize("M, N, K", [(1, 4096, 4096), (17, 24, 40), (2048, 2048, 2048), (8192, 8192, 8192)])
def test_selection_keeps_plain_problems_on_plain_variants(M, N, K):
    """The fused variants cost 2% more on the tile estimate (C's shared memory) and their
    extra bytes in the floor: the cost model never picks one for a plain problem, and picks
    one for an epilogue problem."""
    d = td.Dispatcher("gemm", GPU)
    plain = td.GemmProblem(M, N, K, "bf16", "rcr")
    assert "_f" not in d.model_select(plain).replace("_fastacc", "")
    fused = td.GemmProblem(M, N, K, "bf16", "rcr", bias=Bias.N, activation=Activation.GELU)
    before = td.options()["vendor"]
    td.set_options(vendor=False)  # our kernels alone (a vendor kernel may implement the epilogue too)
    try:
        pick = d.model_select(fused)
    finally:
        td.set_options(vendor=before)
    names = {k.name for k in d.kernels}
    if M <= 16 and "gemm_bf16_rcr_standard_16x16x128_skinny_generic_sm90a" in names:
        assert pick == "gemm_bf16_rcr_standard_16x16x128_skinny_generic_sm90a", pick  # decode: B's bytes
        assert d.model_select(plain) == "gemm_bf16_rcr_standard_16x16x128_skinny_sm90a"
    else:
        assert "_fgelu_" in pick and "_aux" not in pick, pick
    for k in fused_kernels():
        twin = k.name.replace("_fepi", "")
        if k.dtype.key == "bf16" and "_fepi_sm90a" in k.name and twin in names:
            assert d.cost(plain, k.name) > d.cost(plain, twin)


@pytest.mark.parametrize("form", [dict(activation="gelu", bias_along="n", aux=True), dict(beta=1.0, in_place=True),
                                  dict(beta=-0.5, bias_along="m"), dict(scales=True), dict(out_dtype="fp32")])
def test_a_repeated_call_runs_its_stored_plan(gen, form):
    """The second call with the same metadata (new tensors, new addresses) takes the plan the
    first one stored (tiledispatch._gemm_plans): the same answers, outputs allocated anew."""
    from tiledispatch import _gemm_plans
    _gemm_plans.clear()
    run_case("bf16", 96, 136, 72, gen, **form)
    assert len(_gemm_plans._PLANS) == 1
    run_case("bf16", 96, 136, 72, gen, **form)
    assert len(_gemm_plans._PLANS) == 1


def test_a_stored_plan_still_refuses_an_out_overlapping_an_input(gen):
    a, b = problem_operands("bf16", 64, 64, 64, gen)
    bias = rand((64,), "bf16", gen)
    out = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
    td.gemm(a, b, bias=bias, activation="relu", out=out)
    ref = td.gemm(a, b, bias=bias, activation="relu")
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    with pytest.raises(td.InvalidArgumentError, match="out overlaps a"):
        td.gemm(a, b, bias=bias, activation="relu", out=a)  # a is 64 x 64 bf16 row-major: out's metadata
