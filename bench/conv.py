"""Grouped / depthwise / dense convolution on the GPU against cuDNN (torch, bf16 or fp16,
channels-last, cudnn.benchmark = True) in the same process.

For each problem and direction: microseconds of the dispatcher's pick and of cuDNN
(L2 flushed before every run, round-robin, medians), TFLOP/s, the memory floor (bytes of
input + weight + output over the copy bandwidth), and the ratios.

    python3 bench/conv.py [--reps 30] [--json out.json] [--only NAME] [--pick-only] [--every]
                          [--dirs fwd,bwd_data,bwd_weight] [--split-k 1,2,3,4] [--dtype bf16|fp16]

The column `copy us` is a device-to-device copy of the problem's bytes (half read, half
written: cudaMemcpyAsync through torch) timed the same way, L2 flushed: what the timing
method gives a kernel that only moves those bytes. At these sizes it is 1.06-1.9x the floor
column (bytes / 4.27 TB/s, a large copy's bandwidth): a launch, its ramp and its tail.

--split-k also times each batch-split kernel (implicit ..._s<max>) at each listed slice
count (the problem's split_k), beside its own run-time choice.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import re
import statistics
import sys

import torch
import torch.nn.functional as F

import tiledispatch as td
from tiledispatch._cuda import device_targets

COPY_BW = 4.27e12  # bytes/s, device-to-device copy measured on this H200

# name, N, G, C, K (per group), input, filter, stride, padding, kind
PROBLEMS = [
    ("resnext50_s2", 32, 32, 4, 4, (56, 56), (3, 3), 1, 1, "grouped"),
    ("resnext101_32x8d", 32, 32, 8, 8, (56, 56), (3, 3), 1, 1, "grouped"),
    ("mbv2_dw3x3", 64, 144, 1, 1, (56, 56), (3, 3), 1, 1, "depthwise"),
    ("convnext_dw7x7", 32, 384, 1, 1, (28, 28), (7, 7), 1, 3, "depthwise"),
    ("dense3x3_256", 32, 1, 256, 256, (28, 28), (3, 3), 1, 1, "dense"),
    ("dense1x1_512_2048", 32, 1, 512, 2048, (14, 14), (1, 1), 1, 0, "dense"),
    ("grouped3d_g16", 8, 16, 16, 16, (8, 28, 28), (3, 3, 3), 1, 1, "grouped"),
    ("mamba_conv1d", 8, 4096, 1, 1, (2048,), (4,), 1, 3, "depthwise"),
]
# Run only when named with --only (not part of the suite): other depthwise sizes, to
# place the tensor-core depthwise kernel against the CUDA-core ones, and 2D grouped problems.
EXTRA = [
    ("dw5x5_28", 32, 384, 1, 1, (28, 28), (5, 5), 1, 2, "depthwise"),
    ("convnext_s3_dw7x7", 32, 768, 1, 1, (14, 14), (7, 7), 1, 3, "depthwise"),
    ("convnext_s1_dw7x7", 32, 192, 1, 1, (56, 56), (7, 7), 1, 3, "depthwise"),
    ("mbv2_dw3x3_28", 64, 192, 1, 1, (28, 28), (3, 3), 1, 1, "depthwise"),
    # 2D grouped at 16 channels a group, for the tiled_mma row-reuse loop
    ("grouped2d_g32c16_28", 32, 32, 16, 16, (28, 28), (3, 3), 1, 1, "grouped"),
    ("grouped2d_g16c16_56", 32, 16, 16, 16, (56, 56), (3, 3), 1, 1, "grouped"),
]
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
GRAD_INPUT = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv3d_input}
GRAD_WEIGHT = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}


def channels_last(t):
    """(N, *spatial, C) contiguous seen as torch's (N, C, *spatial): no copy."""
    return t.permute(0, t.dim() - 1, *range(1, t.dim() - 1))


