"""Online autotuning, its cache, the pick log, recording a workload and tune --from-log, and
the tuning tables' header check (the installed package, cpu target)."""
import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
import warnings

import numpy as np
import pytest

import tiledispatch as td
from conftest import fresh_autotune_state
from tiledispatch import _autotune, _fingerprint, _tunecache, selection
from tiledispatch.dispatcher import Dispatcher

M, N, K = 64, 80, 96  # fp32 rcr: four cpu kernels support it
RCR = td.GemmProblem(M, N, K, "fp32", "rcr")
ENV = ("TILEDISPATCH_AUTOTUNE", "TILEDISPATCH_AUTOTUNE_BUDGET_MS", "TILEDISPATCH_LOG_PICKS", "TILEDISPATCH_RECORD",
       "TILEDISPATCH_TUNING", "TILEDISPATCH_NO_SHIPPED_TUNING", "XDG_CACHE_HOME")


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """No autotune state, warnings or picks logged from an earlier test; a cache folder of
    the test's own."""
    reset = fresh_autotune_state(monkeypatch, tmp_path, ENV)
    yield
    reset()


@pytest.fixture
def runs(monkeypatch):
    """The kernel argument of every Dispatcher.run call."""
    seen = []
    original = Dispatcher.run

    def spy(self, problem, *args, **kwargs):
        seen.append(kwargs.get("kernel"))
        return original(self, problem, *args, **kwargs)

    monkeypatch.setattr(Dispatcher, "run", spy)
    return seen


def operands(m=M, n=N, k=K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.random((m, k), dtype=np.float32)
    b = np.asfortranarray(rng.random((k, n), dtype=np.float32))  # column-major: layout rcr
    return a, b


def autotune_warnings(caught) -> list:
    return [str(w.message) for w in caught if "autotune cache" in str(w.message)]


def test_a_repeated_shape_runs_the_measured_best_kernel_from_its_second_call(runs, caplog):
    caplog.set_level(logging.INFO, logger="tiledispatch")
    os.environ["TILEDISPATCH_LOG_PICKS"] = "1"
    a, b = operands()
    with td.autotune(budget_ms=60_000):
        first = td.gemm(a, b)
        stats = td.autotune_stats()
        runs_after_first = list(runs)
        second = td.gemm(a, b)
    record, = stats["problems"]
    names = _autotune.candidates(td.Dispatcher("gemm"), RCR)
    # the fp32 rcr cpu kernels of the default manifest: two standard tiles, the generic (fused
    # epilogue) variant, and stream-K's two reductions
    assert len(names) == 5 and record["candidates"] == 5 and record["tried"] == 5
    assert set(record["timings_ms"]) == set(names)
    best = min(record["timings_ms"], key=record["timings_ms"].get)
    assert record["kernel"] == best and record["source"] == "autotune" and record["problem"] == selection.problem_spec(RCR)
    # the first call: every candidate once to warm up and three times timed, then the real run
    assert stats["problems_tuned"] == 1 and stats["kernel_runs"] == 20 == record["runs"]
    assert runs_after_first == [n for n in names for _ in range(4)] + [best]
    # the second call: the winner, and no timing
    assert runs[len(runs_after_first):] == [best]
    assert td.autotune_stats()["kernel_runs"] == 20 and td.autotune_stats()["problems_tuned"] == 1
    np.testing.assert_allclose(first, a @ b, rtol=1e-5)
    np.testing.assert_allclose(second, a @ b, rtol=1e-5)
    picks = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pick gemm cpu")]
    assert len(picks) == 1 and f": {best} (autotune, " in picks[0] and '"M": 64, "N": 80, "K": 96' in picks[0]
    assert f"{record['tuning_ms']:.1f} ms tuning)" in picks[0]


def test_the_torch_fast_path_pick_waits_out_a_graph_capture_then_keeps_the_winner(monkeypatch, runs):
    """api._torch_fast's per-metadata pick (FastPick), driven here with host arrays on cpu: a
    capture puts tuning off (the library's pick, asked again next call); then the winner is
    measured once and kept. mode(), part of the fast path's key, follows autotuning."""
    a, b = operands()
    out = np.empty((M, N), np.float32)
    d = td.Dispatcher("gemm")
    assert _autotune.mode() == 0
    off = _autotune.FastPick(d, RCR, None)
    assert off.resolve(a, b, out) is None and off.ready
    pick = _autotune.FastPick(d, RCR, None)
    with td.autotune():
        on = _autotune.mode()
        assert on != 0
        capturing = _autotune.capturing
        monkeypatch.setattr(_autotune, "capturing", lambda target: True)
        assert pick.resolve(a, b, out) is None and not pick.ready and runs == []
        monkeypatch.setattr(_autotune, "capturing", capturing)
        kernel = pick.resolve(a, b, out)
    record, = td.autotune_stats()["problems"]
    assert pick.ready and kernel == record["kernel"].encode() and len(runs) == 4 * len(_autotune.candidates(d, RCR))
    _autotune.reset()
    with td.autotune():
        assert _autotune.mode() not in (0, on)  # the fast path's entries of older winners retire


def test_a_problem_with_one_candidate_is_not_timed(runs):
    x, w = np.ones((1, 8, 8, 8), np.float32), np.ones((8, 3, 3, 8), np.float32)
    conv = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), 1, 1, 1, "fwd", "fp32")
    only, = _autotune.candidates(td.Dispatcher("conv"), conv)
    with td.autotune():
        y = td.conv(x, w, padding=1)
    assert runs == [only] and y[0, 4, 4, 0] == 72.0
    record, = td.autotune_stats()["problems"]
    assert record["kernel"] == only and record["runs"] == 0 and record["candidates"] == 1


