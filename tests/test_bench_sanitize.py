"""bench/sanitize_sample.py (what compute-sanitizer runs on the GPU machine) on this
installation's default target: every sampled kernel checked against float64, the family
selection, and a bad argument refused."""
import re
import subprocess
import sys
from pathlib import Path

import tiledispatch as td
from tiledispatch.codegen.families.vendor import Vendor

BENCH = Path(__file__).resolve().parents[1] / "bench" / "sanitize_sample.py"


def run(*args):
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600)


def counts(stdout: str) -> dict:
    last = re.search(r"sanitizer sample \((\w+)\): (\d+) gemm, (\d+) fused-epilogue, (\d+) grouped, (\d+) "
                     r"block-scaled gemm kernels, (\d+) conv kernels", stdout)
    assert last, stdout[-2000:]
    return {"which": last.group(1), "gemm": int(last.group(2)), "conv": int(last.group(6))}


def test_our_families_each_run_once_and_match_float64():
    proc = run("ours")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "MISMATCH" not in proc.stdout
    got = counts(proc.stdout)
    assert got["which"] == "ours" and got["gemm"] >= 1 and got["conv"] >= 1
    checked = [line for line in proc.stdout.splitlines() if line.endswith(": ok")]
    # every sampled kernel printed at least one checked problem, each name a compiled kernel
    names = {line.split()[0] for line in checked}
    assert len(names) >= got["gemm"] + got["conv"]
    compiled = {k.name for op in ("gemm", "conv") for k in td.Dispatcher(op).kernels}
    assert names <= compiled


def test_vendor_only_samples_no_family_of_ours():
    proc = run("vendor")
    assert proc.returncode == 0, proc.stderr[-2000:]
    vendor = {k.name for op in ("gemm", "conv") for k in td.Dispatcher(op).kernels
              if isinstance(k.knobs, Vendor)}
    names = {line.split()[0] for line in proc.stdout.splitlines() if line.endswith(": ok")}
    assert names <= vendor
    assert counts(proc.stdout)["which"] == "vendor"


def test_an_unknown_selection_is_refused():
    proc = run("everything")
    assert proc.returncode != 0 and "usage: sanitize_sample.py [ours|vendor|all]" in proc.stderr
