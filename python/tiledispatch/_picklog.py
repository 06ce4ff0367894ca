"""Which kernel ran, and why: the pick log and the workload recorder.

    TILEDISPATCH_LOG_PICKS=1   each distinct pick logged once (logger "tiledispatch", INFO):
                               problem, kernel and source: "table", "cost model", "autotune"
                               (with the tuning time), "autotune cache" or "named"
    TILEDISPATCH_RECORD=FILE   each distinct problem run appended to FILE, one JSON line each
                               (selection.problem_spec), for `tiledispatch tune --from-log FILE`
"""
from __future__ import annotations

import json
import logging
import os
import threading

from . import selection

logger = logging.getLogger("tiledispatch")

_lock = threading.Lock()
_logged: set = set()     # (op, target, spec, kernel, source)
_recorded: set = set()   # (record file, spec)
_handler = None


def logging_picks() -> bool:
    return os.environ.get("TILEDISPATCH_LOG_PICKS", "") not in ("", "0")


def recording() -> str:
    """The file TILEDISPATCH_RECORD names ('' when not recording)."""
    return os.environ.get("TILEDISPATCH_RECORD", "")


def spec_text(problem) -> str:
    return json.dumps(selection.problem_spec(problem))


def _ensure_handler() -> None:
    """The log reaches stderr even where the application configured no logging: a handler
    on the "tiledispatch" logger, added once, unless some handler would already show it."""
    global _handler
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if _handler is not None or logger.hasHandlers():
        return
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("tiledispatch: %(message)s"))
    logger.addHandler(_handler)


def log_pick(op: str, target: str, problem, kernel: str, source: str, tuning_ms: float | None = None) -> None:
    """Logs one pick, once per distinct (problem, kernel, source)."""
    spec = spec_text(problem)
    key = (op, target, spec, kernel, source)
    with _lock:
        if key in _logged:
            return
        _logged.add(key)
        _ensure_handler()
    detail = source if tuning_ms is None else f"{source}, {tuning_ms:.1f} ms tuning"
    logger.info("pick %s %s %s: %s (%s)", op, target, spec, kernel, detail)


def record(problem) -> None:
    """Appends the problem's spec to the TILEDISPATCH_RECORD file, once per process. One
    write of one line in append mode: concurrent writers interleave whole lines."""
    path = recording()
    if not path:
        return
    spec = spec_text(problem)
    with _lock:
        if (path, spec) in _recorded:
            return
        _recorded.add((path, spec))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (spec + "\n").encode())
        finally:
            os.close(fd)
    except OSError as err:
        logger.warning("TILEDISPATCH_RECORD: cannot append to %s (%s)", path, err)


def read_log(path: str) -> list:
    """The distinct problem specs of a recorded log, in first-seen order (ValueError naming
    the line where one is not a JSON object with an op)."""
    specs, seen = [], set()
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                spec = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{path} line {number}: not JSON ({err})") from None
            if not isinstance(spec, dict) or spec.get("op") not in ("gemm", "conv"):
                raise ValueError(f"{path} line {number}: not a problem spec (an object with op gemm or conv)")
            key = json.dumps(spec, sort_keys=True)
            if key not in seen:
                seen.add(key)
                specs.append(spec)
    return specs


def reset() -> None:
    """Forgets what was logged and recorded (each pick is logged again)."""
    with _lock:
        _logged.clear()
        _recorded.clear()
