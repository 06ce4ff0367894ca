"""`tiledispatch bench`: expand a sweep, build it, benchmark it, report."""
from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

from .. import _fingerprint
from ..codegen.yamlsrc import ManifestError, load_yaml, read_source
from . import build as build_phase
from . import ray_executor, runner
from .sweep import expand_sweep
from .tuning import dumps as tuning_dumps
from .tuning import make_table

CSV_FIELDS = ["kernel", "problem", "M", "N", "K", "N_batch", "G", "C", "K_out", "input", "filter", "direction",
              "dtype", "device", "latency_ms", "tflops", "max_rel", "status"]


def load_problems(path) -> list:
    path = str(path)
    data = load_yaml(read_source(path, "problems"), path)
    items = data.get("problems") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise ManifestError("a problems file is a list (or {problems: [...]}) of problems", 1, path)
    out = []
    for i, item in enumerate(items):
        line = items.line_of(i) if hasattr(items, "line_of") else None
        if not isinstance(item, dict) or item.get("op") not in ("gemm", "conv"):
            raise ManifestError("each problem needs op: gemm or op: conv", line, path)
        need = ("M", "N", "K") if item["op"] == "gemm" else ("N", "G", "C", "K", "input", "filter")
        missing = [k for k in need if k not in item]
        if missing:
            raise ManifestError(f"{item['op']} problem without {', '.join(missing)}", line, path)
        spec = json.loads(json.dumps(item))  # plain dicts and lists
        spec.setdefault("dtype", "fp32")
        if item["op"] == "gemm":
            spec.setdefault("layout", "rcr")
        out.append(spec)
    return out


def _matches(config, spec) -> bool:
    if config.op != spec["op"] or config.dtype.key != spec["dtype"]:
        return False
    if config.op == "gemm":
        return config.layout.key == spec["layout"]
    return config.direction.key == spec.get("direction", "fwd") and config.ndim == len(spec["input"])


def label(spec) -> str:
    if spec["op"] == "gemm":
        return f"gemm {spec['dtype']} {spec['layout']} {spec['M']}x{spec['N']}x{spec['K']}"
    return (f"conv {spec.get('direction', 'fwd')} {spec['dtype']} N{spec['N']} G{spec['G']} C{spec['C']} "
            f"K{spec['K']} {'x'.join(map(str, spec['input']))} f{'x'.join(map(str, spec['filter']))}")


def run_bench(sweep, problems_file, target, out_dir, *, verify=False, timeout=60.0, jobs=None, source=None,
              repeat=5, warmup=1, plot=False, log=print, ray_address=None, kernel_filter: str = "",
              prebuilt=None) -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    exp = expand_sweep(sweep, target, kernel_filter)
    log(f"phase 1, expand: {len(exp.configs)} variants for {target}, {len(exp.rejected)} rejected, "
        f"{len(exp.duplicates)} duplicates dropped" + (f" (filter {kernel_filter})" if kernel_filter else ""))
    reasons = {}
    for _, why in exp.rejected:
        for reason in why:
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        log(f"  rejected {count}: {reason}")
    if not exp.configs:
        raise ManifestError("the sweep expands to no buildable variant", None, str(sweep))
    problems = load_problems(problems_file)
    if prebuilt is not None:
        built = build_phase.prebuilt(exp.configs, prebuilt)
        log(f"phase 2, build: skipped, {len(built.built)} of the {len(exp.configs)} variants are in {built.build_dir}")
        for name in built.absent:
            log(f"  not in the prebuilt libraries (skipped): {name}")
    else:
        log(f"phase 2, build: {len(exp.configs)} variants in {out / 'build'}")
        built = build_phase.build(exp.configs, target, out, source=source, jobs=jobs)
    for name, why in built.failed.items():
        log(f"  FAILED to compile {name}: {why.splitlines()[0] if why else ''}")
    log(f"  built {len(built.built)}, failed {len(built.failed)} ({time.time() - start:.0f} s so far)")
    configs = [c for c in exp.configs if c.name in set(built.built)]
    jobs_list = []
    for spec in problems:
        names = [c.name for c in configs if _matches(c, spec)]
        jobs_list.append({"problem": spec, "kernels": names, "verify": verify, "repeat": repeat,
                          "warmup": warmup, "seed": len(jobs_list)})
    total = sum(len(j["kernels"]) for j in jobs_list)
    log(f"phase 3, benchmark: {len(problems)} problems, {total} runs, devices {runner.devices_for(target)}")
    bench_start = time.time()
    done = [0]

    def progress(result):
        done[0] += 1
        sys.stderr.write(f"\r  {done[0]}/{total} {result['status']:<11}")
        sys.stderr.flush()

    if ray_address is not None:
        results = ray_executor.run(jobs_list, target, built.build_dir, timeout, address=ray_address or None,
                                   on_result=progress)
    else:
        results = runner.run(jobs_list, target, built.build_dir, timeout, on_result=progress)
    sys.stderr.write("\n")
    timings = sorted({r.get("timing") for r in results if r.get("timing")})
    log(f"  {total} runs in {time.time() - bench_start:.0f} s (timing: {'; '.join(timings) or '-'})")
    for name in built.failed:
        for spec in problems:
            results.append({"kernel": name, "problem": spec, "status": "FAILED", "device": None,
                            "latency_ms": None, "tflops": None, "max_rel": None, "error": "did not compile"})
    picks = {json.dumps(j["problem"], sort_keys=True): j.get("pick") for j in jobs_list}
    header = _fingerprint.header(target, str(built.build_dir))  # what the table was measured on
    report = {"target": target, "header": header, "sweep": str(sweep), "problems": problems, "results": results,
              "picks": picks, "built": built.built, "failed": built.failed, "kernels_dir": str(built.build_dir),
              "rejected": [list(r) for r in exp.rejected], "seconds": time.time() - start}
    (out / "results.json").write_text(json.dumps(report, indent=1))
    write_csv(out / "results.csv", results)
    tune_path = out / f"tuning_{target}.json"
    tune_path.write_text(tuning_dumps(make_table(results, target, header)))
    log(best_table(problems, results, picks))
    log(f"wrote {out / 'results.csv'}, {out / 'results.json'}, {tune_path} in {time.time() - start:.0f} s")
    if plot:
        plot_results(problems, results, picks, out, log)
    return report


