"""Fuzzing the manifest and sweep loaders with hypothesis: random and hostile YAML documents
(random keys and values, wrong types, huge lists, anchors, aliases and merge keys, deep
nesting, unicode, tags such as !!python/object) go through parse -> expand. Every failure
must be a ManifestError whose message starts with `<file>:<line>:`; no other exception type,
no hang (each example runs under an alarm). Deterministic: derandomized, no example database;
1,650 examples, about 40 s on 2 busy cores."""
import json
import re
import signal
import time
from contextlib import contextmanager

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tiledispatch.codegen import ManifestError, expand, parse_manifest  # noqa: E402
from tiledispatch.tile_engine.sweep import parse_sweep  # noqa: E402

PATH = "fuzz.yaml"
TARGETS = ["cpu", "sm_90a", "gfx942", "gfx90a", "gfx950"]
CAP = 2_000  # a smaller cap than the default keeps each example fast; the cap path is fuzzed too
PER_EXAMPLE_S = 10
ERROR = re.compile(rf"^{re.escape(PATH)}:\d+: \S")

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=list(HealthCheck))

WORDS = [
    "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3_fnuz", "fp8_e5m2_fnuz", "fp64", "rcr", "rrr",
    "crr", "ccr", "standard", "stream_k", "split_k", "atomic", "deterministic", "fwd", "bwd_data",
    "bwd_weight", "NWGC", "NHWGC", "NDHWGC", "NHWGC,GKYXC,NHWGK", "cpu", "sm_90a", "gfx942", "gfx90a",
    "gfx950", "sm_99", "cooperative", "pingpong", "tma", "nosmem", "reject", "pad", "tile", "fast", "direct",
    "depthwise", "depthwise_mma", "toeplitz_mma", "tiled_mma", "mma", "im2col", "implicit", "grouped_mma",
    "cudnn", "cublaslt", "skinny", "any", "compv3", "mem", "intrawave", "interwave", "nopad", "null", "~",
    "true", "false", "yes", "no", "on", ".inf", "-.inf", ".nan", "0x1F", "0o17", "0b101", "1e9", "1_000",
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "=", "''", '""', "'<<'", "-0", "+12", "1.5",
]
NUMBERS = ["0", "1", "2", "3", "4", "6", "7", "8", "16", "17", "32", "48", "50", "64", "96", "128", "256",
           "512", "1024", "2048", "-1", "100000000000", "9" * 50]
KEYS = [
    "schema_version", "gemm", "conv", "name", "dtype", "tile", "targets", "layout", "variant", "reduction",
    "direction", "cpu", "cuda", "hip", "micro_tile", "algorithm", "cluster", "schedule", "epilogue",
    "misaligned", "promote", "channels_per_group", "split", "wave_shape", "warp_tile", "pipeline",
    "scheduler", "padding", "m", "n", "k", "min", "max", "step", "values", "<<", "=", "colour",
]
TAGS = ["!!python/object:os.system", "!!python/object/apply:os.system", "!!python/name:os.system",
        "!!python/tuple", "!!binary", "!!set", "!!omap", "!!pairs", "!!timestamp", "!!int", "!!float", "!!bool",
        "!!null", "!!str", "!!map", "!!seq", "!!merge", "!!value", "!custom", "!<tag:yaml.org,2002:int>"]


