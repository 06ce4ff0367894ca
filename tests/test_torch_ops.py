"""The custom ops torch.ops.tiledispatch.{gemm, conv, conv_bwd_data, conv_bwd_weight} on CPU
tensors: opcheck, numerics against float64 references of the same inputs, autograd
(gradcheck, and gradients against torch's own), and td.gemm / td.conv on torch tensors."""
import json

import numpy as np
import pytest

from conftest import import_torch

torch = import_torch()
import torch.nn.functional as F  # noqa: E402

import tiledispatch as td  # noqa: E402
import tiledispatch.torch  # noqa: E402,F401  (registers the ops)

ops = torch.ops.tiledispatch
OPCHECK_OK = {"test_schema": "SUCCESS", "test_autograd_registration": "SUCCESS", "test_faketensor": "SUCCESS",
              "test_aot_dispatch_dynamic": "SUCCESS"}
# error allowed, relative to the reference's largest magnitude: output rounding and fp32
# accumulation order (the inputs are the same values in both)
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
# gradcheck in float32 (the kernels have no float64; the ops are linear), which torch warns of
FLOAT32_GRADCHECK = pytest.mark.filterwarnings("ignore:Input #.* is not a double precision")


def rand(*shape, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(*shape, generator=g) * 2 - 1).to(dtype)
    return t.requires_grad_(requires_grad)


def assert_close(out, ref, dtype):
    assert out.dtype == dtype
    scale = ref.abs().max().item()
    err = (out.double() - ref.double()).abs().max().item()
    assert err <= TOL[dtype] * max(scale, 1e-30), (err, scale, dtype)


# (name, x shape (N, G*C, *spatial), w shape (G*K, C, *filter), stride, padding, dilation, groups)
CASES = [
    ("1d grouped strided", (2, 8, 17), (12, 2, 3), [2], [1], [1], 4),
    ("2d grouped", (2, 8, 9, 9), (12, 2, 3, 3), [1, 1], [1, 1], [1, 1], 4),
    ("2d depthwise dilated", (2, 16, 11, 10), (16, 1, 3, 3), [1, 1], [2, 2], [2, 2], 16),
    ("2d dense strided", (2, 6, 10, 9), (5, 6, 3, 2), [2, 1], [1, 0], [1, 1], 1),
    ("3d grouped", (1, 4, 5, 6, 6), (6, 2, 3, 3, 3), [1, 2, 1], [1, 1, 1], [1, 1, 1], 2),
]
IDS = [c[0] for c in CASES]


