"""The pure logic of bench/zoo.py --op gemm (no torch, no GPU, no numpy): the GEMMs of LLM
decoder blocks from model configurations, their dedup, the problem specs, bytes and
bandwidth, the summaries by token range, layer and model, and the leave-one-model-out
split and scores of the tuning tables. tests/test_zoo_gemm.py tests it in CI.

A model configuration (bench/zoo/llm_configs.json "models"): the numbers of the model's
Hugging Face config.json,

    {"hf_repo", "hidden_size", "intermediate_size", "num_attention_heads",
     "num_key_value_heads", "head_dim", "num_hidden_layers", "vocab_size",
     and for a mixture of experts: "n_experts", "top_k", "moe_intermediate_size"}

The GEMMs of one forward pass at T tokens (a torch Linear y = x W^T: M = tokens,
N = out_features, K = in_features, layout rcr), per decoder block:

    qkv      N = (heads + 2 kv_heads) head_dim   K = hidden          (q, k, v fused)
    o        N = hidden                          K = heads head_dim
    gate_up  N = 2 intermediate                  K = hidden          (gate, up fused)
    down     N = hidden                          K = intermediate

and once a pass: lm_head, N = vocab_size, K = hidden, M = T (every token's logits, as in
prefill and training). In a mixture of experts, gate_up and down are the experts' GEMMs
(intermediate = moe_intermediate_size), counted as dense GEMMs of M = ceil(T top_k /
n_experts) rows (the tokens spread evenly over the experts), run by min(n_experts, T top_k)
experts; the router (N = n_experts) is left out.

A record: {"model", "layer", "tokens", "M", "N", "K", "count"} (count: how many times one
forward pass runs the GEMM). A unique shape (bench/zoo/gemm_layers.json "shapes"):
{"id", "M", "N", "K", "uses": [[model, layer, tokens, count], ...]}.

A result row (bench/zoo.py --op gemm run --json "rows"): one shape and dtype:

    {"shape", "M", "N", "K", "uses", "dtype", "problem", "us", "vendor_us", "ratio",
     "kernel", "alone_kernel", "alone_us", "alone_ratio", "bytes", "rel_error",
     "every_us" {kernel: us} (with --every), or "error"}

ratio = the vendor's time over ours (> 1: ours faster).
"""
from __future__ import annotations

import json
import math

import zoo_layers as zl

SCHEMA_VERSION = 1
TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
DTYPES = ("bf16", "fp16", "fp8_e4m3")
LAYERS = ("qkv", "o", "gate_up", "down", "lm_head")
EXPERT_LAYERS = ("gate_up", "down")
COPY_BW = zl.COPY_BW  # bytes/s, the H200's device copy
MEMORY_BOUND_M = 64  # rows of at most this many tokens: the weight's bytes are the time
TOKEN_RANGES = (("1", 1, 1), ("8-64", 8, 64), ("128-256", 128, 256), ("512-2048", 512, 2048),
                ("4096-8192", 4096, 8192))
# bytes of an input element and of an output element (fp8: bf16 output)
IN_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1}
OUT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 2}
# relative Frobenius error of the pick against float64 on the same (rounded) inputs
ERROR_LIMIT = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 5e-3, "fp8_e4m3": 2e-2}
WITHIN = (1.05, 1.03)  # crossval: a pick within 5% / 3% of the best compiled kernel
REQUIRED = ("hf_repo", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "num_hidden_layers", "vocab_size")
MOE_FIELDS = ("n_experts", "top_k", "moe_intermediate_size")


# ---------------------------------------------------------------- configurations

def config_problems(cfg: dict) -> list:
    """What is wrong with a model configuration (empty: well-formed)."""
    bad = [f"no {k}" for k in REQUIRED if k not in cfg]
    moe = [k for k in MOE_FIELDS if k in cfg]
    if moe and len(moe) != len(MOE_FIELDS):
        bad.append(f"a mixture of experts needs all of {', '.join(MOE_FIELDS)} (has {', '.join(moe)})")
    if bad:
        return bad
    for k in REQUIRED[1:] + tuple(moe):
        if not isinstance(cfg[k], int) or isinstance(cfg[k], bool) or cfg[k] < 1:
            bad.append(f"{k} = {cfg[k]!r} is not a positive integer")
    if not bad and cfg["num_attention_heads"] % cfg["num_key_value_heads"]:
        bad.append("num_attention_heads is not a multiple of num_key_value_heads")
    if not bad and moe and cfg["top_k"] > cfg["n_experts"]:
        bad.append("top_k above n_experts")
    return bad


