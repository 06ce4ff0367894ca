"""tiledispatch.nn layers and tiledispatch.torch.patch on CPU: checkpoints of torch's layers
load unchanged, outputs and gradients match torch's, fallbacks log once per layer and never
raise, patch swaps in place and reports what it did."""
import logging
import re

import pytest

from conftest import import_torch

torch = import_torch()
import torch.nn as nn  # noqa: E402

import tiledispatch.nn as tdnn  # noqa: E402
import tiledispatch.torch as tdt  # noqa: E402


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 2 - 1).to(dtype)


def ran_ours(y, op="conv"):
    """Whether our op made the output: its node in the output's autograd graph."""
    want = f"tiledispatch_{op}Backward"
    todo, seen = [y.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == want:
            return True
        todo.extend(next_node for next_node, _ in node.next_functions)
    return False


def fallback_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "tiledispatch" and "runs on torch's" in r.getMessage()]


LAYERS = [
    (nn.Conv1d, tdnn.Conv1d, dict(in_channels=8, out_channels=12, kernel_size=3, padding=1, groups=4), (2, 8, 15)),
    (nn.Conv2d, tdnn.Conv2d, dict(in_channels=16, out_channels=32, kernel_size=3, stride=2, padding=1, groups=4),
     (2, 16, 10, 10)),
    (nn.Conv2d, tdnn.Conv2d, dict(in_channels=16, out_channels=16, kernel_size=5, padding=4, dilation=2,
                                  groups=16), (2, 16, 9, 9)),
    (nn.Conv3d, tdnn.Conv3d, dict(in_channels=4, out_channels=6, kernel_size=(1, 3, 3), padding=(0, 1, 1)),
     (1, 4, 3, 6, 6)),
    (nn.Linear, tdnn.Linear, dict(in_features=24, out_features=10), (3, 5, 24)),
]
LAYER_IDS = ["conv1d grouped", "conv2d grouped strided", "conv2d depthwise dilated", "conv3d dense", "linear"]


@pytest.mark.parametrize("torch_layer, our_layer, kwargs, shape", LAYERS, ids=LAYER_IDS)
def test_a_torch_checkpoint_loads_and_gives_the_same_outputs_and_grads(torch_layer, our_layer, kwargs, shape):
    torch.manual_seed(3)
    theirs = torch_layer(**kwargs)
    torch.manual_seed(3)
    ours = our_layer(**kwargs)
    assert isinstance(ours, torch_layer)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for key, value in ours.state_dict().items():   # the same initialization
        assert torch.equal(value, theirs.state_dict()[key]), key
    ours = our_layer(**kwargs)
    ours.load_state_dict(theirs.state_dict())
    x = rand(*shape)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ours, y_theirs = ours(x1), theirs(x2)
    assert ran_ours(y_ours, "gemm" if our_layer is tdnn.Linear else "conv")
    assert y_ours.shape == y_theirs.shape
    torch.testing.assert_close(y_ours, y_theirs, rtol=1e-4, atol=1e-5)
    g = rand(*y_ours.shape, seed=1)
    y_ours.backward(g)
    y_theirs.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    for (name, p_ours), p_theirs in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p_ours.grad, p_theirs.grad, rtol=1e-4, atol=1e-4, msg=name)


def test_layers_without_bias_run_our_ops():
    conv = tdnn.Conv2d(8, 8, 3, padding="same", groups=8, bias=False)
    assert ran_ours(conv(rand(1, 8, 6, 6)))
    linear = tdnn.Linear(6, 4, bias=False)
    assert ran_ours(linear(rand(5, 6)), op="gemm")


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("kwargs, reason", [
    (dict(padding=1, padding_mode="reflect"), "padding_mode='reflect'"),
    (dict(kernel_size=4, padding="same"), "padding='same'"),     # an even kernel pads unevenly
])
def test_padding_torch_cannot_map_falls_back(kwargs, reason, caplog):
    args = dict(in_channels=4, out_channels=4, kernel_size=3, groups=2, bias=False) | kwargs
    torch.manual_seed(0)
    ours = tdnn.Conv2d(**args)
    theirs = nn.Conv2d(**args)
    theirs.load_state_dict(ours.state_dict())
    x = rand(2, 4, 7, 7)
    with caplog.at_level(logging.WARNING, logger="tiledispatch"):
        for _ in range(3):
            y = ours(x)
    assert not ran_ours(y)
    assert torch.equal(y, theirs(x))
    lines = fallback_lines(caplog)
    assert len(lines) == 1 and reason in lines[0]


def test_float64_falls_back_with_one_line_per_layer_in_a_training_loop(caplog):
    model = nn.Sequential(nn.Conv2d(4, 8, 3, groups=4), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8), nn.Flatten(),
                          nn.Linear(8 * 3 * 3, 3)).double()
    tdt.patch(model, where=lambda name, module: True)
    reference = nn.Sequential(nn.Conv2d(4, 8, 3, groups=4), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8), nn.Flatten(),
                              nn.Linear(8 * 3 * 3, 3)).double()
    reference.load_state_dict(model.state_dict())
    x = rand(2, 4, 7, 7).double()
    with caplog.at_level(logging.WARNING, logger="tiledispatch"):
        for _ in range(3):
            model(x).sum().backward()
    assert torch.equal(model(x), reference(x))
    lines = fallback_lines(caplog)
    assert sorted(re.sub(r" #\d+\)", ")", line.split(" runs on")[0]) for line in lines) == \
        ["0 (Conv2d)", "2 (Conv2d)", "4 (Linear)"]
    assert all("no torch.float64 kernels" in line for line in lines)


