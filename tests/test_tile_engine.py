"""The tile engine on the cpu target: sweep expansion with ranges, scratch build,
isolated workers (a crash and a hang cost one kernel each), CSV/JSON/tuning outputs, and
the dispatcher reading a tuning table."""
import csv
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch.codegen.yamlsrc import ManifestError
from tiledispatch.tile_engine import runner
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
    assert d.select(td.GemmProblem(20, 20, 20, "bf16")) == td.Dispatcher("gemm", "cpu").lib.name_call(
        d.lib.td_gemm_select, d._problem(td.GemmProblem(20, 20, 20, "bf16")))  # no bf16 entry: the model


def test_fp16_and_bf16_stand_in_for_each_other_in_tuning_tables(tmp_path, monkeypatch):
    """A table with bf16 entries only serves fp16 problems through the fp16 twins of its
    kernels (and the other way round); fp32 borrows nothing."""
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
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
    assert d.select(fp32) == d.lib.name_call(d.lib.td_gemm_select, d._problem(fp32))  # no stand-in for fp32


def test_the_calibrated_pick_scales_the_cost_model_by_the_nearest_measurements(tmp_path, monkeypatch):
    """Between entries: the cost model times each kernel's measured/model ratio at the
    nearest entries. At an entry: its measured ranking."""
    from tiledispatch.tile_engine.tuning import problem_spec
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
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


def test_a_table_does_not_speak_for_a_kernel_family_it_never_measured(tmp_path, monkeypatch):
    """A table of CUTLASS kernels keeps its pick among them; a kernel of a family no entry
    lists (the skinny decode GEMM) takes the problem where the cost model predicts it
    faster than the table's choice. fp16 through the bf16 entries alike."""
    from tiledispatch.tile_engine import tuning
    cut1 = "gemm_bf16_rcr_standard_64x128x64_c1x1_pp_sm90a"
    cut2 = "gemm_bf16_rcr_standard_128x256x64_c2x1_coop_sm90a"
    skinny = "gemm_bf16_rcr_standard_16x16x128_skinny_sm90a"
    table = {"schema_version": 1, "target": "sm_90a", "entries": [
        {"problem": {"op": "gemm", "M": 16, "N": 6144, "K": 4096, "dtype": "bf16", "layout": "rcr"},
         "kernels": [cut2, cut1], "latency_ms": [0.02, 0.03]}]}
    path = tmp_path / "families.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")

    def pick(problem, costs):
        return tuning.pick("sm_90a", problem, set(costs), lambda name: True, lambda q, name: costs[name])
    q = td.GemmProblem(16, 6144, 4096, "bf16")
    assert pick(q, {cut1: 10.0, cut2: 20.0}) == cut2                # measured: the table's best
    assert pick(q, {cut1: 10.0, cut2: 20.0, skinny: 15.0}) == skinny  # modelled faster than cut2
    assert pick(q, {cut1: 10.0, cut2: 20.0, skinny: 25.0}) == cut2
    twin = {n.replace("_bf16_", "_fp16_"): c for n, c in {cut1: 10.0, cut2: 20.0, skinny: 15.0}.items()}
    assert pick(td.GemmProblem(16, 6144, 4096, "fp16"), twin) == skinny.replace("_bf16_", "_fp16_")
    # split-K is a family of its own though its algorithm is cutlass (a table measured before
    # it existed never ranked it); a stream-K kernel is one of the table's family
    split = "gemm_bf16_rcr_splitk_128x128x64_c1x1_coop_sm90a"
    streamk = "gemm_bf16_rcr_streamk_atomic_128x128x64_c1x1_coop_sm90a"
    assert pick(q, {cut1: 10.0, cut2: 20.0, split: 15.0}) == split
    assert pick(q, {cut1: 10.0, cut2: 20.0, streamk: 15.0}) == cut2


@pytest.mark.parametrize("op, problem", [
    ("gemm", td.GemmProblem(300, 200, 100)),
    ("conv", td.ConvProblem(2, 2, 4, 4, (9, 9), (3, 3), 1, 1, 1, "bwd_data")),
])
def test_the_exported_cost_model_ranks_as_the_library_selects(op, problem, monkeypatch):
    """td_gemm_cost / td_conv_cost: the prediction selection ranks by (no tables here)."""
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    d = td.Dispatcher(op, "cpu")
    costs = {k.name: d.cost(problem, k.name) for k in d.kernels}
    ok = {n: c for n, c in costs.items() if c is not None}
    assert ok and all(c > 0 for c in ok.values())
    assert all(d.is_supported(problem, n) == (n in ok) for n in costs)
    assert d.select(problem) == min(sorted(ok), key=ok.get)
    with pytest.raises(td.UnsupportedProblemError):
        d.cost(problem, "no_such_kernel")


def test_shipped_tables_are_read_unless_switched_off(tmp_path, monkeypatch):
    from tiledispatch.tile_engine import tuning
    table = {"schema_version": 1, "target": "cpu", "entries": [
        {"problem": {"op": "gemm", "M": 8, "N": 8, "K": 8, "dtype": "fp32", "layout": "rcr"},
         "kernels": ["a", "b"], "latency_ms": [1.0, 2.5]}]}
    text = tuning.dumps(table)
    assert json.loads(text) == table and len(text.splitlines()) == 3  # one line per entry
    (tmp_path / "tuning_cpu.json").write_text(text)
    monkeypatch.setenv("TILEDISPATCH_KERNELS_DIR", str(tmp_path))  # where the shipped tables live
    monkeypatch.delenv("TILEDISPATCH_TUNING", raising=False)
    monkeypatch.delenv("TILEDISPATCH_NO_SHIPPED_TUNING", raising=False)
    assert tuning.table_paths("cpu") == (str(tmp_path / "tuning_cpu.json"),)
    assert tuning.table_paths("sm_90a") == ()
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    assert tuning.table_paths("cpu") == ()


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
    assert json.loads((tmp_path / "t.json").read_text())["entries"]
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
