"""The tile engine on the cpu target: sweep expansion with ranges, scratch build,
isolated workers (a crash and a hang cost one kernel each), CSV/JSON/tuning outputs, and
the dispatcher reading a tuning table."""
import csv
import ctypes
import functools
import json
import math
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import _ffi, selection
from tiledispatch.codegen import GemmVariant
from tiledispatch.codegen.yamlsrc import ManifestError
from tiledispatch.selection import problem_from, problem_spec
from tiledispatch.tile_engine import runner, tuning
from tiledispatch.tile_engine.bench import load_problems, run_bench
from tiledispatch.tile_engine.sweep import expand_sweep

ROOT = Path(__file__).resolve().parents[1]
SWEEP = """\
schema_version: 1
gemm:
  - dtype: fp32
    layout: rcr
    tile:
      m: {values: [48, 96, 50]}
      n: {min: 64, max: 128, step: 64}
      k: 128
    targets: [cpu]
    cpu: {micro_tile: [6, 16]}
"""
PROBLEMS = """\
- {op: gemm, M: 200, N: 300, K: 400}
- {op: gemm, M: 64, N: 64, K: 64}
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_sweep_ranges_expand_and_rejections_are_counted_with_reasons(tmp_path):
    exp = expand_sweep(write(tmp_path, "s.yaml", SWEEP), "cpu")
    assert sorted(c.tile for c in exp.configs) == [(48, 64, 128), (48, 128, 128), (96, 64, 128), (96, 128, 128)]
    assert len(exp.rejected) == 2
    assert all("tile M 50 is not a multiple of the micro tile rows 6" in why[0] for _, why in exp.rejected)


@pytest.mark.parametrize("bad, line, message", [
    ("m: {values: [48, 96, 50]}", 6, "tile.m: a list of integers"),
    ("n: {min: 64, max: 128, step: 64}", 7, "tile.n: min <= max and a positive step"),
    ("k: 128", 5, "'tile' ranges need k"),
])
def test_malformed_sweeps_fail_with_file_and_line(tmp_path, bad, line, message):
    broken = {"m: {values: [48, 96, 50]}": "m: {values: [48, x]}",
              "n: {min: 64, max: 128, step: 64}": "n: {min: 128, max: 64}",
              "k: 128": ""}[bad]
    path = write(tmp_path, "bad.yaml", SWEEP.replace(bad, broken))
    with pytest.raises(ManifestError) as info:
        expand_sweep(path, "cpu")
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


def test_malformed_problems_fail_with_file_and_line(tmp_path):
    path = write(tmp_path, "p.yaml", "- {op: gemm, M: 1, N: 2}\n")
    with pytest.raises(ManifestError, match=r"p.yaml:1: gemm problem without K"):
        load_problems(path)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    out = tmp / "out"
    report = run_bench(write(tmp, "s.yaml", SWEEP), write(tmp, "p.yaml", PROBLEMS), "cpu", out, verify=True,
                       timeout=30, source=ROOT, log=lambda *a: None)
    return out, report


def test_bench_end_to_end_on_cpu(swept):
    out, report = swept
    assert len(report["built"]) == 4 and report["failed"] == {}
    assert len(report["results"]) == 8
    assert {r["status"] for r in report["results"]} == {"OK"}
    assert all(r["latency_ms"] > 0 and r["max_rel"] < 1e-5 for r in report["results"])
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 8 and {r["status"] for r in rows} == {"OK"}
    assert set(rows[0]) >= {"kernel", "problem", "M", "N", "K", "device", "latency_ms", "tflops", "max_rel", "status"}
    table = json.loads((out / "tuning_cpu.json").read_text())
    assert table["target"] == "cpu" and len(table["entries"]) == 2
    for entry in table["entries"]:
        assert sorted(entry["kernels"]) == sorted(report["built"])
    assert all(pick in report["built"] for pick in report["picks"].values())


def test_bench_on_prebuilt_libraries_builds_nothing(swept, tmp_path):
    """--prebuilt: the swept variants that existing libraries hold, no scratch build; the
    ones they lack are named and skipped."""
    out, report = swept
    sweep = write(tmp_path, "s.yaml", SWEEP.replace("m: {values: [48, 96, 50]}", "m: {values: [48, 96, 144]}"))
    lines = []
    again = run_bench(sweep, write(tmp_path, "p.yaml", PROBLEMS), "cpu", tmp_path / "again",
                      prebuilt=out / "build", log=lines.append, repeat=1)
    assert not (tmp_path / "again" / "build").exists()
    assert sorted(again["built"]) == sorted(report["built"])
    assert {r["status"] for r in again["results"]} == {"OK"} and len(again["results"]) == 8
    skipped = [ln for ln in lines if "not in the prebuilt libraries" in ln]
    assert sorted(ln.split()[-1] for ln in skipped) == ["gemm_fp32_rcr_standard_144x128x128_r6x16_cpu",
                                                       "gemm_fp32_rcr_standard_144x64x128_r6x16_cpu"]
    with pytest.raises(RuntimeError, match="registry.json does not exist"):
        run_bench(sweep, write(tmp_path, "p.yaml", PROBLEMS), "cpu", tmp_path / "x", prebuilt=tmp_path,
                  log=lambda *a: None)


def small_job(names):
    return {"problem": {"op": "gemm", "M": 100, "N": 100, "K": 100, "dtype": "fp32", "layout": "rcr"},
            "kernels": names, "verify": True, "repeat": 2}


def fault_worker(*args):
    """The worker command of tests/fault_worker.py, which fails on the kernels named in args."""
    return [sys.executable, str(ROOT / "tests" / "fault_worker.py"), *args]


def test_a_crashing_and_a_hanging_kernel_cost_one_kernel_each(swept):
    out, report = swept
    names = sorted(report["built"])
    job = small_job(names)
    results = runner.run([job], "cpu", out / "build", timeout=5,
                         worker_command=fault_worker("--crash", names[0], "--hang", names[2]))
    status = {r["kernel"]: r["status"] for r in results}
    assert status == {names[0]: "MISSING", names[1]: "OK", names[2]: "MISSING", names[3]: "OK"}
    errors = {r["kernel"]: r.get("error") for r in results}
    assert errors[names[0]] == "the worker process died"
    assert errors[names[2]] == "no answer within 5 s"


def test_a_kernel_that_crashes_on_a_timed_run_costs_only_itself(swept):
    """A crash while the kernels are timed in rounds does not say which kernel crashed: the
    runner sends the rest again, one kernel at a time, and only the crashing one is MISSING."""
    out, report = swept
    names = sorted(report["built"])
    job = small_job(names)
    results = runner.run([job], "cpu", out / "build", timeout=20, worker_command=fault_worker("--crash-timed", names[1]))
    status = {r["kernel"]: r["status"] for r in results}
    assert status == {names[0]: "OK", names[1]: "MISSING", names[2]: "OK", names[3]: "OK"}
    assert [r for r in results if r["kernel"] == names[1]][0]["error"] == "the worker process died"
    assert all(r["latency_ms"] > 0 for r in results if r["status"] == "OK")


class _RecordingDispatcher:
    """Stands in for a Dispatcher in worker.measure: records which kernel ran when."""

    def __init__(self, fail=None, unsupported=None):
        self.calls, self.fail, self.unsupported = [], fail, unsupported

    def is_supported(self, problem, name):
        return name != self.unsupported

    def run(self, problem, *args, kernel):
        self.calls.append(kernel)
        if kernel == self.fail and self.calls.count(kernel) > 2:  # after its two warm-up runs
            raise RuntimeError("launch failed")
        return 0.5 + len(self.calls) * 1e-3


def test_the_worker_times_the_kernels_of_a_problem_in_rounds():
    """Each kernel warmed up and checked in order, then one timed run of each per round
    (so clock and thermal drift fall on all alike); an unsupported kernel never runs, one
    that fails on a timed run is FAILED and leaves the rounds."""
    from tiledispatch.tile_engine.worker import Case, measure
    case = Case({"op": "gemm", "M": 32, "N": 16, "K": 8, "dtype": "fp32", "layout": "rcr"}, seed=1, verify=False,
                rotate_mib=0)
    d = _RecordingDispatcher(fail="c", unsupported="u")
    said = []
    results = measure(d, case, ["a", "u", "b", "c"], warmup=2, repeat=3, verify=False, say=said.append)
    assert d.calls[:6] == ["a", "a", "b", "b", "c", "c"]  # warm-up, in order
    assert d.calls[6:] == ["a", "b", "c", "a", "b", "a", "b"]  # rounds; c fails on its first timed run
    assert [r["status"] for r in results] == ["OK", "UNSUPPORTED", "OK", "FAILED"]
    assert results[3]["error"] == "launch failed"
    assert results[0]["latency_ms"] == pytest.approx(0.5 + 10e-3)  # median of runs 7, 10, 12
    assert said == [{"ready": n} for n in "aubc"] + [{"round": i} for i in range(3)]


def test_the_dispatcher_reads_a_tuning_table_nearest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm", "cpu")
    problem = td.GemmProblem(2048, 2048, 2048)
    model_pick = d.select(problem)
    other = next(k.name for k in d.kernels
                 if k.dtype.key == "fp32" and k.layout.key == "rcr" and k.name != model_pick)
    table = {"schema_version": 1, "target": "cpu", "entries": [
        {"problem": {"op": "gemm", "M": 2000, "N": 2000, "K": 2000, "dtype": "fp32", "layout": "rcr"},
         "kernels": ["gemm_fp32_rcr_standard_8x16x8_r4x8_cpu", other]},
        {"problem": {"op": "gemm", "M": 16, "N": 16, "K": 16, "dtype": "fp32", "layout": "rcr"},
         "kernels": [model_pick]}]}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert d.select(problem) == other  # nearest entry; its unknown kernel skipped
    assert any("gemm_fp32_rcr_standard_8x16x8_r4x8_cpu" in str(w.message) for w in caught)
    assert d.select(td.GemmProblem(20, 20, 20)) == model_pick
    bf16 = td.GemmProblem(20, 20, 20, "bf16")
    assert d.tuned(bf16) is None and d.select(bf16) == d.model_select(bf16)  # no bf16 entry: the model


def test_fp16_and_bf16_stand_in_for_each_other_in_tuning_tables(tmp_path, monkeypatch):
    """A table with bf16 entries only serves fp16 problems through the fp16 twins of its
    kernels (and the other way round); fp32 borrows nothing."""
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm", "cpu")
    q = td.GemmProblem(512, 512, 512, "fp16")
    fp16 = [k.name for k in d.kernels if k.dtype.key == "fp16" and k.layout.key == "rcr" and d.is_supported(q, k.name)]
    model_pick = d.select(q)
    other = next(n for n in fp16 if n != model_pick)
    twin = other.replace("_fp16_", "_bf16_", 1)
    assert twin in {k.name for k in d.kernels}
    table = {"schema_version": 1, "target": "cpu", "entries": [
        {"problem": {"op": "gemm", "M": 512, "N": 512, "K": 512, "dtype": "bf16", "layout": "rcr"},
         "kernels": [twin], "latency_ms": [1.0]}]}
    path = tmp_path / "bf16.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    assert d.select(q) == other
    assert d.select(td.GemmProblem(512, 512, 512, "bf16")) == twin
    fp32 = td.GemmProblem(512, 512, 512)
    assert d.select(fp32) == d.model_select(fp32)  # no stand-in for fp32


def test_the_calibrated_pick_scales_the_cost_model_by_the_nearest_measurements(tmp_path, monkeypatch):
    """Between entries: the cost model times each kernel's measured/model ratio at the
    nearest entries. At an entry: its measured ranking."""
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm", "cpu")
    q = td.GemmProblem(1000, 1000, 1000)
    names = sorted((k.name for k in d.kernels if k.dtype.key == "fp32" and k.layout.key == "rcr"
                    and d.is_supported(q, k.name)), key=lambda n: d.cost(q, n))
    model_pick, runner_up = names[0], names[1]
    assert d.select(q) == model_pick and d.cost(q, runner_up) < 10 * d.cost(q, model_pick)
    entries = []
    for p in (td.GemmProblem(900, 1100, 1000), td.GemmProblem(1200, 1000, 800)):
        ms = {n: d.cost(p, n) * (0.1 if n == runner_up else 1.0) * 1e-9 for n in names}
        ranked = sorted(ms, key=ms.get)
        entries.append({"problem": problem_spec(p), "kernels": ranked, "latency_ms": [ms[n] for n in ranked]})
    path = tmp_path / "calibrated.json"
    path.write_text(json.dumps({"schema_version": 1, "target": "cpu", "entries": entries}))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    assert d.cost(q, runner_up) * 0.1 < d.cost(q, model_pick)
    assert d.select(q) == runner_up  # measured 10x faster than modelled around q
    entries.append({"problem": problem_spec(q), "kernels": [model_pick, runner_up], "latency_ms": [1.0, 2.0]})
    exact = tmp_path / "exact.json"
    exact.write_text(json.dumps({"schema_version": 1, "target": "cpu", "entries": entries}))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(exact))
    assert d.select(q) == model_pick  # the table holds q itself: its measured best
    assert d.cost(td.GemmProblem(8, 8, 8, "bf16"), runner_up) is None  # an fp32 kernel rejects bf16


# ---- the pick as bindings/tuning.hpp specifies it, in Python: the reference the library's
# pick is compared with (test_the_library_picks_as_the_spec_says).
NEIGHBOURS, ALPHA = 6, 0.25
STAND_IN = {"fp16": "bf16", "bf16": "fp16"}


def _kind(spec):
    if spec["op"] == "gemm":
        return ("gemm", spec.get("dtype", "fp32"), spec.get("layout", "rcr"))
    return ("conv", spec.get("dtype", "fp32"), spec.get("direction", "fwd"), len(spec["input"]))


def _sizes(spec):
    if spec["op"] == "gemm":
        return (spec["M"], spec["N"], spec["K"])
    return (spec["N"] * spec["G"], spec["C"], spec["K"], math.prod(spec["input"]), math.prod(spec["filter"]))


def _sum(values):
    """Floats summed as Python 3.12+ sum() sums them (Neumaier's compensated summation), as
    the library sums distances."""
    total, c = 0.0, 0.0
    for x in values:
        t = total + x
        c += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
        total = t
    return total + c if c and math.isfinite(c) else total


def spec_pick(d, problem, tables):
    """The tables' kernel for a problem (None: none): `tables` the parsed tables, in order."""
    spec = problem_spec(problem)
    kind = _kind(spec)
    serving = [e for t in tables for e in t["entries"] if _kind(e["problem"]) == kind]
    twin = STAND_IN.get(spec["dtype"]) if not serving else None
    if twin:
        serving = [dict(e, problem=dict(e["problem"], dtype=spec["dtype"]),
                        kernels=[n.replace(f"_{twin}_", f"_{spec['dtype']}_", 1) for n in e["kernels"]])
                   for t in tables for e in t["entries"] if _kind(e["problem"]) == kind[:1] + (twin,) + kind[2:]]
    kernels = {k.name: k for k in d.kernels}
    registered = {n for n, k in kernels.items() if not k.named_only}
    supports = functools.lru_cache(maxsize=None)(lambda n: d.is_supported(problem, n))
    here = functools.lru_cache(maxsize=None)(lambda n: d.cost(problem, n) if supports(n) else None)
    distance = lambda e: _sum(abs(math.log(x / y)) for x, y in zip(_sizes(spec), _sizes(e["problem"])))  # noqa: E731
    near = sorted(((distance(e), i, e) for i, e in enumerate(serving)), key=lambda n: n[:2])[:NEIGHBOURS]
    if not near:
        return None
    if near[0][0] == 0 or any("latency_ms" not in e for _, _, e in near):
        choice = next((n for n in near[0][2]["kernels"] if n in registered and supports(n)), None)
    else:
        scores = {}
        for dist, _, e in near:
            w = 1.0 / (dist + 0.05)
            timed = [(n, ms) for n, ms in zip(e["kernels"], e["latency_ms"]) if ms and ms > 0]
            if not timed:
                continue
            fastest = min(ms for _, ms in timed)
            at = problem_from(e["problem"])
            for name, ms in timed:
                if name not in registered or not here(name) or here(name) <= 0:
                    continue
                there = d.cost(at, name)
                if not there or there <= 0:
                    continue
                acc = scores.setdefault(name, [0.0, 0.0])
                acc[0] += w * (math.log(ms / fastest) + ALPHA * math.log(here(name) / there))
                acc[1] += w
        choice = min(sorted(scores), key=lambda n: scores[n][0] / scores[n][1]) if scores else None
    if choice is None:
        return None
    family = lambda n: (kernels[n].family, getattr(kernels[n], "variant", None) is GemmVariant.SPLIT_K)  # noqa: E731
    known = {family(n) for e in serving for n in e["kernels"] if n in kernels}
    base = here(choice)
    for name in sorted(registered):
        if family(name) not in known and supports(name) and here(name) < base:
            choice, base = name, here(name)
    return choice


def test_the_library_picks_as_the_spec_says(tmp_path, monkeypatch):
    """The library's pick (td_gemm_tuned, the same one select ranks first) equals the Python
    reference above on a cpu table with latencies (and one entry without), between entries,
    at one, and for fp16 through bf16 entries."""
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm", "cpu")
    rng = np.random.default_rng(7)
    sizes = [24, 64, 100, 256, 300, 512, 777, 1024]
    entries = []
    for dtype in ("fp32", "bf16"):
        names = [k.name for k in d.kernels if k.dtype.key == dtype and k.layout.key == "rcr"]
        for _ in range(10):
            p = td.GemmProblem(*(int(v) for v in rng.choice(sizes, 3)), dtype)
            ms = {n: d.cost(p, n) * rng.uniform(0.3, 3.0) * 1e-9 for n in names if d.is_supported(p, n)}
            ranked = sorted(ms, key=ms.get)
            entries.append({"problem": problem_spec(p), "kernels": ranked, "latency_ms": [ms[n] for n in ranked]})
    tables = [{"schema_version": 1, "target": "cpu", "entries": entries}]
    path = tmp_path / "timed.json"
    path.write_text(json.dumps(tables[0]))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    queries = [problem_from(e["problem"]) for e in entries[:3]]
    queries += [td.GemmProblem(*(int(v) + int(o) for v, o in zip(rng.choice(sizes, 3), rng.integers(0, 50, 3))),
                               dtype) for dtype in ("fp32", "bf16", "fp16") for _ in range(8)]
    picks = {q: d.tuned(q) for q in queries}
    assert all(picks.values())
    assert picks == {q: spec_pick(d, q, tables) for q in queries}
    assert len(set(picks.values())) > 3  # not one kernel for everything
    assert all(d.select(q) == pick for q, pick in picks.items())
    # an entry without latencies: the nearest entry's ranking
    untimed = dict(entries[0], problem=dict(entries[0]["problem"], M=2000))
    del untimed["latency_ms"]
    tables = [{"schema_version": 1, "target": "cpu", "entries": entries + [untimed]}]
    path = tmp_path / "untimed.json"
    path.write_text(json.dumps(tables[0]))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    q = td.GemmProblem(1900, entries[0]["problem"]["N"], entries[0]["problem"]["K"])
    assert d.tuned(q) == spec_pick(d, q, tables) == next(n for n in untimed["kernels"] if d.is_supported(q, n))
    # two entries at one distance in exact arithmetic (64 -> 128 and 28672 -> 32768 against
    # 28672 -> 65536): summed as the spec sums, they tie and the first entry is the nearest
    q = td.GemmProblem(64, 96, 28672)
    first, second = [k.name for k in d.kernels if k.dtype.key == "fp32" and k.layout.key == "rcr"
                     and d.is_supported(q, k.name)][:2]
    tables = [{"schema_version": 1, "target": "cpu", "entries": [
        {"problem": {"op": "gemm", "M": 128, "N": 256, "K": 32768}, "kernels": [first]},
        {"problem": {"op": "gemm", "M": 64, "N": 256, "K": 65536}, "kernels": [second]}]}]
    path = tmp_path / "tie.json"
    path.write_text(json.dumps(tables[0]))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    assert d.tuned(q) == spec_pick(d, q, tables) == first


def test_a_c_abi_caller_gets_the_tables_pick(tmp_path, monkeypatch):
    """dispatcher_select_kernel and conv_dispatcher_select_kernel (the reference system's
    functions, called through ctypes as a C program would) rank the tables' pick first, and
    read the environment at the call: the pick follows TILEDISPATCH_TUNING as it changes."""
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    gemm, conv = td.Dispatcher("gemm", "cpu"), td.Dispatcher("conv", "cpu")
    buf = ctypes.create_string_buffer(256)

    def gemm_pick(M, N, K):
        assert gemm.lib.dispatcher_select_kernel(M, N, K, buf, 256) == 0
        return buf.value.decode()

    legacy = _ffi.ConvProblemC(2, 2, 4, 4, 1, 9, 9, 1, 3, 3, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0)

    def conv_pick():
        assert conv.lib.conv_dispatcher_select_kernel(ctypes.byref(legacy), buf, 256) == 0
        return buf.value.decode()

    model_gemm, model_conv = gemm_pick(300, 200, 100), conv_pick()
    cp = td.ConvProblem(2, 2, 4, 4, (9, 9), (3, 3), 1, 1, 1, "fwd")
    assert model_gemm == gemm.model_select(td.GemmProblem(300, 200, 100)) and model_conv == conv.model_select(cp)
    other_gemm = next(k.name for k in gemm.kernels if k.dtype.key == "fp32" and k.layout.key == "rcr"
                      and k.name != model_gemm)
    # the cpu library has one kernel per conv kind: the table names it, td_conv_tuned shows it read
    other_conv = model_conv
    assert conv.tuned(cp) is None
    table = {"schema_version": 1, "target": "cpu", "entries": [
        {"problem": {"op": "gemm", "M": 300, "N": 200, "K": 100}, "kernels": [other_gemm], "latency_ms": [1.0]},
        {"problem": problem_spec(cp), "kernels": [other_conv], "latency_ms": [1.0]}]}
    path = tmp_path / "abi.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    assert gemm_pick(300, 200, 100) == other_gemm and conv_pick() == other_conv == conv.tuned(cp)
    monkeypatch.delenv("TILEDISPATCH_TUNING")
    assert gemm_pick(300, 200, 100) == model_gemm and conv_pick() == model_conv and conv.tuned(cp) is None


@pytest.mark.parametrize("text, why", [
    ('{"schema_version": 1, "target": "cpu", "entries": [', "not JSON: line 1 column 52"),
    ('{"schema_version": 1, "target": "cpu", "entries": [],}', "not JSON"),
    ("\x00\xff garbage", "not JSON"),
    ("[" * 100000, "nested deeper than"),
    ('{"schema_version": 2, "target": "cpu", "entries": []}', "schema 2, expected 1"),
    ('{"schema_version": 1, "target": "sm_90a", "entries": []}', "measured for target sm_90a"),
    ('{"schema_version": 1, "target": "cpu", "entries": [{"problem": {"op": "gemm", "M": 0, "N": 1, "K": 1}, '
     '"kernels": []}]}', "entry 0: gemm problem without positive integer M, N and K"),
    ('{"schema_version": 1, "target": "cpu", "entries": [{"problem": {"op": "gemm", "M": 8, "N": 8, "K": 8}, '
     '"kernels": [1]}]}', "entry 0: a kernel name is not a string"),
    ('{"schema_version": 1, "target": "cpu", "entries": [{"problem": {"op": "conv", "N": 1, "G": 1, "C": 1, '
     '"K": 1, "input": [4, 4], "filter": [3]}, "kernels": []}]}', "entry 0: filter is not a list of 2 sizes"),
    (None, "cannot open it"),
])
def test_a_malformed_table_warns_and_the_model_picks(tmp_path, monkeypatch, text, why):
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm", "cpu")
    q = td.GemmProblem(64, 64, 64)
    path = tmp_path / "bad.json"
    if text is not None:
        path.write_bytes(text.encode("latin-1"))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    with pytest.warns(RuntimeWarning) as caught:
        pick = d.select(q)
    assert pick == d.model_select(q)
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(f"tuning table {path} ignored: ") and why in m for m in messages), messages


