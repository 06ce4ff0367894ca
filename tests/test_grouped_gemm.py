"""Grouped GEMM (mixture of experts) on the cpu target: the offsets form of torch._grouped_mm
and the list form, each one C call (td_gemm_grouped_run), against float64."""
import ml_dtypes
import numpy as np
import pytest

td = pytest.importorskip("tiledispatch")
from tiledispatch import reference  # noqa: E402

from test_gemm_epilogue import check, cpu_or_skip, matrix  # noqa: E402


def moe_reference(a, b, offsets):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, mag = np.zeros((a.shape[0], b.shape[2])), np.zeros((a.shape[0], b.shape[2]))
    start = 0
    for g, end in enumerate(offsets):
        ref[start:end] = a64[start:end] @ b64[g]
        mag[start:end] = np.abs(a64[start:end]) @ np.abs(b64[g])
        start = end
    return ref, mag


@pytest.mark.parametrize("dtype,out", [("fp32", "fp32"), ("bf16", "bf16"), ("fp8_e5m2", "bf16")])
def test_offsets_form_with_empty_groups_and_odd_sizes(rng, dtype, out):
    cpu_or_skip()
    a = matrix(rng, (101, 67), dtype)
    b = matrix(rng, (6, 67, 45), dtype)
    offsets = np.array([0, 13, 13, 60, 99, 101], np.int32)  # groups 0 and 2 are empty
    d = td.grouped_gemm(a, b, offsets)
    assert d.shape == (101, 45)
    check(d, *moe_reference(a, b, offsets), out, 67)


def test_offsets_form_column_major_experts_and_rows_after_the_last_offset(rng):
    cpu_or_skip()
    a = matrix(rng, (40, 32), "bf16")
    b = np.ascontiguousarray(matrix(rng, (3, 24, 32), "bf16")).transpose(0, 2, 1)  # (3, 32, 24), column-major
    offsets = np.array([10, 25, 30])
    d = td.grouped_gemm(a, b, offsets)
    check(d[:30], *(x[:30] for x in moe_reference(a, b, offsets)), "bf16", 32)
    assert not d[30:].astype(np.float32).any()


def test_a_single_group_and_more_than_a_thousand(rng):
    cpu_or_skip()
    a, b = matrix(rng, (50, 16), "fp32"), matrix(rng, (1, 16, 8), "fp32")
    check(td.grouped_gemm(a, b, [50]), *moe_reference(a, b, [50]), "fp32", 16)
    groups = 1200
    offsets = np.sort(rng.integers(0, 3000, groups))
    offsets[-1] = 3000
    a, b = matrix(rng, (3000, 24), "bf16"), matrix(rng, (groups, 24, 20), "bf16")
    check(td.grouped_gemm(a, b, offsets), *moe_reference(a, b, offsets), "bf16", 24)


def test_list_form_with_different_sizes_and_an_empty_group(rng):
    cpu_or_skip()
    shapes = [(5, 7, 9), (0, 4, 3), (33, 65, 17), (1, 1, 1)]
    a_list = [matrix(rng, (m, k), "fp16") for m, k, _ in shapes]
    b_list = [matrix(rng, (k, n), "fp16") for _, k, n in shapes]
    outs = td.grouped_gemm(a_list, b_list)
    assert [o.shape for o in outs] == [(m, n) for m, _, n in shapes]
    for x, y, o in zip(a_list, b_list, outs):
        if x.shape[0]:
            check(o, *reference.gemm(x, y), "fp16", x.shape[1])


def test_grouped_epilogue(rng):
    cpu_or_skip()
    a, b = matrix(rng, (30, 16), "bf16"), matrix(rng, (3, 16, 8), "bf16")
    offsets = [10, 10, 30]
    bias = matrix(rng, (3, 8), "fp32")
    d = td.grouped_gemm(a, b, offsets, bias=bias, activation="silu", alpha=0.5, out_dtype="fp32")
    assert d.dtype == np.float32
    start = 0
    for g, end in enumerate(offsets):
        _, ref, mag = reference.gemm_epilogue(a[start:end], b[g], alpha=0.5, bias=bias[g], activation="silu")
        check(d[start:end], ref, mag, "fp32", 16)
        start = end