@contextmanager
def alarm(seconds):
    """A hang becomes a TimeoutError (not a ManifestError: the test fails)."""
    def fire(signum, frame):
        raise TimeoutError(f"an example ran over {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check(text, sweep=False):
    """Loads and expands `text`; any failure must be a ManifestError naming fuzz.yaml:LINE."""
    start = time.time()
    with alarm(PER_EXAMPLE_S):
        try:
            if sweep:
                manifest = parse_sweep(text, PATH, max_variants=CAP)
                expand(manifest, ["cpu"], reject=lambda what, why: None, max_variants=CAP)
                expand(manifest, ["sm_90a"], reject=lambda what, why: None, max_variants=CAP)
            else:
                expand(parse_manifest(text, PATH, max_variants=CAP), TARGETS, max_variants=CAP)
        except ManifestError as err:
            message = str(err)
            assert ERROR.match(message), f"no {PATH}:LINE: in {message[:300]!r}"
            assert len(message) < 2_000, message[:300]
    assert time.time() - start < PER_EXAMPLE_S


# ---- documents ----------------------------------------------------------------------

quoted = st.text(st.characters(exclude_categories=("Cs",)), max_size=8).map(json.dumps)
scalar = st.one_of(st.sampled_from(WORDS), st.sampled_from(NUMBERS), st.integers(-2 ** 70, 2 ** 70).map(str),
                   quoted, st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=6)
                   .map(lambda s: "'" + s.replace("'", "''") + "'"))
key = st.one_of(st.sampled_from(KEYS), scalar)


@st.composite
def flow(draw, depth=0, anchors=None):
    """A flow-style YAML value: scalars, lists and mappings, sometimes tagged, anchored or an
    alias of an earlier anchor (anchors: the names defined so far, shared by the document)."""
    anchors = anchors if anchors is not None else []
    kind = draw(st.integers(0, 9)) if depth < 4 else 0
    if anchors and draw(st.integers(0, 9)) == 0:
        return "*" + draw(st.sampled_from(anchors))
    if kind <= 4:
        text = draw(scalar)
    elif kind <= 7:
        items = draw(st.lists(flow(depth + 1, anchors), max_size=5))
        text = "[" + ", ".join(items) + "]"
    else:
        pairs = draw(st.lists(st.tuples(key, flow(depth + 1, anchors)), max_size=4))
        text = "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if draw(st.integers(0, 14)) == 0:
        text = draw(st.sampled_from(TAGS)) + " " + text
    if draw(st.integers(0, 9)) == 0:
        name = f"a{len(anchors)}"
        anchors.append(name)
        text = f"&{name} {text}"
    return text


TILE = st.sampled_from(["[48, 64, 128]", "[96, 128, 256]", "[[48, 64, 128], [96, 128, 256]]", "[50, 64, 128]",
                        "[128, 128, 64]", "[64, 64, 64]", "[16, 16, 128]", "[1, 1, 1]", "[0, 64, 64]", "[48, 64]"])
GROUP_VALUES = {
    "name": st.one_of(quoted, scalar), "dtype": st.sampled_from(["fp32", "[fp16, bf16]", "fp8_e4m3", "[fp32, fp64]"]),
    "layout": st.sampled_from(["rcr", "[rcr, rrr, crr, ccr]", "NHWGC", "[NWGC, NDHWGC]", "{a: row}"]),
    "variant": st.sampled_from(["standard", "stream_k", "[standard, stream_k]", "split_k"]),
    "reduction": st.sampled_from(["atomic", "[atomic, deterministic]"]),
    "direction": st.sampled_from(["fwd", "[fwd, bwd_data, bwd_weight]", "sideways"]),
    "tile": TILE, "targets": st.sampled_from(["cpu", "[cpu]", "[sm_90a]", "[cpu, sm_90a, gfx942, gfx90a, gfx950]",
                                              "[gfx942]", "[sm_99]"]),
    "cpu": st.sampled_from(["{micro_tile: [6, 16]}", "{micro_tile: [[6, 16], [4, 8]]}", "{micro_tile: [7, 16]}",
                            "{micro_tile: [17, 16]}", "{micro: 1}", "[6, 16]"]),
    "cuda": st.sampled_from(["{cluster: [2, 1]}", "{cluster: [[1, 1], [2, 1]], schedule: [cooperative, pingpong]}",
                             "{algorithm: direct, channels_per_group: [1, 2, any]}", "{algorithm: skinny}",
                             "{algorithm: implicit, split: 4}", "{promote: [tile, 4, fast]}", "{algorithm: nope}",
                             "{split: 100000000000000000000000}", "{channels_per_group: -1, algorithm: mma}"]),
    "hip": st.sampled_from(["{wave_shape: [2, 2, 1], warp_tile: [32, 32, 8]}", "{pipeline: [compv3, mem]}",
                            "{wave_shape: [[1, 4, 1], [4, 1, 1]], padding: nopad}", "{waves: 2}"]),
}


