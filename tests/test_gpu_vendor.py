"""The vendor-library families (cudnn, cublaslt) on the GPU: results against float64 torch
references, the `vendor` option (ours alone), and a first call inside CUDA-graph capture; the
cublaslt family's GEMM features (epilogues, output types, batches, fp8 row / column and
block-wise scales) against float64 and torch._scaled_mm, and its refusals by their reasons.
Skipped where there is no GPU, no torch, or the installation built no vendor kernels.
(tests/test_gpu_conv.py and tests/test_gpu.py run every compiled variant, these included,
over their odd-size cases too.)"""

import math
import re

import pytest

import tiledispatch as td
from tiledispatch._cuda import device_targets

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
F = torch.nn.functional
GPU = next((t for t in device_targets() if t in td.registry().targets), None)


def vendor_kernels(op, family):
    if GPU is None:
        return []
    return [k for k in td.registry().kernels(op, GPU) if k.family == family]


CUDNN = vendor_kernels("conv", "cudnn")
CUBLASLT = vendor_kernels("gemm", "cublaslt")
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16}


def rel_error(got, ref):
    return float((got.double() - ref).norm() / ref.norm())


def nchw(t):
    return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))


@pytest.mark.skipif(not CUDNN, reason="no cudnn kernels in this installation")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case", [
    # N, G, C, K, input, filter, stride, pad, dilation: RegNet-like grouped at stride 2, a
    # depthwise 5x5 stride 2, a dense stem, a 1D depthwise, a 3D grouped
    (4, 8, 24, 24, (15, 15), (3, 3), (2, 2), (1, 1), (1, 1)),
    (2, 40, 1, 1, (17, 17), (5, 5), (2, 2), (2, 2), (1, 1)),
    (2, 1, 3, 32, (33, 33), (7, 7), (2, 2), (3, 3), (1, 1)),
    (3, 16, 1, 1, (50,), (4,), (1,), (3,), (1,)),
    (2, 4, 8, 8, (5, 6, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 2, 1)),
])
def test_cudnn_every_direction(case, dtype):
    N, G, C, K, inp, fil, st, pad, dil = case
    nd = len(inp)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    grad_input = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv3d_input}[nd]
    grad_weight = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight,
                   3: torch.nn.grad.conv3d_weight}[nd]
    layout = {1: "nwgc", 2: "nhwgc", 3: "ndhwgc"}[nd]
    gen = torch.Generator(device="cuda").manual_seed(1)
    tdt = TORCH[dtype]
    x = (torch.rand((N, *inp, G * C), generator=gen, device="cuda") * 2 - 1).to(tdt)
    w = (torch.rand((G * K, *fil, C), generator=gen, device="cuda") * 2 - 1).to(tdt)
    out = tuple((i + 2 * p - d * (f - 1) - 1) // s + 1 for i, f, s, p, d in zip(inp, fil, st, pad, dil))
    dy = (torch.rand((N, *out, G * K), generator=gen, device="cuda") * 2 - 1).to(tdt)
    x64, w64, dy64 = nchw(x).double(), nchw(w).double(), nchw(dy).double()
    kw = dict(stride=st, padding=pad, dilation=dil, groups=G)
    tol = 1e-2 if dtype == "bf16" else 3e-3

    y = td.conv(x, w, **kw, kernel=f"conv_fwd_{layout}_{dtype}_1x1x1_cudnn_sm90a")
    assert rel_error(nchw(y), conv(x64, w64, None, st, pad, dil, G)) < tol
    dx = td.conv(dy, w, **kw, direction="bwd_data", input_size=inp,
                 kernel=f"conv_bwddata_{layout}_{dtype}_1x1x1_cudnn_sm90a")
    assert rel_error(nchw(dx), grad_input(x64.shape, w64, dy64, st, pad, dil, G)) < tol
    dw = td.conv(x, dy, **kw, direction="bwd_weight", filter_size=fil,
                 kernel=f"conv_bwdweight_{layout}_{dtype}_1x1x1_cudnn_sm90a")
    assert rel_error(nchw(dw), grad_weight(x64, w64.shape, dy64, st, pad, dil, G)) < tol


@pytest.mark.skipif(not CUDNN, reason="no cudnn kernels in this installation")
def test_vendor_option_leaves_cudnn_out():
    d = td.Dispatcher("conv", GPU)
    dense = td.ConvProblem(8, 1, 64, 64, (28, 28), (3, 3), 2, 1, 1, "bwd_data", "bf16")
    previous = td.set_options(vendor=False)
    try:
        assert "_cudnn_" not in d.select(dense)
        assert td.options()["vendor"] is False
        # a vendor kernel still runs when named
        assert d.is_supported(dense, kernel="conv_bwddata_nhwgc_bf16_1x1x1_cudnn_sm90a")
    finally:
        td.set_options(**previous)
    assert td.options()["vendor"] is True


@pytest.mark.skipif(not CUDNN, reason="no cudnn kernels in this installation")
def test_cudnn_first_call_inside_graph_capture():
    """A problem cuDNN has not seen, first run inside capture: cuDNN's heuristic algorithm
    (no benchmark can run there); the replay gives the right result."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = (torch.rand((2, 19, 21, 48), generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
    w = (torch.rand((48, 3, 3, 12), generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
    y = torch.empty((2, 10, 11, 48), device="cuda", dtype=torch.bfloat16)
    name = "conv_fwd_nhwgc_bf16_1x1x1_cudnn_sm90a"
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            td.conv(x, w, stride=2, padding=1, groups=4, out=y, kernel=name)
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    ref = F.conv2d(nchw(x).double(), nchw(w).double(), None, 2, 1, 1, 4)
    assert rel_error(nchw(y), ref) < 1e-2


@pytest.mark.skipif(not CUBLASLT, reason="no cublaslt kernels in this installation")
@pytest.mark.parametrize("kernel", CUBLASLT, ids=lambda k: k.name)
@pytest.mark.parametrize("shape", [(37, 45, 64), (256, 384, 512), (2, 4096, 1024)])
def test_cublaslt_every_layout(kernel, shape):
    M, N, K = shape
    layout = kernel.layout.key
    gen = torch.Generator(device="cuda").manual_seed(3)
    a32 = torch.rand((M, K), generator=gen, device="cuda") * 2 - 1
    b32 = torch.rand((K, N), generator=gen, device="cuda") * 2 - 1
    def stored(m, row, dt):  # an (rows x cols) view, row- or column-major in memory
        return m.to(dt) if row else m.t().contiguous().to(dt).t()

    if kernel.dtype.key == "fp8_e4m3":
        if N % 8:  # cuBLASLt's fp8 output needs ldc a multiple of 8: refused, not run
            problem = td.GemmProblem(M, N, K, "fp8_e4m3", "rcr")
            assert not td.Dispatcher("gemm", GPU).is_supported(problem, kernel=kernel.name)
            return
        a, b = stored(a32, True, torch.float8_e4m3fn), stored(b32, False, torch.float8_e4m3fn)
        c = td.gemm(a, b, kernel=kernel.name, alpha=0.5)
        ref = 0.5 * (a.double() @ b.double())
        tol = 2e-2
    else:
        dt = TORCH[kernel.dtype.key]
        a, b = stored(a32, layout[0] == "r", dt), stored(b32, layout[1] == "r", dt)
        c = td.gemm(a, b, kernel=kernel.name)
        ref = a.double() @ b.double()
        tol = 1e-2 if kernel.dtype.key == "bf16" else 3e-3
    assert tuple(c.shape) == (M, N)
    assert rel_error(c, ref) < tol


@pytest.mark.skipif(not CUDNN, reason="no cudnn kernels in this installation")
def test_selection_takes_cudnn_where_ours_measured_behind_and_ours_elsewhere():
    """The cudnn family's cost entry (bindings/cost/cudnn.cpp) by class of layer: cuDNN for
    dense and strided depthwise layers, our depthwise kernel at stride 1 (where built), and
    the classes the zoo measured ours behind in (channels not a multiple of 8 in bwd_weight,
    single-image 3x3 depthwise, 32 channels a group)."""
    d = td.Dispatcher("conv", GPU)
    dense = td.ConvProblem(32, 1, 64, 64, (28, 28), (3, 3), 1, 1, 1, "fwd", "bf16")
    assert d.select(dense) == "conv_fwd_nhwgc_bf16_1x1x1_cudnn_sm90a"
    strided = td.ConvProblem(32, 96, 1, 1, (56, 56), (3, 3), 2, 1, 1, "fwd", "bf16")
    assert d.select(strided) == "conv_fwd_nhwgc_bf16_1x1x1_cudnn_sm90a"
    cudnn = "conv_{}_nhwgc_bf16_1x1x1_cudnn_sm90a"
    names = [k.name for k in td.registry().kernels("conv", GPU)]
    if any(n.endswith("_dw_sm90a") for n in names):
        depthwise = td.ConvProblem(32, 96, 1, 1, (56, 56), (3, 3), 1, 1, 1, "fwd", "bf16")
        assert d.select(depthwise).endswith("_dw_sm90a")
        # channels not a multiple of 8: cuDNN in bwd_weight, ours where they are
        for G, ours in ((100, False), (96, True)):
            wgrad = td.ConvProblem(32, G, 1, 1, (14, 14), (3, 3), 1, 1, 1, "bwd_weight", "bf16")
            assert d.select(wgrad).endswith("_dw_sm90a") == ours, G
            assert ours or d.select(wgrad) == cudnn.format("bwdweight")
        # batch 1 (inference), 3x3: cuDNN's single-image kernels
        single = td.ConvProblem(1, 96, 1, 1, (56, 56), (3, 3), 1, 1, 1, "fwd", "bf16")
        assert d.select(single) == cudnn.format("fwd")
    if any("_dwmma_" in n for n in names):
        large = td.ConvProblem(1, 160, 1, 1, (14, 14), (7, 7), 1, 3, 1, "fwd", "bf16")
        assert "_dwmma_" in d.select(large)  # depthwise_mma's tiles fit: ours at batch 1 too
    if any("_gmma_" in k.name for k in td.registry().kernels("conv", GPU)):
        # RegNet's groups of 24 and 48 channels: grouped_mma in every direction, strided too;
        # 64 channels a group stays on cuDNN
        for C, stride in ((24, 1), (24, 2), (48, 2)):
            for direction in ("fwd", "bwd_data", "bwd_weight"):
                grouped = td.ConvProblem(32, 14, C, C, (28, 28), (3, 3), stride, 1, 1, direction, "bf16")
                assert "_gmma_" in d.select(grouped), (C, stride, direction)
        wide = td.ConvProblem(32, 4, 64, 64, (56, 56), (3, 3), 1, 1, 1, "fwd", "bf16")
        assert d.select(wide) == "conv_fwd_nhwgc_bf16_1x1x1_cudnn_sm90a"
        # ResNeXt's 32 channels a group: cuDNN in fwd and bwd_weight, grouped_mma in bwd_data
        for direction, tag in (("fwd", "fwd"), ("bwd_weight", "bwdweight"), ("bwd_data", None)):
            g32 = td.ConvProblem(32, 32, 32, 32, (7, 7), (3, 3), 1, 1, 1, direction, "bf16")
            picked = d.select(g32)
            assert (picked == cudnn.format(tag)) if tag else ("_gmma_" in picked), (direction, picked)


@pytest.mark.skipif(not CUBLASLT, reason="no cublaslt kernels in this installation")
def test_the_cost_model_takes_cublaslt_for_17_to_256_tokens():
    """The cublaslt family's cost entry (bindings/cost/cublaslt.cpp) by the problem's short
    side: the vendor where our pick measured behind it (17 to 256 rows, and fp8 decode),
    our skinny kernel for bf16 decode where it is built. The cost model's pick (model_select):
    a tuning table that measured a shape decides it instead."""
    d = td.Dispatcher("gemm", GPU)
    for m in (32, 64, 128, 256):
        assert d.model_select(td.GemmProblem(m, 4096, 4096, "bf16", "rcr")) == "gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"
        assert d.model_select(td.GemmProblem(4096, m, 4096, "bf16", "rcr")) == "gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"
    names = {k.name for k in td.registry().kernels("gemm", GPU)}
    if "gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a" in names:
        assert d.model_select(td.GemmProblem(16, 4096, 4096, "fp8_e4m3", "rcr")) == \
            "gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a"
    if any(n.startswith("gemm_bf16_rcr_") and n.endswith("_skinny_sm90a") for n in names):
        assert d.model_select(td.GemmProblem(8, 4096, 4096, "bf16", "rcr")).endswith("_skinny_sm90a")


# ---- the cublaslt family's GEMM features (run_ex: bindings/cuda/gemm_cublaslt.cuh) ----------
# Each against a float64 reference on the same quantized inputs, by kernel name, through
# Dispatcher.run's epilogue operands on device addresses.

LT_BF16 = "gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"
LT_FP16_CCR = "gemm_fp16_ccr_standard_1x1x1_cublaslt_sm90a"
LT_FP8 = "gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a"
LT_NAMES = {k.name for k in CUBLASLT}
IN_KEY = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8_e4m3"}
OUT_KEY = {None: "default", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
LT_WORKSPACE = 32 << 20  # kCublasLtWorkspace
# Where lt_case runs: the GPU, or (tests/test_cublaslt_features.py, which checks these
# references against the ABI's reference implementation) the cpu target's generic kernels.
DEVICE = "cuda"


def needs(*names):
    missing = [n for n in names if n not in LT_NAMES]
    return pytest.mark.skipif(bool(missing), reason=f"not built: {', '.join(missing)}")


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACT = {"none": lambda x: x, "relu": lambda x: x.clamp_min(0.0), "gelu_tanh": gelu_tanh}


def f64(t):
    return t.float().double()


def lt_run(name, problem, a, b, d, **epilogue):
    """One run of a named kernel on DEVICE tensors; the epilogue operands by TdGemmEpilogue name."""
    ops = {k: v.data_ptr() for k, v in epilogue.items() if v is not None}
    gpu = DEVICE == "cuda"
    td.Dispatcher("gemm", GPU if gpu else "cpu").run(
        problem, a.data_ptr(), b.data_ptr(), d.data_ptr(), kernel=name, timed=False,
        stream=torch.cuda.current_stream().cuda_stream if gpu else None, epilogue=ops)
    if gpu:
        torch.cuda.synchronize()


def lt_case(name, in_dt, M, N, K, *, alpha=1.0, beta=0.0, c_is_d=False, bias=False, act="none", aux=False, out=None,
            batch=1, broadcast_b=False, a_row=True, seed=5):
    """Runs D = act(alpha * A B + beta * C + bias) (aux: the pre-activation) and returns
    (D, aux, the float64 D, the float64 pre-activation). B is column-major (rcr / ccr)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    out_dt = out or (torch.float16 if in_dt == torch.float16 else torch.bfloat16)
    G = batch

    def rand(*shape, dt):
        return (torch.rand(shape, generator=gen, device=DEVICE) * 2 - 1).to(dt)

    a_st = rand(G, M, K, dt=in_dt) if a_row else rand(G, K, M, dt=in_dt)  # A row- or column-major
    b_st = rand(1 if broadcast_b else G, N, K, dt=in_dt)  # B (K x N) column-major
    c = rand(G, M, N, dt=out_dt) if beta else None
    bias_v = rand(N, dt=out_dt) if bias else None
    c64 = f64(c) if c is not None else None
    d = c if c_is_d else torch.full((G, M, N), float("nan"), dtype=out_dt, device=DEVICE)
    aux_t = torch.full((G, M, N), float("nan"), dtype=out_dt, device=DEVICE) if aux else None
    batched = G > 1
    problem = td.GemmProblem(
        M, N, K, IN_KEY[in_dt], "rcr" if a_row else "ccr", lda=K if a_row else M, ldb=K, ldc=N, alpha=alpha,
        batch=G if batched else 0, stride_a=M * K if batched else 0,
        stride_b=(0 if broadcast_b else N * K) if batched else 0, stride_c=M * N if batched else 0,
        beta=beta, bias="n" if bias else "none", activation=act, aux=aux, out_dtype=OUT_KEY[out])
    lt_run(name, problem, a_st, b_st, d, c=c, bias=bias_v, aux=aux_t)
    a64 = f64(a_st) if a_row else f64(a_st).transpose(1, 2)
    x = alpha * (a64 @ f64(b_st).transpose(1, 2))
    if beta:
        x = x + beta * c64
    if bias:
        x = x + f64(bias_v)
    return d, aux_t, ACT[act](x), x


def tol_of(out_dt):
    return {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 1e-2}[out_dt]


LT_CASES = [  # (id, keyword arguments of lt_case)
    ("beta", dict(beta=0.5)),
    ("beta_in_place", dict(beta=1.0, c_is_d=True)),
    ("alpha_beta_bias", dict(alpha=0.5, beta=0.25, bias=True)),
    ("bias_relu", dict(bias=True, act="relu")),
    ("gelu_tanh", dict(act="gelu_tanh")),
    ("bias_gelu_tanh_aux", dict(bias=True, act="gelu_tanh", aux=True)),
    ("gelu_tanh_aux_fp32", dict(act="gelu_tanh", aux=True, out=torch.float32)),
    ("out_fp32", dict(out=torch.float32)),
    ("out_fp32_beta_bias_relu", dict(out=torch.float32, beta=0.5, bias=True, act="relu")),
    ("batch_beta_bias_relu", dict(batch=3, beta=0.5, bias=True, act="relu")),
    ("batch_broadcast_b_gelu_aux", dict(batch=3, broadcast_b=True, bias=True, act="gelu_tanh", aux=True)),
]


@needs(LT_BF16)
@pytest.mark.parametrize("case", [c for _, c in LT_CASES], ids=[i for i, _ in LT_CASES])
def test_cublaslt_bf16_features(case):
    d, aux, ref, pre = lt_case(LT_BF16, torch.bfloat16, 64, 48, 80, **case)
    tol = tol_of(case.get("out") or torch.bfloat16)
    # an fp32 D of GELU: room for a hardware tanh approximation in cuBLASLt's epilogue
    assert rel_error(d, ref) < (max(tol, 2e-3) if case.get("act") == "gelu_tanh" else tol)
    if aux is not None:
        assert rel_error(aux, pre) < tol


@needs(LT_FP16_CCR)
def test_cublaslt_fp16_ccr_features():
    """Another layout and type: A column-major, fp32 out, beta, bias, batch."""
    d, _, ref, _ = lt_case(LT_FP16_CCR, torch.float16, 40, 56, 72, a_row=False, out=torch.float32, beta=0.5,
                           bias=True, batch=2)
    assert rel_error(d, ref) < 1e-4
    d, _, ref, _ = lt_case(LT_FP16_CCR, torch.float16, 40, 56, 72, a_row=False, bias=True, act="relu")
    assert rel_error(d, ref) < 3e-3


FP8_CASES = [
    ("bf16_alpha_beta_bias_gelu_aux", dict(alpha=0.5, beta=0.5, bias=True, act="gelu_tanh", aux=True)),
    ("fp16_bias_relu", dict(out=torch.float16, bias=True, act="relu")),
    ("fp32_beta", dict(out=torch.float32, beta=1.0)),
    ("batch_bf16", dict(batch=2, beta=0.5)),
]


@needs(LT_FP8)
@pytest.mark.parametrize("case", [c for _, c in FP8_CASES], ids=[i for i, _ in FP8_CASES])
def test_cublaslt_fp8_features(case):
    d, aux, ref, pre = lt_case(LT_FP8, torch.float8_e4m3fn, 64, 96, 128, **case)
    tol = max(tol_of(case.get("out") or torch.bfloat16), 1e-3)  # fp32 out: fp32 accumulation of fp8 products
    assert rel_error(d, ref) < tol
    if aux is not None:
        assert rel_error(aux, pre) < tol


def fp8_operands(M, N, K, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    a = (torch.rand((M, K), generator=gen, device=DEVICE) * 2 - 1).to(torch.float8_e4m3fn)
    bt = (torch.rand((N, K), generator=gen, device=DEVICE) * 2 - 1).to(torch.float8_e4m3fn)  # B column-major
    return gen, a, bt


@needs(LT_FP8)
@pytest.mark.parametrize("rows,cols", [(True, True), (True, False), (False, True)])
def test_cublaslt_fp8_row_and_column_scales(rows, cols):
    """cuBLASLt's outer-vector scales: D = alpha * acc * row_scale[i] * col_scale[j] (+ bias);
    ones fill in for the missing vector. Against float64 and, for both vectors at alpha 1,
    torch._scaled_mm's row-wise scaling."""
    M, N, K = 64, 96, 256
    gen, a, bt = fp8_operands(M, N, K, 6)
    row = torch.rand(M, generator=gen, device=DEVICE) + 0.5
    col = torch.rand(N, generator=gen, device=DEVICE) + 0.5
    bias = (torch.rand(N, generator=gen, device=DEVICE) * 2 - 1).to(torch.bfloat16)
    alpha = 1.0 if rows and cols else 2.0
    d = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    problem = td.GemmProblem(M, N, K, "fp8_e4m3", "rcr", alpha=alpha, row_scale=rows, col_scale=cols, bias="n")
    lt_run(LT_FP8, problem, a, bt, d, row_scale=row if rows else None, col_scale=col if cols else None, bias=bias)
    acc = f64(a) @ f64(bt).t()
    ref = alpha * acc * (f64(row)[:, None] if rows else 1.0) * (f64(col)[None, :] if cols else 1.0) + f64(bias)
    assert rel_error(d, ref) < 1e-2
    if rows and cols and DEVICE == "cuda":
        want = torch._scaled_mm(a, bt.t(), scale_a=row[:, None].contiguous(), scale_b=col[None, :].contiguous(),
                                out_dtype=torch.bfloat16)  # its row-wise mode: bf16 out
        assert rel_error(d, f64(want) + f64(bias)) < 1e-2


@needs(LT_FP8)
def test_cublaslt_fp8_row_scales_with_a_batch_run_or_are_refused_by_cublaslt():
    """Outer-vector scales shared by a batch of 2 (the ABI: one row_scale and col_scale for every
    matrix): the right result, or cuBLASLt's refusal of the plan (TD_REJECTED with its status)."""
    M, N, K, G = 32, 64, 128, 2
    gen = torch.Generator(device=DEVICE).manual_seed(9)
    a = (torch.rand((G, M, K), generator=gen, device=DEVICE) * 2 - 1).to(torch.float8_e4m3fn)
    bt = (torch.rand((G, N, K), generator=gen, device=DEVICE) * 2 - 1).to(torch.float8_e4m3fn)
    row = torch.rand(M, generator=gen, device=DEVICE) + 0.5
    col = torch.rand(N, generator=gen, device=DEVICE) + 0.5
    d = torch.full((G, M, N), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    problem = td.GemmProblem(M, N, K, "fp8_e4m3", "rcr", batch=G, stride_a=M * K, stride_b=N * K, stride_c=M * N,
                             row_scale=True, col_scale=True)
    try:
        lt_run(LT_FP8, problem, a, bt, d, row_scale=row, col_scale=col)
    except td.KernelRejectedError as err:
        assert "cuBLASLt refused" in str(err) or "cuBLASLt has no algorithm" in str(err), str(err)
        return
    ref = (f64(a) @ f64(bt).transpose(1, 2)) * f64(row)[:, None] * f64(col)[None, :]
    assert rel_error(d, ref) < 1e-2


@needs(LT_FP8)
@pytest.mark.parametrize("shape", [(128, 384, 512), (64, 320, 384), (36, 264, 208)])
def test_cublaslt_fp8_block_scales(shape):
    """Block-wise scales (1 x 128 of A, 128 x 128 of B) in the ABI's row-major layouts,
    transposed into cuBLASLt's: ceil(K/128) of 3 and 2 and partial blocks exercise the padded
    K-major rows of B's scales. Against float64 on the dequantized operands and, where this torch
    has it, torch._scaled_mm's 1x128 / 128x128 block-wise scaling."""
    M, N, K = shape
    gen, a, bt = fp8_operands(M, N, K, 7)
    L, NB = -(-K // 128), -(-N // 128)
    sa = torch.rand((M, L), generator=gen, device=DEVICE) + 0.5  # row-major, as the ABI
    sb = torch.rand((L, NB), generator=gen, device=DEVICE) + 0.5
    d = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    problem = td.GemmProblem(M, N, K, "fp8_e4m3", "rcr", block_scale=True)
    lt_run(LT_FP8, problem, a, bt, d, scale_a=sa, scale_b=sb)
    k = torch.arange(K, device=DEVICE)
    a_deq = f64(a) * f64(sa)[:, k // 128]
    b_deq = f64(bt).t() * f64(sb)[k // 128][:, torch.arange(N, device=DEVICE) // 128]
    ref = a_deq @ b_deq
    assert rel_error(d, ref) < 1e-2
    if DEVICE != "cuda":
        return
    try:  # torch's layouts: scale_a (M, L) M-major, scale_b (L, NB) K-major
        want = torch._scaled_mm(a, bt.t(), scale_a=sa.t().contiguous().t(), scale_b=sb.t().contiguous().t(),
                                out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as err:
        pytest.skip(f"torch._scaled_mm has no block-wise scaling here: {str(err).splitlines()[0]}")
    if rel_error(want, ref) > 1e-2:  # ours matched float64 above: this torch reads these scales otherwise
        pytest.skip(f"torch._scaled_mm's block-wise mode disagrees with float64 at {shape} "
                    f"(relative error {rel_error(want, ref):.2g})")
    assert rel_error(d, f64(want)) < 1e-2


@needs(LT_FP8)
def test_cublaslt_fp8_block_scales_with_an_epilogue_run_or_are_refused_by_cublaslt():
    """Block-wise scales with beta and a bias: cuBLASLt computes them, or refuses the plan (its
    status, TD_REJECTED), never a wrong result."""
    M, N, K = 64, 256, 256
    gen, a, bt = fp8_operands(M, N, K, 8)
    sa = torch.rand((M, 2), generator=gen, device=DEVICE) + 0.5
    sb = torch.rand((2, 2), generator=gen, device=DEVICE) + 0.5
    c = (torch.rand((M, N), generator=gen, device=DEVICE) * 2 - 1).to(torch.bfloat16)
    bias = (torch.rand(N, generator=gen, device=DEVICE) * 2 - 1).to(torch.bfloat16)
    d = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    problem = td.GemmProblem(M, N, K, "fp8_e4m3", "rcr", block_scale=True, beta=0.5, bias="n", activation="relu")
    try:
        lt_run(LT_FP8, problem, a, bt, d, scale_a=sa, scale_b=sb, c=c, bias=bias)
    except td.KernelRejectedError as err:
        assert "cuBLASLt refused" in str(err) or "cuBLASLt has no algorithm" in str(err), str(err)
        return
    k = torch.arange(K, device=DEVICE)
    ref = (f64(a) * f64(sa)[:, k // 128]) @ (f64(bt).t() * f64(sb)[k // 128][:, torch.arange(N, device=DEVICE) // 128])
    ref = (ref + 0.5 * f64(c) + f64(bias)).clamp_min(0.0)
    assert rel_error(d, ref) < 1e-2


LT_REFUSED = [  # (kernel, problem fields, the reason's words): refused by supports() or the core
    (LT_BF16, dict(bias="m"), "this kernel implements no bias along M"),  # no TD_FEATURE_BIAS_M
    (LT_BF16, dict(activation="gelu"), "it has no erf GELU"),
    (LT_BF16, dict(activation="silu"), "cuBLASLt has no SiLU epilogue"),
    (LT_BF16, dict(activation="relu", aux=True), "ReLU aux output is a bit mask"),
    (LT_BF16, dict(aux=True), "aux needs activation gelu_tanh"),
    (LT_BF16, dict(out_dtype="fp16"), "cuBLASLt has no bf16 matmul with an fp16 output"),
    (LT_BF16, dict(activation="gelu_tanh", aux=True, N=44), "needs ldc and stride_c multiples of 8"),
    (LT_BF16, dict(row_scale=True), "this kernel implements no row scale"),
    (LT_BF16, dict(block_scale=True), "this kernel implements no block-wise scale"),
    (LT_FP8, dict(bias="n", out_dtype="fp32"), "with an fp32 output takes a bf16 bias"),
    (LT_FP8, dict(block_scale=True, batch=2, stride_a=64 * 128, stride_b=64 * 128, stride_c=64 * 64),
     "block-wise scales with a batch are not implemented"),
    (LT_FP8, dict(block_scale=True, M=62), "block scales need M and N multiples of 4"),
    (LT_FP8, dict(block_scale=True, row_scale=True), "one scale mode per operand"),
]


@pytest.mark.parametrize("name,fields,words", LT_REFUSED, ids=[f"{n.split('_')[1]}-{w[:24]}" for n, _, w in LT_REFUSED])
def test_cublaslt_refusals(name, fields, words):
    if name not in LT_NAMES:
        pytest.skip(f"not built: {name}")
    fields = dict(fields)
    shape = dict(M=64, N=64, K=128)
    shape.update({k: fields.pop(k) for k in ("M", "N") if k in fields})
    problem = td.GemmProblem(dtype="fp8_e4m3" if "fp8" in name else "bf16", layout="rcr", **shape, **fields)
    d = td.Dispatcher("gemm", GPU)
    assert not d.is_supported(problem, kernel=name)
    with pytest.raises(td.KernelRejectedError, match=f"kernel {name} rejects this problem: .*{re.escape(words)}"):
        d.run(problem, 0, 0, 0, kernel=name)


@needs(LT_BF16, LT_FP8)
def test_cublaslt_feature_workspace_and_cost():
    d = td.Dispatcher("gemm", GPU)
    plain = td.GemmProblem(64, 96, 256, "fp8_e4m3", "rcr")
    assert d.workspace_size(plain, LT_FP8) == 0  # the plain path: the backend's scratch buffer, unchanged
    rows = td.GemmProblem(64, 96, 256, "fp8_e4m3", "rcr", row_scale=True)
    assert d.workspace_size(rows, LT_FP8) == LT_WORKSPACE + 512  # 96 ones, rounded to 256 bytes
    block = td.GemmProblem(64, 96, 256, "fp8_e4m3", "rcr", block_scale=True)
    assert d.workspace_size(block, LT_FP8) == LT_WORKSPACE + 512 + 256  # 64 x 2 and 4 x 1 floats
    epilogue = td.GemmProblem(64, 96, 256, "bf16", "rcr", beta=1.0, bias="n", activation="gelu_tanh", aux=True)
    assert d.workspace_size(epilogue, LT_BF16) == 0
    base = d.cost(td.GemmProblem(64, 96, 256, "bf16", "rcr"), LT_BF16)
    assert d.cost(epilogue, LT_BF16) > base
    # 300 tiles of the product: more than two waves of the 132 SMs, where one matrix is one tile
    batched = td.GemmProblem(64, 96, 256, "bf16", "rcr", batch=300, stride_a=64 * 256, stride_b=96 * 256,
                             stride_c=64 * 96)
    assert d.cost(batched, LT_BF16) > 2 * base
