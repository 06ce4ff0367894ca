"""Locating what a backend's build needs (CUTLASS headers), with messages that say what to install."""
from __future__ import annotations

import importlib.util
from pathlib import Path

CUTLASS_HINT = ("install the CUTLASS headers with `pip install --no-deps nvidia-cutlass` (the wheel "
                "carries them; none of its Python dependencies are needed) or pass "
                "-Dcutlass_include=DIR (DIR/cutlass/cutlass.h)")


def cutlass_include_dirs(explicit: str = "") -> list[str]:
    """The include folders of CUTLASS/CuTe: `explicit` if given, else the nvidia-cutlass
    wheel's, found without importing it."""
    if explicit:
        root = Path(explicit)
        if not (root / "cutlass" / "cutlass.h").is_file():
            raise ValueError(f"-Dcutlass_include={explicit}: no cutlass/cutlass.h there; {CUTLASS_HINT}")
        extra = root.parent / "tools" / "util" / "include"
        return [str(root)] + ([str(extra)] if extra.is_dir() else [])
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"a cuda target needs the CUTLASS headers: {CUTLASS_HINT}")
    base = Path(list(spec.submodule_search_locations)[0]) / "source"
    include, util = base / "include", base / "tools" / "util" / "include"
    if not (include / "cutlass" / "cutlass.h").is_file():
        raise ValueError(f"the installed nvidia-cutlass package has no headers under {include}; {CUTLASS_HINT}")
    return [str(include), str(util)]
