"""GPU convolution kernels (sm_90a direct kernels) against torch in float64 on the GPU.
Skipped, with the reason shown, where there is no GPU, no torch, or no conv library for
the GPU; run by bench/gpu_run.sh on the H200.

Every compiled conv variant is run on problems it supports: fresh random inputs
quantized to its dtype, the output poisoned with NaN, odd and asymmetric sizes, stride 2,
dilation 2, in its own rank (1D, 2D or 3D)."""

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import Direction, DType
from tiledispatch.errors import KernelRejectedError

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
F = torch.nn.functional
GPU = next((t for t in device_targets() if t in td.registry().targets), None)
HAS_CONV = GPU is not None and bool(td.registry().kernels("conv", GPU))
pytestmark = pytest.mark.skipif(
    not HAS_CONV, reason=f"no GPU with a conv library in this installation (GPUs seen: {device_targets() or 'none'}, "
                         f"libraries: {td.registry().targets})")

TORCH = {DType.FP16: torch.float16, DType.BF16: torch.bfloat16}
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
GRAD_INPUT = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv3d_input}
GRAD_WEIGHT = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}


def kernels():
    return td.registry().kernels("conv", GPU) if HAS_CONV else []


def to_torch_layout(t):
    """(N, *spatial, C) -> (N, C, *spatial)."""
    return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))


def from_torch_layout(t):
    return t.permute(0, *range(2, t.dim()), 1).contiguous()


def geometry(kernel):
    """(G, C, K) the kernel takes: its channels per group, enough groups for two
    channel vectors; the generic kernel gets C != K."""
    if kernel.knobs.algorithm in ("im2col", "implicit", "pointwise"):  # dense
        return 1, 16, 24
    if kernel.knobs.algorithm == "cudnn":  # any: grouped with C != K
        return 3, 8, 16
    if kernel.knobs.algorithm == "grouped_mma":  # channel counts multiples of 8, above 16
        return 3, 24, 40
    if kernel.knobs.algorithm == "depthwise":  # three channel vectors (sliding: 16-byte pieces)
        return (24 if is_sliding(kernel) else 3 * kernel.tile[2]), 1, 1
    if kernel.knobs.algorithm == "depthwise_mma":  # three channel blocks, the last one 8 short
        return 3 * kernel.tile[2] - 8, 1, 1
    if kernel.knobs.algorithm == "toeplitz_mma":
        cpg = kernel.knobs.channels_per_group
        return (3 * kernel.tile[2] - 8) // cpg, cpg, cpg
    cpg = kernel.knobs.channels_per_group
    if cpg == 0:
        return 3, 3, 5
    vc = kernel.tile[1]
    return 2 * vc // cpg + (vc // cpg if vc // cpg > 1 else 1), cpg, cpg


PW_CASES = {  # per rank, the pointwise kernels' (1x1, no padding): (input, stride)
    1: [((37,), (1,)), ((29,), (2,))],
    2: [((13, 10), (1, 1)), ((11, 14), (2, 1))],
    3: [((5, 7, 6), (1, 1, 1)), ((6, 5, 9), (2, 1, 2))],
}

CASES = {  # per rank: (input, filter, stride, padding, dilation)
    1: [((37,), (4,), (1,), (3,), (1,)), ((29,), (3,), (2,), (1,), (2,))],
    2: [((13, 10), (3, 3), (1, 1), (1, 1), (1, 1)), ((11, 14), (3, 2), (2, 1), (1, 2), (2, 1)),
        ((9, 8), (7, 7), (1, 1), (3, 3), (1, 1))],
    3: [((5, 7, 6), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)), ((6, 5, 9), (2, 3, 3), (2, 1, 2), (0, 1, 1), (1, 2, 1))],
}


def quantized(shape, dtype, gen):
    return (torch.rand(shape, generator=gen, device="cuda") * 2 - 1).to(TORCH[dtype])