def test_autotuning_is_off_by_default_and_in_other_threads(runs):
    a, b = operands()
    td.gemm(a, b)
    assert runs == [None] and td.autotune_stats()["problems_tuned"] == 0
    outside = []
    with td.autotune():
        thread = threading.Thread(target=lambda: outside.append(td.gemm(a, b)))
        thread.start()
        thread.join()
        assert td.autotune_stats()["problems_tuned"] == 0 and runs == [None, None]
        td.gemm(a, b)
    assert td.autotune_stats()["problems_tuned"] == 1
    with pytest.raises(td.InvalidArgumentError, match="budget_ms must be a positive number"):
        td.autotune(budget_ms=0)


class SleepyDispatcher:
    """Stands in for a Dispatcher in measure(): every run takes RUN_MS."""

    RUN_MS = 5.0

    def __init__(self):
        self.calls = 0

    def run(self, problem, *tensors, kernel=None):
        self.calls += 1
        time.sleep(self.RUN_MS / 1e3)
        return self.RUN_MS


def test_the_budget_bounds_the_tuning_time():
    sleepy = SleepyDispatcher()
    names = [f"k{i}" for i in range(20)]  # 80 runs without a budget: 400 ms
    measured = _autotune.measure(sleepy, None, (), names, budget=40.0)
    # no run starts once the time spent plus the last run's would pass the budget
    assert measured.elapsed_ms <= 40.0 + SleepyDispatcher.RUN_MS
    assert 4 <= measured.runs == sleepy.calls <= 8 and measured.tried < len(names)
    # the least it does: the cost model's first candidate, warmed up and timed once
    a, b = operands(192, 192, 192)
    with td.autotune(budget_ms=0.001):
        td.gemm(a, b)
    record, = td.autotune_stats()["problems"]
    first = _autotune.candidates(td.Dispatcher("gemm"), td.GemmProblem(192, 192, 192, "fp32", "rcr"))[0]
    assert record["budget_ms"] == 0.001 and record["runs"] == 2 and record["tried"] == 1
    assert record["kernel"] == first and list(record["timings_ms"]) == [first]


def test_the_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_AUTOTUNE", "1")
    monkeypatch.setenv("TILEDISPATCH_AUTOTUNE_BUDGET_MS", "0.002")
    td.gemm(*operands())
    record, = td.autotune_stats()["problems"]
    assert record["budget_ms"] == 0.002 and record["tried"] == 1
    with td.autotune(budget_ms=123.0):
        assert _autotune.budget_ms() == 123.0


SCRIPT = textwrap.dedent("""
    import json, numpy as np, tiledispatch as td
    rng = np.random.default_rng(0)
    a = rng.random((64, 96), dtype=np.float32)
    b = np.asfortranarray(rng.random((96, 80), dtype=np.float32))
    td.gemm(a, b)
    td.gemm(a, b)
    print(json.dumps(td.autotune_stats()))
""")


