"""Tuning tables: problem -> kernel names ranked by measured latency, per target.

Written by `tiledispatch tune` from bench results; read from the tables shipped in
`_kernels/tuning_<target>.json` and from the files named by TILEDISPATCH_TUNING
(os.pathsep-separated). Entries of the same kind (op, dtype, layout or direction and rank)
are compared by distance = sum of |log| ratios of the sizes.

The pick (`pick`): a problem the table holds takes its fastest measured kernel that
supports it. Any other problem takes the kernel with the lowest calibrated prediction:
the library's cost model for that kernel on this problem (wave quantization and all),
times the kernel's measured time over its cost-model prediction at the NEIGHBOURS nearest
entries (a geometric mean weighted by 1 / (distance + 0.05)). The model supplies the
shape of the cost, the measurements its scale per kernel and neighbourhood. Entries
without latencies (older tables) fall back to the nearest entry's ranking.
"""
from __future__ import annotations

import functools
import json
import math
import os
import warnings

SCHEMA = 1
NEIGHBOURS = 3


def problem_spec(problem) -> dict:
    """The JSON spec of a GemmProblem / ConvProblem (the problems-file format)."""
    from ..problems import GemmProblem
    if isinstance(problem, GemmProblem):
        return {"op": "gemm", "M": problem.M, "N": problem.N, "K": problem.K, "dtype": problem.dtype.key,
                "layout": problem.layout.key}
    return {"op": "conv", "N": problem.N, "G": problem.G, "C": problem.C, "K": problem.K,
            "input": list(problem.input_size), "filter": list(problem.filter_size),
            "stride": list(problem.stride), "pad": list(problem.padding), "dilation": list(problem.dilation),
            "direction": problem.direction.key, "dtype": problem.dtype.key}


def _kind(spec: dict) -> tuple:
    if spec["op"] == "gemm":
        return ("gemm", spec.get("dtype", "fp32"), spec.get("layout", "rcr"))
    return ("conv", spec.get("dtype", "fp32"), spec.get("direction", "fwd"), len(spec["input"]))


def _sizes(spec: dict) -> tuple:
    if spec["op"] == "gemm":
        return (spec["M"], spec["N"], spec["K"])
    return (spec["N"] * spec["G"], spec["C"], spec["K"], math.prod(spec["input"]), math.prod(spec["filter"]))


def distance(a: dict, b: dict) -> float:
    return sum(abs(math.log(x / y)) for x, y in zip(_sizes(a), _sizes(b)))


def make_table(results: list, target: str) -> dict:
    """From bench results (one dict per kernel and problem): OK kernels ranked by latency."""
    by_problem = {}
    for r in results:
        if r.get("status") != "OK" or r.get("latency_ms") is None:
            continue
        key = json.dumps(r["problem"], sort_keys=True)
        by_problem.setdefault(key, []).append((r["latency_ms"], r["kernel"]))
    entries = [{"problem": json.loads(k), "kernels": [name for _, name in sorted(v)],
                "latency_ms": [ms for ms, _ in sorted(v)]} for k, v in sorted(by_problem.items())]
    return {"schema_version": SCHEMA, "target": target, "entries": entries}


@functools.lru_cache(maxsize=None)
def _load(paths: tuple) -> list:
    entries = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                table = json.load(f)
        except (OSError, ValueError) as err:
            warnings.warn(f"tuning table {path} ignored: {err}", RuntimeWarning, stacklevel=4)
            continue
        if table.get("schema_version") != SCHEMA:
            warnings.warn(f"tuning table {path} ignored: schema {table.get('schema_version')}, expected {SCHEMA}",
                          RuntimeWarning, stacklevel=4)
            continue
        entries += [(table.get("target"), e, path) for e in table.get("entries", [])]
    return entries


def table_paths(target: str) -> tuple:
    return _table_paths(target, os.environ.get("TILEDISPATCH_TUNING", ""), os.environ.get("TILEDISPATCH_KERNELS_DIR", ""))


