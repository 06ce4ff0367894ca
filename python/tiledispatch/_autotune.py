"""Online autotuning (opt-in): the first call of a problem that the tuning tables do not speak
for times the kernels that support it, on the call's own arrays, and runs the fastest from
then on; winners persist in the autotune cache (_tunecache).

    TILEDISPATCH_AUTOTUNE=1                 on for the whole process
    with td.autotune(budget_ms=50): ...     on in this thread, within the block
    TILEDISPATCH_AUTOTUNE_BUDGET_MS=200     the time one problem's tuning may take (default 250)
    td.autotune_stats()                     what was tuned, how long it took, cache hits

Tuning: the candidates (kernels whose is_supported(problem, kernel) holds, less those never
picked: named_only, and vendor kernels where td.set_options(vendor=False)) in the cost
model's order; each runs once to warm up, then REPEAT timed runs (the median counts; the
library's timer: CUDA events on a GPU, each run after zeroing a scratch buffer twice the size
of L2). The output array is the scratch the candidates write; the real run follows. The
budget bounds the tuning: no run starts once the time spent plus the last run's time would
pass it, except that the cost model's first candidate always gets one timed run. A problem
with one candidate takes it untimed.

Never tuned: during CUDA-graph capture (torch or cupy; a known winner is still used, else the
library's pick), or while torch.are_deterministic_algorithms_enabled() (the library's pick,
no winner used). Problems a table holds an entry for (measured there, and the table applies
to this device) are the library's; a problem the tables answer only from their nearest
entries is tuned.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import statistics
import sys
import threading
import time

from . import _picklog, _tunecache, selection
from ._options import options
from ._registry import registry
from .arrays import is_device_array, is_torch
from .errors import InvalidArgumentError, TileDispatchError
from .problems import GemmProblem

DEFAULT_BUDGET_MS = 250.0
REPEAT = 3
VENDOR_FAMILIES = ("cudnn", "cublaslt")
FALLBACK_L2_BYTES = 64 << 20  # where the device's L2 size cannot be read (H200: 60 MiB)

_local = threading.local()     # .budgets: the budgets of this thread's open td.autotune() blocks
_lock = threading.RLock()      # the state below
_tune_lock = threading.Lock()  # one tuning at a time (two would disturb each other's timings)
_winners: dict = {}            # key -> Winner
_tables: dict = {}             # (key, tables environment) -> a table holds the problem
_disk: dict = {}               # (target, cache path) -> the cache file's entries
_generation = [1]              # bumped by reset(): api's fast-path entries of older winners retire
_stats = {"problems_tuned": 0, "tuning_ms": 0.0, "kernel_runs": 0, "cache_hits": 0}
_records: list = []


@dataclasses.dataclass
class Winner:
    kernel: str | None     # None: every candidate failed when timed; the library picks
    source: str            # "autotune" (measured here) or "autotune cache"
    tuning_ms: float = 0.0


class autotune:
    """Autotuning on in this thread within the block (thread-safe: other threads are not
    affected; nested blocks take the innermost budget).

        with td.autotune():                 # TILEDISPATCH_AUTOTUNE_BUDGET_MS, else 250 ms a problem
        with td.autotune(budget_ms=20):
    """

    def __init__(self, budget_ms: float | None = None):
        if budget_ms is not None:
            if isinstance(budget_ms, bool) or not isinstance(budget_ms, (int, float)) \
                    or not math.isfinite(budget_ms) or budget_ms <= 0:
                raise InvalidArgumentError(f"budget_ms must be a positive number of milliseconds, got {budget_ms!r}")
            budget_ms = float(budget_ms)
        self.budget_ms = budget_ms

    def __enter__(self):
        if not hasattr(_local, "budgets"):
            _local.budgets = []
        _local.budgets.append(self.budget_ms)
        return self

    def __exit__(self, *exc):
        _local.budgets.pop()
        return False


def active() -> bool:
    """Autotuning is on for this thread: a td.autotune() block or TILEDISPATCH_AUTOTUNE=1."""
    return bool(getattr(_local, "budgets", None)) or os.environ.get("TILEDISPATCH_AUTOTUNE", "") not in ("", "0")


def mode() -> int:
    """0 where autotuning is off in this thread (or determinism is asked), else the generation
    of the winners: part of the fast path's cache key, so that its entries follow the picks."""
    return _generation[0] if active() and not deterministic() else 0