@pytest.mark.parametrize("op, problem", [
    ("gemm", td.GemmProblem(300, 200, 100)),
    ("conv", td.ConvProblem(2, 2, 4, 4, (9, 9), (3, 3), 1, 1, 1, "bwd_data")),
])
def test_the_exported_cost_model_ranks_as_the_library_selects(op, problem, monkeypatch):
    """td_gemm_cost / td_conv_cost: the prediction selection ranks by (no tables here)."""
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher(op, "cpu")
    costs = {k.name: d.cost(problem, k.name) for k in d.kernels}
    ok = {n: c for n, c in costs.items() if c is not None}
    assert ok and all(c > 0 for c in ok.values())
    assert all(d.is_supported(problem, n) == (n in ok) for n in costs)
    assert d.select(problem) == d.model_select(problem) == min(sorted(ok), key=ok.get)
    with pytest.raises(td.UnsupportedProblemError):
        d.cost(problem, "no_such_kernel")


def test_shipped_tables_are_read_unless_switched_off(tmp_path, monkeypatch):
    """The shipped table is the tuning_<target>.json beside the library file: a copy of the
    cpu library with a table beside it picks from that table, and not once
    TILEDISPATCH_NO_SHIPPED_TUNING=1 switches shipped tables off."""
    d = td.Dispatcher("gemm", "cpu")
    q = td.GemmProblem(8, 8, 8)
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    model_pick = d.select(q)
    other = next(k.name for k in d.kernels if k.dtype.key == "fp32" and k.layout.key == "rcr"
                 and d.is_supported(q, k.name) and k.name != model_pick)
    table = {"schema_version": 1, "target": "cpu", "entries": [
        {"problem": {"op": "gemm", "M": 8, "N": 8, "K": 8, "dtype": "fp32", "layout": "rcr"},
         "kernels": [other, model_pick], "latency_ms": [1.0, 2.5]}]}
    text = tuning.dumps(table)
    assert json.loads(text) == table and len(text.splitlines()) == 3  # one line per entry
    (tmp_path / "tuning_cpu.json").write_text(text)
    copy = tmp_path / Path(d.lib.path).name
    shutil.copyfile(d.lib.path, copy)
    lib = ctypes.CDLL(str(copy))  # C's view: the table beside this file is its shipped one
    lib.td_gemm_select.argtypes = [ctypes.POINTER(_ffi.TdGemmProblem), ctypes.c_char_p, ctypes.c_size_t]
    buf = ctypes.create_string_buffer(256)

    def pick():
        assert lib.td_gemm_select(ctypes.byref(q.to_c()), buf, 256) == 0
        return buf.value.decode()
    assert pick() == model_pick
    monkeypatch.delenv("TILEDISPATCH_NO_SHIPPED_TUNING")
    assert pick() == other
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    assert pick() == model_pick
    # Python's view (for display) of the same tables: the installation's _kernels folder
    monkeypatch.setenv("TILEDISPATCH_KERNELS_DIR", str(tmp_path))
    monkeypatch.delenv("TILEDISPATCH_NO_SHIPPED_TUNING")
    assert selection.table_paths("cpu") == (str(tmp_path / "tuning_cpu.json"),)
    assert selection.table_paths("sm_90a") == ()
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    assert selection.table_paths("cpu") == ()