@functools.lru_cache(maxsize=None)
def _table_paths(target: str, env_tables: str, env_kernels: str) -> tuple:
    from .._registry import kernels_dir
    paths = []
    shipped = kernels_dir() / f"tuning_{target}.json"
    if shipped.is_file():
        paths.append(str(shipped))
    paths += [p for p in env_tables.split(os.pathsep) if p]
    return tuple(paths)


_warned: set = set()


def _warn_missing(path: str, registered: set) -> None:
    """One warning per table: the kernels it names that this installation lacks (a table
    from a fuller build, or from another manifest); they are skipped."""
    if path in _warned:
        return
    _warned.add(path)
    missing = sorted({name for _, entry, p in _load((path,)) for name in entry["kernels"]} - registered)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        warnings.warn(f"tuning table {path} names {len(missing)} kernel(s) this installation does not have "
                      f"({shown}); ignored", RuntimeWarning, stacklevel=4)


def problem_from(spec: dict):
    """A GemmProblem / ConvProblem from its JSON spec (the problems-file format)."""
    from ..problems import ConvProblem, GemmProblem
    if spec["op"] == "gemm":
        return GemmProblem(spec["M"], spec["N"], spec["K"], spec.get("dtype", "fp32"), spec.get("layout", "rcr"))
    return ConvProblem(spec["N"], spec["G"], spec["C"], spec["K"], tuple(spec["input"]), tuple(spec["filter"]),
                       spec.get("stride", 1), spec.get("pad", 0), spec.get("dilation", 1),
                       spec.get("direction", "fwd"), spec.get("dtype", "fp32"))


def pick(target: str, problem, registered: set, supports, cost) -> str | None:
    """The tables' kernel for a problem (None: no entry of its kind, or none that applies).

    supports(name) -> bool for this problem; cost(problem, name) -> the cost model's
    prediction, or None where the kernel rejects that problem."""
    spec = problem_spec(problem)
    kind = _kind(spec)
    near = sorted(((distance(spec, e["problem"]), i, e, path)
                   for i, (t, e, path) in enumerate(_load(table_paths(target)))
                   if t == target and _kind(e["problem"]) == kind), key=lambda n: n[:2])[:NEIGHBOURS]
    if not near:
        return None
    for _, _, entry, path in near:
        if any(name not in registered for name in entry["kernels"]):
            _warn_missing(path, registered)
    d0, _, first, _ = near[0]
    if d0 == 0 or any("latency_ms" not in e for _, _, e, _ in near):
        return next((n for n in first["kernels"] if n in registered and supports(n)), None)
    logs = {}  # kernel -> [sum of w * log(measured / model), sum of w]
    for d, _, entry, _ in near:
        w = 1.0 / (d + 0.05)
        at = problem_from(entry["problem"])
        for name, ms in zip(entry["kernels"], entry["latency_ms"]):
            if name not in registered or not ms or ms <= 0:
                continue
            model = cost(at, name)
            if model and model > 0:
                acc = logs.setdefault(name, [0.0, 0.0])
                acc[0] += w * math.log(ms / model)
                acc[1] += w
    best, best_t = None, math.inf
    for name in sorted(logs):
        if not supports(name):
            continue
        model = cost(problem, name)
        if not model or model <= 0:
            continue
        predicted = model * math.exp(logs[name][0] / logs[name][1])
        if predicted < best_t:
            best, best_t = name, predicted
    return best


def ranked_names(target: str, problem, registered: set) -> list:
    """Kernel names the tables rank for the nearest tuned problem ([] when none)."""
    spec = problem_spec(problem)
    kind = _kind(spec)
    best, best_d = None, math.inf
    for table_target, entry, path in _load(table_paths(target)):
        if table_target != target or _kind(entry["problem"]) != kind:
            continue
        d = distance(spec, entry["problem"])
        if d < best_d:
            best, best_d = (entry, path), d
    if best is None:
        return []
    entry, path = best
    if any(name not in registered for name in entry["kernels"]):
        _warn_missing(path, registered)
    return [name for name in entry["kernels"] if name in registered]
