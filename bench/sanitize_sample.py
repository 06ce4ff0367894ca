"""One GPU kernel of every family (GEMM: algorithm, variant, schedule, padding, element size,
fused epilogue; grouped GEMM; conv: family, direction, rank, element size) on small problems,
each checked against float64, for `compute-sanitizer --tool memcheck` and `--tool racecheck`
(bench/gpu_run.sh sanitize).

    python3 bench/sanitize_sample.py [ours|vendor|all]

`ours` leaves out the vendor families (cuDNN, cuBLASLt: their kernels are NVIDIA's, our code
around them is host code), `vendor` runs only those; the default runs every family."""
import dataclasses
import math
import sys

import numpy as np

import tiledispatch as td
from tiledispatch import reference
from tiledispatch.arrays import random, torch_dtype
from tiledispatch.codegen import Direction, DType
from tiledispatch.codegen.families.cutlass import fp8_tile_slices
from tiledispatch.codegen.families.vendor import Vendor
from tiledispatch.codegen.model import GemmVariant

WHICH = sys.argv[1] if len(sys.argv) > 1 else "all"
if WHICH not in ("ours", "vendor", "all"):
    sys.exit(f"usage: sanitize_sample.py [ours|vendor|all], got {WHICH!r}")


def wanted(k) -> bool:
    return WHICH == "all" or (WHICH == "vendor") == isinstance(k.knobs, Vendor)


d = td.Dispatcher("gemm")
rng = np.random.default_rng(1)
sample = {}
fused = {}
for k in d.kernels:
    if not wanted(k):
        continue
    if k.knobs.algorithm == "cutlass" and k.knobs.fusion != "none":  # a visitor tree: the torch sample below
        fused.setdefault((k.knobs.fusion, k.knobs.aux, k.knobs.out, k.dtype.nbytes), k)
        continue
    if k.knobs.algorithm == "cutlass_blockwise":
        continue  # block-wise scales only, on device pointers: the sample below
    if k.variant is GemmVariant.GROUPED:  # grouped calls only, on device arrays (tests/test_gpu_grouped_gemm.py)
        continue
    # our fp8 mainloop in N slices (bindings/cuda/fp8_mainloop.cuh) is a kind of its own
    cutlass = k.knobs.algorithm == "cutlass"
    sliced = cutlass and k.dtype.nbytes == 1 and k.knobs.promote == 1 and fp8_tile_slices(k.tile, k.knobs.schedule) > 1
    key = (k.knobs.algorithm, k.variant, cutlass and k.knobs.schedule, cutlass and k.knobs.pad, k.dtype.nbytes, sliced)
    sample.setdefault(key, k)
for k in sample.values():
    shapes = ((208, 144, 272), (64, 64, 64))
    if getattr(k.knobs, "pad", False):
        shapes = ((201, 133, 77),)
    elif k.variant is GemmVariant.SPLIT_K:
        shapes = ((208, 144, 272), (64, 64, 8192))  # its own split count: 1, and several parts
    elif k.knobs.algorithm == "skinny":
        shapes = ((16, 300, 4096), (5, 64, 64), (40, 72, 1040))  # split-K, one step, two row blocks
    for M, N, K in shapes:
        a = random((M, K), k.dtype, rng)
        b = random((K, N), k.dtype, rng)
        b_mem = b if k.layout.b_row else np.asfortranarray(b)
        a_mem = a if k.layout.a_row else np.asfortranarray(a)
        c = td.gemm(a_mem, b_mem, kernel=k.name)
        ref, mag = reference.gemm(a, b)
        ok = reference.compare(c, ref, mag, k.dtype, K)["ok"]
        print(f"{k.name} {M}x{N}x{K}: {'ok' if ok else 'MISMATCH'}", flush=True)
        assert ok

# ---- fp8 with block-wise scales (cutlass_blockwise): device operands, so through torch where it is installed ----
blockwise = [k for k in d.kernels if k.knobs.algorithm == "cutlass_blockwise" and wanted(k)]
grouped = {}
for k in d.kernels:
    if k.variant is GemmVariant.GROUPED and wanted(k):
        grouped.setdefault((k.knobs.algorithm, k.knobs.schedule, k.dtype.nbytes), k)
