"""Hostile input at the C boundary, in gpu_helper and in the `tiledispatch` command: sizes that
overflow, split counts that would size huge workspaces, bad convolution geometry, usage
errors, closed pipes and fork after use. Every call that could crash or hang runs in a
subprocess with a timeout; the tests assert its exit code and the status and message."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import tiledispatch as td

TIMEOUT = 20
BIG = 2**62 + 1  # 4611686018427387905: M*K wraps int64 with a small factor

# Runs in a child: builds a problem from the JSON in argv[1], calls one ABI function and
# prints {"status": ..., "message": ..., "bytes": ...}.
CHILD = textwrap.dedent("""
    import ctypes, json, sys
    import tiledispatch as td
    from tiledispatch import _ffi
    spec = json.loads(sys.argv[1])
    lib = td.Dispatcher(spec["op"], "cpu").lib
    if spec["op"] == "gemm":
        p = _ffi.TdGemmProblem()
        p.dtype, p.layout, p.alpha = 0, 0, 1.0  # fp32, rcr
    else:
        p = _ffi.TdConvProblem()
        p.ndim, p.dtype = 2, 0
        for f in ("N", "G", "C", "K", "input_d", "input_h", "input_w", "filter_z", "filter_y", "filter_x",
                  "stride_d", "stride_h", "stride_w", "dilation_d", "dilation_h", "dilation_w"):
            setattr(p.base, f, 1)
        p.base.input_h = p.base.input_w = 8
        p.base.filter_y = p.base.filter_x = 3
    for field, value in spec["fields"].items():
        setattr(p.base if spec["op"] == "conv" and field != "ndim" else p, field, value)
    kernel = spec.get("kernel")
    kernel = kernel.encode() if kernel else None
    size = ctypes.c_size_t(0)
    buf = ctypes.create_string_buffer(256)
    fn = spec["fn"]
    if fn == "select":
        status = getattr(lib, f"td_{spec['op']}_select")(ctypes.byref(p), buf, 256)
    elif fn == "workspace":
        status = getattr(lib, f"td_{spec['op']}_workspace_size")(ctypes.byref(p), kernel, ctypes.byref(size))
    else:
        status = getattr(lib, f"td_{spec['op']}_is_supported")(ctypes.byref(p), kernel)
    print(json.dumps({"status": status, "message": lib.last_error(), "bytes": size.value}))
