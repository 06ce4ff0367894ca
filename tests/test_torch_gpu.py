"""The torch ops and layers on CUDA tensors (a GPU with the sm_90a libraries; skipped
without one): numerics against float64, opcheck, autograd, and a patched model's training
against torch's."""
import pytest

from conftest import import_torch, torch_gpu_missing

torch = import_torch()
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tiledispatch as td  # noqa: E402
import tiledispatch.torch as tdt  # noqa: E402

ops = torch.ops.tiledispatch
OPCHECK_OK = {"test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS", "test_faketensor": "SUCCESS",
              "test_aot_dispatch_dynamic": "SUCCESS"}
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


MISSING = torch_gpu_missing(torch, "conv")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"torch on the GPU: {MISSING}")


def rand(*shape, seed=0, dtype=torch.bfloat16, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(*shape, generator=g) * 2 - 1).to(dtype=dtype, device="cuda")
    return t.requires_grad_(requires_grad)


def assert_close(out, ref, dtype):
    assert out.dtype == dtype and out.is_cuda
    err = (out.double() - ref.double()).abs().max().item()
    assert err <= TOL[dtype] * ref.abs().max().item(), (err, dtype)


CASES = [  # (x shape, w shape, stride, padding, dilation, groups)
    ((4, 64, 28, 28), (128, 8, 3, 3), [1, 1], [1, 1], [1, 1], 8),
    ((4, 96, 30, 30), (96, 1, 5, 5), [2, 2], [2, 2], [1, 1], 96),
    ((2, 32, 9, 14, 14), (32, 1, 3, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], 32),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=["grouped", "depthwise strided", "depthwise 3d"])
def test_conv_and_its_grads_match_float64(case, dtype):
    xs, ws, s, p, d, g = case
    x = rand(*xs, dtype=dtype, requires_grad=True)
    w = rand(*ws, seed=1, dtype=dtype, requires_grad=True)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    conv = {4: F.conv2d, 5: F.conv3d}[x.dim()]
    y_ref = conv(x64, w64, stride=s, padding=p, dilation=d, groups=g)
    dy = rand(*y_ref.shape, seed=2, dtype=dtype)
    y_ref.backward(dy.double())
    y = ops.conv(x, w, s, p, d, g)
    y.backward(dy)
    assert_close(y, y_ref, dtype)
    assert_close(x.grad, x64.grad, dtype)
    assert_close(w.grad, w64.grad, dtype)


@pytest.mark.parametrize("case", CASES[:2], ids=["grouped", "depthwise strided"])
def test_repeated_calls_run_the_stored_plan_with_new_tensors(case):
    """The second call of each direction with the same metadata takes the plan of the first
    (tiledispatch._conv_plans): new tensors (new addresses, new values), right answers."""
    from tiledispatch import _conv_plans
    _conv_plans.clear()
    xs, ws, s, p, d, g = case
    for seed in (0, 10):
        x = rand(*xs, seed=seed, requires_grad=True)
        w = rand(*ws, seed=seed + 1, requires_grad=True)
        x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        y_ref = F.conv2d(x64, w64, stride=s, padding=p, dilation=d, groups=g)
        dy = rand(*y_ref.shape, seed=seed + 2)
        y_ref.backward(dy.double())
        y = ops.conv(x, w, s, p, d, g)
        y.backward(dy)
        assert_close(y, y_ref, torch.bfloat16)
        assert_close(x.grad, x64.grad, torch.bfloat16)
        assert_close(w.grad, w64.grad, torch.bfloat16)
        assert len(_conv_plans._PLANS) == 3  # fwd, bwd_data, bwd_weight: stored once, then reused


def test_ops_opcheck_on_cuda():
    xs, ws, s, p, d, g = CASES[0]
    x, w = rand(*xs, requires_grad=True), rand(*ws, seed=1, requires_grad=True)
    assert torch.library.opcheck(ops.conv.default, (x, w, s, p, d, g)) == OPCHECK_OK
    a, b = rand(256, 128, requires_grad=True), rand(192, 128, seed=1).t().requires_grad_()
    assert torch.library.opcheck(ops.gemm.default, (a, b, 1.0)) == OPCHECK_OK


def test_td_gemm_with_grad_goes_through_the_op():
    a = rand(256, 128, requires_grad=True)
    b = rand(192, 128, seed=1).t()
    c = td.gemm(a, b)
    assert type(c.grad_fn).__name__ == "tiledispatch_gemmBackward"
    c.backward(torch.ones_like(c))
    assert_close(a.grad, torch.ones(256, 192, dtype=torch.float64, device="cuda") @ b.double().t(), torch.bfloat16)


def test_a_patched_model_trains_like_torch_under_bf16_autocast():
    def build():
        torch.manual_seed(4)
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1, groups=32),
                             nn.Conv2d(32, 64, 1, groups=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(64, 10)).cuda().to(memory_format=torch.channels_last)
    model, reference = build(), build()
    assert tdt.patch(model).swapped == ["2", "3"]
    losses = []
    for net in (model, reference):
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(9)
        run = []
        for _ in range(5):
            x = torch.rand(16, 3, 32, 32, generator=g).cuda().contiguous(memory_format=torch.channels_last)
            target = torch.randint(0, 10, (16,), generator=g).cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(net(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0] == pytest.approx(losses[1], rel=2e-2)
