"""cpu target against numpy's matmul (OpenBLAS) in the same run.

    python bench/cpu.py [--sizes 1024 2048] [--repeat 5]

For each size: fp32 GFLOP/s of the dispatcher's pick and of numpy (median of --repeat runs
after a warm-up, wall clock around the call), their ratio, and bf16 / fp16 GFLOP/s of the
same tile configuration as a fraction of its fp32 speed. Also the stream-K kernels.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tiledispatch as td
from tiledispatch.arrays import numpy_dtype, random
from tiledispatch.codegen import DType


def median_seconds(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    d = td.Dispatcher("gemm", "cpu")
    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        flops = 2.0 * n ** 3
        a32, b32 = random((n, n), DType.FP32, rng), random((n, n), DType.FP32, rng)
        t_np = median_seconds(lambda: a32 @ b32, args.repeat)
        pick = d.select(td.GemmProblem(n, n, n))
        config = td.codegen.config_from_name(pick)
        speeds = {}
        for dtype in (DType.FP32, DType.BF16, DType.FP16):
            name = td.GemmKernelConfig(dtype, config.layout, config.variant, config.reduction,
                                       config.tile, config.knobs, "cpu").name
            a, b = a32.astype(numpy_dtype(dtype)), np.asfortranarray(b32.astype(numpy_dtype(dtype)))
            c = np.empty((n, n), numpy_dtype(dtype.out))
            problem = td.GemmProblem(n, n, n, dtype, config.layout)
            speeds[dtype] = flops / median_seconds(lambda: d.run(problem, a, b, c, kernel=name), args.repeat) / 1e9
        sk = {}
        for k in d.kernels:
            if k.variant.key == "stream_k" and k.dtype is DType.FP32:
                c = np.empty((n, n), np.float32)
                b = np.asfortranarray(b32)
                problem = td.GemmProblem(n, n, n)
                sk[k.reduction.key] = flops / median_seconds(lambda: d.run(problem, a32, b, c, kernel=k.name), args.repeat) / 1e9
        rows.append((n, pick, flops / t_np / 1e9, speeds, sk))

    print(f"\ncpu GEMM, {len(args.sizes)} sizes, median of {args.repeat}; GFLOP/s")
    print(f"{'size':>6} {'numpy fp32':>11} {'td fp32':>8} {'ratio':>6} {'bf16':>7} {'bf16/fp32':>9} "
          f"{'fp16':>7} {'fp16/fp32':>9} {'sk atomic':>9} {'sk det':>7}  pick")
    for n, pick, np_speed, speeds, sk in rows:
        f32 = speeds[DType.FP32]
        print(f"{n:>6} {np_speed:>11.1f} {f32:>8.1f} {f32 / np_speed:>6.2f} {speeds[DType.BF16]:>7.1f} "
              f"{speeds[DType.BF16] / f32:>9.2f} {speeds[DType.FP16]:>7.1f} {speeds[DType.FP16] / f32:>9.2f} "
              f"{sk.get('atomic', 0):>9.1f} {sk.get('deterministic', 0):>7.1f}  {pick}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