@st.composite
def group_lines(draw, anchors, groups):
    """One group as block-mapping lines: mostly the manifest's keys with plausible or random
    values, sometimes a merge key (`<<: *gN`) of an earlier group with overrides."""
    lines = []
    keys = draw(st.lists(st.sampled_from(sorted(GROUP_VALUES)), min_size=1, max_size=9, unique=True))
    if groups and draw(st.booleans()):
        lines.append(f"<<: {draw(st.sampled_from(['*' + g for g in groups] + ['[' + ', '.join('*' + g for g in groups) + ']']))}")
    for name in keys:
        value = draw(GROUP_VALUES[name]) if draw(st.integers(0, 4)) else draw(flow(0, anchors))
        lines.append(f"{name}: {value}")
    if draw(st.integers(0, 5)) == 0:
        lines.append(f"{draw(key)}: {draw(flow(0, anchors))}")
    if draw(st.integers(0, 9)) == 0:  # a key written twice
        lines.append(lines[-1])
    return lines


@st.composite
def manifest_text(draw):
    anchors, groups, out = [], [], []
    out.append(f"schema_version: {draw(st.sampled_from(['1', '1', '1', '2', '1.0', 'one', '[1]']))}")
    for op in draw(st.lists(st.sampled_from(["gemm", "conv"]), max_size=2, unique=True)):
        out.append(f"{op}:")
        for _ in range(draw(st.integers(0, 3))):
            lines = draw(group_lines(anchors, groups))
            anchor = ""
            if draw(st.booleans()):
                anchor = f"&g{len(groups)} "
                groups.append(f"g{len(groups)}")
            out.append(f"  - {anchor}{lines[0]}")
            out.extend(f"    {line}" for line in lines[1:])
    if draw(st.integers(0, 9)) == 0:
        out.append(f"{draw(key)}: {draw(flow(0, anchors))}")
    return "\n".join(out) + "\n"


RANGE = st.one_of(st.sampled_from(["48", "[48, 96]", "{values: [48, 96]}", "{min: 64, max: 128, step: 64}",
                                   "{min: 16, max: 1000000000000}", "{min: 1, max: 100000, step: 1}",
                                   "{min: 128, max: 64}", "{min: 1, max: 10, step: 0}", "{values: []}",
                                   "{min: 1}", "{values: [1, x]}", "true", "[]", "{a: 1}", "{values: {values: 3}}"]),
                  st.tuples(st.integers(-5, 10 ** 6), st.integers(-5, 10 ** 6), st.integers(-2, 10 ** 4)).map(
                      lambda t: f"{{min: {t[0]}, max: {t[1]}, step: {t[2]}}}"))


@st.composite
def sweep_text(draw):
    micro = draw(st.sampled_from(["", "    cpu: {micro_tile: {m: [4, 6], n: 16}}\n",
                                  "    cpu: {micro_tile: {m: {min: 1, max: 100000000}, n: [8, 16]}}\n",
                                  "    cpu: {micro_tile: [6, 16]}\n", "    cpu: {micro_tile: {m: 6}}\n"]))
    tile = f"{{m: {draw(RANGE)}, n: {draw(RANGE)}, k: {draw(RANGE)}}}"
    if draw(st.integers(0, 5)) == 0:
        tile = draw(flow())
    return (f"schema_version: 1\ngemm:\n  - dtype: {draw(GROUP_VALUES['dtype'])}\n    layout: rcr\n"
            f"    tile: {tile}\n    targets: {draw(GROUP_VALUES['targets'])}\n{micro}")