def run_case(kernel, gen, N, G, C, K, inp, fil, st, pad, dil, name=None, split_k=0):
    """Runs one case; False (nothing run) when the kernel does not take the problem."""
    nd = len(inp)
    dt = kernel.dtype
    problem = td.ConvProblem(N, G, C, K, inp, fil, st, pad, dil, kernel.direction, dt, split_k)
    if not td.Dispatcher("conv", GPU).is_supported(problem, kernel=kernel.name if name is None else name):
        return False
    kwargs = dict(stride=st, padding=pad, dilation=dil, groups=G, direction=kernel.direction.key,
                  kernel=kernel.name if name is None else name, split_k=split_k)
    out_size = tuple((i + 2 * p - d * (f - 1) - 1) // s + 1 for i, f, s, p, d in zip(inp, fil, st, pad, dil))
    x = quantized((N, *inp, G * C), dt, gen)
    w = quantized((G * K, *fil, C), dt, gen)
    dy = quantized((N, *out_size, G * K), dt, gen)
    x64, w64, dy64 = to_torch_layout(x).double(), w.permute(0, nd + 1, *range(1, nd + 1)).double(), \
        to_torch_layout(dy).double()
    if kernel.direction is Direction.FWD:
        out = torch.full((N, *out_size, G * K), float("nan"), device="cuda", dtype=TORCH[dt])
        td.conv(x, w, out=out, **kwargs)
        ref = CONV[nd](x64, w64, None, st, pad, dil, G)
        mag = CONV[nd](x64.abs(), w64.abs(), None, st, pad, dil, G)
        got, ref, mag = out, from_torch_layout(ref), from_torch_layout(mag)
        red = C * int(np.prod(fil))
    elif kernel.direction is Direction.BWD_DATA:
        out = torch.full((N, *inp, G * C), float("nan"), device="cuda", dtype=TORCH[dt])
        td.conv(dy, w, input_size=inp, out=out, **kwargs)
        shape = (N, G * C, *inp)
        ref = GRAD_INPUT[nd](shape, w64, dy64, st, pad, dil, G)
        mag = GRAD_INPUT[nd](shape, w64.abs(), dy64.abs(), st, pad, dil, G)
        got, ref, mag = out, from_torch_layout(ref), from_torch_layout(mag)
        red = K * int(np.prod(fil))
    else:
        out = torch.full((G * K, *fil, C), float("nan"), device="cuda", dtype=TORCH[dt])
        td.conv(x, dy, filter_size=fil, out=out, **kwargs)
        shape = (G * K, C, *fil)
        ref = GRAD_WEIGHT[nd](x64, shape, dy64, st, pad, dil, G)
        mag = GRAD_WEIGHT[nd](x64.abs(), shape, dy64.abs(), st, pad, dil, G)
        got = out
        ref = ref.permute(0, *range(2, nd + 2), 1)
        mag = mag.permute(0, *range(2, nd + 2), 1)
        red = N * int(np.prod(out_size))
    torch.cuda.synchronize()
    err = (got.double() - ref).abs()
    tol = reference.tolerance(dt, red)
    bad = ~(err <= tol * mag + reference.underflow(dt) + reference.FLOOR)
    if bool(bad.any()):
        at = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{kernel.name} N={N} G={G} C={C} K={K} in={inp} fil={fil} stride={st} pad={pad} dil={dil}: "
            f"{int(bad.sum())} of {bad.numel()} outside tolerance; first at {at}: got {float(got[at])}, "
            f"reference {float(ref[at])}, sum |terms| {float(mag[at])}, tolerance {tol * float(mag[at]) + reference.underflow(dt)}")
    return True


# The shared-memory tiled path of the direct kernels (2D/3D; fwd and bwd_data from 2 channels
# per group, bwd_weight from 2 and for depthwise filters wider than 3; the others run the
# untiled kernels, checked here too): channel counts that make blocks of 8, 4 and 2 channel
# units, images wider and taller than one tile, stride 2 with dilation 2 (bwd_data then
# takes the untiled kernel), 7x7, and a 5x5 filter strided and dilated along W (the depthwise
# bwd_weight kernel without its window).
TILED_CASES = {
    2: [((19, 75), (3, 3), (1, 1), (1, 1), (1, 1)), ((21, 66), (5, 3), (2, 2), (2, 1), (1, 2)),
        ((12, 30), (7, 7), (1, 1), (3, 3), (1, 1)), ((17, 40), (5, 5), (1, 2), (2, 4), (1, 2))],
    3: [((4, 9, 40), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)), ((5, 6, 35), (3, 3, 3), (2, 1, 2), (1, 1, 1), (1, 2, 1))],
}


def tiled_kernels():
    return [k for k in kernels() if k.knobs.algorithm == "direct" and 1 <= k.knobs.channels_per_group <= 8
            and k.ndim >= 2 and k.tile[1] == 8]