def budget_ms() -> float:
    """The innermost block's budget, else TILEDISPATCH_AUTOTUNE_BUDGET_MS, else the default."""
    for value in reversed(getattr(_local, "budgets", None) or []):
        if value is not None:
            return value
    text = os.environ.get("TILEDISPATCH_AUTOTUNE_BUDGET_MS", "")
    if text:
        try:
            value = float(text)
            if math.isfinite(value) and value > 0:
                return value
        except ValueError:
            pass
        _picklog.logger.warning("TILEDISPATCH_AUTOTUNE_BUDGET_MS=%r is not a positive number: %g ms used",
                                text, DEFAULT_BUDGET_MS)
    return DEFAULT_BUDGET_MS


def deterministic() -> bool:
    """The caller asked for determinism (torch.use_deterministic_algorithms(True))."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.are_deterministic_algorithms_enabled())
    except Exception:  # noqa: BLE001 - a torch stand-in without the function: not asked
        return False


def capturing(target: str) -> bool:
    """A CUDA graph is being captured on the current stream (torch or cupy)."""
    if target == "cpu":
        return False
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
            return True
    except Exception:  # noqa: BLE001
        pass
    cupy = sys.modules.get("cupy")
    try:
        return bool(cupy is not None and cupy.cuda.get_current_stream().is_capturing())
    except Exception:  # noqa: BLE001
        return False


# ---- candidates and measurement --------------------------------------------------------

def candidates(d, problem) -> list:
    """The kernels that may serve the problem, in the cost model's order (fastest predicted
    first): supported, not named_only, not a vendor kernel where the vendor option is off."""
    vendor = options()["vendor"]
    ranked = []
    for k in d.kernels:
        if k.named_only or (not vendor and k.family in VENDOR_FAMILIES):
            continue
        cost = d.cost(problem, k.name)
        if cost is not None and d.is_supported(problem, k.name):
            ranked.append((cost, k.name))
    ranked.sort()
    return [name for _, name in ranked]


def _l2_flush(tensors):
    """A function that zeroes a scratch buffer twice the size of L2 on the current stream of
    the first CUDA array (torch or cupy), or None (host arrays, neither package)."""
    device = next((t for t in tensors if is_device_array(t)), None)
    if device is None:
        return None
    if is_torch(device):
        torch = sys.modules["torch"]
        l2 = getattr(torch.cuda.get_device_properties(device.device), "L2_cache_size", 0) or FALLBACK_L2_BYTES
        return torch.empty(2 * l2, dtype=torch.uint8, device=device.device).zero_
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        ordinal = device.device.id if type(device).__module__.startswith("cupy") else cupy.cuda.Device().id
        with cupy.cuda.Device(ordinal):
            l2 = cupy.cuda.runtime.getDeviceProperties(ordinal).get("l2CacheSize", 0) or FALLBACK_L2_BYTES
            scratch = cupy.empty(2 * l2, dtype=cupy.uint8)
        return lambda: scratch.fill(0)
    except Exception:  # noqa: BLE001 - no flush rather than no tuning
        return None


@dataclasses.dataclass
class Measured:
    timings_ms: dict      # kernel -> median of its timed runs (kernels measured, in order)
    runs: int             # kernel runs, warm-ups included
    tried: int            # candidates run at least once
    elapsed_ms: float


def measure(d, problem, tensors, names, budget: float = math.inf, repeat: int = REPEAT,
            started: float | None = None) -> Measured:
    """Times the kernels `names` on `tensors` through Dispatcher.run: per kernel one warm-up
    and `repeat` timed runs (median). No run starts once the time since `started` (default:
    now) plus the last run's time would pass `budget` ms, except the first kernel's first
    timed run. A kernel that fails is left out."""
    flush = _l2_flush(tensors)
    t0 = time.perf_counter() if started is None else started
    timings, runs, tried, last = {}, 0, 0, 0.0
    stop = False
    for name in names:
        times = []
        tried += 1
        for i in range(1 + max(1, repeat)):
            if (timings or times) and (time.perf_counter() - t0) * 1e3 + last > budget:
                stop = True
                break
            if flush is not None:
                flush()
            began = time.perf_counter()
            try:
                ms = d.run(problem, *tensors, kernel=name)
            except TileDispatchError:
                times = []
                break
            last = (time.perf_counter() - began) * 1e3
            runs += 1
            if i > 0:
                times.append(ms)
        if times:
            timings[name] = statistics.median(times)
        if stop:
            break
    return Measured(timings, runs, tried, (time.perf_counter() - t0) * 1e3)


# ---- keys, tables, the cache ------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _kernel_set(op: str, target: str) -> str:
    names = "\n".join(sorted(k.name for k in registry().kernels(op, target)))
    return hashlib.sha256(names.encode()).hexdigest()[:16]


def key(d, problem) -> str:
    """The cache key: the problem's spec, target and kernel set (and non-packed leading
    dimensions, a conv's split_k: they change which kernels apply)."""
    parts = {"target": d.target, "problem": selection.problem_spec(problem), "kernels": _kernel_set(d.op, d.target)}
    if isinstance(problem, GemmProblem):
        lay = problem.layout
        packed = (problem.K if lay.a_row else problem.M, problem.N if lay.b_row else problem.K, problem.N)
        given = (problem.lda, problem.ldb, problem.ldc)
        if any(ld and ld != p for ld, p in zip(given, packed)):
            parts["ld"] = [ld or p for ld, p in zip(given, packed)]
    elif getattr(problem, "split_k", 0):
        parts["split_k"] = problem.split_k
    if not options()["vendor"]:
        parts["vendor"] = False
    return json.dumps(parts, sort_keys=True)


