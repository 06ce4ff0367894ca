"""Hostile manifests and sweeps: expansion caps (checked before any product is built),
bounded warnings, bounded YAML nesting, merge keys, and which line a bad tile names."""
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tiledispatch.codegen import ManifestError, expand, load_manifest, parse_manifest
from tiledispatch.codegen.manifest import DEFAULT_MAX_VARIANTS
from tiledispatch.codegen.yamlsrc import MAX_DEPTH, load_yaml
from tiledispatch.tile_engine.sweep import expand_sweep

ROOT = Path(__file__).resolve().parents[1]
ALL_TARGETS = ["cpu", "sm_90a", "gfx942", "gfx90a", "gfx950"]

GROUP = """\
schema_version: 1
gemm:
  - dtype: [fp32]
    layout: [rcr]
    tile: [48, 64, 128]
    targets: [cpu]
"""


def parse(text, **kw):
    return parse_manifest(textwrap.dedent(text), "kernels.yaml", **kw)


def codegen(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "codegen", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def tiles(count):
    return "[" + ", ".join(f"[{6 * (i % 100 + 1)}, {16 * (i // 100 + 1)}, 64]" for i in range(count)) + "]"


# ---- 1. expansion caps ---------------------------------------------------------------

def test_the_default_cap_is_stated():
    assert DEFAULT_MAX_VARIANTS == 20_000


def test_a_manifest_over_the_cap_fails_with_count_cap_line_and_how_to_raise_it():
    # 5 dtypes x 4 layouts x 1001 tiles = 20,020 variants: one over the default cap
    text = GROUP.replace("[fp32]", "[fp32, fp16, bf16, fp8_e4m3, fp8_e5m2]").replace(
        "[rcr]", "[rcr, rrr, crr, ccr]").replace("[48, 64, 128]", tiles(1001))
    start = time.time()
    with pytest.raises(ManifestError) as info:
        expand(parse(text), ["cpu"])
    assert time.time() - start < 5
    message = str(info.value)
    assert message.startswith("kernels.yaml:3: "), message
    assert "20,020 variants" in message and "cap of 20,000" in message
    assert "-Dmax_variants=N" in message and "--max-variants N" in message


def test_the_cap_is_a_parameter_and_counts_every_target_before_the_filter():
    text = GROUP.replace("[fp32]", "[fp32, fp16, bf16]").replace("[rcr]", "[rcr, rrr]")  # 6 variants
    assert len(expand(parse(text), ["cpu"], max_variants=6).configs) == 6
    with pytest.raises(ManifestError, match=r"^kernels.yaml:3: the manifest expands to 6 variants .* cap of 5"):
        expand(parse(text), ["cpu"], max_variants=5)
    with pytest.raises(ManifestError, match="cap of 5"):
        expand(parse(text), ["cpu"], "gemm_fp32_*", max_variants=5)  # the filter does not shrink the work
    assert len(expand(parse(text), ["cpu"], max_variants=None).configs) == 6


def test_a_billion_variant_manifest_fails_at_once():
    # 5 x 4 x 1000 tiles x 5 targets x 4 x 2 x 2 x 2 cuda knobs: over 10^7 before the knobs of
    # every combination are checked; the old code took minutes and gigabytes on far less
    text = GROUP.replace("[fp32]", "[fp32, fp16, bf16, fp8_e4m3, fp8_e5m2]").replace(
        "[rcr]", "[rcr, rrr, crr, ccr]").replace("[48, 64, 128]", tiles(1000)).replace(
        "[cpu]", "[cpu, sm_90a, gfx942, gfx90a, gfx950]") + textwrap.indent(textwrap.dedent("""\
        cuda:
          cluster: [[1, 1], [2, 1], [1, 2], [2, 2]]
          schedule: [cooperative, pingpong]
          misaligned: [reject, pad]
          epilogue: [tma, nosmem]
        """), "    ")
    start = time.time()
    with pytest.raises(ManifestError) as info:
        expand(parse(text), ALL_TARGETS)
    assert time.time() - start < 10
    assert str(info.value).startswith("kernels.yaml:3: the manifest expands to "), str(info.value)
    assert "cap of 20,000" in str(info.value)


def test_the_knob_product_is_capped_before_it_is_built():
    text = GROUP.replace("[cpu]", "[sm_90a]").replace("[fp32]", "[bf16]").replace("48, 64, 128", "128, 128, 64") + \
        "    cuda:\n      cluster: [[1, 1], [2, 1], [1, 2], [2, 2]]\n      schedule: [cooperative, pingpong]\n"
    assert len(parse(text, max_variants=8).groups) == 1
    with pytest.raises(ManifestError, match=r"^kernels.yaml:7: the 'cuda' knobs of this group alone make 8 variants, "
                                            r"more than the cap of 7"):
        parse(text, max_variants=7)


def test_codegen_cli_takes_max_variants_and_refuses_a_manifest_over_it(tmp_path):
    path = tmp_path / "kernels.yaml"
    path.write_text(GROUP.replace("[fp32]", "[fp32, fp16, bf16]").replace("[rcr]", "[rcr, rrr]"))
    for command in (["list"], ["registry", "-o", tmp_path / "r.json"],
                    ["table", "--op", "gemm", "--target", "cpu", "-o", tmp_path / "t.cpp"]):
        proc = codegen(*command, "--manifest", path, "--targets", "cpu", "--max-variants", 5)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.startswith(f"{path}:3: the manifest expands to 6 variants"), proc.stderr
        proc = codegen(*command, "--manifest", path, "--targets", "cpu", "--max-variants", 6)
        assert proc.returncode == 0, proc.stderr
    assert codegen("list", "--manifest", path, "--targets", "cpu", "--max-variants", 0).returncode == 2


def test_meson_passes_the_cap_option_to_codegen():
    options = (ROOT / "meson_options.txt").read_text()
    assert "option('max_variants', type: 'integer', value: 20000" in options
    build = (ROOT / "meson.build").read_text()
    assert build.count("'--max-variants', get_option('max_variants').to_string()") == 2


def test_the_default_manifest_and_every_sweep_expand_under_the_default_cap():
    proc = codegen("list", "--manifest", "kernels.yaml", "--targets", ",".join(ALL_TARGETS))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split()) > 600
    swept = 0
    for sweep in sorted((ROOT / "bench" / "sweeps").glob("*.yaml")):
        data = load_yaml(sweep.read_text(), str(sweep))
        if not isinstance(data, dict):
            continue  # a problem list, not a sweep
        swept += 1
        target = "cpu" if sweep.name.startswith("cpu") else "sm_90a"
        assert expand_sweep(sweep, target).configs, sweep
    assert swept >= 15


