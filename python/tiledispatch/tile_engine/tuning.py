"""Tuning tables: problem -> kernel names ranked by measured latency, per target.

Written by `tiledispatch tune` from bench results; read from the tables shipped in
`_kernels/tuning_<target>.json` and from the files named by TILEDISPATCH_TUNING
(os.pathsep-separated). Entries of the same kind (op, dtype, layout or direction and rank)
are compared by distance = sum of |log| ratios of the sizes.

The pick (`pick`): a problem the table holds takes its fastest measured kernel that
supports it. Any other problem takes the kernel with the lowest score over the NEIGHBOURS
nearest entries (weights 1 / (distance + 0.05)):

    score(k) = mean_e [ log(t(k, e) / t_best(e)) + ALPHA * log(cost(k, q) / cost(k, e)) ]

the kernel's measured slowness relative to the fastest at each neighbour e, moved by a
damped share of the change the library's cost model predicts for that kernel from e to
this problem q (wave quantization, K-loop length, stream-K fix-up). NEIGHBOURS = 6 and
ALPHA = 0.25 were chosen by leave-one-out over the H200 training grid (bench/RESULTS.md).
Entries without latencies (older tables) fall back to the nearest entry's ranking.

A table made before a family of kernels existed (the cuda knob `algorithm`: cutlass,
skinny, ...) does not speak for it: a registered kernel of a family that no entry of the
kind lists competes through the cost model alone, taking the problem where the model
predicts it faster than the table's choice (sm_90a: the skinny decode GEMM against the
bf16 table of CUTLASS kernels).

fp16 and bf16 stand in for each other (STAND_IN): they run the same tensor-core
instructions at the same rate, and the manifest builds the same configurations for both,
so where a table has no entry of a problem's dtype, the entries of its twin serve it with
each kernel name's dtype token swapped (gemm_bf16_rcr_... -> gemm_fp16_rcr_...).
"""
from __future__ import annotations

import functools
import json
import math
import os
import warnings

SCHEMA = 1
STAND_IN = {"fp16": "bf16", "bf16": "fp16"}
NEIGHBOURS = 6
ALPHA = 0.25


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


def dumps(table: dict) -> str:
    """A table as compact JSON, one entry per line (tables run to thousands of entries)."""
    head = json.dumps({k: v for k, v in table.items() if k != "entries"})[:-1]
    rows = ",\n".join(json.dumps(e, separators=(",", ":")) for e in table["entries"])
    return f'{head}, "entries": [\n{rows}\n]}}\n'


def make_table(results: list, target: str) -> dict:
    """From bench results (one dict per kernel and problem): OK kernels ranked by latency."""
    by_problem = {}
    for r in results:
        if r.get("status") != "OK" or r.get("latency_ms") is None:
            continue
        key = json.dumps(r["problem"], sort_keys=True)
        by_problem.setdefault(key, []).append((r["latency_ms"], r["kernel"]))
    entries = []
    for key, timed in sorted(by_problem.items()):
        timed.sort()
        entries.append({"problem": json.loads(key), "kernels": [name for _, name in timed],
                        "latency_ms": [float(f"{ms:.5g}") for ms, _ in timed]})
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
    """The shipped table (unless TILEDISPATCH_NO_SHIPPED_TUNING=1), then TILEDISPATCH_TUNING's."""
    env = os.environ
    return _table_paths(target, env.get("TILEDISPATCH_TUNING", ""), env.get("TILEDISPATCH_KERNELS_DIR", ""),
                        env.get("TILEDISPATCH_NO_SHIPPED_TUNING", "") == "1")


@functools.lru_cache(maxsize=None)
def _table_paths(target: str, env_tables: str, env_kernels: str, no_shipped: bool) -> tuple:
    from .._registry import kernels_dir
    paths = []
    shipped = kernels_dir() / f"tuning_{target}.json"
    if not no_shipped and shipped.is_file():
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


def _stand_in(dtype: str, kind: tuple, target: str) -> list:
    """The entries of dtype's twin (STAND_IN) as entries of dtype: problem and names swapped."""
    twin = STAND_IN[dtype]
    twin_kind = (kind[0], twin) + kind[2:]
    out = []
    for t, e, path in _load(table_paths(target)):
        if t != target or _kind(e["problem"]) != twin_kind:
            continue
        swapped = dict(e, problem=dict(e["problem"], dtype=dtype),
                       kernels=[n.replace(f"_{twin}_", f"_{dtype}_", 1) for n in e["kernels"]])
        out.append((swapped, path))
    return out