def is_moe(cfg: dict) -> bool:
    return "n_experts" in cfg


def expert_tokens(tokens: int, top_k: int, n_experts: int) -> int:
    """Rows of one expert's GEMM: the tokens x top_k routed rows spread evenly, rounded up."""
    return -(-tokens * top_k // n_experts)


def active_experts(tokens: int, top_k: int, n_experts: int) -> int:
    """How many experts run: every one, or one a routed row where there are fewer rows."""
    return min(n_experts, tokens * top_k)


def block_layers(cfg: dict) -> list:
    """(layer, N, K) of one decoder block and the lm_head, M apart."""
    hidden, heads, kv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    inter = cfg["moe_intermediate_size"] if is_moe(cfg) else cfg["intermediate_size"]
    return [("qkv", (heads + 2 * kv) * hd, hidden), ("o", hidden, heads * hd), ("gate_up", 2 * inter, hidden),
            ("down", hidden, inter), ("lm_head", cfg["vocab_size"], hidden)]


def model_gemms(name: str, cfg: dict, tokens=TOKENS) -> list:
    """Every GEMM of one forward pass of the model at each token count, as records."""
    bad = config_problems(cfg)
    if bad:
        raise ValueError(f"{name}: {'; '.join(bad)}")
    blocks = cfg["num_hidden_layers"]
    out = []
    for t in tokens:
        for layer, N, K in block_layers(cfg):
            M, count = t, blocks
            if layer == "lm_head":
                count = 1
            elif is_moe(cfg) and layer in EXPERT_LAYERS:
                M = expert_tokens(t, cfg["top_k"], cfg["n_experts"])
                count = blocks * active_experts(t, cfg["top_k"], cfg["n_experts"])
            out.append({"model": name, "layer": layer, "tokens": t, "M": M, "N": N, "K": K, "count": count})
    return out


def shape_id(M: int, N: int, K: int) -> str:
    return f"m{M}_n{N}_k{K}"


def dedup(records) -> list:
    """Unique (M, N, K), each with its uses [model, layer, tokens, count] (sorted), in
    (M, N, K) order."""
    by_key = {}
    for r in records:
        key = (r["M"], r["N"], r["K"])
        by_key.setdefault(key, []).append([r["model"], r["layer"], r["tokens"], r["count"]])
    return [{"id": shape_id(*key), "M": key[0], "N": key[1], "K": key[2], "uses": sorted(uses)}
            for key, uses in sorted(by_key.items())]


def document(configs: dict, tokens=TOKENS) -> dict:
    """The shape list JSON from the configurations file's document."""
    records, models = [], {}
    for name, cfg in sorted(configs["models"].items()):
        recs = model_gemms(name, cfg, tokens)
        records += recs
        models[name] = {"hf_repo": cfg["hf_repo"], "gemms": len(recs)}
    shapes = dedup(records)
    for name in models:
        models[name]["unique"] = sum(1 for s in shapes if name in uses(s))
    return {"schema_version": SCHEMA_VERSION, "tokens": list(tokens), "dtypes": list(DTYPES), "layout": "rcr",
            "lm_head": True, "models": models, "shapes": shapes}


def dumps(doc: dict) -> str:
    """Deterministic JSON (sorted keys), one shape per line."""
    head = {k: v for k, v in doc.items() if k != "shapes"}
    text = json.dumps(head, sort_keys=True, separators=(", ", ": "))[:-1]
    items = ",\n".join(json.dumps(s, sort_keys=True, separators=(",", ":")) for s in doc["shapes"])
    return f'{text}, "shapes": [\n{items}\n]}}\n'


def uses(shape: dict) -> dict:
    """model -> how many times a forward pass of the model runs the shape (every token count)."""
    out = {}
    for m, _, _, c in shape["uses"]:
        out[m] = out.get(m, 0) + c
    return out


def shape_problems(shape: dict) -> list:
    bad = []
    if min(shape["M"], shape["N"], shape["K"]) < 1:
        bad.append("a size below 1")
    if shape.get("id") != shape_id(shape["M"], shape["N"], shape["K"]):
        bad.append(f"id {shape.get('id')}")
    if not shape.get("uses") or any(c < 1 or layer not in LAYERS for _, layer, _, c in shape["uses"]):
        bad.append("no use, or a bad one")
    return bad


# ---------------------------------------------------------------- problems, bytes, bandwidth

def problem_spec(M: int, N: int, K: int, dtype: str) -> dict:
    """The spec tiledispatch.selection.problem_spec writes for GemmProblem(M, N, K, dtype, 'rcr')."""
    return {"op": "gemm", "M": int(M), "N": int(N), "K": int(K), "dtype": dtype, "layout": "rcr"}


def problem_bytes(M: int, N: int, K: int, dtype: str) -> int:
    """A, B read once and C written once."""
    return (M * K + N * K) * IN_BYTES[dtype] + M * N * OUT_BYTES[dtype]


def bandwidth_fraction(M: int, N: int, K: int, dtype: str, us: float) -> float:
    """Achieved bytes per second over the device copy's 4.27 TB/s."""
    return problem_bytes(M, N, K, dtype) / (us * 1e-6) / COPY_BW


def vendor_takes(M: int, N: int, K: int, dtype: str) -> bool:
    """torch._scaled_mm (fp8) needs K and N multiples of 16; cuBLAS takes every size."""
    return not dtype.startswith("fp8") or (K % 16 == 0 and N % 16 == 0)


def error_flagged(row: dict) -> bool:
    e = row.get("rel_error")
    return e is not None and not e <= ERROR_LIMIT.get(row["dtype"], 1e-5)


def token_range(tokens: int):
    return next((label for label, lo, hi in TOKEN_RANGES if lo <= tokens <= hi), None)


# ---------------------------------------------------------------- summaries

def weight(row: dict, model=None, layer=None, trange=None) -> int:
    """The summed count of the row's uses that match (None: any)."""
    return sum(c for m, lay, t, c in row["uses"]
               if (model is None or m == model) and (layer is None or lay == layer)
               and (trange is None or token_range(t) == trange))


def summarize(rows, us_key="us", ratio_key="ratio", weights=None) -> dict:
    """zoo_layers.summarize with the vendor's time in vendor_us."""
    return zl.summarize(rows, us_key, ratio_key, weights, vendor_key="vendor_us")


def groups(rows) -> list:
    """(label, rows, weights) of the summaries: every row, by token range, by layer, by
    model; a row is in a group where some use of it is, weighted by those uses' counts."""
    out = []

    def add(label, **match):
        sel = [(r, weight(r, **match)) for r in rows]
        sel = [(r, w) for r, w in sel if w > 0]
        if sel:
            out.append((label, [r for r, _ in sel], [w for _, w in sel]))

    add("all")
    for label, _, _ in TOKEN_RANGES:
        add(f"tokens {label}", trange=label)
    for layer in LAYERS:
        add(f"layer {layer}", layer=layer)
    for m in sorted({m for r in rows for m, _, _, _ in r["uses"]}):
        add(f"model {m}", model=m)
    return out


def bandwidth_summary(rows) -> dict:
    """Over the rows of M <= 64 with times: the achieved bandwidth of ours, ours alone and the
    vendor as fractions of 4.27 TB/s (geomean, min, median, max)."""
    sel = [r for r in rows if r["M"] <= MEMORY_BOUND_M and "error" not in r]
    out = {"n": len(sel)}
    for who, key in (("ours", "us"), ("alone", "alone_us"), ("vendor", "vendor_us")):
        fr = [bandwidth_fraction(r["M"], r["N"], r["K"], r["dtype"], r[key]) for r in sel if r.get(key)]
        out[who] = {"n": len(fr), "geomean": zl.geomean(fr), "min": min(fr) if fr else float("nan"),
                    "median": zl.percentile(fr, 50), "max": max(fr) if fr else float("nan")}
    return out


def summary_tables(rows, vendor_name: str = "cuBLAS") -> str:
    """The end-of-run summaries per dtype: by token range, layer and model (summed time
    weighted by the uses' counts), the pick and ours alone, then the bandwidth of the
    memory-bound rows."""
    lines = []
    for dtype in sorted({r["dtype"] for r in rows}, key=lambda d: (DTYPES + ("fp32",)).index(d)):
        sel = [r for r in rows if r["dtype"] == dtype]
        vendor = "cuBLASLt" if vendor_name == "cuBLAS" and dtype.startswith("fp8") else vendor_name
        lines.append(f"\n== {dtype}: ratio = {vendor} time / ours (>1: ours faster); "
                     "sum x = summed time over the uses' counts (one forward pass each)")
        lines.append(f"{'':28s} | {'pick':^52s} | {'ours alone (no vendor kernels)':^52s}")
        lines.append(f"{'group':28s} | {zl.STAT_HEAD} | {zl.STAT_HEAD}")
        for label, subset, weights in groups(sel):
            pick = summarize(subset, "us", "ratio", weights)
            alone = summarize(subset, "alone_us", "alone_ratio", weights)
            lines.append(f"{label[:28]:28s} | {zl.stat_cells(pick)} | {zl.stat_cells(alone)}")
        bw = bandwidth_summary(sel)
        if bw["n"]:
            lines.append(f"memory-bound (M <= {MEMORY_BOUND_M}), {bw['n']} shapes: achieved bandwidth / 4.27 TB/s "
                         "(geomean, min, median, max)")
            for who in ("ours", "alone", "vendor"):
                b = bw[who]
                lines.append(f"  {who:7s} n {b['n']:4d}  {zl._fmt(b['geomean'], '5.2f')} {zl._fmt(b['min'], '5.2f')} "
                             f"{zl._fmt(b['median'], '5.2f')} {zl._fmt(b['max'], '5.2f')}")
        errs = [r["rel_error"] for r in sel if r.get("rel_error") is not None]
        worst = max((math.inf if math.isnan(e) else e for e in errs), default=None)
        lines.append(f"max rel error {zl._fmt(worst, '.2e')}; {sum(error_flagged(r) for r in sel)} above the limit "
                     f"({ERROR_LIMIT.get(dtype, 1e-5):.0e}); {sum('error' in r for r in sel)} FAILED")
    return "\n".join(lines)


# ---------------------------------------------------------------- tuning tables and crossval

def row_key(row: dict) -> tuple:
    return (row["shape"], row["dtype"])


def rows_from_table(table: dict, layers: dict) -> list:
    """Zoo rows rebuilt from a tuning table (tile_engine/tuning.py's format), for the
    leave-one-model-out check without a GPU: each rcr entry whose shape the zoo holds becomes
    the row of a --every run (every kernel's time in us, the layers' models; no pick of a run);
    `vendor_us` is the time of the entry's vendor kernel (cuBLASLt through our wrapper) where
    it timed one, else the fastest (the "x vendor" columns then read against that)."""
    shapes = {(s["M"], s["N"], s["K"]): s for s in layers["shapes"]}
    rows = []
    for e in table.get("entries", []):
        p = e.get("problem", {})
        shape = shapes.get((p.get("M"), p.get("N"), p.get("K")))
        if shape is None or p.get("layout") != "rcr" or p.get("op", "gemm") != "gemm":
            continue
        every = {k: 1000.0 * ms for k, ms in zip(e["kernels"], e.get("latency_ms", [])) if ms and ms > 0}
        if not every:
            continue
        vendor = [v for k, v in every.items() if zl.is_vendor(k)]
        rows.append({"shape": shape["id"], "dtype": p["dtype"], "uses": shape["uses"],
                     "problem": problem_spec(shape["M"], shape["N"], shape["K"], p["dtype"]),
                     "every_us": every, "vendor_us": vendor[0] if vendor else min(every.values())})
    return rows


def row_models(row: dict) -> set:
    return {m for m, _, _, _ in row["uses"]}


def crossval_split(rows, model: str):
    """(training rows, test rows): the test rows are the model's own shapes; a shape another
    model shares with it is the model's own, not training data."""
    train = [r for r in rows if model not in row_models(r)]
    test = [r for r in rows if model in row_models(r)]
    return train, test


def measured(row: dict, vendor: bool = True) -> dict:
    """The row's --every times (vendor=False: our own kernels only)."""
    return {k: v for k, v in (row.get("every_us") or {}).items() if v is not None and (vendor or not zl.is_vendor(k))}


def best_picks(rows, vendor: bool = True) -> dict:
    """row_key -> the fastest kernel measured (the best compiled one)."""
    out = {}
    for r in rows:
        every = measured(r, vendor)
        if every:
            out[row_key(r)] = min(every, key=every.get)
    return out


def score_picks(test_rows, picks: dict, model=None, vendor: bool = True) -> dict:
    """How good the picks (row_key -> kernel) are by the measured --every times: within 5% and
    3% of the best compiled kernel, geomean best / pick, and the pick's ratio to the vendor
    (geomean, min, summed time weighted by the model's counts, or every use's without a model)."""
    n = unmeasured = 0
    best_ratios, vs_vendor = [], []
    ours_sum = theirs_sum = 0.0
    for r in test_rows:
        every = measured(r, vendor)
        if not every or not r.get("vendor_us"):
            continue
        n += 1
        pick = picks.get(row_key(r))
        if pick not in every:
            unmeasured += 1
            continue
        best_ratios.append(min(every.values()) / every[pick])
        vs_vendor.append(r["vendor_us"] / every[pick])
        w = weight(r, model=model)
        ours_sum += w * every[pick]
        theirs_sum += w * r["vendor_us"]
    scored = len(best_ratios)
    pct = lambda k: 100.0 * k / scored if scored else float("nan")  # noqa: E731
    within5 = sum(v >= 1 / WITHIN[0] for v in best_ratios)
    within3 = sum(v >= 1 / WITHIN[1] for v in best_ratios)
    return {"n": n, "scored": scored, "unmeasured": unmeasured, "within5": within5, "within5_pct": pct(within5),
            "within3": within3, "within3_pct": pct(within3),
            "geomean_best_over_pick": zl.geomean(best_ratios), "geomean_vs_vendor": zl.geomean(vs_vendor),
            "min_vs_vendor": min(vs_vendor) if vs_vendor else float("nan"),
            "sum_vs_vendor": theirs_sum / ours_sum if ours_sum else float("nan")}


def crossval(rows, picker, models=None, vendor: bool = True) -> dict:
    """Leave-one-model-out: for each model, picker(model, train_rows, test_rows) returns
    {row_key: kernel} (the GPU side writes a table from train_rows and asks the library);
    scored against the measured times. {model: score, "total": score of every row once,
    with the pick of the first model (by name) that holds it out}. The conv zoo's loop
    (zoo_layers.crossval) with this module's rows, split and score."""
    return zl.crossval(rows, picker, models, vendor, key=row_key, split=crossval_split, score=score_picks,
                       models_of=row_models)


CROSSVAL_HEAD = (f"{'model':26s} {'rows':>5s} {'scored':>6s} {'within 5%':>10s} {'within 3%':>10s} "
                 f"{'best/pick':>9s} {'x vendor':>8s} {'min':>6s} {'sum x':>6s}")


def crossval_line(name: str, s: dict) -> str:
    return (f"{name[:26]:26s} {s['n']:5d} {s['scored']:6d} {s['within5']:4d} {zl._fmt(s['within5_pct'], '4.0f')}% "
            f"{s['within3']:4d} {zl._fmt(s['within3_pct'], '4.0f')}% {zl._fmt(s['geomean_best_over_pick'], '9.3f')} "
            f"{zl._fmt(s['geomean_vs_vendor'], '8.2f')} {zl._fmt(s['min_vs_vendor'], '6.2f')} "
            f"{zl._fmt(s['sum_vs_vendor'], '6.2f')}")
