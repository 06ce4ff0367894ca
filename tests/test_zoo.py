"""bench/zoo.py's pure logic (bench/zoo_layers.py) and its committed layer list, without
torch or a GPU: the schema, well-formed layers, classes, dedup, the summary statistics, the
cross-validation split and scores, the problem specs, and the table command on fake rows."""
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import zoo_layers as zl  # noqa: E402

LAYERS = ROOT / "bench" / "zoo" / "conv_layers.json"


def selection():
    """tiledispatch.selection: the installed package, else the source tree's (it imports
    without a built library)."""
    try:
        from tiledispatch import selection as sel
    except ImportError:
        sys.path.insert(0, str(ROOT / "python"))
        from tiledispatch import selection as sel
    return sel


@pytest.fixture(scope="module")
def doc():
    return json.loads(LAYERS.read_text())


def rec(model="m", path="p", C_in=64, C_out=64, groups=1, inp=(56, 56), fil=(3, 3), stride=(1, 1), pad=(1, 1),
        dilation=(1, 1)):
    return zl.make_record(model, path, len(inp), C_in, C_out, groups, inp, fil, stride, pad, dilation)


# ------------------------------------------------------------------ the committed layer list

def test_layer_list_schema(doc):
    assert doc["schema_version"] == zl.SCHEMA_VERSION
    assert doc["input_size"] == [224, 224]
    for key in ("torch", "timm"):
        assert doc["versions"][key]
    assert isinstance(doc["skipped"], list)
    for s in doc["skipped"]:
        assert s["model"] and s["path"] and s["reason"]
    assert LAYERS.read_text() == zl.dumps(doc), "not written by zoo_layers.dumps (sorted keys, stable order)"


def test_every_layer_well_formed(doc):
    ids = [lay["id"] for lay in doc["layers"]]
    assert len(ids) == len(set(ids))
    assert len({zl.layer_key(lay) for lay in doc["layers"]}) == len(ids)
    for lay in doc["layers"]:
        assert zl.layer_problems(lay) == [], lay["id"]
        assert all(v >= 1 for v in zl.output_size(lay["input"], lay["filter"], lay["stride"], lay["pad"],
                                                  lay["dilation"]))
        assert (lay["G"] * lay["C"]) % lay["G"] == 0 and lay["C"] >= 1 and lay["K"] >= 1
        assert lay["tags"] == zl.tags(lay)
        assert lay["models"] == sorted(lay["models"])
    assert doc["layers"] == zl.sorted_layers(doc["layers"])


def test_every_default_model_contributes(doc):
    for model in zl.DEFAULT_MODELS:
        assert model in doc["models"], model
        n = sum(c for lay in doc["layers"] for m, c in lay["models"] if m == model)
        assert n > 0 and n == doc["models"][model]["convs"], model
        assert doc["models"][model]["unique"] == sum(1 for lay in doc["layers"] if model in zl.uses(lay))
    # the model zoo's point: grouped and depthwise layers are there, from several models
    classes = {lay["class"] for lay in doc["layers"]}
    assert {"depthwise", "grouped", "dense"} <= classes
    assert any(lay["tags"]["stem"] for lay in doc["layers"])


def test_known_layers_present(doc):
    """Layers every ImageNet reader knows: ResNet-50's stem and MobileNetV2's first depthwise."""
    by_id = {lay["id"]: lay for lay in doc["layers"]}
    stem = by_id["2d_g1_c3_k64_i224x224_f7x7_s2x2_p3x3_d1x1"]
    assert {"resnet50", "resnext50_32x4d"} <= set(zl.uses(stem)) and stem["tags"]["stem"]
    dw = by_id["2d_g32_c1_k1_i112x112_f3x3_s1x1_p1x1_d1x1"]
    assert dw["class"] == "depthwise" and "mobilenetv2_100" in zl.uses(dw)
    # ResNeXt-50's stage-1 grouped 3x3: G=32, 4 channels a group, used 3 times
    rx = by_id["2d_g32_c4_k4_i56x56_f3x3_s1x1_p1x1_d1x1"]
    assert rx["class"] == "grouped" and zl.uses(rx)["resnext50_32x4d"] == 3


# ------------------------------------------------------------------ classes, tags, dedup