def write_csv(path, results):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in results:
            p = r["problem"]
            gemm = p["op"] == "gemm"
            w.writerow({"kernel": r["kernel"], "problem": label(p), "M": p.get("M") if gemm else "",
                        "N": p.get("N") if gemm else "", "K": p.get("K") if gemm else "",
                        "N_batch": "" if gemm else p["N"], "G": "" if gemm else p["G"], "C": "" if gemm else p["C"],
                        "K_out": "" if gemm else p["K"], "input": "" if gemm else "x".join(map(str, p["input"])),
                        "filter": "" if gemm else "x".join(map(str, p["filter"])),
                        "direction": "" if gemm else p.get("direction", "fwd"), "dtype": p["dtype"],
                        "device": r.get("device"), "latency_ms": r.get("latency_ms"), "tflops": r.get("tflops"),
                        "max_rel": r.get("max_rel"), "status": r["status"]})


def best_table(problems, results, picks) -> str:
    lines = ["", f"{'problem':<44} {'best kernel':<58} {'ms':>9} {'pick/best':>9}"]
    for spec in problems:
        mine = [r for r in results if r["problem"] == spec and r["status"] == "OK"]
        statuses = {}
        for r in results:
            if r["problem"] == spec:
                statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        if not mine:
            lines.append(f"{label(spec):<44} {'(no kernel ran OK: ' + str(statuses) + ')':<58}")
            continue
        best = min(mine, key=lambda r: r["latency_ms"])
        pick = picks.get(json.dumps(spec, sort_keys=True))
        pick_ms = next((r["latency_ms"] for r in mine if r["kernel"] == pick), None)
        ratio = f"{best['latency_ms'] / pick_ms:.2f}" if pick_ms else "-"
        lines.append(f"{label(spec):<44} {best['kernel']:<58} {best['latency_ms']:>9.4f} {ratio:>9}")
    return "\n".join(lines)


def plot_results(problems, results, picks, out, log):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("--plot: matplotlib is not installed; no charts written")
        return
    for i, spec in enumerate(problems):
        mine = sorted((r for r in results if r["problem"] == spec and r["status"] == "OK"),
                      key=lambda r: r["latency_ms"])
        if not mine:
            continue
        pick = picks.get(json.dumps(spec, sort_keys=True))
        fig, ax = plt.subplots(figsize=(8, 0.3 * len(mine) + 1.5))
        ax.barh([r["kernel"] for r in mine], [r["tflops"] or 0 for r in mine],
                color=["tab:orange" if r["kernel"] == pick else "tab:blue" for r in mine])
        ax.invert_yaxis()
        ax.set_xlabel("TFLOP/s (orange: the dispatcher's pick)")
        ax.set_title(label(spec))
        fig.tight_layout()
        fig.savefig(out / f"problem_{i:03d}.png")
        plt.close(fig)
    log(f"charts: {out}/problem_*.png")


def write_tuning(results_json, out_path) -> dict:
    report = json.loads(Path(results_json).read_text())
    table = make_table(report["results"], report["target"], report.get("header"))
    Path(out_path).write_text(tuning_dumps(table))
    return table
