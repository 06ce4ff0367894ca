"""Locating what a backend's build needs (CUTLASS headers), with messages that say what to install."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
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
    package = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else \
        _package_outside_the_build_environment("cutlass_library")
    if not package:
        raise ValueError(f"a cuda target needs the CUTLASS headers: {CUTLASS_HINT}")
    base = Path(package) / "source"
    include, util = base / "include", base / "tools" / "util" / "include"
    if not (include / "cutlass" / "cutlass.h").is_file():
        raise ValueError(f"the installed nvidia-cutlass package has no headers under {include}; {CUTLASS_HINT}")
    return [str(include), str(util)]


FIND_PACKAGE = ("import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
                "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')")


def _package_outside_the_build_environment(name: str) -> str:
    """The folder of package `name` as this interpreter sees it without the build
    environment's overlay: `pip install .` builds in an isolated environment whose PYTHONPATH
    hides the packages of the venv it installs into (the nvidia-cutlass wheel the user
    installed there). '' where it is not found."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    try:
        done = subprocess.run([sys.executable, "-c", FIND_PACKAGE, name], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


HIP_HINT = ("install a HIP compiler and headers: on Debian/Ubuntu `apt-get install clang-19 lld-19 "
            "libamdhip64-dev rocm-device-libs`, or ROCm's hipcc (set -Dhip_compiler=PATH or HIPCXX)")
HIP_COMPILERS = ("hipcc", "clang++-20", "clang++-19", "clang++")
DEVICE_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/usr/lib/aarch64-linux-gnu/amdgcn/bitcode",
                   "/opt/rocm/amdgcn/bitcode", "/opt/rocm/lib/llvm/lib/clang/amdgcn/bitcode")
PROBE = "#include <hip/hip_runtime.h>\n__global__ void td_probe(float* p) { p[0] = 1.0f; }\n"


def _compiles(compiler: str, args: list[str]) -> tuple[bool, str]:
    import os
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.hip")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(PROBE)
        try:
            done = subprocess.run([compiler, "-x", "hip", "-O2", *args, "-c", src, "-o", os.path.join(tmp, "probe.o")],
                                  capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.SubprocessError) as err:
            return False, str(err)
        return done.returncode == 0, done.stderr.strip()


def hip_toolchain(targets: list[str], explicit: str = "") -> tuple[str, dict]:
    """The HIP compiler and, per gfx target, the flags that select its device libraries:
    --rocm-device-lib-path where they know the architecture, else -nogpulib (our kernels call
    no device-library function). ValueError says what to install."""
    import os
    import shutil
    candidates = [explicit] if explicit else ([os.environ["HIPCXX"]] if os.environ.get("HIPCXX") else []) + [
        c for c in HIP_COMPILERS if shutil.which(c)]
    if not candidates:
        raise ValueError(f"a gfx target ({', '.join(targets)}) needs a HIP compiler; none found: {HIP_HINT}")
    compiler, why = None, ""
    for cand in candidates:
        ok, why = _compiles(cand, [f"--offload-arch={targets[0]}", "-nogpulib"])
        if ok:
            compiler = cand
            break
    if compiler is None:
        if "hip_runtime.h" in why:
            raise ValueError(f"{candidates[0]} cannot find hip/hip_runtime.h: {HIP_HINT}")
        raise ValueError(f"no HIP compiler here builds for {targets[0]} ({candidates[0]}: {why.splitlines()[-1] if why else 'failed'}); "
                         f"gfx950 needs LLVM 20 or ROCm 6.4 or newer. {HIP_HINT}")
    flags = {}
    for target in targets:
        ok, why = _compiles(compiler, [f"--offload-arch={target}", "-nogpulib"])
        if not ok:
            raise ValueError(f"{compiler} cannot build for {target}: {why.splitlines()[-1] if why else 'failed'} "
                             f"(gfx950 needs LLVM 20 or ROCm 6.4 or newer)")
        arch = target[3:]
        libs = next((d for d in DEVICE_LIB_DIRS if os.path.isfile(os.path.join(d, f"oclc_isa_version_{arch}.bc"))), None)
        flags[target] = [f"--rocm-device-lib-path={libs}"] if libs else ["-nogpulib"]
    return compiler, flags


# ---- vendor libraries (the cudnn and cublaslt families) ---------------------------------
# name -> (the header that marks its include folder, the environment variables naming an
# include folder or a root, the Python packages whose folder holds include/ and lib/, how to
# get it). The library itself is opened at run time (bindings/cuda/vendor_lib.hpp); the build
# needs the headers, and bakes in the library folder found beside them as a fallback path.
VENDORS = {
    "cudnn": ("cudnn.h", ("CUDNN_INCLUDE_DIR", "CUDNN_ROOT"), ("nvidia.cudnn",),
              "pip install nvidia-cudnn-cu13 (torch installs it), or set CUDNN_ROOT or CUDNN_INCLUDE_DIR"),
    "cublaslt": ("cublasLt.h", ("CUBLAS_INCLUDE_DIR", "CUBLAS_ROOT"), ("nvidia.cu13", "nvidia.cublas"),
                 "install the CUDA toolkit's cuBLAS headers or pip install nvidia-cublas, or set CUBLAS_ROOT "
                 "or CUBLAS_INCLUDE_DIR"),
}


def _toolkit_include_dirs() -> list[Path]:
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "include")
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
    if nvcc:
        dirs.append(Path(os.path.realpath(nvcc)).parent.parent / "include")
    dirs += [Path("/usr/local/cuda/include"), Path("/usr/include"), Path("/usr/include/x86_64-linux-gnu")]
    return dirs


def _library_dir(include: Path) -> str:
    for name in ("lib", "lib64", "../lib/x86_64-linux-gnu"):
        folder = (include.parent / name).resolve()
        if folder.is_dir():
            return str(folder)
    return ""


def vendor_paths(name: str) -> tuple[str, str]:
    """The include folder of a vendor library's headers and the library folder beside it
    ("" where none is): from its environment variables, its pip wheels (nvidia-cudnn-cu13,
    nvidia-cublas), then the CUDA toolkit. ValueError (saying what to install) where none has them."""
    header, env_vars, packages, hint = VENDORS[name]
    candidates = []
    for var in env_vars:
        if os.environ.get(var):
            root = Path(os.environ[var])
            candidates += [root, root / "include"]
    for package in packages:
        spec = None
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        folder = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else \
            _package_outside_the_build_environment(package)
        if folder:
            candidates.append(Path(folder) / "include")
    candidates += _toolkit_include_dirs()
    for include in candidates:
        if (include / header).is_file():
            return str(include.resolve()), _library_dir(include)
    raise ValueError(f"{header} not found; {hint}")
