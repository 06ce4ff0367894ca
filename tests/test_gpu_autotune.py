"""Online autotuning on CUDA tensors (a GPU with the sm_90a libraries; skipped without one):
the first call of a problem times its candidates within the budget, the second call runs the
measured winner with no timing, winners persist in the cache, and a CUDA-graph capture never
tunes (the library's pick inside it; the winner in a capture after tuning)."""
import pytest

from conftest import fresh_autotune_state, import_torch, torch_gpu_missing

torch = import_torch()
import torch.nn.functional as F  # noqa: E402

import tiledispatch as td  # noqa: E402
from tiledispatch import _autotune  # noqa: E402

ENV = ("TILEDISPATCH_AUTOTUNE", "TILEDISPATCH_AUTOTUNE_BUDGET_MS", "TILEDISPATCH_LOG_PICKS", "TILEDISPATCH_RECORD",
       "TILEDISPATCH_TUNING")
BUDGET_MS = 400.0


MISSING = torch_gpu_missing(torch, "gemm")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"autotuning on the GPU: {MISSING}")


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """No tables (every problem is tuned), no winners or statistics of an earlier test, a
    cache folder of the test's own."""
    reset = fresh_autotune_state(monkeypatch, tmp_path, ENV)
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    yield
    reset()


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 2 - 1).to(dtype=torch.bfloat16, device="cuda")


def operands(m, n=1288, k=1032):
    return rand(m, k), rand(n, k, seed=1).t()  # rcr


def assert_close(out, a, b):
    ref = a.double() @ b.double()
    err = (out.double() - ref).abs().max().item()
    assert err <= 1e-2 * ref.abs().max().item(), err


def test_the_second_call_runs_the_measured_winner_and_the_first_stays_within_the_budget():
    a, b = operands(200)
    with td.autotune(budget_ms=BUDGET_MS):
        first = td.gemm(a, b)
        torch.cuda.synchronize()
        stats = td.autotune_stats()
        second = td.gemm(a, b)
        torch.cuda.synchronize()
        after = td.autotune_stats()
    record, = stats["problems"]
    print(f"tuned {record['problem']}: {record['tried']} of {record['candidates']} candidates, "
          f"{record['runs']} runs, {record['tuning_ms']:.1f} ms (budget {BUDGET_MS:.0f}); winner {record['kernel']}")
    assert record["source"] == "autotune" and record["candidates"] >= 2 and record["tried"] >= 2
    assert record["kernel"] == min(record["timings_ms"], key=record["timings_ms"].get)
    # bounded by the budget: no run starts past it (module loading of a kernel's first run aside)
    assert record["tuning_ms"] <= 2 * BUDGET_MS
    # the second call: no tuning, no timed run
    assert after["problems_tuned"] == 1 and after["kernel_runs"] == stats["kernel_runs"]
    assert_close(first, a, b)
    assert_close(second, a, b)
    named = td.gemm(a, b, kernel=record["kernel"])
    torch.cuda.synchronize()
    assert torch.equal(second, named)  # the winner ran: bit for bit its own result


def test_a_winner_persists_in_the_cache_and_is_used_without_tuning():
    a, b = operands(136)
    with td.autotune(budget_ms=BUDGET_MS):
        td.gemm(a, b)
    won = td.autotune_stats()["problems"][0]["kernel"]
    _autotune.reset()
    with td.autotune(budget_ms=BUDGET_MS):
        out = td.gemm(a, b)
    torch.cuda.synchronize()
    stats = td.autotune_stats()
    assert stats["problems_tuned"] == 0 and stats["cache_hits"] == 1
    assert stats["problems"][0]["kernel"] == won and stats["problems"][0]["source"] == "autotune cache"
    assert torch.equal(out, td.gemm(a, b, kernel=won))


def test_a_capture_never_tunes_and_a_capture_after_tuning_replays_the_winner():
    a, b = operands(72)
    out = torch.empty(72, 1288, dtype=torch.bfloat16, device="cuda")
    with td.autotune(budget_ms=BUDGET_MS):
        td.gemm(a[:8], b)  # a warm-up of another shape (the library loaded, a stream ready)
        tuned_before = td.autotune_stats()["problems_tuned"]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side), torch.cuda.graph(graph):
            td.gemm(a, b, out=out)
        torch.cuda.current_stream().wait_stream(side)
        assert td.autotune_stats()["problems_tuned"] == tuned_before  # put off while capturing
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, a, b)
        eager = td.gemm(a, b)  # outside the capture: tuned now
        torch.cuda.synchronize()
        assert td.autotune_stats()["problems_tuned"] == tuned_before + 1
        graph2 = torch.cuda.CUDAGraph()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.cuda.graph(graph2):
            td.gemm(a, b, out=out)
        torch.cuda.current_stream().wait_stream(side)
        out.zero_()
        graph2.replay()
        torch.cuda.synchronize()
    assert torch.equal(out, eager)  # the winner, bit for bit


def test_a_grouped_conv_is_tuned_and_matches_float64():
    x = rand(8, 128, 28, 28).contiguous(memory_format=torch.channels_last)
    w = rand(128, 32, 3, 3, seed=1).contiguous(memory_format=torch.channels_last)
    with td.autotune(budget_ms=BUDGET_MS):
        y1 = torch.ops.tiledispatch.conv(x, w, [1, 1], [1, 1], [1, 1], 4)
        y2 = torch.ops.tiledispatch.conv(x, w, [1, 1], [1, 1], [1, 1], 4)
        torch.cuda.synchronize()
    stats = td.autotune_stats()
    record, = stats["problems"]
    print(f"tuned {record['problem']}: {record['tried']} of {record['candidates']} candidates, "
          f"{record['tuning_ms']:.1f} ms; winner {record['kernel']}")
    assert stats["problems_tuned"] == 1 and record["kernel"] == min(record["timings_ms"], key=record["timings_ms"].get)
    ref = F.conv2d(x.double(), w.double(), stride=1, padding=1, groups=4)
    for y in (y1, y2):
        err = (y.double() - ref).abs().max().item()
        assert err <= 1e-2 * ref.abs().max().item(), err