def test_bad_grouped_input():
    cpu_or_skip()
    E = td.InvalidArgumentError
    a, b = np.zeros((10, 4), np.float32), np.zeros((3, 4, 5), np.float32)
    cases = [
        ([3, 2, 10], "offsets must be non-decreasing \\(offsets\\[1\\] = 2 < offsets\\[0\\] = 3\\)"),
        ([3, 5, 11], "offsets\\[-1\\] = 11 is beyond the 10 rows of a"),
        ([-1, 5, 10], "offsets must not be negative"),
        ([3, 10], "offsets has 2 values, b has 3 groups"),
        (np.array([1.0, 2.0, 3.0]), "offsets must be a 1-D integer array"),
        (None, "needs offsets"),
    ]
    for offsets, message in cases:
        with pytest.raises(E, match=message):
            td.grouped_gemm(a, b, offsets)
    with pytest.raises(E, match="inner dimensions differ"):
        td.grouped_gemm(np.zeros((10, 5), np.float32), b, [1, 2, 3])
    with pytest.raises(E, match="both as lists"):
        td.grouped_gemm([a], b)
    with pytest.raises(E, match="group 1: a \\(2, 3\\) and b \\(4, 5\\)"):
        td.grouped_gemm([a, np.zeros((2, 3), np.float32)], [np.zeros((4, 5), np.float32)] * 2)
    with pytest.raises(E, match="2 matrices of A but 1 of B"):
        td.grouped_gemm([a, a], [np.zeros((4, 5), np.float32)])
    with pytest.raises(TypeError, match="share one element type"):
        td.grouped_gemm([a], [np.zeros((4, 5), ml_dtypes.bfloat16)])
    with pytest.raises(E, match="one row per group"):
        td.grouped_gemm(a, b, [1, 2, 3], bias=np.zeros(5, np.float32))


def test_c_abi_grouped_call_refuses_bad_arguments():
    cpu_or_skip()
    import ctypes
    from tiledispatch import _ffi
    lib = td.Dispatcher("gemm", "cpu").lib
    problem = ctypes.byref(td.GemmProblem(1, 1, 1).to_c())
    for args, message in [((None, 1), "groups is NULL"), ((None, -1), "the group count must not be negative")]:
        assert lib.td_gemm_grouped_run(problem, None, *args, None, None) == -1
        assert message in lib.last_error()
    assert lib.td_gemm_grouped_run(problem, None, None, 0, None, None) == 0  # no group: nothing to do
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 4), np.float32, order="F")
    d = np.zeros((2, 4), np.float32)
    ptr = lambda x: x.__array_interface__["data"][0]  # noqa: E731
    table = (_ffi.TdGemmGroup * 2)(_ffi.TdGemmGroup(2, 4, 3, 0, 0, 0, ptr(a), ptr(b), ptr(d)),
                                   _ffi.TdGemmGroup(2, 0, 3, 0, 0, 0, ptr(a), ptr(b), ptr(d)))
    assert lib.td_gemm_grouped_run(problem, None, table, 2, None, None) == -1
    assert "group 1: M, N and K must be positive" in lib.last_error()
    assert (d == 0).all()  # every group is checked before any runs: group 0 did not run
    batched = ctypes.byref(td.GemmProblem(1, 1, 1, batch=2, stride_c=1).to_c())
    assert lib.td_gemm_grouped_run(batched, None, table, 1, None, None) == -1
    assert "a grouped call takes no batch" in lib.last_error()


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_grouped_fp8_row_wise_scales(rng, dtype):
    cpu_or_skip()
    a, b = matrix(rng, (60, 40), dtype), matrix(rng, (4, 40, 24), dtype)
    offsets = [0, 20, 45, 60]
    sa = rng.uniform(0.1, 3, 60).astype(np.float32)
    sb = rng.uniform(0.1, 3, (4, 24)).astype(np.float32)
    d = td.grouped_gemm(a, b, offsets, scale_a=sa, scale_b=sb)
    start = 0
    for g, end in enumerate(offsets):
        _, ref, mag = reference.gemm_epilogue(a[start:end], b[g], row_scale=sa[start:end], col_scale=sb[g])
        check(d[start:end], ref, mag, "bf16", 40)
        start = end
    outs = td.grouped_gemm([a[:7], a[7:9]], [b[0], b[1]], scale_a=[sa[:7], sa[7:9]], scale_b=[sb[0], sb[1]])
    _, ref, mag = reference.gemm_epilogue(a[7:9], b[1], row_scale=sa[7:9], col_scale=sb[1])
    check(outs[1], ref, mag, "bf16", 40)
    with pytest.raises(td.InvalidArgumentError, match=r"scale_b has shape \(4, 23\)"):
        td.grouped_gemm(a, b, offsets, scale_b=sb[:, :23])
    with pytest.raises(td.InvalidArgumentError, match=r"scale_a has shape \(59,\); it needs 60 values"):
        td.grouped_gemm(a, b, offsets, scale_a=sa[:59])