@functools.lru_cache(maxsize=None)
def _family(name: str) -> str:
    """A kernel's family: its cuda `algorithm` knob, else its backend's one; a split_k GEMM
    is a family of its own (a table measured before those kernels existed never ranked
    them, so the cost model weighs them against the table's pick)."""
    from ..codegen import GemmVariant, config_from_name
    try:
        config = config_from_name(name)
    except ValueError:
        return ""
    family = getattr(config.knobs, "algorithm", "") or ""
    if getattr(config, "variant", None) is GemmVariant.SPLIT_K:
        family += "/split_k"
    return family


def pick(target: str, problem, registered: set, supports, cost) -> str | None:
    """The tables' kernel for a problem (None: no entry of its kind, or none that applies),
    or a kernel of a family the tables never measured where the cost model predicts it
    faster than theirs. supports(name) -> bool for this problem; cost(problem, name) -> the
    cost model's prediction, or None where the kernel rejects that problem."""
    choice = _pick_measured(target, problem, registered, supports, cost)
    if choice is None:
        return None
    known = _families(target, table_paths(target), problem_spec(problem))
    base = cost(problem, choice)
    for name in sorted(registered):
        if _family(name) in known or not supports(name):
            continue
        c = cost(problem, name)
        if c is not None and base is not None and c < base:
            choice, base = name, c
    return choice


def _families(target: str, paths: tuple, spec: dict) -> frozenset:
    """The kernel families the entries of this problem's kind (or its stand-in's) list."""
    kind = _kind(spec)
    return _families_of_kind(target, paths, kind, spec.get("dtype"))


@functools.lru_cache(maxsize=64)
def _families_of_kind(target: str, paths: tuple, kind: tuple, dtype) -> frozenset:
    entries = [e for t, e, _ in _load(paths) if t == target and _kind(e["problem"]) == kind]
    if not entries and dtype in STAND_IN:
        entries = [e for e, _ in _stand_in(dtype, kind, target)]
    return frozenset(_family(n) for e in entries for n in set(e["kernels"]))


def _pick_measured(target: str, problem, registered: set, supports, cost) -> str | None:
    """The measured pick: the nearest entries' ranking, calibrated by the cost model."""
    spec = problem_spec(problem)
    kind = _kind(spec)
    entries = [(e, path) for t, e, path in _load(table_paths(target)) if t == target and _kind(e["problem"]) == kind]
    if not entries and spec.get("dtype") in STAND_IN:
        entries = _stand_in(spec["dtype"], kind, target)
    near = sorted(((distance(spec, e["problem"]), i, e, path) for i, (e, path) in enumerate(entries)),
                  key=lambda n: n[:2])[:NEIGHBOURS]
    if not near:
        return None
    for _, _, entry, path in near:
        if any(name not in registered for name in entry["kernels"]):
            _warn_missing(path, registered)
    d0, _, first, _ = near[0]
    if d0 == 0 or any("latency_ms" not in e for _, _, e, _ in near):
        return next((n for n in first["kernels"] if n in registered and supports(n)), None)
    scores = {}  # kernel -> [sum of w * (log slowness + ALPHA * log model change), sum of w]
    model_here = {}
    for d, _, entry, _ in near:
        w = 1.0 / (d + 0.05)
        at = problem_from(entry["problem"])
        timed = [(n, ms) for n, ms in zip(entry["kernels"], entry["latency_ms"]) if ms and ms > 0]
        if not timed:
            continue
        fastest = min(ms for _, ms in timed)
        for name, ms in timed:
            if name not in registered:
                continue
            if name not in model_here:
                model_here[name] = cost(problem, name) if supports(name) else None
            there = cost(at, name) if model_here[name] else None
            if not there or there <= 0 or model_here[name] <= 0:
                continue
            acc = scores.setdefault(name, [0.0, 0.0])
            acc[0] += w * (math.log(ms / fastest) + ALPHA * math.log(model_here[name] / there))
            acc[1] += w
    if not scores:
        return None
    return min(sorted(scores), key=lambda name: scores[name][0] / scores[name][1])
