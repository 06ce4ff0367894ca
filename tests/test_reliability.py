"""Wrong arguments to the Python API refused with a clean InvalidArgumentError instead of a
crash, a corrupted heap or a silently wrong answer (cpu target). What could crash the
interpreter before the checks existed runs in a subprocess."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch.codegen import DType

GEMM = td.Dispatcher("gemm", "cpu")
CONV = td.Dispatcher("conv", "cpu")

PRELUDE = """
import numpy as np
import tiledispatch as td
def attempt(fn):
    try:
        fn()
    except Exception as e:
        print("RAISED", type(e).__name__, str(e))
    else:
        print("NO ERROR")
"""


def isolated(code: str) -> str:
    """Runs code after PRELUDE in a fresh interpreter; it must exit cleanly. Its stdout."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return proc.stdout


def expect_refused(code: str, *fragments: str):
    out = isolated(code)
    assert out.startswith("RAISED InvalidArgumentError"), out
    for fragment in fragments:
        assert fragment in out, out


def x_w():
    return np.ones((1, 64, 64, 8), np.float32), np.ones((8, 3, 3, 8), np.float32)


# ---- 1. fields cut to the C struct's widths ---------------------------------------------------

def test_conv_stride_beyond_c_int_is_refused_not_a_corrupted_heap():
    expect_refused("""
        attempt(lambda: td.conv(np.ones((1, 64, 64, 8), np.float32), np.ones((8, 3, 3, 8), np.float32),
                                stride=2**32 + 2))
    """, "stride", "out of range")


@pytest.mark.parametrize("kwargs, field", [
    (dict(input_size=(2**32 + 16,), filter_size=(3,)), "input_size"),
    (dict(input_size=(8, 8), filter_size=(3, 2**31)), "filter_size"),
    (dict(input_size=(8, 8), filter_size=(3, 3), stride=0), "stride"),
    (dict(input_size=(8, 8), filter_size=(3, 3), stride=(1, -1)), "stride"),
    (dict(input_size=(8, 8), filter_size=(3, 3), dilation=0), "dilation"),
    (dict(input_size=(8, 8), filter_size=(3, 3), padding=-1), "padding"),
    (dict(input_size=(8, 8), filter_size=(3, 3), padding=2**31), "padding"),
    (dict(input_size=(0, 8), filter_size=(3, 3)), "input_size"),
    (dict(input_size=(8, 8), filter_size=(3, 3), split_k=2**32 + 5), "split_k"),
    (dict(input_size=(8, 8), filter_size=(3, 3), split_k=-1), "split_k"),
])
def test_conv_problem_fields_outside_c_int_are_refused(kwargs, field):
    with pytest.raises(td.InvalidArgumentError, match=field):
        td.ConvProblem(1, 1, 8, 8, **kwargs)


@pytest.mark.parametrize("sizes, field", [((0, 1, 8, 8), "N"), ((1, 0, 8, 8), "G"), ((1, 1, 2**31, 8), "C"),
                                          ((1, 1, 8, -8), "K")])
def test_conv_problem_sizes_must_be_positive_c_ints(sizes, field):
    with pytest.raises(td.InvalidArgumentError, match=f"^{field} "):
        td.ConvProblem(*sizes, (8, 8), (3, 3))


@pytest.mark.parametrize("kwargs, field", [
    (dict(M=2**63), "M"), (dict(N=-2**63 - 1), "N"), (dict(K=1.5), "K"), (dict(lda=2**64), "lda"), (dict(ldc=-4), "ldc"),
    (dict(splits=2**32 + 5), "splits"), (dict(raster=2**31), "raster"), (dict(swizzle=-1), "swizzle"),
])
def test_gemm_problem_fields_outside_the_c_struct_are_refused(kwargs, field):
    args = dict(M=8, N=8, K=8)
    args.update(kwargs)
    with pytest.raises(td.InvalidArgumentError, match=f"^{field} "):
        td.GemmProblem(**args)


@pytest.mark.parametrize("sizes", [(0, 4, 4), (4, -1, 4), (4, 4, 0)])
def test_gemm_problem_sizes_must_be_positive(sizes):
    with pytest.raises(td.InvalidArgumentError, match="M, N and K must be positive"):
        td.GemmProblem(*sizes)


def test_gemm_problem_takes_numpy_integers():
    p = td.GemmProblem(np.int64(8), np.int32(16), np.uint16(4), splits=np.int64(2))
    assert (p.M, p.N, p.K, p.splits) == (8, 16, 4, 2) and type(p.M) is int


# ---- 2. types --------------------------------------------------------------------------------

def test_conv_non_integral_stride_is_refused():
    x, w = x_w()
    with pytest.raises(td.InvalidArgumentError, match="stride must be an integer"):
        td.conv(x, w, stride=(1.5, 1.5))
    with pytest.raises(td.InvalidArgumentError, match="stride must be an integer"):
        td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), stride=(1.5, 1.5))


