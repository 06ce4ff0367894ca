"""The installed package: every registered kernel against a numpy reference, status codes,
the legacy ABI, the Python API and thread safety."""
import ctypes
import json
import threading

import ml_dtypes
import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch.arrays import numpy_dtype, random
from tiledispatch.codegen import Direction, DType, GemmVariant

GEMM = td.Dispatcher("gemm", "cpu")
CONV = td.Dispatcher("conv", "cpu")
POISON = np.nan


def gemm_operands(problem, rng, pad=(0, 0, 0)):
    """Random A, B in the problem's layout, stored with extra leading-dimension padding."""
    M, N, K, lay, dt = problem.M, problem.N, problem.K, problem.layout, problem.dtype
    a = random((M, K), dt, rng)
    b = random((K, N), dt, rng)

    def store(matrix, row_major, extra):
        rows, cols = matrix.shape
        if row_major:
            buf = random((rows, cols + extra), dt, rng)
            buf[:, :cols] = matrix
            return buf, cols + extra
        buf = random((cols, rows + extra), dt, rng)
        buf[:, :rows] = matrix.T
        return buf, rows + extra

    a_buf, lda = store(a, lay.a_row, pad[0])
    b_buf, ldb = store(b, lay.b_row, pad[1])
    ldc = N + pad[2]
    c_buf = np.full((M, ldc), POISON, dtype=numpy_dtype(dt.out))
    return a, b, a_buf, b_buf, c_buf, (lda, ldb, ldc)


def check_gemm(kernel, M, N, K, rng, pad=(0, 0, 0), splits=0):
    problem = td.GemmProblem(M, N, K, kernel.dtype, kernel.layout, splits=splits)
    a, b, a_buf, b_buf, c_buf, (lda, ldb, ldc) = gemm_operands(problem, rng, pad)
    problem = td.GemmProblem(M, N, K, kernel.dtype, kernel.layout, lda, ldb, ldc, splits=splits)
    GEMM.run(problem, a_buf, b_buf, c_buf, kernel=kernel.name)
    ref, mag = reference.gemm(a, b)
    cmp = reference.compare(c_buf[:, :N], ref, mag, kernel.dtype, K)
    assert cmp["ok"], f"{kernel.name} {M}x{N}x{K} pad={pad}: {cmp}"
    if pad[2]:
        assert np.isnan(c_buf[:, N:].astype(np.float32)).all(), "wrote outside C's columns"
    return c_buf[:, :N]


@pytest.mark.parametrize("kernel", GEMM.kernels, ids=lambda k: k.name)
def test_every_gemm_kernel_matches_numpy(kernel, rng):
    tm, tn, tk = kernel.tile
    # sizes off the tile in every dimension, and an exact multiple
    check_gemm(kernel, tm + 5, 2 * tn - 3, tk + 7, rng)
    check_gemm(kernel, 1, 1, 1, rng)
    check_gemm(kernel, 2 * tm, tn, 2 * tk, rng)
    # leading dimensions larger than the matrices (odd strides)
    check_gemm(kernel, 37, 29, 45, rng, pad=(3, 5, 7))


STREAMK = [k for k in GEMM.kernels if k.variant is GemmVariant.STREAM_K]


@pytest.mark.parametrize("kernel", STREAMK, ids=lambda k: k.name)
@pytest.mark.parametrize("splits", [1, 2, 3, 5, 7, 64])
def test_stream_k_fixup_with_uneven_splits(kernel, splits, rng):
    tm, tn, tk = kernel.tile
    # 2 x 2 tiles, 5 K iterations each: 20 iterations split over `splits` workers leaves
    # tiles cut in the middle for most counts.
    check_gemm(kernel, 2 * tm - 1, 2 * tn - 2, 5 * tk - 3, rng, splits=splits)


@pytest.mark.parametrize("kernel", [k for k in STREAMK if k.reduction.key == "deterministic"],
                         ids=lambda k: k.name)
