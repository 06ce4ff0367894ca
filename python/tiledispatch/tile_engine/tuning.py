"""Tuning tables: problem -> kernel names ranked by measured latency, per target.

Written by `tiledispatch tune` (and `tiledispatch bench`) from bench results:

    {"schema_version": 1, "target": "sm_90a",
     "header": {"device": "NVIDIA H200", "sm_count": 132, "target": "sm_90a", "cuda": "13.0", "build": ...},
     "entries": [
    {"problem": {"op": "gemm", "M": 16, "N": 6144, "K": 4096, "dtype": "bf16", "layout": "rcr"},
     "kernels": [fastest, ..., slowest], "latency_ms": [...]},
    ...]}

The problem is a problems-file spec (selection.problem_spec). The libraries read the tables
(the shipped `_kernels/tuning_<target>.json` and the files named by TILEDISPATCH_TUNING) when
they select: bindings/tuning.hpp describes the pick.

The header says what the table was measured on (_fingerprint.header: the device, its SM or
core count, the CUDA and driver versions, the build hash). A library ignores a table whose
header names another device or SM/core count than its own (td_tuning_set_device), with one
message naming the file and both devices. The other fields are a record, not checked: a
table names its kernels, and the library checks those names against the kernels it has, so
a table stays valid across rebuilds of the same kernels (the shipped table has no build
hash). A table without a header applies on every device.
"""
from __future__ import annotations

import json

SCHEMA = 1


def dumps(table: dict) -> str:
    """A table as compact JSON, one entry per line (tables run to thousands of entries)."""
    head = json.dumps({k: v for k, v in table.items() if k != "entries"})[:-1]
    rows = ",\n".join(json.dumps(e, separators=(",", ":")) for e in table["entries"])
    return f'{head}, "entries": [\n{rows}\n]}}\n'


def make_table(results: list, target: str, header: dict | None = None) -> dict:
    """From bench results (one dict per kernel and problem): OK kernels ranked by latency;
    with the header (what it was measured on) where given."""
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
    table = {"schema_version": SCHEMA, "target": target}
    if header:
        table["header"] = header
    table["entries"] = entries
    return table