@st.composite
def hostile_text(draw):
    """Documents no manifest author writes: deep nesting, huge lists, alias bombs, raw
    characters, unicode, control characters, several documents."""
    kind = draw(st.integers(0, 7))
    if kind == 0:  # deep nesting, flow or block
        depth = draw(st.integers(1, 300))
        if draw(st.booleans()):
            return "schema_version: 1\ngemm:\n  - dtype: " + "[" * depth + "fp32" + "]" * depth + "\n"
        return "schema_version: 1\ngemm:\n  - dtype:\n" + "".join("    " + "  " * i + "-\n" for i in range(depth))
    if kind == 1:  # a huge list
        item = draw(st.sampled_from(["[48, 64, 128]", "fp32", "x", "[1, 2]", "{a: 1}"]))
        count = draw(st.integers(0, 10_000))
        which = draw(st.sampled_from(["tile", "dtype", "targets", "layout"]))
        base = {"tile": "[48, 64, 128]", "dtype": "fp32", "targets": "[cpu]", "layout": "rcr"}
        base[which] = "[" + ", ".join([item] * count) + "]"
        return "schema_version: 1\ngemm:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in base.items()) + "\n"
    if kind == 2:  # an alias bomb
        width, levels = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        lines = ["  - &l0 [fp32, fp16]"] + [f"  - &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]"
                                               for i in range(1, levels)]
        tail = draw(st.sampled_from(["dtype", "tile", "targets", "layout"]))
        return ("schema_version: 1\nconv:\n" + "\n".join(lines) + f"\n  - {{{tail}: *l{levels - 1}, dtype: fp32, "
                "direction: fwd, layout: NHWGC, tile: [64, 64, 64], targets: cpu}\n")
    if kind == 3:  # raw YAML punctuation and words
        alphabet = st.sampled_from(list("[]{}:-&*!<>|'\"\n #,?%@`=~") + ["  ", "\n  ", "\n    - ", "<<", "!!",
                                                                          "fp32", "tile", "gemm", "1", "&a", "*a"])
        return "".join(draw(st.lists(alphabet, max_size=60)))
    if kind == 4:  # any unicode, control characters and all
        return draw(st.text(max_size=80))
    if kind == 5:  # a valid manifest with a random slice cut out or doubled
        text = draw(manifest_text())
        i, j = sorted(draw(st.tuples(st.integers(0, len(text)), st.integers(0, len(text)))))
        return text[:i] + text[j:] if draw(st.booleans()) else text[:j] + text[i:]
    if kind == 6:  # tagged scalars and collections in every place
        tag = draw(st.sampled_from(TAGS))
        value = draw(st.sampled_from(["x", "0x", "[1, 2]", "{a: 1}", "'2001-13-45'", "!!binary", "1" * 5000, ""]))
        where = draw(st.sampled_from(["schema_version: {}\n", "schema_version: 1\ngemm: {}\n",
                                      "schema_version: 1\ngemm:\n  - dtype: {}\n", "? {}\n: 1\n"]))
        return where.format(f"{tag} {value}")
    return "---\n" + draw(manifest_text()) + draw(st.sampled_from(["", "---\n", "...\n", "--- x\n", "%YAML 1.1\n"]))


# ---- the fuzz tests -------------------------------------------------------------------

@settings(FUZZ, max_examples=600)
@given(manifest_text())
def test_fuzzed_manifests_fail_only_with_file_line_manifest_errors(text):
    check(text)


@settings(FUZZ, max_examples=400)
@given(hostile_text())
def test_hostile_yaml_fails_only_with_file_line_manifest_errors(text):
    check(text)
    check(text, sweep=True)


@settings(FUZZ, max_examples=500)
@given(sweep_text())
def test_fuzzed_sweeps_fail_only_with_file_line_manifest_errors(text):
    check(text, sweep=True)


def test_the_fuzzer_reaches_both_outcomes():
    """The strategies are not degenerate: some documents expand, some fail."""
    outcomes = set()

    @settings(FUZZ, max_examples=150)
    @given(manifest_text())
    def run(text):
        try:
            expand(parse_manifest(text, PATH, max_variants=CAP), TARGETS, max_variants=CAP)
            outcomes.add("expanded")
        except ManifestError:
            outcomes.add("error")

    run()
    assert outcomes == {"expanded", "error"}
