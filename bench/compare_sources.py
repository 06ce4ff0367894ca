"""Compare the kernel sources two checkouts generate for one manifest.

    python bench/compare_sources.py OLD_CHECKOUT NEW_CHECKOUT [--manifest kernels.yaml]
                                    [--targets cpu,sm_90a,gfx942,gfx90a,gfx950]

Each checkout's own generator (`python -m codegen list` / `emit`, run in that checkout) lists
and emits every variant. The report: variants only in one of them, and for the rest whether
the kernel itself is the same (the template instance and the lines before the frame: defines
and includes) and whether the registration frame around it changed. Exit status 1 when a
kernel differs or a variant is missing.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# The template instance in either frame: `kernel_N =\n    INSTANCE::entry("N")` or
# `make_kernel<Kind,\n    INSTANCE>(\n    KernelInfo{...}`.
INSTANCE = (re.compile(r"kernel_\w+ =\n    (.*)::entry\(\"", re.S),
            re.compile(r"make_kernel<\w+,\n    (.*)>\(\n    KernelInfo", re.S))
PREAMBLE = re.compile(r"^(#define.*|#include.*)$", re.M)


def kernel_of(source: str) -> tuple:
    for pattern in INSTANCE:
        match = pattern.search(source)
        if match:
            return match.group(1), tuple(PREAMBLE.findall(source))
    raise ValueError("no template instance found")


def emit_all(checkout: Path, manifest: str, targets: str, out: Path) -> dict:
    listing = subprocess.run([sys.executable, "-m", "codegen", "list", "--manifest", manifest, "--targets", targets],
                             cwd=checkout, capture_output=True, text=True, check=True).stdout.split()
    sources = {}
    for name in listing:
        path = out / f"{name}.src"
        subprocess.run([sys.executable, "-m", "codegen", "emit", "--variant", name, "-o", str(path)], cwd=checkout,
                       check=True)
        sources[name] = path.read_text()
    return sources


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--manifest", default="kernels.yaml", help="relative to each checkout, or absolute")
    ap.add_argument("--targets", default="cpu,sm_90a,gfx942,gfx90a,gfx950")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "old").mkdir()
        (Path(tmp) / "new").mkdir()
        old = emit_all(args.old, args.manifest, args.targets, Path(tmp) / "old")
        new = emit_all(args.new, args.manifest, args.targets, Path(tmp) / "new")
    only_old, only_new = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    both = sorted(set(old) & set(new))
    kernel_changed = [n for n in both if kernel_of(old[n]) != kernel_of(new[n])]
    frame_changed = [n for n in both if old[n] != new[n] and n not in kernel_changed]
    print(f"variants: {len(old)} old, {len(new)} new, {len(both)} in both")
    print(f"only old: {len(only_old)} {only_old[:5]}")
    print(f"only new: {len(only_new)} {only_new[:5]}")
    print(f"kernel (template instance, defines, includes) changed: {len(kernel_changed)} {kernel_changed[:5]}")
    print(f"registration frame changed, kernel the same: {len(frame_changed)}")
    print(f"identical: {len(both) - len(kernel_changed) - len(frame_changed)}")
    return 1 if only_old or only_new or kernel_changed else 0


if __name__ == "__main__":
    sys.exit(main())
