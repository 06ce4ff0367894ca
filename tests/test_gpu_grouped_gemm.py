"""Grouped GEMM (mixture of experts) on the GPU: td.grouped_gemm on torch CUDA tensors, as one
launch of a cutlass_grouped kernel (td.grouped_gemm_select names it) and, where no grouped
kernel takes the call, as the per-group loop. Against float64 on the same quantized inputs, and
against torch._grouped_mm where this torch has it. Skipped, with the reason shown, where there is
no GPU, no torch, or no library for the GPU; run by bench/gpu_run.sh on the H200."""
import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import DType

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
GPU = next((t for t in device_targets() if t in td.registry().targets), None)
pytestmark = pytest.mark.skipif(
    GPU is None, reason=f"no GPU with a library in this installation (GPUs seen: {device_targets() or 'none'}, "
                        f"libraries: {td.registry().targets})")

TORCH = {DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP8_E4M3: "float8_e4m3fn"}


def grouped_kernels(dtype=None):
    if GPU is None:
        return []
    return [k for k in td.registry().kernels("gemm", GPU)
            if k.family == "cutlass_grouped" and (dtype is None or k.dtype is dtype)]


def need_grouped(dtype):
    if not grouped_kernels(dtype):
        pytest.skip(f"no cutlass_grouped {dtype.key} kernel in this installation")


def experts(groups, rows, K, N, dtype, gen, *, weights_nk=True):
    """a (rows, K), b (groups, K, N) as torch._grouped_mm takes it: the transposed view of
    (groups, N, K) expert weights (layout rcr), or row-major (groups, K, N) (rrr)."""
    t = getattr(torch, TORCH[dtype])
    a = (torch.rand(rows, K, generator=gen, device="cuda") * 2 - 1).to(t)
    if weights_nk:
        b = (torch.rand(groups, N, K, generator=gen, device="cuda") * 2 - 1).to(t).transpose(1, 2)
    else:
        b = (torch.rand(groups, K, N, generator=gen, device="cuda") * 2 - 1).to(t)
    return a, b


def offsets_of(counts):
    return torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")


def reference_moe(a, b, ends):
    a64, b64 = a.double(), b.double()
    ref = torch.zeros(a.shape[0], b.shape[2], dtype=torch.float64, device="cuda")
    mag = torch.zeros_like(ref)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            ref[start:end] = a64[start:end] @ b64[g]
            mag[start:end] = a64[start:end].abs() @ b64[g].abs()
        start = end
    return ref, mag


def check(d, ref, mag, dtype, K):
    tol = reference.tolerance(dtype, K)
    err = (d.double() - ref).abs()
    bad = ~(err <= tol * mag + reference.underflow(dtype) + reference.FLOOR)
    assert not bad.any(), f"{int(bad.sum())} wrong values, max error {float(err.max()):.3g}"


def run_and_check(counts, K, N, dtype=DType.BF16, *, gen, one_launch=True, kernel=None):
    counts = np.asarray(counts, dtype=np.int64)
    a, b = experts(len(counts), int(counts.sum()), K, N, dtype, gen)
    offsets = offsets_of(counts)
    picked = td.grouped_gemm_select(a, b, offsets)
    if one_launch:
        assert picked in {k.name for k in grouped_kernels(dtype)}, picked
    d = td.grouped_gemm(a, b, offsets, kernel=kernel)
    torch.cuda.synchronize()
    assert isinstance(d, torch.Tensor) and d.shape == (a.shape[0], N) and d.dtype == a.dtype
    check(d, *reference_moe(a, b, np.cumsum(counts)), dtype, K)
    return a, b, offsets, d


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
def test_eight_experts_one_launch(gen, dtype):
    need_grouped(dtype)
    run_and_check([300, 17, 512, 0, 129, 64, 1, 250], 512, 384, dtype, gen=gen)


def test_256_experts_with_empty_groups_and_odd_rows(gen):
    need_grouped(DType.BF16)
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 40, 256) * (rng.random(256) > 0.2)  # about a fifth of them empty
    counts[::2] |= 1  # odd M for half the experts
    run_and_check(counts, 256, 128, gen=gen)


def test_a_single_group(gen):
    need_grouped(DType.BF16)
    run_and_check([777], 1024, 256, gen=gen)


def test_more_than_a_thousand_groups(gen):
    need_grouped(DType.BF16)
    rng = np.random.default_rng(11)
    run_and_check(rng.integers(0, 9, 1100), 128, 64, gen=gen)


def test_every_group_empty_is_a_no_op(gen):
    need_grouped(DType.BF16)
    a, b = experts(4, 16, 64, 64, DType.BF16, gen)
    d = td.grouped_gemm(a, b, offsets_of([0, 0, 0, 0]))
    torch.cuda.synchronize()
    assert not d.float().any()  # the rows after the last offset are zero


def test_named_grouped_kernels_each_agree(gen):
    counts = [40, 0, 129, 7]
    for k in grouped_kernels():
        if k.dtype is DType.FP8_E4M3:
            continue
        run_and_check(counts, 256, 256, k.dtype, gen=gen, kernel=k.name)


def test_fp8_one_launch(gen):
    need_grouped(DType.FP8_E4M3)
    counts = np.array([33, 0, 128, 5])
    a, b = experts(4, int(counts.sum()), 256, 128, DType.FP8_E4M3, gen)
    offsets = offsets_of(counts)
    assert td.grouped_gemm_select(a, b, offsets) in {k.name for k in grouped_kernels(DType.FP8_E4M3)}
    d = td.grouped_gemm(a, b, offsets, scale_a=0.5, scale_b=3.0)  # per tensor: alpha 1.5
    torch.cuda.synchronize()
    assert d.dtype == torch.bfloat16
    ref, mag = reference_moe(a, b, np.cumsum(counts))
    check(d, 1.5 * ref, 1.5 * mag, DType.FP8_E4M3, 256)