def run_script(env_extra: dict):
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_winners_persist_across_processes(tmp_path):
    env = {"TILEDISPATCH_AUTOTUNE": "1", "TILEDISPATCH_LOG_PICKS": "1", "TILEDISPATCH_CACHE_DIR": str(tmp_path / "c")}
    first, err1 = run_script(env)
    assert first["problems_tuned"] == 1 and first["cache_hits"] == 0
    kernel = first["problems"][0]["kernel"]
    assert f": {kernel} (autotune, " in err1
    files = list((tmp_path / "c").iterdir())
    assert len(files) == 1 and files[0].name.startswith("autotune_cpu_")
    cache = json.loads(files[0].read_text())
    assert cache["header"]["device"] == _fingerprint.cpu_model() and cache["header"]["cores"] == os.cpu_count()
    assert cache["header"]["build"] == _fingerprint.build_hash()
    assert [e["kernel"] for e in cache["entries"].values()] == [kernel]
    second, err2 = run_script(env)
    assert second["problems_tuned"] == 0 and second["kernel_runs"] == 0 and second["cache_hits"] == 1
    assert second["problems"][0]["kernel"] == kernel and f": {kernel} (autotune cache)" in err2
    assert "warning" not in err2.lower()


def test_cache_writes_merge_what_is_on_disk_and_leave_no_temporary_file():
    assert _tunecache.store("cpu", "one", {"kernel": "a"})
    path = _tunecache.cache_path("cpu")
    data = json.loads(path.read_text())
    data["entries"]["written by another process"] = {"kernel": "b"}
    path.write_text(json.dumps(data))
    assert _tunecache.store("cpu", "two", {"kernel": "c"})
    assert json.loads(path.read_text())["entries"] == {"one": {"kernel": "a"}, "two": {"kernel": "c"},
                                                       "written by another process": {"kernel": "b"}}
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert _tunecache.load("cpu")["two"] == {"kernel": "c"}


def cache_text(header: dict, kernel: str) -> str:
    d = td.Dispatcher("gemm")
    return json.dumps({"schema_version": 1, "header": header,
                       "entries": {_autotune.key(d, RCR): {"problem": selection.problem_spec(RCR), "kernel": kernel}}})


def tune_twice():
    a, b = operands()
    with warnings.catch_warnings(record=True) as caught, td.autotune():
        warnings.simplefilter("always")
        td.gemm(a, b)
        td.gemm(a, b)
    return caught


def test_a_cache_from_another_device_is_ignored_with_one_warning_and_left_alone():
    names = _autotune.candidates(td.Dispatcher("gemm"), RCR)
    stale = dict(_fingerprint.header("cpu"), device="Imaginary CPU 9000")
    path = _tunecache.cache_path("cpu")  # a hand-made file under this fingerprint's name
    path.parent.mkdir(parents=True)
    path.write_text(cache_text(stale, names[-1]))
    before = path.read_bytes()
    caught = tune_twice()
    stats = td.autotune_stats()
    assert stats["cache_hits"] == 0 and stats["problems_tuned"] == 1  # not applied: measured
    messages = autotune_warnings(caught)
    assert len(messages) == 1 and "Imaginary CPU 9000" in messages[0] and str(path) in messages[0]
    assert _fingerprint.cpu_model() in messages[0]
    assert path.read_bytes() == before  # not written over


def test_a_cache_of_another_build_is_named_once_and_a_new_one_written():
    names = _autotune.candidates(td.Dispatcher("gemm"), RCR)
    other = _tunecache.cache_dir() / "autotune_cpu_0123456789abcdef.json"
    other.parent.mkdir(parents=True)
    other.write_text(cache_text(dict(_fingerprint.header("cpu"), build="0000000000000000"), names[-1]))
    before = other.read_bytes()
    caught = tune_twice()
    assert td.autotune_stats()["cache_hits"] == 0 and td.autotune_stats()["problems_tuned"] == 1
    messages = autotune_warnings(caught)
    assert len(messages) == 1 and str(other) in messages[0] and "build 0000000000000000" in messages[0]
    assert other.read_bytes() == before and _tunecache.cache_path("cpu").is_file()