""")


def call(op, fn, fields, kernel=None):
    spec = json.dumps({"op": op, "fn": fn, "fields": fields, "kernel": kernel})
    proc = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def streamk_kernel(op):
    names = [k.name for k in td.Dispatcher(op, "cpu").kernels]
    pick = [n for n in names if ("streamk" in n or "stream_k" in n) and "fp32" in n] if op == "gemm" else \
        [n for n in names if "bwdweight" in n.replace("_", "") and "fp32" in n and "nhwgc" in n]
    if not pick:
        pytest.skip(f"no cpu {op} stream-K kernel in this build")
    return pick[0]


# ---- 1. sizes and overflow ------------------------------------------------------------------

@pytest.mark.parametrize("fields", [
    {"M": 4, "N": 4, "K": BIG},
    {"M": BIG, "N": 4, "K": 4},
    {"M": 2**40, "N": 2**40, "K": 1},
    {"M": 2**31, "N": 2**31, "K": 2**31},
    {"M": 4, "N": 4, "K": 4, "ldc": 2**62},
    {"M": 8, "N": 4, "K": 4, "lda": 2**61},
    {"M": 4, "N": 4, "K": 2**61, "ldb": 2**61},
], ids=["K-wraps", "M-wraps", "MN-overflows", "MNK-overflows", "ldc", "lda", "ldb"])
def test_gemm_sizes_that_overflow_are_td_error(fields):
    for fn in ("select", "supported"):
        out = call("gemm", fn, fields)
        assert out["status"] == -1, out
        assert "too large" in out["message"], out


def test_gemm_small_problem_still_selects():
    out = call("gemm", "select", {"M": 64, "N": 64, "K": 64})
    assert out["status"] == 0, out


@pytest.mark.parametrize("fields, words", [
    ({"stride_h": 0}, "stride and dilation must be positive"),
    ({"stride_w": -3}, "stride and dilation must be positive"),
    ({"dilation_h": 0}, "stride and dilation must be positive"),
    ({"pad_w": -1}, "padding must not be negative"),
    ({"filter_x": 20}, "filter is larger"),
    ({"N": 2**31 - 1, "C": 2**31 - 1, "input_h": 2**31 - 1}, "overflows int64"),
    ({"G": 2**31 - 1, "K": 2**31 - 1, "C": 2**31 - 1, "filter_y": 5, "input_h": 5}, "overflows int64"),
    ({"input_h": 2**31 - 1, "input_w": 2**31 - 1, "N": 2**31 - 1, "filter_y": 1, "filter_x": 1}, "overflows int64"),
], ids=["stride0", "stride-neg", "dilation0", "pad-neg", "filter-too-big", "input", "weight", "pixels"])
def test_conv_bad_geometry_is_td_error(fields, words):
    out = call("conv", "select", fields)
    assert out["status"] == -1, out
    assert "bad convolution problem" in out["message"] and words in out["message"], out


# ---- 2. split counts bounded ----------------------------------------------------------------

def test_gemm_huge_splits_are_refused_quickly():
    kernel = streamk_kernel("gemm")
    out = call("gemm", "workspace", {"M": 4096, "N": 4096, "K": 4096, "splits": 2**31 - 1}, kernel)
    assert out["status"] == -1 and "splits 2147483647 is above the maximum 4096" in out["message"], out


def test_gemm_splits_at_the_maximum_give_a_bounded_workspace():
    kernel = streamk_kernel("gemm")
    out = call("gemm", "workspace", {"M": 8192, "N": 8192, "K": 8192, "splits": 4096}, kernel)
    assert out["status"] == 0, out
    assert out["bytes"] < 1 << 30, out


def test_conv_huge_split_k_is_refused_quickly():
    kernel = streamk_kernel("conv")
    out = call("conv", "workspace", {"split_k": 2**31 - 1, "direction": 2, "N": 64, "C": 64, "K": 64,
                                     "input_h": 64, "input_w": 64}, kernel)
    assert out["status"] == -1 and "split_k 2147483647 is above the maximum 4096" in out["message"], out


# ---- 3. gpu_helper --------------------------------------------------------------------------

def gpu_helper():
    path = Path(sysconfig.get_path("scripts")) / "gpu_helper"
    if not path.exists():
        found = shutil.which("gpu_helper")
        if not found:
            pytest.skip("no gpu_helper console script installed")
        path = Path(found)
    return str(path)


@pytest.mark.parametrize("args, words, code", [
    (["4", "4", str(BIG)], "too large", 1),
    ([str(BIG), "4", "4"], "too large", 1),
    (["100000", "100000", "100000"], "too large", 1),
    (["4", "4", "99999999999999999999999"], "positive integers", 2),
    (["4", "0", "4"], "positive integers", 2),
    (["4", "-2", "4"], "positive integers", 2),
    (["4", "x", "4"], "positive integers", 2),
], ids=["K-wraps", "M-wraps", "too-big", "out-of-range", "zero", "negative", "not-a-number"])
def test_gpu_helper_refuses_bad_sizes_in_json(args, words, code):
    """Sizes that are not positive integers are usage errors (exit 2), sizes too large to
    allocate exit 1; both print the JSON error on stdout and the message on stderr."""
    proc = subprocess.run([gpu_helper(), *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert words in proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "error" and data["code"] == -1 and words in data["error"], data


def test_gpu_helper_small_problem_still_runs():
    proc = subprocess.run([gpu_helper(), "16", "8", "24", "--validate"], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["status"] == "success"


# ---- 4. the CLI answers in JSON -------------------------------------------------------------

def cli(*args, timeout=60):
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", *args], capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def assert_json_error(code, out, err, words):
    assert code == 1, (code, out, err)
    assert "Traceback" not in err, err
    data = json.loads(out)
    assert data["status"] == "error" and data["code"] in (-1, -2, -3), data
    assert words in data["error"], data


@pytest.mark.parametrize("args, words", [
    (["conv", "--stride", "0"], "--stride values must be at least 1"),
    (["conv", "--dilation", "0"], "--dilation values must be at least 1"),
    (["conv", "--pad", "-1"], "--pad values must be at least 0"),
    (["conv", "--N", "0"], "--N must be positive"),
    (["conv", "--split-k", "-1"], "--split-k must not be negative"),
    (["conv", "--input", "4", "4", "--filter", "9"], "filter is larger"),
    (["gemm", "0", "4", "4"], "must be positive"),
    (["gemm", "4", "4", str(BIG)], "too large"),
    (["gemm", "100000", "100000", "100000"], "too large"),
    (["conv", "--N", "100000", "--C", "1000", "--input", "1000", "1000"], "too large"),
], ids=["stride0", "dilation0", "pad-neg", "N0", "split-neg", "filter", "gemm-zero", "gemm-wraps",
        "gemm-huge", "conv-huge"])
def test_cli_bad_problems_answer_in_json(args, words):
    assert_json_error(*cli(*args), words)


@pytest.mark.parametrize("args, words", [
    (["gemm", "4", "4"], "the following arguments are required: K"),
    (["gemm", "4", "4", "x"], "invalid int value"),
    (["conv", "--dtype", "fp64"], "invalid choice"),
    (["conv", "--bogus"], "unrecognized arguments"),
])
def test_cli_usage_errors_answer_in_json_and_keep_the_usage(args, words):
    code, out, err = cli(*args)
    assert_json_error(code, out, err, words)
    assert "usage:" in err


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["gemm", "8", "8", "8"]])
def test_cli_output_into_a_closed_pipe_is_quiet(args):
    """`tiledispatch list | head -1`: the reader is gone before the command writes (its end
    of the pipe is closed at once): no BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "tiledispatch", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode in (0, 1), (proc.returncode, err)


# ---- 5. fork after a parallel cpu GEMM ------------------------------------------------------

FORK = textwrap.dedent("""
    import multiprocessing as mp
    import numpy as np
    import tiledispatch as td

    def work(i):
        a = np.ones((256, 256), np.float32)
        return float(td.gemm(a, a)[0, 0])

    if __name__ == "__main__":
        print(work(0), flush=True)  # the parent's OpenMP pool is started
        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map(work, range(4)), flush=True)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_a_parallel_gemm_does_not_hang(tmp_path):
    script = tmp_path / "fork_after_use.py"
    script.write_text(FORK)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["256.0", "[256.0,", "256.0,", "256.0,", "256.0]"]