def test_classes_of_hand_made_layers():
    dw = zl.layer_of(rec(C_in=144, C_out=144, groups=144, stride=(2, 2)))
    assert (dw["G"], dw["C"], dw["K"], dw["class"]) == (144, 1, 1, "depthwise")
    assert dw["tags"] == {"stride": "2", "filter": "3x3", "stem": False}
    mult = zl.layer_of(rec(C_in=32, C_out=64, groups=32))
    assert mult["class"] == "depthwise_mult" and mult["K"] == 2
    grouped = zl.layer_of(rec(C_in=2048, C_out=2048, groups=32))
    assert (grouped["C"], grouped["class"]) == (64, "grouped")
    dense = zl.layer_of(rec(C_in=512, C_out=2048, fil=(1, 1), pad=(0, 0)))
    assert dense["class"] == "dense" and dense["tags"]["filter"] == "1x1" and dense["tags"]["stride"] == "1"
    stem = zl.layer_of(rec(C_in=3, C_out=32, inp=(224, 224), stride=(2, 2)))
    assert stem["class"] == "dense" and stem["tags"]["stem"] and stem["tags"]["stride"] == "2"
    assert zl.layer_of(rec(C_in=1, C_out=8, groups=1))["class"] == "dense"  # one input channel, G = 1
    assert zl.layer_of(rec(fil=(1, 5), pad=(0, 2)))["tags"]["filter"] == "1x5"
    assert zl.layer_of(rec(stride=(2, 1)))["tags"]["stride"] == "2x1"


def test_dedup_merges_and_counts():
    a = rec("resnet50", "layer1.0.conv2")
    b = rec("resnet50", "layer1.1.conv2")
    c = rec("resnext", "x.conv")
    other = rec("resnext", "y.conv", stride=(2, 2))
    layers = zl.dedup([a, b, c, other])
    assert len(layers) == 2
    same = next(lay for lay in layers if lay["stride"] == [1, 1])
    assert same["models"] == [["resnet50", 2], ["resnext", 1]]
    assert same["example"] == "resnet50:layer1.0.conv2"
    assert zl.uses(same) == {"resnet50": 2, "resnext": 1}
    # the batch is not part of a layer; bias is recorded, not part of the identity
    with_bias = dict(c, bias=True)
    assert len(zl.dedup([a, with_bias])) == 1 and zl.dedup([a, with_bias])[0]["bias"] is True
    # the order is stable whatever the order of the records (the example is the first one seen)
    strip = lambda layers: [{k: v for k, v in lay.items() if k != "example"} for lay in layers]  # noqa: E731
    assert strip(zl.dedup([other, c, b, a])) == strip(zl.dedup([a, b, c, other]))


def test_record_problems():
    assert zl.record_problems(rec()) == []
    assert zl.record_problems(rec(C_in=30, C_out=64, groups=4))
    assert zl.record_problems(rec(inp=(2, 2), fil=(7, 7), pad=(0, 0)))  # output below 1
    assert zl.record_problems(rec(stride=(0, 1)))


def test_same_padding():
    # stride 1, odd filter: symmetric; stride 2 on an even size: one more at the end (TF)
    assert zl.symmetric_same_padding((56, 56), (3, 3), (1, 1), (1, 1)) == (1, 1)
    assert zl.symmetric_same_padding((112, 112), (3, 3), (2, 2), (1, 1)) is None
    assert zl.symmetric_same_padding((113, 113), (3, 3), (2, 2), (1, 1)) == (1, 1)
    assert zl.same_padding_total(224, 3, 2, 1) == 1
    assert zl.same_padding_total(7, 5, 1, 2) == 8


def test_counts_and_order(doc):
    c = zl.counts(doc["layers"])
    assert c["all"]["layers"] == len(doc["layers"])
    assert c["all"]["training"] == 3 * len(doc["layers"]) and c["all"]["inference"] == len(doc["layers"])
    assert sum(c[k]["layers"] for k in zl.CLASSES) == len(doc["layers"])
    shuffled = zl.order(doc["layers"])
    assert sorted(lay["id"] for lay in shuffled) == sorted(lay["id"] for lay in doc["layers"])
    assert shuffled == zl.order(list(reversed(doc["layers"])))


# ------------------------------------------------------------------ problems and the floor

def test_problem_spec_round_trips():
    sel = selection()
    lay = zl.layer_of(rec(C_in=128, C_out=256, groups=32, inp=(28, 28), stride=(2, 2)))
    for direction in zl.DIRECTIONS:
        spec = zl.problem_spec(lay, 32, direction, "bf16")
        problem = sel.problem_from(spec)
        assert (problem.N, problem.G, problem.C, problem.K) == (32, 32, 4, 8)
        assert problem.direction.key == direction and problem.dtype.key == "bf16"
        assert sel.problem_spec(problem) == spec
        assert problem.output_size == zl.output_size(lay["input"], lay["filter"], lay["stride"], lay["pad"],
                                                     lay["dilation"])
        assert problem.flops == zl.flops(lay, 32)