def test_a_corrupt_cache_is_ignored_with_one_warning():
    path = _tunecache.cache_path("cpu")
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 1, "header": ')
    caught = tune_twice()
    messages = autotune_warnings(caught)
    assert len(messages) == 1 and "corrupt" in messages[0] and str(path) in messages[0]
    assert td.autotune_stats()["problems_tuned"] == 1
    assert path.read_text() == '{"schema_version": 1, "header": '


@pytest.mark.parametrize("deterministic", [True, False])
def test_no_tuning_while_determinism_is_asked(monkeypatch, runs, deterministic):
    try:
        import torch
        previous = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(deterministic)
        monkeypatch.setattr(torch, "use_deterministic_algorithms", torch.use_deterministic_algorithms)
    except ImportError:  # what the check reads: torch.are_deterministic_algorithms_enabled()
        torch, previous = None, None
        monkeypatch.setitem(sys.modules, "torch",
                            types.SimpleNamespace(are_deterministic_algorithms_enabled=lambda: deterministic))
    try:
        with td.autotune():
            td.gemm(*operands())
    finally:
        if torch is not None:
            torch.use_deterministic_algorithms(previous)
    tuned = td.autotune_stats()["problems_tuned"]
    if deterministic:
        assert tuned == 0 and runs == [None]
    else:
        assert tuned == 1 and len(runs) == 4 * len(_autotune.candidates(td.Dispatcher("gemm"), RCR)) + 1


def test_record_and_tune_from_log_round_trip(tmp_path, monkeypatch):
    log = tmp_path / "shapes.jsonl"
    monkeypatch.setenv("TILEDISPATCH_RECORD", str(log))
    a, b = operands()
    td.gemm(a, b)
    td.gemm(a, b)
    td.gemm(a[:32], b)
    x = np.ones((1, 8, 8, 8), np.float32)
    w = np.ones((8, 3, 3, 8), np.float32)
    td.conv(x, w, padding=1)
    monkeypatch.delenv("TILEDISPATCH_RECORD")
    conv = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), 1, 1, 1, "fwd", "fp32")
    problems = [RCR, td.GemmProblem(32, N, K, "fp32", "rcr"), conv]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [selection.problem_spec(p) for p in problems]

    table = tmp_path / "table.json"
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", "tune", "--from-log", str(log), "--out", str(table),
                           "--target", "cpu", "--budget-ms", "10000"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "success" and out["entries"] == 3 and out["skipped"] == [] and out["target"] == "cpu"
    written = json.loads(table.read_text())
    assert written["header"] == _fingerprint.header("cpu") and written["target"] == "cpu"
    by_spec = {json.dumps(e["problem"], sort_keys=True): e for e in written["entries"]}
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    for problem in problems:
        d = td.Dispatcher(selection.problem_spec(problem)["op"])
        entry = by_spec[json.dumps(selection.problem_spec(problem), sort_keys=True)]
        assert sorted(entry["kernels"]) == sorted(_autotune.candidates(d, problem))
        assert entry["latency_ms"] == sorted(entry["latency_ms"])
        assert d.tuned(problem) is None
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(table))
    for problem in problems:
        d = td.Dispatcher(selection.problem_spec(problem)["op"])
        assert d.tuned(problem) == by_spec[json.dumps(selection.problem_spec(problem), sort_keys=True)]["kernels"][0]

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "gemm", "M": 4, "N": 4, "K": 4}\nnot json\n')
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", "tune", "--from-log", str(bad), "--out",
                           str(tmp_path / "t2.json")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and not (tmp_path / "t2.json").exists()
    err = json.loads(proc.stdout)
    assert err["status"] == "error" and f"{bad} line 2: not JSON" in err["error"]


def table_text(header, kernel: str) -> str:
    table = {"schema_version": 1, "target": "cpu", "header": header, "entries": [
        {"problem": selection.problem_spec(RCR), "kernels": [kernel], "latency_ms": [0.01]}]}
    return json.dumps(table)