@pytest.mark.parametrize("kernel", tiled_kernels(), ids=lambda k: k.name)
def test_tiled_direct_kernels_on_many_channels_and_tiles(kernel, gen):
    cpg = kernel.knobs.channels_per_group
    for channels in (64, 144):  # 8 channel units (blocks of 8 or 4), 18 (blocks of 2)
        for inp, fil, st, pad, dil in TILED_CASES[kernel.ndim]:
            assert run_case(kernel, gen, 2, channels // cpg, cpg, cpg, inp, fil, st, pad, dil)


# The tensor-core kernels from shared-memory tiles (conv_mma_tiled.cuh): 64 channels (blocks
# of 32) and 144 (blocks of 16), images wider and taller than one tile, stride 2 with
# dilation 2 (bwd_data refuses stride 2), 7x7 and 5x5 filters, 1D rows longer than a tile.
# bench/gpu_run.sh conv runs them again with --td-options no_multi_row (the one-row loop).
# The 16-channel kernels' row-reuse loop (3-row filters at row stride and dilation 1) also
# meets a column stride and dilation (2D) and a depth stride and dilation (3D) here.
TC_CASES = {
    1: [((300,), (4,), (1,), (3,), (1,)), ((301,), (3,), (2,), (1,), (2,))],
    2: TILED_CASES[2] + [((23, 50), (3, 3), (1, 2), (1, 2), (1, 2))],
    3: TILED_CASES[3] + [((7, 11, 37), (3, 3, 3), (2, 1, 2), (2, 1, 1), (2, 1, 1)),
                         ((4, 9, 70), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1))],
}


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm == "tiled_mma"], ids=lambda k: k.name)
def test_tiled_mma_kernels_on_many_channels_and_tiles(kernel, gen):
    cpg = kernel.knobs.channels_per_group
    strided_data = kernel.direction is Direction.BWD_DATA
    for channels in (64, 144):
        for inp, fil, st, pad, dil in TC_CASES[kernel.ndim]:
            ran = run_case(kernel, gen, 2, channels // cpg, cpg, cpg, inp, fil, st, pad, dil)
            assert ran or (strided_data and max(st) > 1), (kernel.name, channels, inp, fil, st)


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm == "tiled_mma" and k.ndim == 2],
                         ids=lambda k: k.name)
def test_tiled_mma_kernels_on_a_problem_that_walks_several_tiles_per_block(kernel, gen):
    """A ResNeXt-sized problem (32 images of 56 x 56, 128 channels): blocks walk more than
    one tile (fwd / bwd_data prefetch the next tile; bwd_weight adds several tiles per
    partial row), which the small cases above do not reach."""
    cpg = kernel.knobs.channels_per_group
    assert run_case(kernel, gen, 32, 128 // cpg, cpg, cpg, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1))


# The depthwise kernels (compiled per filter size, stride 1): channel counts of MobileNetV2
# and ConvNeXt, images wider and taller than a thread's tile with ragged edges, every
# compiled filter size, no padding, padding wider than the filter (bwd_data then reads dy
# at a negative pad'), asymmetric padding, and problems large enough that bwd_weight splits
# rows into segments, walks several units per slice and reduces several slices per block.
DW_CASES = {  # per rank: (N, input, filter, padding)
    1: [(2, (300,), (4,), (3,)), (3, (301,), (3,), (1,)), (2, (257,), (7,), (0,)), (1, (61,), (5,), (6,)),
        (2, (2048,), (4,), (3,))],
    2: [(2, (19, 75), (3, 3), (1, 1)), (2, (12, 30), (7, 7), (3, 3)), (3, (17, 40), (5, 5), (2, 2)),
        (2, (9, 8), (5, 5), (0, 0)), (2, (11, 9), (3, 3), (0, 4)), (2, (10, 13), (7, 7), (1, 5)),
        (16, (28, 28), (7, 7), (3, 3)), (8, (56, 56), (3, 3), (1, 1)), (1, (70, 9), (3, 3), (1, 1))],
}


def is_sliding(kernel) -> bool:
    """The sliding depthwise kernels (bwd_weight tile rows > 1, fwd / bwd_data rows > 4):
    channels in multiples of 8."""
    if kernel.knobs.algorithm != "depthwise":
        return False
    return kernel.tile[0] > (1 if kernel.direction is Direction.BWD_WEIGHT else 4)


def dw_takes(kernel, fil, channels) -> bool:
    """Whether a depthwise variant takes this filter size and channel count: the sliding
    kernels only where their sums, weights and input rows fit the registers and their rings
    48 KB of shared memory (dw_slide_fits in conv_depthwise.cuh); the tensor-core kernels
    (conv_depthwise_mma.cuh) channels in 16-byte vectors (a short last block), their
    bwd_weight only with TMA (it declines the problem with the option tma off)."""
    if kernel.knobs.algorithm == "depthwise_mma":
        no_tma = kernel.direction is Direction.BWD_WEIGHT and not td.options()["tma"]
        return channels % 8 == 0 and not no_tma
    if not is_sliding(kernel):
        return True
    _, tw, vc = kernel.tile
    kh, kw = fil
    rw = tw + kw - 1
    if kernel.direction is Direction.BWD_WEIGHT:
        values, smem = vc * kh * kw + vc * kh * rw, 4 * 4 * (rw + tw) * 64 * vc + 3 * kh * kw * vc * 32 * 4
    else:
        values, smem = vc * kh * tw + vc * kh * kw + vc * rw, 4 * 4 * rw * 64 * vc
    return values <= 140 and smem <= 48 * 1024


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm in ("depthwise", "depthwise_mma")],
                         ids=lambda k: k.name)
