"""The model zoo benchmark: every convolution of real models (timm / torchvision), deduped,
against cuDNN, for training (batch 32: fwd, bwd_data, bwd_weight) and inference (batch 1:
fwd), with the tuning tables it measures and a leave-one-model-out check of them.

    # CPU, torch + timm (a throwaway venv): the layer list, committed as bench/zoo/conv_layers.json
    python3 bench/zoo.py enumerate [--models a,b,...] [--out bench/zoo/conv_layers.json]

    # GPU (the installed tiledispatch, torch): ours vs cuDNN on every unique layer
    python3 bench/zoo.py conv [--layers bench/zoo/conv_layers.json] [--dtype bf16,fp16] [--batch 32,1]
                              [--dirs fwd,bwd_data,bwd_weight] [--reps 20] [--every] [--max-candidates 24]
                              [--json out.json] [--models a,b] [--classes depthwise,grouped] [--limit N]
                              [--budget-s 300] [--start N] [--crossval] [--table tuning.json]

    # from a --every run's JSON: a tuning table (no GPU), and the leave-one-model-out check (GPU library)
    python3 bench/zoo.py table RESULTS.json [--out tuning.json] [--exclude-model M] [--no-vendor]
    python3 bench/zoo.py crossval RESULTS.json [--no-vendor]

conv: per unique layer (in a fixed shuffled order, so that --budget-s or --limit cut a
sample), dtype, batch and direction: the dispatcher's pick (`d.select`), cuDNN (torch,
cudnn.benchmark = True) and "ours alone" (the pick with the vendor kernel families, names
with `_cudnn` / `_cublaslt`, excluded: td.set_options(vendor=False) where the library has
the option; else the pick when it is not a vendor kernel; else, with --every, the fastest
non-vendor kernel measured; else n/a), timed as bench/conv.py times (L2 flushed, a 0.3 ms
spin, round-robin, medians). The pick's output is compared with a float64 torch reference
on the same inputs (relative Frobenius error; over the first images of the batch where
the float64 reference would be slow). --every also times every compiled kernel that
supports the problem (at most --max-candidates, by the cost model's order, the pick and
ours-alone always), fewer reps: the tuning-table data. The ratio is cuDNN's time over
ours (> 1: ours faster); the floor is the problem's bytes at 4.27 TB/s. A failing layer
is a FAILED row, counted in the summary; a kernel of ours alone that fails where the pick
ran is the row's alone_error, a failure in the ours-alone column only.

The LLM GEMM zoo is the same tool with --op gemm (enumerate, run, table, crossval):
`python3 bench/zoo.py --op gemm --help`.

crossval: for each model, a table of the rows of every layer the model does not use, read
by the library alone (TILEDISPATCH_TUNING, TILEDISPATCH_NO_SHIPPED_TUNING=1), its pick for
each of the model's layer-directions scored by the measured times (within 5% of the best
compiled kernel, best/pick, the ratio to cuDNN it would have). bench/zoo/README.md has the
versions and the commands.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import zoo_layers as zl  # noqa: E402
import zoo_llm as zg  # noqa: E402

DEFAULT_LAYERS = BENCH / "zoo" / "conv_layers.json"
DEFAULT_GEMM_CONFIGS = BENCH / "zoo" / "llm_configs.json"
DEFAULT_GEMM_LAYERS = BENCH / "zoo" / "gemm_layers.json"
INPUT_SIZE = (224, 224)
DEVICE = "cuda"
REF_FLOPS_CAP = 1e11  # beyond this the float64 reference runs on the first images only (fwd, bwd_data)


def import_tiledispatch():
    """The installed package; from a source tree without one, its python/ (enough for the
    table: the tile engine's tuning module needs no library)."""
    try:
        import tiledispatch  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(BENCH.parent / "python"))
    import tiledispatch
    return tiledispatch


# ============================================================== enumerate (CPU, torch + timm)

def build_model(name: str):
    """(model, source): timm first, torchvision for names timm lacks."""
    try:
        import timm
        if name in timm.list_models():
            return timm.create_model(name, pretrained=False), "timm"
    except ImportError:
        pass
    import torchvision
    return torchvision.models.get_model(name, weights=None), "torchvision"


