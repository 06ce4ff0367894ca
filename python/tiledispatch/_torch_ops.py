"""The torch custom ops of namespace `tiledispatch`, with fake (meta) implementations for
torch.compile and autograd formulas that use the same ops:

    torch.ops.tiledispatch.gemm(a, b, alpha)                 alpha * a @ b
    torch.ops.tiledispatch.conv(x, w, stride, padding, dilation, groups)
    torch.ops.tiledispatch.conv_bwd_data(dy, w, input_size, stride, padding, dilation, groups)
    torch.ops.tiledispatch.conv_bwd_weight(x, dy, filter_size, stride, padding, dilation, groups)

Conv tensors take torch's shapes (F.conv{1,2,3}d's): x (N, G*C, *spatial), w (G*K, C, *filter),
y (N, G*K, *out). Their memory is read channels-last (a tensor in torch's channels_last
memory format is used in place, any other is copied once) and the outputs are new tensors
stored channels-last. Every op returns a new tensor (no aliasing, nothing mutated).
CPU tensors run on the host library through numpy views of their memory; CUDA tensors on
the GPU library, on the current stream.

The ops are defined with torch.library.Library (schema, CPU and CUDA kernels, a fake kernel
through torch.library.register_fake, and an Autograd kernel of our own: an
autograd.Function where an input needs a gradient, else straight below autograd), not with
torch.library.custom_op, whose Python wrapper layers cost about 7 us a call on top of the
dispatcher's (bench/gemm.py's host-overhead table times the op against torch.matmul)."""
from __future__ import annotations

import torch

from . import _autotune, _conv_plans, _torch_cuda, api
from ._registry import registry
from ._torch_views import (DTYPES, channels_first, channels_last, dense_channels_last, empty_channels_last, out_dtype,
                           to_numpy)
from .codegen import Direction
from .errors import InvalidArgumentError
from .problems import INT32_MAX, ConvProblem, _integer, _spatial

CONV_ARGS = "int[] stride, int[] padding, int[] dilation, int groups"

_LIB = torch.library.Library("tiledispatch", "DEF")