torch = None
if blockwise or fused or grouped:
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("no CUDA device")
    except ImportError:
        torch = None
        print("cutlass_blockwise, fused epilogues, grouped: not sampled (torch with a CUDA device "
              "is needed for their device operands)", flush=True)
    for k in blockwise if torch else ():
        M, N, K = 201, 136, 1040  # partial tiles, a partial last scale block along K and N
        fp8 = torch.float8_e4m3fn if k.dtype.key == "fp8_e4m3" else torch.float8_e5m2
        a = (torch.rand(M, K, device="cuda") * 4 - 2).to(fp8)
        b = (torch.rand(N, K, device="cuda") * 4 - 2).to(fp8).t()
        sa = torch.rand(M, -(-K // 128), device="cuda") + 0.5
        sb = torch.rand(-(-K // 128), -(-N // 128), device="cuda") + 0.5
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        d.run(td.GemmProblem(M, N, K, k.dtype, "rcr", K, K, N, block_scale=True), a.data_ptr(), b.data_ptr(),
              out.data_ptr(), kernel=k.name, epilogue={"scale_a": sa.data_ptr(), "scale_b": sb.data_ptr()})
        torch.cuda.synchronize()
        a64 = a.double() * sa.double().repeat_interleave(128, 1)[:, :K]
        b64 = b.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:K, :N]
        ok = reference.compare(out.float().cpu().numpy(), (a64 @ b64).cpu().numpy(),
                               (a64.abs() @ b64.abs()).cpu().numpy(), k.dtype, K)["ok"]
        print(f"{k.name} {M}x{N}x{K}: {'ok' if ok else 'MISMATCH'}", flush=True)
        assert ok

# ---- fused epilogues (visitor trees): beta C, bias, the kernel's activation, aux, output type ----
def device_rand(shape, key, low=-1.0, high=1.0):
    return (torch.rand(*shape, device="cuda") * (high - low) + low).to(torch_dtype(DType.parse(key)))


def host64(t):
    return None if t is None else t.double().cpu().numpy()


for k in fused.values() if torch else ():
    M, N, K = 67, 40, 96
    out_key = k.knobs.out or k.dtype.out.key
    activation = None if k.knobs.fusion == "epilogue" else k.knobs.fusion
    a = device_rand((M, K), k.dtype.key)
    b = device_rand((N, K), k.dtype.key).t()
    c, bias = device_rand((M, N), out_key), device_rand((N,), out_key)
    result = td.gemm(a, b, c=c, beta=0.5, bias=bias, activation=activation, return_aux=k.knobs.aux,
                     out_dtype=k.knobs.out or None, kernel=k.name)
    got = result[0] if k.knobs.aux else result
    torch.cuda.synchronize()
    pre, ref, mag = reference.gemm_epilogue(host64(a), host64(b), beta=0.5, c=host64(c), bias=host64(bias),
                                            activation=activation or "none")
    # CUTLASS's activation functors use the GPU's fast tanh / exp (test_gpu_gemm_features' ACT_SLACK)
    ok = reference.compare_out(host64(got), ref, mag, out_key, K, 2e-3 if activation else 0.0)["ok"]
    if k.knobs.aux:
        ok = ok and reference.compare_out(host64(result[1]), pre, mag, out_key, K)["ok"]
    print(f"{k.name} {M}x{N}x{K} beta C + bias + {activation or 'no activation'}: {'ok' if ok else 'MISMATCH'}",
          flush=True)
    assert ok

# ---- grouped GEMM (pointer array): an empty group, partial tiles, one launch ----
for k in grouped.values() if torch else ():
    counts, K, N = (37, 0, 130, 5), 64, 72
    a = device_rand((sum(counts), K), k.dtype.key)
    b = device_rand((len(counts), N, K), k.dtype.key).transpose(1, 2)
    offsets = torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")
    got = td.grouped_gemm(a, b, offsets, kernel=k.name)
    torch.cuda.synchronize()
    ok, start = True, 0
    for g, end in enumerate(np.cumsum(counts)):
        if end > start:
            ref, mag = reference.gemm(host64(a[start:end]), host64(b[g]))
            ok = ok and reference.compare(host64(got[start:end]), ref, mag, k.dtype, K)["ok"]
        start = end
    print(f"{k.name} groups {counts} x {N}x{K}: {'ok' if ok else 'MISMATCH'}", flush=True)
    assert ok

# ---- convolution: one kernel of every (family, direction, rank) on a small problem it takes ----
cd = td.Dispatcher("conv")


def conv_candidates(ndim: int, misaligned_first: bool):
    """Small problems of every class, as (N, G, C, K, stride, pad, dilation, filter); the first
    one a kernel supports is its sample (a kernel that pads channels: one whose channel counts
    are not multiples of 8 first). Spatial sizes are odd so that partial tiles run."""
    misaligned = ((2, 1, 3, 12, 2, 1, 1, 3),      # a 3-channel stem
                  (2, 1, 20, 36, 1, 0, 1, 1))     # a squeeze-excite 1x1
    for N, G, C, K, s, p, dl, f in misaligned * misaligned_first + (
                                    (2, 16, 1, 1, 1, 1, 1, 3),     # depthwise
                                    (2, 16, 1, 1, 2, 1, 1, 3),     # depthwise, stride 2
                                    (2, 4, 8, 8, 1, 1, 1, 3),      # 8 channels a group
                                    (2, 4, 16, 16, 2, 1, 1, 3),    # 16 a group, stride 2
                                    (2, 2, 32, 32, 1, 1, 1, 3),    # many channels a group
                                    (2, 1, 64, 64, 1, 0, 1, 1),    # dense 1x1
                                    (2, 1, 32, 64, 2, 1, 1, 3),    # dense strided 3x3
                                    (2, 2, 4, 4, 1, 2, 2, 3),      # dilated
                                    (2, 8, 2, 2, 1, 1, 1, 3)) + misaligned:
        yield td.ConvProblem(N, G, C, K, (11,) * ndim, (f,) * ndim, s, p, dl)


conv_sample = {}
for k in cd.kernels:
    if not wanted(k):
        continue
    # im2col's split-K GEMM and channel padding are kinds of their own
    kind = (getattr(k.knobs, "split_k", False), getattr(k.knobs, "pad", False))
    conv_sample.setdefault((k.family, kind, k.direction, k.ndim, k.dtype.nbytes), k)
for k in conv_sample.values():
    problem = None
    for base in conv_candidates(k.ndim, getattr(k.knobs, "pad", False)):
        base = dataclasses.replace(base, direction=k.direction, dtype=k.dtype)
        if cd.is_supported(base, k.name):
            problem = base
            break
    if problem is None:
        print(f"{k.name}: no sample problem supported, not run", flush=True)
        continue
    x = random(problem.input_shape, k.dtype, rng)
    w = random(problem.weight_shape, k.dtype, rng)
    dy = random(problem.output_shape, k.dtype, rng)
    common = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation, groups=problem.G,
                  kernel=k.name)
    if k.direction is Direction.FWD:
        got = td.conv(x, w, **common)
        ref, mag = reference.conv(problem, x=x, w=w)
    elif k.direction is Direction.BWD_DATA:
        got = td.conv(dy, w, direction="bwd_data", input_size=problem.input_size, **common)
        ref, mag = reference.conv(problem, dy=dy, w=w)
    else:
        got = td.conv(x, dy, direction="bwd_weight", filter_size=problem.filter_size, **common)
        ref, mag = reference.conv(problem, x=x, dy=dy)
    reduced = {Direction.FWD: problem.C * math.prod(problem.filter_size),   # the sum each output element is
               Direction.BWD_DATA: problem.K * math.prod(problem.filter_size),
               Direction.BWD_WEIGHT: problem.N * math.prod(problem.output_size)}[k.direction]
    ok = reference.compare(got, ref, mag, k.dtype, reduced)["ok"]
    print(f"{k.name} {problem.direction.key} G{problem.G} C{problem.C} K{problem.K} s{problem.stride[0]}: "
          f"{'ok' if ok else 'MISMATCH'}", flush=True)
    assert ok
print(f"sanitizer sample ({WHICH}): {len(sample)} gemm, {len(fused)} fused-epilogue, {len(grouped)} grouped, "
      f"{len(blockwise)} block-scaled gemm kernels, {len(conv_sample)} conv kernels", flush=True)
