"""Selection seen from Python. The libraries select (bindings/tuning.hpp and dispatcher.hpp:
the tuning tables' pick first, then the cost model); this module names the tables they read,
turns their messages into warnings and converts problems to and from the tables' problem
specs (the tile engine's problems-file format)."""
from __future__ import annotations

import os
import warnings

from ._registry import kernels_dir
from .problems import ConvProblem, GemmProblem


def table_paths(target: str) -> tuple:
    """The tuning tables a library of `target` reads now: the shipped `tuning_<target>.json`
    (unless TILEDISPATCH_NO_SHIPPED_TUNING=1), then TILEDISPATCH_TUNING's (os.pathsep-separated)."""
    paths = []
    shipped = kernels_dir() / f"tuning_{target}.json"
    if os.environ.get("TILEDISPATCH_NO_SHIPPED_TUNING", "") != "1" and shipped.is_file():
        paths.append(str(shipped))
    paths += [p for p in os.environ.get("TILEDISPATCH_TUNING", "").split(os.pathsep) if p]
    return tuple(paths)


def warn_messages(lib, stacklevel: int = 3) -> None:
    """The library's pending messages about the tuning tables (td_tuning_messages), each as a
    RuntimeWarning (by default attributed to the caller of the function that calls this)."""
    text = lib.td_tuning_messages()
    if text:
        for line in text.decode(errors="replace").splitlines():
            warnings.warn(line, RuntimeWarning, stacklevel=stacklevel)


def problem_spec(problem) -> dict:
    """The spec of a GemmProblem / ConvProblem as the tables and the problems files write it."""
    if isinstance(problem, GemmProblem):
        return {"op": "gemm", "M": problem.M, "N": problem.N, "K": problem.K, "dtype": problem.dtype.key,
                "layout": problem.layout.key}
    return {"op": "conv", "N": problem.N, "G": problem.G, "C": problem.C, "K": problem.K,
            "input": list(problem.input_size), "filter": list(problem.filter_size),
            "stride": list(problem.stride), "pad": list(problem.padding), "dilation": list(problem.dilation),
            "direction": problem.direction.key, "dtype": problem.dtype.key}


def problem_from(spec: dict):
    """A GemmProblem / ConvProblem from its spec."""
    if spec["op"] == "gemm":
        return GemmProblem(spec["M"], spec["N"], spec["K"], spec.get("dtype", "fp32"), spec.get("layout", "rcr"))
    return ConvProblem(spec["N"], spec["G"], spec["C"], spec["K"], tuple(spec["input"]), tuple(spec["filter"]),
                       spec.get("stride", 1), spec.get("pad", 0), spec.get("dilation", 1),
                       spec.get("direction", "fwd"), spec.get("dtype", "fp32"))
