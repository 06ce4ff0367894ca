"""GPU kernels on the device they were built for. Skipped, with the reason shown, where
there is no GPU, no torch, or no library for the GPU; run by bench/gpu_run.sh on the H200.

The reference is torch in float64 on the GPU, on the same quantized inputs."""
import json
import math

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import DType, GemmVariant

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
GPU = next((t for t in device_targets() if t in td.registry().targets), None)
pytestmark = pytest.mark.skipif(
    GPU is None, reason=f"no GPU with a library in this installation (GPUs seen: {device_targets() or 'none'}, "
                        f"libraries: {td.registry().targets})")

TORCH = {DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP8_E4M3: "float8_e4m3fn",
         DType.FP8_E5M2: "float8_e5m2", DType.FP32: "float32"}


def kernels():
    """The GEMM kernels that run plain problems (the cutlass_blockwise kernels run only fp8
    problems with block-wise scales: tests/test_gpu_fp8_blockwise.py; the grouped variant runs
    grouped calls only: tests/test_gpu_grouped_gemm.py; the fused cutlass variants need their
    epilogue: tests/test_gpu_gemm_features.py)."""
    every = td.registry().kernels("gemm", GPU) if GPU else []
    return [k for k in every if k.family != "cutlass_blockwise" and k.variant is not GemmVariant.GROUPED
            and getattr(k.knobs, "fusion", "none") == "none"]


def tile(kernel):
    """The kernel's tile, or 64 x 64 x 64 for the vendor kernels (tile 1 x 1 x 1)."""
    return tuple(t if t > 1 else 64 for t in kernel.tile)


@pytest.fixture
def ours_alone():
    """Selection among our own families (the vendor families left out: td.set_options)."""
    previous = td.set_options(vendor=False)
    yield
    td.set_options(**previous)


def tdtype(dtype):
    return getattr(torch, TORCH[dtype])


def operands(kernel, M, N, K, gen, pad=0):
    """A (M x K) and B (K x N) as torch CUDA tensors in the kernel's layout, values in
    [-1, 1) quantized to its dtype, optionally with padded leading dimensions."""
    def make(rows, cols, row_major):
        base = torch.rand(rows if row_major else cols, (cols if row_major else rows) + pad,
                          generator=gen, device="cuda") * 2 - 1
        t = base.to(tdtype(kernel.dtype))[:, : cols if row_major else rows]
        return t if row_major else t.t()
    return make(M, K, kernel.layout.a_row), make(K, N, kernel.layout.b_row)


def check(kernel, M, N, K, gen, *, pad=0, splits=0, d=None):
    d = d or td.Dispatcher("gemm", GPU)
    a, b = operands(kernel, M, N, K, gen, pad)
    ld = lambda t: t.stride(0) if t.stride(1) == 1 else t.stride(1)  # noqa: E731
    c = torch.full((M, N), float("nan"), device="cuda", dtype=tdtype(kernel.dtype.out))
    problem = td.GemmProblem(M, N, K, kernel.dtype, kernel.layout, ld(a), ld(b), N, splits=splits)
    d.run(problem, a.data_ptr(), b.data_ptr(), c.data_ptr(), kernel=kernel.name,
          stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    mag = a64.abs() @ b64.abs()
    err = (c.double() - ref).abs()
    tol = reference.tolerance(kernel.dtype, K)
    # + underflow: an fp16 result below 2^-14 is subnormal, rounded to an absolute 2^-25
    bad = ~(err <= tol * mag + reference.underflow(kernel.dtype) + reference.FLOOR)
    assert not bool(bad.any()), (f"{kernel.name} {M}x{N}x{K} pad={pad} splits={splits}: {int(bad.sum())} "
                                 f"of {M * N} outside tolerance, max error {float(err.nan_to_num(math.inf).max())}")
    rel = float((c.double() - ref).norm() / ref.norm())
    assert rel < 2e-2


@pytest.mark.parametrize("kernel", kernels(), ids=lambda k: k.name)
def test_every_gpu_kernel_matches_float64(kernel, gen):
    tm, tn, tk = tile(kernel)
    check(kernel, 2 * tm, 2 * tn, 4 * tk, gen)                        # multiples of the tile
    check(kernel, tm + 24, 3 * tn - 40, 5 * tk + 16, gen)             # not multiples (16-byte aligned)
    check(kernel, 8, 16, 32, gen)                                     # smaller than one tile
    check(kernel, 1024, 1024, 1024, gen)


@pytest.mark.parametrize("kernel", kernels(), ids=lambda k: k.name)
def test_repeated_runs_on_the_same_tensors_stay_correct(kernel, gen):
    """The second and later launches of a kernel on the same pointers reuse the first one's
    CUTLASS parameters (the host-time shortcut in gemm_sm90.cuh): each run is checked."""
    d = td.Dispatcher("gemm", GPU)
    M, N, K = 1024, 768, 512
    a, b = operands(kernel, M, N, K, gen)
    ld = lambda t: t.stride(0) if t.stride(1) == 1 else t.stride(1)  # noqa: E731
    c = torch.empty((M, N), device="cuda", dtype=tdtype(kernel.dtype.out))
    problem = td.GemmProblem(M, N, K, kernel.dtype, kernel.layout, ld(a), ld(b), N)
    ref = a.double() @ b.double()
    tol = (reference.tolerance(kernel.dtype, K) * (a.double().abs() @ b.double().abs()) + reference.underflow(kernel.dtype)
           + reference.FLOOR)
    stream = torch.cuda.current_stream().cuda_stream
    for attempt in range(3):
        c.fill_(float("nan"))
        d.run(problem, a.data_ptr(), b.data_ptr(), c.data_ptr(), kernel=kernel.name, stream=stream)
        torch.cuda.synchronize()
        bad = ~((c.double() - ref).abs() <= tol)
        assert not bool(bad.any()), f"{kernel.name} run {attempt + 1}: {int(bad.sum())} of {M * N} outside tolerance"


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.variant is GemmVariant.STREAM_K],
                         ids=lambda k: k.name)
