"""What a first user meets when something is off: a damaged installation (registry.json,
swapped libraries), a malformed tuning table, the command line's --kernel, the bench's output
folder, and a build or a library without the problem's dtype. Every error names what is wrong
and what to do."""
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import _registry, selection
from tiledispatch._registry import kernels_dir

ROOT = Path(__file__).resolve().parents[1]


def installed_registry() -> dict:
    return json.loads((kernels_dir() / "registry.json").read_text(encoding="utf-8"))


def python(code: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def cli(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tiledispatch", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture
def fresh_registry(monkeypatch):
    """registry() read again (from TILEDISPATCH_KERNELS_DIR where a test sets it), and the
    installed one again after the test."""
    _registry.registry.cache_clear()
    yield
    monkeypatch.delenv("TILEDISPATCH_KERNELS_DIR", raising=False)
    _registry.registry.cache_clear()


# ---- 1. an empty or malformed registry.json -------------------------------------------------

def _good() -> dict:
    data = installed_registry()
    return {"schema_version": data["schema_version"], "abi_version": data["abi_version"]}


@pytest.mark.parametrize("content, what", [
    ("", "empty"),
    ("   \n", "empty"),
    ('{"schema_version": 1, "abi_version"', "not valid JSON"),
    ("[1, 2, 3]", "malformed"),
    ("GOOD_NO_LIBRARIES", "malformed"),
    ("GOOD_BAD_KERNEL", "malformed"),
    ("GOOD_LIBRARIES_NOT_A_LIST", "malformed"),
])
def test_a_damaged_registry_names_the_file_and_says_to_reinstall(tmp_path, monkeypatch, fresh_registry,
                                                                  content, what):
    if content == "GOOD_NO_LIBRARIES":
        content = json.dumps({**_good(), "kernels": []})
    elif content == "GOOD_BAD_KERNEL":
        content = json.dumps({**_good(), "libraries": [], "kernels": [{"name": "gemm_what_is_this"}]})
    elif content == "GOOD_LIBRARIES_NOT_A_LIST":
        content = json.dumps({**_good(), "libraries": 3, "kernels": []})
    path = tmp_path / "registry.json"
    path.write_text(content)
    monkeypatch.setenv("TILEDISPATCH_KERNELS_DIR", str(tmp_path))
    with pytest.raises(td.TileDispatchError) as info:
        _registry.registry()
    message = str(info.value)
    assert str(path) in message and "reinstall" in message and what in message, message
    assert not isinstance(info.value.__cause__, (json.JSONDecodeError, KeyError))


def test_a_damaged_registry_fails_a_first_call_with_a_tiledispatch_error(tmp_path):
    (tmp_path / "registry.json").write_text("")
    proc = python("import numpy as np, tiledispatch as td\n"
                  "try:\n"
                  "    td.gemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))\n"
                  "except td.TileDispatchError as err:\n"
                  "    print('TDERR', err)\n", env={"TILEDISPATCH_KERNELS_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "TDERR" in proc.stdout and str(tmp_path / "registry.json") in proc.stdout, proc.stdout
    assert "JSONDecodeError" not in proc.stdout + proc.stderr


# ---- 2. swapped or mismatched libraries -----------------------------------------------------

def _copy_installation(tmp_path: Path) -> dict:
    data = installed_registry()
    (tmp_path / "registry.json").write_text(json.dumps(data))
    return {(lib["op"], lib["target"]): lib["file"] for lib in data["libraries"]}


def _load_error(kernels: Path, op: str, target: str = "cpu") -> str:
    proc = python("import tiledispatch as td\n"
                  "try:\n"
                  f"    td.Dispatcher({op!r}, {target!r}).lib\n"
                  "except td.TileDispatchError as err:\n"
                  "    print('TDERR', err)\n", env={"TILEDISPATCH_KERNELS_DIR": str(kernels)})
    assert proc.returncode == 0, proc.stderr  # a TileDispatchError, not an AttributeError / OSError
    assert proc.stdout.startswith("TDERR"), proc.stdout
    return proc.stdout


def test_swapped_libraries_say_they_do_not_match_and_to_reinstall(tmp_path):
    files = _copy_installation(tmp_path)
    if ("gemm", "cpu") not in files or ("conv", "cpu") not in files:
        pytest.skip("needs the cpu gemm and conv libraries")
    src = Path(str(kernels_dir()))
    shutil.copy(src / files[("conv", "cpu")], tmp_path / files[("gemm", "cpu")])
    shutil.copy(src / files[("gemm", "cpu")], tmp_path / files[("conv", "cpu")])
    for op in ("gemm", "conv"):
        message = _load_error(tmp_path, op)
        assert str(tmp_path / files[(op, "cpu")]) in message, message
        assert "does not match this tiledispatch package" in message and "ABI version" in message, message
        assert "symbol" in message and "reinstall" in message, message


def test_a_library_with_an_unresolved_symbol_says_it_does_not_match(tmp_path):
    """dlopen's own 'undefined symbol' (an OSError from ctypes): a library linked against
    another build."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to make a mismatched library")
    files = _copy_installation(tmp_path)
    if ("gemm", "cpu") not in files:
        pytest.skip("needs the cpu gemm library")
    source = tmp_path / "stale.c"
    source.write_text("int td_symbol_of_another_build(void);\nint td_abi_version(void) "
                      "{ return td_symbol_of_another_build(); }\n")
    lib = tmp_path / files[("gemm", "cpu")]
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    message = _load_error(tmp_path, "gemm")
    assert str(lib) in message and "undefined symbol" in message, message
    assert "does not match this tiledispatch package" in message and "reinstall" in message, message


# ---- 3. a tuning table with one malformed entry ----------------------------------------------

MALFORMED_ENTRIES = {
    "sizes as strings": {"problem": {"op": "gemm", "M": "64", "N": 64, "K": 64}, "kernels": []},
    "no K": {"problem": {"op": "gemm", "M": 64, "N": 64}, "kernels": []},
    "kernels not names": {"problem": {"op": "gemm", "M": 64, "N": 64, "K": 64}, "kernels": [5]},
    "no problem": {"kernels": ["x"]},
    "latency not numbers": {"problem": {"op": "gemm", "M": 64, "N": 64, "K": 64},
                            "kernels": ["x"], "latency_ms": ["fast"]},
    "entry not an object": [1, 2],
}


@pytest.mark.parametrize("case", sorted(MALFORMED_ENTRIES))
def test_a_tuning_table_with_one_malformed_entry_is_reported_not_raised(tmp_path, monkeypatch, case):
    d = td.Dispatcher("gemm", "cpu")
    good = next(k.name for k in d.kernels if k.dtype.key == "fp32" and k.layout.key == "rcr")
    entries = [{"problem": {"op": "gemm", "M": 96, "N": 80, "K": 72, "dtype": "fp32", "layout": "rcr"},
                "kernels": [good], "latency_ms": [1.0]},
               MALFORMED_ENTRIES[case]]
    path = tmp_path / f"table_{case.replace(' ', '_')}.json"
    path.write_text(json.dumps({"schema_version": 1, "target": "cpu", "entries": entries}))
    monkeypatch.setenv("TILEDISPATCH_TUNING", str(path))
    monkeypatch.setenv("TILEDISPATCH_NO_SHIPPED_TUNING", "1")
    rng = np.random.default_rng(7)
    a = rng.random((96, 72), dtype=np.float32)
    b = rng.random((72, 80), dtype=np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = td.gemm(a, b)  # no KeyError / TypeError: the table is ignored, the call works
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any(str(path) in m and "ignored" in m and "entry 1" in m for m in messages), messages


# ---- 4. tiledispatch gemm/conv --kernel NAME ---------------------------------------------------

def _gemm_kernel():
    return next(k for k in td.registry().kernels("gemm", "cpu")
                if k.dtype.key == "bf16" and k.layout.key != "rcr")


def _conv_kernel():
    return next(k for k in td.registry().kernels("conv", "cpu")
                if k.dtype.key != "fp32" and k.direction.key != "fwd" and k.ndim != 2)


def test_gemm_kernel_supplies_its_dtype_and_layout():
    k = _gemm_kernel()
    proc = cli("gemm", "64", "48", "40", "--kernel", k.name, "--validate")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["status"] == "success", proc.stdout + proc.stderr
    assert out["problem"]["dtype"] == "bf16" and out["problem"]["layout"] == k.layout.key
    assert out["kernel"] == k.name


@pytest.mark.parametrize("option, value", [("--dtype", "fp32"), ("--layout", "rcr")])
def test_gemm_kernel_disagreeing_with_dtype_or_layout_is_a_json_error(option, value):
    k = _gemm_kernel()
    proc = cli("gemm", "64", "48", "40", "--kernel", k.name, option, value)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "error", proc.stdout
    assert "disagrees" in out["error"] and k.name in out["error"] and option in out["error"], out


def test_gemm_kernel_agreeing_with_the_options_runs():
    k = _gemm_kernel()
    proc = cli("gemm", "64", "48", "40", "--kernel", k.name, "--dtype", "bf16", "--layout", k.layout.key)
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "success", proc.stdout


def test_conv_kernel_supplies_its_dtype_direction_and_rank():
    k = _conv_kernel()
    proc = cli("conv", "--kernel", k.name, "--validate")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["status"] == "success", proc.stdout + proc.stderr
    assert out["problem"]["dtype"] == k.dtype.key and out["problem"]["direction"] == k.direction.key
    assert len(out["problem"]["input"]) == k.ndim and out["kernel"] == k.name


@pytest.mark.parametrize("extra, word", [(["--dtype", "fp32"], "--dtype"), (["--direction", "fwd"], "--direction"),
                                         (["--input", "9", "9"], "--input")])
def test_conv_kernel_disagreeing_with_the_options_is_a_json_error(extra, word):
    k = _conv_kernel()
    proc = cli("conv", "--kernel", k.name, *extra)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "error", proc.stdout
    assert word in out["error"] and k.name in out["error"], out


def test_a_gemm_kernel_given_to_conv_is_a_json_error():
    proc = cli("conv", "--kernel", _gemm_kernel().name)
    assert proc.returncode == 1 and "is a gemm kernel, not a conv one" in json.loads(proc.stdout)["error"]


# ---- 5. the bench's default output folder -----------------------------------------------------

def _bad_sweep(tmp_path: Path) -> Path:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gemm:\n  - name: bad\n    dtype: fp64\n    layout: rcr\n    tile: [64, 64, 64]\n")
    return bad


def test_a_failed_bench_leaves_no_output_folder_where_it_ran(tmp_path):
    """`tiledispatch bench` without --out writes ./tiledispatch-bench; a bench that fails on its
    sweep leaves none (test_tile_engine's CLI test runs it from the repo root)."""
    bad = _bad_sweep(tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    proc = cli("bench", "--sweep", str(bad), "--problems", str(bad), "--target", "cpu", cwd=work)
    assert proc.returncode == 1, proc.stderr
    assert not (work / "tiledispatch-bench").exists()


def test_a_failed_bench_run_from_the_repo_root_leaves_no_folder_there(tmp_path):
    target = ROOT / "tiledispatch-bench"
    existed = target.exists()
    bad = _bad_sweep(tmp_path)
    try:
        proc = cli("bench", "--sweep", str(bad), "--problems", str(bad), "--target", "cpu", cwd=ROOT)
        assert proc.returncode == 1, proc.stderr
        if not existed:
            assert not target.exists(), "the failed bench left tiledispatch-bench/ in the source tree"
    finally:
        if not existed and target.is_dir() and not any(target.iterdir()):
            target.rmdir()


def test_a_bench_given_an_existing_out_folder_keeps_it(tmp_path):
    bad = _bad_sweep(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    proc = cli("bench", "--sweep", str(bad), "--problems", str(bad), "--target", "cpu", "--out", str(out))
    assert proc.returncode == 1 and out.is_dir()


# ---- 6. a build without cpu, a library without the problem's dtype ------------------------------

def _resolve(requested: str) -> subprocess.CompletedProcess:
    """`python -m codegen targets`, as Meson runs it at configure time (the source tree's codegen)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "codegen", "targets", "--requested", requested, "--format",
                           "meson"], capture_output=True, text=True, cwd=ROOT, env=env)


def test_gpu_targets_without_cpu_say_no_cpu_library_is_built():
    proc = _resolve("gfx942")
    assert proc.returncode == 0 and proc.stdout.split() == ["gfx942", "hip"], proc.stdout + proc.stderr
    assert "no cpu library will be built" in proc.stderr and "host (numpy) calls" in proc.stderr, proc.stderr
    assert "gfx942 library" in proc.stderr
    quiet = _resolve("cpu,gfx942")
    assert quiet.returncode == 0 and "no cpu library" not in quiet.stderr, quiet.stderr


def _fake_registry(names: list) -> _registry.Registry:
    data = installed_registry()
    libs = sorted({(n.split("_", 1)[0], n.rsplit("_", 1)[1]) for n in names})
    return _registry.Registry({"schema_version": data["schema_version"], "abi_version": data["abi_version"],
                               "libraries": [{"op": op, "target": t, "file": f"libtd_{op}_{t}.so"} for op, t in libs],
                               "kernels": [{"name": n} for n in names]}, "fake registry.json")


GFX942_CONV = [f"conv_{d}_{lay}_{dt}_64x64x32_w2x2x1_m32x32x8_compv3_intrawave_pad_gfx942"
               for d in ("fwd", "bwddata") for lay in ("nhwgc", "ndhwgc") for dt in ("fp16", "bf16")]


def test_the_unsupported_detail_says_the_library_has_no_kernel_of_the_dtype(monkeypatch):
    fake = _fake_registry(GFX942_CONV)
    monkeypatch.setattr(_registry, "registry", lambda: fake)
    fp32 = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), 1, 0, 1, "fwd", "fp32")
    assert selection.unsupported_detail("conv", "gfx942", fp32) == \
        "the gfx942 conv library has no fp32 kernels (it builds fp16, bf16)"
    wgrad = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), 1, 0, 1, "bwd_weight", "bf16")
    assert "no bf16 bwd_weight kernels" in selection.unsupported_detail("conv", "gfx942", wgrad)
    one_d = td.ConvProblem(1, 1, 8, 8, (8,), (3,), 1, 0, 1, "fwd", "bf16")
    assert "no 1D bf16 fwd kernels (it builds 2D, 3D ones)" in selection.unsupported_detail("conv", "gfx942", one_d)
    fine = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), 1, 0, 1, "fwd", "bf16")
    assert selection.unsupported_detail("conv", "gfx942", fine) == ""
    err = td.UnsupportedProblemError("no conv kernel for target gfx942 supports this problem (8 kernels registered)")
    explained = selection.explain_unsupported(err, "conv", "gfx942", fp32)
    assert isinstance(explained, td.UnsupportedProblemError) and explained.status == -2
    assert explained.message.endswith(": the gfx942 conv library has no fp32 kernels (it builds fp16, bf16)")
    assert _registry.library_contents("conv", "gfx942") == "the gfx942 conv library builds fp16, bf16 kernels only"


def test_a_dispatcher_error_for_a_dtype_the_library_lacks_lists_what_it_builds():
    conv = td.Dispatcher("conv", "cpu")
    built = {k.dtype.key for k in conv.kernels}
    missing = next(d for d in ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16") if d not in built)
    problem = td.ConvProblem(1, 1, 8, 8, (8, 8), (3, 3), 1, 0, 1, "fwd", missing)
    with pytest.raises(td.UnsupportedProblemError) as info:
        conv.select(problem)
    assert "the cpu conv library builds" in str(info.value) and "kernels only" in str(info.value), str(info.value)


def test_the_cli_says_the_library_has_no_kernel_of_the_dtype():
    built = {k.dtype.key for k in td.registry().kernels("conv", "cpu")}
    missing = next(d for d in ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16") if d not in built)
    proc = cli("conv", "--dtype", missing, "--target", "cpu")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["code"] == -2, proc.stdout
    assert f"the cpu conv library has no {missing} kernels (it builds " in out["error"], out
