"""The grouped_mma kernels (bindings/cuda/conv_grouped_mma.cuh: implicit GEMM on tensor cores,
the group a grid dimension, run-time channel counts) against torch in float64 on the GPU, every
direction, on the grouped convolutions of RegNet and ResNeXt (24 to 232 channels per group,
C != K), odd sizes, strides 2-4 with dilation (bwd_data's stride phases), 1x1, 1x5 and 9x9
filters, batches 1 and 3. Each kernel is named (td.conv(..., kernel=...)), so these prove the
family, not whatever the dispatcher picks. The GPU tests skip, saying why, without torch,
without a GPU with a conv library, or where the library has no grouped_mma kernels; the
family's manifest rules and names are checked everywhere."""

import pytest

import tiledispatch as td
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import Direction, DType, config_from_name, families
from tiledispatch.codegen.emit import emit_source
from tiledispatch.codegen.families.grouped_mma import GroupedMma

try:
    import torch
except ImportError:
    torch = None

GPU = next((t for t in device_targets() if t in td.registry().targets), None)
KERNELS = [k for k in td.registry().kernels("conv", GPU) if k.knobs.algorithm == "grouped_mma"] if GPU else []
gpu = pytest.mark.skipif(
    torch is None or not KERNELS,
    reason="torch is needed for the GPU tests" if torch is None else
    f"no grouped_mma conv kernels for a GPU here (GPUs seen: {device_targets() or 'none'}, "
    f"libraries: {td.registry().targets})")

if torch is not None:
    F = torch.nn.functional
    TORCH = {DType.FP16: torch.float16, DType.BF16: torch.bfloat16}
    CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
    GRAD_INPUT = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv3d_input}
    GRAD_WEIGHT = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}
TOLERANCE = {DType.BF16: 1e-2, DType.FP16: 3e-3}  # relative Frobenius error

# per rank: (N, G, C, K, input, filter, stride, padding, dilation)
CASES = {
    2: [
        (32, 4, 64, 64, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1)),    # ResNeXt-like, 64 channels a group
        (32, 8, 24, 24, (56, 56), (3, 3), (2, 2), (1, 1), (1, 1)),    # RegNet stride 2, 24 a group
        (3, 6, 48, 48, (15, 15), (3, 3), (1, 1), (1, 1), (1, 1)),
        (3, 6, 48, 48, (15, 15), (1, 1), (1, 1), (0, 0), (1, 1)),
        (1, 4, 56, 56, (28, 28), (3, 3), (2, 2), (1, 1), (1, 1)),
        (3, 4, 56, 56, (7, 7), (1, 1), (1, 1), (0, 0), (1, 1)),
        (3, 2, 112, 112, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1)),
        (1, 2, 112, 112, (15, 15), (1, 1), (2, 2), (0, 0), (1, 1)),   # 1x1 stride 2: phases without taps
        (1, 2, 232, 232, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
        (3, 2, 232, 232, (7, 7), (1, 1), (1, 1), (0, 0), (1, 1)),
        (2, 3, 24, 40, (13, 11), (3, 3), (1, 1), (2, 2), (2, 2)),     # dilation 2, C != K
        (2, 3, 32, 64, (9, 13), (1, 5), (1, 1), (0, 2), (1, 1)),      # a 1x5 filter
        (2, 2, 56, 24, (12, 11), (3, 3), (2, 2), (2, 2), (2, 2)),     # stride 2 with dilation 2
        (1, 2, 24, 40, (13, 17), (5, 5), (4, 4), (2, 2), (3, 3)),     # stride 4, dilation 3
        (2, 2, 24, 32, (19, 17), (7, 7), (3, 3), (1, 1), (1, 1)),     # stride 3
        (2, 2, 8, 16, (5, 6), (9, 9), (2, 2), (4, 4), (1, 1)),        # 9x9 on a 5x6 image
        (2, 1, 64, 128, (14, 14), (3, 3), (2, 2), (1, 1), (1, 1)),    # dense (G = 1)
    ],
    1: [
        (2, 3, 24, 32, (37,), (4,), (2,), (3,), (1,)),
        (3, 4, 48, 48, (301,), (3,), (1,), (1,), (2,)),
    ],
    3: [
        (2, 2, 16, 24, (5, 7, 6), (3, 3, 3), (2, 1, 2), (1, 1, 1), (1, 2, 1)),
        (3, 2, 48, 48, (4, 9, 10), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ],
}