# (256, 200, 16384): 4 or 2 output tiles, which the kernel's own split count takes up to 32
@pytest.mark.parametrize("shape", [(512, 512, 16384), (384, 640, 4096), (4096, 128, 8192), (256, 200, 16384)])
def test_stream_k_both_reductions_on_split_heavy_shapes(kernel, shape, gen):
    check(kernel, *shape, gen)
    check(kernel, *shape, gen, splits=3)


def split_k_kernels():
    return [k for k in kernels() if k.variant is GemmVariant.SPLIT_K]


@pytest.mark.parametrize("kernel", split_k_kernels(), ids=lambda k: k.name)
# (512, 512, 65536): the suite's long-K shape, 16 tiles of 128x128, where the kernel's own
# count fills the SMs; (136, 344, 2688): neither M nor N a multiple of the tile
@pytest.mark.parametrize("shape", [(512, 512, 65536), (384, 640, 4096), (256, 200, 16384), (136, 344, 2688)])
def test_split_k_sums_every_part_of_k(kernel, shape, gen):
    """Split-K (gemm_sm90.cuh): the kernel's own count, counts 1 to 32 that cut K into
    16-byte parts, and leading dimensions longer than the rows (the parts are found by
    stepping along K, not by the leading dimension)."""
    K = shape[2]
    check(kernel, *shape, gen)
    for splits in (1, 2, 3, 7, 8, 32):
        if K % splits == 0 and (K // splits) % (16 // kernel.dtype.nbytes) == 0:
            check(kernel, *shape, gen, splits=splits)
    check(kernel, *shape, gen, pad=8, splits=2)


def test_split_k_refuses_a_count_that_does_not_cut_k_evenly(gen):
    """K = 4096 in 3 parts, or in 512 parts of 8: unsupported (-3 when named, with why); an
    N not a multiple of 8 likewise (the sum writes 8 columns at a time)."""
    if not split_k_kernels():
        pytest.skip("no split_k kernel in this build")
    d = td.Dispatcher("gemm", GPU)
    kernel = split_k_kernels()[0]
    for splits in (3, 512):
        problem = td.GemmProblem(512, 512, 4096, kernel.dtype, "rcr", splits=splits)
        assert d.is_supported(problem, kernel.name) is False
        with pytest.raises(td.KernelRejectedError) as info:
            d.run(problem, 0, 0, 0, kernel=kernel.name)
        assert info.value.status == -3 and "does not cut K = 4096" in info.value.message
    narrow = td.GemmProblem(512, 1000 + 4, 4096, kernel.dtype, "rcr", 4096, 4096, 1008)
    assert d.is_supported(narrow, kernel.name) is False
    assert d.is_supported(td.GemmProblem(512, 512, 4096, kernel.dtype, "rcr", splits=8), kernel.name) is True


@pytest.mark.parametrize("kernel", [k for k in kernels() if getattr(k.knobs, "pad", False)], ids=lambda k: k.name)
@pytest.mark.parametrize("shape", [(4095, 4095, 4095), (1000, 999, 777), (33, 17, 1)])
def test_pad_variants_serve_misaligned_problems(kernel, shape, gen):
    check(kernel, *shape, gen)
    check(kernel, 256, 200, 300, gen, pad=3)


def skinny_kernels():
    return [k for k in kernels() if k.knobs.algorithm == "skinny"]


@pytest.mark.parametrize("kernel", skinny_kernels(), ids=lambda k: k.name)
def test_skinny_kernels_on_tails_splits_and_strides(kernel, gen):
    """Our decode GEMM (gemm_skinny.cuh): M below and above its block rows, N and K not
    multiples of its tile, the split count chosen (0), none (1) and uneven (3), leading
    dimensions one 16-byte vector longer than the rows."""
    tm, tn, tk = kernel.tile
    vec = 16 // kernel.dtype.nbytes
    for M, N, K in ((1, 4096, 4096), (max(1, tm - 3), 5 * tn + 3, 3 * tk + vec), (3 * tm + 5, 1000, 2 * vec)):
        for splits in (0, 1, 3):
            check(kernel, M, N, K, gen, splits=splits)
    check(kernel, 40, 200, 1024, gen, pad=vec)


def test_skinny_kernels_refuse_what_they_cannot_read(gen):
    """Rows not a multiple of 16 bytes: unsupported (-2 when picking, -3 when named);
    a misaligned pointer: rejected at run time (-3), nothing written."""
    if not skinny_kernels():
        pytest.skip("no skinny kernel in this build")
    d = td.Dispatcher("gemm", GPU)
    kernel = skinny_kernels()[0]
    vec = 16 // kernel.dtype.nbytes
    problem = td.GemmProblem(16, 256, 64 * vec + 1, kernel.dtype, "rcr")
    assert d.is_supported(problem, kernel.name) is False
    with pytest.raises(td.KernelRejectedError) as info:
        d.run(problem, 0, 0, 0, kernel=kernel.name)
    assert info.value.status == -3 and "multiple of 16 bytes" in info.value.message
    M, N, K = 16, 256, 64 * vec
    a, b = operands(kernel, M, N, K + vec, gen)
    c = torch.zeros((M, N), device="cuda", dtype=tdtype(kernel.dtype.out))
    shifted = td.GemmProblem(M, N, K, kernel.dtype, "rcr", K + vec, K + vec, N)
    with pytest.raises(td.KernelRejectedError) as info:
        d.run(shifted, a.data_ptr() + 2, b.data_ptr(), c.data_ptr(), kernel=kernel.name)
    assert info.value.status == -3 and "16-byte aligned" in info.value.message
    torch.cuda.synchronize()
    assert int(c.count_nonzero()) == 0


def test_the_cost_model_picks_the_skinny_kernel_for_decode_shapes(ours_alone):
    """Among our families: M up to 16, the skinny kernel (B's bytes are the time); M 32 and 128,
    a CUTLASS kernel. By the library's cost model and by the dispatcher (the shipped bf16 tuning
    table; fp8 has none, so the cost model there too)."""
    if not skinny_kernels():
        pytest.skip("no skinny kernel in this build")
    d = td.Dispatcher("gemm", GPU)
    for dtype in (DType.BF16, DType.FP16, DType.FP8_E4M3):
        if not any(k.dtype is dtype for k in skinny_kernels()):
            continue
        for M, N, K, family in ((16, 6144, 4096, "skinny"), (1, 4096, 4096, "skinny"), (16, 28672, 4096, "skinny"),
                                (32, 8192, 8192, "cutlass"), (128, 4096, 14336, "cutlass")):
            problem = td.GemmProblem(M, N, K, dtype, "rcr")
            model = d.model_select(problem)
            assert td.codegen.config_from_name(model).knobs.algorithm == family, (dtype, M, N, K, model)
            assert td.codegen.config_from_name(d.select(problem)).knobs.algorithm == family, (dtype, M, N, K)


def test_a_table_does_not_speak_for_a_kernel_family_it_never_measured(tmp_path, monkeypatch):
    """Through the library's selection, with its cost model: a table of CUTLASS kernels keeps
    its pick among them (though the model ranks another of them first); a kernel of a family
    no entry lists (the skinny decode GEMM; split-K, a family of its own though CUTLASS) takes
    the problem where the cost model predicts it faster than the table's pick, a stream-K
    kernel (the table's family) does not. fp16 through the bf16 entries alike."""
    cut1 = "gemm_bf16_rcr_standard_64x128x64_c1x1_pp_sm90a"
    cut2 = "gemm_bf16_rcr_standard_128x256x64_c2x1_coop_sm90a"
    skinny = "gemm_bf16_rcr_standard_16x16x128_skinny_sm90a"
    split = "gemm_bf16_rcr_splitk_128x128x64_c1x1_coop_sm90a"
    streamk = "gemm_bf16_rcr_streamk_atomic_128x128x64_c1x1_coop_sm90a"
    configs = {k.name: k for k in kernels()}
    if not {n.replace("_bf16_", f"_{t}_") for n in (cut1, cut2, skinny, split, streamk) for t in ("bf16", "fp16")} \
            <= set(configs):
        pytest.skip("this build lacks the kernels of the table")
    measured = {(16, 6144, 4096): [cut2, cut1], (8192, 8192, 256): [cut1, cut2], (512, 512, 65536): [cut2, cut1]}
    table = {"schema_version": 1, "target": GPU, "entries": [
        {"problem": {"op": "gemm", "M": M, "N": N, "K": K, "dtype": "bf16", "layout": "rcr"}, "kernels": names,
         "latency_ms": [0.02, 0.03]} for (M, N, K), names in measured.items()]}
    path = tmp_path / "families.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm", GPU)
    family = lambda name: (configs[name].family, configs[name].variant is GemmVariant.SPLIT_K)  # noqa: E731
    known = {family(cut1), family(cut2)}

    def expected(q, table_pick):
        """The table's pick, unless a kernel of a family it never measured is modelled faster."""
        choice, base = table_pick, d.cost(q, table_pick)
        for name in sorted(configs):
            if configs[name].named_only or family(name) in known or not d.is_supported(q, name):
                continue
            if d.cost(q, name) < base:
                choice, base = name, d.cost(q, name)
        return choice

    q = td.GemmProblem(8192, 8192, 256, "bf16")
    assert d.cost(q, cut2) < d.cost(q, cut1)  # the model would take cut2
    assert d.select(q) == expected(q, cut1) == cut1  # measured: the table's best
    for dtype in ("bf16", "fp16"):
        q = td.GemmProblem(16, 6144, 4096, dtype)
        pick = d.select(q)
        assert pick == expected(q, cut2.replace("_bf16_", f"_{dtype}_"))
        assert configs[pick].family == "skinny" and configs[pick].dtype.key == dtype, pick
    q = td.GemmProblem(512, 512, 65536, "bf16")
    assert d.cost(q, streamk) < d.cost(q, cut2) and family(streamk) in known
    pick = d.select(q)
    assert pick == expected(q, cut2) and configs[pick].variant is GemmVariant.SPLIT_K, pick