def test_depthwise_kernels_on_many_shapes_and_filters(kernel, gen):
    for channels in (144, 384, 40, 96):  # 40: part of a sliding kernel's warp of 32 channel vectors idle
        for N, inp, fil, pad in DW_CASES[kernel.ndim]:
            one = tuple(1 for _ in inp)
            ran = run_case(kernel, gen, N, channels, 1, 1, inp, fil, one, pad, one)
            assert ran == dw_takes(kernel, fil, channels), (kernel.name, channels, inp, fil)
    one = tuple(1 for _ in range(kernel.ndim))
    d = td.Dispatcher("conv", GPU)
    inp, fil = DW_CASES[kernel.ndim][0][1:3]
    for why, G, st, f in (("stride 2", 16, tuple(2 for _ in one), fil), ("2 channels per thread short", 14, one, fil),
                          ("a 2x2 / 2-wide filter", 16, one, tuple(2 for _ in one)),
                          ("channels not a multiple of 8 (sliding)", 12, one, fil)):
        if why.startswith("2 channels") and kernel.tile[2] <= 2:
            continue
        if why.startswith("channels not") and not is_sliding(kernel):
            continue
        p = td.ConvProblem(2, G, 1, 1, inp, f, st, one, one, kernel.direction, kernel.dtype)
        assert d.is_supported(p, kernel=kernel.name) is False, why


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm == "depthwise_mma" and
                                    k.direction is Direction.BWD_WEIGHT], ids=lambda k: k.name)
def test_depthwise_mma_bwd_weight_walks_several_strips_a_block(kernel, gen):
    """2048 channels are 64 blocks of 32: the SMs' block slots allow each channel block only a
    few bands (132 SMs x 3 blocks / 64 = 6), so a block walks 2-3 images' strips one after
    the other, its rings running on from one strip into the next (the many-shapes test has
    one strip a block)."""
    if not td.options()["tma"]:
        pytest.skip("the tensor-core depthwise bwd_weight moves its tiles by TMA only (the option tma is off)")
    assert run_case(kernel, gen, 16, 2048, 1, 1, (14, 14), (7, 7), (1, 1), (3, 3), (1, 1))
    assert run_case(kernel, gen, 9, 2048, 1, 1, (10, 13), (5, 5), (1, 1), (2, 2), (1, 1))


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm == "toeplitz_mma"], ids=lambda k: k.name)
def test_toeplitz_grouped_kernels_on_many_shapes_and_filters(kernel, gen):
    """The grouped Toeplitz kernels on the depthwise shapes (ragged edges, every filter size,
    padding wider than the filter, several row and column tiles): ResNeXt-50's 128 channels,
    a short last channel block (40, 24), and the refusals (stride 2, channels not in 16-byte
    vectors, other channel counts per group)."""
    cpg = kernel.knobs.channels_per_group
    for channels in (128, 40, 24):
        for N, inp, fil, pad in DW_CASES[2]:
            assert run_case(kernel, gen, N, channels // cpg, cpg, cpg, inp, fil, (1, 1), pad, (1, 1)), \
                (kernel.name, channels, inp, fil)
    d = td.Dispatcher("conv", GPU)
    inp, fil = DW_CASES[2][0][1:3]
    for why, G, C, st in (("stride 2", 16, cpg, (2, 2)), ("G x C not a multiple of 8", 3, cpg, (1, 1)),
                          ("another channel count per group", 16, 2 * cpg, (1, 1))):
        p = td.ConvProblem(2, G, C, C, inp, fil, st, (1, 1), (1, 1), kernel.direction, kernel.dtype)
        assert d.is_supported(p, kernel=kernel.name) is False, why


@pytest.mark.parametrize("kernel", kernels(), ids=lambda k: k.name)
def test_every_gpu_conv_kernel_matches_float64(kernel, gen):
    if kernel.knobs.algorithm == "depthwise_mma" and kernel.direction is Direction.BWD_WEIGHT and \
            not td.options()["tma"]:
        pytest.skip("the tensor-core depthwise bwd_weight moves its tiles by TMA only (the option tma is off)")
    G, C, K = geometry(kernel)
    if kernel.knobs.algorithm == "pointwise":  # 1x1 filters only
        one = tuple(1 for _ in range(kernel.ndim))
        for inp, st in PW_CASES[kernel.ndim]:
            assert run_case(kernel, gen, 3, G, C, K, inp, one, st, tuple(0 for _ in one), one), (kernel.name, inp, st)
        return
    N = 5 if split_of(kernel) > 1 else 3  # a batch split needs an image per slice
    ran = [run_case(kernel, gen, N, G, C, K, inp, fil, st, pad, dil) for inp, fil, st, pad, dil in CASES[kernel.ndim]]
    assert ran[0], f"{kernel.name} refused the plain stride-1 case"
    if kernel.knobs.algorithm == "im2col":  # the pointwise path (no im2col buffer) too
        one = tuple(1 for _ in range(kernel.ndim))
        assert run_case(kernel, gen, 2, G, C, K, CASES[kernel.ndim][0][0], one, one, tuple(0 for _ in one), one)


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm == "im2col" and k.knobs.pad],
                         ids=lambda k: k.name)
