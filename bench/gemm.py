"""GEMM on the GPU against cuBLAS (torch.matmul) and cuBLASLt fp8 (torch._scaled_mm), same run.

    python bench/gemm.py [--dtypes bf16 fp16 fp8_e4m3] [--repeat 20] [--json OUT]

For each shape of the suite and each dtype: TFLOP/s of the dispatcher's pick, of the best
compiled variant (every kernel that supports the problem, by name), and of torch; the
ratios and their geomean over the aligned shapes. Timing: CUDA events around each run,
L2 flushed before each (a 512 MiB write, which also keeps the GPU busy while the host
issues the launch), median of --repeat after warm-up. Inputs uniform in [-1, 1).
Also the host overhead of one td.gemm call (and of the custom op torch.ops.tiledispatch.gemm) on torch tensors, and a chain of back-to-back
2048³ GEMMs (programmatic dependent launch; compare a run with --no-pdl).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

import tiledispatch as td
from tiledispatch.codegen import DType
from tiledispatch import selection

SHAPES = [
    (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
    (4096, 6144, 4096), (4096, 28672, 4096), (4096, 4096, 14336), (16, 6144, 4096),
    (64, 28672, 4096), (128, 4096, 14336), (1000, 1000, 1000), (2304, 2304, 2304),
    (3000, 5000, 7168), (8192, 8192, 256), (512, 512, 65536), (4095, 4095, 4095),
]
MISALIGNED = [(4095, 4095, 4095), (4097, 4097, 4097), (8191, 8191, 8191)]
# decode and other skinny shapes (M small: B's bytes are the time), for the skinny kernels
DECODE = [(16, 6144, 4096), (64, 28672, 4096), (128, 4096, 14336), (1, 4096, 4096), (8, 4096, 14336),
          (16, 28672, 4096), (32, 8192, 8192), (16, 4096, 4096), (48, 12288, 4096)]
TORCH = {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP8_E4M3: torch.float8_e4m3fn}


def aligned(shape, dtype) -> bool:
    return all(v * dtype.nbytes % 16 == 0 for v in shape)


class Timer:
    def __init__(self, repeat: int):
        self.repeat = repeat
        self.flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")

    def once(self, fn) -> float:
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def __call__(self, fn) -> float:
        return self.many({"x": fn})["x"]

    def many(self, fns: dict) -> dict:
        """Median ms of each function, timed round-robin so that clock and thermal drift
        fall on all of them alike."""
        for fn in fns.values():
            for _ in range(3):
                fn()
        times = {name: [] for name in fns}
        for _ in range(self.repeat):
            for name, fn in fns.items():
                times[name].append(self.once(fn))
        return {name: statistics.median(t) for name, t in times.items()}


def operands(M, N, K, dtype):
    a = (torch.rand(M, K, device="cuda") * 2 - 1).to(TORCH[dtype])
    b = (torch.rand(N, K, device="cuda") * 2 - 1).to(TORCH[dtype]).t()  # (K, N) column-major: rcr
    return a, b


def vendor(a, b, dtype, fast=False):
    if dtype in (DType.FP8_E4M3, DType.FP8_E5M2):
        one = torch.ones((), device="cuda")
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                        use_fast_accum=fast)
    return lambda: torch.matmul(a, b)


def host_overhead(d) -> tuple:
    # host overhead of one td.gemm call on torch tensors, two ways:
    #  burst: the host time per call of 200 calls issued without a sync (fewer than the
    #    launch queue holds, so the GPU never pushes back): pure host cost;
    #  sync: one call + synchronize, median, minus the kernel's own event time: what a
    #    caller waits beyond the kernel (launch latency included, for torch too).
    a, b = operands(256, 256, 256, DType.BF16)
    out = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    calls = {"td.gemm": lambda: td.gemm(a, b, out=out), "torch.matmul": lambda: torch.matmul(a, b, out=out),
             "td.gemm, a new output each call": lambda: td.gemm(a, b),
             "torch.matmul, a new output each call": lambda: torch.matmul(a, b)}
    import tiledispatch.torch  # noqa: F401  (registers torch.ops.tiledispatch)
    calls["torch.ops.tiledispatch.gemm (the custom op), a new output each call"] = \
        lambda: torch.ops.tiledispatch.gemm(a, b, 1.0)
    kept = [None]  # `c = td.gemm(a, b)` in a loop: the last output lives while the next is made

    def keep(c):
        kept[0] = c
    calls["td.gemm, the last output kept"] = lambda: keep(td.gemm(a, b))
    calls["torch.matmul, the last output kept"] = lambda: keep(torch.matmul(a, b))
    import ctypes
    from tiledispatch import _ffi
    cp = _ffi.TdGemmProblem(256, 256, 256, DType.BF16.code, 0, a.stride(0), b.stride(1), out.stride(0), 1.0, 0, 0, 0)
    run, ref, pa, pb, pc = d.lib.td_gemm_run, ctypes.byref(cp), a.data_ptr(), b.data_ptr(), out.data_ptr()
    stream = torch.cuda.current_stream().cuda_stream
    named = d.select(td.GemmProblem(256, 256, 256, DType.BF16, "rcr", a.stride(0), b.stride(1), out.stride(0))).encode()
    calls["C call, selection in C"] = lambda: run(ref, None, pa, pb, pc, None, 0, stream, None)
    calls["C call, kernel named"] = lambda: run(ref, named, pa, pb, pc, None, 0, stream, None)
    if hasattr(d.lib, "td_gemm_launch"):  # ABI 2 on; this script also measures older builds
        launch, addr = d.lib.td_gemm_launch, ctypes.addressof(cp)
        calls["C td_gemm_launch, selection in C"] = lambda: launch(addr, None, pa, pb, pc, stream)
        calls["C td_gemm_launch, kernel named"] = lambda: launch(addr, named, pa, pb, pc, stream)
    calls["torch out.zero_() (calibration)"] = lambda: out.zero_()  # one bare kernel launch through torch
    warm = []  # the kernel's own time with warm L2, as in the sync loop below
    for _ in range(200):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(100000)  # the GPU busy while the host issues the launch: events time the kernel only
        e0.record()
        calls["td.gemm"]()
        e1.record()
        e1.synchronize()
        warm.append(e0.elapsed_time(e1) * 1e3)
    kernel_us = statistics.median(warm)
    # the calls take turns, round after round, so that a slow spell of the host (other
    # tenants, clock changes) falls on all of them alike; medians, and the fastest round
    bursts = {label: [] for label in calls}
    syncs = {label: [] for label in calls}
    for call in calls.values():
        for _ in range(50):
            call()
    for _ in range(25):
        for label, call in calls.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                call()
            bursts[label].append((time.perf_counter() - t0) / 200 * 1e6)
            torch.cuda.synchronize()
            for _ in range(20):
                t0 = time.perf_counter()
                call()
                torch.cuda.synchronize()
                syncs[label].append((time.perf_counter() - t0) * 1e6)
    host = {label: {"burst_us": statistics.median(bursts[label]), "burst_min_us": min(bursts[label]),
                    "sync_us": statistics.median(syncs[label]), "sync_min_us": min(syncs[label])} for label in calls}
    for label, fn in (("ctypes call alone", lambda f=d.lib.td_abi_version: f()),
                      ("C supports check, no launch", lambda f=d.lib.td_gemm_is_supported: f(ref, named))):
        t0 = time.perf_counter()
        for _ in range(20000):
            fn()
        host[label] = {"burst_us": (time.perf_counter() - t0) / 20000 * 1e6}
    host_td = host["td.gemm"]["burst_us"]
    host_torch = host["torch.matmul"]["burst_us"]
    return host, kernel_us, host_td, host_torch


def chain_us(n=2048, calls=200, rounds=15) -> dict:
    """µs a GEMM of back-to-back calls (n³ bf16, the output alternating between two
    tensors) timed by one pair of events around the chain, td.gemm and torch.matmul taking
    turns: what a programmatic dependent launch overlaps (compare with --no-pdl)."""
    a, b = operands(n, n, n, DType.BF16)
    outs = [torch.empty(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    fns = {"td.gemm": lambda i: td.gemm(a, b, out=outs[i & 1]),
           "torch.matmul": lambda i: torch.matmul(a, b, out=outs[i & 1])}
    times = {name: [] for name in fns}
    for fn in fns.values():
        for i in range(20):
            fn(i)
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(calls):
                fn(i)
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / calls)
    return {name: statistics.median(t) for name, t in times.items()}


def split_sweep(d, timer, stream, dtype, shape, kernels, splits, label, width, digits) -> dict:
    """TFLOP/s of each kernel at each split count (the problem's `splits`), timed together;
    prints a line a kernel and returns {"kernel,splits": TFLOP/s}."""
    M, N, K = shape
    a, b = operands(M, N, K, dtype)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16 if dtype.nbytes == 1 else TORCH[dtype])
    fns = {}
    for k in kernels:
        for z in splits:
            p = td.GemmProblem(M, N, K, dtype, "rcr", a.stride(0), b.stride(1), c.stride(0), splits=z)
            fns[(k.name, z)] = lambda p=p, k=k: d.run(p, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                                      kernel=k.name, stream=stream, timed=False)
    times = timer.many(fns)
    tflops = {key: 2.0 * M * N * K / (t * 1e-3) / 1e12 for key, t in times.items()}
    for k in kernels:
        cells = "  ".join(f"{z}:{tflops[(k.name, z)]:{width}.{digits}f}" for z in splits)
        print(f"  {label}{M}x{N}x{K} {k.name}\n    {cells}", flush=True)
    return {f"{n},{z}": v for (n, z), v in tflops.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp16", "fp8_e4m3"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--shapes", default="suite", choices=("suite", "quick", "decode"))
    parser.add_argument("--no-knobs", dest="knobs", action="store_false",
                        help="skip the raster/swizzle and stream-K split sweeps")
    parser.add_argument("--no-pdl", dest="pdl", action="store_false",
                        help="launch every kernel the usual way, not as a programmatic dependent "
                             "(td.set_options(pdl=False))")
    args = parser.parse_args()
    td.set_options(pdl=args.pdl)
    timer = Timer(args.repeat)
    d = td.Dispatcher("gemm")
    print(f"device {torch.cuda.get_device_name()}, target {d.target}, {len(d.kernels)} kernels", flush=True)
    tables = selection.table_paths(d.target)
    print(f"tuning tables: {', '.join(tables) if tables else 'none (the cost model picks)'}", flush=True)
    try:
        host, kernel_us, host_td, host_torch = host_overhead(d)  # first: a cut-short run still has it
        print(f"host: td.gemm {host_td:.1f} us per call, torch.matmul {host_torch:.1f} us (burst)", flush=True)
    except td.UnsupportedProblemError:
        host, kernel_us, host_td, host_torch = {}, 0.0, None, None
        print("host: not measured (no kernel of this build takes the bf16 256^3 problem)", flush=True)
    try:
        chain = chain_us()
        pdl = "on" if td.options()["pdl"] else "off (--no-pdl)"
        print(f"chain of 200 back-to-back 2048^3 bf16 GEMMs: td.gemm {chain['td.gemm']:.2f} us a GEMM, "
              f"torch.matmul {chain['torch.matmul']:.2f} (programmatic dependent launch {pdl})", flush=True)
    except td.UnsupportedProblemError:
        chain = {}
        print("chain: not measured (no kernel of this build takes the bf16 2048^3 problem)", flush=True)
    stream = torch.cuda.current_stream().cuda_stream
    named_only = {k.name for k in d.kernels if getattr(k, "named_only", False)}
    rows, records, failures = [], [], []
    shapes = {"suite": SHAPES, "quick": SHAPES[:4], "decode": DECODE}[args.shapes]
    extra = [s for s in MISALIGNED if s not in shapes] if args.shapes != "decode" else []
    for dtype in (DType.parse(x) for x in args.dtypes):
        for shape in shapes + extra:
            M, N, K = shape
            if dtype.nbytes == 1 and not aligned(shape, dtype):
                continue  # torch._scaled_mm needs 16-byte aligned sizes
            a, b = operands(M, N, K, dtype)
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16 if dtype.nbytes == 1 else TORCH[dtype])
            flops = 2.0 * M * N * K
            problem = td.GemmProblem(M, N, K, dtype, "rcr", a.stride(0), b.stride(1), c.stride(0))
            fns = {"vendor": vendor(a, b, dtype)}
            if dtype.nbytes == 1:
                fns["vendor_fast"] = vendor(a, b, dtype, fast=True)
            for k in d.kernels:
                if k.dtype is not dtype or k.layout.key != "rcr" or not d.is_supported(problem, k.name):
                    continue
                if getattr(k.knobs, "fusion", "none") != "none":
                    continue  # the fused-epilogue variants: bench/gemm_epilogue.py
                fns[k.name] = lambda k=k: d.run(problem, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                                kernel=k.name, stream=stream, timed=False)
            for name in [n for n in fns if not n.startswith("vendor")]:  # a kernel that fails is named, not hidden
                try:
                    for _ in range(2):  # twice: the second launch reuses the first one's parameters
                        fns[name]()
                except td.TileDispatchError as err:
                    print(f"  FAILED {dtype.key} {shape} {name}: {err}", flush=True)
                    failures.append({"dtype": dtype.key, "shape": shape, "kernel": name, "error": str(err)})
                    del fns[name]
            per_kernel = timer.many(fns)
            t_vendor = per_kernel.pop("vendor")
            t_vendor_fast = per_kernel.pop("vendor_fast", None)
            # named-only kernels (fp8 fast accumulation) against cuBLASLt's fast mode, not its default
            fast = {n: t for n, t in per_kernel.items() if n in named_only}
            per_kernel = {n: t for n, t in per_kernel.items() if n not in named_only}
            try:
                pick = d.select(problem)  # tuning tables first (TILEDISPATCH_TUNING, shipped), then the model
                model = d.model_select(problem)  # the cost model alone
            except td.UnsupportedProblemError:
                pick = model = None
            if not per_kernel or pick is None:
                print(f"{dtype.key} {shape}: no kernel", flush=True)
                continue
            if pick not in per_kernel:
                print(f"{dtype.key} {shape}: the pick {pick} FAILED", flush=True)
                continue
            best = min(per_kernel, key=per_kernel.get)
            tf = lambda ms: flops / (ms * 1e-3) / 1e12  # noqa: E731
            row = {"dtype": dtype.key, "shape": shape, "aligned": aligned(shape, dtype),
                   "vendor_tflops": tf(t_vendor), "pick": pick, "pick_tflops": tf(per_kernel[pick]),
                   "best": best, "best_tflops": tf(per_kernel[best]),
                   "model": model, "model_tflops": tf(per_kernel[model]) if model in per_kernel else None,
                   "kernels": {n: tf(t) for n, t in per_kernel.items()}}
            if t_vendor_fast is not None:
                row["vendor_fast_tflops"] = tf(t_vendor_fast)
            if fast:
                best_fast = min(fast, key=fast.get)
                row.update(best_fast=best_fast, best_fast_tflops=tf(fast[best_fast]),
                           fast_kernels={n: tf(t) for n, t in fast.items()})
            rows.append(row)
            print(f"{dtype.key:9} {'x'.join(map(str, shape)):>18}  torch {row['vendor_tflops']:7.1f}  "
                  f"pick {row['pick_tflops']:7.1f} ({row['pick_tflops'] / row['vendor_tflops']:.2f}x)  "
                  f"best {row['best_tflops']:7.1f} ({row['best_tflops'] / row['vendor_tflops']:.2f}x)  {pick}",
                  flush=True)
            if "best_fast" in row:
                print(f"{'':28} fast accumulation: torch {row['vendor_fast_tflops']:7.1f}  best "
                      f"{row['best_fast_tflops']:7.1f} ({row['best_fast_tflops'] / row['vendor_fast_tflops']:.2f}x)  "
                      f"{row['best_fast']}", flush=True)
            del a, b, c

    # run-time knobs of one compiled kernel: tile raster order and swizzle, on large shapes
    if "bf16" in args.dtypes and args.shapes == "suite" and args.knobs:
        print("\nraster / swizzle sweep (bf16, the dispatcher's pick; TFLOP/s)")
        for M, N, K in [(8192, 8192, 8192), (4096, 28672, 4096), (3000, 5000, 7168), (2304, 2304, 2304)]:
            a, b = operands(M, N, K, DType.BF16)
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            base = td.GemmProblem(M, N, K, DType.BF16, "rcr", a.stride(0), b.stride(1), c.stride(0))
            pick = d.select(base)
            fns = {}
            for raster in (0, 1, 2):
                for swizzle in (1, 2, 4, 8):
                    p = td.GemmProblem(M, N, K, DType.BF16, "rcr", a.stride(0), b.stride(1), c.stride(0),
                                       raster=raster, swizzle=swizzle)
                    fns[(raster, swizzle)] = lambda p=p: d.run(p, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                                               kernel=pick, stream=stream, timed=False)
            times = timer.many(fns)
            flops = 2.0 * M * N * K
            cells = "  ".join(f"{'hMN'[r]}{z}:{flops / (t * 1e-3) / 1e12:5.0f}" for (r, z), t in times.items())
            print(f"  {M}x{N}x{K} {pick}\n    {cells}", flush=True)
            records.append({"shape": [M, N, K], "pick": pick,
                            "raster_swizzle": {f"{r},{z}": flops / (t * 1e-3) / 1e12 for (r, z), t in times.items()}})
            del a, b, c

    # split-K counts of the stream-K kernels on skinny and long-K shapes
    if "bf16" in args.dtypes and args.shapes == "suite" and args.knobs:
        print("\nstream-K split sweep (bf16; TFLOP/s by splits, 0 = the kernel's choice: its own split count or CUTLASS's heuristic)")
        for shape in [(512, 512, 65536), (256, 256, 65536), (128, 4096, 14336), (16, 6144, 4096), (1000, 1000, 1000),
                      (2304, 2304, 2304)]:
            sk = [k for k in d.kernels if k.dtype is DType.BF16 and k.layout.key == "rcr" and k.variant.key == "stream_k"]
            by_split = split_sweep(d, timer, stream, DType.BF16, shape, sk, (0, 2, 4, 8, 16, 32), "", 5, 0)
            records.append({"shape": list(shape), "splits": by_split})

    # split counts of the skinny kernels (our decode GEMM) on decode shapes
    if args.knobs and args.shapes in ("suite", "decode"):
        print("\nskinny split sweep (TFLOP/s by splits, 0 = the kernel's choice)")
        for dtype in (DType.parse(x) for x in args.dtypes):
            for shape in [(16, 6144, 4096), (1, 4096, 4096), (64, 28672, 4096), (16, 4096, 4096)]:
                sk = [k for k in d.kernels if k.dtype is dtype and k.knobs.algorithm == "skinny"]
                if sk:
                    by_split = split_sweep(d, timer, stream, dtype, shape, sk, (0, 1, 2, 4, 8), f"{dtype.key} ", 6, 1)
                    records.append({"dtype": dtype.key, "shape": list(shape), "skinny_splits": by_split})

    print("\nsummary (ratio = TFLOP/s over torch in the same run)")
    if failures:
        print(f"  {len(failures)} kernel runs FAILED (see above); those kernels are left out of 'best' on their shapes")
    for dtype in args.dtypes:
        mine = [r for r in rows if r["dtype"] == dtype and r["aligned"]]
        if mine:
            gm = lambda key: math.exp(statistics.mean(math.log(r[key] / r["vendor_tflops"]) for r in mine))  # noqa: E731
            worst = min(mine, key=lambda r: r["pick_tflops"] / r["vendor_tflops"])
            print(f"  {dtype}: aligned shapes {len(mine)}, geomean pick {gm('pick_tflops'):.3f}x, best {gm('best_tflops'):.3f}x; "
                  f"lowest pick {worst['pick_tflops'] / worst['vendor_tflops']:.2f}x at {worst['shape']}")
            if all("best_fast" in r for r in mine):
                gf = math.exp(statistics.mean(math.log(r["best_fast_tflops"] / r["vendor_fast_tflops"]) for r in mine))
                print(f"  {dtype}: fast accumulation, best against torch's use_fast_accum=True {gf:.3f}x")
            if tables and all(r["model_tflops"] for r in mine):
                print(f"  {dtype}: the cost model alone (no tuning table) {gm('model_tflops'):.3f}x")
        for r in rows:
            if r["dtype"] == dtype and not r["aligned"]:
                print(f"  {dtype} misaligned {r['shape']}: pick {r['pick_tflops']:.1f} vs torch {r['vendor_tflops']:.1f} "
                      f"TFLOP/s = {r['pick_tflops'] / r['vendor_tflops']:.2f}x")
    if host:
        print(f"  host, 256^3 bf16 (kernel alone {kernel_us:.1f} us; burst = host time per call of 200 unsynchronized "
              f"calls, sync = one call + synchronize, minus the kernel):")
    for label, h in host.items():
        sync = f", sync {h['sync_us']:.1f} us ({h['sync_us'] - kernel_us:+.1f} over the kernel)" if "sync_us" in h else ""
        fastest = (f"; fastest round: burst {h['burst_min_us']:.1f}, sync {h['sync_min_us'] - kernel_us:+.1f}"
                   if "burst_min_us" in h else "")
        print(f"    {label:40s} burst {h['burst_us']:.1f} us{sync}{fastest}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "failures": failures, "knob_sweep": records, "host_us": host_td, "host": host,
                       "torch_host_us": host_torch, "kernel_us": kernel_us, "chain_us": chain}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
