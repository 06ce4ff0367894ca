"""A benchmark worker: `python -m tiledispatch.tile_engine.worker`.

Reads one JSON batch per line on stdin — {"target", "problem", "kernels", "warmup",
"repeat", "verify", "seed", "rotate_mib", "interleave", "options"} ("options": td.set_options's
keywords) — and prints one JSON line per kernel — {"kernel", "status", "latency_ms",
"tflops", "max_rel"} — then {"done": true}. Before the
results come progress lines: {"ready": name} as each kernel is checked and warmed up,
{"round": i} after each round of timed runs. With "interleave" (the default) the kernels of
the problem are timed in rounds, one run of each per round; without it, one after another.
Statuses: OK, ZERO (all outputs zero where the reference is not), MISMATCH, FAILED (the
call raised), UNSUPPORTED; only OK kernels are timed.
On the cpu target, timed runs rotate over copies of the inputs (rotating buffers, at least
rotate_mib MiB of them, default 64, at most 8 copies) so that a run does not find its
operands in the cache the previous run left warm. On a GPU target the operands live in
device memory (torch tensors; without torch, numpy through the host path, which leaves
them in L2 and says so in each result's "timing") and the L2 cache is flushed before
every timed run by writing 512 MiB, which also keeps the GPU busy while the host
launches; the time is the kernel's own, taken with CUDA events by the library.
The libraries come from TILEDISPATCH_KERNELS_DIR (the sweep's build directory).
"""
from __future__ import annotations

import json
import statistics
import sys

import numpy as np

from .. import reference
from .._options import set_options
from ..arrays import dtype_of, numpy_dtype, random, torch_dtype
from ..codegen import Direction
from ..dispatcher import Dispatcher
from ..selection import problem_from


