"""Meson on a small manifest in a temporary directory: the build, the configure-time
errors, and the incremental rebuild (adding a variant compiles that variant only)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MESON = [sys.executable, "-m", "mesonbuild.mesonmain"]

TWO = """\
schema_version: 1
gemm:
  - dtype: fp32
    layout: rcr
    tile: [[48, 64, 128], [96, 128, 256]]
    targets: [cpu]
"""
THREE = TWO + """\
  - dtype: bf16
    layout: rrr
    tile: [48, 64, 128]
    targets: [cpu]
"""

pytestmark = pytest.mark.skipif(shutil.which("ninja") is None and not Path(sys.executable).with_name("ninja").exists(),
                                reason="ninja is not installed (pip install '.[test]' brings it)")


def ninja_env():
    import os
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def meson(*args, cwd=None):
    return subprocess.run(MESON + list(args), cwd=cwd, capture_output=True, text=True, env=ninja_env())


def compiled_objects(output: str) -> list:
    return sorted(re.findall(r"Compiling C\+\+ object (\S+)", output))


def test_two_variants_build_and_adding_one_recompiles_only_it(tmp_path):
    manifest = tmp_path / "kernels.yaml"
    manifest.write_text(TWO)
    build = tmp_path / "build"
    setup = meson("setup", str(build), str(ROOT), f"-Dkernels={manifest}", "-Dgpu_targets=cpu")
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "tiledispatch: 2 kernel variants" in setup.stdout
    first = meson("compile", "-C", str(build))
    assert first.returncode == 0, first.stdout + first.stderr
    objects = compiled_objects(first.stdout)
    assert any("gemm_fp32_rcr_standard_48x64x128_r6x16_cpu.cpp.o" in o for o in objects)
    assert (build / "libtd_gemm_cpu.so").exists() and not (build / "libtd_conv_cpu.so").exists()
    registry = json.loads((build / "registry.json").read_text())
    assert [k["name"] for k in registry["kernels"]] == [
        "gemm_fp32_rcr_standard_48x64x128_r6x16_cpu", "gemm_fp32_rcr_standard_96x128x256_r6x16_cpu"]

    helper = subprocess.run([str(build / "gpu_helper"), "100", "70", "90", "--validate"],
                            capture_output=True, text=True)
    assert helper.returncode == 0 and json.loads(helper.stdout)["status"] == "success"

    nothing = meson("compile", "-C", str(build))
    assert compiled_objects(nothing.stdout) == []

    manifest.write_text(THREE)  # the build reconfigures by itself
    second = meson("compile", "-C", str(build))
    assert second.returncode == 0, second.stdout + second.stderr
    recompiled = compiled_objects(second.stdout)
    assert len(recompiled) == 2, recompiled
    assert any("gemm_bf16_rrr_standard_48x64x128_r6x16_cpu.cpp.o" in o for o in recompiled)
    assert any("table_gemm_cpu.cpp.o" in o for o in recompiled)
    registry = json.loads((build / "registry.json").read_text())
    assert len(registry["kernels"]) == 3


def test_a_bad_manifest_fails_at_configure_time_with_file_and_line(tmp_path):
    manifest = tmp_path / "kernels.yaml"
    manifest.write_text(TWO.replace("layout: rcr", "layout: rcr\n    colour: red"))
    setup = meson("setup", str(tmp_path / "build"), str(ROOT), f"-Dkernels={manifest}", "-Dgpu_targets=cpu")
    assert setup.returncode != 0
    assert f"{manifest}:5: unknown key 'colour' in gemm group" in setup.stdout + setup.stderr


def test_an_unknown_target_fails_at_configure_time(tmp_path):
    setup = meson("setup", str(tmp_path / "build"), str(ROOT), "-Dgpu_targets=cpu,sm_99")
    assert setup.returncode != 0
    assert "unknown target 'sm_99' in gpu_targets" in setup.stdout + setup.stderr


def test_every_module_of_the_package_is_installed():
    """meson.build lists the package's modules one by one; a module missing there imports
    from the source tree and fails in the installed wheel."""
    text = (ROOT / "meson.build").read_text()
    listed = set(re.findall(r"'(python/tiledispatch/[^']+\.py)'", text))
    package = ROOT / "python" / "tiledispatch"
    modules = {str(p.relative_to(ROOT)) for p in package.rglob("*.py")
               if "codegen" not in p.relative_to(package).parts}
    assert sorted(modules - listed) == []
