"""The `tiledispatch` command (also `python -m tiledispatch`), which prints JSON like gpu_helper,
and the `gpu_helper` console script."""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from importlib import resources

import numpy as np

from . import _autotune, _fingerprint, _picklog, reference, selection
from ._registry import kernels_dir, registry
from .arrays import numpy_dtype, random
from .codegen import Activation, Bias, Direction, DType, Layout, OutDType, config_from_name, matches
from .codegen.yamlsrc import ManifestError
from .dispatcher import Dispatcher
from .errors import TileDispatchError, UnsupportedProblemError
from .problems import ConvProblem, GemmProblem
from .tile_engine import tuning
from .tile_engine.bench import run_bench, write_tuning
from .tile_engine.worker import _device_copy


def _select(d: Dispatcher, problem) -> str:
    """The dispatcher's pick; where no kernel supports the problem, the error says when the
    library builds no kernel of its dtype (layout, direction, rank) at all."""
    try:
        return d.select(problem)
    except UnsupportedProblemError as err:
        raise selection.explain_unsupported(err, d.op, d.target, problem) from None


def _timed_runs(d: Dispatcher, problem, tensors, kernel, repeat: int, epilogue=None) -> float:
    d.run(problem, *tensors, kernel=kernel, epilogue=epilogue)  # warm-up
    return statistics.median(d.run(problem, *tensors, kernel=kernel, epilogue=epilogue)
                             for _ in range(max(1, repeat)))


def _execution(time_ms: float, flops: int) -> dict:
    return {"time_ms": round(time_ms, 6),
            "tflops": round(flops / (time_ms * 1e-3) / 1e12, 6) if time_ms > 0 else 0.0}


def _validation(result, ref, mag, dtype, k) -> dict:
    cmp = reference.compare(result, ref, mag, dtype, k)
    return {"accuracy": round(cmp["accuracy"], 4), "max_error": cmp["max_error"]}


# The most elements the command allocates for one problem's tensors together (host arrays:
# about 16 GiB as fp32); a larger problem is refused before any allocation.
MAX_ELEMENTS = 1 << 32


def _check_elements(*shapes) -> None:
    total = sum(math.prod(shape) for shape in shapes)
    if total > MAX_ELEMENTS:
        raise ValueError(f"the problem is too large for this command: its tensors hold {total} elements, "
                         f"at most {MAX_ELEMENTS}")


def _kernel_config(name, op: str):
    """The config of the kernel --kernel names (parsed from the name), or None without --kernel
    or for a name that does not parse (the library then says it has no such kernel)."""
    if not name:
        return None
    try:
        config = config_from_name(name)
    except (ValueError, KeyError, IndexError):
        return None
    if config.op != op:
        raise ValueError(f"--kernel {name} is a {config.op} kernel, not a {op} one")
    return config


def _from_kernel(option: str, given, config, field: str, default: str, describe=lambda v: v.key):
    """An option's value: the one given; else the kernel's (--kernel); else the default. A value
    given that disagrees with the kernel's name is an error."""
    if config is None:
        return default if given is None else given
    theirs = describe(getattr(config, field))
    if given is None:
        return theirs
    if str(given) != str(theirs):
        raise ValueError(f"--{option} {given} disagrees with --kernel {config.name}, whose {option} is {theirs}: "
                         f"leave --{option} out (the kernel's is used) or name a kernel of {option} {given}")
    return given