# ---- gemm -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["rr", "rc", "cr", "cc"])
def test_gemm_matches_float64_in_each_layout(dtype, order):
    a = rand(37, 29, dtype=dtype, seed=1)
    b = rand(29, 23, dtype=dtype, seed=2)
    a_in = a if order[0] == "r" else a.t().contiguous().t()   # column-major views, no copy in the op
    b_in = b if order[1] == "r" else b.t().contiguous().t()
    out = ops.gemm(a_in, b_in, 0.5)
    assert out.shape == (37, 23) and out.is_contiguous()
    assert_close(out, 0.5 * (a.double() @ b.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_opcheck(dtype):
    a = rand(9, 7, dtype=dtype, requires_grad=True)
    b = rand(11, 7, dtype=dtype, seed=3).t().requires_grad_()   # a column-major operand
    assert torch.library.opcheck(ops.gemm.default, (a, b, 2.0)) == OPCHECK_OK


def test_gemm_output_is_new_memory():
    a, b = rand(4, 4), rand(4, 4, seed=1)
    out = ops.gemm(a, b)
    assert out.untyped_storage().data_ptr() not in (a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr())


def test_gemm_runs_broadcast_and_sliced_operands():
    a = rand(1, 6).expand(5, 6)            # a zero stride
    b = rand(6, 16, seed=1)[:, ::2]        # a column stride of 2
    assert_close(ops.gemm(a, b), a.double() @ b.double(), torch.float32)


@FLOAT32_GRADCHECK
def test_gemm_gradcheck_float32():
    a = rand(6, 5, requires_grad=True)
    b = rand(5, 4, seed=1, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: ops.gemm(x, y, 1.5), (a, b), eps=1e-2, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_grads_match_torch_linear(dtype):
    x = rand(12, 24, dtype=dtype, requires_grad=True)
    w = rand(16, 24, dtype=dtype, seed=1, requires_grad=True)
    g = rand(12, 16, dtype=dtype, seed=2)
    ops.gemm(x, w.t()).backward(g)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    F.linear(x64, w64).backward(g.double())
    assert_close(x.grad, x64.grad, dtype)
    assert_close(w.grad, w64.grad, dtype)


def test_gemm_errors():
    with pytest.raises(td.InvalidArgumentError, match="inner dimensions differ"):
        ops.gemm(rand(3, 4), rand(5, 3))
    with pytest.raises(TypeError, match="must share an element type"):
        ops.gemm(rand(3, 4), rand(4, 3, dtype=torch.float16))
    with pytest.raises(TypeError, match="unsupported element type float64"):
        ops.gemm(rand(3, 4).double(), rand(4, 3).double())


# ---- conv -----------------------------------------------------------------------------------

def conv_reference(x, w, stride, padding, dilation, groups):
    """torch's conv and its two gradients for a random dy, in float64, on the same values."""
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y = CONV[x.dim() - 2](x64, w64, stride=stride, padding=padding, dilation=dilation, groups=groups)
    dy = rand(*y.shape, seed=7).to(x.dtype)
    y.backward(dy.double())
    return y.detach(), dy, x64.grad, w64.grad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conv_three_directions_match_float64(case, dtype):
    _, xs, ws, s, p, d, g = case
    x, w = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype, seed=1)
    y_ref, dy, dx_ref, dw_ref = conv_reference(x, w, s, p, d, g)
    y = ops.conv(x, w, s, p, d, g)
    assert y.shape == y_ref.shape
    assert y.permute(0, *range(2, y.dim()), 1).is_contiguous()   # stored channels-last
    assert_close(y, y_ref, dtype)
    assert_close(ops.conv_bwd_data(dy, w, list(xs[2:]), s, p, d, g), dx_ref, dtype)
    assert_close(ops.conv_bwd_weight(x, dy, list(ws[2:]), s, p, d, g), dw_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conv_grads_match_torch_autograd(case, dtype):
    _, xs, ws, s, p, d, g = case
    x = rand(*xs, dtype=dtype, requires_grad=True)
    w = rand(*ws, dtype=dtype, seed=1, requires_grad=True)
    y_ref, dy, dx_ref, dw_ref = conv_reference(x, w, s, p, d, g)
    ops.conv(x, w, s, p, d, g).backward(dy)
    assert x.grad.shape == x.shape and w.grad.shape == w.shape
    assert_close(x.grad, dx_ref, dtype)
    assert_close(w.grad, dw_ref, dtype)
    if dtype == torch.float32:  # and torch's own float32 autograd
        x32, w32 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        CONV[x.dim() - 2](x32, w32, stride=s, padding=p, dilation=d, groups=g).backward(dy)
        assert_close(x.grad, x32.grad.double(), dtype)
        assert_close(w.grad, w32.grad.double(), dtype)


@FLOAT32_GRADCHECK
@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=[IDS[0], IDS[2]])
def test_conv_gradcheck_float32(case):
    _, xs, ws, s, p, d, g = case
    x = rand(*xs, requires_grad=True)
    w = rand(*ws, seed=1, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: ops.conv(a, b, s, p, d, g), (x, w), eps=1e-2, atol=2e-3,
                                    rtol=2e-3)


@FLOAT32_GRADCHECK
def test_conv_double_backward_float32():
    """bwd_data and bwd_weight have their own autograd (the other two directions)."""
    _, xs, ws, s, p, d, g = CASES[1]
    x = rand(*xs, requires_grad=True)
    w = rand(*ws, seed=1, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda a, b: ops.conv(a, b, s, p, d, g), (x, w), eps=1e-2, atol=5e-3,
                                        rtol=5e-3)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conv_opcheck(case):
    _, xs, ws, s, p, d, g = case
    x = rand(*xs, requires_grad=True)
    w = rand(*ws, seed=1, requires_grad=True)
    y = ops.conv(x, w, s, p, d, g).detach().requires_grad_()
    assert torch.library.opcheck(ops.conv.default, (x, w, s, p, d, g)) == OPCHECK_OK
    assert torch.library.opcheck(ops.conv_bwd_data.default, (y, w, list(xs[2:]), s, p, d, g)) == OPCHECK_OK
    assert torch.library.opcheck(ops.conv_bwd_weight.default, (x, y, list(ws[2:]), s, p, d, g)) == OPCHECK_OK


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv_opcheck_half_types(dtype):
    _, xs, ws, s, p, d, g = CASES[1]
    x, w = rand(*xs, dtype=dtype, requires_grad=True), rand(*ws, dtype=dtype, seed=1, requires_grad=True)
    assert torch.library.opcheck(ops.conv.default, (x, w, s, p, d, g)) == OPCHECK_OK


def test_conv_reads_channels_last_inputs_in_place_and_others_too():
    _, xs, ws, s, p, d, g = CASES[1]
    x, w = rand(*xs), rand(*ws, seed=1)
    ref = ops.conv(x, w, s, p, d, g)   # contiguous NCHW: copied to channels-last inside
    x_cl = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(ops.conv(x_cl, w, s, p, d, g), ref)


def test_conv_errors():
    x, w = rand(2, 8, 9, 9), rand(12, 2, 3, 3)
    with pytest.raises(td.InvalidArgumentError, match="x has 8 channels, groups=3 x C=2 expected"):
        ops.conv(x, w, [1, 1], [1, 1], [1, 1], 3)
    with pytest.raises(td.InvalidArgumentError, match="stride needs 2 values"):
        ops.conv(x, w, [1], [1, 1], [1, 1], 4)
    with pytest.raises(td.InvalidArgumentError, match="the output would be empty"):
        ops.conv(rand(1, 8, 2, 2), w, [1, 1], [0, 0], [1, 1], 4)
    with pytest.raises(TypeError, match="unsupported element type torch.float64"):
        ops.conv(x.double(), w.double(), [1, 1], [1, 1], [1, 1], 4)
    with pytest.raises(td.InvalidArgumentError, match=r"dy has spatial size \[9, 9\], the problem gives \[5, 5\]"):
        ops.conv_bwd_data(rand(2, 12, 9, 9), w, [9, 9], [2, 2], [1, 1], [1, 1], 4)


# ---- td.gemm / td.conv on torch tensors -----------------------------------------------------

def test_td_gemm_on_torch_tensors_goes_through_the_op():
    a = rand(8, 6, dtype=torch.bfloat16, requires_grad=True)
    b = rand(6, 5, dtype=torch.bfloat16, seed=1)
    c = td.gemm(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.bfloat16
    assert type(c.grad_fn).__name__ == "tiledispatch_gemmBackward"
    assert_close(c, a.double() @ b.double(), torch.bfloat16)


def test_td_gemm_on_numpy_is_unchanged():
    a = np.random.default_rng(0).random((8, 6), dtype=np.float32)
    c = td.gemm(a, a.T.copy())
    assert isinstance(c, np.ndarray)
    np.testing.assert_allclose(c, a.astype(np.float64) @ a.T, rtol=1e-5)


def test_td_conv_on_torch_tensors_takes_its_channels_last_layout():
    x = rand(2, 9, 9, 8, requires_grad=True)    # (N, H, W, G*C)
    w = rand(12, 3, 3, 2, seed=1)                 # (G*K, Y, X, C)
    y = td.conv(x, w, padding=1, groups=4)
    assert y.shape == (2, 9, 9, 12) and y.is_contiguous()
    ref = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), padding=1, groups=4)
    assert_close(y, ref.permute(0, 2, 3, 1), torch.float32)
    dx = td.conv(y.detach(), w, padding=1, groups=4, direction="bwd_data")
    dw = td.conv(x.detach(), y.detach(), padding=1, groups=4, direction="bwd_weight")
    assert dx.shape == (2, 9, 9, 8) and dw.shape == (12, 3, 3, 2)
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_the_ops_pass_through_autotuning_recording_and_the_pick_log(tmp_path, monkeypatch):
    from tiledispatch import _autotune
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILEDISPATCH_RECORD", str(tmp_path / "shapes.jsonl"))
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    _autotune.reset()
    name, xs, ws, stride, padding, dilation, groups = CASES[1]
    x, w = rand(*xs), rand(*ws, seed=1)
    with td.autotune():
        y = ops.conv(x, w, stride, padding, dilation, groups)
        a, b = rand(8, 6), rand(6, 5, seed=1)
        ops.gemm(a, b)
    assert_close(y, F.conv2d(x.double(), w.double(), None, stride, padding, dilation, groups), torch.float32)
    tuned = [(p["op"], p["source"]) for p in td.autotune_stats()["problems"]]
    assert tuned == [("conv", "autotune"), ("gemm", "autotune")]
    recorded = [json.loads(line) for line in (tmp_path / "shapes.jsonl").read_text().splitlines()]
    assert [r["op"] for r in recorded] == ["conv", "gemm"]
    assert recorded[0]["G"] == groups and recorded[0]["input"] == list(xs[2:])
    _autotune.reset()
