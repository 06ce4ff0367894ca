"""torch.nn layers that run on the dispatcher's kernels: Conv1d, Conv2d, Conv3d and Linear.

Each subclasses torch.nn's layer of the same name: the same constructor arguments,
parameters, state_dict keys and initialization, so a checkpoint of the torch layer loads
unchanged. The convolution or matrix product runs through torch.ops.tiledispatch (autograd
and torch.compile included); the bias is added with torch afterwards. A layer runs on torch's
own implementation instead where the dispatcher cannot run it (padding modes other than
'zeros', padding='same' that pads unevenly, an element type without kernels such as
float64, a device without a library, a problem no kernel supports), saying so in one log
line per layer (logger "tiledispatch"). Under autocast the operands are cast to the
autocast type first, as torch's layers are."""
from __future__ import annotations

import functools
import itertools
import logging

import torch
import torch.nn.functional as F

from . import _torch_ops
from ._registry import registry
from ._torch_views import DTYPES
from .api import dispatcher
from .codegen import Direction, Layout
from .errors import TileDispatchError
from .problems import GemmProblem

logger = logging.getLogger("tiledispatch")
_LOGGED: set = set()


def _target(op: str, device_type: str) -> str:
    """The library a tensor on device_type runs on (TileDispatchError where there is none)."""
    if device_type == "cpu":
        return _torch_ops.host_target(op)
    if device_type == "cuda":
        target = registry().default_target(op)
        if target != "cpu":
            return target
    raise TileDispatchError(f"this installation has no {op} library for {device_type} tensors")


def _why_not(op: str, device_type: str, dtype: torch.dtype, problems) -> str | None:
    """None where the library for the device runs every problem, else the reason."""
    if dtype not in DTYPES:
        return f"no {dtype} kernels"
    try:
        d = dispatcher(op, _target(op, device_type))
        for problem in problems():
            if not d.is_supported(problem):
                return f"no kernel for target {d.target} supports {problem}"
    except (TileDispatchError, TypeError, ValueError) as err:
        return str(err)
    return None


def _decided(label: str, reason: str | None) -> bool:
    """True where the layer runs on the dispatcher; else logs the reason once per layer."""
    if reason is None:
        return True
    if label not in _LOGGED:
        _LOGGED.add(label)
        logger.warning("%s runs on torch's implementation: %s", label, reason)
    return False


# torch.compile takes conv_runs and linear_runs as constants of the traced graph (decided
# while tracing, not traced into: no graph break); each answer is cached per problem.
@torch.compiler.assume_constant_result
def conv_runs(label: str, device_type: str, dtype: torch.dtype, x_shape: tuple, w_shape: tuple, stride: tuple,
              padding: tuple, dilation: tuple, groups: int) -> bool:
    """Whether a conv layer's problem, in all three directions, runs on the dispatcher."""
    return _conv_runs(label, device_type, dtype, x_shape, w_shape, stride, padding, dilation, groups)


@torch.compiler.assume_constant_result
def linear_runs(label: str, device_type: str, dtype: torch.dtype, M: int, N: int, K: int) -> bool:
    """Whether a linear layer's three products run on the dispatcher: y = x W^T (rcr),
    dx = dy W (rrr), dW^T = x^T dy (crr)."""
    return _linear_runs(label, device_type, dtype, M, N, K)


@functools.lru_cache(maxsize=4096)
def _conv_runs(label, device_type, dtype, x_shape, w_shape, stride, padding, dilation, groups) -> bool:
    def problems():
        return [_torch_ops._problem(direction, x_shape, w_shape, stride, padding, dilation, groups, dtype)
                for direction in Direction]
    return _decided(label, _why_not("conv", device_type, dtype, problems))


@functools.lru_cache(maxsize=4096)
def _linear_runs(label, device_type, dtype, M, N, K) -> bool:
    def problems():
        dt = DTYPES[dtype]
        return [GemmProblem(M, N, K, dt, Layout.RCR), GemmProblem(M, K, N, dt, Layout.RRR),
                GemmProblem(K, N, M, dt, Layout.CRR)]
    if min(M, N, K) < 1:
        return _decided(label, f"an empty product ({M}x{N}x{K})")
    return _decided(label, _why_not("gemm", device_type, dtype, problems))