def test_the_shipped_h200_table_names_only_default_manifest_kernels():
    """tuning/tuning_sm_90a.json (installed with the sm_90a libraries) was measured on the
    default manifest's kernels: every name it holds is one the manifest builds."""
    from tiledispatch.codegen.manifest import expand, load_manifest
    table = json.loads((ROOT / "tuning" / "tuning_sm_90a.json").read_text())
    names = {c.name for c in expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a"]).configs}
    held = {n for e in table["entries"] for n in e["kernels"]}
    assert table["target"] == "sm_90a" and len(table["entries"]) > 1000
    assert held and held <= names
    assert all(len(e["kernels"]) == len(e["latency_ms"]) and e["latency_ms"] == sorted(e["latency_ms"])
               for e in table["entries"])


def test_cli_bench_and_tune(swept, tmp_path):
    import subprocess
    out, _ = swept
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", "tune", "--results", str(out / "results.json"),
                           "--out", str(tmp_path / "t.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "2 problems for target cpu" in proc.stdout
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["entries"] and table["header"]["target"] == "cpu" and table["header"]["cores"] == os.cpu_count()
    assert table["header"] == json.loads((out / "results.json").read_text())["header"]
    bad = write(tmp_path, "bad.yaml", SWEEP.replace("dtype: fp32", "dtype: fp64"))
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", "bench", "--sweep", str(bad), "--problems",
                           str(bad), "--target", "cpu"], capture_output=True, text=True)
    assert proc.returncode == 1 and f"{bad}:3: unknown dtype 'fp64'" in proc.stderr