def test_duplicate_warnings_are_aggregated(tmp_path):
    group = GROUP.split("gemm:\n")[1].replace("[fp32]", "[fp32, fp16, bf16]").replace("[rcr]", "[rcr, rrr, crr, ccr]")
    path = tmp_path / "kernels.yaml"
    path.write_text("schema_version: 1\ngemm:\n" + group * 50)  # 12 names declared 50 times each
    proc = codegen("list", "--manifest", path, "--targets", "cpu")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, proc.stderr
    assert "12 variant names are declared more than once" in warnings[0] and "and 7 more" in warnings[0]


SWEEP = """\
schema_version: 1
gemm:
  - dtype: fp32
    layout: rcr
    tile:
      m: {values: [48, 96]}
      n: {min: 64, max: 128, step: 64}
      k: 128
    targets: [cpu]
"""


def write(tmp_path, text):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_a_huge_sweep_range_fails_before_its_list_is_built(tmp_path):
    path = write(tmp_path, SWEEP.replace("{min: 64, max: 128, step: 64}", "{min: 16, max: 1000000000000}"))
    with pytest.raises(ManifestError) as info:
        expand_sweep(path, "cpu")
    message = str(info.value)
    assert message.startswith(f"{path}:7: tile.n: the range 16..1000000000000 step 1 alone makes "), message
    assert "cap of 20,000" in message and "TILEDISPATCH_MAX_VARIANTS" in message


