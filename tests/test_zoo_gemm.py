"""bench/zoo.py --op gemm's pure logic (bench/zoo_llm.py), its model configurations and its
committed shape list, without torch or a GPU: the layers' N and K for every model, the MoE
rule, the dedup, the summaries by token range and model, the crossval split and scores,
and the file in the repository being what `enumerate` writes. One smoke run of the
measurement loop on the cpu library where the package is installed."""
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import zoo_llm as zg  # noqa: E402

CONFIGS = ROOT / "bench" / "zoo" / "llm_configs.json"
SHAPES = ROOT / "bench" / "zoo" / "gemm_layers.json"
ZOO = ROOT / "bench" / "zoo.py"

# (N, K) of qkv, o, gate_up, down, lm_head, worked out by hand from each config
EXPECTED_NK = {
    "llama-3-8b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096)],
    "qwen2.5-7b": [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944), (152064, 3584)],
    "phi-3-mini-4k": [(9216, 3072), (3072, 3072), (16384, 3072), (3072, 8192), (32064, 3072)],
    "mixtral-8x7b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (32000, 4096)],
    "gemma-2-9b": [(8192, 3584), (3584, 4096), (28672, 3584), (3584, 14336), (256000, 3584)],
    "llama-3-70b": [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672), (128256, 8192)],
    "qwen2.5-72b": [(10240, 8192), (8192, 8192), (59136, 8192), (8192, 29568), (152064, 8192)],
    "qwen3-30b-a3b": [(5120, 2048), (2048, 4096), (1536, 2048), (2048, 768), (151936, 2048)],
}
BLOCKS = {"llama-3-8b": 32, "qwen2.5-7b": 28, "phi-3-mini-4k": 32, "mixtral-8x7b": 32, "gemma-2-9b": 42,
          "llama-3-70b": 80, "qwen2.5-72b": 80, "qwen3-30b-a3b": 48}


@pytest.fixture(scope="module")
def configs():
    return json.loads(CONFIGS.read_text())


@pytest.fixture(scope="module")
def doc():
    return json.loads(SHAPES.read_text())


def records(configs, name):
    return zg.model_gemms(name, configs["models"][name])


def find(recs, layer, tokens):
    (r,) = [r for r in recs if r["layer"] == layer and r["tokens"] == tokens]
    return r


# ------------------------------------------------------------------ configurations

def test_configurations_well_formed(configs):
    assert set(configs["models"]) == set(EXPECTED_NK)
    for name, cfg in configs["models"].items():
        assert zg.config_problems(cfg) == [], name
        assert "/" in cfg["hf_repo"] and cfg["confirmed"], name
        assert cfg["num_hidden_layers"] == BLOCKS[name]
        if not cfg["head_dim_from_config"]:
            assert cfg["head_dim"] == cfg["hidden_size"] // cfg["num_attention_heads"], name
    assert zg.is_moe(configs["models"]["mixtral-8x7b"]) and zg.is_moe(configs["models"]["qwen3-30b-a3b"])
    assert sum(zg.is_moe(c) for c in configs["models"].values()) == 2


def test_config_problems():
    good = {"hf_repo": "x/y", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 100}
    assert zg.config_problems(good) == []
    assert zg.config_problems({k: v for k, v in good.items() if k != "head_dim"}) == ["no head_dim"]
    assert zg.config_problems(dict(good, num_key_value_heads=3))  # 4 heads in groups of 3
    assert zg.config_problems(dict(good, vocab_size=0))
    assert zg.config_problems(dict(good, n_experts=8))  # top_k, moe_intermediate_size missing
    assert zg.config_problems(dict(good, n_experts=2, top_k=4, moe_intermediate_size=32))
    with pytest.raises(ValueError, match="head_dim"):
        zg.model_gemms("m", {k: v for k, v in good.items() if k != "head_dim"})


# ------------------------------------------------------------------ the GEMMs of each model

