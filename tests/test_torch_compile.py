"""torch.compile of models with tiledispatch.nn layers: one graph (fullgraph=True, no graph
break) holding the tiledispatch ops, forward and backward equal to eager; on a GPU,
mode="reduce-overhead" (CUDA graphs) replays bit for bit what eager computes."""
import pytest

from conftest import import_torch

torch = import_torch()
import torch.nn as nn  # noqa: E402

import tiledispatch as td  # noqa: E402
import tiledispatch.torch as tdt  # noqa: E402

ops = torch.ops.tiledispatch


def rand(*shape, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 2 - 1).to(dtype=dtype, device=device)


def model(dtype=torch.float32):
    torch.manual_seed(1)
    net = nn.Sequential(
        nn.Conv2d(8, 16, 3, padding=1, groups=4), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16), nn.ReLU(),
        nn.Conv2d(16, 8, 1),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
    ).to(dtype)
    return net


def recording(backend, graphs):
    """A compile backend that keeps the code of each graph dynamo hands it, then compiles
    it with `backend`."""
    inner = torch._dynamo.lookup_backend(backend)

    def compile_graph(gm, example_inputs):
        graphs.append(gm.code)
        return inner(gm, example_inputs)
    return compile_graph


def run(net, x):
    """Output and parameter gradients of one forward and backward."""
    net.zero_grad()
    y = net(x)
    y.square().sum().backward()
    return y.detach(), [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_one_graph_with_our_ops_matches_eager(backend):
    torch._dynamo.reset()
    net = model()
    report = tdt.patch(net, where=lambda name, module: True)
    assert report.swapped == ["0", "2", "4", "6"]
    x = rand(2, 8, 8, 8)
    y_eager, grads_eager = run(net, x)
    graphs = []
    compiled = torch.compile(net, backend=recording(backend, graphs), fullgraph=True)
    y, grads = run(compiled, x)
    assert len(graphs) == 1
    assert graphs[0].count("torch.ops.tiledispatch.conv(") == 3
    assert graphs[0].count("torch.ops.tiledispatch.gemm(") == 1
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    for g, g_eager in zip(grads, grads_eager):
        torch.testing.assert_close(g, g_eager, rtol=1e-5, atol=1e-6)


def test_layers_that_fall_back_compile_without_a_graph_break():
    torch._dynamo.reset()
    net = model(torch.float64)   # no float64 kernels: every layer runs torch's
    tdt.patch(net, where=lambda name, module: True)
    graphs = []
    compiled = torch.compile(net, backend=recording("aot_eager", graphs), fullgraph=True)
    x = rand(2, 8, 8, 8, dtype=torch.float64)
    torch.testing.assert_close(compiled(x), net(x))
    assert len(graphs) == 1 and "tiledispatch" not in graphs[0]


def test_the_ops_compile_alone():
    torch._dynamo.reset()
    a, b = rand(16, 12), rand(12, 8, seed=1)
    fn = torch.compile(lambda a, b: ops.gemm(a, b.t().contiguous().t(), 2.0).relu(), backend="aot_eager",
                       fullgraph=True)
    torch.testing.assert_close(fn(a, b), (2 * a.double() @ b.double()).relu().float(), rtol=1e-5, atol=1e-5)


# ---- CUDA graphs (a GPU with the sm_90a libraries) ------------------------------------------

def _gpu_library():
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        target = td.registry().default_target("conv")
    except td.TileDispatchError as err:
        return str(err)
    return None if target != "cpu" else "no GPU library in this installation"


gpu = pytest.mark.skipif(_gpu_library() is not None, reason=f"CUDA graphs: {_gpu_library()}")


@pytest.fixture(params=[False, True], ids=["ours", "with_vendor"])
def vendor_option(request):
    """Ours alone, and with the vendor kernels (cuDNN plans size their workspace when made:
    a plan first made inside the capture is run again with the workspace it reports)."""
    before = td.options()["vendor"]
    td.set_options(vendor=request.param)
    yield
    td.set_options(vendor=before)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduce_overhead_replays_eager_bit_for_bit(dtype, vendor_option):
    torch._dynamo.reset()
    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1, groups=8, bias=False),
                        nn.Conv2d(64, 64, 3, stride=2, padding=1, groups=64, bias=False),
                        nn.Conv2d(64, 32, 1, groups=2, bias=False)).to("cuda", dtype)
    net = net.to(memory_format=torch.channels_last)
    assert tdt.patch(net).swapped == ["0", "1", "2"]
    x = rand(8, 32, 28, 28, dtype=dtype, device="cuda").contiguous(memory_format=torch.channels_last)
    y_eager, grads_eager = run(net, x)
    compiled = torch.compile(net, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):   # warm-up, record, replays
        y, grads = run(compiled, x)
    torch.cuda.synchronize()
    assert torch.equal(y, y_eager)
    assert all(torch.equal(g, g_eager) for g, g_eager in zip(grads, grads_eager))


@gpu
@pytest.mark.parametrize("shape", [(256, 256, 256), (1000, 1000, 1000), (4095, 4095, 4095)])
def test_captured_gemm_replays_eager_bit_for_bit(shape, vendor_option):
    M, N, K = shape
    a = rand(M, K, dtype=torch.bfloat16, device="cuda")
    b = rand(K, N, seed=1, dtype=torch.bfloat16, device="cuda")
    eager = ops.gemm(a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.gemm(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_autocast_in_one_graph():
    torch._dynamo.reset()
    net = model()
    tdt.patch(net, where=lambda name, module: True)
    graphs = []

    def step(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return net(x)
    x = rand(2, 8, 8, 8)
    y = torch.compile(step, backend=recording("aot_eager", graphs), fullgraph=True)(x)
    assert y.dtype == torch.bfloat16 and len(graphs) == 1
    assert graphs[0].count("torch.ops.tiledispatch.conv(") == 3
    torch.testing.assert_close(y, step(x))
