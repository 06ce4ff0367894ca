"""How well the dispatcher picks on shapes the sweep did not measure.

    python bench/selection.py --sweep S --train P1 --heldout P2 --target T [--out DIR]

Runs the tile engine on the training problems (which writes a tuning table), then
measures every built kernel on the held-out problems and compares, per problem, the
dispatcher's pick (tuning table, nearest entry, then cost model) and the cost model's
own pick with the fastest kernel: the share of problems within 5% of the best, and the
geomean of best/pick latency (1.0 = always the best).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from pathlib import Path

from tiledispatch.tile_engine import runner
from tiledispatch.tile_engine.bench import label, load_problems, run_bench


def score(problems, results, pick_key, jobs):
    within, ratios, rows = 0, [], []
    for job in jobs:
        spec = job["problem"]
        ok = {r["kernel"]: r["latency_ms"] for r in results if r["problem"] == spec and r["status"] == "OK"}
        pick = job.get(pick_key)
        if not ok or pick not in ok:
            rows.append((label(spec), pick, None))
            continue
        best = min(ok.values())
        ratio = best / ok[pick]
        ratios.append(ratio)
        within += ratio >= 1 / 1.05
        rows.append((label(spec), pick, ratio))
    geo = math.exp(statistics.mean(math.log(r) for r in ratios)) if ratios else float("nan")
    return within, len(ratios), geo, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--filter", default="", help="comma-separated globs over the sweep's variant names")
    parser.add_argument("--prebuilt", nargs="?", const="", default=None, metavar="DIR",
                        help="no build: the variants the libraries in DIR (default: the installed package's) hold")
    parser.add_argument("--out", default="selection-out")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--min-share", type=float, default=0.0, help="exit 1 when the share within 5%% is lower")
    args = parser.parse_args()
    out = Path(args.out)
    report = run_bench(args.sweep, args.train, args.target, out / "train", repeat=args.repeat, timeout=args.timeout,
                       kernel_filter=args.filter, prebuilt=args.prebuilt)
    table = out / "train" / f"tuning_{args.target}.json"
    os.environ["TILEDISPATCH_TUNING"] = str(table)  # the workers' dispatcher reads it
    os.environ["TILEDISPATCH_NO_SHIPPED_TUNING"] = "1"  # and only it: not a table shipped with the libraries
    problems = load_problems(args.heldout)
    seen = [spec for spec in problems if spec in report["problems"]]
    if seen:
        parser.error(f"held-out problems that are also training problems: {', '.join(map(label, seen))}")
    jobs = [{"problem": spec, "kernels": report["built"], "repeat": args.repeat, "seed": i}
            for i, spec in enumerate(problems)]
    results = runner.run(jobs, args.target, report["kernels_dir"], args.timeout)
    print(f"\nheld-out problems: {len(problems)} (not in the sweep), {len(report['built'])} kernels, target {args.target}")
    summary = {}
    for key, what in (("pick", "dispatcher (tuning table, then cost model)"), ("model_pick", "cost model alone")):
        within, n, geo, rows = score(problems, results, key, jobs)
        summary[key] = {"within_5pct": within, "problems": n, "geomean_best_over_pick": geo}
        print(f"  {what}: within 5% of the best on {within}/{n}, geomean best/pick {geo:.3f}")
        for name, pick, ratio in rows:
            print(f"    {name:<34} {pick}  {'-' if ratio is None else f'{ratio:.2f}'}")
    (out / "selection.json").write_text(json.dumps({"summary": summary, "results": results, "jobs": jobs}, indent=1))
    share = summary["pick"]["within_5pct"] / max(1, summary["pick"]["problems"])
    return 1 if share < args.min_share else 0


if __name__ == "__main__":
    raise SystemExit(main())