def test_im2col_channels_not_multiples_of_8_match_float64(kernel, gen):
    """im2col with misaligned: pad (bench/sweeps/sm90_conv_dense_small.yaml): channel counts
    that are not multiples of 8 run channel-padded: a 3-channel stem,
    squeeze-excite counts (20 -> 30), C aligned with K not and the reverse; through the
    im2col buffer, the in-place 1x1 path and a strided case."""
    one = tuple(1 for _ in range(kernel.ndim))
    zero = tuple(0 for _ in one)
    inp, fil, st, pad, dil = CASES[kernel.ndim][0]
    for C, K in ((3, 16), (20, 30), (16, 12), (12, 16)):
        assert run_case(kernel, gen, 2, 1, C, K, inp, fil, st, pad, dil), (kernel.name, C, K)
        assert run_case(kernel, gen, 3, 1, C, K, inp, one, one, zero, one), (kernel.name, C, K, "1x1")
    if kernel.direction is not Direction.BWD_DATA:  # bwd_data through the GEMM: stride 1 only
        assert run_case(kernel, gen, 2, 1, 3, 24, *CASES[kernel.ndim][1]), (kernel.name, "strided stem")


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.knobs.algorithm == "pointwise"], ids=lambda k: k.name)
def test_pointwise_channel_counts_match_float64(kernel, gen):
    """The CUDA-core 1x1 kernels: channel counts not multiples of 8, more than 64 read (chunks
    of 64) and more written than the kernel's block (fwd, bwd_data), strides, and single-pixel
    squeeze-excite layers; bwd_weight refuses more than 64 channels a side."""
    one = tuple(1 for _ in range(kernel.ndim))
    zero = tuple(0 for _ in one)
    wgrad = kernel.direction is Direction.BWD_WEIGHT
    counts = [(3, 16), (16, 24), (20, 30), (64, 3)] + ([(64, 64)] if wgrad else [(72, 20), (130, 72), (20, 200)])
    for C, K in counts:
        for inp, st in PW_CASES[kernel.ndim]:
            assert run_case(kernel, gen, 3, 1, C, K, inp, one, st, zero, one), (kernel.name, C, K, inp, st)
    assert run_case(kernel, gen, 32, 1, 40, 10 if wgrad else 96, one, one, one, zero, one), "one pixel"
    if wgrad:
        p = td.ConvProblem(2, 1, 65, 8, (5,) * kernel.ndim, one, 1, 0, 1, "bwd_weight", kernel.dtype)
        assert td.Dispatcher("conv", GPU).is_supported(p, kernel=kernel.name) is False