def test_misaligned_groups_fall_back_to_the_per_group_loop(gen):
    """K of 100 bf16 elements (200 bytes) is no whole 16 bytes: no grouped kernel takes the call,
    each group runs as its own GEMM (a pad variant of the cutlass family takes it)."""
    counts = [5, 9, 0, 3]
    a, b = experts(4, 17, 100, 64, DType.BF16, gen)
    offsets = offsets_of(counts)
    assert td.grouped_gemm_select(a, b, offsets) == ""
    try:
        d = td.grouped_gemm(a, b, offsets)
    except td.UnsupportedProblemError as err:
        pytest.skip(f"no kernel of this installation takes K 100 alone: {err}")
    torch.cuda.synchronize()
    check(d, *reference_moe(a, b, np.cumsum(counts)), DType.BF16, 100)


def test_list_form(gen):
    need_grouped(DType.BF16)
    t = torch.bfloat16
    shapes = [(5, 64, 128), (0, 64, 128), (33, 64, 128), (130, 64, 128)]
    a_list = [(torch.rand(m, k, generator=gen, device="cuda") * 2 - 1).to(t) for m, k, _ in shapes]
    b_list = [(torch.rand(n, k, generator=gen, device="cuda") * 2 - 1).to(t).t() for _, k, n in shapes]
    assert td.grouped_gemm_select(a_list, b_list) in {k.name for k in grouped_kernels(DType.BF16)}
    outs = td.grouped_gemm(a_list, b_list)
    torch.cuda.synchronize()
    assert [tuple(o.shape) for o in outs] == [(m, n) for m, _, n in shapes]
    for x, y, o in zip(a_list, b_list, outs):
        if x.shape[0]:
            check(o, x.double() @ y.double(), x.double().abs() @ y.double().abs(), DType.BF16, x.shape[1])


def test_a_plain_gemm_never_picks_a_grouped_kernel(gen):
    need_grouped(DType.BF16)
    a = torch.rand(256, 256, device="cuda").to(torch.bfloat16)
    b = torch.rand(256, 256, device="cuda").to(torch.bfloat16).t()
    d = td.Dispatcher("gemm", GPU)
    problem = td.GemmProblem(256, 256, 256, DType.BF16, "rcr")
    assert "grouped" not in d.select(problem)
    name = grouped_kernels(DType.BF16)[0].name
    with pytest.raises(td.KernelRejectedError, match="grouped calls only"):
        d.run(problem, a.data_ptr(), b.data_ptr(), torch.empty(256, 256, device="cuda", dtype=torch.bfloat16).data_ptr(),
              kernel=name, stream=torch.cuda.current_stream().cuda_stream)


def test_against_torch_grouped_mm(gen):
    need_grouped(DType.BF16)
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no torch._grouped_mm")
    counts = [64, 0, 200, 31, 128, 16, 0, 77]
    a, b, offsets, d = run_and_check(counts, 512, 256, gen=gen)
    try:
        theirs = torch._grouped_mm(a, b, offs=offsets)
    except RuntimeError as err:  # torch's kernel takes only some devices and alignments
        pytest.skip(f"torch._grouped_mm refused: {err}")
    end = int(np.sum(counts))
    ref, mag = reference_moe(a, b, np.cumsum(counts))
    check(theirs[:end], ref[:end], mag[:end], DType.BF16, 512)
    assert torch.allclose(d[:end].float(), theirs[:end].float(), rtol=2e-2, atol=2e-2)


def test_one_launch_in_the_profiler(gen):
    need_grouped(DType.BF16)
    counts = [64, 3, 200, 0, 31, 128, 16, 77]
    a, b = experts(len(counts), int(np.sum(counts)), 256, 256, DType.BF16, gen)
    offsets = offsets_of(counts)
    td.grouped_gemm(a, b, offsets)  # offsets read back, staging buffers made
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        td.grouped_gemm(a, b, offsets)
        torch.cuda.synchronize()
    launches = [e for e in prof.events() if e.device_type.name == "CUDA" and "GemmUniversal" in e.name]
    assert len(launches) == 1, [e.name[:80] for e in launches]


def test_graph_capture_needs_a_workspace(gen):
    """During CUDA graph capture the grouped kernel refuses to allocate its argument block; the
    C call with the caller's workspace captures, and the graph replays the same groups."""
    need_grouped(DType.BF16)
    import ctypes
    from tiledispatch.grouped_device import _Call, _dispatcher
    counts = [40, 0, 100, 9]
    a, b = experts(4, 149, 128, 128, DType.BF16, gen)
    offsets = offsets_of(counts)
    out = torch.zeros(149, 128, device="cuda", dtype=torch.bfloat16)
    call = _Call(a, b, offsets, out, 1.0)
    d = _dispatcher(None)
    p = ctypes.byref(call.problem.to_c())
    size = ctypes.c_size_t()
    d.lib.check(d.lib.td_gemm_grouped_workspace_size(p, None, call.table(), call.groups, ctypes.byref(size)))
    assert size.value > 0
    ws = torch.empty(size.value, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    refused = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(refused, stream=stream):
            status = d.lib.td_gemm_grouped_run(p, None, call.table(), call.groups, stream.cuda_stream, None)
    assert status == -1 and "during CUDA graph capture pass one" in d.lib.last_error()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            status = d.lib.td_gemm_grouped_run_ex(p, None, call.table(), call.groups, ws.data_ptr(), size.value,
                                                  stream.cuda_stream, None)
    d.lib.check(status)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    check(out, *reference_moe(a, b, np.cumsum(counts)), DType.BF16, 128)