def test_each_layer_logs_its_own_fallback_even_under_the_same_name(caplog):
    models = [nn.Sequential(nn.Conv2d(4, 4, 3, groups=2)).double() for _ in range(2)]
    labels = [tdt.patch(m).swapped and m[0]._td_label for m in models]
    assert labels[0] != labels[1] and all(label.startswith("0 (Conv2d #") for label in labels)
    with caplog.at_level(logging.WARNING, logger="tiledispatch"):
        for m in models:
            m(rand(1, 4, 5, 5).double())
    assert [line.split(" runs on")[0] for line in fallback_lines(caplog)] == labels


def test_a_device_without_a_library_falls_back(caplog):
    layer = tdnn.Conv2d(4, 4, 3, groups=2, device="meta")
    with caplog.at_level(logging.WARNING, logger="tiledispatch"):
        for _ in range(2):
            y = layer(torch.empty(1, 4, 5, 5, device="meta"))
    assert y.shape == (1, 4, 3, 3) and y.device.type == "meta"
    lines = fallback_lines(caplog)
    assert len(lines) == 1 and "this installation has no conv library for meta tensors" in lines[0]


def test_autocast_bfloat16_casts_like_torch():
    torch.manual_seed(0)
    ours = tdnn.Conv2d(8, 16, 3, padding=1, groups=4)
    theirs = nn.Conv2d(8, 16, 3, padding=1, groups=4)
    theirs.load_state_dict(ours.state_dict())
    x = rand(2, 8, 6, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_ours, y_theirs = ours(x), theirs(x)
    assert y_ours.dtype == y_theirs.dtype == torch.bfloat16
    torch.testing.assert_close(y_ours.float(), y_theirs.float(), rtol=2e-2, atol=2e-2)


class SameConv(nn.Conv2d):
    """A subclass with its own forward (as timm's Conv2dSame): patch leaves it alone."""

    def forward(self, x):
        return super().forward(x)


def small_model():
    torch.manual_seed(5)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),                   # 0 dense
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16),       # 2 depthwise
        nn.Conv2d(16, 32, 1, groups=4),                   # 3 grouped
        SameConv(32, 32, 3, padding=1, groups=32),        # 4 a subclass
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 10),                                # 7
    )


def test_patch_swaps_grouped_convs_in_place_by_default(caplog):
    model, reference = small_model(), small_model()
    params = {name: p for name, p in model.named_parameters()}
    layers = dict(model.named_children())
    with caplog.at_level(logging.INFO, logger="tiledispatch"):
        report = tdt.patch(model)
    assert report.swapped == ["2", "3"]
    assert report.kept == [("0", "not grouped (groups == 1): not expected to win"),
                           ("4", "SameConv subclasses a torch layer (its own forward)"),
                           ("7", "not grouped (groups == 1): not expected to win")]
    assert [type(m).__name__ for m in model] == ["Conv2d", "ReLU", "Conv2d", "Conv2d", "SameConv",
                                                 "AdaptiveAvgPool2d", "Flatten", "Linear"]
    assert type(model[2]) is tdnn.Conv2d and type(model[3]) is tdnn.Conv2d and type(model[0]) is nn.Conv2d
    assert all(p is params[name] for name, p in model.named_parameters())   # shared, not copied
    assert all(m is layers[name] for name, m in model.named_children())
    assert any("swapped 2 layers, kept 3" in r.getMessage() for r in caplog.records)
    x = rand(2, 3, 8, 8)
    torch.testing.assert_close(model(x), reference(x), rtol=1e-4, atol=1e-5)
    assert tdt.patch(model).swapped == []   # a second patch finds nothing left to swap


def test_patch_where_and_ops():
    model = small_model()
    report = tdt.patch(model, ops=("linear",), where=lambda name, module: True)
    assert report.swapped == ["7"]
    assert ("2", "ops leaves out conv") in report.kept
    model = small_model()
    report = tdt.patch(model, where=lambda name, module: name in ("0", "7"))
    assert report.swapped == ["0", "7"] and ("2", "where() says no") in report.kept
    with pytest.raises(ValueError, match="ops must be a sequence of 'conv' and 'linear'"):
        tdt.patch(model, ops="conv")


def test_a_patched_model_trains_like_torch():
    model, reference = small_model(), small_model()
    tdt.patch(model, where=lambda name, module: True)
    losses = []
    for net in (model, reference):
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(11)
        run = []
        for _ in range(5):
            x = torch.rand(4, 3, 8, 8, generator=g)
            target = torch.randint(0, 10, (4,), generator=g)
            loss = nn.functional.cross_entropy(net(x), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