def test_conv_numpy_integer_stride_is_accepted():
    x, w = x_w()
    rng = np.random.default_rng(0)
    x = rng.random(x.shape, dtype=np.float32)
    expected = td.conv(x, w, stride=2, padding=1)
    got = td.conv(x, w, stride=np.int64(2), padding=np.int32(1), dilation=np.int64(1), groups=np.int64(1))
    np.testing.assert_array_equal(got, expected)


def test_conv_unknown_direction_is_refused():
    x, w = x_w()
    with pytest.raises(td.InvalidArgumentError, match="unknown direction None"):
        td.conv(x, w, direction=None)
    with pytest.raises(td.InvalidArgumentError, match="unknown direction"):
        td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), direction=3)


def test_conv_split_k_out_of_range_is_refused():
    x = np.ones((2, 8, 8, 8), np.float32)
    dy = np.ones((2, 6, 6, 8), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="split_k"):
        td.conv(x, dy, direction="bwd_weight", split_k=2**32 + 5)
    with pytest.raises(td.InvalidArgumentError, match="split_k must be an integer"):
        td.conv(x, dy, direction="bwd_weight", split_k=1.5)


# ---- 3. out: writeable, not aliasing an input ------------------------------------------------

def test_gemm_read_only_out_is_refused():
    expect_refused("""
        a, b = np.ones((8, 4), np.float32), np.ones((4, 16), np.float32)
        out = np.frombuffer(bytes(8 * 16 * 4), dtype=np.float32).reshape(8, 16)
        attempt(lambda: td.gemm(a, b, out=out))
        assert not out.any()
    """, "out is read-only")


def test_conv_read_only_memmap_out_is_refused(tmp_path):
    path = tmp_path / "out.bin"
    np.zeros((1, 64, 64, 8), np.float32).tofile(path)
    expect_refused(f"""
        x, w = np.ones((1, 64, 64, 8), np.float32), np.ones((8, 3, 3, 8), np.float32)
        out = np.memmap({str(path)!r}, dtype=np.float32, mode="r", shape=(1, 64, 64, 8))
        attempt(lambda: td.conv(x, w, padding=1, out=out))
    """, "out is read-only")


@pytest.mark.parametrize("direction, slot", [("fwd", 2), ("bwd_data", 0), ("bwd_weight", 1)])
def test_dispatcher_run_read_only_written_tensor_is_refused(direction, slot):
    expect_refused(f"""
        p = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), direction={direction!r})
        arrays = [np.ones(s, np.float32) for s in (p.input_shape, p.weight_shape, p.output_shape)]
        arrays[{slot}] = np.frombuffer(bytes(arrays[{slot}].nbytes), np.float32).reshape(arrays[{slot}].shape)
        attempt(lambda: td.Dispatcher("conv", "cpu").run(p, *arrays))
    """, "out is read-only")
    expect_refused("""
        p = td.GemmProblem(8, 16, 4)
        c = np.frombuffer(bytes(8 * 16 * 4), np.float32).reshape(8, 16)
        attempt(lambda: td.Dispatcher("gemm", "cpu").run(p, np.ones((8, 4), np.float32),
                                                          np.ones((16, 4), np.float32), c))
        assert not c.any()
    """, "out is read-only", "C")


def test_gemm_in_place_is_refused():
    a = np.ones((8, 8), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="in-place is not supported"):
        td.gemm(a, np.ones((8, 8), np.float32), out=a)
    buf = np.ones((8, 16), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="in-place is not supported"):
        td.gemm(np.ones((8, 8), np.float32), buf[:, :8], out=buf[:, 4:12])
    assert (a == 1).all() and (buf == 1).all()


def test_conv_in_place_is_refused():
    x, w = x_w()
    with pytest.raises(td.InvalidArgumentError, match="in-place is not supported"):
        td.conv(x, w, padding=1, out=x)
    assert (x == 1).all()


def test_dispatcher_run_in_place_is_refused():
    a = np.ones((8, 8), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="in-place is not supported"):
        GEMM.run(td.GemmProblem(8, 8, 8, layout="rrr"), a, np.ones((8, 8), np.float32), a)


# ---- 4. Dispatcher.run: numpy arrays against the problem --------------------------------------

@pytest.mark.parametrize("dtype", ["np.uint8", "np.float16", "np.float64"])
@pytest.mark.parametrize("slot", [0, 1, 2])
def test_dispatcher_run_wrong_element_type_is_refused(dtype, slot):
    expect_refused(f"""
        p = td.GemmProblem(64, 64, 64)
        arrays = [np.ones(64 * 64, np.float32) for _ in range(3)]
        arrays[{slot}] = np.ones(64 * 64, {dtype})
        attempt(lambda: td.Dispatcher("gemm", "cpu").run(p, *arrays))
    """, "the fp32 problem needs float32")


def test_dispatcher_run_conv_wrong_element_type_is_refused():
    expect_refused("""
        p = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3))
        arrays = [np.ones(p.input_shape, np.float32), np.ones(p.weight_shape, np.uint8),
                  np.ones(p.output_shape, np.float32)]
        attempt(lambda: td.Dispatcher("conv", "cpu").run(p, *arrays))
    """, "weight holds uint8")