def test_memory_floor():
    lay = zl.layer_of(rec(C_in=64, C_out=64, groups=64, inp=(10, 10)))
    # input 2*10*10*64, weight 64*9*1, output 2*10*10*64 elements, 2 bytes each
    nbytes = (2 * 100 * 64 + 64 * 9 + 2 * 100 * 64) * 2
    assert zl.problem_bytes(lay, 2, "bf16") == nbytes
    assert zl.memory_floor_us(lay, 2, "fp16") == pytest.approx(nbytes / 4.27e12 * 1e6)
    assert zl.problem_bytes(lay, 2, "fp32") == 2 * nbytes


# ------------------------------------------------------------------ statistics

def row(layer, ours, theirs, direction="fwd", cls="grouped", models=(("a", 1),), alone=None, batch=32,
        dtype="bf16", every=None, stride="1", filt="3x3"):
    r = {"layer": layer, "models": [list(m) for m in models], "class": cls, "direction": direction, "batch": batch,
         "dtype": dtype, "tags": {"stride": stride, "filter": filt, "stem": False},
         "problem": {"op": "conv", "N": batch, "G": 2, "C": 4, "K": 4, "input": [8 + int(layer[1:]), 8], "filter": [3, 3],
                     "stride": [1, 1], "pad": [1, 1], "dilation": [1, 1], "direction": direction, "dtype": dtype},
         "us": ours, "cudnn_us": theirs, "ratio": theirs / ours, "kernel": "k_ours", "rel_error": 1e-3,
         "alone_us": alone if alone is not None else ours}
    r["alone_ratio"] = theirs / r["alone_us"]
    r["alone_kernel"] = "k_ours"
    if every is not None:
        r["every_us"] = every
    return r


def test_summary_statistics_exact():
    # ratios 2, 1, 0.8, 0.5, 0.4 (cuDNN / ours)
    rows = [row("l1", 10, 20), row("l2", 10, 10), row("l3", 10, 8), row("l4", 10, 5), row("l5", 20, 8)]
    failed = {"layer": "l6", "models": [["a", 1]], "class": "grouped", "direction": "fwd", "batch": 32,
              "dtype": "bf16", "tags": {"stride": "1", "filter": "3x3", "stem": False}, "error": "boom"}
    s = zl.summarize(rows + [failed])
    assert s["n"] == 5 and s["failed"] == 1
    assert s["geomean"] == pytest.approx((2 * 1 * 0.8 * 0.5 * 0.4) ** 0.2)
    assert s["min"] == pytest.approx(0.4)
    # p10 of [0.4, 0.5, 0.8, 1, 2]: position 0.4 between 0.4 and 0.5
    assert s["p10"] == pytest.approx(0.44)
    assert (s["below_1"], s["below_0.9"], s["below_0.5"]) == (3, 3, 1)
    assert s["sum_ratio"] == pytest.approx((20 + 10 + 8 + 5 + 8) / (10 + 10 + 10 + 10 + 20))
    # weights act on the summed time only
    w = zl.summarize(rows, weights=[3, 1, 1, 1, 1])
    assert w["sum_ratio"] == pytest.approx((60 + 10 + 8 + 5 + 8) / (30 + 10 + 10 + 10 + 20))
    assert w["geomean"] == pytest.approx(s["geomean"])
    # ours alone: its own columns, missing ones count as failed
    rows[0]["alone_us"], rows[0]["alone_ratio"] = None, None
    a = zl.summarize(rows, "alone_us", "alone_ratio")
    assert a["n"] == 4 and a["failed"] == 1
    assert zl.percentile([3.0], 10) == 3.0 and math.isnan(zl.percentile([], 10))
    assert zl.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 10) == pytest.approx(2.0)


def test_summary_tables_render():
    rows = [row("l1", 10, 20, models=(("a", 2), ("b", 1))), row("l2", 10, 5, cls="dense", models=(("b", 1),)),
            row("l1", 10, 20, direction="bwd_data", models=(("a", 2), ("b", 1))),
            row("l1", 5, 10, batch=1, models=(("a", 2), ("b", 1)))]
    text = zl.summary_tables(rows)
    assert "bf16 training b32" in text and "bf16 inference b1" in text
    assert text.index("training b32") < text.index("inference b1")
    assert "class grouped" in text and "direction bwd_data" in text and "  b g+dw" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("b ") and "|" in ln)
    # model b at b32: l1 fwd + bwd_data (20 + 20 over 10 + 10) and l2 (5 over 10): sum x = 45 / 30
    assert "1.50" in line.split("|")[1]


# ------------------------------------------------------------------ tables and crossval

