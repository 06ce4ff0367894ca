"""The `tiledispatch` command and gpu_helper: JSON output and exit codes."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import tiledispatch as td
from tiledispatch._registry import kernels_dir


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def test_gemm_validate_prints_the_reference_json():
    code, out, _ = run("gemm", "512", "512", "512", "--validate")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"problem", "kernel", "execution", "validation", "status"}
    assert data["problem"]["M"] == data["problem"]["N"] == data["problem"]["K"] == 512
    assert data["kernel"] in {k.name for k in td.Dispatcher("gemm", "cpu").kernels}
    assert data["execution"]["time_ms"] > 0 and data["execution"]["tflops"] > 0
    assert data["validation"]["accuracy"] == 100.0
    assert data["status"] == "success"
    assert '"status": "success"' in out


@pytest.mark.parametrize("dtype, layout", [("bf16", "rrr"), ("fp8_e5m2", "ccr"), ("fp16", "crr")])
def test_gemm_dtypes_and_layouts(dtype, layout):
    code, out, _ = run("gemm", "65", "33", "129", "--dtype", dtype, "--layout", layout, "--validate")
    data = json.loads(out)
    assert code == 0, data
    assert data["status"] == "success" and data["validation"]["accuracy"] == 100.0
    assert f"_{layout}_" in data["kernel"]


def test_gemm_named_kernel():
    name = "gemm_fp32_rcr_streamk_atomic_96x128x256_r6x16_cpu"
    code, out, _ = run("gemm", "200", "300", "1000", "--kernel", name, "--validate")
    assert code == 0
    assert json.loads(out)["kernel"] == name


@pytest.mark.parametrize("args, status, message", [
    (["gemm", "0", "4", "4"], -1, "M, N and K must be positive"),
    (["gemm", "4", "4", "4", "--kernel", "gemm_missing"], -2, "no kernel named gemm_missing"),
    (["conv", "--dtype", "fp8_e4m3"], -2, "no conv kernel for target cpu supports this problem"),
    (["gemm", "4", "4", "4", "--target", "gfx942"], -1, "no gemm library for target 'gfx942'"),
])
def test_errors_print_json_and_exit_1(args, status, message):
    code, out, _ = run(*args)
    assert code == 1
    data = json.loads(out)
    assert data["status"] == "error" and data["code"] == status
    assert message in data["error"]


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_conv_grouped_2d(direction):
    code, out, _ = run("conv", "--N", "2", "--G", "4", "--C", "8", "--K", "8", "--input", "28", "28",
                       "--filter", "3", "--pad", "1", "--stride", "2", "--direction", direction, "--validate")
    data = json.loads(out)
    assert code == 0, data
    assert data["status"] == "success" and data["validation"]["accuracy"] == 100.0
    assert data["problem"]["output"] == [14, 14]
    assert data["kernel"].startswith(f"conv_{direction.replace('_', '')}_nhwgc_fp32_")


def test_list_filters_and_registry_exports():
    code, out, _ = run("list", "--filter", "conv_fwd_*")
    names = out.split()
    assert code == 0 and names and all(n.startswith("conv_fwd_") for n in names)
    code, out, _ = run("list", "--op", "gemm", "--json")
    assert {k["name"] for k in json.loads(out)} == {k.name for k in td.Dispatcher("gemm", "cpu").kernels}
    code, out, _ = run("registry")
    assert code == 0 and json.loads(out)["schema_version"] == 1
    code, out, _ = run("registry", "--op", "conv")
    assert [k["op"] for k in json.loads(out)["kernels"]] == ["conv"] * len(td.Dispatcher("conv", "cpu").kernels)


def test_gpu_helper_is_installed_and_prints_json():
    helper = kernels_dir() / "gpu_helper"
    proc = subprocess.run([str(helper), "200", "100", "300", "--validate"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "success" and data["validation"]["accuracy"] == 100.0
    assert data["kernel"].startswith("gemm_fp32_rcr_")
    proc = subprocess.run([str(helper), "0", "1", "1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "must be positive" in proc.stderr


def console_script(name: str) -> Path:
    """A console script of this environment (the venv's bin folder, or on PATH)."""
    script = Path(sysconfig.get_path("scripts")) / name
    if not script.is_file():
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"no {name} console script in {script.parent} or on PATH (pip install . makes one)")
        script = Path(found)
    return script


def test_the_gpu_helper_console_script_runs_the_installed_binary():
    """`pip install .` puts gpu_helper on the PATH: it runs _kernels/gpu_helper (here over the
    cpu GEMM library) with its arguments, exit status and output unchanged."""
    helper = console_script("gpu_helper")
    proc = subprocess.run([str(helper), "200", "100", "300", "--validate"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"problem", "kernel", "execution", "validation", "status"}
    assert data["problem"] == {"M": 200, "N": 100, "K": 300, "dtype": "fp32"}
    assert data["status"] == "success" and data["validation"]["accuracy"] == 100.0
    assert data["kernel"].startswith("gemm_fp32_rcr_")
    proc = subprocess.run([str(helper), "0", "1", "1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "must be positive" in proc.stderr


def test_the_gpu_helper_console_script_says_when_the_build_made_no_binary(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys, tiledispatch.cli as c; sys.exit(c.gpu_helper_main())",
                           "1", "1", "1"], capture_output=True, text=True,
                          env={**os.environ, "TILEDISPATCH_KERNELS_DIR": str(tmp_path)})
    assert proc.returncode == 1 and proc.stdout == ""
    assert "this installation has no gpu_helper binary" in proc.stderr
