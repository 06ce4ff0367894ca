"""Tuning tables: problem -> kernel names ranked by measured latency, per target.

Written by `tiledispatch tune` (and `tiledispatch bench`) from bench results:

    {"schema_version": 1, "target": "sm_90a", "entries": [
    {"problem": {"op": "gemm", "M": 16, "N": 6144, "K": 4096, "dtype": "bf16", "layout": "rcr"},
     "kernels": [fastest, ..., slowest], "latency_ms": [...]},
    ...]}

The problem is a problems-file spec (selection.problem_spec). The libraries read the tables
(the shipped `_kernels/tuning_<target>.json` and the files named by TILEDISPATCH_TUNING) when
they select: bindings/tuning.hpp describes the pick.
"""
from __future__ import annotations

import json

SCHEMA = 1


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