@pytest.mark.parametrize("name", sorted(EXPECTED_NK))
def test_layers_n_k(configs, name):
    recs = records(configs, name)
    assert len(recs) == len(zg.TOKENS) * len(zg.LAYERS) == 55
    for layer, (N, K) in zip(zg.LAYERS, EXPECTED_NK[name]):
        for t in zg.TOKENS:
            r = find(recs, layer, t)
            assert (r["N"], r["K"]) == (N, K), (name, layer)


def test_named_layers_exact(configs):
    r = find(records(configs, "llama-3-8b"), "qkv", 32)
    assert (r["M"], r["N"], r["K"], r["count"]) == (32, 6144, 4096, 32)
    r = find(records(configs, "llama-3-8b"), "lm_head", 8192)
    assert (r["M"], r["N"], r["K"], r["count"]) == (8192, 128256, 4096, 1)
    r = find(records(configs, "gemma-2-9b"), "o", 1)  # 16 heads x 256 = 4096 in, 3584 out
    assert (r["M"], r["N"], r["K"], r["count"]) == (1, 3584, 4096, 42)
    r = find(records(configs, "phi-3-mini-4k"), "down", 512)
    assert (r["M"], r["N"], r["K"]) == (512, 3072, 8192)


def test_moe_rule(configs):
    assert [zg.expert_tokens(t, 2, 8) for t in zg.TOKENS] == [1, 2, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    assert [zg.expert_tokens(t, 8, 128) for t in zg.TOKENS] == [1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert zg.expert_tokens(3, 2, 8) == 1 and zg.expert_tokens(5, 2, 8) == 2  # 10 / 8 rounded up
    assert [zg.active_experts(t, 2, 8) for t in (1, 2, 3, 4, 8)] == [2, 4, 6, 8, 8]
    mix = records(configs, "mixtral-8x7b")
    r = find(mix, "gate_up", 32)
    assert (r["M"], r["N"], r["K"], r["count"]) == (8, 28672, 4096, 32 * 8)
    r = find(mix, "down", 1)
    assert (r["M"], r["N"], r["K"], r["count"]) == (1, 4096, 14336, 32 * 2)
    r = find(mix, "qkv", 32)  # attention is dense: M = tokens
    assert (r["M"], r["count"]) == (32, 32)
    q3 = records(configs, "qwen3-30b-a3b")
    r = find(q3, "gate_up", 8192)
    assert (r["M"], r["N"], r["K"], r["count"]) == (512, 1536, 2048, 48 * 128)
    r = find(q3, "down", 8)
    assert (r["M"], r["N"], r["K"], r["count"]) == (1, 2048, 768, 48 * 64)
    r = find(q3, "lm_head", 8)
    assert (r["M"], r["count"]) == (8, 1)


# ------------------------------------------------------------------ dedup and the committed file

def test_shape_counts_and_dedup(doc):
    assert len(doc["shapes"]) == 376
    assert sum(m["gemms"] for m in doc["models"].values()) == 440
    assert {m: v["unique"] for m, v in doc["models"].items()} == {m: 55 for m in EXPECTED_NK} | {"qwen3-30b-a3b": 53}
    keys = [(s["M"], s["N"], s["K"]) for s in doc["shapes"]]
    assert keys == sorted(set(keys))
    assert sum(len(s["uses"]) for s in doc["shapes"]) == 440
    for s in doc["shapes"]:
        assert zg.shape_problems(s) == [], s["id"]
    by_id = {s["id"]: s for s in doc["shapes"]}
    # Llama-3-8B and Mixtral share their attention: one shape, both uses
    assert by_id["m32_n6144_k4096"]["uses"] == [["llama-3-8b", "qkv", 32, 32], ["mixtral-8x7b", "qkv", 32, 32]]
    # Mixtral's experts at 32 tokens are 8-row GEMMs, Llama-3-8B's MLP at 8 tokens
    assert by_id["m8_n28672_k4096"]["uses"] == [["llama-3-8b", "gate_up", 8, 32], ["mixtral-8x7b", "gate_up", 32, 256]]
    # Qwen3's experts get one row at 1 and at 8 tokens: one shape, two uses
    assert by_id["m1_n1536_k2048"]["uses"] == [["qwen3-30b-a3b", "gate_up", 1, 384], ["qwen3-30b-a3b", "gate_up", 8, 3072]]
    assert zg.uses(by_id["m1_n1536_k2048"]) == {"qwen3-30b-a3b": 3456}
    # Llama-3-70B and Qwen2.5-72B share qkv and o
    assert {m for m, _, _, _ in by_id["m4096_n10240_k8192"]["uses"]} == {"llama-3-70b", "qwen2.5-72b"}


def test_dedup_merges():
    recs = [{"model": "b", "layer": "o", "tokens": 8, "M": 8, "N": 16, "K": 32, "count": 2},
            {"model": "a", "layer": "qkv", "tokens": 8, "M": 8, "N": 16, "K": 32, "count": 3},
            {"model": "a", "layer": "o", "tokens": 1, "M": 1, "N": 16, "K": 32, "count": 3}]
    shapes = zg.dedup(recs)
    assert [s["id"] for s in shapes] == ["m1_n16_k32", "m8_n16_k32"]
    assert shapes[1]["uses"] == [["a", "qkv", 8, 3], ["b", "o", 8, 2]]
    assert zg.dedup(list(reversed(recs))) == shapes


def test_committed_file_is_what_enumerate_writes(configs, tmp_path):
    assert SHAPES.read_text() == zg.dumps(zg.document(configs)), "regenerate: python3 bench/zoo.py --op gemm enumerate"
    out = tmp_path / "shapes.json"
    run = subprocess.run([sys.executable, str(ZOO), "--op", "gemm", "enumerate", "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert out.read_text() == SHAPES.read_text()
    assert "376 unique" in run.stdout


# ------------------------------------------------------------------ bytes, bandwidth, limits

def test_bytes_and_bandwidth():
    nbytes = (1 * 4096 + 4096 * 4096) * 2 + 1 * 4096 * 2
    assert zg.problem_bytes(1, 4096, 4096, "bf16") == nbytes == 33570816
    assert zg.problem_bytes(1, 4096, 4096, "fp8_e4m3") == (4096 + 4096 * 4096) + 4096 * 2
    us = nbytes / 4.27e12 * 1e6
    assert zg.bandwidth_fraction(1, 4096, 4096, "bf16", us) == pytest.approx(1.0)
    assert zg.bandwidth_fraction(1, 4096, 4096, "fp16", 2 * us) == pytest.approx(0.5)
    assert zg.vendor_takes(1, 4096, 4096, "fp8_e4m3") and zg.vendor_takes(3, 8, 4, "bf16")
    assert not zg.vendor_takes(16, 8, 4096, "fp8_e4m3")
    assert zg.problem_spec(8, 16, 32, "fp8_e4m3") == {"op": "gemm", "M": 8, "N": 16, "K": 32, "dtype": "fp8_e4m3",
                                                       "layout": "rcr"}
    assert [zg.token_range(t) for t in zg.TOKENS] == ["1", "8-64", "8-64", "8-64", "128-256", "128-256",
                                                      "512-2048", "512-2048", "512-2048", "4096-8192", "4096-8192"]


def test_every_committed_shape_fits_the_fp8_vendor(doc):
    assert all(zg.vendor_takes(s["M"], s["N"], s["K"], "fp8_e4m3") for s in doc["shapes"])


# ------------------------------------------------------------------ summaries

def row(shape, ours, vendor, uses, dtype="bf16", every=None, M=64, N=128, K=256, alone=None):
    r = {"shape": shape, "M": M, "N": N, "K": K, "uses": [list(u) for u in uses], "dtype": dtype,
         "problem": zg.problem_spec(M, N, K, dtype), "us": ours, "vendor_us": vendor, "ratio": vendor / ours,
         "kernel": "k1", "alone_kernel": "k1", "alone_us": alone or ours, "rel_error": 1e-3}
    r["alone_ratio"] = vendor / r["alone_us"]
    if every is not None:
        r["every_us"] = every
    return r


def test_groups_and_weights():
    r1 = row("s1", 10, 20, [("a", "qkv", 1, 10), ("b", "qkv", 8, 5)], M=1)
    r2 = row("s2", 10, 5, [("a", "down", 128, 4)], M=128)
    got = {label: (sub, w) for label, sub, w in zg.groups([r1, r2])}
    assert list(got) == ["all", "tokens 1", "tokens 8-64", "tokens 128-256", "layer qkv", "layer down",
                         "model a", "model b"]
    assert got["all"][1] == [15, 4] and got["tokens 8-64"][1] == [5] and got["model a"][1] == [10, 4]
    s = zg.summarize(*got["all"][:1], weights=got["all"][1])
    assert s["sum_ratio"] == pytest.approx((15 * 20 + 4 * 5) / (15 * 10 + 4 * 10))
    assert s["geomean"] == pytest.approx(1.0) and s["min"] == pytest.approx(0.5) and s["below_1"] == 1
    a = zg.summarize(got["model a"][0], weights=got["model a"][1])
    assert a["sum_ratio"] == pytest.approx((10 * 20 + 4 * 5) / (10 * 10 + 4 * 10))
    assert zg.summarize(got["tokens 128-256"][0])["geomean"] == pytest.approx(0.5)
    text = zg.summary_tables([r1, r2, row("s1", 10, 10, r1["uses"], dtype="fp8_e4m3", M=1)])
    assert text.index("== bf16") < text.index("== fp8_e4m3")
    line = next(ln for ln in text.splitlines() if ln.startswith("tokens 1 "))
    assert "2.00" in line.split("|")[1]
    assert "memory-bound (M <= 64), 1 shapes" in text


def test_bandwidth_summary():
    nbytes = zg.problem_bytes(1, 4096, 4096, "bf16")
    full = nbytes / 4.27e12 * 1e6
    rows = [row("a", full, 2 * full, [("m", "o", 1, 1)], M=1, N=4096, K=4096),
            row("b", 2 * full, 2 * full, [("m", "o", 1, 1)], M=1, N=4096, K=4096),
            row("c", 1.0, 1.0, [("m", "o", 128, 1)], M=128)]  # not memory-bound
    bw = zg.bandwidth_summary(rows)
    assert bw["n"] == 2
    assert bw["ours"]["geomean"] == pytest.approx(math.sqrt(0.5)) and bw["ours"]["min"] == pytest.approx(0.5)
    assert bw["vendor"]["max"] == pytest.approx(0.5)


# ------------------------------------------------------------------ crossval

def fake_rows():
    """s1 used by a only, s2 by a and b (shared), s3 by b only; kernels k1, k2 and a vendor."""
    return [
        row("s1", 10, 12, [("a", "qkv", 8, 1)], every={"k1": 10, "k2": 20, "gemm_x_cublaslt": 11}, M=8),
        row("s2", 10, 12, [("a", "o", 8, 1), ("b", "o", 8, 2)], every={"k1": 30, "k2": 10}, M=9),
        row("s3", 10, 12, [("b", "down", 8, 1)], every={"k1": 10.4, "k2": 10}, M=10),
    ]


def test_crossval_split_excludes_shared_shapes():
    rows = fake_rows()
    train, test = zg.crossval_split(rows, "a")
    assert [r["shape"] for r in train] == ["s3"] and [r["shape"] for r in test] == ["s1", "s2"]
    train, test = zg.crossval_split(rows, "b")
    assert [r["shape"] for r in train] == ["s1"] and [r["shape"] for r in test] == ["s2", "s3"]


def test_crossval_scores_exact():
    rows = fake_rows()
    seen = {}

    def picker(model, train, test):
        seen[model] = [r["shape"] for r in train]
        return {zg.row_key(r): "k1" for r in test}

    out = zg.crossval(rows, picker)
    assert seen == {"a": ["s3"], "b": ["s1"]}
    a = out["a"]  # s1: k1 is the best; s2: k1 30 against 10
    assert (a["n"], a["scored"], a["within5"], a["within3"]) == (2, 2, 1, 1)
    assert a["geomean_best_over_pick"] == pytest.approx(math.sqrt(1 / 3))
    assert a["geomean_vs_vendor"] == pytest.approx(math.sqrt(12 / 10 * 12 / 30)) and a["min_vs_vendor"] == pytest.approx(0.4)
    b = out["b"]  # s2 (b's count 2): 30 us; s3: 10.4 against 10, within 5% but not 3%
    assert (b["within5"], b["within3"], b["scored"]) == (1, 0, 2)
    assert b["within5_pct"] == pytest.approx(50.0) and b["within3_pct"] == pytest.approx(0.0)
    assert b["sum_vs_vendor"] == pytest.approx((2 * 12 + 12) / (2 * 30 + 10.4))
    total = out["total"]  # every shape once
    assert (total["n"], total["within5"], total["within3"]) == (3, 2, 1)
    # the best compiled kernel: within 3% everywhere by definition
    best = zg.best_picks(rows)
    assert best == {("s1", "bf16"): "k1", ("s2", "bf16"): "k2", ("s3", "bf16"): "k2"}
    s = zg.score_picks(rows, best)
    assert (s["within3"], s["scored"]) == (3, 3) and s["geomean_best_over_pick"] == pytest.approx(1.0)
    # ours alone: a vendor pick is not measured, the best is among our own kernels
    picks = {("s1", "bf16"): "gemm_x_cublaslt"}
    assert zg.score_picks(rows[:1], picks, vendor=False)["unmeasured"] == 1
    s = zg.score_picks(rows[:1], picks)  # measured: 11 against 10, not within 5%
    assert (s["scored"], s["within5"]) == (1, 0) and s["geomean_best_over_pick"] == pytest.approx(10 / 11)
    assert "total" in zg.crossval_line("total", total)


def test_rows_from_table_rebuild_the_zoo_rows():
    """A tuning table's entries of the zoo's shapes become --every rows (ms -> us, the
    layers' models, the vendor kernel's time); other shapes, layouts and untimed kernels are
    left out."""
    layers = {"shapes": [{"id": "m8_n64_k32", "M": 8, "N": 64, "K": 32, "uses": [["a", "o", 8, 1]]}]}
    entry = lambda M, layout, kernels, ms: {"problem": {"M": M, "N": 64, "K": 32, "dtype": "bf16",  # noqa: E731
                                                       "layout": layout, "op": "gemm"},
                                            "kernels": kernels, "latency_ms": ms}
    table = {"entries": [entry(8, "rcr", ["k1", "gemm_x_cublaslt", "k2"], [0.010, 0.012, None]),
                         entry(8, "rrr", ["k1"], [0.5]), entry(16, "rcr", ["k1"], [0.5])]}
    rows = zg.rows_from_table(table, layers)
    assert len(rows) == 1
    r = rows[0]
    assert r["every_us"] == pytest.approx({"k1": 10.0, "gemm_x_cublaslt": 12.0})
    assert (r["shape"], r["dtype"], r["vendor_us"]) == ("m8_n64_k32", "bf16", pytest.approx(12.0))
    assert r["problem"] == zg.problem_spec(8, 64, 32, "bf16") and zg.row_models(r) == {"a"}
    assert "kernel" not in r  # no run's pick
    # the shipped table holds every zoo shape in bf16 and fp8 e4m3, each with its models
    shipped = json.loads((ROOT / "tuning" / "tuning_sm_90a.json").read_text())
    doc = json.loads(SHAPES.read_text())
    rows = zg.rows_from_table(shipped, doc)
    assert sorted({r["dtype"] for r in rows}) == ["bf16", "fp8_e4m3"]
    assert {r["shape"] for r in rows if r["dtype"] == "bf16"} == {s["id"] for s in doc["shapes"]}
    assert all(zg.row_models(r) and min(r["every_us"].values()) > 0 for r in rows)


# ------------------------------------------------------------------ the command line

def test_cli_help_and_table(tmp_path):
    out = subprocess.run([sys.executable, str(ZOO), "--op", "gemm", "run", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--every" in out.stdout and "--budget-s" in out.stdout and "--device" in out.stdout
    out = subprocess.run([sys.executable, str(ZOO), "conv", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--batch" in out.stdout  # conv's commands stay the default
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"target": "sm_90a", "rows": fake_rows()}))
    table = tmp_path / "t.json"
    run = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, str(ZOO), "--op", "gemm", "table", str(results), "--out", str(table), *extra],
        capture_output=True, text=True, timeout=60)
    out = run()
    assert out.returncode == 0, out.stderr
    t = json.loads(table.read_text())
    assert t["target"] == "sm_90a" and len(t["entries"]) == 3
    by_m = {e["problem"]["M"]: e for e in t["entries"]}
    assert by_m[8]["kernels"] == ["k1", "gemm_x_cublaslt", "k2"] and by_m[9]["kernels"] == ["k2", "k1"]
    out = run("--exclude-model", "a", "--no-vendor")  # s3 alone
    assert out.returncode == 0, out.stderr
    assert [e["problem"]["M"] for e in json.loads(table.read_text())["entries"]] == [10]


def cpu_library():
    """The installed package's cpu GEMM library with fp32 rcr kernels, else None."""
    try:
        import tiledispatch as td
        d = td.Dispatcher("gemm", "cpu")
    except Exception:  # noqa: BLE001 - not installed, or no cpu library
        return None
    return d if any(k.dtype.key == "fp32" and k.layout.key == "rcr" for k in d.kernels) else None


def test_cli_crossval_wants_runs_or_a_table(tmp_path):
    run = lambda *args: subprocess.run([sys.executable, str(ZOO), "--op", "gemm", "crossval", *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=60)
    out = run()
    assert out.returncode != 0 and "--from-table" in out.stderr
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"target": "sm_90a", "rows": fake_rows()}))
    out = run(str(results), "--from-table", str(ROOT / "tuning" / "tuning_sm_90a.json"))
    assert out.returncode != 0 and "not both" in out.stderr
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schema_version": 1, "target": "sm_90a", "entries": []}))
    out = run("--from-table", str(empty))
    assert out.returncode != 0 and "no entry of the zoo's shapes" in out.stderr


def test_cpu_smoke_run(tmp_path):
    """The measurement loop on the cpu library against numpy, two tiny models (one MoE)."""
    if cpu_library() is None:
        pytest.skip("no installed tiledispatch with a cpu fp32 rcr GEMM library")
    tiny = {"models": {
        "dense": {"hf_repo": "t/dense", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 160},
        "moe": {"hf_repo": "t/moe", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
                "num_key_value_heads": 4, "head_dim": 16, "num_hidden_layers": 3, "vocab_size": 128,
                "n_experts": 4, "top_k": 2, "moe_intermediate_size": 32}}}
    configs, shapes, results = tmp_path / "c.json", tmp_path / "s.json", tmp_path / "r.json"
    configs.write_text(json.dumps(tiny))
    run = lambda *a: subprocess.run([sys.executable, str(ZOO), "--op", "gemm", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = run("enumerate", "--configs", str(configs), "--tokens", "1,8,32", "--out", str(shapes))
    assert out.returncode == 0, out.stderr
    n = len(json.loads(shapes.read_text())["shapes"])
    out = run("run", "--device", "cpu", "--layers", str(shapes), "--reps", "3", "--every", "--json", str(results),
              "--crossval")
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads(results.read_text())["rows"]
    assert len(rows) == n and not [r for r in rows if "error" in r]
    for r in rows:
        assert r["dtype"] == "fp32" and r["us"] > 0 and r["vendor_us"] > 0 and r["kernel"]
        assert r["rel_error"] < 1e-4 and r["every_us"]
    assert "== fp32" in out.stdout and "tokens 8-64" in out.stdout and "model moe" in out.stdout
    assert "== crossval fp32" in out.stdout and "total, cost model alone" in out.stdout