def _define(name: str, schema: str, kernel, fake, setup, backward):
    """Defines torch.ops.tiledispatch.<name> and returns its OpOverload: `kernel` for CPU
    and CUDA tensors, `fake` for torch.compile's fake tensors, and autograd through
    setup(ctx, inputs, output) and backward(ctx, grad) (register_autograd's contract).
    Only the first two arguments are tensors that can need a gradient."""
    _LIB.define(name + schema)
    _LIB.impl(name, kernel, "CPU")
    _LIB.impl(name, kernel, "CUDA")
    torch.library.register_fake(f"tiledispatch::{name}", fake, lib=_LIB)
    op = getattr(torch.ops.tiledispatch, name).default

    def forward(ctx, *inputs):
        with torch._C._AutoDispatchBelowAutograd():
            output = op(*inputs)
        setup(ctx, inputs, output)
        return output

    # grad_fn of an output: tiledispatch_<name>Backward
    Function = type(f"tiledispatch_{name}", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    arguments = op._schema.arguments

    def autograd_kernel(*args, **kwargs):
        if torch.is_grad_enabled() and (args[0].requires_grad or args[1].requires_grad):
            inputs = list(args)  # every argument in schema order, defaults filled in
            for argument in arguments[len(args):]:
                inputs.append(kwargs[argument.name] if argument.name in kwargs else argument.default_value)
            return Function.apply(*inputs)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    _LIB.impl(name, autograd_kernel, "Autograd")
    return op


def host_target(op: str) -> str:
    """The library CPU tensors run on: cpu where it is built, else the default one (a GPU
    target's host path, which copies to the device and back)."""
    reg = registry()
    if any(lib["op"] == op and lib["target"] == "cpu" for lib in reg.libraries):
        return "cpu"
    return reg.default_target(op)


# ---- gemm -----------------------------------------------------------------------------------

def _matrix(t: torch.Tensor) -> torch.Tensor:
    """t where it is row- or column-major (padded leading dimension included), else a
    contiguous copy (a broadcast or sliced operand)."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if (s1 == 1 or cols == 1) and s0 >= max(cols, 1) and s0 > 0:
        return t
    if (s0 == 1 or rows == 1) and s1 >= max(rows, 1) and s1 > 0:
        return t
    return t.contiguous()


def _gemm_shape(a, b):
    if a.dim() != 2 or b.dim() != 2:
        raise InvalidArgumentError(f"gemm takes two matrices, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise InvalidArgumentError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"A and B must share an element type, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise InvalidArgumentError(f"A is on {a.device}, B on {b.device}")
    return a.shape[0], b.shape[1]


def _gemm(a: torch.Tensor, b: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    if a.is_cuda and not _torch_cuda.capturing():
        # the lean path first: its cache entry exists only for metadata it has checked
        out = api._torch_fast(a, b, None, alpha)
        if out is not None:
            return out
    M, N = _gemm_shape(a, b)
    a, b = _matrix(a), _matrix(b)
    if a.is_cuda:
        return _torch_cuda.gemm(a, b, alpha)
    out = torch.empty((M, N), dtype=out_dtype(a.dtype))
    api.gemm(to_numpy(a), to_numpy(b), out=to_numpy(out), alpha=alpha, target=host_target("gemm"))
    return out


def _gemm_fake(a, b, alpha=1.0):
    M, N = _gemm_shape(a, b)
    return a.new_empty((M, N), dtype=out_dtype(a.dtype))


def _gemm_setup(ctx, inputs, output):
    a, b, alpha = inputs
    ctx.save_for_backward(a, b)
    ctx.alpha = alpha


def _gemm_backward(ctx, grad):
    """C = alpha A B: dA = alpha dC B^T, dB = alpha A^T dC, the transposes as views."""
    a, b = ctx.saved_tensors
    if grad.dtype != a.dtype:
        raise NotImplementedError(f"the gemm backward takes {grad.dtype} gradients of {a.dtype} inputs: "
                                  "not supported (float8 inputs have no backward)")
    grad_a = gemm(grad, b.t(), ctx.alpha) if ctx.needs_input_grad[0] else None
    grad_b = gemm(a.t(), grad, ctx.alpha) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None


gemm = _define("gemm", "(Tensor a, Tensor b, float alpha=1.0) -> Tensor", _gemm, _gemm_fake, _gemm_setup,
               _gemm_backward)


# ---- conv: shapes ---------------------------------------------------------------------------

def output_size(input_size, filter_size, stride, padding, dilation) -> list:
    return [(i + 2 * p - d * (f - 1) - 1) // s + 1
            for i, f, s, p, d in zip(input_size, filter_size, stride, padding, dilation)]


def _per_group(total, groups, what):
    if groups < 1:
        raise InvalidArgumentError(f"groups must be positive, got {groups}")
    if total % groups:
        raise InvalidArgumentError(f"{what} {total} is not divisible by groups={groups}")
    return total // groups


def _check_conv(a, b, stride, padding, dilation):
    if a.dim() not in (3, 4, 5) or b.dim() != a.dim():
        raise InvalidArgumentError(f"expected tensors of rank 3, 4 or 5, got {tuple(a.shape)} and {tuple(b.shape)}")
    ndim = a.dim() - 2
    for name, values in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        if len(values) != ndim:
            raise InvalidArgumentError(f"{name} needs {ndim} values (one per spatial dim), got {list(values)}")
    if a.dtype != b.dtype:
        raise TypeError(f"both tensors must share an element type, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise InvalidArgumentError(f"the tensors are on {a.device} and {b.device}")


def _check_sizes(name, got, want):
    if list(got) != list(want):
        raise InvalidArgumentError(f"{name} has spatial size {list(got)}, the problem gives {list(want)}")


def _fwd_shape(x, w, stride, padding, dilation, groups):
    _check_conv(x, w, stride, padding, dilation)
    C = w.shape[1]
    if x.shape[1] != groups * C:
        raise InvalidArgumentError(f"x has {x.shape[1]} channels, groups={groups} x C={C} expected")
    _per_group(w.shape[0], groups, "filters")
    out = output_size(x.shape[2:], w.shape[2:], stride, padding, dilation)
    if any(v <= 0 for v in out):
        raise InvalidArgumentError(f"the output would be empty: output size {out}")
    return (x.shape[0], w.shape[0], *out)


def _bwd_data_shape(dy, w, input_size, stride, padding, dilation, groups):
    _check_conv(dy, w, stride, padding, dilation)
    K = _per_group(w.shape[0], groups, "filters")
    if dy.shape[1] != groups * K:
        raise InvalidArgumentError(f"dy has {dy.shape[1]} channels, groups={groups} x K={K} expected")
    _check_sizes("dy", dy.shape[2:], output_size(input_size, w.shape[2:], stride, padding, dilation))
    return (dy.shape[0], groups * w.shape[1], *input_size)


def _bwd_weight_shape(x, dy, filter_size, stride, padding, dilation, groups):
    _check_conv(x, dy, stride, padding, dilation)
    C = _per_group(x.shape[1], groups, "input channels")
    _per_group(dy.shape[1], groups, "output channels")
    if x.shape[0] != dy.shape[0]:
        raise InvalidArgumentError(f"x has batch {x.shape[0]}, dy {dy.shape[0]}")
    _check_sizes("dy", dy.shape[2:], output_size(x.shape[2:], filter_size, stride, padding, dilation))
    return (dy.shape[1], C, *filter_size)


def _problem(direction, x_shape, w_shape, stride, padding, dilation, groups, dtype) -> ConvProblem:
    """The library's problem from torch's shapes of the input (N, G*C, *spatial) and the
    weight (G*K, C, *filter)."""
    if dtype not in DTYPES:
        raise TypeError(f"unsupported element type {dtype} (the kernels take float32, float16 and bfloat16)")
    N, GC, *spatial = x_shape
    GK, C, *filt = w_shape
    return ConvProblem(N, groups, C, GK // groups, tuple(spatial), tuple(filt), tuple(stride), tuple(padding),
                       tuple(dilation), direction, DTYPES[dtype])


def _run(problem, x, w, y, plan_key=None):
    """Runs a problem on channels-first tensors; the written one is new, the others are read
    through their channels-last views. With plan_key (CUDA tensors), a run of the library's
    pick stores its plan there for the calls with the same metadata (_conv_plans)."""
    tensors = [dense_channels_last(t) if t is not None else None for t in (x, w, y)]
    written = next(i for i, t in enumerate(tensors) if t is None)
    shape = (problem.input_shape, problem.weight_shape, problem.output_shape)[written]
    device = next(t.device for t in tensors if t is not None)
    dtype = out_dtype(next(t.dtype for t in tensors if t is not None))
    result = torch.empty(shape, dtype=dtype, device=device)
    tensors[written] = result
    if device.type == "cuda":
        d = api.dispatcher("conv", api._device_target("conv"))
        kernel = _autotune.kernel_for(d, problem, tensors)
        _torch_cuda.run(d, problem, *tensors, kernel=kernel)
        if plan_key is not None and kernel is None:
            _conv_plans.store(plan_key, _conv_plans.Plan(problem.to_c(), d.lib, written, result.shape, dtype))
    else:
        d = api.dispatcher("conv", host_target("conv"))
        arrays = [to_numpy(t) for t in tensors]
        d.run(problem, *arrays, kernel=_autotune.kernel_for(d, problem, arrays), timed=False)
    return channels_first(result)


# ---- conv: the ops --------------------------------------------------------------------------

def _conv(x: torch.Tensor, w: torch.Tensor, stride, padding, dilation, groups: int) -> torch.Tensor:
    k = _conv_plans.key("fwd", x, w, (tuple(stride), tuple(padding), tuple(dilation), groups))
    plan = _conv_plans.lookup(k)
    if plan is not None:
        return _conv_plans.execute(plan, x, w)
    _fwd_shape(x, w, stride, padding, dilation, groups)
    problem = _problem(Direction.FWD, x.shape, w.shape, stride, padding, dilation, groups, x.dtype)
    return _run(problem, x, w, None, k)


def _conv_fake(x, w, stride, padding, dilation, groups):
    return empty_channels_last(_fwd_shape(x, w, stride, padding, dilation, groups), out_dtype(x.dtype), x.device)


def _conv_bwd_data(dy: torch.Tensor, w: torch.Tensor, input_size, stride, padding, dilation,
                  groups: int) -> torch.Tensor:
    k = _conv_plans.key("bwd_data", dy, w, (tuple(input_size), tuple(stride), tuple(padding), tuple(dilation), groups))
    plan = _conv_plans.lookup(k)
    if plan is not None:
        return _conv_plans.execute(plan, w, dy)
    shape = _bwd_data_shape(dy, w, input_size, stride, padding, dilation, groups)
    problem = _problem(Direction.BWD_DATA, shape, w.shape, stride, padding, dilation, groups, dy.dtype)
    return _run(problem, None, w, dy, k)


def _conv_bwd_data_fake(dy, w, input_size, stride, padding, dilation, groups):
    shape = _bwd_data_shape(dy, w, input_size, stride, padding, dilation, groups)
    return empty_channels_last(shape, out_dtype(dy.dtype), dy.device)


def _conv_bwd_weight(x: torch.Tensor, dy: torch.Tensor, filter_size, stride, padding, dilation,
                    groups: int) -> torch.Tensor:
    k = _conv_plans.key("bwd_weight", x, dy, (tuple(filter_size), tuple(stride), tuple(padding), tuple(dilation),
                                              groups))
    plan = _conv_plans.lookup(k)
    if plan is not None:
        return _conv_plans.execute(plan, x, dy)
    shape = _bwd_weight_shape(x, dy, filter_size, stride, padding, dilation, groups)
    problem = _problem(Direction.BWD_WEIGHT, x.shape, shape, stride, padding, dilation, groups, x.dtype)
    return _run(problem, x, None, dy, k)


def _conv_bwd_weight_fake(x, dy, filter_size, stride, padding, dilation, groups):
    shape = _bwd_weight_shape(x, dy, filter_size, stride, padding, dilation, groups)
    return empty_channels_last(shape, out_dtype(x.dtype), x.device)


# ---- conv: autograd -------------------------------------------------------------------------
# The three directions are one bilinear map seen three ways, so each one's backward is the
# other two: y = conv(x, w), dx = bwd_data(dy, w), dw = bwd_weight(x, dy).

def _conv_setup(ctx, inputs, output):
    a, b, *params = inputs
    ctx.save_for_backward(a, b)
    ctx.params = params


def _conv_backward(ctx, dy):
    x, w = ctx.saved_tensors
    params = ctx.params
    dx = conv_bwd_data(dy, w, x.shape[2:], *params) if ctx.needs_input_grad[0] else None
    dw = conv_bwd_weight(x, dy, w.shape[2:], *params) if ctx.needs_input_grad[1] else None
    return dx, dw, None, None, None, None


def _bwd_data_setup(ctx, inputs, output):
    dy, w, _input_size, *params = inputs
    ctx.save_for_backward(dy, w)
    ctx.params = params


def _bwd_data_backward(ctx, grad_dx):
    dy, w = ctx.saved_tensors
    params = ctx.params
    grad_dy = conv(grad_dx, w, *params) if ctx.needs_input_grad[0] else None
    grad_w = conv_bwd_weight(grad_dx, dy, w.shape[2:], *params) if ctx.needs_input_grad[1] else None
    return grad_dy, grad_w, None, None, None, None, None


def _bwd_weight_setup(ctx, inputs, output):
    x, dy, _filter_size, *params = inputs
    ctx.save_for_backward(x, dy)
    ctx.params = params


def _bwd_weight_backward(ctx, grad_dw):
    x, dy = ctx.saved_tensors
    params = ctx.params
    grad_x = conv_bwd_data(dy, grad_dw, x.shape[2:], *params) if ctx.needs_input_grad[0] else None
    grad_dy = conv(x, grad_dw, *params) if ctx.needs_input_grad[1] else None
    return grad_x, grad_dy, None, None, None, None, None


conv = _define("conv", f"(Tensor x, Tensor w, {CONV_ARGS}) -> Tensor", _conv, _conv_fake, _conv_setup,
               _conv_backward)
conv_bwd_data = _define("conv_bwd_data", f"(Tensor dy, Tensor w, SymInt[] input_size, {CONV_ARGS}) -> Tensor",
                        _conv_bwd_data, _conv_bwd_data_fake, _bwd_data_setup, _bwd_data_backward)
conv_bwd_weight = _define("conv_bwd_weight", f"(Tensor x, Tensor dy, SymInt[] filter_size, {CONV_ARGS}) -> Tensor",
                          _conv_bwd_weight, _conv_bwd_weight_fake, _bwd_weight_setup, _bwd_weight_backward)


# ---- td.conv on torch tensors ---------------------------------------------------------------

def conv_channels_last(x, w, *, stride, padding, dilation, groups, direction: Direction, input_size=None,
                       filter_size=None):
    """td.conv's call on torch tensors in its channels-last-with-groups layout (input
    (N, *spatial, G*C), weight (G*K, *filter, C), output (N, *out, G*K)) through the ops:
    their channels-first views go in, the result comes back as the channels-last view."""
    if x.dim() not in (3, 4, 5) or w.dim() != x.dim():
        raise InvalidArgumentError(f"expected tensors of rank 3, 4 or 5 (N, *spatial, channels), got "
                                   f"{tuple(x.shape)} and {tuple(w.shape)}")
    ndim = x.dim() - 2
    params = (list(_spatial(stride, ndim, "stride")), list(_spatial(padding, ndim, "padding", low=0)),
              list(_spatial(dilation, ndim, "dilation")), _integer(groups, "groups", 1, INT32_MAX))
    s, p, d, _ = params
    a, b = channels_first(x), channels_first(w)
    if direction is Direction.FWD:
        return channels_last(conv(a, b, *params))
    if direction is Direction.BWD_DATA:
        if input_size is None:
            input_size = [(o - 1) * si - 2 * pi + di * (f - 1) + 1
                          for o, si, pi, di, f in zip(a.shape[2:], s, p, d, b.shape[2:])]
        return channels_last(conv_bwd_data(a, b, list(_spatial(input_size, ndim, "input_size")), *params))
    if filter_size is None:
        filter_size = [(i + 2 * pi - 1 - (o - 1) * si) // di + 1
                       for i, o, si, pi, di in zip(a.shape[2:], b.shape[2:], s, p, d)]
    return channels_last(conv_bwd_weight(a, b, list(_spatial(filter_size, ndim, "filter_size")), *params))