def test_the_cost_model_picks_the_wide_fp8_tiles_where_they_won(ours_alone):
    """fp8 e4m3 (no tuning table: the cost model picks): the 128x256 tiles, whose mainloop runs
    in N slices, on the large and short-K shapes, 128x192 at 2304^3, and the 64x128 ping-pong
    tile at 64 rows (bench/RESULTS.md: 128x256 1.05x cuBLASLt at 8192x8192x256, where the
    ping-pong 64x128 runs 0.93x)."""
    wide = {"gemm_fp8e4m3_rcr_standard_128x256x128_c1x1_coop_sm90a", "gemm_fp8e4m3_rcr_standard_128x192x128_c1x1_coop_sm90a",
            "gemm_fp8e4m3_rcr_standard_64x128x128_c1x1_pp_sm90a"}
    if not wide <= {k.name for k in kernels()}:
        pytest.skip("this build lacks the default manifest's fp8 tiles")
    d = td.Dispatcher("gemm", GPU)
    for M, N, K, tile in ((8192, 8192, 256, "128x256x128_c1x1_coop"), (4096, 4096, 4096, "128x256x128_c1x1_coop"),
                          (2304, 2304, 2304, "128x192x128_c1x1_coop"), (64, 28672, 4096, "64x128x128_c1x1_pp")):
        problem = td.GemmProblem(M, N, K, DType.FP8_E4M3, "rcr")
        assert d.select(problem) == f"gemm_fp8e4m3_rcr_standard_{tile}_sm90a", (M, N, K)