DEVICES = ("cpu", "cuda")   # the device types a library can run on


def _autocast(device_type: str, *tensors):
    """The tensors cast to the autocast type where autocast is on for the device (cpu, cuda)."""
    if not torch.is_autocast_enabled(device_type):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(None if t is None else t.to(dtype) for t in tensors)


def explicit_padding(layer) -> tuple | None:
    """A conv layer's padding per spatial dim, or None where it is not symmetric zeros
    (another padding mode, or padding='same' that pads one side more)."""
    if layer.padding_mode != "zeros":
        return None
    if layer.padding == "valid":
        return (0,) * len(layer.kernel_size)
    if layer.padding == "same":
        total = [d * (k - 1) for d, k in zip(layer.dilation, layer.kernel_size)]
        return None if any(t % 2 for t in total) else tuple(t // 2 for t in total)
    return tuple(layer.padding)


class _ConvMixin:
    """The forward of Conv1d/2d/3d: our op where it runs, else torch's."""

    def _conv_forward(self, input, weight, bias):
        padding = explicit_padding(self)
        if padding is None:
            _decided(self._td_label, f"padding_mode={self.padding_mode!r}, padding={self.padding!r}")
            return super()._conv_forward(input, weight, bias)
        device_type = input.device.type
        if device_type not in DEVICES:
            _decided(self._td_label, f"this installation has no conv library for {device_type} tensors")
            return super()._conv_forward(input, weight, bias)
        if input.dim() != len(self.kernel_size) + 2:  # an unbatched input: torch's own path
            _decided(self._td_label, f"an unbatched input of shape {tuple(input.shape)}")
            return super()._conv_forward(input, weight, bias)
        x, w, b = _autocast(device_type, input, weight, bias)
        if not conv_runs(self._td_label, device_type, x.dtype, tuple(x.shape), tuple(w.shape), tuple(self.stride),
                         padding, tuple(self.dilation), self.groups):
            return super()._conv_forward(input, weight, bias)
        y = torch.ops.tiledispatch.conv(x, w, list(self.stride), list(padding), list(self.dilation), self.groups)
        if b is not None:
            y = y + b.view(1, -1, *([1] * len(self.kernel_size)))
        return y


_SERIAL = itertools.count(1)


def label(layer, name: str = "") -> str:
    """The layer's name in log lines, unique in the process (a serial number): 'Conv2d #3',
    or with the name patch() found it under, 'features.4 (Conv2d #3)'."""
    tag = f"{type(layer).__name__} #{next(_SERIAL)}"
    return f"{name} ({tag})" if name else tag


class Conv1d(_ConvMixin, torch.nn.Conv1d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._td_label = label(self)


class Conv2d(_ConvMixin, torch.nn.Conv2d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._td_label = label(self)


class Conv3d(_ConvMixin, torch.nn.Conv3d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._td_label = label(self)


class Linear(torch.nn.Linear):
    """y = x W^T + b with W^T read in place (a column-major view of the weight)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._td_label = label(self)

    def forward(self, input):
        device_type = input.device.type
        if device_type not in DEVICES:
            _decided(self._td_label, f"this installation has no gemm library for {device_type} tensors")
            return F.linear(input, self.weight, self.bias)
        x, w, b = _autocast(device_type, input, self.weight, self.bias)
        M = x.numel() // self.in_features if self.in_features else 0
        if x.dim() < 1 or not linear_runs(self._td_label, device_type, x.dtype, M, self.out_features,
                                          self.in_features):
            return F.linear(input, self.weight, self.bias)
        y = torch.ops.tiledispatch.gemm(x.reshape(M, self.in_features), w.t())
        if b is not None:
            y = y + b
        return y.reshape(*x.shape[:-1], self.out_features)