def test_the_ray_executor_runs_the_same_protocol_on_a_local_cluster(swept):
    ray = pytest.importorskip("ray", reason="ray is an optional extra (pip install 'tiledispatch[ray]'); "
                                            "CI installs it for this test")
    from tiledispatch.tile_engine import ray_executor
    out, report = swept
    names = sorted(report["built"])
    jobs = [{"problem": {"op": "gemm", "M": m, "N": 96, "K": 80, "dtype": "fp32", "layout": "rcr"},
             "kernels": names, "verify": True, "repeat": 2} for m in (40, 130)]
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        results = ray_executor.run(jobs, "cpu", out / "build", timeout=60)
    finally:
        ray.shutdown()
    assert len(results) == 2 * len(names)
    assert {r["status"] for r in results} == {"OK"}
    assert all(job.get("pick") in names for job in jobs)


@pytest.mark.parametrize("spec", [
    {"op": "gemm", "M": 96, "N": 80, "K": 64, "dtype": "fp32", "layout": "crr"},
    {"op": "conv", "N": 2, "G": 2, "C": 4, "K": 4, "input": [9, 9], "filter": [3, 3], "pad": [1, 1],
     "direction": "bwd_data"},
])
def test_worker_rotates_over_copies_of_its_inputs(spec):
    """Timed runs rotate over copies of the inputs (at least rotate_mib MiB, at most 8):
    same values, distinct memory, the same layout, one shared output."""
    from tiledispatch.tile_engine.worker import Case
    case = Case(spec, seed=3, verify=False, rotate_mib=1)
    assert len(case.sets) == Case.MAX_COPIES  # tiny inputs: the cap
    first = case.sets[0]
    for other in case.sets[1:]:
        for a, b in zip(first, other):
            if a is case.out:
                assert b is case.out
                continue
            assert b is not a and not np.shares_memory(a, b)
            assert np.array_equal(a.astype(np.float64), b.astype(np.float64))
            assert a.flags.f_contiguous == b.flags.f_contiguous
    big = Case(spec, seed=3, verify=False, rotate_mib=0)
    assert len(big.sets) == 1