def enumerate_model(name: str, input_size=INPUT_SIZE):
    """(records, skipped, source) of one model: a forward hook on every nn.Conv1d/2d/3d,
    one forward pass of a 1 x 3 x input_size zero tensor (eval mode, CPU)."""
    import torch
    import torch.nn as nn

    model, source = build_model(name)
    model.eval()
    records, skipped, hooks = [], [], []

    def hook_for(path, mod):
        def hook(module, args, output):
            x = args[0]
            nd = x.dim() - 2
            inp = tuple(x.shape[2:])
            fil, st, dil = tuple(module.kernel_size), tuple(module.stride), tuple(module.dilation)
            pad = module.padding
            where = {"model": name, "path": path, "class": type(module).__name__, "input": list(inp),
                     "filter": list(fil), "stride": list(st)}
            if getattr(module, "padding_mode", "zeros") != "zeros":
                skipped.append(dict(where, reason=f"padding_mode {module.padding_mode}"))
                return
            if type(module).__name__ in ("Conv2dSame", "Conv2dSameExport"):
                # timm's TF 'SAME': the module pads the input itself, by ceil rules (padding attribute 0)
                pad = zl.symmetric_same_padding(inp, fil, st, dil)
                if pad is None:
                    skipped.append(dict(where, reason="asymmetric 'same' padding (TF rule, odd total)"))
                    return
            elif isinstance(pad, str):
                if pad == "valid":
                    pad = (0,) * nd
                elif pad == "same":
                    totals = [d * (f - 1) for f, d in zip(fil, dil)]
                    if any(t % 2 for t in totals):
                        skipped.append(dict(where, reason="asymmetric padding='same' (odd total)"))
                        return
                    pad = tuple(t // 2 for t in totals)
                else:
                    skipped.append(dict(where, reason=f"padding {pad!r}"))
                    return
            rec = zl.make_record(name, path, nd, module.in_channels, module.out_channels, module.groups,
                                 inp, fil, st, pad, dil, module.bias is not None)
            bad = zl.record_problems(rec)
            if bad:
                skipped.append(dict(where, reason="; ".join(bad)))
                return
            # the problem must be the one torch ran: the output shape agrees
            want = tuple(output.shape[2:])
            got = zl.output_size(rec["input"], rec["filter"], rec["stride"], rec["pad"], rec["dilation"])
            if want != got:
                skipped.append(dict(where, reason=f"output {list(want)} is not the resolved problem's {list(got)}"))
                return
            records.append(rec)
        return hook

    for path, mod in model.named_modules():
        if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            hooks.append(mod.register_forward_hook(hook_for(path, mod)))
    with torch.no_grad():
        model(torch.zeros(1, 3, *input_size))
    for h in hooks:
        h.remove()
    return records, skipped, source


def cmd_enumerate(args):
    import torch
    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import timm
        versions["timm"] = timm.__version__
    except ImportError:
        pass
    try:
        import torchvision
        versions["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    torch.manual_seed(0)
    records, skipped, models = [], [], {}
    names = [m for m in args.models.split(",") if m] if args.models else list(zl.DEFAULT_MODELS)
    for name in names:
        start = time.time()
        recs, skips, source = enumerate_model(name)
        records += recs
        skipped += skips
        models[name] = {"source": source}
        print(f"{name:26s} {source:12s} {len(recs):4d} convs, {len(skips)} skipped ({time.time() - start:.1f} s)",
              flush=True)
    doc = zl.document(records, skipped, models, versions, INPUT_SIZE)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(zl.dumps(doc))
    c = zl.counts(doc["layers"])
    print(f"{len(records)} convs, {len(doc['layers'])} unique layers, {len(skipped)} skipped -> {args.out}")
    for cls, v in c.items():
        print(f"  {cls:15s} {v['layers']:4d} layers, {v['training']:4d} training + {v['inference']:4d} inference "
              f"layer-directions")


# ============================================================== conv (GPU)

def load_layers(path, models=None, classes=None, limit=None, start=0):
    doc = json.loads(Path(path).read_text())
    if doc.get("schema_version") != zl.SCHEMA_VERSION:
        sys.exit(f"{path}: schema {doc.get('schema_version')}, this script reads {zl.SCHEMA_VERSION}")
    layers = doc["layers"]
    if models:
        layers = [lay for lay in layers if set(models) & set(zl.uses(lay))]
    if classes:
        layers = [lay for lay in layers if lay["class"] in classes]
    layers = zl.order(layers)[start:]
    return layers[:limit] if limit else layers


def capped(d, problem, names: list, cap: int, must) -> list:
    """The kernel names cut to `cap` (0: all): the ones in `must` first, then by the cost
    model's order."""
    if not cap or len(names) <= cap:
        return names

    def cost(n):
        try:
            c = d.cost(problem, n)
        except Exception:  # noqa: BLE001
            c = None
        return math.inf if c is None else c
    kept = [n for n in names if n in must]
    rest = sorted((n for n in names if n not in must), key=cost)
    return kept + rest[:max(0, cap - len(kept))]


class TablePicks:
    """The real C selection under leave-one-model-out tables: each held-out model's picks come
    from a tuning table of the other models' rows, written to a new file (the library reads a
    file once) that TILEDISPATCH_TUNING names. A with-block restores the environment and the
    vendor option (vendor=False: ours alone, the vendor kernels out of selection too)."""

    ENV = ("TILEDISPATCH_TUNING", "TILEDISPATCH_NO_SHIPPED_TUNING")

    def __init__(self, d, vendor: bool, key, describe, prefix: str):
        self.d, self.vendor, self.key, self.describe = d, vendor, key, describe
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self.messages = set()

    def __enter__(self):
        td = import_tiledispatch()
        self.saved = {k: os.environ.get(k) for k in self.ENV}
        self.previous = None
        if not self.vendor and "vendor" in td.options():
            self.previous = td.set_options(vendor=False)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            import_tiledispatch().set_options(vendor=self.previous["vendor"])
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False

    def select_all(self, test, pick_fn) -> dict:
        """{row key: pick_fn(row)}; warnings and errors kept as messages."""
        picks = {}
        for r in test:
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    picks[self.key(r)] = pick_fn(r)
                self.messages.update(str(c.message) for c in caught)
            except Exception as err:  # noqa: BLE001
                self.messages.add(f"{self.describe(r)}: {err}")
        return picks

    def problem(self, r):
        from tiledispatch.selection import problem_from
        return problem_from(r["problem"])

    def table(self, model, train, test) -> dict:
        """The held-out rows picked by a table of the training rows."""
        from tiledispatch.tile_engine import tuning
        path = self.tmp / f"tuning_{len(list(self.tmp.iterdir()))}_{model}.json"
        path.write_text(tuning.dumps(tuning.make_table(zl.table_results(train, self.vendor), self.d.target)))
        os.environ["TILEDISPATCH_TUNING"] = str(path)
        os.environ["TILEDISPATCH_NO_SHIPPED_TUNING"] = "1"
        return self.select_all(test, lambda r: self.d.select(self.problem(r)))

    def model_alone(self, model, train, test) -> dict:
        """The held-out rows picked by the cost model alone (no table)."""
        return self.select_all(test, lambda r: self.d.model_select(self.problem(r)))

    def run_picks(self, model, train, test) -> dict:
        """The picks the measured run made (its shipped table, which may hold these very problems)."""
        run_key = "kernel" if self.vendor else "alone_kernel"
        return {self.key(r): r.get(run_key) for r in test}

    def print_messages(self):
        for msg in sorted(self.messages)[:20]:
            print(f"  message: {msg}")


class Bench:
    """The GPU state of a run: the dispatcher, cuDNN, the L2 flush buffer, the timing."""

    def __init__(self, args):
        import torch
        import conv as convbench  # bench/conv.py: timed(), channels_last(), cuDNN's calls
        self.torch, self.cb = torch, convbench
        self.td = td = import_tiledispatch()
        from tiledispatch._cuda import device_targets
        torch.backends.cudnn.benchmark = True
        self.target = args.target or next((t for t in device_targets() if t in td.registry().targets), None)
        if self.target is None:
            sys.exit(f"no GPU with a library in this installation (GPUs: {device_targets()})")
        self.d = td.Dispatcher("conv", self.target)
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)
        self.args = args
        try:
            self.vendor_option = "vendor" in td.options()
        except Exception:  # noqa: BLE001 - an older library: no options at all
            self.vendor_option = False
        self.ranking = next((getattr(self.d, n) for n in ("ranking", "rank", "ranked") if hasattr(self.d, n)), None)
        self.kernels = [k.name for k in self.d.kernels]

    def timed(self, fn):
        return self.cb.timed(fn, self.flush)

    def alone(self, problem, pick):
        """(kernel, source) of ours alone: the pick with the vendor kernels excluded."""
        if self.vendor_option:
            previous = self.td.set_options(vendor=False)
            try:
                return self.d.select(problem), "option"
            except self.td.UnsupportedProblemError:
                return None, "none: no kernel of ours takes the problem"
            finally:
                self.td.set_options(vendor=previous["vendor"])
        if not zl.is_vendor(pick):
            return pick, "pick"
        if self.ranking is not None:
            try:
                return next(n for n in self.ranking(problem) if not zl.is_vendor(n)), "ranking"
            except Exception:  # noqa: BLE001
                pass
        return None, None

    def candidates(self, problem, must):
        """The compiled kernels that take the problem: at most --max-candidates, the ones in
        `must` first, then by the cost model's order."""
        dtype, direction = problem.dtype.key, problem.direction.key
        names = []
        for k in self.d.kernels:
            if k.dtype.key != dtype or k.direction.key != direction or k.ndim != problem.ndim:
                continue
            try:
                if self.d.is_supported(problem, kernel=k.name):
                    names.append(k.name)
            except Exception:  # noqa: BLE001
                continue
        return capped(self.d, problem, names, self.args.max_candidates, must)

    def layer(self, layer, N, dtype, directions):
        """The rows of one layer at one batch and dtype: the tensors made once, every direction."""
        torch, cb, td = self.torch, self.cb, self.td
        nd = layer["ndim"]
        G, C, K = layer["G"], layer["C"], layer["K"]
        inp, fil, st, pad, dil = (tuple(layer[k]) for k in ("input", "filter", "stride", "pad", "dilation"))
        out = zl.output_size(inp, fil, st, pad, dil)
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        x = (torch.rand((N, *inp, G * C), generator=gen, device=DEVICE) * 2 - 1).to(tdt)
        w = (torch.rand((G * K, *fil, C), generator=gen, device=DEVICE) * 2 - 1).to(tdt)
        dy = (torch.rand((N, *out, G * K), generator=gen, device=DEVICE) * 2 - 1).to(tdt)
        xt, wt, dyt = cb.channels_last(x), cb.channels_last(w), cb.channels_last(dy)
        rows = []
        for direction in directions:
            base = {"layer": layer["id"], "models": layer["models"], "class": layer["class"], "tags": layer["tags"],
                    "direction": direction, "batch": N, "dtype": dtype,
                    "problem": zl.problem_spec(layer, N, direction, dtype),
                    "floor_us": zl.memory_floor_us(layer, N, dtype)}
            try:
                base.update(self.direction(layer, N, dtype, direction, x, w, dy, xt, wt, dyt))
            except Exception as err:  # noqa: BLE001 - a failing layer is a row, the run goes on
                base["error"] = f"{type(err).__name__}: {err}"
            rows.append(base)
        return rows

    def direction(self, layer, N, dtype, direction, x, w, dy, xt, wt, dyt):
        torch, cb, td, d = self.torch, self.cb, self.td, self.d
        nd = layer["ndim"]
        G = layer["G"]
        st, pad, dil = (tuple(layer[k]) for k in ("stride", "pad", "dilation"))
        problem = td.ConvProblem(N, G, layer["C"], layer["K"], tuple(layer["input"]), tuple(layer["filter"]),
                                 st, pad, dil, direction, dtype)
        stream = torch.cuda.current_stream().cuda_stream
        res = torch.empty_like({"fwd": dy, "bwd_data": x, "bwd_weight": w}[direction])
        ptrs = {"fwd": (x, w, res), "bwd_data": (res, w, dy), "bwd_weight": (x, res, dy)}[direction]
        addr = tuple(t.data_ptr() for t in ptrs)

        def ours_for(kname):
            return lambda: d.run(problem, *addr, kernel=kname, stream=stream, timed=False)

        if direction == "fwd":
            theirs = lambda: cb.CONV[nd](xt, wt, None, st, pad, dil, G)  # noqa: E731
            ref = lambda n: cb.CONV[nd](xt[:n].double(), wt.double(), None, st, pad, dil, G)  # noqa: E731
        elif direction == "bwd_data":
            theirs = lambda: cb.GRAD_INPUT[nd](xt.shape, wt, dyt, st, pad, dil, G)  # noqa: E731
            ref = lambda n: cb.GRAD_INPUT[nd]((n, *xt.shape[1:]), wt.double(), dyt[:n].double(), st, pad, dil, G)  # noqa: E731
        else:
            theirs = lambda: cb.GRAD_WEIGHT[nd](xt, wt.shape, dyt, st, pad, dil, G)  # noqa: E731
            ref = lambda n: cb.GRAD_WEIGHT[nd](xt.double(), wt.shape, dyt.double(), st, pad, dil, G)  # noqa: E731
        got = lambda n: cb.channels_last(res)[:n] if direction != "bwd_weight" else cb.channels_last(res)  # noqa: E731

        kernel = d.select(problem)
        alone, alone_src = self.alone(problem, kernel)
        ours = ours_for(kernel)
        ours()
        theirs()
        torch.cuda.synchronize()
        alone_error = None
        if alone and alone != kernel:  # a failure of ours alone is its own column's, not the pick's
            try:
                ours_for(alone)()
                torch.cuda.synchronize()
            except Exception as err:  # noqa: BLE001
                alone_error = f"{alone}: {type(err).__name__}: {err}"
                alone, alone_src = None, None
        # correctness of the pick (and of ours alone where it differs), float64 reference
        flops = zl.flops(layer, N)
        n_ref = N if flops <= REF_FLOPS_CAP else max(1, int(N * REF_FLOPS_CAP // flops))
        rel = alone_rel = None
        ref_note = None
        if direction == "bwd_weight" and n_ref < N:
            ref_note = "not checked (float64 reference too slow)"
        else:
            torch.backends.cudnn.benchmark = False  # no autotuning of the float64 reference
            try:
                r = ref(n_ref)
            finally:
                torch.backends.cudnn.benchmark = True
            norm = max(float(r.norm()), 1e-30)
            rel = float((got(n_ref).double() - r).norm()) / norm
            if alone and alone != kernel:
                ours_for(alone)()
                torch.cuda.synchronize()
                alone_rel = float((got(n_ref).double() - r).norm()) / norm
            if n_ref < N:
                ref_note = f"checked on {n_ref} of {N} images"
            del r
        reps = self.args.reps
        fns = {"ours": ours, "theirs": theirs}
        if alone and alone != kernel:
            fns["alone"] = ours_for(alone)
            fns["alone"]()
        times = {k: [] for k in fns}
        for _ in range(reps):  # round-robin
            for k, fn in fns.items():
                times[k].append(self.timed(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        us, cudnn_us = med["ours"], med["theirs"]
        row = {"kernel": kernel, "us": us, "cudnn_us": cudnn_us, "ratio": cudnn_us / us, "rel_error": rel}
        if ref_note:
            row["ref_note"] = ref_note
        every = None
        if self.args.every:
            every = {kernel: us}
            if alone and alone != kernel:
                every[alone] = med["alone"]
            failed = {}
            must = [kernel] + ([alone] if alone else []) + [n for n in self.kernels if zl.is_vendor(n)]
            names = self.candidates(problem, must)
            few = max(5, reps // 3)
            for kname in names:
                if kname in every:
                    continue
                try:
                    fn = ours_for(kname)
                    fn()
                    every[kname] = statistics.median([self.timed(fn) for _ in range(few)])
                except Exception as err:  # noqa: BLE001
                    failed[kname] = str(err)[:200]
            row["every_us"] = dict(sorted(every.items(), key=lambda kv: kv[1]))
            row["candidates"] = len(names)
            if failed:
                row["every_failed"] = failed
        if alone is None and every:
            mine = {k: v for k, v in every.items() if not zl.is_vendor(k)}
            if mine:
                alone = min(mine, key=mine.get)
                alone_src = "every (fastest non-vendor measured)"
        if alone == kernel:
            alone_us = us
        elif alone is None:
            alone_us = None
        elif "alone" in med:
            alone_us = med["alone"]
        else:
            alone_us = every.get(alone) if every else None
        if alone_error:
            row["alone_error"] = alone_error[:300]
        row.update({"alone_kernel": alone, "alone_source": alone_src, "alone_us": alone_us,
                    "alone_ratio": cudnn_us / alone_us if alone_us else None,
                    "alone_rel_error": alone_rel if alone != kernel else rel})
        return row


def cudnn_version():
    """torch's cuDNN version, or why torch cannot say (the run's results stand either way)."""
    import torch
    try:
        return torch.backends.cudnn.version()
    except RuntimeError as err:
        return f"unknown: {err}"


def print_row(r, elapsed):
    models = r["models"][0][0] + (f"+{len(r['models']) - 1}" if len(r["models"]) > 1 else "")
    head = (f"[{elapsed:6.0f}s] {r['layer'][:46]:46s} {models[:24]:24s} {r['class']:14s} {r['direction']:10s} "
            f"b{r['batch']:<3d} {r['dtype']}")
    if "error" in r:
        print(f"{head} FAILED: {r['error'][:300]}", flush=True)
        return
    fmt = lambda v, s: format("n/a", ">" + s.split(".")[0]) if v is None else format(v, s)  # noqa: E731
    flag = ""
    if zl.error_flagged(r):
        flag = " ERROR>limit"
    alone = "" if r["alone_kernel"] == r["kernel"] else f" alone={r['alone_kernel']}"
    print(f"{head} {r['us']:8.1f} {r['cudnn_us']:8.1f} {r['ratio']:6.2f} {fmt(r['alone_us'], '8.1f')} "
          f"{fmt(r['alone_ratio'], '6.2f')} {r['floor_us']:7.1f} {fmt(r['rel_error'], '8.1e')}{flag}  "
          f"{r['kernel']}{alone}", flush=True)


def cmd_conv(args):
    layers = load_layers(args.layers, [m for m in args.models.split(",") if m] if args.models else None,
                         [c for c in args.classes.split(",") if c] if args.classes else None, args.limit, args.start)
    dtypes = [v for v in args.dtype.split(",") if v]
    batches = [int(v) for v in args.batch.split(",") if v]
    dirs = [v for v in args.dirs.split(",") if v]
    bench = Bench(args)
    import torch
    print(f"{len(layers)} layers from {args.layers}; dtypes {dtypes}, batches {batches} (batch 1: fwd only), "
          f"target {bench.target}, vendor option {'yes' if bench.vendor_option else 'no'}, "
          f"{len(bench.kernels)} conv kernels, {torch.cuda.get_device_name()}", flush=True)
    print(f"[elapsed] {'layer':46s} {'models':24s} {'class':14s} {'direction':10s} {'N':4s} {'dt':4s} {'ours us':>8s} "
          f"{'cuDNN us':>8s} {'ratio':>6s} {'alone us':>8s} {'ratio':>6s} {'floor':>7s} {'rel err':>8s}  kernel",
          flush=True)
    rows, start, skipped = [], time.time(), 0
    for i, layer in enumerate(layers):
        if args.budget_s and time.time() - start > args.budget_s:
            skipped = len(layers) - i
            print(f"time budget of {args.budget_s} s spent: {skipped} of {len(layers)} layers not measured "
                  f"(the same command with --start {args.start + i} measures them)", flush=True)
            break
        for dtype in dtypes:
            for N in batches:
                want = dirs if N > 1 else [v for v in dirs if v == "fwd"]
                if not want:
                    continue
                try:
                    new = bench.layer(layer, N, dtype, want)
                except Exception as err:  # noqa: BLE001 - e.g. out of memory making the tensors
                    new = [{"layer": layer["id"], "models": layer["models"], "class": layer["class"],
                            "tags": layer["tags"], "direction": d_, "batch": N, "dtype": dtype,
                            "problem": zl.problem_spec(layer, N, d_, dtype),
                            "floor_us": zl.memory_floor_us(layer, N, dtype),
                            "error": f"{type(err).__name__}: {err}"} for d_ in want]
                for r in new:
                    print_row(r, time.time() - start)
                rows += new
        torch.cuda.empty_cache() if i % 50 == 49 else None
    elapsed = time.time() - start
    print(f"\n{len(layers) - skipped} layers, {len(rows)} rows ({sum('error' in r for r in rows)} FAILED) "
          f"in {elapsed:.0f} s" + (f"; {skipped} layers skipped by the time budget" if skipped else ""))
    print(zl.summary_tables(rows))
    bad = [r for r in rows if zl.error_flagged(r)]
    for r in bad:
        print(f"REL ERROR above the limit: {r['layer']} {r['direction']} b{r['batch']} {r['dtype']} "
              f"{r['rel_error']:.2e} {r['kernel']}")
    doc = {"device": torch.cuda.get_device_name(), "target": bench.target, "layers_file": str(args.layers),
           "torch": torch.__version__, "cudnn": cudnn_version(), "vendor_option": bench.vendor_option,
           "reps": args.reps, "every": args.every, "elapsed_s": elapsed, "skipped_layers": skipped, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
        print(f"rows -> {args.json}")
    if args.table and args.every:
        write_table(rows, args.table, bench.target)
    if args.crossval:
        if not args.every:
            print("--crossval needs --every (the measured times of every kernel)")
        else:
            run_crossval(rows, bench.d, vendor=not args.no_vendor)


# ============================================================== tables and crossval

def write_table(rows, out, target, vendor=True):
    import_tiledispatch()
    from tiledispatch.tile_engine import tuning
    table = tuning.make_table(zl.table_results(rows, vendor), target)
    Path(out).write_text(tuning.dumps(table))
    print(f"tuning table: {len(table['entries'])} problems -> {out}")
    return table


def load_rows(paths, key=zl.row_key):
    """The rows of one or more runs' JSON (e.g. one GPU call per class), and the first run's header."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    by_key = {}
    for doc in docs:
        for r in doc["rows"]:
            by_key[key(r)] = r  # a row measured twice: the later run's
    total = sum(len(doc["rows"]) for doc in docs)
    if total != len(by_key):
        print(f"{total - len(by_key)} rows measured in more than one run: the later run's kept")
    return docs[0], list(by_key.values())


def cmd_table(args):
    doc, rows = load_rows(args.results)
    if args.exclude_model:
        rows, _ = zl.crossval_split(rows, args.exclude_model)
    rows = [r for r in rows if "error" not in r]
    if not any(r.get("every_us") for r in rows):
        sys.exit(f"{args.results}: no --every times in its rows")
    write_table(rows, args.out, args.target or doc.get("target", "sm_90a"), vendor=not args.no_vendor)


def run_crossval(rows, d, vendor=True):
    """Leave-one-model-out on the GPU library `d` (no timing: the measured --every times)."""
    with TablePicks(d, vendor, zl.row_key, lambda r: f"{r['layer']} {r['direction']}", "zoo_crossval_") as picks:
        scores = zl.crossval(rows, picks.table, vendor=vendor)
        # the same rows: the cost model alone (no table), and the run's own picks (shipped table)
        model_only = zl.crossval(rows, picks.model_alone, vendor=vendor)
        shipped = zl.crossval(rows, picks.run_picks, vendor=vendor)
    print("\n== crossval: each model's layers picked by a table of the other models' layers "
          f"({'vendor kernels included' if vendor else 'ours alone: vendor kernels out of the tables, the selection and the best'})")
    print(zl.CROSSVAL_HEAD)
    for m, s in scores.items():
        print(zl.crossval_line(m, s))
    print("-- the same picks without a table (cost model alone), and the run's own picks (shipped table, "
          "which may hold these very problems):")
    print(zl.crossval_line("total, cost model", model_only["total"]))
    print(zl.crossval_line("total, run's picks", shipped["total"]))
    picks.print_messages()
    return scores


def cmd_crossval(args):
    td = import_tiledispatch()
    doc, rows = load_rows(args.results)
    from tiledispatch._cuda import device_targets
    target = args.target or doc.get("target") or next(
        (t for t in device_targets() if t in td.registry().targets), None)
    run_crossval(rows, td.Dispatcher("conv", target), vendor=not args.no_vendor)


# ============================================================== gemm: the LLM zoo (--op gemm)

def cmd_gemm_enumerate(args):
    """The shape list from the model configurations (pure Python, no torch)."""
    configs = json.loads(Path(args.configs).read_text())
    tokens = tuple(int(v) for v in args.tokens.split(",") if v) if args.tokens else zg.TOKENS
    doc = zg.document(configs, tokens)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(zg.dumps(doc))
    for name, info in doc["models"].items():
        print(f"{name:16s} {info['hf_repo']:34s} {info['gemms']:4d} GEMMs, {info['unique']:4d} unique shapes")
    total = sum(info["gemms"] for info in doc["models"].values())
    print(f"{total} GEMMs ({len(doc['models'])} models x {len(tokens)} token counts x {len(zg.LAYERS)} layers), "
          f"{len(doc['shapes'])} unique (M, N, K) -> {args.out}")


def load_shapes(path, models=None, tokens=None, limit=None, start=0):
    doc = json.loads(Path(path).read_text())
    if doc.get("schema_version") != zg.SCHEMA_VERSION:
        sys.exit(f"{path}: schema {doc.get('schema_version')}, this script reads {zg.SCHEMA_VERSION}")
    shapes = doc["shapes"]
    if models:
        shapes = [s for s in shapes if set(models) & set(zg.uses(s))]
    if tokens:
        shapes = [s for s in shapes if any(t in tokens for _, _, t, _ in s["uses"])]
    shapes = zl.order(shapes)[start:]
    return shapes[:limit] if limit else shapes


class CudaOperands:
    """A (M x K) row-major, B = W^T (K x N) column-major with W (N x K) the Linear's weight as
    torch stores it (layout rcr), C (M x N); torch CUDA tensors, uniform in [-1, 1)."""

    def __init__(self, torch, M, N, K, dtype):
        gen = torch.Generator(device=DEVICE).manual_seed(0)
        tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}[dtype]
        out = torch.bfloat16 if dtype.startswith("fp8") else tdt
        self.torch, self.dtype = torch, dtype
        self.a = (torch.rand((M, K), generator=gen, device=DEVICE) * 2 - 1).to(tdt)
        self.w = (torch.rand((N, K), generator=gen, device=DEVICE) * 2 - 1).to(tdt)
        self.b = self.w.t()
        self.c = torch.empty((M, N), device=DEVICE, dtype=out)
        self.c_vendor = torch.empty((M, N), device=DEVICE, dtype=out)
        self.one = torch.ones((), device=DEVICE)
        self.lda, self.ldb, self.ldc = self.a.stride(0), self.b.stride(1), self.c.stride(0)
        self.addr = (self.a.data_ptr(), self.b.data_ptr(), self.c.data_ptr())

    def vendor(self):
        """cuBLAS: torch.matmul(x, w.t()); fp8: cuBLASLt through torch._scaled_mm, per-tensor
        (unit) scales, bf16 output."""
        torch, a, b = self.torch, self.a, self.b
        if self.dtype.startswith("fp8"):
            return lambda: torch._scaled_mm(a, b, scale_a=self.one, scale_b=self.one, out_dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=self.c_vendor)

    def rel_error(self, rows: int) -> float:
        """Relative Frobenius error of C's first rows against float64 on the same inputs (the
        reference made once: the pick and ours alone are checked against the same one)."""
        if getattr(self, "ref", None) is None or self.ref.shape[0] != rows:
            self.ref = self.a[:rows].double() @ self.w.double().t()
        ref = self.ref
        return float((self.c[:rows].double() - ref).norm()) / max(float(ref.norm()), 1e-30)


class CpuOperands:
    """The same on the host: numpy float32, B a column-major (F-order) view, the vendor numpy's
    BLAS (np.matmul): a smoke run of the measurement loop, not a benchmark."""

    def __init__(self, np, M, N, K, dtype):
        if dtype != "fp32":
            raise ValueError(f"--device cpu measures fp32 only (numpy's BLAS as the vendor), not {dtype}")
        rng = np.random.default_rng(0)
        self.np = np
        self.a = (rng.random((M, K), dtype=np.float32) * 2 - 1)
        self.w = (rng.random((N, K), dtype=np.float32) * 2 - 1)
        self.b = self.w.T
        self.c = np.empty((M, N), np.float32)
        self.c_vendor = np.empty((M, N), np.float32)
        self.lda, self.ldb, self.ldc = K, K, N
        self.addr = (self.a, self.b, self.c)

    def vendor(self):
        return lambda: self.np.matmul(self.a, self.b, out=self.c_vendor)

    def rel_error(self, rows: int) -> float:
        np = self.np
        ref = self.a[:rows].astype(np.float64) @ self.w.astype(np.float64).T
        return float(np.linalg.norm(self.c[:rows] - ref)) / max(float(np.linalg.norm(ref)), 1e-30)


class GemmBench:
    """The state of a GEMM zoo run: the dispatcher, the vendor, the timing. cuda: CUDA events,
    L2 flushed and the GPU kept busy while the host enqueues (bench/conv.py's timed); cpu:
    perf_counter after touching 64 MiB."""

    def __init__(self, args):
        self.td = td = import_tiledispatch()
        self.args = args
        self.device = args.device
        if self.device == "cuda":
            import torch
            import conv as convbench  # bench/conv.py: timed()
            from tiledispatch._cuda import device_targets
            self.torch, self.cb = torch, convbench
            self.target = args.target or next((t for t in device_targets() if t in td.registry().targets), None)
            if self.target is None:
                sys.exit(f"no GPU with a library in this installation (GPUs: {device_targets()})")
            self.flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)
            self.stream = torch.cuda.current_stream().cuda_stream
        else:
            import numpy as np
            self.np = np
            self.target = args.target or "cpu"
            self.flush = np.zeros(8 << 20)  # 64 MiB
            self.stream = None
        self.d = td.Dispatcher("gemm", self.target)
        try:
            self.vendor_option = "vendor" in td.options()
        except Exception:  # noqa: BLE001 - an older library: no options at all
            self.vendor_option = False
        self.kernels = [k for k in self.d.kernels if not getattr(k, "named_only", False)]

    def device_name(self) -> str:
        if self.device == "cuda":
            return self.torch.cuda.get_device_name()
        import platform
        return f"cpu ({platform.processor() or platform.machine()})"

    def operands(self, M, N, K, dtype):
        if self.device == "cuda":
            return CudaOperands(self.torch, M, N, K, dtype)
        return CpuOperands(self.np, M, N, K, dtype)

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def timed(self, fn) -> float:
        """Microseconds of one call."""
        if self.device == "cuda":
            return self.cb.timed(fn, self.flush)
        self.flush += 1.0
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6

    def ours(self, ops):
        """td.gemm as a user calls it (the library selects)."""
        td, a, b, c = self.td, ops.a, ops.b, ops.c
        if self.device == "cuda":
            return lambda: td.gemm(a, b, out=c)
        return lambda: td.gemm(a, b, out=c, target=self.target)

    def named(self, ops, problem, kernel):
        """One compiled kernel, named, on the same operands."""
        d, addr = self.d, ops.addr
        return lambda: d.run(problem, *addr, kernel=kernel, stream=self.stream, timed=False)

    def alone(self, problem, pick):
        """(kernel, source) of ours alone: the pick with the vendor kernel families out."""
        if self.vendor_option:
            previous = self.td.set_options(vendor=False)
            try:
                return self.d.select(problem), "option"
            except self.td.UnsupportedProblemError:
                return None, "none: no kernel of ours takes the problem"
            finally:
                self.td.set_options(vendor=previous["vendor"])
        return (pick, "pick") if not zl.is_vendor(pick) else (None, None)

    def candidates(self, problem, dtype, must):
        """The compiled rcr kernels of the dtype that take the problem (named-only ones out): at
        most --max-candidates, the ones in `must` first, then by the cost model's order."""
        names = []
        for k in self.kernels:
            if k.dtype.key != dtype or k.layout.key != "rcr":
                continue
            try:
                if self.d.is_supported(problem, kernel=k.name):
                    names.append(k.name)
            except Exception:  # noqa: BLE001
                continue
        return capped(self.d, problem, names, self.args.max_candidates, must)

    def measure(self, shape, dtype) -> dict:
        """One row: the pick (td.gemm), the vendor, ours alone, and with --every every kernel."""
        M, N, K = shape["M"], shape["N"], shape["K"]
        row = {"shape": shape["id"], "M": M, "N": N, "K": K, "uses": shape["uses"], "dtype": dtype,
               "problem": zg.problem_spec(M, N, K, dtype), "bytes": zg.problem_bytes(M, N, K, dtype)}
        if not zg.vendor_takes(M, N, K, dtype):
            row["error"] = "the vendor (torch._scaled_mm) needs N and K multiples of 16"
            return row
        try:
            row.update(self._measure(M, N, K, dtype))
        except Exception as err:  # noqa: BLE001 - a failing shape is a row, the run goes on
            row["error"] = f"{type(err).__name__}: {err}"
        return row

    def _measure(self, M, N, K, dtype) -> dict:
        td, d = self.td, self.d
        ops = self.operands(M, N, K, dtype)
        problem = td.GemmProblem(M, N, K, dtype, "rcr", ops.lda, ops.ldb, ops.ldc)
        kernel = d.select(problem)
        alone, alone_src = self.alone(problem, kernel)
        ours, theirs = self.ours(ops), ops.vendor()
        ours()
        theirs()
        self.sync()
        ref_rows = max(1, min(M, int(REF_FLOPS_CAP // (2 * N * K))))
        rel = ops.rel_error(ref_rows)
        alone_rel = rel
        alone_error = None
        fns = {"ours": ours, "theirs": theirs}
        if alone and alone != kernel:  # a failure of ours alone is its own column's, not the pick's
            try:
                fns["alone"] = self.named(ops, problem, alone)
                fns["alone"]()
                self.sync()
                alone_rel = ops.rel_error(ref_rows)
            except Exception as err:  # noqa: BLE001
                alone_error = f"{alone}: {type(err).__name__}: {err}"
                fns.pop("alone", None)
                alone, alone_src, alone_rel = None, None, None
        reps = self.args.reps
        times = {k: [] for k in fns}
        for _ in range(reps):  # round-robin
            for k, fn in fns.items():
                times[k].append(self.timed(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        us, vendor_us = med["ours"], med["theirs"]
        row = {"kernel": kernel, "us": us, "vendor_us": vendor_us, "ratio": vendor_us / us, "rel_error": rel,
               "ref_rows": ref_rows}
        every = None
        if self.args.every:
            every = {kernel: us}
            if alone and alone != kernel:
                every[alone] = med["alone"]
            failed = {}
            names = self.candidates(problem, dtype, [kernel] + ([alone] if alone else []))
            few = max(5, reps // 3)
            for kname in names:
                if kname in every:
                    continue
                try:
                    fn = self.named(ops, problem, kname)
                    fn()
                    every[kname] = statistics.median([self.timed(fn) for _ in range(few)])
                except Exception as err:  # noqa: BLE001
                    failed[kname] = str(err)[:200]
            row["every_us"] = dict(sorted(every.items(), key=lambda kv: kv[1]))
            row["candidates"] = len(names)
            if failed:
                row["every_failed"] = failed
        if alone is None and every:
            mine = {k: v for k, v in every.items() if not zl.is_vendor(k)}
            if mine:
                alone = min(mine, key=mine.get)
                alone_src = "every (fastest non-vendor measured)"
                alone_rel = None
        if alone is None:
            alone_us = None
        elif alone == kernel:
            alone_us = us
        elif "alone" in med:
            alone_us = med["alone"]
        else:
            alone_us = (every or {}).get(alone)
        if alone_error:
            row["alone_error"] = alone_error[:300]
        row.update({"alone_kernel": alone, "alone_source": alone_src, "alone_us": alone_us,
                    "alone_ratio": vendor_us / alone_us if alone_us else None, "alone_rel_error": alone_rel})
        return row


def print_gemm_row(r, elapsed):
    models = sorted(zg.uses(r))
    who = models[0] + (f"+{len(models) - 1}" if len(models) > 1 else "")
    head = f"[{elapsed:6.0f}s] {r['shape']:26s} {who[:20]:20s} {r['dtype']:8s}"
    if "error" in r:
        print(f"{head} FAILED: {r['error'][:300]}", flush=True)
        return
    fmt = lambda v, s: format("n/a", ">" + s.split(".")[0]) if v is None else format(v, s)  # noqa: E731
    bw = zg.bandwidth_fraction(r["M"], r["N"], r["K"], r["dtype"], r["us"])
    flag = " ERROR>limit" if zg.error_flagged(r) else ""
    alone = "" if r["alone_kernel"] == r["kernel"] else f" alone={r['alone_kernel']}"
    print(f"{head} {r['us']:9.1f} {r['vendor_us']:9.1f} {r['ratio']:6.2f} {fmt(r['alone_us'], '9.1f')} "
          f"{fmt(r['alone_ratio'], '6.2f')} {bw:5.2f} {fmt(r['rel_error'], '8.1e')}{flag}  {r['kernel']}{alone}",
          flush=True)


def cmd_gemm_run(args):
    models = [m for m in args.models.split(",") if m] if args.models else None
    tokens = {int(v) for v in args.tokens.split(",") if v} if args.tokens else None
    shapes = load_shapes(args.layers, models, tokens, args.limit, args.start)
    dtypes = [v for v in args.dtype.split(",") if v]
    bench = GemmBench(args)
    vendor_name = "cuBLAS" if args.device == "cuda" else "numpy"
    print(f"{len(shapes)} shapes from {args.layers}; dtypes {dtypes}, target {bench.target}, vendor option "
          f"{'yes' if bench.vendor_option else 'no'}, {len(bench.kernels)} gemm kernels, {bench.device_name()}",
          flush=True)
    print(f"[elapsed] {'shape':26s} {'models':20s} {'dtype':8s} {'ours us':>9s} {vendor_name + ' us':>9s} "
          f"{'ratio':>6s} {'alone us':>9s} {'ratio':>6s} {'bw':>5s} {'rel err':>8s}  kernel", flush=True)
    rows, start, skipped = [], time.time(), 0
    for i, shape in enumerate(shapes):
        if args.budget_s and time.time() - start > args.budget_s:
            skipped = len(shapes) - i
            print(f"time budget of {args.budget_s} s spent: {skipped} of {len(shapes)} shapes not measured "
                  f"(the same command with --start {args.start + i} measures them)", flush=True)
            break
        for dtype in dtypes:
            r = bench.measure(shape, dtype)
            print_gemm_row(r, time.time() - start)
            rows.append(r)
        if args.device == "cuda" and i % 20 == 19:
            bench.torch.cuda.empty_cache()
    elapsed = time.time() - start
    print(f"\n{len(shapes) - skipped} shapes, {len(rows)} rows ({sum('error' in r for r in rows)} FAILED) "
          f"in {elapsed:.0f} s" + (f"; {skipped} shapes skipped by the time budget" if skipped else ""))
    print(zg.summary_tables(rows, vendor_name))
    for r in rows:
        if zg.error_flagged(r):
            print(f"REL ERROR above the limit: {r['shape']} {r['dtype']} {r['rel_error']:.2e} {r['kernel']}")
    doc = {"device": bench.device_name(), "target": bench.target, "layers_file": str(args.layers),
           "vendor": vendor_name, "vendor_option": bench.vendor_option, "reps": args.reps, "every": args.every,
           "elapsed_s": elapsed, "skipped_shapes": skipped, "rows": rows}
    if args.device == "cuda":
        doc["torch"] = bench.torch.__version__
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
        print(f"rows -> {args.json}")
    if args.table and args.every:
        write_table(rows, args.table, bench.target)
    if args.crossval:
        if not args.every:
            print("--crossval needs --every (the measured times of every kernel)")
        else:
            run_gemm_crossval(rows, bench.d, vendor=not args.no_vendor)


def run_gemm_crossval(rows, d, vendor=True):
    """Leave-one-model-out on the library `d`, each dtype apart (no timing: the measured
    --every times): the table's pick, the best compiled kernel, the cost model alone and
    the run's own picks."""
    results = {}
    with TablePicks(d, vendor, zg.row_key, lambda r: f"{r['shape']} {r['dtype']}", "zoo_gemm_crossval_") as picks:
        for dtype in sorted({r["dtype"] for r in rows}):
            sel = [r for r in rows if r["dtype"] == dtype]
            scores = zg.crossval(sel, picks.table, vendor=vendor)
            if not scores or scores["total"]["n"] == 0:
                continue
            scored = [r for r in sel if r.get("every_us") and "error" not in r]
            extra = {
                "best compiled": zg.score_picks(scored, zg.best_picks(scored, vendor), None, vendor),
                "cost model alone": zg.crossval(sel, picks.model_alone, vendor=vendor)["total"],
            }
            if any(r.get("kernel") for r in sel):  # rows of a run (not rebuilt from a table)
                extra["run's picks"] = zg.crossval(sel, picks.run_picks, vendor=vendor)["total"]
            results[dtype] = {"scores": scores, **extra}
            print(f"\n== crossval {dtype}: each model's shapes picked by a table of the other models' shapes "
                  f"({'vendor kernels included' if vendor else 'ours alone: vendor kernels out'})")
            print(zg.CROSSVAL_HEAD)
            for m, s in scores.items():
                print(zg.crossval_line(m if m != "total" else "total, table's pick", s))
            print("-- the same rows: the best compiled kernel, the cost model alone (no table), and the run's own "
                  "picks (shipped table, which may hold these very shapes):")
            for label, s in extra.items():
                print(zg.crossval_line(f"total, {label}", s))
    picks.print_messages()
    return results


def cmd_gemm_table(args):
    doc, rows = load_rows(args.results, zg.row_key)
    if args.exclude_model:
        rows, _ = zg.crossval_split(rows, args.exclude_model)
    rows = [r for r in rows if "error" not in r]
    if not any(r.get("every_us") for r in rows):
        sys.exit(f"{args.results}: no --every times in its rows")
    write_table(rows, args.out, args.target or doc.get("target", "sm_90a"), vendor=not args.no_vendor)


def cmd_gemm_crossval(args):
    if args.from_table:
        if args.results:
            sys.exit("crossval: give run JSON files or --from-table, not both")
        table = json.loads(Path(args.from_table).read_text())
        rows = zg.rows_from_table(table, json.loads(Path(args.layers).read_text()))
        if not rows:
            sys.exit(f"{args.from_table}: no entry of the zoo's shapes ({args.layers})")
        print(f"{len(rows)} rows from the entries of {args.from_table} that hold the zoo's shapes")
        doc = {"target": table.get("target")}
    elif not args.results:
        sys.exit("crossval: give one or more run --every JSON files, or --from-table")
    else:
        doc, rows = load_rows(args.results, zg.row_key)
    td = import_tiledispatch()
    target = args.target or doc.get("target")
    if target is None:
        from tiledispatch._cuda import device_targets
        target = next((t for t in device_targets() if t in td.registry().targets), None)
    run_gemm_crossval(rows, td.Dispatcher("gemm", target), vendor=not args.no_vendor)


def gemm_parser():
    ap = argparse.ArgumentParser(description=GEMM_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=OPS, default="gemm")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("enumerate", help="the shape list from the model configurations (pure Python)")
    e.add_argument("--configs", default=str(DEFAULT_GEMM_CONFIGS))
    e.add_argument("--tokens", help=f"comma-separated (default: {','.join(map(str, zg.TOKENS))})")
    e.add_argument("--out", default=str(DEFAULT_GEMM_LAYERS))
    r = sub.add_parser("run", help="ours vs the vendor on every shape (GPU; --device cpu: a smoke run)",
                       description=GEMM_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--layers", default=str(DEFAULT_GEMM_LAYERS))
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--dtype", default=None, help="comma-separated: bf16, fp16, fp8_e4m3 (default: all three; cpu: fp32)")
    r.add_argument("--reps", type=int, default=20)
    r.add_argument("--every", action="store_true", help="also time every compiled kernel that takes the shape")
    r.add_argument("--max-candidates", type=int, default=24, help="with --every: at most this many kernels a shape (0: all)")
    r.add_argument("--json", help="write every row here")
    r.add_argument("--models", help="comma-separated: only the shapes these models use")
    r.add_argument("--tokens", help="comma-separated: only the shapes used at these token counts")
    r.add_argument("--limit", type=int, help="the first N shapes of the (shuffled) order")
    r.add_argument("--start", type=int, default=0, help="skip the first N shapes of the order (continue a run cut by --budget-s)")
    r.add_argument("--budget-s", type=float, default=0, help="stop starting new shapes after this many seconds")
    r.add_argument("--target", help="the library's target (default: the GPU's; cpu with --device cpu)")
    r.add_argument("--table", help="with --every: write the tuning table of the run here")
    r.add_argument("--crossval", action="store_true", help="with --every: leave-one-model-out at the end")
    r.add_argument("--no-vendor", action="store_true", help="--crossval for ours alone")
    t = sub.add_parser("table", help="a tuning table from a --every run's JSON")
    t.add_argument("results", nargs="+", help="one or more run --every --json files")
    t.add_argument("--out", default="tuning.json")
    t.add_argument("--exclude-model", help="leave out every shape this model uses")
    t.add_argument("--target", help="default: the run's")
    t.add_argument("--no-vendor", action="store_true", help="leave the vendor kernels out")
    x = sub.add_parser("crossval", help="leave-one-model-out scores of the tables (the library, no timing)")
    x.add_argument("results", nargs="*", help="one or more run --every --json files")
    x.add_argument("--from-table", help="the rows from a tuning table's entries of the zoo's shapes instead "
                   "(e.g. tuning/tuning_sm_90a.json); without a GPU, TILEDISPATCH_EMULATE_SMS=132 gives the "
                   "cost model the GPU's SM count")
    x.add_argument("--layers", default=str(DEFAULT_GEMM_LAYERS), help="with --from-table: the zoo's shapes")
    x.add_argument("--target", help="default: the run's")
    x.add_argument("--no-vendor", action="store_true",
                   help="ours alone: vendor kernels out of the tables, the selection (td.set_options) and the scores")
    return ap


GEMM_DOC = """The LLM GEMM zoo: the GEMMs of the decoder blocks (qkv, o, gate_up, down) and lm_head of
LLMs, from their configurations (bench/zoo/llm_configs.json), at 1 to 8192 tokens, deduped
(bench/zoo/gemm_layers.json), against cuBLAS (torch.matmul(x, w.t()); fp8: torch._scaled_mm,
per-tensor scales, bf16 output) in the same process. bench/zoo_llm.py holds the logic.

    python3 bench/zoo.py --op gemm enumerate [--configs F] [--tokens 1,8,...] [--out F]   # pure Python
    python3 bench/zoo.py --op gemm run [--dtype bf16,fp16,fp8_e4m3] [--reps 20] [--every]
        [--max-candidates 24] [--json OUT] [--models a,b] [--tokens 1,8] [--limit N]
        [--budget-s S] [--start N] [--table tuning.json] [--crossval] [--no-vendor]
    python3 bench/zoo.py --op gemm run --device cpu --dtype fp32 --layers SMALL.json   # a smoke run
    python3 bench/zoo.py --op gemm table RESULTS.json [--out tuning.json] [--exclude-model M]
    TILEDISPATCH_EMULATE_SMS=132 python3 bench/zoo.py --op gemm crossval --from-table tuning/tuning_sm_90a.json \
        --no-vendor    # without a GPU: the shipped table's zoo entries as the rows (an sm_90a build)
    python3 bench/zoo.py --op gemm crossval RESULTS.json [--no-vendor]

run: per unique shape (in a fixed shuffled order, so that --budget-s or --limit cut a sample)
and dtype: ours (td.gemm on the tensors, the library's pick, d.select names it), the vendor,
ours alone (td.set_options(vendor=False): the cublaslt family out) timed round-robin (CUDA
events, L2 flushed, medians); the pick's output against float64 on the same inputs (the
first rows where the reference would be slow). --every also times every compiled rcr
kernel of the dtype that takes the shape (the tuning-table data). ratio = the vendor's time
over ours (> 1: ours faster). Summaries per dtype by token range, layer and model (summed
time over the uses' counts: one forward pass), and the achieved bandwidth of the shapes of
M <= 64 against 4.27 TB/s.

crossval: for each model, a table of the --every rows of every shape the model does not
use, read by the library alone (TILEDISPATCH_TUNING, TILEDISPATCH_NO_SHIPPED_TUNING=1); its
pick for each of the model's shapes scored by the measured times (within 5% / 3% of the
best compiled kernel, best / pick, the ratio to the vendor), with the best compiled kernel,
the cost model alone and the run's own picks on the same rows.
"""


# ============================================================== command line

OPS = ("conv", "gemm")


def conv_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=OPS, default="conv",
                    help="conv: the timm convolutions (default); gemm: the LLM GEMMs (zoo.py --op gemm --help)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("enumerate", help="the layer list from the models (CPU, torch + timm)")
    e.add_argument("--models", help=f"comma-separated (default: {','.join(zl.DEFAULT_MODELS)})")
    e.add_argument("--out", default=str(DEFAULT_LAYERS))
    c = sub.add_parser("conv", help="ours vs cuDNN on every layer (GPU)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--layers", default=str(DEFAULT_LAYERS))
    c.add_argument("--dtype", default="bf16", help="comma-separated: bf16, fp16")
    c.add_argument("--batch", default="32,1", help="comma-separated; batch 1 runs fwd only (inference)")
    c.add_argument("--dirs", default=",".join(zl.DIRECTIONS))
    c.add_argument("--reps", type=int, default=20)
    c.add_argument("--every", action="store_true", help="also time every compiled kernel that takes the problem")
    c.add_argument("--max-candidates", type=int, default=24, help="with --every: at most this many kernels a problem (0: all)")
    c.add_argument("--json", help="write every row here")
    c.add_argument("--models", help="comma-separated: only the layers these models use")
    c.add_argument("--classes", help="comma-separated of " + ", ".join(zl.CLASSES))
    c.add_argument("--limit", type=int, help="the first N layers of the (shuffled) order")
    c.add_argument("--start", type=int, default=0, help="skip the first N layers of the order (continue a run cut by --budget-s)")
    c.add_argument("--budget-s", type=float, default=0, help="stop starting new layers after this many seconds")
    c.add_argument("--target", help="the library's target (default: the GPU's)")
    c.add_argument("--table", help="with --every: write the tuning table of the run here")
    c.add_argument("--crossval", action="store_true", help="with --every: leave-one-model-out at the end")
    c.add_argument("--no-vendor", action="store_true", help="--crossval for ours alone (see crossval --no-vendor)")
    t = sub.add_parser("table", help="a tuning table from a --every run's JSON")
    t.add_argument("results", nargs="+", help="one or more conv --every --json files")
    t.add_argument("--out", default="tuning.json")
    t.add_argument("--exclude-model", help="leave out every layer this model uses")
    t.add_argument("--target", help="default: the run's (sm_90a)")
    t.add_argument("--no-vendor", action="store_true", help="leave the vendor kernels out")
    x = sub.add_parser("crossval", help="leave-one-model-out scores of the tables (GPU library, no timing)")
    x.add_argument("results", nargs="+", help="one or more conv --every --json files")
    x.add_argument("--target")
    x.add_argument("--no-vendor", action="store_true",
                   help="ours alone: vendor kernels out of the tables, the selection (td.set_options) and the scores")
    return ap


def main(argv=None):
    # --op (anywhere on the line) picks the command set: conv's verbs, or gemm's
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--op", choices=OPS, default="conv")
    known, rest = pre.parse_known_args(argv)
    op = known.op
    if op == "gemm":
        args = gemm_parser().parse_args(rest)
        if args.cmd == "run" and args.dtype is None:
            args.dtype = "fp32" if args.device == "cpu" else ",".join(zg.DTYPES)
        {"enumerate": cmd_gemm_enumerate, "run": cmd_gemm_run, "table": cmd_gemm_table,
         "crossval": cmd_gemm_crossval}[args.cmd](args)
        return
    args = conv_parser().parse_args(rest)
    {"enumerate": cmd_enumerate, "conv": cmd_conv, "table": cmd_table, "crossval": cmd_crossval}[args.cmd](args)


if __name__ == "__main__":
    main()