def test_deterministic_stream_k_is_bitwise_repeatable(kernel, rng):
    tm, tn, tk = kernel.tile
    problem = td.GemmProblem(tm + 3, tn + 1, 6 * tk, kernel.dtype, kernel.layout, splits=5)
    a, b, a_buf, b_buf, _, _ = gemm_operands(problem, rng)
    outs = []
    for _ in range(4):
        c = np.full((problem.M, problem.N), POISON, dtype=numpy_dtype(kernel.dtype.out))
        GEMM.run(problem, a_buf, b_buf, c, kernel=kernel.name)
        outs.append(c.view(np.uint8).copy())
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_stream_k_workspace_is_sized_by_the_kernel_and_checked(rng):
    kernel = next(k for k in STREAMK if k.reduction.key == "deterministic" and k.dtype is DType.FP32)
    tm, tn, tk = kernel.tile
    problem = td.GemmProblem(tm, tn, 4 * tk, DType.FP32, kernel.layout, splits=3)
    need = GEMM.workspace_size(problem, kernel.name)
    assert need == 3 * 2 * tm * tn * 4  # two partial tiles per worker
    a, b, a_buf, b_buf, c, _ = gemm_operands(problem, rng)
    with pytest.raises(td.KernelRejectedError) as info:
        GEMM.run(problem, a_buf, b_buf, c, kernel=kernel.name, workspace=np.zeros(need // 8, np.uint8))
    assert info.value.status == -3
    GEMM.run(problem, a_buf, b_buf, c, kernel=kernel.name, workspace=np.zeros(need, np.uint8))
    ref, mag = reference.gemm(a, b)
    assert reference.compare(c, ref, mag, DType.FP32, problem.K)["ok"]
    standard = next(k for k in GEMM.kernels if k.variant is GemmVariant.STANDARD)
    assert GEMM.workspace_size(td.GemmProblem(64, 64, 64, standard.dtype, standard.layout), standard.name) == 0


def conv_case(kernel, rng, N, G, C, K, size, fil, stride, pad, dil):
    nd = kernel.ndim
    problem = td.ConvProblem(N, G, C, K, size[-nd:], fil[-nd:], stride[-nd:], pad[-nd:], dil[-nd:],
                             kernel.direction, kernel.dtype)
    x = random(problem.input_shape, kernel.dtype, rng)
    w = random(problem.weight_shape, kernel.dtype, rng)
    dy = random(problem.output_shape, kernel.dtype, rng)
    out_dt = numpy_dtype(kernel.dtype.out)
    if kernel.direction is Direction.FWD:
        result = np.full(problem.output_shape, POISON, out_dt)
        CONV.run(problem, x, w, result, kernel=kernel.name)
        ref, mag = reference.conv(problem, x=x, w=w)
    elif kernel.direction is Direction.BWD_DATA:
        result = np.full(problem.input_shape, POISON, out_dt)
        CONV.run(problem, result, w, dy, kernel=kernel.name)
        ref, mag = reference.conv(problem, dy=dy, w=w)
    else:
        result = np.full(problem.weight_shape, POISON, out_dt)
        CONV.run(problem, x, result, dy, kernel=kernel.name)
        ref, mag = reference.conv(problem, x=x, dy=dy)
    cmp = reference.compare(result, ref, mag, kernel.dtype, problem.reduction_length)
    assert cmp["ok"], f"{kernel.name} {problem}: {cmp}"


@pytest.mark.parametrize("kernel", CONV.kernels, ids=lambda k: k.name)
def test_every_conv_kernel_matches_numpy(kernel, rng):
    # odd sizes, asymmetric spatial sizes, stride 2, dilation 2, padding, several groups
    conv_case(kernel, rng, 2, 3, 5, 7, (5, 9, 11), (3, 3, 2), (1, 2, 1), (1, 1, 0), (1, 1, 2))
    conv_case(kernel, rng, 1, 2, 3, 4, (4, 7, 6), (2, 3, 3), (2, 2, 2), (0, 1, 1), (1, 2, 1))
    # depthwise, more channels than a tile, no padding
    conv_case(kernel, rng, 2, 8, 1, 1, (3, 6, 7), (1, 3, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1))
    conv_case(kernel, rng, 1, 1, 70, 66, (2, 3, 3), (1, 2, 2), (1, 1, 1), (0, 1, 0), (1, 1, 1))


# ---- status codes -------------------------------------------------------------------------

def test_unsupported_problem_is_minus_2():
    problem = td.ConvProblem(1, 1, 4, 4, (8, 8), (3, 3), dtype="fp8_e4m3")  # no fp8 conv built
    assert CONV.is_supported(problem) is False
    with pytest.raises(td.UnsupportedProblemError) as info:
        CONV.select(problem)
    assert info.value.status == -2
    assert "no conv kernel for target cpu supports this problem" in info.value.message
    with pytest.raises(td.UnsupportedProblemError) as info:
        GEMM.run(td.GemmProblem(4, 4, 4), 0, 0, 0, kernel="gemm_nonexistent")
    assert info.value.status == -2
    assert "no kernel named gemm_nonexistent" in info.value.message


def test_named_kernel_that_rejects_the_problem_is_minus_3(rng):
    fp32 = next(k for k in GEMM.kernels if k.dtype is DType.FP32)
    problem = td.GemmProblem(8, 8, 8, DType.BF16, fp32.layout)
    a = random((8, 8), DType.BF16, rng)
    c = np.zeros((8, 8), ml_dtypes.bfloat16)
    with pytest.raises(td.KernelRejectedError) as info:
        GEMM.run(problem, a, a, c, kernel=fp32.name)
    assert info.value.status == -3
    assert "dtype differs" in info.value.message
    assert GEMM.is_supported(problem, fp32.name) is False


@pytest.mark.parametrize("M, N, K", [(0, 4, 4), (4, -1, 4), (4, 4, 0), (-5, -5, -5)])
def test_zero_or_negative_sizes_are_minus_1(M, N, K):
    with pytest.raises(td.InvalidArgumentError) as info:
        GEMM.select(td.GemmProblem(M, N, K))
    assert info.value.status == -1
    assert "M, N and K must be positive" in info.value.message
    lib = GEMM.lib
    assert lib.dispatcher_is_supported(M, N, K) == -1
    assert lib.dispatcher_run_gemm(None, None, None, M, N, K, None) == -1


def test_null_pointers_are_minus_1():
    problem = td.GemmProblem(4, 4, 4)
    with pytest.raises(td.InvalidArgumentError) as info:
        GEMM.run(problem, 0, 0, 0)
    assert "must not be NULL" in info.value.message
    lib = GEMM.lib
    assert lib.td_gemm_select(None, ctypes.create_string_buffer(64), 64) == -1
    assert "problem pointer is NULL" in lib.last_error()
    a = np.ones((4, 4), np.float32)
    assert lib.dispatcher_run_gemm(a.ctypes.data, None, a.ctypes.data, 4, 4, 4, None) == -1
    conv = CONV.lib
    assert conv.conv_dispatcher_run(None, None, None, None, None) == -1
    p = td.ConvProblem(1, 1, 2, 2, (4, 4), (3, 3)).to_c()
    assert conv.td_conv_run(ctypes.byref(p), None, None, None, None, None, 0, None, None) == -1


def test_bad_leading_dimension_and_codes_are_minus_1():
    with pytest.raises(td.InvalidArgumentError, match="lda 3 is below 8"):
        GEMM.select(td.GemmProblem(4, 4, 8, lda=3))
    raw = td.GemmProblem(4, 4, 4).to_c()
    raw.dtype = 99
    assert GEMM.lib.td_gemm_is_supported(ctypes.byref(raw), None) == -1
    assert "unknown dtype code 99" in GEMM.lib.last_error()


@pytest.mark.parametrize("field, value, message", [
    ("stride_h", 0, "stride and dilation must be positive"),
    ("pad_w", -1, "padding must not be negative"),
    ("input_w", 2, "the filter is larger than the padded input"),
    ("C", 0, "N, G, C and K must be positive"),
    ("direction", 7, "unknown direction code 7"),
])
def test_malformed_conv_problems_are_minus_1(field, value, message):
    p = td.ConvProblem(1, 2, 3, 4, (8, 8), (3, 3)).to_c()
    setattr(p.base, field, value)
    assert CONV.lib.td_conv_is_supported(ctypes.byref(p), None) == -1
    assert message in CONV.lib.last_error()


def test_array_too_small_for_the_problem_is_refused_before_the_call():
    with pytest.raises(td.InvalidArgumentError, match="A spans 16 elements, the problem needs 32"):
        GEMM.run(td.GemmProblem(4, 4, 8), np.zeros(16, np.float32), np.zeros(32, np.float32),
                 np.zeros(16, np.float32))


# ---- the reference system's ABI -------------------------------------------------------------

def test_legacy_gemm_abi(rng):
    lib = GEMM.lib
    assert lib.dispatcher_init() == 0
    assert lib.dispatcher_get_kernel_count() == len(GEMM.kernels)
    assert lib.dispatcher_is_supported(100, 200, 300) == 1
    buf = ctypes.create_string_buffer(256)
    assert lib.dispatcher_select_kernel(100, 200, 300, buf, 256) == 0
    name = buf.value.decode()
    assert name == GEMM.select(td.GemmProblem(100, 200, 300))
    assert name.startswith("gemm_fp32_rcr_")
    assert lib.dispatcher_select_kernel(100, 200, 300, ctypes.create_string_buffer(4), 4) == -1
    assert "name buffer holds 4 bytes" in lib.last_error()
    a = random((100, 300), DType.FP32, rng)
    b = random((300, 200), DType.FP32, rng)
    b_col = np.ascontiguousarray(b.T)  # rcr: B column-major
    c = np.full((100, 200), np.nan, np.float32)
    t = ctypes.c_float(-1)
    assert lib.dispatcher_run_gemm(a.ctypes.data, b_col.ctypes.data, c.ctypes.data, 100, 200, 300, ctypes.byref(t)) == 0
    assert t.value > 0
    ref, mag = reference.gemm(a, b)
    assert reference.compare(c, ref, mag, DType.FP32, 300)["ok"]
    exported = json.loads(lib.dispatcher_export_registry_json().decode())
    assert [k["name"] for k in exported["kernels"]] == [k.name for k in GEMM.kernels]
    lib.dispatcher_cleanup()
    assert lib.dispatcher_is_supported(8, 8, 8) == 1  # usable after cleanup


def test_legacy_conv_abi(rng):
    lib = CONV.lib
    assert lib.conv_dispatcher_init() == 0
    assert lib.conv_dispatcher_get_kernel_count() == len(CONV.kernels)
    problem = td.ConvProblem(2, 4, 3, 5, (9, 8), (3, 3), 1, 1, 1)
    legacy = problem.to_c().base
    assert lib.conv_dispatcher_is_supported(ctypes.byref(legacy)) == 1
    buf = ctypes.create_string_buffer(256)
    assert lib.conv_dispatcher_select_kernel(ctypes.byref(legacy), buf, 256) == 0
    assert buf.value.decode() == "conv_fwd_nhwgc_fp32_64x64x64_r4x16_cpu"
    x = random(problem.input_shape, DType.FP32, rng)
    w = random(problem.weight_shape, DType.FP32, rng)
    y = np.full(problem.output_shape, np.nan, np.float32)
    assert lib.conv_dispatcher_run(x.ctypes.data, w.ctypes.data, y.ctypes.data, ctypes.byref(legacy), None) == 0
    ref, mag = reference.conv(problem, x=x, w=w)
    assert reference.compare(y, ref, mag, DType.FP32, problem.reduction_length)["ok"]
    legacy.N = -1
    assert lib.conv_dispatcher_is_supported(ctypes.byref(legacy)) == -1


def test_td_gemm_launch_repeats_and_changes_problems(rng):
    """td_gemm_launch (the fast path's call): a repeated problem reuses this thread's last
    ranked list, so repeats, a changed size on the same buffers, NULL pointers, a bad problem
    and an unknown kernel name are each answered on their own."""
    from tiledispatch import _ffi
    lib = GEMM.lib
    a = random((96, 160), DType.FP32, rng)
    b_col = np.ascontiguousarray(random((160, 64), DType.FP32, rng).T)  # rcr: B column-major
    c = np.full((96, 64), np.nan, np.float32)
    for M in (96, 96, 40, 96):  # the same A, B and C buffers; 40 uses their first rows
        problem = _ffi.TdGemmProblem(M, 64, 160, DType.FP32.code, 0, 160, 160, 64, 1.0, 0, 0, 0)
        c[:] = np.nan
        assert lib.td_gemm_launch(ctypes.addressof(problem), None, a.ctypes.data, b_col.ctypes.data,
                                  c.ctypes.data, None) == 0
        ref, mag = reference.gemm(a[:M], b_col.T)
        assert reference.compare(c[:M], ref, mag, DType.FP32, 160)["ok"]
        assert np.isnan(c[M:]).all()
    assert lib.td_gemm_launch(ctypes.addressof(problem), None, None, b_col.ctypes.data, c.ctypes.data, None) == -1
    assert "must not be NULL" in lib.last_error()
    bad = _ffi.TdGemmProblem(-1, 64, 160, DType.FP32.code, 0, 0, 0, 0, 1.0, 0, 0, 0)
    assert lib.td_gemm_launch(ctypes.addressof(bad), None, a.ctypes.data, b_col.ctypes.data, c.ctypes.data, None) == -1
    assert lib.td_gemm_launch(ctypes.addressof(problem), b"no_such_kernel", a.ctypes.data, b_col.ctypes.data,
                              c.ctypes.data, None) == -2
    assert "no kernel named no_such_kernel" in lib.last_error()


def test_library_identity_and_abi_version():
    for d in (GEMM, CONV):
        assert d.lib.td_abi_version() == td.codegen.ABI_VERSION
        assert d.lib.td_library_target() == b"cpu"
        assert d.lib.td_library_op() == d.op.encode()


def test_registry_names_round_trip_and_match_the_libraries():
    reg = td.registry()
    assert reg.targets == ["cpu"]
    for config in reg.configs:
        assert td.codegen.config_from_name(config.name) == config
    assert {k.name for k in GEMM.kernels} | {k.name for k in CONV.kernels} == {c.name for c in reg.configs}
    for d in (GEMM, CONV):
        exported = json.loads(d.export_registry_json())
        assert exported["libraries"][0]["op"] == d.op
        assert [k["name"] for k in exported["kernels"]] == [k.name for k in d.kernels]


def test_selection_is_deterministic_and_prefers_small_tiles_for_small_problems():
    small = GEMM.select(td.GemmProblem(64, 64, 64))
    assert small == "gemm_fp32_rcr_standard_48x64x128_r6x16_cpu"
    assert all(GEMM.select(td.GemmProblem(64, 64, 64)) == small for _ in range(5))
    assert GEMM.select(td.GemmProblem(2048, 2048, 2048)) == "gemm_fp32_rcr_standard_96x128x256_r6x16_cpu"


def test_unknown_target_says_what_is_built():
    with pytest.raises(td.TileDispatchError, match=r"no gemm library for target 'sm_90a' \(it has: conv/cpu, gemm/cpu\)"):
        td.Dispatcher("gemm", "sm_90a")


# ---- Python API ------------------------------------------------------------------------

FNUZ = (DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ)  # gfx942's fp8, not built for cpu


@pytest.mark.parametrize("dtype", [d for d in DType if d not in FNUZ], ids=lambda d: d.key)
def test_td_gemm_on_numpy_arrays(dtype, rng):
    a = random((70, 50), dtype, rng)
    b = random((50, 90), dtype, rng)
    c = td.gemm(a, b)
    assert c.dtype == numpy_dtype(dtype.out) and c.shape == (70, 90)
    ref, mag = reference.gemm(a, b)
    assert reference.compare(c, ref, mag, dtype, 50)["ok"]


@pytest.mark.parametrize("dtype", FNUZ, ids=lambda d: d.key)
def test_fnuz_fp8_on_cpu_is_minus_2_not_a_wrong_answer(dtype, rng):
    a = random((8, 16), dtype, rng)
    assert a.dtype == numpy_dtype(dtype)  # ml_dtypes float8_*fnuz
    with pytest.raises(td.UnsupportedProblemError) as info:
        td.gemm(a, random((16, 4), dtype, rng))
    assert info.value.status == -2


def test_td_gemm_uses_views_in_place_and_infers_layouts(rng):
    big = random((80, 64), DType.FP32, rng)
    a = big[:70, :50]                   # row-major, lda 64
    b = np.asfortranarray(random((50, 30), DType.FP32, rng))  # column-major
    out = np.full((70, 30), np.nan, np.float32)
    result = td.gemm(a, b, out=out)
    assert result is out
    ref, mag = reference.gemm(a, b)
    assert reference.compare(out, ref, mag, DType.FP32, 50)["ok"]
    at = random((50, 70), DType.FP32, rng).T  # column-major A
    c = td.gemm(at, b, layout="ccr")
    ref, mag = reference.gemm(at, b)
    assert reference.compare(c, ref, mag, DType.FP32, 50)["ok"]
    c = td.gemm(a, b, alpha=0.5)
    ref, mag = reference.gemm(a, b)
    assert reference.compare(c, 0.5 * ref, 0.5 * mag, DType.FP32, 50)["ok"]


def test_td_gemm_named_kernel_and_bad_input(rng):
    a = random((8, 8), DType.FP32, rng)
    name = "gemm_fp32_rrr_standard_48x64x128_r6x16_cpu"
    ref, mag = reference.gemm(a, a)
    assert reference.compare(td.gemm(a, a, kernel=name), ref, mag, DType.FP32, 8)["ok"]
    with pytest.raises(TypeError, match="share an element type"):
        td.gemm(a, a.astype(np.float16))
    with pytest.raises(td.InvalidArgumentError, match="inner dimensions differ"):
        td.gemm(a, a[:4])
    with pytest.raises(TypeError, match="unsupported element type float64"):
        td.gemm(a.astype(np.float64), a.astype(np.float64))


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_td_conv_all_directions(direction, ndim, rng):
    G, C, K, N = 4, 3, 2, 2
    size, fil = (7, 9, 6)[-ndim:], (3, 3, 2)[-ndim:]
    problem = td.ConvProblem(N, G, C, K, size, fil, 2, 1, 1, direction)
    x = random(problem.input_shape, DType.BF16, rng)
    w = random(problem.weight_shape, DType.BF16, rng)
    dy = random(problem.output_shape, DType.BF16, rng)
    if direction == "fwd":
        got = td.conv(x, w, stride=2, padding=1, groups=G)
        ref, mag = reference.conv(problem, x=x, w=w)
    elif direction == "bwd_data":
        got = td.conv(dy, w, stride=2, padding=1, groups=G, direction=direction, input_size=size)
        ref, mag = reference.conv(problem, dy=dy, w=w)
    else:
        got = td.conv(x, dy, stride=2, padding=1, groups=G, direction=direction, filter_size=fil)
        ref, mag = reference.conv(problem, x=x, dy=dy)
    assert got.shape == ref.shape
    assert reference.compare(got, ref, mag, DType.BF16, problem.reduction_length)["ok"]


def test_td_conv_rejects_bad_groups():
    x = np.zeros((1, 8, 8, 6), np.float32)
    w = np.zeros((4, 3, 3, 3), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="input channels 6 is not divisible by groups=4"):
        td.conv(x, w, groups=4)


def test_td_conv_rejects_a_negative_split_k():
    x = np.zeros((1, 8, 8, 4), np.float32)
    w = np.zeros((4, 3, 3, 4), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="split_k must not be negative, got -1"):
        td.conv(x, w, split_k=-1)


def test_configs_build_the_registered_names():
    config = td.GemmKernelConfig("fp32", "rcr", "standard", None, (48, 64, 128), td.CpuKnobs(6, 16), "cpu")
    assert config.name in {k.name for k in GEMM.kernels}
    conv = td.ConvKernelConfig("fwd", "NHWGC", "fp32", (64, 64, 64), td.CpuKnobs(4, 16), "cpu")
    assert conv.name in {k.name for k in CONV.kernels}


def test_dispatcher_is_safe_from_several_threads(rng):
    inputs = [(random((65, 33), DType.FP32, rng), random((33, 47), DType.FP32, rng)) for _ in range(8)]
    results, errors = [None] * 8, []

    def work(i):
        try:
            for _ in range(5):
                results[i] = td.gemm(*inputs[i])
                td.Dispatcher("gemm", "cpu").select(td.GemmProblem(i + 1, 3, 5))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (a, b), c in zip(inputs, results):
        ref, mag = reference.gemm(a, b)
        assert reference.compare(c, ref, mag, DType.FP32, 33)["ok"]
    # each thread has its own error message
    lib = GEMM.lib
    messages = {}

    def failing(i):
        lib.dispatcher_is_supported(-i - 1, 1, 1)
        messages[i] = lib.last_error()

    threads = [threading.Thread(target=failing, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(f"M={-i - 1}" in messages[i] for i in range(4))


def test_one_torch_dtype_table_for_inputs_and_outputs(monkeypatch):
    """arrays.torch_dtype (device arrays, the torch fast path's outputs, the tile engine's GPU
    operands) maps every DType torch has, through a stand-in torch module (no torch here)."""
    import sys
    import types
    from tiledispatch.api import _TorchOut
    from tiledispatch.arrays import torch_dtype
    names = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(**{n: f"torch.{n}" for n in names}))
    assert [torch_dtype(d) for d in (DType.FP32, DType.FP16, DType.BF16, DType.FP8_E4M3, DType.FP8_E5M2)] == \
        [f"torch.{n}" for n in names]
    out = _TorchOut()
    assert [out[d] for d in (DType.FP32, DType.FP16, DType.BF16, DType.FP8_E4M3)] == \
        ["torch.float32", "torch.float16", "torch.bfloat16", "torch.bfloat16"]
    with pytest.raises(KeyError):
        torch_dtype(DType.FP8_E4M3_FNUZ)  # torch has no FNUZ types: the hip target takes numpy