def _tables_speak(d, problem, k: str) -> bool:
    env = (os.environ.get("TILEDISPATCH_TUNING"), os.environ.get("TILEDISPATCH_NO_SHIPPED_TUNING"))
    with _lock:
        known = _tables.get((k, env))
    if known is None:
        # an exact entry of a table the library applies (one of another device is skipped there);
        # a pick the tables calibrate from their nearest entries is not a measurement of this problem
        known = selection.held(d.target, problem) and d.tuned(problem) is not None
        with _lock:
            _tables[(k, env)] = known
    return known


def _from_cache(d, problem, k: str):
    path = _tunecache.cache_path(d.target)
    with _lock:
        entries = _disk.get((d.target, path))
        if entries is None:
            entries = _disk[(d.target, path)] = _tunecache.load(d.target)
    entry = entries.get(k)
    name = entry.get("kernel") if isinstance(entry, dict) else None
    if not isinstance(name, str) or name not in {c.name for c in d.kernels} or not d.is_supported(problem, name):
        return None
    return Winner(name, "autotune cache", 0.0)


def _tune(d, problem, tensors, k: str):
    started = time.perf_counter()
    names = candidates(d, problem)
    if not names:
        return None
    budget = budget_ms()
    if len(names) == 1:  # nothing to compare
        result = Measured({}, 0, 0, 0.0)
    else:
        result = measure(d, problem, tensors, names, budget, started=started)
    tuning_ms = (time.perf_counter() - started) * 1e3
    if result.timings_ms:
        kernel = min(result.timings_ms, key=result.timings_ms.get)
    else:  # one candidate, untimed; or every one failed when run: the library's pick
        kernel = names[0] if len(names) == 1 else None
    record = {"op": d.op, "target": d.target, "problem": selection.problem_spec(problem), "kernel": kernel,
              "source": "autotune", "tuning_ms": round(tuning_ms, 3), "budget_ms": budget,
              "candidates": len(names), "tried": result.tried, "runs": result.runs,
              "timings_ms": {n: round(ms, 6) for n, ms in result.timings_ms.items()}}
    with _lock:
        _stats["problems_tuned"] += 1
        _stats["tuning_ms"] += tuning_ms
        _stats["kernel_runs"] += result.runs
        _records.append(record)
    if result.timings_ms:
        _tunecache.store(d.target, k, {"problem": record["problem"], "kernel": kernel,
                                       "latency_ms": record["timings_ms"][kernel], "tuning_ms": record["tuning_ms"],
                                       "candidates": len(names), "tried": result.tried})
    return Winner(kernel, "autotune", tuning_ms)


