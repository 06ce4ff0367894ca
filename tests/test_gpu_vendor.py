"""The vendor-library families (cudnn, cublaslt) on the GPU: results against float64 torch
references, the `vendor` option (ours alone), and a first call inside CUDA-graph capture.
Skipped where there is no GPU, no torch, or the installation built no vendor kernels.
(tests/test_gpu_conv.py and tests/test_gpu.py run every compiled variant, these included,
over their odd-size cases too.)"""

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
    dense and strided depthwise layers, our depthwise kernel at stride 1 (where built)."""
    d = td.Dispatcher("conv", GPU)
    dense = td.ConvProblem(32, 1, 64, 64, (28, 28), (3, 3), 1, 1, 1, "fwd", "bf16")
    assert d.select(dense) == "conv_fwd_nhwgc_bf16_1x1x1_cudnn_sm90a"
    strided = td.ConvProblem(32, 96, 1, 1, (56, 56), (3, 3), 2, 1, 1, "fwd", "bf16")
    assert d.select(strided) == "conv_fwd_nhwgc_bf16_1x1x1_cudnn_sm90a"
    if any(k.name.endswith("_dw_sm90a") for k in td.registry().kernels("conv", GPU)):
        depthwise = td.ConvProblem(32, 96, 1, 1, (56, 56), (3, 3), 1, 1, 1, "fwd", "bf16")
        assert d.select(depthwise).endswith("_dw_sm90a")


@pytest.mark.skipif(not CUBLASLT, reason="no cublaslt kernels in this installation")
def test_selection_takes_cublaslt_for_17_to_256_tokens():
    """The cublaslt family's cost entry (bindings/cost/cublaslt.cpp) by the problem's short
    side: the vendor where our pick measured behind it (17 to 256 rows, and fp8 decode),
    our skinny kernel for bf16 decode where it is built."""
    d = td.Dispatcher("gemm", GPU)
    for m in (32, 64, 128, 256):
        assert d.select(td.GemmProblem(m, 4096, 4096, "bf16", "rcr")) == "gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"
        assert d.select(td.GemmProblem(4096, m, 4096, "bf16", "rcr")) == "gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"
    names = {k.name for k in td.registry().kernels("gemm", GPU)}
    if "gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a" in names:
        assert d.select(td.GemmProblem(16, 4096, 4096, "fp8_e4m3", "rcr")) == \
            "gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a"
    if any(n.startswith("gemm_bf16_rcr_") and n.endswith("_skinny_sm90a") for n in names):
        assert d.select(td.GemmProblem(8, 4096, 4096, "bf16", "rcr")).endswith("_skinny_sm90a")