def timed(fn, flush):
    """Kernel time of one call: L2 flushed, then the GPU kept busy (a 0.3 ms spin) while
    the host enqueues the call, so host overhead does not count for either side."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.zero_()
    torch.cuda._sleep(600_000)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e3  # us


@functools.lru_cache(maxsize=None)
def copy_time(nbytes, reps, flush):
    """A device copy of nbytes of traffic (half read, half written), timed as the kernels are:
    once per problem size, not once per direction."""
    half = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    other = torch.empty_like(half)
    return statistics.median([timed(lambda: other.copy_(half), flush) for _ in range(max(5, reps // 3))])


def bench_problem(prob, direction, reps, flush, d, target, others=True, split_ks=(), dtype="bf16"):
    name, N, G, C, K, inp, fil, st, pad, kind = prob
    nd = len(inp)
    out = tuple((i + 2 * pad - (f - 1) - 1) // st + 1 for i, f in zip(inp, fil))
    gen = torch.Generator(device="cuda").manual_seed(0)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    x = (torch.rand((N, *inp, G * C), generator=gen, device="cuda") * 2 - 1).to(tdt)
    w = (torch.rand((G * K, *fil, C), generator=gen, device="cuda") * 2 - 1).to(tdt)
    dy = (torch.rand((N, *out, G * K), generator=gen, device="cuda") * 2 - 1).to(tdt)
    xt, wt, dyt = channels_last(x), channels_last(w), channels_last(dy)
    problem = td.ConvProblem(N, G, C, K, inp, fil, st, pad, 1, direction, dtype)
    kernel = d.select(problem)
    stream = torch.cuda.current_stream().cuda_stream
    res = torch.empty_like({"fwd": dy, "bwd_data": x, "bwd_weight": w}[direction])
    ptrs = {"fwd": (x, w, res), "bwd_data": (res, w, dy), "bwd_weight": (x, res, dy)}[direction]

    def ours_for(kname, prob_=problem):
        return lambda: d.run(prob_, *(t.data_ptr() for t in ptrs), kernel=kname, stream=stream, timed=False)

    if direction == "fwd":
        ours = lambda: d.run(problem, x.data_ptr(), w.data_ptr(), res.data_ptr(), kernel=kernel,  # noqa: E731
                             stream=stream, timed=False)
        theirs = lambda: CONV[nd](xt, wt, None, st, pad, 1, G)  # noqa: E731
        ref = lambda: CONV[nd](xt.double(), wt.double(), None, st, pad, 1, G)  # noqa: E731
        got = lambda: channels_last(res)  # noqa: E731
    elif direction == "bwd_data":
        ours = lambda: d.run(problem, res.data_ptr(), w.data_ptr(), dy.data_ptr(), kernel=kernel,  # noqa: E731
                             stream=stream, timed=False)
        theirs = lambda: GRAD_INPUT[nd](xt.shape, wt, dyt, st, pad, 1, G)  # noqa: E731
        ref = lambda: GRAD_INPUT[nd](xt.shape, wt.double(), dyt.double(), st, pad, 1, G)  # noqa: E731
        got = lambda: channels_last(res)  # noqa: E731
    else:
        ours = lambda: d.run(problem, x.data_ptr(), res.data_ptr(), dy.data_ptr(), kernel=kernel,  # noqa: E731
                             stream=stream, timed=False)
        theirs = lambda: GRAD_WEIGHT[nd](xt, wt.shape, dyt, st, pad, 1, G)  # noqa: E731
        ref = lambda: GRAD_WEIGHT[nd](xt.double(), wt.shape, dyt.double(), st, pad, 1, G)  # noqa: E731
        got = lambda: channels_last(res)  # noqa: E731
    # every compiled variant that takes the problem, timed the same way: the best of them
    candidates = {}
    for k in d.kernels if others else []:
        if d.is_supported(problem, kernel=k.name):
            candidates[k.name] = ours_for(k.name)
            candidates[k.name]()
        if re.search(r"_implicit_c\d+x\d+_s\d+", k.name):
            for v in split_ks:
                forced = dataclasses.replace(problem, split_k=v)
                if d.is_supported(forced, kernel=k.name):
                    label = f"{k.name} split_k={v}"
                    candidates[label] = ours_for(k.name, forced)
                    candidates[label]()
    ours()
    theirs()
    torch.cuda.synchronize()
    r = ref()
    rel = float((got().double() - r).norm() / r.norm())
    ours_t, theirs_t = [], []
    for _ in range(reps):
        ours_t.append(timed(ours, flush))
        theirs_t.append(timed(theirs, flush))
    us, cudnn_us = statistics.median(ours_t), statistics.median(theirs_t)
    best_name, best_us = kernel, us
    every = {kernel: us}
    for kname, run_one in candidates.items():
        if kname == kernel:
            continue
        t = statistics.median([timed(run_one, flush) for _ in range(max(5, reps // 3))])
        every[kname] = t
        if t < best_us:
            best_name, best_us = kname, t
    flops = 2.0 * N * math.prod(out) * G * K * C * math.prod(fil)
    nbytes = 2 * (x.numel() + w.numel() + dy.numel())
    floor_us = nbytes / COPY_BW * 1e6
    copy_us = copy_time(nbytes, reps, flush)
    return {"problem": name, "kind": kind, "direction": direction, "kernel": kernel, "us": us,
            "cudnn_us": cudnn_us, "tflops": flops / us * 1e-6, "cudnn_tflops": flops / cudnn_us * 1e-6,
            "floor_us": floor_us, "copy_us": copy_us, "vs_cudnn": cudnn_us / us, "vs_floor": us / floor_us,
            "rel_error": rel,
            "best_kernel": best_name, "best_us": best_us, "candidates": len(candidates),
            "every_us": dict(sorted(every.items(), key=lambda kv: kv[1]))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--only", help="comma-separated problem names (also those of EXTRA)")
    ap.add_argument("--every", action="store_true", help="also list every compiled kernel's time, fastest first")
    ap.add_argument("--pick-only", action="store_true",
                    help="time the dispatcher's pick only, not every compiled kernel that takes the problem "
                         "(bench/conv_profile.sh: one launch per direction to profile)")
    ap.add_argument("--dirs", default=",".join(DIRECTIONS), help="comma-separated directions (default: all three)")
    ap.add_argument("--split-k", default="", help="comma-separated slice counts to time each batch-split kernel at")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    args = ap.parse_args(argv)
    split_ks = [int(v) for v in args.split_k.split(",") if v.strip()]
    torch.backends.cudnn.benchmark = True
    target = next((t for t in device_targets() if t in td.registry().targets), None)
    if target is None:
        sys.exit(f"no GPU with a library in this installation (GPUs: {device_targets()})")
    d = td.Dispatcher("conv", target)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    only = set(args.only.split(",")) if args.only else None
    print(f"{'problem':20s} {'dir':10s} {'ours us':>9s} {'cuDNN us':>9s} {'floor us':>9s} {'copy us':>8s} {'TFLOP/s':>8s} "
          f"{'xcuDNN':>7s} {'xfloor':>7s} {'rel err':>8s} {'best us':>8s}  kernel (best, if another)", flush=True)
    for prob in PROBLEMS + (EXTRA if only else []):
        if only and prob[0] not in only:
            continue
        for direction in [v for v in args.dirs.split(",") if v]:
            try:
                r = bench_problem(prob, direction, args.reps, flush, d, target, not args.pick_only, split_ks, args.dtype)
            except Exception as err:  # a failing problem is reported, the rest still run
                print(f"{prob[0]:20s} {direction:10s} FAILED: {err}", flush=True)
                rows.append({"problem": prob[0], "direction": direction, "error": str(err)})
                continue
            rows.append(r)
            print(f"{r['problem']:20s} {direction:10s} {r['us']:9.1f} {r['cudnn_us']:9.1f} {r['floor_us']:9.1f} "
                  f"{r['copy_us']:8.1f} {r['tflops']:8.1f} {r['vs_cudnn']:7.2f} {r['vs_floor']:7.2f} {r['rel_error']:8.1e} {r['best_us']:8.1f}  "
                  f"{r['kernel']}" + (f" ({r['best_kernel']})" if r['best_kernel'] != r['kernel'] else ""),
                  flush=True)
            if args.every:
                for kname, t in r["every_us"].items():
                    print(f"{'':31s} {t:9.1f}  {kname}", flush=True)
    ok = [r for r in rows if "us" in r]
    for kind in ("grouped", "depthwise", "dense"):
        sel = [r["vs_cudnn"] for r in ok if r["kind"] == kind]
        if sel:
            geo = math.exp(sum(math.log(v) for v in sel) / len(sel))
            print(f"{kind:10s} geomean x cuDNN {geo:.2f} (min {min(sel):.2f}, {len(sel)} runs)")
    small = [r["vs_cudnn"] for r in ok if r["kind"] != "dense"]
    if small:
        print(f"grouped + depthwise geomean x cuDNN {math.exp(sum(map(math.log, small)) / len(small)):.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "dtype": args.dtype, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