def to_torch_layout(t):
    """(N, *spatial, C) -> (N, C, *spatial)."""
    return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))


def quantized(shape, dtype, gen):
    return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(TORCH[dtype])


def run_case(kernel, gen, N, G, C, K, inp, fil, st, pad, dil):
    """Runs one case on the named kernel against float64; returns the relative Frobenius error."""
    nd, dt = len(inp), kernel.dtype
    problem = td.ConvProblem(N, G, C, K, inp, fil, st, pad, dil, kernel.direction, dt)
    assert td.Dispatcher("conv", GPU).is_supported(problem, kernel=kernel.name), (kernel.name, N, G, C, K, inp, fil)
    kwargs = dict(stride=st, padding=pad, dilation=dil, groups=G, direction=kernel.direction.key, kernel=kernel.name)
    out_size = tuple((i + 2 * p - d * (f - 1) - 1) // s + 1 for i, f, s, p, d in zip(inp, fil, st, pad, dil))
    x = quantized((N, *inp, G * C), dt, gen)
    w = quantized((G * K, *fil, C), dt, gen)
    dy = quantized((N, *out_size, G * K), dt, gen)
    x64, dy64 = to_torch_layout(x).double(), to_torch_layout(dy).double()
    w64 = w.permute(0, nd + 1, *range(1, nd + 1)).double()
    if kernel.direction is Direction.FWD:
        got = torch.full((N, *out_size, G * K), float("nan"), device="cuda", dtype=TORCH[dt])
        td.conv(x, w, out=got, **kwargs)
        ref = CONV[nd](x64, w64, None, st, pad, dil, G)
        got = to_torch_layout(got).double()
    elif kernel.direction is Direction.BWD_DATA:
        got = torch.full((N, *inp, G * C), float("nan"), device="cuda", dtype=TORCH[dt])
        td.conv(dy, w, input_size=inp, out=got, **kwargs)
        ref = GRAD_INPUT[nd]((N, G * C, *inp), w64, dy64, st, pad, dil, G)
        got = to_torch_layout(got).double()
    else:
        got = torch.full((G * K, *fil, C), float("nan"), device="cuda", dtype=TORCH[dt])
        td.conv(x, dy, filter_size=fil, out=got, **kwargs)
        ref = GRAD_WEIGHT[nd](x64, (G * K, C, *fil), dy64, st, pad, dil, G)
        got = got.permute(0, nd + 1, *range(1, nd + 1)).double()
    torch.cuda.synchronize()
    assert not bool(torch.isnan(got).any()), f"{kernel.name}: outputs left unwritten (NaN)"
    return float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


@gpu
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_grouped_mma_kernel_matches_float64(kernel, gen):
    for case in CASES[kernel.ndim]:
        err = run_case(kernel, gen, *case)
        assert err <= TOLERANCE[kernel.dtype], (kernel.name, case, err)


@gpu
@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.ndim == 2], ids=lambda k: k.name)
def test_grouped_mma_kernel_refuses_channels_not_in_16_byte_vectors(kernel):
    d = td.Dispatcher("conv", GPU)
    for C, K in ((12, 16), (16, 20), (3, 5)):
        p = td.ConvProblem(2, 4, C, K, (14, 14), (3, 3), 1, 1, 1, kernel.direction, kernel.dtype)
        assert d.is_supported(p, kernel=kernel.name) is False, (C, K)