def test_cpu_calls_run_the_per_group_loop_and_the_new_entries_agree(rng):
    """The cpu library has no grouped kernel: td_gemm_grouped_select names none (""), the
    workspace is 0, td_gemm_grouped_run_ex runs the loop, and td.grouped_gemm_select says so."""
    cpu_or_skip()
    import ctypes
    from tiledispatch import _ffi
    lib = td.Dispatcher("gemm", "cpu").lib
    a = matrix(rng, (30, 16), "fp32")
    b = np.asfortranarray(matrix(rng, (16, 8), "fp32"))
    d = np.zeros((30, 8), np.float32)
    ptr = lambda x: x.__array_interface__["data"][0]  # noqa: E731
    table = (_ffi.TdGemmGroup * 3)(_ffi.TdGemmGroup(10, 8, 16, 16, 16, 8, ptr(a), ptr(b), ptr(d)),
                                   _ffi.TdGemmGroup(0, 8, 16),
                                   _ffi.TdGemmGroup(20, 8, 16, 16, 16, 8, ptr(a[10:]), ptr(b), ptr(d[10:])))
    problem = ctypes.byref(td.GemmProblem(30, 8, 16).to_c())
    name = ctypes.create_string_buffer(_ffi.NAME_BUFFER)
    assert lib.td_gemm_grouped_select(problem, table, 3, name, _ffi.NAME_BUFFER) == 0 and name.value == b""
    size = ctypes.c_size_t(7)
    assert lib.td_gemm_grouped_workspace_size(problem, None, table, 3, ctypes.byref(size)) == 0 and size.value == 0
    assert lib.td_gemm_grouped_run_ex(problem, None, table, 3, None, 0, None, None) == 0
    check(d, *reference.gemm(a, b), "fp32", 16)
    assert td.grouped_gemm_select(a, matrix(rng, (2, 16, 8), "fp32"), [10, 30]) == ""


def test_group_pointers_are_checked_before_anything_runs():
    cpu_or_skip()
    import ctypes
    from tiledispatch import _ffi
    lib = td.Dispatcher("gemm", "cpu").lib
    a, b, d = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32, order="F"), np.zeros((2, 4), np.float32)
    ptr = lambda x: x.__array_interface__["data"][0]  # noqa: E731
    table = (_ffi.TdGemmGroup * 2)(_ffi.TdGemmGroup(2, 4, 3, 0, 0, 0, ptr(a), ptr(b), ptr(d)),
                                   _ffi.TdGemmGroup(2, 4, 3, 0, 0, 0, ptr(a), None, ptr(d)))
    problem = ctypes.byref(td.GemmProblem(1, 1, 1).to_c())
    assert lib.td_gemm_grouped_run(problem, None, table, 2, None, None) == -1
    assert "group 1: A, B and D must not be NULL" in lib.last_error()
    assert not d.any()


class _FakeDeviceArray:
    """__cuda_array_interface__ over made-up addresses: the grouped call's checks and its table
    without a GPU (td.grouped_gemm_select never touches the memory)."""

    def __init__(self, shape, ptr, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (ptr, False),
                                         "strides": strides, "version": 3}


def test_device_arrays_select_the_one_launch_kernel_without_a_gpu():
    """On an sm_90a library (loaded, no GPU needed): the offsets and list forms of fp16 device
    arrays name a cutlass_grouped kernel; K of 500 elements (not whole 16 bytes) and row-major
    experts (rrr, no grouped variant built) name none: the per-group loop."""
    if "sm_90a" not in td.registry().targets:
        pytest.skip("no sm_90a library in this installation")
    grouped = {k.name for k in td.registry().kernels("gemm", "sm_90a")
               if k.family == "cutlass_grouped" and k.dtype.key == "fp16" and k.layout.key == "rcr"}
    if not grouped:
        pytest.skip("no fp16 rcr cutlass_grouped kernel in this installation")
    G, K, N = 8, 512, 256
    offsets = np.cumsum([100, 0, 300, 1, 99, 200, 150, 150]).astype(np.int32)
    a = _FakeDeviceArray((1000, K), 1 << 32)
    b = _FakeDeviceArray((G, K, N), 1 << 34, strides=(N * K * 2, 2, K * 2))  # (G, N, K) transposed: rcr
    assert td.grouped_gemm_select(a, b, offsets, target="sm_90a") in grouped
    row_major = _FakeDeviceArray((G, K, N), 1 << 34)
    assert td.grouped_gemm_select(a, row_major, offsets, target="sm_90a") == ""
    a500 = _FakeDeviceArray((1000, 500), 1 << 32)
    b500 = _FakeDeviceArray((G, 500, N), 1 << 34, strides=(N * 500 * 2, 2, 500 * 2))
    assert td.grouped_gemm_select(a500, b500, offsets, target="sm_90a") == ""
    a_list = [_FakeDeviceArray((m, K), (1 << 32) + i * (1 << 20)) for i, m in enumerate([5, 0, 64])]
    b_list = [_FakeDeviceArray((K, N), (1 << 36) + i * (1 << 20), strides=(2, K * 2)) for i in range(3)]
    assert td.grouped_gemm_select(a_list, b_list, target="sm_90a") in grouped
    with pytest.raises(td.InvalidArgumentError, match=r"offsets\[-1\] = 1000 is beyond the 999 rows"):
        td.grouped_gemm_select(_FakeDeviceArray((999, K), 1 << 32), b, offsets, target="sm_90a")
    with pytest.raises(td.UnsupportedProblemError, match="bias runs on the cpu target"):
        td.grouped_gemm(a, b, offsets, bias=np.zeros((G, N), np.float16), target="sm_90a")
