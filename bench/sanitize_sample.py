"""One GPU kernel of every family (GEMM: algorithm, variant, schedule, padding, element size;
conv: family, direction, rank, element size) on small problems, each checked against float64,
for `compute-sanitizer --tool memcheck` and `--tool racecheck` (bench/gpu_run.sh sanitize)."""
import dataclasses
import math

import numpy as np

import tiledispatch as td
from tiledispatch import reference
from tiledispatch.arrays import random
from tiledispatch.codegen import Direction
from tiledispatch.codegen.families.cutlass import fp8_tile_slices
from tiledispatch.codegen.model import GemmVariant

d = td.Dispatcher("gemm")
rng = np.random.default_rng(1)
sample = {}
for k in d.kernels:
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
blockwise = [k for k in d.kernels if k.knobs.algorithm == "cutlass_blockwise"]
if blockwise:
    try:
        import torch
    except ImportError:
        torch = None
        print("cutlass_blockwise: not sampled (torch is needed for its device operands)", flush=True)
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

# ---- convolution: one kernel of every (family, direction, rank) on a small problem it takes ----
cd = td.Dispatcher("conv")


def conv_candidates(ndim: int):
    """Small problems of every class, as (N, G, C, K, stride, pad, dilation, filter); the first
    one a kernel supports is its sample. Spatial sizes are odd so that partial tiles run."""
    for N, G, C, K, s, p, dl, f in ((2, 16, 1, 1, 1, 1, 1, 3),     # depthwise
                                    (2, 16, 1, 1, 2, 1, 1, 3),     # depthwise, stride 2
                                    (2, 4, 8, 8, 1, 1, 1, 3),      # 8 channels a group
                                    (2, 4, 16, 16, 2, 1, 1, 3),    # 16 a group, stride 2
                                    (2, 2, 32, 32, 1, 1, 1, 3),    # many channels a group
                                    (2, 1, 64, 64, 1, 0, 1, 1),    # dense 1x1
                                    (2, 1, 32, 64, 2, 1, 1, 3),    # dense strided 3x3
                                    (2, 2, 4, 4, 1, 2, 2, 3),      # dilated
                                    (2, 8, 2, 2, 1, 1, 1, 3)):
        yield td.ConvProblem(N, G, C, K, (11,) * ndim, (f,) * ndim, s, p, dl)


conv_sample = {}
for k in cd.kernels:
    conv_sample.setdefault((k.family, k.direction, k.ndim, k.dtype.nbytes), k)
for k in conv_sample.values():
    problem = None
    for base in conv_candidates(k.ndim):
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
print(f"sanitizer sample: {len(sample)} gemm kernels, {len(conv_sample)} conv kernels", flush=True)