def test_misaligned_problems_are_served_or_refused_never_wrong(gen, ours_alone):
    d = td.Dispatcher("gemm", GPU)
    ours = [k for k in kernels() if k.family != "cublaslt"]  # the vendor is left out (ours_alone)
    for dtype in (DType.BF16, DType.FP16):
        if not any(k.dtype is dtype and k.layout.key == "rcr" for k in ours):
            continue  # a build filtered to other dtypes (KERNEL_FILTER)
        problem = td.GemmProblem(4095, 4095, 4095, dtype, "rcr")
        name = d.select(problem)
        assert getattr(td.codegen.config_from_name(name).knobs, "pad", False), name
        plain = next(k for k in ours if k.dtype is dtype and not getattr(k.knobs, "pad", False) and k.layout.key == "rcr")
        assert d.is_supported(problem, plain.name) is False
        with pytest.raises(td.KernelRejectedError) as info:
            d.run(problem, 0, 0, 0, kernel=plain.name)
        assert info.value.status == -3 and "multiple of 16 bytes" in info.value.message
    # fp8 has no pad variant in the default manifest: C rows of 4095 elements are refused
    # with -2 by the CUTLASS kernels; the skinny kernel (2-byte stores to C) serves them
    problem = td.GemmProblem(4096, 4095, 4096, DType.FP8_E4M3, "rcr")
    fp8 = [k for k in ours if k.dtype is DType.FP8_E4M3]
    if any(getattr(k.knobs, "pad", False) or k.knobs.algorithm == "skinny" for k in fp8):
        served = next(k for k in fp8 if k.name == d.select(problem))
        assert getattr(served.knobs, "pad", False) or served.knobs.algorithm == "skinny"
        check(served, 64, 4095, 4096, gen)
    elif fp8:
        with pytest.raises(td.UnsupportedProblemError) as info:
            d.select(problem)
        assert info.value.status == -2