def cmd_gemm(args) -> dict:
    M, N, K = args.M, args.N, args.K
    if min(M, N, K) < 1:
        raise ValueError(f"M, N and K must be positive (got M={M} N={N} K={K})")
    config = _kernel_config(args.kernel, "gemm")
    dtype = DType.parse(_from_kernel("dtype", args.dtype, config, "dtype", "fp32"))
    layout = Layout.parse(_from_kernel("layout", args.layout, config, "layout", "rcr"))
    out = {"problem": {"M": M, "N": N, "K": K, "dtype": dtype.key, "layout": layout.key}}
    fields = _epilogue_fields(args)
    if fields:
        out["problem"]["epilogue"] = {k: (v.key if hasattr(v, "key") else v) for k, v in fields.items()}
    d = Dispatcher("gemm", args.target)
    problem = GemmProblem(M, N, K, dtype, layout, **fields)
    kernel = args.kernel or _select(d, problem)
    out["kernel"] = kernel
    _check_elements((M, K), (K, N), (M, N))
    rng = np.random.default_rng(args.seed)
    a, b = random((M, K), dtype, rng), random((K, N), dtype, rng)
    a_mem = a if layout.a_row else np.asfortranarray(a)
    b_mem = b if layout.b_row else np.asfortranarray(b)
    c = np.full((M, N), np.nan, dtype=numpy_dtype(problem.out))
    epilogue, operands = None, {}
    if fields:  # the epilogue's operands: random C and bias in D's type, aux written
        operands = {"c": random((M, N), problem.out, rng) if problem.beta else None,
                    "bias": random((N if args.bias_along == "n" else M,), problem.out, rng) if args.bias else None,
                    "aux": np.full((M, N), np.nan, dtype=numpy_dtype(problem.out)) if args.aux else None}
        epilogue = operands
    time_ms = _timed_runs(d, problem, (a_mem, b_mem, c), kernel, args.repeat, epilogue)
    out["execution"] = _execution(time_ms, problem.flops)
    if args.validate:
        if fields:
            pre, ref, mag = reference.gemm_epilogue(a, b, beta=problem.beta, c=operands["c"], bias=operands["bias"],
                                                    bias_along=args.bias_along, activation=problem.activation.key)
            cmp = reference.compare_out(c, ref, mag, problem.out.key, K)
            out["validation"] = {"accuracy": round(cmp["accuracy"], 4), "max_error": cmp["max_error"]}
            if args.aux:
                cmp = reference.compare_out(operands["aux"], pre, mag, problem.out.key, K)
                out["validation"]["aux_accuracy"] = round(cmp["accuracy"], 4)
        else:
            ref, mag = reference.gemm(a, b)
            out["validation"] = _validation(c, ref, mag, dtype, K)
    return out


def _epilogue_fields(args) -> dict:
    """The GemmProblem epilogue fields of `tiledispatch gemm`'s options (none: a plain product)."""
    fields = {}
    if args.beta is not None:
        fields["beta"] = args.beta
    if args.bias:
        fields["bias"] = Bias.parse(args.bias_along)
    if args.activation and args.activation != "none":
        fields["activation"] = Activation.parse(args.activation)
    if args.aux:
        fields["aux"] = True
    if args.out_dtype:
        fields["out_dtype"] = OutDType.parse(args.out_dtype)
    return fields