class Case:
    """Inputs, output and reference of one problem, made once per batch; `sets` are the
    argument tuples the timed runs rotate over (copies of the same inputs, one output)."""

    MAX_COPIES = 8

    def __init__(self, spec: dict, seed: int, verify: bool, rotate_mib: float = 64, on_gpu: bool = False):
        self.problem = p = problem_from(spec)
        if on_gpu and not verify and _torch() is not None:
            self._on_device(spec, seed)  # no reference needed: the inputs are made where they run
            return
        rng = np.random.default_rng(seed)
        out_dtype = numpy_dtype(p.dtype.out)
        if spec["op"] == "gemm":
            a, b = random((p.M, p.K), p.dtype, rng), random((p.K, p.N), p.dtype, rng)
            self.out = np.empty((p.M, p.N), out_dtype)
            self.args = (a if p.layout.a_row else np.asfortranarray(a),
                         b if p.layout.b_row else np.asfortranarray(b), self.out)
            self.k = p.K
            self.ref = reference.gemm(a, b) if verify else None
        else:
            x, w, dy = (random(s, p.dtype, rng) for s in (p.input_shape, p.weight_shape, p.output_shape))
            if p.direction is Direction.FWD:
                self.out = np.empty(p.output_shape, out_dtype)
                self.args, refs = (x, w, self.out), {"x": x, "w": w}
            elif p.direction is Direction.BWD_DATA:
                self.out = np.empty(p.input_shape, out_dtype)
                self.args, refs = (self.out, w, dy), {"dy": dy, "w": w}
            else:
                self.out = np.empty(p.weight_shape, out_dtype)
                self.args, refs = (x, self.out, dy), {"x": x, "dy": dy}
            self.k = p.reduction_length
            self.ref = reference.conv(p, **refs) if verify else None
        self.host_out = self.out
        self.flush = None
        self.timing = "host, rotating buffers"
        if on_gpu and _torch() is not None:
            self._to_device()
            return
        if on_gpu:
            self.timing = "host path (no torch): operands copied in before each run, L2 not flushed"
        inputs = [a for a in self.args if a is not self.out]
        size = sum(a.nbytes for a in inputs)
        copies = min(self.MAX_COPIES, max(1, -(-int(rotate_mib * 2**20) // max(1, size))))
        self.sets = [self.args] + [tuple(a if a is self.out else np.copy(a, order="K") for a in self.args)
                                   for _ in range(copies - 1)]

    def _on_device(self, spec: dict, seed: int):
        """Uniform [-1, 1) operands made on the GPU (fast for big problems), an empty output."""
        torch, p = _torch(), self.problem
        gen = torch.Generator(device="cuda").manual_seed(seed)

        def rand(shape, transposed=False):
            shape = tuple(reversed(shape)) if transposed else tuple(shape)
            t = torch.empty(shape, device="cuda").uniform_(-1.0, 1.0, generator=gen).to(torch_dtype(p.dtype))
            return t.t() if transposed else t

        def empty(shape):
            return torch.empty(tuple(shape), device="cuda", dtype=torch_dtype(p.dtype.out))

        if spec["op"] == "gemm":
            self.out = empty((p.M, p.N))
            self.args = (rand((p.M, p.K), not p.layout.a_row), rand((p.K, p.N), not p.layout.b_row), self.out)
            self.k = p.K
        else:
            x, w, dy = p.input_shape, p.weight_shape, p.output_shape
            if p.direction is Direction.FWD:
                self.out = empty(dy)
                self.args = (rand(x), rand(w), self.out)
            elif p.direction is Direction.BWD_DATA:
                self.out = empty(x)
                self.args = (self.out, rand(w), rand(dy))
            else:
                self.out = empty(w)
                self.args = (rand(x), self.out, rand(dy))
            self.k = p.reduction_length
        self.ref, self.host_out = None, None
        self._flush_buffer()

    FLUSH_BYTES = 512 << 20

    def _flush_buffer(self):
        """A write of 512 MiB (10x the H200's L2) before each timed run: it evicts the
        operands, and it keeps the GPU busy for ~0.2 ms while the host prepares and launches
        the kernel, so the library's start event does not time the host (its timer starts
        before the launch preparation; on an idle GPU that would count 10-30 us of host work)."""
        torch = _torch()
        l2 = torch.cuda.get_device_properties(0).L2_cache_size or 50 << 20
        scratch = torch.empty(max(self.FLUSH_BYTES, 2 * l2), dtype=torch.uint8, device="cuda")
        self.flush = scratch.zero_
        self.sets = [self.args]
        self.timing = "device, L2 flushed"

    def _to_device(self):
        """The operands as torch CUDA tensors with the same strides, and an L2 flush."""
        torch = _torch()
        index = [i for i, a in enumerate(self.args) if a is self.host_out][0]
        self.args = tuple(_device_copy(torch, a) for a in self.args)
        self.out = self.args[index]
        self._flush_buffer()

    def poison(self):
        if self.out is self.host_out:
            self.out[...] = np.nan
        else:
            self.out.view(-1).view(_torch().uint8).fill_(0xFF)  # all-ones bytes: NaN in every float type

    def result(self) -> np.ndarray:
        """The output on the host (after the last run)."""
        if self.out is self.host_out:
            return self.out
        _torch().cuda.synchronize()
        return _host_copy(self.out, self.host_out)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _device_copy(torch, array: np.ndarray):
    """A CUDA tensor holding a numpy array's bytes, with its strides (any dtype: the bytes
    travel as uint8 and are viewed as the torch dtype of the same width and kind)."""
    item = array.itemsize
    flat = np.ascontiguousarray(array.ravel(order="K")).view(np.uint8)
    dev = torch.from_numpy(flat).cuda().view(torch_dtype(dtype_of(array)))
    return dev.as_strided(array.shape, tuple(st // item for st in array.strides))


def _host_copy(tensor, like: np.ndarray) -> np.ndarray:
    raw = tensor.contiguous().view(-1).view(_torch().uint8).cpu().numpy()
    return raw.view(like.dtype).reshape(like.shape)


def _prepare(d, case: Case, name: str, warmup: int, verify: bool) -> dict:
    """One kernel made ready to time: supported, run `warmup` times (at least once) into a
    poisoned output, and that output checked against the reference when verifying."""
    out = {"kernel": name, "status": "OK", "latency_ms": None, "tflops": None, "max_rel": None}
    try:
        if not d.is_supported(case.problem, name):
            out["status"] = "UNSUPPORTED"
            return out
        case.poison()
        for _ in range(max(1, warmup)):
            d.run(case.problem, *case.args, kernel=name)
    except Exception as err:  # noqa: BLE001 - reported as FAILED
        out.update(status="FAILED", error=str(err))
        return out
    if verify and case.ref is not None:
        ref, mag = case.ref
        host = case.result()
        got = host.astype(np.float64)
        err = np.abs(got - ref)
        out["max_rel"] = float(np.nanmax(err / (mag + 1e-30))) if err.size else 0.0
        if not reference.compare(host, ref, mag, case.problem.dtype, case.k)["ok"]:
            zero = not np.any(got) and np.any(ref)
            out["status"] = "ZERO" if zero else "MISMATCH"
    return out


def measure(d, case: Case, names: list, warmup: int, repeat: int, verify: bool, say=lambda line: None) -> list:
    """Results of the kernels of one problem, timed in rounds: each round runs every ready
    kernel once (after the L2 flush on a GPU), so that the device's clock and thermal drift
    fall on all of them alike. Timed one after another, the first kernels of a problem get
    the GPU that idled while the problem was made: on the H200 the same 8192^3 kernel runs
    680-715 TFLOP/s under load and 760-785 after 200 ms idle, which puts the 256x128 tiles
    11% ahead in a tuning table where round-robin timing has them 4% behind. say(line)
    reports progress: {"ready": name} after each kernel's preparation, {"round": i} after
    each round (the runner's per-line timeout and crash attribution)."""
    results = []
    for name in names:
        results.append(_prepare(d, case, name, warmup, verify))
        say({"ready": name})
    ready = [r for r in results if r["status"] == "OK"]
    times = {r["kernel"]: [] for r in ready}
    for i in range(max(1, repeat)):
        for r in list(ready):
            try:
                if case.flush is not None:
                    case.flush()
                times[r["kernel"]].append(d.run(case.problem, *case.sets[(i + 1) % len(case.sets)],
                                                kernel=r["kernel"]))
            except Exception as err:  # noqa: BLE001 - reported as FAILED
                r.update(status="FAILED", error=str(err))
                ready.remove(r)
        say({"round": i})
    for r in ready:
        ms = statistics.median(times[r["kernel"]])
        r["latency_ms"] = ms
        r["tflops"] = case.problem.flops / (ms * 1e-3) / 1e12 if ms > 0 else None
    return results


def main() -> int:
    dispatchers = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        batch = json.loads(line)
        set_options(**batch.get("options", {}))
        spec = batch["problem"]
        key = (spec["op"], batch["target"])
        if key not in dispatchers:
            dispatchers[key] = Dispatcher(*key)
        case = Case(spec, batch.get("seed", 0), batch.get("verify", False), batch.get("rotate_mib", 64),
                    on_gpu=not dispatchers[key].on_host)
        say = lambda message: print(json.dumps(message), flush=True)  # noqa: E731
        args = (batch.get("warmup", 1), batch.get("repeat", 5), batch.get("verify", False))
        if batch.get("interleave", True):  # every kernel of the problem timed in rounds
            groups = [batch["kernels"]]
        else:  # one kernel at a time (the runner's fallback, to tell which kernel crashed)
            groups = [[name] for name in batch["kernels"]]
        for group in groups:
            for result in measure(dispatchers[key], case, group, *args, say=say):
                result["timing"] = case.timing
                say(result)
        d = dispatchers[key]
        try:
            pick = d.select(case.problem)  # tuning tables first, then the cost model
            model_pick = d.model_select(case.problem)  # the cost model alone
        except Exception:  # noqa: BLE001 - no kernel for the problem: no pick
            pick = model_pick = None
        say({"done": True, "pick": pick, "model_pick": model_pick})
    return 0


if __name__ == "__main__":
    sys.exit(main())