@pytest.mark.parametrize("kernel", [k for k in kernels() if k.named_only], ids=lambda k: k.name)
def test_named_only_kernels_run_when_named_and_are_never_picked(kernel, gen):
    """fp8 fast accumulation (promote: fast; none in kernels.yaml, built by the opt-in
    bench/sweeps/sm90_fp8.yaml): correct when named, never the dispatcher's choice."""
    check(kernel, 256, 256, 512, gen)
    d = td.Dispatcher("gemm", GPU)
    for M, N, K in ((256, 256, 512), (4096, 4096, 4096), (128, 4096, 14336)):
        try:
            pick = d.select(td.GemmProblem(M, N, K, kernel.dtype, kernel.layout))
        except td.UnsupportedProblemError:
            pick = None
        assert pick != kernel.name


def test_unsupported_dtype_is_minus_2():
    d = td.Dispatcher("gemm", GPU)
    with pytest.raises(td.UnsupportedProblemError) as info:
        d.select(td.GemmProblem(256, 256, 256, DType.FP32))
    assert info.value.status == -2


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16, DType.FP8_E4M3])
def test_td_gemm_on_torch_tensors_runs_in_place_on_the_current_stream(dtype, gen):
    if not any(k.dtype is dtype and k.layout.key == "rcr" for k in kernels()):
        pytest.skip(f"this build has no {dtype.key} rcr kernel")
    M, N, K = 1000, 1536, 2048
    a = (torch.rand(M, K, generator=gen, device="cuda") * 2 - 1).to(tdtype(dtype))
    b = (torch.rand(N, K, generator=gen, device="cuda") * 2 - 1).to(tdtype(dtype)).t()  # column-major
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=tdtype(dtype.out))
        result = td.gemm(a, b, out=out)
        assert result is out
        fresh = td.gemm(a, b)
    stream.synchronize()
    assert isinstance(fresh, torch.Tensor) and fresh.is_cuda and fresh.dtype == tdtype(dtype.out)
    ref = a.double() @ b.double()
    mag = a.double().abs() @ b.double().abs()
    for got in (out, fresh):
        assert bool(((got.double() - ref).abs() <= reference.tolerance(dtype, K) * mag + reference.underflow(dtype)
                     + reference.FLOOR).all())