def cmd_conv(args) -> dict:
    config = _kernel_config(args.kernel, "conv")
    args.dtype = _from_kernel("dtype", args.dtype, config, "dtype", "fp32")
    args.direction = _from_kernel("direction", args.direction, config, "direction", "fwd")
    if config is not None and args.input is not None and len(args.input) != config.ndim:
        raise ValueError(f"--input gives {len(args.input)} spatial sizes, --kernel {config.name} is a "
                         f"{config.ndim}D ({config.layout.name}) kernel: give {config.ndim} sizes or leave --input out")
    if args.input is None:
        args.input = [16] * (config.ndim if config is not None else 2)
    ndim = len(args.input)
    dtype = DType.parse(args.dtype)

    def dims(values, what):
        values = list(values)
        if len(values) == 1:
            values *= ndim
        if len(values) != ndim:
            raise ValueError(f"--{what} takes 1 or {ndim} values")
        return tuple(values)

    for what, values, low in (("input", args.input, 1), ("filter", args.filter, 1), ("stride", args.stride, 1),
                              ("dilation", args.dilation, 1), ("pad", args.pad, 0)):
        if min(values) < low:
            raise ValueError(f"--{what} values must be at least {low} (got {' '.join(map(str, values))})")
    for what in ("N", "G", "C", "K"):
        if getattr(args, what) < 1:
            raise ValueError(f"--{what} must be positive (got {getattr(args, what)})")
    if args.split_k < 0:
        raise ValueError(f"--split-k must not be negative (got {args.split_k})")
    problem = ConvProblem(args.N, args.G, args.C, args.K, tuple(args.input), dims(args.filter, "filter"),
                          dims(args.stride, "stride"), dims(args.pad, "pad"),
                          dims(args.dilation, "dilation"), Direction.parse(args.direction), dtype,
                          args.split_k)
    out = {"problem": {"N": problem.N, "G": problem.G, "C": problem.C, "K": problem.K,
                       "input": list(problem.input_size), "filter": list(problem.filter_size),
                       "stride": list(problem.stride), "pad": list(problem.padding),
                       "dilation": list(problem.dilation), "output": list(problem.output_size),
                       "direction": problem.direction.key, "dtype": dtype.key}}
    d = Dispatcher("conv", args.target)
    kernel = args.kernel or _select(d, problem)
    out["kernel"] = kernel
    _check_elements(problem.input_shape, problem.weight_shape, problem.output_shape)
    rng = np.random.default_rng(args.seed)
    x = random(problem.input_shape, dtype, rng)
    w = random(problem.weight_shape, dtype, rng)
    dy = random(problem.output_shape, dtype, rng)
    result_dtype = numpy_dtype(dtype.out)
    if problem.direction is Direction.FWD:
        result = np.full(problem.output_shape, np.nan, result_dtype)
        tensors, refs = (x, w, result), {"x": x, "w": w}
    elif problem.direction is Direction.BWD_DATA:
        result = np.full(problem.input_shape, np.nan, result_dtype)
        tensors, refs = (result, w, dy), {"dy": dy, "w": w}
    else:
        result = np.full(problem.weight_shape, np.nan, result_dtype)
        tensors, refs = (x, result, dy), {"x": x, "dy": dy}
    time_ms = _timed_runs(d, problem, tensors, kernel, args.repeat)
    out["execution"] = _execution(time_ms, problem.flops)
    if args.validate:
        ref, mag = reference.conv(problem, **refs)
        out["validation"] = _validation(result, ref, mag, dtype, problem.reduction_length)
    return out


def _random_tensors(problem, rng) -> tuple:
    """Random operands of a problem, in Dispatcher.run's order, the written one zeroed."""
    dtype = problem.dtype
    if isinstance(problem, GemmProblem):
        lay = problem.layout
        a, b = random((problem.M, problem.K), dtype, rng), random((problem.K, problem.N), dtype, rng)
        return (a if lay.a_row else np.asfortranarray(a), b if lay.b_row else np.asfortranarray(b),
                np.zeros((problem.M, problem.N), numpy_dtype(dtype.out)))
    shapes = (problem.input_shape, problem.weight_shape, problem.output_shape)
    written = {Direction.FWD: 2, Direction.BWD_DATA: 0, Direction.BWD_WEIGHT: 1}[problem.direction]
    return tuple(np.zeros(shape, numpy_dtype(dtype.out)) if i == written else random(shape, dtype, rng)
                 for i, shape in enumerate(shapes))


def _on_device(tensors: tuple, target: str) -> tuple:
    """On a GPU target, the operands as torch GPU tensors where torch sees a GPU (timed as
    autotuning times them: L2 flushed, CUDA events); else numpy arrays (the host path)."""
    if target == "cpu":
        return tensors
    try:
        import torch
    except ImportError:
        return tensors
    if not torch.cuda.is_available():
        return tensors
    return tuple(_device_copy(torch, t) for t in tensors)


