"""The pure logic of bench/zoo.py (no torch, no GPU, no numpy): convolution layer records,
their dedup and classes, the problem specs, the memory floor, the summary statistics, the
tuning-table rows and the cross-validation split and scores. tests/test_zoo.py tests it in CI.

A layer record (one forward call of an nn.ConvNd in one model, from the enumerator):

    {"model", "path", "ndim", "C_in", "C_out", "groups", "input", "filter", "stride", "pad",
     "dilation", "bias"}

A unique layer (bench/zoo/conv_layers.json "layers"): the N-independent problem

    {"id", "ndim", "G", "C", "K" (per group), "input", "filter", "stride", "pad", "dilation",
     "class", "tags": {"stride", "filter", "stem"}, "models": [[model, count], ...],
     "example": "model:module.path", "bias": bool}

A result row (bench/zoo.py conv --json "rows"): one layer, direction, batch and dtype:

    {"layer", "models", "class", "tags", "direction", "batch", "dtype", "problem" (a problem spec),
     "us", "cudnn_us", "ratio", "kernel", "alone_kernel", "alone_us", "alone_ratio",
     "floor_us", "rel_error", "every_us" {kernel: us} (with --every), or "error"}
"""
from __future__ import annotations

import hashlib
import json
import math

SCHEMA_VERSION = 1
COPY_BW = 4.27e12  # bytes/s, device-to-device copy measured on the H200 (bench/conv.py)
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
CLASSES = ("depthwise", "depthwise_mult", "grouped", "dense")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
DEFAULT_MODELS = (
    "efficientnet_b0", "efficientnetv2_rw_s", "mobilenetv2_100", "mobilenetv3_large_100", "convnext_tiny",
    "regnety_032", "regnetx_032", "resnext50_32x4d", "ghostnet_100", "resnet50", "densenet121",
    "mixnet_s", "regnety_016", "tf_efficientnet_b0",
)
# the fields of a layer that make its identity (the problem, N apart)
KEY_FIELDS = ("ndim", "G", "C", "K", "input", "filter", "stride", "pad", "dilation")
WITHIN = 1.05  # crossval: a pick within 5% of the best compiled kernel


# ---------------------------------------------------------------- sizes and padding

def output_size(inp, fil, stride, pad, dilation) -> tuple:
    return tuple((i + 2 * p - d * (f - 1) - 1) // s + 1
                 for i, f, s, p, d in zip(inp, fil, stride, pad, dilation))


def same_padding_total(size: int, kernel: int, stride: int, dilation: int) -> int:
    """The total padding of TensorFlow's 'SAME' along one dim (timm's get_same_padding)."""
    return max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)


