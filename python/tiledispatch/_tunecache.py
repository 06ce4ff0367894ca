"""The autotune cache: measured winners kept across processes, per device and build.

Folder: $TILEDISPATCH_CACHE_DIR, else $XDG_CACHE_HOME/tiledispatch, else ~/.cache/tiledispatch.
One file per target and fingerprint, `autotune_<target>_<hash of the header>.json`:

    {"schema_version": 1, "header": {"device": ..., "sm_count" or "cores": ..., "target": ...,
     "cuda": ..., "driver": ..., "build": ...},
     "entries": {KEY: {"problem": spec, "kernel": name, "latency_ms": ..., "tuning_ms": ...}}}

A file is applied only where its header equals this process's (_fingerprint.header) in every
field: a cache made on another device, driver, CUDA version or build is never applied. Such
files are left as they are; where this process has no cache of its own yet, they are named
in one warning. A cache file of this fingerprint that does not parse, or whose header differs
(a hand-made file), is ignored with one warning and not written over. Writes go to a temporary
file renamed over the cache (atomic); concurrent processes merge what they read before
writing, and the last writer wins where two write at once.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import pathlib
import tempfile
import threading
import warnings

from . import _fingerprint

SCHEMA = 1

_lock = threading.Lock()
_warned: set = set()     # paths (and per-target notices) warned about in this process
_unusable: set = set()   # cache paths not to read or write (corrupt, foreign header)


def cache_dir() -> pathlib.Path:
    explicit = os.environ.get("TILEDISPATCH_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return base / "tiledispatch"


def _fingerprint_id(header: dict) -> str:
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(target: str) -> pathlib.Path:
    """This process's cache file for `target`."""
    return cache_dir() / f"autotune_{target}_{_fingerprint_id(_fingerprint.header(target))}.json"


def _warn_once(key, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _describe(header) -> str:
    if not isinstance(header, dict):
        return "no header"
    shown = [f"{key} {header[key]}" for key in ("device", "sm_count", "cores", "cuda", "driver", "build")
             if key in header]
    return ", ".join(shown) or "an empty header"


def _read(path: pathlib.Path):
    """(data, problem) of a cache file: data None where the file is absent; problem: why it
    cannot be used ('' where it can)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except (OSError, UnicodeDecodeError) as err:
        return None, f"cannot read it ({err})"
    try:
        data = json.loads(text)
    except ValueError as err:
        return None, f"corrupt (not JSON: {err})"
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA or not isinstance(data.get("entries"), dict) \
            or not isinstance(data.get("header"), dict):
        return None, f"corrupt (not an autotune cache of schema {SCHEMA})"
    return data, ""


def load(target: str) -> dict:
    """The entries of this device and build's cache for `target` ({} where there are none, or
    the file is unusable: then one warning)."""
    path = cache_path(target)
    mine = _fingerprint.header(target)
    if path in _unusable:
        return {}
    data, problem = _read(path)
    if problem:
        _refuse(path, f"autotune cache {path} ignored: {problem}; delete it to let tiledispatch write a new one")
        return {}
    if data is None:
        _note_others(target, path, mine)
        return {}
    if data["header"] != mine:
        _refuse(path, f"autotune cache {path} ignored: made on {_describe(data['header'])}, this is "
                      f"{_describe(mine)}; it is left as it is")
        return {}
    return data["entries"]


def _refuse(path: pathlib.Path, message: str) -> None:
    with _lock:
        _unusable.add(path)
    _warn_once(path, message)


def _note_others(target: str, path: pathlib.Path, mine: dict) -> None:
    """Where this device and build have no cache yet: one warning naming the caches of this
    target made on another device or build (not applied, left as they are)."""
    others = []
    for name in sorted(glob.glob(str(path.parent / f"autotune_{glob.escape(target)}_*.json"))):
        data, problem = _read(pathlib.Path(name))
        if data is not None and data["header"] != mine:
            others.append(f"{name} ({_describe(data['header'])})")
    if others:
        _warn_once(("others", str(path)),
                   f"autotune cache ignored, made on another device or build: {'; '.join(others)}. This is "
                   f"{_describe(mine)}: its problems are measured again (into {path})")


def store(target: str, key: str, entry: dict) -> bool:
    """Adds one winner to this device and build's cache (False where it is not written: the
    file is unusable, or the folder cannot be written)."""
    path = cache_path(target)
    with _lock:
        if path in _unusable:
            return False
    mine = _fingerprint.header(target)
    data, problem = _read(path)
    if problem or (data is not None and data["header"] != mine):
        load(target)  # warns, marks it unusable
        return False
    entries = dict(data["entries"]) if data else {}
    entries[key] = entry
    text = json.dumps({"schema_version": SCHEMA, "header": mine, "entries": entries}, indent=0, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=str(path.parent))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as err:
        _warn_once(("write", str(path)), f"autotune cache {path} not written: {err}")
        return False
    return True


def reset() -> None:
    """Forgets the warnings given and the files found unusable in this process."""
    with _lock:
        _warned.clear()
        _unusable.clear()