def cmd_tune_log(args) -> dict:
    """`tune --from-log`: every distinct problem of a TILEDISPATCH_RECORD log timed on every
    kernel that supports it (random inputs, through Dispatcher.run), into a tuning table."""
    started = time.perf_counter()
    if args.budget_ms is not None and not args.budget_ms > 0:
        raise ValueError(f"--budget-ms must be positive (got {args.budget_ms})")
    specs = _picklog.read_log(args.from_log)
    if not specs:
        raise ValueError(f"{args.from_log} holds no problem")
    target = args.target or registry().default_target(specs[0]["op"])
    rng = np.random.default_rng(args.seed)
    results, skipped = [], []
    for spec in specs:
        try:
            problem = selection.problem_from(spec)
        except (KeyError, TypeError, ValueError, TileDispatchError) as err:
            skipped.append({"problem": spec, "reason": f"not a valid problem: {getattr(err, 'message', err)}"})
            continue
        d = Dispatcher(spec["op"], target)
        names = _autotune.candidates(d, problem)
        if not names:
            skipped.append({"problem": spec, "reason": f"no {target} kernel supports it"})
            continue
        _check_elements(*((n,) for n in problem.required_elements()))
        measured = _autotune.measure(d, problem, _on_device(_random_tensors(problem, rng), target), names,
                                     args.budget_ms if args.budget_ms is not None else math.inf, args.repeat)
        spec = selection.problem_spec(problem)
        results += [{"problem": spec, "kernel": name, "latency_ms": ms, "status": "OK"}
                    for name, ms in measured.timings_ms.items()]
        if not measured.timings_ms:
            skipped.append({"problem": spec, "reason": "every kernel failed"})
    if not results:
        raise ValueError(f"no problem of {args.from_log} could be tuned: "
                         + "; ".join(f"{json.dumps(s['problem'])}: {s['reason']}" for s in skipped))
    table = tuning.make_table(results, target, _fingerprint.header(target))
    _write_atomic(args.out, tuning.dumps(table))
    return {"out": args.out, "target": target, "problems": len(specs), "entries": len(table["entries"]),
            "skipped": skipped, "seconds": round(time.perf_counter() - started, 3)}