OURS = ("direct", "mma", "tiled_mma", "toeplitz_mma", "depthwise", "depthwise_mma")  # our other conv families
CUTLASS = ("im2col", "implicit")


def best_cost(d, p, algorithms):
    """The lowest cost-model entry among the kernels of these families (of p's direction,
    dtype and rank) that take p; None where none takes it."""
    costs = [d.cost(p, k) for k in d.kernels if k.knobs.algorithm in algorithms and k.direction is p.direction
             and k.dtype is DType.BF16 and k.ndim == 2]
    costs = [c for c in costs if c is not None]
    return min(costs) if costs else None


@gpu
def test_the_cost_model_ranks_grouped_mma_by_channels_per_group():
    """Grouped problems the specialised families have no fast kernel for rank grouped_mma ahead
    of our other families (the generic direct kernel was 100-300x slower, mma at 32 channels
    per group 1.8-2.6x); depthwise and 16 channels per group stay on their own kernels, dense
    ones on CUTLASS where it takes them. (The vendor families rank by their own rules.)"""
    d = td.Dispatcher("conv", GPU)
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        for G, C, K, st in ((4, 64, 64, 1), (8, 24, 24, 2), (2, 232, 232, 1), (3, 32, 64, 1), (32, 32, 32, 1)):
            p = td.ConvProblem(8, G, C, K, (28, 28), (3, 3), st, 1, 1, direction, "bf16")
            ours, others = best_cost(d, p, ("grouped_mma",)), best_cost(d, p, OURS)
            assert ours is not None and (others is None or ours < others), (direction, G, C, K, ours, others)
        for G, C in ((64, 1), (32, 16)):
            p = td.ConvProblem(8, G, C, C, (28, 28), (3, 3), 1, 1, 1, direction, "bf16")
            ours, others = best_cost(d, p, ("grouped_mma",)), best_cost(d, p, OURS)
            assert others is not None and (ours is None or others < ours), (direction, G, C, ours, others)
        p = td.ConvProblem(8, 1, 64, 128, (28, 28), (3, 3), 1, 1, 1, direction, "bf16")
        ours, cutlass = best_cost(d, p, ("grouped_mma",)), best_cost(d, p, CUTLASS)
        assert ours is not None and (cutlass is None or cutlass < ours), (direction, ours, cutlass)


@pytest.fixture
def grouped_mma_registered():
    """The family in the codegen registry (registered here where the package does not list it)."""
    added = GroupedMma not in families.FAMILIES
    if added:
        families.register(GroupedMma)
    yield
    if added:
        families.unregister(GroupedMma)


def test_grouped_mma_names_rules_and_source(grouped_mma_registered):
    """Names round-trip; the tile and dtype rules say what they take; the emitted source
    instantiates the template with the tile."""
    name = "conv_bwdweight_nhwgc_bf16_64x64x32_gmma_sm90a"
    config = config_from_name(name)
    assert config.name == name and config.knobs == GroupedMma() and config.tile == (64, 64, 32)
    assert "cuda::Sm90GroupedMmaConv<2, 2, 2, 64, 64, 32>" in emit_source(config)
    assert "&grouped_mma_conv_cost" in emit_source(config)
    knobs = GroupedMma()
    for tile, dtype in (((128, 32, 32), DType.BF16), ((32, 128, 64), DType.FP16)):
        assert knobs.problems("conv", dtype, None, Direction.FWD, tile, "sm_90a") == []
    assert any("tile must be" in m for m in knobs.problems("conv", DType.BF16, None, Direction.FWD, (128, 96, 32), "sm_90a"))
    assert any("fp16 or bf16" in m for m in knobs.problems("conv", DType.FP32, None, Direction.FWD, (128, 64, 32), "sm_90a"))
    assert any("sm_90a" in m for m in knobs.problems("conv", DType.BF16, None, Direction.FWD, (128, 64, 32), "cpu"))
    with pytest.raises(ValueError, match="takes no channels_per_group"):
        GroupedMma.from_yaml({"channels_per_group": 32})
