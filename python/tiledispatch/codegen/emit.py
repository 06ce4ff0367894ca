"""A variant's source (its family's template in the shared frame), and write-if-changed (so
ninja's restat skips unchanged sources)."""
from __future__ import annotations

import os
from pathlib import Path

from .frame import definition


def emit_source(config) -> str:
    return definition(config)


def write_if_changed(path, text: str) -> bool:
    """Writes text to path unless it already holds exactly that; True when written."""
    path = Path(path)
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True