def test_thin_pointwise_layers_take_the_pointwise_kernels(ours_alone):
    """1x1 layers with few channels at a large image (memory-bound) and squeeze-excite layers on
    one pixel go to the CUDA-core kernels; a wide 1x1 (256 -> 256 at 56 x 56) does not."""
    if not built("pw"):
        pytest.skip("no pointwise variant in this build (bench/sweeps/sm90_conv_dense_small.yaml)")
    d = td.Dispatcher("conv", GPU)
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        p = td.ConvProblem(32, 1, 16, 24, (112, 112), (1, 1), 1, 0, 1, direction, "bf16")
        assert "_pw_" in d.select(p), (direction, d.select(p))
    for direction in ("fwd", "bwd_data"):
        p = td.ConvProblem(32, 1, 240, 10, (1, 1), (1, 1), 1, 0, 1, direction, "bf16")
        assert "_pw_" in d.select(p), (direction, d.select(p))
    p = td.ConvProblem(32, 1, 256, 256, (56, 56), (1, 1), 1, 0, 1, "fwd", "bf16")
    assert "_pw_" not in d.select(p), d.select(p)


def test_dense_layers_with_odd_channel_counts_leave_the_generic_kernel(ours_alone):
    """With the channel-padded im2col variants built: a 3-channel stem goes to the GEMM path; a
    squeeze-excite 1x1 with 20 -> 72 channels on one pixel to the GEMM path or the pointwise
    kernels: none of them to the generic direct kernel."""
    if not built("pad"):
        pytest.skip("no im2col variant with misaligned: pad in this build (bench/sweeps/sm90_conv_dense_small.yaml)")
    d = td.Dispatcher("conv", GPU)
    for direction in ("fwd", "bwd_weight"):
        p = td.ConvProblem(8, 1, 3, 32, (64, 64), (3, 3), 2, 1, 1, direction, "bf16")
        assert "_im2col_" in d.select(p), d.select(p)
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        p = td.ConvProblem(32, 1, 20, 72, (1, 1), (1, 1), 1, 0, 1, direction, "bf16")
        assert "_im2col_" in d.select(p) or "_pw_" in d.select(p), d.select(p)


def split_of(kernel) -> int:
    return getattr(kernel.knobs, "split", 1)


@pytest.mark.parametrize("kernel", [k for k in kernels() if split_of(k) > 1], ids=lambda k: k.name)
def test_batch_split_bwd_weight_matches_float64(kernel, gen):
    """bwd_weight over batch slices (concurrent CUTLASS wgrads with fp32 partials, one
    reduce), the slice count chosen at run time or forced by split_k: one slice (still
    through the fp32 partial and the reduce), every count up to the kernel's maximum on
    uneven and even slices, a longer batch; split_k above the maximum or above the batch
    refused."""
    split = split_of(kernel)
    for N in (1, split, split + 3, 4 * split + 1):
        for inp, fil, st, pad, dil in CASES[kernel.ndim]:
            assert run_case(kernel, gen, N, 1, 16, 24, inp, fil, st, pad, dil), (kernel.name, N, inp)
    inp, fil, st, pad, dil = CASES[kernel.ndim][0]
    for s in range(1, split + 1):
        for N in (s, s + 2):
            assert run_case(kernel, gen, N, 1, 16, 24, inp, fil, st, pad, dil, split_k=s), (kernel.name, N, s)
    d = td.Dispatcher("conv", GPU)
    for N, s in ((split + 3, split + 1), (2, 3)):
        p = td.ConvProblem(N, 1, 16, 24, inp, fil, st, pad, dil, "bwd_weight", kernel.dtype, s)
        assert d.is_supported(p, kernel=kernel.name) is False, (N, s)


@pytest.fixture
def ours_alone():
    """Selection among our own families (the vendor families left out: td.set_options)."""
    previous = td.set_options(vendor=False)
    yield
    td.set_options(**previous)


def built(token):
    return any(f"_{token}_" in k.name for k in kernels())


