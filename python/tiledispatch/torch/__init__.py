"""PyTorch integration: the custom ops (torch.ops.tiledispatch.*), the layers of
tiledispatch.nn, and patch(), which swaps those layers into an existing model.

    import tiledispatch.torch
    report = tiledispatch.torch.patch(model)   # grouped and depthwise convs by default
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch  # the top-level torch package (imports are absolute)

from .. import nn as td_nn
from .._torch_ops import conv, conv_bwd_data, conv_bwd_weight, gemm

__all__ = ["PatchReport", "conv", "conv_bwd_data", "conv_bwd_weight", "expected_to_win", "gemm", "patch"]

logger = logging.getLogger("tiledispatch")

# torch's layer -> (the kind `ops` names, our drop-in)
SWAPS = {torch.nn.Conv1d: ("conv", td_nn.Conv1d), torch.nn.Conv2d: ("conv", td_nn.Conv2d),
         torch.nn.Conv3d: ("conv", td_nn.Conv3d), torch.nn.Linear: ("linear", td_nn.Linear)}
OURS = tuple(layer for _, layer in SWAPS.values())


def expected_to_win(name: str, module) -> bool:
    """The default `where` of patch(): grouped and depthwise convolutions (groups > 1), where
    the dispatcher's pick measured faster than cuDNN; dense convolutions (mixed results) and
    Linear layers (GEMM at par with cuBLAS) stay on torch."""
    return isinstance(module, torch.nn.modules.conv._ConvNd) and module.groups > 1


@dataclass
class PatchReport:
    """What patch() did: the names of the layers swapped, and of those kept with the reason."""

    swapped: list = field(default_factory=list)
    kept: list = field(default_factory=list)   # (name, reason)

    def __str__(self) -> str:
        lines = [f"tiledispatch.torch.patch: swapped {len(self.swapped)} layers, kept {len(self.kept)}"]
        lines += [f"  swapped {name}" for name in self.swapped]
        lines += [f"  kept {name}: {reason}" for name, reason in self.kept]
        return "\n".join(lines)


def patch(model: torch.nn.Module, ops=("conv", "linear"), where=None) -> PatchReport:
    """Swaps, in place, the model's torch.nn.Conv1d/2d/3d and Linear layers for those of
    tiledispatch.nn: each layer object stays the same (its class changes), so parameters,
    buffers, hooks and optimizer state are shared, nothing copied. `ops` names the kinds that
    may be swapped ("conv", "linear"); `where(name, module)` decides per layer (default:
    expected_to_win, grouped and depthwise convs). Subclasses of torch's layers (their own
    forward) are kept. Returns a PatchReport, also logged (logger "tiledispatch", INFO)."""
    unknown = set(ops) - {"conv", "linear"}
    if isinstance(ops, str) or unknown:
        raise ValueError(f"ops must be a sequence of 'conv' and 'linear', got {ops!r}")
    where = expected_to_win if where is None else where
    report = PatchReport()
    for name, module in model.named_modules():
        if isinstance(module, OURS):
            continue
        kind_and_layer = SWAPS.get(type(module))
        if kind_and_layer is None:
            if isinstance(module, tuple(SWAPS)):
                report.kept.append((name, f"{type(module).__name__} subclasses a torch layer (its own forward)"))
            continue
        kind, layer = kind_and_layer
        if kind not in ops:
            report.kept.append((name, f"ops leaves out {kind}"))
        elif not where(name, module):
            report.kept.append((name, "where() says no" if where is not expected_to_win
                                else "not grouped (groups == 1): not expected to win"))
        else:
            module.__class__ = layer
            module._td_label = td_nn.label(module, name or type(model).__name__)
            report.swapped.append(name)
    logger.info("%s", report)
    return report
