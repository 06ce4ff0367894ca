"""Property-based fuzzing (hypothesis) of td.gemm, td.conv, td.Dispatcher, the problem
classes, the C ABI through ctypes and the `tiledispatch` command, on the cpu target.

Each target runs in a subprocess (tests/fuzz_worker.py) so that a crash fails its test
instead of killing pytest, and under a timeout so that a hang fails it too; the worker
records the example it is running, shown here when it dies. The examples are fixed
(derandomized hypothesis, no database): the same ones every run.

TD_FUZZ_EXAMPLES multiplies every target's example count (default 1: 11,720 examples in
all, 1-2 minutes on 2 cores); TD_FUZZ_EXAMPLES=10 is the long run (117,200, about 15-20
minutes). A failure prints hypothesis's shrunk example; `python tests/fuzz_worker.py TARGET N`
reruns one target alone.

Targets named bug_* are the bugs fuzzing found (each with its reproducer below), fixed:
each runs as a regression test that the fixed behaviour holds.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

WORKER = Path(__file__).with_name("fuzz_worker.py")
SCALE = float(os.environ.get("TD_FUZZ_EXAMPLES", "1"))

# examples per target at TD_FUZZ_EXAMPLES=1, and seconds per 1000 examples allowed before
# the run counts as hung (about 10x what it takes on 2 cores)
TARGETS = {
    "problems": (2500, 40),
    "abi": (2500, 60),
    "dispatcher": (2000, 60),
    "gemm": (2000, 80),
    "features": (1000, 120),
    "conv": (1500, 120),
    "cli_inproc": (800, 120),
    "threads": (400, 300),
    "cli": (20, 15000),  # a fresh interpreter per example
}

BUGS = {
    "bug_kernel_type": (
        "a kernel= or layout= argument of a wrong type raises AttributeError: "
        "td.gemm(a, a, kernel=5) -> AttributeError: 'int' object has no attribute 'name' "
        "(api.py gemm and Dispatcher._kernel); td.gemm(a, a, layout=5) -> AttributeError: "
        "'int' object has no attribute 'a_row'; td.Dispatcher('gemm').is_supported(td.GemmProblem(4, 4, 4), 5) "
        "likewise (a = np.ones((4, 4), np.float32))"),
    "bug_alpha_overflow": (
        "alpha outside the float range escapes as OverflowError: "
        "td.gemm(a, a, alpha=2**1024) -> OverflowError: int too large to convert to float "
        "(GemmProblem.to_c; a = np.ones((4, 4), np.float32))"),
    "bug_conv_huge_output": (
        "td.conv allocates the output before any size check: td.conv(np.ones((1, 4, 1), np.float32), "
        "np.ones((1, 3, 1), np.float32), padding=2**31 - 1) -> MemoryError (a 16 GiB output; without an "
        "address-space limit it tries to allocate and fill it)"),
    "bug_bytes_as_sizes": (
        "bytes where td.conv / td.ConvProblem take an integer or a tuple of integers are read as their byte "
        "values: td.ConvProblem(1, 1, 1, 1, (8,), (1,), stride=b'3').stride == (51,); "
        "td.conv(np.ones((1, 8, 1), np.float32), np.ones((1, 1, 1), np.float32), stride=b'\\x02') runs with "
        "stride 2; a dict or a set is taken as its keys (problems._spatial calls tuple() on anything "
        "iterable)"),
    "bug_negative_stride_unit_dim": (
        "a negative stride along a dimension of size 1 is refused though the array is used without a "
        "copy: td.gemm(np.ones((1, 4), np.float32)[::-1], np.ones((4, 3), np.float32)) -> "
        "InvalidArgumentError: A has a negative stride (copy it first); td.conv(np.ones((1, 8, 4), "
        "np.float32)[::-1], np.ones((4, 3, 4), np.float32)) likewise (dispatcher._address refuses any "
        "negative stride; matrix_order / np.ascontiguousarray accept it on a size-1 dim)"),
}


def run_worker(target: str, examples: int, timeout: float, tmp_path):
    last = tmp_path / f"{target}.last"
    # the cpu target everywhere (on a GPU machine too: td.gemm and the command would pick the GPU)
    env = {**os.environ, "TD_FUZZ_LAST": str(last), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
           "TILEDISPATCH_TARGET": "cpu"}
    try:
        proc = subprocess.run([sys.executable, str(WORKER), target, str(examples)], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        example = last.read_text() if last.exists() else "(none recorded)"
        out = (err.stdout or b"")[-4000:]
        pytest.fail(f"fuzz target {target} hung (no result in {timeout:.0f} s); the example running:\n{example}\n"
                    f"{out.decode(errors='replace') if isinstance(out, bytes) else out}")
    output = proc.stdout[-20000:] + proc.stderr[-20000:]
    if proc.returncode != 0:
        example = last.read_text() if last.exists() else "(none recorded)"
        crashed = proc.returncode < 0
        pytest.fail(f"fuzz target {target}: exit {proc.returncode}"
                    f"{' (killed by a signal: a crash)' if crashed else ''}; "
                    f"the last example run:\n{example}\noutput:\n{output}")
    return proc.stdout


@pytest.mark.parametrize("target", list(TARGETS))
def test_fuzz(target, tmp_path):
    base, per_1000 = TARGETS[target]
    examples = max(1, round(base * SCALE))
    timeout = 60 + per_1000 * examples / 1000
    out = run_worker(target, examples, timeout, tmp_path)
    line = [ln for ln in out.splitlines() if ln.startswith(f"{target}: ")][-1]
    ran = int(line.split()[1])
    assert ran >= examples, f"{target}: only {ran} of {examples} examples ran: {line}"
    print(line)


@pytest.mark.parametrize("target", list(BUGS))
def test_fuzz_fixed_bug(target, tmp_path):
    run_worker(target, 50, 120, tmp_path)