def winner(d, problem, tensors):
    """(Winner or None, settled): the autotuned kernel for the problem; settled False where
    tuning was put off (CUDA-graph capture): the next call tries again."""
    k = key(d, problem)
    if _tables_speak(d, problem, k):
        return None, True
    with _lock:
        known = _winners.get(k)
    if known is not None:
        return known, True
    cached = _from_cache(d, problem, k)
    if cached is not None:
        with _lock:
            _winners.setdefault(k, cached)
            _stats["cache_hits"] += 1
            _records.append({"op": d.op, "target": d.target, "problem": selection.problem_spec(problem),
                             "kernel": cached.kernel, "source": cached.source, "tuning_ms": 0.0})
        return cached, True
    if capturing(d.target):
        return None, False
    with _tune_lock:
        with _lock:
            known = _winners.get(k)  # another thread tuned it meanwhile
        if known is None:
            known = _tune(d, problem, tensors, k)
            if known is None:
                return None, True
            with _lock:
                _winners[k] = known
    return known, True


# ---- the hook of td.gemm / td.conv ------------------------------------------------------

def _name(kernel) -> str:
    return kernel if isinstance(kernel, str) else getattr(kernel, "name", str(kernel))


def _log_library_pick(d, problem) -> None:
    try:
        picked = d.select(problem)
        tuned = d.tuned(problem)
    except TileDispatchError:
        return  # no kernel supports it: the run says so
    _picklog.log_pick(d.op, d.target, problem, picked, "table" if tuned == picked else "cost model")


def resolve(d, problem, tensors, kernel=None):
    """(kernel, settled) for one call: the named kernel, else the autotuned winner, else None
    (the library picks). Records the problem (TILEDISPATCH_RECORD) and logs the pick
    (TILEDISPATCH_LOG_PICKS)."""
    if _picklog.recording():
        _picklog.record(problem)
    log = _picklog.logging_picks()
    if kernel is not None:
        if log:
            _picklog.log_pick(d.op, d.target, problem, _name(kernel), "named")
        return kernel, True
    settled = True
    if active() and not deterministic():
        won, settled = winner(d, problem, tensors)
        if won is not None and won.kernel is not None:
            if log:
                _picklog.log_pick(d.op, d.target, problem, won.kernel, won.source,
                                  won.tuning_ms if won.source == "autotune" else None)
            return won.kernel, True
    if log:
        _log_library_pick(d, problem)
    return None, settled


def kernel_for(d, problem, tensors, kernel=None):
    """The kernel td.gemm / td.conv run (None: the library's pick); see resolve."""
    return resolve(d, problem, tensors, kernel)[0]


class FastPick:
    """The kernel of one entry of api's torch fast path: resolved at its first call (and again
    while tuning is put off), then `kernel` (bytes, None: the library's pick) is reused."""

    __slots__ = ("d", "problem", "struct", "kernel", "ready")

    def __init__(self, d, problem, struct):
        self.d, self.problem, self.struct = d, problem, struct
        self.kernel, self.ready = None, False

    def resolve(self, a, b, out):
        name, settled = resolve(self.d, self.problem, (a, b, out))
        self.kernel = None if name is None else name.encode()
        self.ready = settled
        return self.kernel


def autotune_stats() -> dict:
    """What autotuning did in this process: problems tuned, their tuning time in all (ms),
    kernel runs, cache hits, and per problem its record (kernel, source, tuning_ms, budget_ms,
    candidates, tried, runs, timings_ms)."""
    with _lock:
        out = dict(_stats)
        out["problems"] = [dict(r) for r in _records]
    return out


def reset() -> None:
    """Forgets the winners, the tables' answers, the cache files read and the statistics of
    this process (the cache files stay)."""
    with _lock:
        _winners.clear()
        _tables.clear()
        _disk.clear()
        _records.clear()
        _stats.update(problems_tuned=0, tuning_ms=0.0, kernel_runs=0, cache_hits=0)
        _generation[0] += 1
    _tunecache.reset()