def test_dispatcher_run_span_counts_bytes_of_strided_arrays():
    p = td.GemmProblem(8, 8, 8, layout="rrr", lda=20)
    wide = np.zeros((8, 16), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="A spans 127 elements, the problem needs 148"):
        GEMM.run(p, wide[:, ::2], np.ones((8, 8), np.float32), np.zeros((8, 8), np.float32))


def test_dispatcher_run_gemm_operand_layout_must_match_the_problem():
    rng = np.random.default_rng(1)
    a, b = rng.random((8, 4), dtype=np.float32), rng.random((4, 16), dtype=np.float32)
    c = np.zeros((8, 16), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="B .* is not column-major with leading dimension 4"):
        GEMM.run(td.GemmProblem(8, 16, 4, layout="rcr"), a, b, c)
    with pytest.raises(td.InvalidArgumentError, match="A .* is not row-major with leading dimension 4"):
        GEMM.run(td.GemmProblem(8, 16, 4, layout="rcr"), np.asfortranarray(a), np.asfortranarray(b), c)
    with pytest.raises(td.InvalidArgumentError, match="C .* is not row-major with leading dimension 20"):
        GEMM.run(td.GemmProblem(8, 16, 4, layout="rcr", ldc=20), a, np.asfortranarray(b), np.zeros((8, 32), np.float32)[:, :16])
    GEMM.run(td.GemmProblem(8, 16, 4, layout="rcr"), a, np.asfortranarray(b), c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_dispatcher_run_small_workspace_is_refused():
    p = td.GemmProblem(8, 8, 8)
    with pytest.raises(td.InvalidArgumentError, match="workspace holds 16 bytes, workspace_bytes says 4096"):
        GEMM.run(p, np.ones(64, np.float32), np.ones(64, np.float32), np.zeros(64, np.float32),
                 workspace=np.zeros(16, np.uint8), workspace_bytes=4096)


# ---- 5. one-wide operands keep their leading dimension ----------------------------------------

@pytest.mark.parametrize("layout", ["rcr", "rrr", "crr", "ccr", None])
def test_gemm_one_wide_operands(layout):
    rng = np.random.default_rng(2)
    a, b = rng.random((20, 1), dtype=np.float32), rng.random((1, 94), dtype=np.float32)
    np.testing.assert_allclose(td.gemm(a, b, layout=layout), a @ b, rtol=1e-5)
    np.testing.assert_allclose(td.gemm(b.T.copy(), a.T.copy(), layout=layout), b.T @ a.T, rtol=1e-5)


# ---- 6. broadcast inputs are refused, not materialized -----------------------------------------

def test_gemm_broadcast_input_is_refused():
    a = np.broadcast_to(np.float32(1), (4096, 4096))
    with pytest.raises(td.InvalidArgumentError, match="zero stride.*np.ascontiguousarray"):
        td.gemm(a, np.ones((4096, 2), np.float32))


def test_conv_broadcast_input_is_refused():
    x = np.broadcast_to(np.ones((1, 1, 1, 8), np.float32), (1, 64, 64, 8))
    w = np.ones((8, 3, 3, 8), np.float32)
    with pytest.raises(td.InvalidArgumentError, match="x has a zero stride"):
        td.conv(x, w)


# ---- 7. empty gemm -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape_a, shape_b", [((4, 0), (0, 4)), ((0, 4), (4, 4)), ((4, 4), (4, 0))])
def test_gemm_empty_dimensions_are_refused(shape_a, shape_b):
    with pytest.raises(td.InvalidArgumentError, match="M, N and K must be positive"):
        td.gemm(np.ones(shape_a, np.float32), np.ones(shape_b, np.float32))


# ---- device arrays: an address-range overlap check (no GPU needed: nothing runs) ---------------

class FakeCudaArray:
    """Only __cuda_array_interface__: enough for the checks that come before any launch."""

    def __init__(self, ptr, shape, strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": "<f4",
                                         "strides": strides, "version": 3}


def test_device_out_overlapping_an_input_is_refused():
    base = 1 << 40
    # without the check the cpu library would be handed these (unmapped) addresses
    expect_refused("""
        class FakeCudaArray:
            def __init__(self, ptr, shape):
                self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": "<f4",
                                                 "strides": None, "version": 3}
        base = 1 << 40
        a, b = FakeCudaArray(base, (8, 8)), FakeCudaArray(base + 4096, (8, 8))
        attempt(lambda: td.gemm(a, b, out=FakeCudaArray(base + 4096 + 252, (8, 8)), target="cpu"))
    """, "in-place is not supported")
    p = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3))
    x, w = FakeCudaArray(base, p.input_shape), FakeCudaArray(base + (1 << 20), p.weight_shape)
    with pytest.raises(td.InvalidArgumentError, match="output .written. overlaps input: in-place is not supported"):
        CONV.run(p, x, w, FakeCudaArray(base + 128, p.output_shape))
    with pytest.raises(td.InvalidArgumentError, match="runs on the host"):  # no overlap: the next check
        CONV.run(p, x, w, FakeCudaArray(base + (2 << 20), p.output_shape))