def test_a_huge_sweep_product_fails_before_it_is_built(tmp_path):
    path = write(tmp_path, SWEEP.replace("{values: [48, 96]}", "{min: 6, max: 6000, step: 6}").replace(
        "{min: 64, max: 128, step: 64}", "{min: 16, max: 16000, step: 16}").replace("k: 128", "k: {min: 1, max: 1000}"))
    start = time.time()
    with pytest.raises(ManifestError, match=r"sweep.yaml:5: 'tile' ranges alone make 1,000,000,000 variants, "
                                            r"more than the cap of 20,000"):
        expand_sweep(path, "cpu")
    assert time.time() - start < 5


def test_the_sweep_cap_is_an_argument_and_an_environment_variable(tmp_path, monkeypatch):
    path = write(tmp_path, SWEEP)  # 4 variants
    assert len(expand_sweep(path, "cpu", max_variants=4).configs) == 4
    with pytest.raises(ManifestError, match="4 variants, more than the cap of 3"):
        expand_sweep(path, "cpu", max_variants=3)
    monkeypatch.setenv("TILEDISPATCH_MAX_VARIANTS", "3")
    with pytest.raises(ManifestError, match="cap of 3"):
        expand_sweep(path, "cpu")
    monkeypatch.setenv("TILEDISPATCH_MAX_VARIANTS", "4")
    assert len(expand_sweep(path, "cpu").configs) == 4


# ---- 2. nesting depth ----------------------------------------------------------------

@pytest.mark.parametrize("text, line", [
    ("schema_version: 1\ngemm:\n  - dtype: " + "[" * 5000 + "]" * 5000 + "\n", 3),
    ("schema_version: 1\ngemm:\n  - dtype:\n" + "".join("    " + "  " * i + "- \n" for i in range(100)), 65),
    ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n", 1),
])
def test_deep_nesting_is_a_manifest_error_naming_the_line(text, line):
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "kernels.yaml")
    assert str(info.value).startswith(f"kernels.yaml:{line}: the YAML nests deeper than {MAX_DEPTH} levels"), \
        str(info.value)


def test_nesting_through_aliases_and_merge_chains_is_no_recursion_error():
    # each anchor 40 deep, each the next one's innermost item: 40 x 200 levels in all
    lines = ["  - &a0 1"] + [f"  - &a{i} " + "[" * 40 + f"*a{i - 1}" + "]" * 40 for i in range(1, 200)]
    with pytest.raises(ManifestError, match=r"^kernels.yaml:3: each 'gemm' entry must be a mapping"):
        expand(parse_manifest("schema_version: 1\ngemm:\n" + "\n".join(lines) + "\n", "kernels.yaml"), ["cpu"])
    # a chain of 3000 merges
    lines = ["  - &m0 {dtype: fp32}"] + [f"  - &m{i} {{<<: *m{i - 1}}}" for i in range(1, 3000)]
    with pytest.raises(ManifestError, match=r"^kernels.yaml:3: missing key"):
        expand(parse_manifest("schema_version: 1\ngemm:\n" + "\n".join(lines) + "\n", "kernels.yaml"), ["cpu"])


def test_nesting_up_to_the_cap_loads():
    assert load_yaml("a: " + "[" * (MAX_DEPTH - 2) + "1" + "]" * (MAX_DEPTH - 2), "x.yaml")["a"]


# ---- 3. merge keys -------------------------------------------------------------------

MERGED = """\
schema_version: 1
gemm:
  - &base
    dtype: [fp32]
    layout: [rcr]
    tile: [48, 64, 128]
    targets: [cpu]
  - <<: *base
    dtype: [bf16]
"""


def test_a_merge_key_with_an_override_takes_the_explicit_key():
    names = [c.name for c in expand(parse(MERGED), ["cpu"]).configs]
    assert names == ["gemm_bf16_rcr_standard_48x64x128_r6x16_cpu", "gemm_fp32_rcr_standard_48x64x128_r6x16_cpu"]


def test_the_first_merged_mapping_wins_and_explicit_keys_win_over_all():
    data = load_yaml("a: &a {x: 1, y: 1}\nb: &b {x: 2, z: 2}\nc: {<<: [*a, *b], y: 3}\n", "m.yaml")
    assert data["c"] == {"x": 1, "y": 3, "z": 2}
    assert data["c"].line_of("y") == 3 and data["c"].line_of("z") == 2