def symmetric_same_padding(inp, fil, stride, dilation):
    """'SAME' padding as one number a side per dim, or None where some dim needs an odd total
    (one more at the end than at the start: asymmetric, not a ConvProblem)."""
    pads = []
    for i, f, s, d in zip(inp, fil, stride, dilation):
        total = same_padding_total(i, f, s, d)
        if total % 2:
            return None
        pads.append(total // 2)
    return tuple(pads)


# ---------------------------------------------------------------- records and layers

def make_record(model, path, ndim, C_in, C_out, groups, inp, fil, stride, pad, dilation, bias=False) -> dict:
    as_t = lambda v: tuple(int(x) for x in v)  # noqa: E731
    return {"model": model, "path": path, "ndim": int(ndim), "C_in": int(C_in), "C_out": int(C_out),
            "groups": int(groups), "input": as_t(inp), "filter": as_t(fil), "stride": as_t(stride),
            "pad": as_t(pad), "dilation": as_t(dilation), "bias": bool(bias)}


def record_problems(rec: dict) -> list:
    """What is wrong with a record (empty: well-formed)."""
    bad = []
    nd = rec["ndim"]
    if nd not in (1, 2, 3):
        bad.append(f"ndim {nd}")
    for name in ("input", "filter", "stride", "pad", "dilation"):
        if len(rec[name]) != nd:
            bad.append(f"{name} has {len(rec[name])} values for ndim {nd}")
    if bad:
        return bad
    for name in ("C_in", "C_out", "groups"):
        if rec[name] < 1:
            bad.append(f"{name} = {rec[name]}")
    for name in ("input", "filter", "stride", "dilation"):
        if min(rec[name]) < 1:
            bad.append(f"{name} {rec[name]} not positive")
    if min(rec["pad"]) < 0:
        bad.append(f"pad {rec['pad']} negative")
    if rec["groups"] >= 1 and (rec["C_in"] % rec["groups"] or rec["C_out"] % rec["groups"]):
        bad.append(f"C_in {rec['C_in']} / C_out {rec['C_out']} not divisible by groups {rec['groups']}")
    if not bad and min(output_size(rec["input"], rec["filter"], rec["stride"], rec["pad"], rec["dilation"])) < 1:
        bad.append("output size below 1")
    return bad


def classify(G: int, C: int, K: int) -> str:
    """C, K per group. dense: G == 1; depthwise: one channel in and out a group;
    depthwise_mult: one in, several out; grouped: the rest."""
    if G == 1:
        return "dense"
    if C == 1:
        return "depthwise" if K == 1 else "depthwise_mult"
    return "grouped"


def dims(values) -> str:
    return "x".join(str(v) for v in values)


def tags(layer: dict) -> dict:
    """stride ("1", "2", or "2x1" where the dims differ), filter ("3x3", "1x5"), stem (C_in == 3)."""
    st = layer["stride"]
    return {"stride": str(st[0]) if len(set(st)) == 1 else dims(st), "filter": dims(layer["filter"]),
            "stem": layer["G"] * layer["C"] == 3}


def layer_id(layer: dict) -> str:
    return (f"{layer['ndim']}d_g{layer['G']}_c{layer['C']}_k{layer['K']}_i{dims(layer['input'])}"
            f"_f{dims(layer['filter'])}_s{dims(layer['stride'])}_p{dims(layer['pad'])}_d{dims(layer['dilation'])}")


def layer_key(layer: dict) -> tuple:
    return tuple(tuple(layer[f]) if isinstance(layer[f], (list, tuple)) else layer[f] for f in KEY_FIELDS)


def layer_of(rec: dict) -> dict:
    """The N-independent problem of a record, per group channels."""
    g = rec["groups"]
    layer = {"ndim": rec["ndim"], "G": g, "C": rec["C_in"] // g, "K": rec["C_out"] // g,
             "input": list(rec["input"]), "filter": list(rec["filter"]), "stride": list(rec["stride"]),
             "pad": list(rec["pad"]), "dilation": list(rec["dilation"])}
    layer["id"] = layer_id(layer)
    layer["class"] = classify(layer["G"], layer["C"], layer["K"])
    layer["tags"] = tags(layer)
    return layer


def dedup(records) -> list:
    """Unique layers, each with the (model, count) pairs that use it, in a stable order
    (rank, class, then the id); the first record of a layer gives its example path."""
    by_key = {}
    for rec in records:
        layer = layer_of(rec)
        key = layer_key(layer)
        if key not in by_key:
            layer["models"] = {}
            layer["example"] = f"{rec['model']}:{rec['path']}"
            layer["bias"] = False
            by_key[key] = layer
        entry = by_key[key]
        entry["models"][rec["model"]] = entry["models"].get(rec["model"], 0) + 1
        entry["bias"] = entry["bias"] or bool(rec.get("bias"))
    layers = []
    for layer in by_key.values():
        layer["models"] = sorted([m, c] for m, c in layer["models"].items())
        layers.append(layer)
    return sorted_layers(layers)


def sorted_layers(layers) -> list:
    """The layer list's order: rank, class, then the id."""
    return sorted(layers, key=lambda lay: (lay["ndim"], CLASSES.index(lay["class"]), lay["id"]))


def uses(layer: dict) -> dict:
    """model -> how many times the model runs the layer."""
    return {m: c for m, c in layer["models"]}


def layer_problems(layer: dict) -> list:
    """What is wrong with a unique layer (empty: well-formed)."""
    rec = make_record("", "", layer["ndim"], layer["G"] * layer["C"], layer["G"] * layer["K"], layer["G"],
                      layer["input"], layer["filter"], layer["stride"], layer["pad"], layer["dilation"])
    bad = record_problems(rec)
    if layer.get("id") != layer_id(layer):
        bad.append(f"id {layer.get('id')} is not {layer_id(layer)}")
    if layer.get("class") != classify(layer["G"], layer["C"], layer["K"]):
        bad.append(f"class {layer.get('class')}")
    if not layer.get("models") or any(c < 1 for _, c in layer["models"]):
        bad.append("no model uses it")
    return bad


def document(records, skipped, models: dict, versions: dict, input_size) -> dict:
    """The layer list JSON: schema, versions, input size, the per-model counts, the unique
    layers and every skipped conv with the reason."""
    layers = dedup(records)
    per_model = {}
    for name, info in sorted(models.items()):
        per_model[name] = dict(info, convs=sum(1 for r in records if r["model"] == name),
                               unique=sum(1 for lay in layers if name in uses(lay)),
                               skipped=sum(1 for s in skipped if s["model"] == name))
    return {"schema_version": SCHEMA_VERSION, "input_size": list(input_size), "batch_recorded": 1,
            "versions": dict(sorted(versions.items())), "models": per_model, "layers": layers,
            "skipped": sorted(skipped, key=lambda s: (s["model"], s["path"]))}


def dumps(doc: dict) -> str:
    """Deterministic JSON (sorted keys), one layer / skipped conv per line."""
    def block(name):
        items = ",\n".join(json.dumps(v, sort_keys=True, separators=(",", ":")) for v in doc[name])
        return f'"{name}": [\n{items}\n]'
    head = {k: v for k, v in doc.items() if k not in ("layers", "skipped")}
    text = json.dumps(head, sort_keys=True, separators=(", ", ": "))[:-1]
    return f"{text}, {block('layers')}, {block('skipped')}}}\n"


def counts(layers, inference_dirs=("fwd",), training_dirs=DIRECTIONS) -> dict:
    """Unique layers and layer-directions (training + inference) per class."""
    out = {}
    for cls in CLASSES + ("all",):
        sel = [lay for lay in layers if cls in ("all", lay["class"])]
        out[cls] = {"layers": len(sel), "training": len(sel) * len(training_dirs),
                    "inference": len(sel) * len(inference_dirs)}
    return out


def order(layers) -> list:
    """A fixed pseudo-random order (by the id's hash): a run cut short by its time budget (or
    --limit) has measured a sample of every class and model, not the first classes."""
    return sorted(layers, key=lambda lay: hashlib.sha1(lay["id"].encode()).hexdigest())


# ---------------------------------------------------------------- problems

def problem_spec(layer: dict, N: int, direction: str, dtype: str) -> dict:
    """The spec of the layer's problem as tiledispatch.selection.problem_spec writes it."""
    return {"op": "conv", "N": int(N), "G": layer["G"], "C": layer["C"], "K": layer["K"],
            "input": list(layer["input"]), "filter": list(layer["filter"]), "stride": list(layer["stride"]),
            "pad": list(layer["pad"]), "dilation": list(layer["dilation"]), "direction": direction, "dtype": dtype}


def problem_bytes(layer: dict, N: int, dtype: str = "bf16") -> int:
    out = output_size(layer["input"], layer["filter"], layer["stride"], layer["pad"], layer["dilation"])
    elems = (N * math.prod(layer["input"]) * layer["G"] * layer["C"]
             + layer["G"] * layer["K"] * math.prod(layer["filter"]) * layer["C"]
             + N * math.prod(out) * layer["G"] * layer["K"])
    return elems * DTYPE_BYTES[dtype]


def memory_floor_us(layer: dict, N: int, dtype: str = "bf16") -> float:
    """Bytes of input + weight + output over the copy bandwidth, in microseconds."""
    return problem_bytes(layer, N, dtype) / COPY_BW * 1e6


def flops(layer: dict, N: int) -> int:
    out = output_size(layer["input"], layer["filter"], layer["stride"], layer["pad"], layer["dilation"])
    return 2 * N * layer["G"] * layer["C"] * layer["K"] * math.prod(out) * math.prod(layer["filter"])


def is_vendor(kernel) -> bool:
    """A vendor kernel family of the registry (cuDNN / cuBLASLt behind our ABI)."""
    return bool(kernel) and ("_cudnn" in kernel or "_cublaslt" in kernel)


# ---------------------------------------------------------------- statistics

def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def percentile(values, q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default): q in [0, 100]."""
    v = sorted(values)
    if not v:
        return float("nan")
    pos = (len(v) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(rows, us_key: str = "us", ratio_key: str = "ratio", weights=None, vendor_key: str = "cudnn_us") -> dict:
    """Over result rows: geomean / min / 10th percentile of the ratio (cuDNN time / ours),
    how many below 1x, 0.9x, 0.5x, and the summed-time ratio sum(cuDNN) / sum(ours) (each row
    weighted by weights[i] there, e.g. the layer's count in a model; every other number is
    over distinct rows). Rows without the ratio (failed, or no ours-alone) count as failed.
    vendor_key: the row's field of the vendor's time (the GEMM zoo's is vendor_us)."""
    rows = list(rows)
    weights = list(weights) if weights is not None else [1] * len(rows)
    ok = [(r, w) for r, w in zip(rows, weights) if r.get(ratio_key) is not None and r.get(us_key)]
    ratios = [r[ratio_key] for r, _ in ok]
    ours = sum(w * r[us_key] for r, w in ok)
    theirs = sum(w * r[vendor_key] for r, w in ok)
    return {"n": len(ok), "failed": len(rows) - len(ok), "geomean": geomean(ratios),
            "min": min(ratios) if ratios else float("nan"), "p10": percentile(ratios, 10),
            "below_1": sum(v < 1 for v in ratios), "below_0.9": sum(v < 0.9 for v in ratios),
            "below_0.5": sum(v < 0.5 for v in ratios),
            "sum_ratio": theirs / ours if ours else float("nan"), "ours_us": ours, "cudnn_us": theirs}


def _fmt(v, spec) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        width = spec.split(".")[0]
        return format("n/a", f">{width}") if width.isdigit() else "n/a"
    return format(v, spec)


STAT_HEAD = f"{'n':>4s} {'fail':>4s} {'geo':>6s} {'min':>6s} {'p10':>6s} {'<1':>4s} {'<.9':>4s} {'<.5':>4s} {'sum x':>6s}"


def stat_cells(s: dict) -> str:
    return (f"{s['n']:4d} {s['failed']:4d} {_fmt(s['geomean'], '6.2f')} {_fmt(s['min'], '6.2f')} "
            f"{_fmt(s['p10'], '6.2f')} {s['below_1']:4d} {s['below_0.9']:4d} {s['below_0.5']:4d} "
            f"{_fmt(s['sum_ratio'], '6.2f')}")


def group_label(batch: int) -> str:
    return f"training b{batch}" if batch > 1 else f"inference b{batch}"


def summary_tables(rows) -> str:
    """The end-of-run summaries, per dtype and batch: by direction, class, stride, filter and
    model (count-weighted summed time; grouped + depthwise only, and all layers), for the
    dispatcher's pick and for ours alone (vendor kernels excluded)."""
    lines = []
    keys = sorted({(r["dtype"], r["batch"]) for r in rows}, key=lambda k: (k[0], -k[1]))
    for dtype, batch in keys:
        sel = [r for r in rows if r["dtype"] == dtype and r["batch"] == batch]
        lines.append(f"\n== {dtype} {group_label(batch)}: ratio = cuDNN time / ours (>1: ours faster)")
        lines.append(f"{'':28s} | {'pick':^52s} | {'ours alone (no vendor kernels)':^52s}")
        lines.append(f"{'group':28s} | {STAT_HEAD} | {STAT_HEAD}")

        def add(label, subset, weights=None):
            if not subset:
                return
            pick = summarize(subset, "us", "ratio", weights)
            alone = summarize(subset, "alone_us", "alone_ratio", weights)
            lines.append(f"{label[:28]:28s} | {stat_cells(pick)} | {stat_cells(alone)}")

        add("all", sel)
        for d in DIRECTIONS:
            add(f"direction {d}", [r for r in sel if r["direction"] == d])
        for c in CLASSES:
            add(f"class {c}", [r for r in sel if r["class"] == c])
        add("grouped + depthwise", [r for r in sel if r["class"] != "dense"])
        for s in sorted({r["tags"]["stride"] for r in sel}):
            add(f"stride {s}", [r for r in sel if r["tags"]["stride"] == s])
        for f in sorted({r["tags"]["filter"] for r in sel}, key=lambda f: (len(f), f)):
            add(f"filter {f}", [r for r in sel if r["tags"]["filter"] == f])
        add("stem (C_in = 3)", [r for r in sel if r["tags"]["stem"]])
        lines.append(f"{'per model (sum x weighted)':28s} |")
        models = sorted({m for r in sel for m, _ in r["models"]})
        for m in models:
            mine = [r for r in sel if m in dict(r["models"])]
            add(f"{m}", mine, [dict(r["models"])[m] for r in mine])
            gd = [r for r in mine if r["class"] != "dense"]
            add(f"  {m} g+dw", gd, [dict(r["models"])[m] for r in gd])
        errs = {}
        for r in sel:
            if r.get("rel_error") is not None:  # NaN (a NaN in the output) counts as the worst
                e = math.inf if math.isnan(r["rel_error"]) else r["rel_error"]
                errs[r["direction"]] = max(errs.get(r["direction"], 0.0), e)
        unchecked = sum(1 for r in sel if "error" not in r and r.get("rel_error") is None)
        flagged = sum(error_flagged(r) for r in sel)
        lines.append("max rel error: " + ", ".join(f"{d} {e:.2e}" for d, e in sorted(errs.items()))
                     + f"; {flagged} above the limit ({error_limit(dtype):.0e})"
                     + (f"; {unchecked} rows not checked" if unchecked else ""))
    return "\n".join(lines)


def error_limit(dtype: str) -> float:
    return {"bf16": 2e-2, "fp16": 5e-3}.get(dtype, 1e-5)


def error_flagged(row: dict) -> bool:
    """The pick's relative error is above the dtype's limit, or NaN."""
    e = row.get("rel_error")
    return e is not None and not e <= error_limit(row["dtype"])


# ---------------------------------------------------------------- tuning tables and crossval

def row_key(row: dict) -> tuple:
    return (row["layer"], row["direction"], row["batch"], row["dtype"])


def table_results(rows, vendor: bool = True) -> list:
    """Bench results in the tile engine's format (tuning.make_table's input) from the rows'
    --every times: one OK result per kernel and problem (vendor=False drops vendor kernels)."""
    out = []
    for r in rows:
        for kernel, us in sorted((r.get("every_us") or {}).items()):
            if us is None or (not vendor and is_vendor(kernel)):
                continue
            out.append({"problem": r["problem"], "kernel": kernel, "status": "OK", "latency_ms": us * 1e-3})
    return out


def row_models(row: dict) -> set:
    return {m for m, _ in row["models"]}


def crossval_split(rows, model: str):
    """(training rows, test rows) for one model: the test rows are the model's own layers;
    the training rows are every other layer's (a layer another model shares with this one is
    the model's own, not training data)."""
    train = [r for r in rows if model not in row_models(r)]
    test = [r for r in rows if model in row_models(r)]
    return train, test


def score_picks(test_rows, picks: dict, model: str | None = None, vendor: bool = True) -> dict:
    """How good the picks (row_key -> kernel) are by the measured --every times: within 5% of
    the best compiled kernel (count, %), geomean best / picked, the ratio to cuDNN the pick has
    (geomean, min, and the summed time weighted by the model's count of the layer).
    vendor=False: the best is the best of our own kernels (a vendor pick is unmeasured)."""
    n = within = unmeasured = 0
    best_ratios, vs_cudnn = [], []
    ours_sum = theirs_sum = 0.0
    for r in test_rows:
        every = {k: v for k, v in (r.get("every_us") or {}).items() if vendor or not is_vendor(k)}
        if not every or r.get("cudnn_us") is None:
            continue
        n += 1
        pick = picks.get(row_key(r))
        if pick not in every:
            unmeasured += 1
            continue
        best = min(every.values())
        ratio = best / every[pick]
        best_ratios.append(ratio)
        within += ratio >= 1 / WITHIN
        vs_cudnn.append(r["cudnn_us"] / every[pick])
        w = dict(r["models"]).get(model, 1) if model else 1
        ours_sum += w * every[pick]
        theirs_sum += w * r["cudnn_us"]
    scored = len(best_ratios)
    return {"n": n, "scored": scored, "unmeasured": unmeasured, "within5": within,
            "within5_pct": 100.0 * within / scored if scored else float("nan"),
            "geomean_best_over_pick": geomean(best_ratios), "geomean_vs_cudnn": geomean(vs_cudnn),
            "min_vs_cudnn": min(vs_cudnn) if vs_cudnn else float("nan"),
            "sum_vs_cudnn": theirs_sum / ours_sum if ours_sum else float("nan")}


def crossval(rows, picker, models=None, vendor: bool = True, *, key=None, split=None, score=None,
             models_of=None) -> dict:
    """Leave-one-model-out: for each model, picker(model, train_rows, test_rows) returns
    {row_key: kernel} (the GPU side writes a table from train_rows and asks the library);
    the picks are scored against the measured times. Returns {model: score, "total": ...}.
    key, split, score and models_of default to this module's row_key, crossval_split,
    score_picks and row_models (the GEMM zoo passes its own)."""
    key, split = key or row_key, split or crossval_split
    score, models_of = score or score_picks, models_of or row_models
    measured = [r for r in rows if r.get("every_us") and "error" not in r]
    models = sorted(models or {m for r in measured for m in models_of(r)})
    out, all_picks, all_test = {}, {}, {}
    for m in models:
        train, test = split(measured, m)
        picks = picker(m, train, test)
        out[m] = score(test, picks, m, vendor)
        for r in test:  # a shared row is scored once in the total, with the pick of its first model
            k = key(r)
            if k not in all_picks and k in picks:
                all_picks[k], all_test[k] = picks[k], r
    out["total"] = score(list(all_test.values()), all_picks, None, vendor)
    return out


CROSSVAL_HEAD = (f"{'model':24s} {'rows':>5s} {'scored':>6s} {'within 5%':>10s} {'best/pick':>9s} "
                 f"{'x cuDNN geo':>11s} {'min':>6s} {'sum x':>6s}")


def crossval_line(name: str, s: dict) -> str:
    return (f"{name[:24]:24s} {s['n']:5d} {s['scored']:6d} {s['within5']:4d} {_fmt(s['within5_pct'], '4.0f')}% "
            f"{_fmt(s['geomean_best_over_pick'], '9.3f')} {_fmt(s['geomean_vs_cudnn'], '11.2f')} "
            f"{_fmt(s['min_vs_cudnn'], '6.2f')} {_fmt(s['sum_vs_cudnn'], '6.2f')}")
