"""Grouped GEMM (mixture-of-experts layers) on the GPU against torch._grouped_mm, same run.

    python bench/grouped_gemm.py [--models mixtral deepseek] [--tokens 1024 4096 16384 32768]
                                 [--repeat 20] [--json OUT] [--dry-run]

Shapes: the expert GEMMs of Mixtral-8x7B (8 experts, hidden 4096, ffn 14336, top-2) and
DeepSeek-V3 (256 routed experts, hidden 7168, moe ffn 2048, top-8), bf16: the fused gate and up
projection (rows, hidden) x (hidden, 2 ffn) and the down projection (rows, ffn) x (ffn, hidden)
per expert, rows = the tokens routed to it. Routing: each token picks top_k distinct experts with
Zipf-like popularity (expert e of popularity rank r drawn with weight 1 / (r + 1)^0.3, ranks
shuffled, seed 0): at 4096 tokens the busiest expert gets 1.4x the mean load for Mixtral and 3.7x
for DeepSeek-V3; the same counts for every method. Expert weights are (experts, N, K) row-major,
passed as their (experts, K, N) transposed view (layout rcr), as torch._grouped_mm takes them.

Methods: td.grouped_gemm with the offsets on the host (the one launch of the grouped kernel the
dispatcher picks: td.grouped_gemm_select), the same with the offsets on the device (read back to
the host by each call: what a caller holding device offsets pays), torch._grouped_mm. Timing:
CUDA events around each call, L2 flushed before each (bench/gemm.py's Timer), median of --repeat
after warm-up. Table: ms and torch/td ratios (above 1: td faster), their geomean and minimum.
--dry-run prints the shapes and the routing's loads without a GPU (no torch needed).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass

import numpy as np

ZIPF = 0.3
SEED = 0


@dataclass(frozen=True)
class MoeModel:
    name: str
    experts: int
    hidden: int
    ffn: int
    top_k: int

    def projections(self):
        """(label, K, N) of the expert GEMMs of one layer."""
        return [("gate_up", self.hidden, 2 * self.ffn), ("down", self.ffn, self.hidden)]


MODELS = {
    "mixtral": MoeModel("Mixtral-8x7B", 8, 4096, 14336, 2),
    "deepseek": MoeModel("DeepSeek-V3", 256, 7168, 2048, 8),
}
TOKENS = (1024, 4096, 16384, 32768)


def route(tokens: int, experts: int, top_k: int, seed: int = SEED) -> np.ndarray:
    """Rows per expert: each token's top_k distinct experts, drawn with Zipf-like popularity
    (Gumbel top-k sampling without replacement from weights 1 / (rank + 1)^ZIPF)."""
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(experts)
    log_w = -ZIPF * np.log(ranks + 1.0)
    counts = np.zeros(experts, dtype=np.int64)
    for start in range(0, tokens, 4096):  # in chunks: 4096 x 256 keys at a time
        n = min(4096, tokens - start)
        keys = log_w[None, :] + rng.gumbel(size=(n, experts))
        picks = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        counts += np.bincount(picks.ravel(), minlength=experts)
    return counts


def cases(models, tokens):
    for key in models:
        model = MODELS[key]
        for t in tokens:
            counts = route(t, model.experts, model.top_k)
            for label, K, N in model.projections():
                yield model, t, label, K, N, counts


def dry_run(models, tokens) -> int:
    for model, t, label, K, N, counts in cases(models, tokens):
        rows = int(counts.sum())
        print(f"{model.name:13s} tokens {t:6d} {label:8s} rows {rows:7d} K {K:5d} N {N:5d} "
              f"experts {model.experts:3d}: load max {counts.max()} mean {counts.mean():.1f} "
              f"min {counts.min()} empty {int((counts == 0).sum())}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--dry-run", action="store_true", help="print the shapes and loads; no GPU")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args.models, args.tokens)

    import torch

    import tiledispatch as td
    from gemm import Timer  # bench/gemm.py, beside this file

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (try --dry-run)")
        return 1
    timer = Timer(args.repeat)
    has_torch = hasattr(torch, "_grouped_mm")
    print(f"device {torch.cuda.get_device_name()}; torch {torch.__version__}"
          f"{'' if has_torch else ' (no torch._grouped_mm)'}", flush=True)
    rows_out, ratios = [], []
    for model, t, label, K, N, counts in cases(args.models, args.tokens):
        rows = int(counts.sum())
        a = (torch.rand(rows, K, device="cuda") * 2 - 1).to(torch.bfloat16)
        w = (torch.rand(model.experts, N, K, device="cuda") * 2 - 1).to(torch.bfloat16)
        b = w.transpose(1, 2)  # (experts, K, N), column-major matrices: rcr
        host_offsets = np.cumsum(counts).astype(np.int32)
        offsets = torch.from_numpy(host_offsets).cuda()
        out = torch.empty(rows, N, device="cuda", dtype=torch.bfloat16)
        pick = td.grouped_gemm_select(a, b, host_offsets)
        fns = {"td": lambda: td.grouped_gemm(a, b, host_offsets, out=out),
               "td_device_offsets": lambda: td.grouped_gemm(a, b, offsets, out=out)}
        if has_torch:
            fns["torch"] = lambda: torch._grouped_mm(a, b, offs=offsets)
        row = {"model": model.name, "tokens": t, "proj": label, "rows": rows, "K": K, "N": N,
               "experts": model.experts, "load_max": int(counts.max()), "load_mean": float(counts.mean()),
               "pick": pick or "per-group loop"}
        try:
            times = timer.many(fns)
        except Exception as err:  # a refused call is a result too
            print(f"{model.name} {t} {label}: FAILED {err}", flush=True)
            row["error"] = str(err)
            rows_out.append(row)
            continue
        flops = 2.0 * rows * K * N
        row.update({f"{k}_ms": v for k, v in times.items()})
        row.update({f"{k}_tflops": flops / v / 1e9 for k, v in times.items()})
        if has_torch:
            theirs = torch._grouped_mm(a, b, offs=offsets)
            mine = td.grouped_gemm(a, b, host_offsets)
            torch.cuda.synchronize()
            scale = float(theirs.float().abs().max()) or 1.0
            row["max_diff_vs_torch"] = float((mine.float() - theirs.float()).abs().max()) / scale
            row["ratio"] = times["torch"] / times["td"]
            ratios.append(row["ratio"])
        rows_out.append(row)
        cells = "  ".join(f"{k} {v:8.3f} ms {row[k + '_tflops']:6.1f} TF" for k, v in times.items())
        extra = f"  torch/td {row['ratio']:.3f}  diff {row['max_diff_vs_torch']:.1e}" if has_torch else ""
        print(f"{model.name:13s} {t:6d} {label:8s} rows {rows:7d} K {K:5d} N {N:5d}: {cells}{extra}  [{row['pick']}]",
              flush=True)
        del a, w, b, out
        torch.cuda.empty_cache()
    if ratios:
        geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        print(f"\ntorch._grouped_mm / td.grouped_gemm time (above 1: td faster) over {len(ratios)} shapes: "
              f"geomean {geomean:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows_out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