def test_a_duplicate_explicit_key_beside_a_merge_stays_an_error():
    with pytest.raises(ManifestError, match=r"^kernels.yaml:10: duplicate key 'dtype' \(first at line 9\)"):
        parse(MERGED + "    dtype: [fp16]\n")


def test_an_error_in_a_merged_value_names_the_line_it_is_written_on():
    with pytest.raises(ManifestError, match=r"^kernels.yaml:5: unknown layout 'xyz'"):
        expand(parse(MERGED.replace("[rcr]", "[xyz]")), ["cpu"])


@pytest.mark.parametrize("text, message", [
    ("a: &a {<<: *a}\n", "merges a mapping into itself"),
    ("a: {<<: 1}\n", "a merge key (<<) takes a mapping or a list of mappings"),
    ("a: {<<: [1]}\n", "a merge key (<<) takes a mapping or a list of mappings"),
])
def test_bad_merges_are_manifest_errors(text, message):
    with pytest.raises(ManifestError, match="^m.yaml:1: .*" + re.escape(message)):
        load_yaml(text, "m.yaml")


# ---- 4. which line a bad cpu tile names ------------------------------------------------

@pytest.mark.parametrize("tile, micro, line, message", [
    # the tile itself: the default micro tile cannot build it either
    ("[50, 64, 128]", "[6, 16]", 5, "tile M 50 is not a multiple of the micro tile rows 6"),
    ("[50, 64, 128]", "[6, 8]", 5, "tile M 50 is not a multiple of the micro tile rows 6"),
    ("[2048, 64, 128]", "[8, 16]", 5, "tile M 2048 not in 1..1024"),
    ("[960, 1024, 1024]", "[6, 16]", 5, "exceed 4 MiB"),
    # the micro tile: the same tile builds with the default micro tile
    ("[48, 64, 128]", "[7, 16]", 7, "tile M 48 is not a multiple of the micro tile rows 7"),
    ("[48, 64, 128]", "[17, 16]", 7, "micro tile rows 17 not in 1..16"),
    ("[48, 64, 128]", "[6, 12]", 7, "micro tile columns 12 not one of 4, 8, 16, 32"),
])
def test_a_bad_cpu_tile_names_the_tile_line_and_a_bad_micro_tile_its_own(tile, micro, line, message):
    text = GROUP.replace("[48, 64, 128]", tile) + f"    cpu: {{micro_tile: {micro}}}\n"
    with pytest.raises(ManifestError) as info:
        expand(parse(text), ["cpu"])
    assert str(info.value).startswith(f"kernels.yaml:{line}: "), str(info.value)
    assert message in str(info.value)


# ---- errors that used to escape as other exceptions or without a line ------------------

@pytest.mark.parametrize("text, line, message", [
    ("schema_version: 1\ngemm:\n  - 7\n", 3, "each 'gemm' entry must be a mapping"),
    ("schema_version: 1\ngemm:\n  - dtype: !!int 0x\n", 3, "invalid YAML value"),
    ("schema_version: 1\ngemm: !!python/object:os.system {}\n", 2, "invalid YAML"),
    ("schema_version: 1\n\ngemm: \x07\n", 3, "unacceptable character #x0007"),
    ("schema_version: 1\ngemm:\n  - dtype: " + "9" * 5000 + "\n", 3, "invalid YAML value"),
    ("schema_version: 1\ngemm:\n  - dtype: !!timestamp yesterday\n", 3, "invalid YAML value"),
])
def test_hostile_values_are_manifest_errors_with_a_line(text, line, message):
    with pytest.raises(ManifestError) as info:
        expand(parse_manifest(text, "kernels.yaml"), ["cpu"])
    assert str(info.value).startswith(f"kernels.yaml:{line}: "), str(info.value)
    assert message in str(info.value)


@pytest.mark.parametrize("old, new", [
    ("[48, 64, 128]", "[" + ", ".join(["x"] * 100_000) + "]"),
    ("[fp32]", "[" + "f" * 100_000 + "]"),
])
def test_messages_about_huge_values_stay_short(old, new):
    with pytest.raises(ManifestError) as info:
        expand(parse_manifest(GROUP.replace(old, new), "kernels.yaml"), ["cpu"])
    assert str(info.value).startswith("kernels.yaml:")
    assert len(str(info.value)) < 1100, str(info.value)[:500]
