"""Selection seen from Python. The libraries select (bindings/tuning.hpp and dispatcher.hpp:
the tuning tables' pick first, then the cost model); this module names the tables they read,
turns their messages into warnings and converts problems to and from the tables' problem
specs (the tile engine's problems-file format)."""
from __future__ import annotations

import json
import os
import warnings

from . import _registry
from ._registry import in_order, kernels_dir
from .codegen import Direction, DType, Layout
from .errors import UnsupportedProblemError
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


_HELD: dict = {}  # (path, mtime_ns, size) -> the problem specs the table's entries hold (JSON text)


def _held_specs(path: str) -> frozenset:
    """The problems a tuning table holds entries for, as sorted-key JSON; empty where the file
    cannot be read (the library says why, as a warning)."""
    try:
        st = os.stat(path)
    except OSError:
        return frozenset()
    key = (path, st.st_mtime_ns, st.st_size)
    specs = _HELD.get(key)
    if specs is None:
        try:
            with open(path, encoding="utf-8") as f:
                entries = json.load(f).get("entries", [])
            specs = frozenset(json.dumps(e["problem"], sort_keys=True) for e in entries
                              if isinstance(e, dict) and isinstance(e.get("problem"), dict))
        except (OSError, ValueError, AttributeError, TypeError):
            specs = frozenset()
        _HELD[key] = specs
    return specs


def held(target: str, problem) -> bool:
    """A tuning table that `target`'s library reads now holds an entry for exactly this problem
    (a measured pick, not one calibrated from the nearest entries)."""
    spec = json.dumps(problem_spec(problem), sort_keys=True)
    return any(spec in _held_specs(path) for path in table_paths(target))


def warn_messages(lib, stacklevel: int = 3) -> None:
    """The library's pending messages about the tuning tables (td_tuning_messages), each as a
    RuntimeWarning (by default attributed to the caller of the function that calls this)."""
    text = lib.td_tuning_messages()
    if text:
        for line in text.decode(errors="replace").splitlines():
            warnings.warn(line, RuntimeWarning, stacklevel=stacklevel)




def unsupported_detail(op: str, target: str, problem) -> str:
    """Why no kernel of the (op, target) library can take the problem where the reason is what
    the library builds ('' when it holds kernels of the problem's kind and the reason is
    elsewhere): e.g. 'the gfx942 conv library has no fp32 kernels (it builds fp16, bf16)'."""
    kernels = _registry.registry().kernels(op, target)
    if not kernels:
        return f"the {target} {op} library has no kernels at all"
    dtype = problem.dtype
    dtypes = {k.dtype for k in kernels}
    if dtype not in dtypes:
        return f"the {target} {op} library has no {dtype.key} kernels (it builds {', '.join(in_order(dtypes, DType))})"
    same = [k for k in kernels if k.dtype is dtype]
    if op == "gemm":
        layouts = {k.layout for k in same}
        if problem.layout not in layouts:
            return (f"the {target} gemm library has no {dtype.key} {problem.layout.key} kernels "
                    f"(its {dtype.key} kernels are {', '.join(in_order(layouts, Layout))})")
        return ""
    directions = {k.direction for k in same}
    if problem.direction not in directions:
        return (f"the {target} conv library has no {dtype.key} {problem.direction.key} kernels "
                f"(its {dtype.key} kernels are {', '.join(in_order(directions, Direction))})")
    ndim = len(problem.input_size)
    ranks = sorted({k.ndim for k in same if k.direction is problem.direction})
    if ndim not in ranks:
        return (f"the {target} conv library has no {ndim}D {dtype.key} {problem.direction.key} kernels "
                f"(it builds {', '.join(f'{r}D' for r in ranks)} ones)")
    return ""




def explain_unsupported(err, op: str, target: str, problem):
    """err (an UnsupportedProblemError) with unsupported_detail appended to its message, where
    that says something; err itself otherwise."""
    detail = unsupported_detail(op, target, problem)
    message = getattr(err, "message", str(err))
    if not detail or detail in message:
        return err
    contents = _registry.library_contents(op, target)
    if contents and message.endswith(f": {contents}"):  # raise_for's hint: the detail says more
        message = message[:-len(contents) - 2]
    return UnsupportedProblemError(f"{message}: {detail}", getattr(err, "status", None))


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


def device_target(op: str = "gemm") -> str:
    """The GPU target that runs CUDA arrays of an op: this installation's default target, which
    must not be the cpu one."""
    target = _registry.registry().default_target(op)
    if target == "cpu":
        raise UnsupportedProblemError(f"the arrays are on a GPU, but this installation has no {op} "
                                      "library for it (rebuild with -Dgpu_targets=cpu,sm_90a)")
    return target
