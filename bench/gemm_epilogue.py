"""Fused GEMM epilogues and batched GEMM on the GPU against torch, same process.

    python bench/gemm_epilogue.py [--part fused batched] [--repeat 20] [--max-shapes N] [--max-tokens M]
                                  [--json OUT]
    python bench/gemm_epilogue.py --dry-run      # no GPU, no torch: the shapes and the report

(a) fused: y = gelu(x @ w.t() + bias), bf16, over the LLM zoo's GEMM shapes
    (bench/zoo/gemm_layers.json, M = tokens, N x K = the layer's weight), three ways against
    td.gemm(x, w.t(), bias=bias, activation=...):
      unfused   torch.matmul then torch's bias add and F.gelu (erf), against td's gelu (erf);
      cublaslt  torch._addmm_activation(bias, x, w.t(), use_gelu=True), cuBLASLt's own fused
                bias + GELU epilogue (the tanh form), against td's gelu_tanh.
(b) batched: td.gemm on (batch, M, K) @ (batch, K, N) (B column-major, rcr) against
    torch.bmm, over attention-like shapes: batch 32-256, square 128-4096 and the skinny
    Q K^T / P V products (K or N the head size).

Ratio = torch's time / td's time (above 1: td faster). Per part: geomean, min and the count
below 1x. Timing as bench/gemm.py: CUDA events around each call, L2 flushed by a 512 MiB
write before each, median of --repeat after warm-up, every contender timed round-robin.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ZOO_SHAPES = BENCH / "zoo" / "gemm_layers.json"
# (batch, M, N, K): square products, then attention's Q K^T (K = head size) and P V (N = head size)
BATCHED = [
    (256, 128, 128, 128), (128, 256, 256, 256), (64, 512, 512, 512), (32, 1024, 1024, 1024),
    (32, 2048, 2048, 2048), (32, 4096, 4096, 4096),
    (256, 512, 512, 64), (128, 1024, 1024, 128), (64, 2048, 2048, 128), (32, 4096, 4096, 128),
    (256, 512, 64, 512), (128, 1024, 128, 1024), (64, 2048, 128, 2048), (32, 4096, 128, 4096),
]


def zoo_shapes(path=ZOO_SHAPES, limit=None, max_tokens=None) -> list:
    """The zoo's unique (M, N, K), in file order, that bf16 TMA takes (N and K multiples of 8);
    with max_tokens, those of M up to it."""
    doc = json.loads(Path(path).read_text())
    shapes = [(s["M"], s["N"], s["K"]) for s in doc["shapes"] if s["N"] % 8 == 0 and s["K"] % 8 == 0
              and (max_tokens is None or s["M"] <= max_tokens)]
    return shapes[:limit] if limit else shapes


def summary(ratios: list) -> dict:
    """geomean, min and count below 1x of a list of ratios (torch / td)."""
    if not ratios:
        return {"n": 0, "geomean": None, "min": None, "below_1x": 0}
    return {"n": len(ratios), "geomean": math.exp(statistics.fmean(math.log(r) for r in ratios)),
            "min": min(ratios), "below_1x": sum(r < 1.0 for r in ratios)}


def table(title: str, columns: dict) -> str:
    """One line per contender: n, geomean, min, count below 1x."""
    lines = [title, f"  {'against':<10} {'n':>5} {'geomean':>8} {'min':>7} {'<1x':>5}"]
    for name, ratios in columns.items():
        s = summary(ratios)
        if s["n"]:
            lines.append(f"  {name:<10} {s['n']:>5} {s['geomean']:>8.3f} {s['min']:>7.3f} {s['below_1x']:>5}")
        else:
            lines.append(f"  {name:<10} {0:>5} {'-':>8} {'-':>7} {'-':>5}")
    return "\n".join(lines)


def fused_part(torch, td, timer, shapes, records) -> dict:
    F = torch.nn.functional
    ratios = {"unfused": [], "cublaslt": []}
    for M, N, K in shapes:
        x = (torch.rand(M, K, device="cuda") * 2 - 1).to(torch.bfloat16)
        w = (torch.rand(N, K, device="cuda") * 2 - 1).to(torch.bfloat16)
        bias = (torch.rand(N, device="cuda") * 2 - 1).to(torch.bfloat16)
        wt = w.t()
        fns = {
            "td_gelu": lambda: td.gemm(x, wt, bias=bias, activation="gelu"),
            "td_gelu_tanh": lambda: td.gemm(x, wt, bias=bias, activation="gelu_tanh"),
            "unfused": lambda: F.gelu(torch.matmul(x, wt) + bias),
            "cublaslt": lambda: torch._addmm_activation(bias, x, wt, use_gelu=True),
        }
        try:
            ms = timer.many(fns)
        except td.UnsupportedProblemError as err:
            print(f"  {M}x{N}x{K}: skipped ({err})", flush=True)
            continue
        row = {"M": M, "N": N, "K": K, **{f"{k}_us": v * 1e3 for k, v in ms.items()},
               "unfused": ms["unfused"] / ms["td_gelu"], "cublaslt": ms["cublaslt"] / ms["td_gelu_tanh"]}
        ratios["unfused"].append(row["unfused"])
        ratios["cublaslt"].append(row["cublaslt"])
        records.append({"part": "fused", **row})
        print(f"  {M:>6}x{N:>6}x{K:>6}  td gelu {row['td_gelu_us']:8.1f} us  unfused {row['unfused_us']:8.1f} "
              f"({row['unfused']:.2f}x)  td gelu_tanh {row['td_gelu_tanh_us']:8.1f}  cublaslt "
              f"{row['cublaslt_us']:8.1f} ({row['cublaslt']:.2f}x)", flush=True)
    return ratios


def batched_part(torch, td, timer, shapes, records) -> dict:
    ratios = {"bmm": []}
    for batch, M, N, K in shapes:
        a = (torch.rand(batch, M, K, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = (torch.rand(batch, N, K, device="cuda") * 2 - 1).to(torch.bfloat16).transpose(-1, -2)
        try:
            ms = timer.many({"td": lambda: td.gemm(a, b), "bmm": lambda: torch.bmm(a, b)})
        except td.UnsupportedProblemError as err:
            print(f"  {batch} x {M}x{N}x{K}: skipped ({err})", flush=True)
            continue
        ratio = ms["bmm"] / ms["td"]
        ratios["bmm"].append(ratio)
        tflops = 2.0 * batch * M * N * K / (ms["td"] * 1e-3) / 1e12
        records.append({"part": "batched", "batch": batch, "M": M, "N": N, "K": K, "td_us": ms["td"] * 1e3,
                        "bmm_us": ms["bmm"] * 1e3, "bmm": ratio})
        print(f"  {batch:>4} x {M:>5}x{N:>5}x{K:>5}  td {ms['td'] * 1e3:9.1f} us ({tflops:6.1f} TFLOP/s)  "
              f"bmm {ms['bmm'] * 1e3:9.1f} ({ratio:.2f}x)", flush=True)
    return ratios


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", nargs="+", default=["fused", "batched"], choices=("fused", "batched"))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--max-shapes", type=int, default=None, help="the first N zoo shapes only")
    parser.add_argument("--max-tokens", type=int, default=None, help="the zoo shapes of M up to this only")
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: list the shapes and print the report's tables on placeholder ratios")
    args = parser.parse_args(argv)
    zoo = zoo_shapes(limit=args.max_shapes, max_tokens=args.max_tokens)
    if args.dry_run:
        print(f"fused: {len(zoo)} zoo shapes (bf16, gelu), e.g. {zoo[:3]}")
        print(f"batched: {len(BATCHED)} shapes, e.g. {BATCHED[:3]}")
        print(table("fused (placeholder ratios)", {"unfused": [1.0] * len(zoo), "cublaslt": [1.0] * len(zoo)}))
        print(table("batched (placeholder ratios)", {"bmm": [1.0] * len(BATCHED)}))
        return 0
    import torch

    import tiledispatch as td
    from gemm import Timer  # bench/gemm.py: the same timing

    timer = Timer(args.repeat)
    print(f"device {torch.cuda.get_device_name()}", flush=True)
    records, report = [], []
    if "fused" in args.part:
        print(f"fused bias + gelu, bf16, {len(zoo)} zoo shapes", flush=True)
        report.append(table("fused bias + gelu (torch / td)", fused_part(torch, td, timer, zoo, records)))
    if "batched" in args.part:
        print(f"batched, bf16, {len(BATCHED)} shapes", flush=True)
        report.append(table("batched (torch.bmm / td)", batched_part(torch, td, timer, BATCHED, records)))
    print("\n".join(report))
    if args.json:
        Path(args.json).write_text(json.dumps({"records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