def test_td_gemm_torch_fast_path_checks_every_call_and_keeps_layouts_apart(gen):
    """The torch fast path caches its decisions under the tensors' metadata: a repeated call
    with a wrong `out` still raises, and row-, column-major and padded operands of the same
    sizes each get their own (correct) answer."""
    M, N, K = 256, 192, 128
    base = (torch.rand(M, K + 8, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
    variants = {"rcr": (base[:, :K].contiguous(), None), "padded A": (base[:, :K], None),
                "rrr": (base[:, :K].contiguous(), "row-major B")}
    bt = (torch.rand(N, K, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
    for label, (a, b_kind) in variants.items():
        b = bt.t().contiguous() if b_kind else bt.t()
        ref = a.double() @ b.double()
        tol = (reference.tolerance(DType.BF16, K) * (a.double().abs() @ b.double().abs())
               + reference.underflow(DType.BF16) + reference.FLOOR)
        for _ in range(3):
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            got = td.gemm(a, b, out=out)
            assert got is out
            assert bool(((out.double() - ref).abs() <= tol).all()), label
    a, b = variants["rcr"][0], bt.t()
    for bad in (torch.empty((M, N), device="cuda", dtype=torch.float16),
                torch.empty((M, N + 1), device="cuda", dtype=torch.bfloat16)):
        for _ in range(2):
            with pytest.raises(td.InvalidArgumentError):
                td.gemm(a, b, out=bad)
    with pytest.raises(td.InvalidArgumentError):
        td.gemm(a, bt)  # (M, K) @ (N, K): inner sizes differ


def test_td_gemm_torch_fast_path_relaunch_follows_pointers_and_sizes(gen):
    """A repeated problem on the same pointers goes straight to the launch (the C side keeps
    the last ranked list and the last CUTLASS parameters): calls that alternate between
    sizes on the same memory, and between fresh tensors of one size, each get their own
    answer."""
    K = 256
    a_full = (torch.rand(512, K, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
    b = ((torch.rand(384, K, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)).t()
    out_full = torch.empty((512, 384), device="cuda", dtype=torch.bfloat16)

    def expect(a, b, got):
        ref = a.double() @ b.double()
        tol = (reference.tolerance(DType.BF16, K) * (a.double().abs() @ b.double().abs())
               + reference.underflow(DType.BF16) + reference.FLOOR)
        assert bool(((got.double() - ref).abs() <= tol).all())

    for M in (512, 128, 512, 64, 128):  # one base pointer, different M (and the out views with it)
        out = out_full[:M]
        out.fill_(float("nan"))
        assert td.gemm(a_full[:M], b, out=out) is out
        expect(a_full[:M], b, out)
    for _ in range(3):  # fresh inputs and a fresh output every call
        a = (torch.rand(512, K, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
        got = td.gemm(a, b)
        assert got.shape == (512, 384) and got.dtype == torch.bfloat16
        expect(a, b, got)
    outs = [torch.empty((512, 384), device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    inputs = [a_full, a]
    for i in range(6):  # outputs and inputs alternating between two buffers (each launch kept)
        out, src = outs[i % 2], inputs[(i // 2) % 2]
        out.fill_(float("nan"))
        assert td.gemm(src, b, out=out) is out
        expect(src, b, out)


def test_td_gemm_on_numpy_takes_the_host_path(rng):
    from tiledispatch.arrays import random
    a = random((300, 200), DType.BF16, rng)
    b = np.asfortranarray(random((200, 100), DType.BF16, rng))
    c = td.gemm(a, b, target=GPU)
    ref, mag = reference.gemm(a, b)
    assert reference.compare(c, ref, mag, DType.BF16, 200)["ok"]
    lib = td.Dispatcher("gemm", GPU).lib
    assert lib.td_legacy_dtype() == DType.BF16.code


def test_workspace_is_sized_by_the_kernel(gen):
    d = td.Dispatcher("gemm", GPU)
    sk = next(k for k in kernels() if k.variant is GemmVariant.STREAM_K)
    problem = td.GemmProblem(512, 512, 16384, sk.dtype, sk.layout)
    need = d.workspace_size(problem, sk.name)
    assert need > 0
    ws = torch.empty(need, dtype=torch.uint8, device="cuda")
    a, b = operands(sk, 512, 512, 16384, gen)
    c = torch.empty(512, 512, device="cuda", dtype=tdtype(sk.dtype.out))
    with pytest.raises(td.KernelRejectedError):
        d.run(problem, a.data_ptr(), b.data_ptr(), c.data_ptr(), kernel=sk.name, workspace=ws.data_ptr(),
              workspace_bytes=need - 1)
    d.run(problem, a.data_ptr(), b.data_ptr(), c.data_ptr(), kernel=sk.name, workspace=ws.data_ptr(),
          workspace_bytes=need)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert float((c.double() - ref).norm() / ref.norm()) < 1e-2
