"""A few GPU kernels on small problems, for `compute-sanitizer --tool memcheck`."""
import numpy as np

import tiledispatch as td
from tiledispatch import reference
from tiledispatch.arrays import random
from tiledispatch.codegen.families.cutlass import fp8_tile_slices
from tiledispatch.codegen.model import GemmVariant

d = td.Dispatcher("gemm")
rng = np.random.default_rng(1)
sample = {}
for k in d.kernels:
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