def _write_atomic(path: str, text: str) -> None:
    """Writes a file through a temporary file in its folder, renamed over it."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def cmd_list(args) -> int:
    kernels = [k for k in registry().kernels(args.op, args.target) if matches(k.name, args.filter)]
    if args.json:
        print(json.dumps([k.to_dict() for k in kernels], indent=1))
    else:
        for k in kernels:
            print(k.name)
        print(f"# {len(kernels)} kernels", file=sys.stderr)
    return 0


def cmd_registry(args) -> int:
    if args.op:
        print(Dispatcher(args.op, args.target).export_registry_json())
    else:
        print((kernels_dir() / "registry.json").read_text(encoding="utf-8"), end="")
    return 0


def _run_json(fn, args) -> int:
    try:
        out = fn(args)
    except (TileDispatchError, ValueError, TypeError) as err:
        status = getattr(err, "status", -1)
        print(json.dumps({"status": "error", "code": status,
                          "error": getattr(err, "message", str(err))}))
        return 1
    except MemoryError:
        print(json.dumps({"status": "error", "code": -1, "error": "out of host memory"}))
        return 1
    except Exception as err:  # noqa: BLE001 - the command answers in JSON whatever fails
        print(json.dumps({"status": "error", "code": -1, "error": f"{type(err).__name__}: {err}"}))
        return 1
    failed = "validation" in out and out["validation"]["accuracy"] < 100.0
    out["status"] = "error" if failed else "success"
    if failed:
        out["error"] = "validation failed"
    print(json.dumps(out))
    return 1 if failed else 0


class _Parser(argparse.ArgumentParser):
    """argparse with one change for the JSON commands (gemm, conv): a usage error keeps the
    usage text on stderr and also prints the JSON error on stdout, exit code 1."""

    json_errors = False

    def error(self, message):
        if not self.json_errors:
            super().error(message)
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        print(json.dumps({"status": "error", "code": -1, "error": message}))
        sys.exit(1)

    def parse_args(self, args=None, namespace=None):
        # Unrecognized arguments are found by the top-level parser: the command's parser
        # reports them, so gemm and conv answer in JSON for them too.
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(self, "commands", {}).get(getattr(parsed, "command", None), self)
            command.error("unrecognized arguments: " + " ".join(extra))
        return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tiledispatch", description="Run and inspect tiledispatch kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    dtypes = [d.key for d in DType]

    p = sub.add_parser("gemm", help="run one GEMM, print JSON")
    p.json_errors = True
    parser.commands = {"gemm": p}
    p.add_argument("M", type=int)
    p.add_argument("N", type=int)
    p.add_argument("K", type=int)
    p.add_argument("--dtype", choices=dtypes, help="default: the --kernel's, else fp32")
    p.add_argument("--layout", choices=[lay.key for lay in Layout], help="default: the --kernel's, else rcr")
    p.add_argument("--beta", type=float, help="epilogue: D = ... + beta * C (a random C in D's type)")
    p.add_argument("--bias", action="store_true", help="epilogue: add a random bias vector (--bias-along)")
    p.add_argument("--bias-along", choices=("n", "m"), default="n", help="the bias: one per column (n) or row (m)")
    p.add_argument("--activation", choices=[act.key for act in Activation], help="epilogue: the activation")
    p.add_argument("--aux", action="store_true", help="epilogue: write the pre-activation to aux too")
    p.add_argument("--out-dtype", choices=[o.key for o in OutDType if o is not OutDType.DEFAULT],
                   help="the type of D (default: the input type's output)")
    _run_args(p)

    p = sub.add_parser("conv", help="run one grouped convolution, print JSON")
    p.json_errors = True
    parser.commands["conv"] = p
    p.add_argument("--N", type=int, default=1, help="batch")
    p.add_argument("--G", type=int, default=1, help="groups")
    p.add_argument("--C", type=int, default=8, help="input channels per group")
    p.add_argument("--K", type=int, default=8, help="output channels per group")
    p.add_argument("--input", type=int, nargs="+",
                   help="spatial size: W, H W or D H W (default: 16 per dimension of the --kernel, else 16 16)")
    p.add_argument("--filter", type=int, nargs="+", default=[3], help="filter size (one value: every dim)")
    p.add_argument("--stride", type=int, nargs="+", default=[1])
    p.add_argument("--pad", type=int, nargs="+", default=[0])
    p.add_argument("--dilation", type=int, nargs="+", default=[1])
    p.add_argument("--direction", choices=[d.key for d in Direction], help="default: the --kernel's, else fwd")
    p.add_argument("--dtype", choices=dtypes, help="default: the --kernel's, else fp32")
    p.add_argument("--split-k", type=int, default=0)
    _run_args(p)

    p = sub.add_parser("list", help="list the installed kernels")
    p.add_argument("--op", choices=("gemm", "conv"))
    p.add_argument("--target")
    p.add_argument("--filter", default="", help="comma-separated globs over names")
    p.add_argument("--json", action="store_true", help="print the configs as JSON")

    p = sub.add_parser("bench", help="tile engine: expand a sweep, build it, benchmark it, write a tuning table")
    p.add_argument("--sweep", required=True, help="kernels.yaml fragment; tile sizes may be ranges")
    p.add_argument("--problems", required=True, help="YAML/JSON list of problems (op: gemm|conv, sizes, dtype, ...)")
    p.add_argument("--target", required=True)
    p.add_argument("--filter", default="", help="comma-separated globs over variant names (as -Dkernel_filter)")
    p.add_argument("--out", default="tiledispatch-bench", help="output folder (build, CSV, JSON, tuning table)")
    p.add_argument("--verify", action="store_true", help="check every result against the numpy reference")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one kernel may take before it is MISSING")
    p.add_argument("--jobs", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--source", help="the tiledispatch source tree (default: the current directory)")
    p.add_argument("--prebuilt", nargs="?", const="", default=None, metavar="DIR",
                   help="no build: benchmark the swept variants that the libraries in DIR (default: the "
                        "installed package's) already hold")
    p.add_argument("--plot", action="store_true", help="PNG charts per problem (needs matplotlib)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the batches as Ray tasks (a local cluster, or the one at ADDRESS); needs ray")

    p = sub.add_parser("tune", help="write a tuning table from bench results, or by timing a recorded workload")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--results", help="results.json written by tiledispatch bench")
    source.add_argument("--from-log", help="problems recorded with TILEDISPATCH_RECORD=FILE: each is timed on "
                                           "every kernel that supports it (prints JSON)")
    p.add_argument("--out", required=True, help="tuning table to write (name it in TILEDISPATCH_TUNING)")
    p.add_argument("--target", help="--from-log: target library (default: the GPU found, else cpu)")
    p.add_argument("--budget-ms", type=float, help="--from-log: the most time one problem's timing may take")
    p.add_argument("--repeat", type=int, default=3, help="--from-log: timed runs per kernel after a warm-up (median)")
    p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("registry", help="print the registry JSON (the package index, or one library's export)")
    p.add_argument("--op", choices=("gemm", "conv"))
    p.add_argument("--target")
    return parser


def _run_args(p):
    p.add_argument("--validate", action="store_true", help="compare with a float64 numpy reference")
    p.add_argument("--kernel", help="run this kernel instead of the dispatcher's pick")
    p.add_argument("--target", help="target library (default: the GPU found, else cpu)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs after one warm-up (median)")
    p.add_argument("--seed", type=int, default=0)


def gpu_helper_main() -> int:
    """The `gpu_helper` console script: runs the gpu_helper binary the build installed beside
    the kernel libraries (the reference system's JSON tool, `gpu_helper M N K [--validate]`,
    over the first GPU target's GEMM library, the cpu one where no GPU target was built) with
    this command's arguments, in this process."""
    entry = kernels_dir() / "gpu_helper"
    if not entry.is_file():
        print(f"gpu_helper: this installation has no gpu_helper binary ({entry}): the build makes it only "
              "where it builds a GEMM library; rebuild with GEMM kernels for a target "
              "(pip install . -Csetup-args=-Dgpu_targets=cpu,sm_90a)", file=sys.stderr)
        return 1
    with resources.as_file(entry) as path:
        os.execv(path, [str(path), *sys.argv[1:]])  # returns only by raising OSError


def main(argv=None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader closed the pipe (`tiledispatch list | head -1`): stop quietly; stdout
        # goes to /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "gemm":
        return _run_json(cmd_gemm, args)
    if args.command == "conv":
        return _run_json(cmd_conv, args)
    if args.command == "tune" and args.from_log:
        return _run_json(cmd_tune_log, args)
    if args.command in ("bench", "tune"):
        try:
            if args.command == "tune":
                table = write_tuning(args.results, args.out)
                print(f"wrote {args.out}: {len(table['entries'])} problems for target {table['target']}")
                return 0
            fresh_out = not os.path.exists(args.out)
            try:
                run_bench(args.sweep, args.problems, args.target, args.out, verify=args.verify, timeout=args.timeout,
                          jobs=args.jobs, source=args.source, repeat=args.repeat, plot=args.plot,
                          ray_address=args.ray, kernel_filter=args.filter, prebuilt=args.prebuilt)
            except BaseException:
                # A bench that fails before writing anything (a malformed sweep or problems file)
                # leaves no empty output folder behind (by default ./tiledispatch-bench).
                if fresh_out and os.path.isdir(args.out) and not os.listdir(args.out):
                    os.rmdir(args.out)
                raise
            return 0
        except (ManifestError, RuntimeError, OSError, ValueError) as err:
            print(f"{err}" if isinstance(err, ManifestError) else f"tiledispatch {args.command}: error: {err}",
                  file=sys.stderr)
            return 1
    try:
        return cmd_list(args) if args.command == "list" else cmd_registry(args)
    except TileDispatchError as err:
        print(f"tiledispatch: error: {err}", file=sys.stderr)
        return 1
