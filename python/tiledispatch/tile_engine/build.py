"""Phase 2: a scratch Meson build of exactly the swept variants, in parallel, with progress.

A variant that fails to compile is recorded and left out: the build runs with ninja's
keep-going, then the libraries are relinked with -Dkernel_filter naming the variants that
compiled.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .._registry import kernels_dir as installed_kernels_dir
from .sweep import manifest_text

PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass
class BuildResult:
    build_dir: Path
    built: list
    failed: dict  # name -> the compiler's first error lines
    absent: tuple = ()  # prebuilt: swept variants the libraries do not hold


def prebuilt(configs, kernels_dir=None) -> BuildResult:
    """No build: the swept variants that libraries built earlier already hold (kernels_dir
    holding registry.json: a scratch build, or by default the installed package's)."""
    if not kernels_dir:
        kernels_dir = installed_kernels_dir()
    kernels_dir = Path(str(kernels_dir))
    index = kernels_dir / "registry.json"
    if not index.is_file():
        raise RuntimeError(f"--prebuilt: {index} does not exist (expected a build or the installed _kernels)")
    names = {k["name"] for k in json.loads(index.read_text())["kernels"]}
    built = [c.name for c in configs if c.name in names]
    if not built:
        raise RuntimeError(f"--prebuilt: none of the {len(configs)} swept variants is in {index}")
    return BuildResult(kernels_dir, built, {}, tuple(c.name for c in configs if c.name not in names))


def _meson(*args, cwd=None, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mesonbuild.mesonmain", *args], cwd=cwd,
                          capture_output=True, text=True, env=_env())
    if check and proc.returncode != 0:
        raise RuntimeError(f"meson {' '.join(args[:1])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _ninja(build_dir: Path, jobs: int, progress) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "mesonbuild.mesonmain", "compile", "-C", str(build_dir), "-j", str(jobs),
           "--ninja-args=-k0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = PROGRESS.match(line)
        if match and progress:
            progress(int(match.group(1)), int(match.group(2)))
    return proc.wait(), "".join(lines)


def find_source(explicit: str | None = None) -> Path:
    """The tiledispatch source tree (its meson.build builds the scratch libraries)."""
    for candidate in [explicit, os.environ.get("TILEDISPATCH_SOURCE"), os.getcwd()]:
        if candidate and (Path(candidate) / "meson.build").is_file() and (Path(candidate) / "codegen").is_dir():
            return Path(candidate).resolve()
    raise RuntimeError("tiledispatch bench builds its variants from the source tree: run it from a checkout "
                       "or pass --source DIR (or set TILEDISPATCH_SOURCE)")


def progress_bar(done: int, total: int, width: int = 30) -> None:
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r  build [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def build(configs, target: str, out_dir, source=None, jobs: int | None = None, progress=progress_bar) -> BuildResult:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / "sweep_kernels.yaml"
    manifest.write_text(manifest_text(configs))
    build_dir = out_dir / "build"
    src = find_source(source)
    jobs = jobs or os.cpu_count() or 2
    options = [f"-Dkernels={manifest}", f"-Dgpu_targets={target}", "-Dkernel_filter="]
    if (build_dir / "build.ninja").exists():
        _meson("configure", str(build_dir), *options)
    else:
        _meson("setup", str(build_dir), str(src), *options)
    code, log = _ninja(build_dir, jobs, progress)
    names = [c.name for c in configs]
    failed = {}
    if code != 0:
        for name in names:
            if not list(build_dir.rglob(f"*{name}.c*.o")) and not list(build_dir.rglob(f"*{name}.cu.o")):
                errors = [ln for ln in log.splitlines() if name in ln and "error" in ln.lower()][:3]
                failed[name] = "\n".join(errors) or "did not compile"
        built = [n for n in names if n not in failed]
        if not built:
            raise RuntimeError(f"no variant compiled:\n{log[-3000:]}")
        _meson("configure", str(build_dir), f"-Dkernel_filter={','.join(built)}")
        code, log = _ninja(build_dir, jobs, progress)
        if code != 0:
            raise RuntimeError(f"relinking without the failed variants failed:\n{log[-3000:]}")
    return BuildResult(build_dir, [n for n in names if n not in failed], failed)