def test_dispatcher_picks_the_specialised_kernel_and_it_is_correct(gen, ours_alone):
    d = td.Dispatcher("conv", GPU)
    for C, direction, kind in ((1, "fwd", "dw"), (1, "bwd_weight", "dw"), (4, "bwd_data", "tiledmma_cpg4"),
                               (8, "bwd_weight", "tiledmma_cpg8"), (16, "fwd", "tiledmma_cpg16"),
                               (16, "bwd_data", "tiledmma_cpg16"), (2, "bwd_weight", "direct_cpg2"),
                               (32, "fwd", "gmma" if built("gmma") else "mma_cpg32")):
        p = td.ConvProblem(2, 32, C, C, (14, 14), (3, 3), 1, 1, 1, direction, "bf16")
        assert d.select(p).endswith(f"_{kind}_sm90a"), d.select(p)
    for fil, tile in (((3, 3), "3x4x4"), ((7, 7), "4x4x4")):  # rows per thread by filter height
        p = td.ConvProblem(2, 32, 1, 1, (7, 7), fil, 1, 1, 1, "bwd_data", "bf16")
        assert d.select(p) == f"conv_bwddata_nhwgc_bf16_{tile}_dw_sm90a", d.select(p)
    # from 5x5 up on images that fill its tiles: the tensor-core depthwise kernel, 16 x 16
    # for 14 x 14, 16 x 32 for 28 x 28 and where 32 columns pad no more than 16; 3x3 stays on
    # the CUDA cores
    for size, fil, pick in (((14, 14), (7, 7), "16x16x16_dwmma"), ((28, 28), (7, 7), "16x32x16_dwmma"),
                            ((28, 28), (5, 5), "16x32x16_dwmma"), ((40, 28), (7, 7), "16x32x16_dwmma"),
                            ((28, 28), (3, 3), "3x4x4_dw")):
        for direction in ("fwd", "bwd_data"):
            p = td.ConvProblem(2, 64, 1, 1, size, fil, 1, fil[0] // 2, 1, direction, "bf16")
            name = d.select(p)
            assert name == f"conv_{direction.replace('_', '')}_nhwgc_bf16_{pick}_sm90a", name
            assert run_case(next(k for k in kernels() if k.name == name), gen, 2, 64, 1, 1, size, fil,
                            (1, 1), (fil[0] // 2,) * 2, (1, 1))
    # bwd_weight: the sliding kernel at 3x3 (8 columns x 2 channels); the row kernel where the
    # channels are not a multiple of 8 (16-byte pieces); from 5x5 up the tensor-core kernel
    # (rows through TMA rings, Hankel MMAs), the tile with the fewest padded columns (32
    # columns where 16 pad no fewer)
    for G, size, fil, tile in ((32, (28, 28), (3, 3), "8x8x2_dw"), (12, (28, 28), (3, 3), "1x8x4_dw"),
                               (32, (28, 28), (5, 5), "4x32x32_dwmma"), (32, (28, 28), (7, 7), "4x32x32_dwmma"),
                               (32, (14, 14), (7, 7), "8x16x32_dwmma"), (40, (9, 70), (7, 7), "8x16x32_dwmma"),
                               (40, (9, 60), (5, 5), "4x32x32_dwmma")):
        p = td.ConvProblem(2, G, 1, 1, size, fil, 1, fil[0] // 2, 1, "bwd_weight", "bf16")
        assert d.select(p) == f"conv_bwdweight_nhwgc_bf16_{tile}_sm90a", d.select(p)
        if tile.endswith("dwmma"):
            assert run_case(next(k for k in kernels() if k.name == d.select(p)), gen, 2, G, 1, 1, size, fil,
                            (1, 1), (fil[0] // 2,) * 2, (1, 1))
    p = td.ConvProblem(2, 32, 1, 1, (14, 14), (3, 3), 2, 1, 1, "fwd", "bf16")  # stride 2: the direct kernel
    assert d.select(p).endswith("_direct_cpg1_sm90a"), d.select(p)
    p = td.ConvProblem(2, 4, 3, 6, (14, 14), (3, 3), 1, 1, 1, "fwd", "bf16")
    assert d.select(p).endswith("_direct_anycpg_sm90a")


def test_misaligned_tensors_go_to_the_generic_kernel(gen):
    """A named vectorised kernel rejects a misaligned tensor with -3; the dispatcher's
    own choice runs it on the generic kernel, correctly."""
    N, G, C = 2, 16, 1
    base = torch.empty(N * 12 * 12 * G + 1, device="cuda", dtype=torch.bfloat16)
    x = base[1:].view(N, 12, 12, G)
    x.copy_(quantized((N, 12, 12, G), DType.BF16, gen))
    w = quantized((G, 3, 3, 1), DType.BF16, gen)
    name = "conv_fwd_nhwgc_bf16_4x8x128_direct_cpg1_sm90a"
    with pytest.raises(KernelRejectedError) as info:
        td.conv(x, w, padding=1, groups=G, kernel=name)
    assert info.value.status == -3 and "16-byte aligned" in str(info.value)
    y = td.conv(x, w, padding=1, groups=G)
    ref = F.conv2d(to_torch_layout(x).double(), w.permute(0, 3, 1, 2).double(), None, 1, 1, 1, G)
    assert torch.allclose(y.double(), from_torch_layout(ref), rtol=2e-2, atol=2e-2)


def test_td_conv_on_torch_channels_last_tensors_without_copy(gen):
    """torch channels_last (N, C, H, W) permuted to (N, H, W, C) is the layout: no copy,
    the result lands in the given tensor on the current stream."""
    x_nchw = quantized((4, 64, 20, 20), DType.BF16, gen).contiguous(memory_format=torch.channels_last)
    w_kcyx = quantized((64, 1, 5, 5), DType.BF16, gen).contiguous(memory_format=torch.channels_last)
    x, w = x_nchw.permute(0, 2, 3, 1), w_kcyx.permute(0, 2, 3, 1)
    assert x.is_contiguous() and w.is_contiguous()
    out_nchw = torch.empty((4, 64, 20, 20), device="cuda", dtype=torch.bfloat16,
                           memory_format=torch.channels_last)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        res = td.conv(x, w, padding=2, groups=64, out=out_nchw.permute(0, 2, 3, 1))
    stream.synchronize()
    assert res.data_ptr() == out_nchw.data_ptr()
    ref = F.conv2d(x_nchw.double(), w_kcyx.double(), None, 1, 2, 1, 64)
    assert torch.allclose(out_nchw.double(), ref, rtol=2e-2, atol=2e-2)


def test_td_conv_on_numpy_takes_the_host_path():
    import ml_dtypes
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 9, 9, 24)).astype(ml_dtypes.bfloat16)
    w = rng.uniform(-1, 1, (24, 3, 3, 1)).astype(ml_dtypes.bfloat16)
    y = td.conv(x, w, padding=1, groups=24, target=GPU)
    ref = F.conv2d(torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2).cuda(),
                   torch.from_numpy(w.astype(np.float64)).permute(0, 3, 1, 2).cuda(), None, 1, 1, 1, 24)
    assert isinstance(y, np.ndarray) and y.dtype == ml_dtypes.bfloat16
    assert np.allclose(y.astype(np.float64), from_torch_layout(ref).cpu().numpy(), rtol=2e-2, atol=2e-2)


def test_dense_problems_go_to_the_gemm_path_and_grouped_ones_do_not(ours_alone):
    d = td.Dispatcher("conv", GPU)
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        p = td.ConvProblem(2, 1, 64, 128, (14, 14), (3, 3), 1, 1, 1, direction, "bf16")
        assert "_im2col_" in d.select(p) or "_implicit_" in d.select(p), d.select(p)
    p = td.ConvProblem(2, 1, 64, 128, (14, 14), (3, 3), 2, 1, 1, "bwd_data", "bf16")  # stride 2: not the GEMM path
    assert ("_gmma_" if built("gmma") else "_anycpg_") in d.select(p)


def test_dense_bwd_weight_picks_by_fill_and_splits_the_batch_where_few_tiles(gen, ours_alone):
    """The one-wave model (conv_abi.cpp) on the two bench problems: 1x1 512->2048 fills the
    SMs with 64x128 tiles unsplit; 3x3 256->256 has 36 tiles of 128x128 and takes the
    batch-split variant (3 slices on 132 SMs), whose result matches float64."""
    d = td.Dispatcher("conv", GPU)
    p = td.ConvProblem(32, 1, 512, 2048, (14, 14), (1, 1), 1, 0, 1, "bwd_weight", "bf16")
    assert d.select(p) == "conv_bwdweight_nhwgc_bf16_64x128x64_implicit_c1x1_sm90a", d.select(p)
    p = td.ConvProblem(32, 1, 256, 256, (28, 28), (3, 3), 1, 1, 1, "bwd_weight", "bf16")
    name = d.select(p)
    assert name == "conv_bwdweight_nhwgc_bf16_128x128x64_implicit_c1x1_s4_sm90a", name
    kernel = next(k for k in kernels() if k.name == name)
    assert run_case(kernel, gen, 32, 1, 256, 256, (28, 28), (3, 3), (1, 1), (1, 1), (1, 1))


def test_fp32_conv_on_the_gpu_is_minus_2():
    d = td.Dispatcher("conv", GPU)
    p = td.ConvProblem(1, 8, 1, 1, (8, 8), (3, 3), 1, 1, 1, "fwd", "fp32")
    assert not d.is_supported(p)