def test_a_table_measured_on_another_device_is_skipped_with_one_warning(tmp_path, monkeypatch):
    d = td.Dispatcher("gemm")
    kernel = _autotune.candidates(d, RCR)[-1]
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    foreign = tmp_path / "foreign.json"
    foreign.write_text(table_text({"device": "Imaginary CPU 9000", "cores": 4096, "build": "x"}, kernel))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(foreign))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert d.tuned(RCR) is None
        assert d.tuned(RCR) is None
        d.select(RCR)
    messages = [str(w.message) for w in caught]
    me = _fingerprint.identity("cpu")
    assert messages == [f"tuning table {foreign} ignored: measured on Imaginary CPU 9000 (cores 4096), "
                        f"this device is {me['device']} (cores {me['cores']})"]
    # the same table made here (another build hash: not checked) applies
    here = tmp_path / "here.json"
    here.write_text(table_text(dict(_fingerprint.header("cpu"), build="another build"), kernel))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(here))
    assert d.tuned(RCR) == kernel
    # so does a table with no header (made before tables had one)
    plain = tmp_path / "plain.json"
    plain.write_text(table_text(None, kernel).replace('"header": null, ', ""))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(plain))
    assert d.tuned(RCR) == kernel
    # a C caller that never names its device: no check (the tables are read again after the call)
    lib = d.lib
    assert lib.td_tuning_set_device(b"[1]") == -1 and "not a JSON object" in lib.last_error()
    try:
        assert lib.td_tuning_set_device(b"") == 0
        monkeypatch.setenv("TILEDISPATCH_TUNING", str(foreign))
        assert d.tuned(RCR) == kernel and d.select(RCR) == kernel  # the selection cache asks again
    finally:
        assert lib.td_tuning_set_device(json.dumps(_fingerprint.identity("cpu")).encode()) == 0
    with pytest.warns(RuntimeWarning, match="Imaginary CPU 9000"):
        assert d.tuned(RCR) is None


def test_a_problem_the_tables_speak_for_is_not_tuned(tmp_path, monkeypatch, runs):
    kernel = _autotune.candidates(td.Dispatcher("gemm"), RCR)[-1]
    table = tmp_path / "t.json"
    table.write_text(table_text(_fingerprint.header("cpu"), kernel))
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(table))
    with td.autotune():
        td.gemm(*operands())
    assert runs == [None] and td.autotune_stats()["problems_tuned"] == 0
    assert td.Dispatcher("gemm").select(RCR) == kernel


def test_a_problem_the_tables_answer_only_from_a_neighbour_is_tuned(tmp_path, monkeypatch, runs):
    d = td.Dispatcher("gemm")
    kernel = _autotune.candidates(d, RCR)[-1]
    near = dataclasses.replace(RCR, M=RCR.M + 8)
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"schema_version": 1, "target": "cpu", "header": _fingerprint.header("cpu"),
                                 "entries": [{"problem": selection.problem_spec(near), "kernels": [kernel],
                                              "latency_ms": [0.01]}]}))
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(table))
    assert d.tuned(RCR) is not None  # the table answers the problem from its neighbour...
    with td.autotune():
        td.gemm(*operands())
    assert td.autotune_stats()["problems_tuned"] == 1  # ...which is not a measurement of it: tuned
    assert len(runs) > 2


def test_the_shipped_table_says_it_was_measured_on_an_h200():
    from conftest import ROOT
    head = json.loads((ROOT / "tuning" / "tuning_sm_90a.json").read_text())["header"]
    assert head["device"] == "NVIDIA H200" and head["sm_count"] == 132 and head["target"] == "sm_90a"
    assert "build" not in head


def test_the_pick_log_names_each_source_once(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tiledispatch")
    monkeypatch.setenv("TILEDISPATCH_LOG_PICKS", "1")
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    d = td.Dispatcher("gemm")
    a, b = operands()
    td.gemm(a, b)
    td.gemm(a, b)
    named = "gemm_fp32_rcr_standard_48x64x128_r6x16_cpu"
    td.gemm(a, b, kernel=named)
    table = tmp_path / "t.json"
    kernel = _autotune.candidates(d, RCR)[-1]
    table.write_text(table_text(_fingerprint.header("cpu"), kernel))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(table))
    td.gemm(a, b)
    picks = [r.getMessage() for r in caplog.records if r.name == "tiledispatch"]
    spec = json.dumps(selection.problem_spec(RCR))
    monkeypatch.delenv("TILEDISPATCH_TUNING")
    model = d.select(RCR)
    assert picks == [f"pick gemm cpu {spec}: {model} (cost model)", f"pick gemm cpu {spec}: {named} (named)",
                     f"pick gemm cpu {spec}: {kernel} (table)"]