def fake_rows():
    """Three layers: l1 used by a only, l2 by a and b (shared), l3 by b only; kernels k1, k2 and a vendor."""
    return [
        row("l1", 10, 12, models=(("a", 1),), every={"k1": 10, "k2": 20, "conv_x_cudnn": 11}),
        row("l2", 10, 12, models=(("a", 1), ("b", 2)), every={"k1": 30, "k2": 10}),
        row("l3", 10, 12, models=(("b", 1),), every={"k1": 10.4, "k2": 10}),
    ]


def test_crossval_split_excludes_shared_layers():
    rows = fake_rows()
    train, test = zl.crossval_split(rows, "a")
    assert [r["layer"] for r in train] == ["l3"]  # l2 is a's too, though b uses it
    assert [r["layer"] for r in test] == ["l1", "l2"]
    train, test = zl.crossval_split(rows, "b")
    assert [r["layer"] for r in train] == ["l1"]
    assert [r["layer"] for r in test] == ["l2", "l3"]


def test_table_results():
    rows = fake_rows()
    res = zl.table_results(rows)
    assert len(res) == 7 and all(r["status"] == "OK" for r in res)
    assert {r["kernel"] for r in res if r["problem"] == rows[0]["problem"] and r["latency_ms"] == 0.01} == {"k1"}
    assert not any(zl.is_vendor(r["kernel"]) for r in zl.table_results(rows, vendor=False))
    assert zl.is_vendor("conv_fwd_nhwgc_bf16_cudnn_sm90a") and not zl.is_vendor("conv_fwd_nhwgc_bf16_direct")


def test_crossval_scores():
    rows = fake_rows()
    seen = {}

    def picker(model, train, test):
        seen[model] = sorted(r["layer"] for r in train)
        return {zl.row_key(r): "k1" for r in test}  # always k1

    out = zl.crossval(rows, picker)
    assert seen == {"a": ["l3"], "b": ["l1"]}
    a = out["a"]  # l1: k1 best (1.0); l2: k1 30 vs best 10 (1/3)
    assert (a["n"], a["scored"], a["within5"]) == (2, 2, 1)
    assert a["within5_pct"] == pytest.approx(50.0)
    assert a["geomean_best_over_pick"] == pytest.approx((1 * (1 / 3)) ** 0.5)
    assert a["geomean_vs_cudnn"] == pytest.approx((12 / 10 * 12 / 30) ** 0.5)
    assert a["min_vs_cudnn"] == pytest.approx(0.4)
    b = out["b"]  # l2 (weight 2): 30 us; l3: k1 10.4, within 5% of the best (10)
    assert (b["within5"], b["scored"]) == (1, 2)
    assert b["geomean_best_over_pick"] == pytest.approx((1 / 3 * 10 / 10.4) ** 0.5)
    assert b["sum_vs_cudnn"] == pytest.approx((2 * 12 + 12) / (2 * 30 + 10.4))
    total = out["total"]  # each layer once
    assert (total["n"], total["within5"]) == (3, 2)
    # a pick without a measured time is counted, not scored
    out = zl.crossval(rows, lambda m, tr, te: {zl.row_key(r): "k9" for r in te})
    assert out["a"]["unmeasured"] == 2 and out["a"]["scored"] == 0 and math.isnan(out["a"]["within5_pct"])
    assert "a" in zl.crossval_line("a", out["a"])


def test_cli_help_and_table(tmp_path):
    """zoo.py needs no torch for --help and table; table writes the tile engine's format."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"target": "sm_90a", "rows": fake_rows()}))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "zoo.py"), "conv", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--every" in out.stdout and "--budget-s" in out.stdout
    table = tmp_path / "t.json"
    run = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, str(ROOT / "bench" / "zoo.py"), "table", str(results), "--out", str(table), *extra],
        capture_output=True, text=True, timeout=60)
    out = run()
    assert out.returncode == 0, out.stderr
    t = json.loads(table.read_text())
    assert t["schema_version"] == 1 and t["target"] == "sm_90a"
    assert len(t["entries"]) == 3
    by_input = {e["problem"]["input"][0]: e for e in t["entries"]}
    assert by_input[9]["kernels"] == ["k1", "conv_x_cudnn", "k2"] and by_input[9]["latency_ms"] == [0.01, 0.011, 0.02]
    assert by_input[10]["kernels"] == ["k2", "k1"]
    out = run("--exclude-model", "a", "--no-vendor")  # l3 alone
    assert out.returncode == 0, out.stderr
    t = json.loads(table.read_text())
    assert [e["kernels"] for e in t["entries"]] == [["k2", "k1"]]
