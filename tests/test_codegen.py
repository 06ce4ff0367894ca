"""Codegen without a build: the manifest model, errors with line numbers, expansion,
names, emitted sources."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tiledispatch.codegen import (
    ConvKernelConfig, ConvLayout, Direction, DType, GemmKernelConfig, GemmVariant, Layout,
    ManifestError, Reduction, config_from_name, expand, load_manifest, parse_manifest,
)
from tiledispatch.codegen.emit import emit_source, write_if_changed
from tiledispatch.codegen.registry import registry_dict, table_source

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"


def default_expansion():
    return expand(load_manifest(ROOT / "kernels.yaml"), ["cpu"])


def test_default_manifest_expands_to_the_documented_count():
    # 5 dtypes x 4 layouts + 2 x 2 small tiles + 5 dtypes x 4 layouts fusion generic
    # + 3 dtypes x 2 stream-K reductions + 3 directions x 3 ranks x 3 dtypes
    result = default_expansion()
    assert len(result.configs) == 20 + 4 + 20 + 6 + 27
    assert result.duplicates == ()


def test_default_manifest_covers_every_dtype_layout_variant_and_conv_kind():
    configs = default_expansion().configs
    gemms = [c for c in configs if c.op == "gemm"]
    convs = [c for c in configs if c.op == "conv"]
    # cpu builds every dtype but the FNUZ fp8 types, which are gfx942's (tests/test_hip.py)
    assert {c.dtype for c in gemms} == set(DType) - {DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ}
    assert {c.layout for c in gemms} == set(Layout)
    assert {(c.variant, c.reduction) for c in gemms} == {
        (GemmVariant.STANDARD, None), (GemmVariant.STREAM_K, Reduction.ATOMIC),
        (GemmVariant.STREAM_K, Reduction.DETERMINISTIC)}
    assert {(c.direction, c.ndim) for c in convs} == {(d, n) for d in Direction for n in (1, 2, 3)}


def test_names_are_unique_canonical_and_round_trip():
    configs = default_expansion().configs
    names = [c.name for c in configs]
    assert len(names) == len(set(names))
    assert names == sorted(names)
    for config in configs:
        assert re.fullmatch(r"[a-z0-9_]+", config.name)
        assert config.name.endswith("_cpu")
        assert config_from_name(config.name) == config


def test_cuda_names_follow_the_design_example():
    from tiledispatch.codegen.families import Cutlass
    g = GemmKernelConfig("bf16", "rcr", "stream_k", "atomic", (128, 256, 64), Cutlass(2, 1), "sm_90a")
    assert g.name == "gemm_bf16_rcr_streamk_atomic_128x256x64_c2x1_coop_sm90a"
    p = GemmKernelConfig("fp16", "rcr", "standard", None, (64, 128, 64),
                         Cutlass(1, 1, "pingpong", "nosmem", True), "sm_90a")
    assert p.name == "gemm_fp16_rcr_standard_64x128x64_c1x1_pp_nosmem_pad_sm90a"
    assert config_from_name(p.name) == p


def test_name_format_is_exact():
    g = GemmKernelConfig("bf16", "rcr", "stream_k", "atomic", (128, 256, 64), target="cpu")
    assert g.name == "gemm_bf16_rcr_streamk_atomic_128x256x64_r6x16_cpu"
    c = ConvKernelConfig("bwd_weight", "NDHWGC", "fp16", (32, 64, 16), target="cpu")
    assert c.name == "conv_bwdweight_ndhwgc_fp16_32x64x16_r4x16_cpu"
    assert GemmKernelConfig(DType.FP8_E4M3).name.startswith("gemm_fp8e4m3_rcr_standard_")


@pytest.mark.parametrize("bad", [
    "gemm_fp64_rcr_standard_1x1x1_r6x16_cpu",           # unknown dtype
    "gemm_fp32_rcr_standard_1x1x1_r6x16_sm99",          # unknown target
    "gemm_fp32_rcr_streamk_1x1x1_r6x16_cpu",            # stream-K without reduction
    "gemm_fp32_rcr_standard_001x1x1_r6x16_cpu",         # not canonical
    "conv_fwd_nhwgc_fp32_1x1_r4x16_cpu",                # bad tile
    "softmax_fp32_cpu",                                 # unknown op
])
def test_bad_names_are_rejected(bad):
    with pytest.raises(ValueError):
        config_from_name(bad)


def test_filter_globs_select_by_name():
    manifest = load_manifest(ROOT / "kernels.yaml")
    only = expand(manifest, ["cpu"], "gemm_bf16_*,conv_fwd_nwgc_*")
    names = [c.name for c in only.configs]
    assert names and all(n.startswith(("gemm_bf16_", "conv_fwd_nwgc_")) for n in names)
    assert len(names) + only.filtered_out == 77
    assert all(c.target == "sm_90a" for c in expand(manifest, ["sm_90a"]).configs)


def test_default_manifest_sm90a_variants_cover_dtypes_layouts_and_schedulers():
    every = expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a"]).configs
    vendor = {c.name for c in every if c.op == "gemm" and c.family == "cublaslt"}
    assert vendor == {f"gemm_{d}_{lay}_standard_1x1x1_cublaslt_sm90a" for d in ("bf16", "fp16")
                      for lay in ("rcr", "rrr", "crr", "ccr")} | {"gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a"}
    grouped = {c.name for c in every if c.op == "gemm" and c.family == "cutlass_grouped"}
    assert grouped == {f"gemm_{d}_rcr_grouped_{t}_ptrarray_c1x1_{s}_sm90a" for d in ("bf16", "fp16")
                       for t, s in (("128x128x64", "coop"), ("128x256x64", "coop"), ("64x128x64", "pp"))} | {
        "gemm_fp8e4m3_rcr_grouped_128x128x128_ptrarray_c1x1_coop_sm90a"}
    assert all(c.variant is GemmVariant.GROUPED for c in every if c.name in grouped)
    gemms = [c for c in every if c.op == "gemm" and c.family not in ("cublaslt", "cutlass_grouped")]
    fused = {c.name for c in gemms if c.family == "cutlass" and c.knobs.fusion != "none"}
    # the fused epilogue variants: 5 epilogues x 3 tiles x (bf16, fp16), bf16 gelu + aux,
    # bf16 with fp32 D, fp8 with its default (bf16), fp16 and fp8 D
    acts = ("epi", "relu", "gelu", "gelu_tanh", "silu")
    tiles = ("128x128x64_c1x1_coop", "64x128x64_c1x1_pp", "128x256x64_c2x1_coop")
    assert fused == {f"gemm_{d}_rcr_standard_{t}_f{a}_sm90a" for d in ("bf16", "fp16") for t in tiles
                     for a in acts} | {
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fgelu_aux_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fepi_ofp32_sm90a",
        "gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_fepi_sm90a",
        "gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_fepi_ofp16_sm90a",
        "gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_fepi_ofp8e4m3_sm90a"}
    # (the skinny decode GEMM with the generic epilogue: checked with the plain skinny ones below)
    configs = [c for c in gemms if c.name not in fused and not c.name.endswith("_skinny_generic_sm90a")]
    assert len(configs) == 67  # 23 bf16 rcr (bench/RESULTS.md), their 23 fp16 twins, 17 others, 4 block-wise fp8
    fp8_sliced = {c.name for c in configs if c.dtype.nbytes == 1 and c.tile[1] > 128}  # N slices
    assert fp8_sliced == {"gemm_fp8e4m3_rcr_standard_128x256x128_c1x1_coop_sm90a",
                          "gemm_fp8e4m3_rcr_standard_128x256x128_c2x1_coop_sm90a",
                          "gemm_fp8e4m3_rcr_standard_128x192x128_c1x1_coop_sm90a",
                          "gemm_fp8e5m2_rcr_standard_128x256x128_c1x1_coop_sm90a",
                          "gemm_fp8e5m2_rcr_standard_128x256x128_c2x1_coop_sm90a"}
    bf16 = {c.name for c in configs if c.dtype is DType.BF16 and c.layout is Layout.RCR}
    fp16 = {c.name for c in configs if c.dtype is DType.FP16}
    assert {n.replace("_bf16_", "_fp16_") for n in bf16} == fp16  # the bf16 table serves fp16
    assert {c.dtype for c in configs} == set(DType) - {DType.FP32, DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ}
    assert {c.layout for c in configs} == set(Layout)
    assert {(c.variant, c.reduction) for c in configs} == {
        (GemmVariant.STANDARD, None), (GemmVariant.STREAM_K, Reduction.ATOMIC),
        (GemmVariant.STREAM_K, Reduction.DETERMINISTIC), (GemmVariant.SPLIT_K, None)}
    assert {c.knobs.schedule for c in configs if c.family == "cutlass"} == {"cooperative", "pingpong"}
    assert any(c.knobs.pad for c in configs)
    assert {c.name for c in gemms if c.knobs.algorithm == "skinny"} == {
        "gemm_bf16_rcr_standard_16x16x128_skinny_sm90a", "gemm_fp16_rcr_standard_16x16x128_skinny_sm90a",
        "gemm_fp8e4m3_rcr_standard_16x16x256_skinny_sm90a", "gemm_fp8e5m2_rcr_standard_16x16x256_skinny_sm90a",
        "gemm_bf16_rcr_standard_16x16x128_skinny_generic_sm90a", "gemm_fp16_rcr_standard_16x16x128_skinny_generic_sm90a",
        "gemm_fp8e4m3_rcr_standard_16x16x256_skinny_generic_sm90a",
        "gemm_fp8e5m2_rcr_standard_16x16x256_skinny_generic_sm90a"}
    for c in every:
        assert config_from_name(c.name) == c
        assert c.name.endswith("_sm90a")


GOOD_GROUP = """\
schema_version: 1
gemm:
  - dtype: [fp32]
    layout: [rcr]
    tile: [48, 64, 128]
    targets: [cpu]
"""


def parse(text):
    return parse_manifest(textwrap.dedent(text), "kernels.yaml")


@pytest.mark.parametrize("text, line, message", [
    (GOOD_GROUP + "    colour: red\n", 7, "unknown key 'colour'"),
    (GOOD_GROUP + "    dtype: [bf16]\n", 7, "duplicate key 'dtype' (first at line 3)"),
    (GOOD_GROUP.replace("dtype: [fp32]", "dtype: [fp32, fp64]"), 3, "unknown dtype 'fp64'"),
    (GOOD_GROUP.replace("targets: [cpu]", "targets:\n      - cpu\n      - sm_99"), 8,
     "unknown target 'sm_99'"),
    (GOOD_GROUP.replace("tile: [48, 64, 128]", "tile: [48, 64, big]"), 5, "'tile' items must be lists of 3 integers"),
    (GOOD_GROUP.replace("tile: [48, 64, 128]", "tile: [50, 64, 128]"), 5,
     "cpu backend cannot build fp32 rcr standard tile [50, 64, 128] with r6x16 for cpu: "
     "tile M 50 is not a multiple of the micro tile rows 6"),
    (GOOD_GROUP.replace("layout: [rcr]", "layout: {a: row}"), 4, "'layout' takes strings"),
    (GOOD_GROUP + "    reduction: atomic\n", 7, "'reduction' applies only to variant stream_k"),
    (GOOD_GROUP + "    variant: stream_k\n", 7, "variant stream_k needs 'reduction'"),
    (GOOD_GROUP.replace("    tile: [48, 64, 128]\n", ""), 3, "missing key 'tile'"),
    (GOOD_GROUP + "    cpu: {micro_tile: [7, 16]}\n", 7, "tile M 48 is not a multiple of the micro tile rows 7"),
    (GOOD_GROUP + "    hip: {waves: [2, 2]}\n", 7, "unknown hip knob 'waves'"),
    (GOOD_GROUP.replace("[cpu]", "[sm_90a]") + "    cuda: {cluster: [2, 1]}\n", 7,
     "fp32 inputs are not built on the cuda backend"),
    (GOOD_GROUP.replace("[fp32]", "[bf16]").replace("[cpu]", "[sm_90a]").replace("48, 64, 128", "64, 128, 64")
     + "    variant: stream_k\n    reduction: atomic\n    cuda:\n      schedule: pingpong\n", 10,
     "CUTLASS runs stream-K only with the cooperative schedule"),
    (GOOD_GROUP.replace("[cpu]", "[sm_90a]") + "    cuda: {schedule: [cooperative, zigzag]}\n", 7,
     "unknown schedule 'zigzag'"),
    (GOOD_GROUP.replace("schema_version: 1", "schema_version: 2"), 1, "schema_version must be 1"),
    (GOOD_GROUP + "  - dtype: [fp32\n", 8, "invalid YAML"),
    (GOOD_GROUP + "conv:\n  - direction: sideways\n    layout: NHWGC\n    dtype: fp32\n"
     "    tile: [64, 64, 64]\n    targets: cpu\n", 8, "unknown direction 'sideways'"),
    (GOOD_GROUP + "conv:\n  - direction: fwd\n    layout: NHWC\n    dtype: fp32\n"
     "    tile: [64, 64, 64]\n    targets: cpu\n", 9, "unknown conv layout 'NHWC'"),
])
def test_manifest_errors_name_file_and_line(text, line, message):
    with pytest.raises(ManifestError) as info:
        expand(parse(text), ["cpu"])
    rendered = str(info.value)
    assert rendered.startswith(f"kernels.yaml:{line}: "), rendered
    assert message in rendered


def test_codegen_cli_fails_with_file_line_and_exit_1(tmp_path):
    bad = tmp_path / "kernels.yaml"
    bad.write_text(GOOD_GROUP.replace("dtype: [fp32]", "dtype: [fp64]"))
    proc = subprocess.run([sys.executable, "-m", "codegen", "list", "--manifest", str(bad),
                           "--targets", "cpu"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith(f"{bad}:3: unknown dtype 'fp64'")


def test_codegen_cli_lists_for_meson(tmp_path):
    good = tmp_path / "kernels.yaml"
    good.write_text(GOOD_GROUP)
    proc = subprocess.run([sys.executable, "-m", "codegen", "list", "--manifest", str(good),
                           "--targets", "cpu", "--format", "meson"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "gemm cpu cpu gemm_fp32_rcr_standard_48x64x128_r6x16_cpu\n"


def test_an_empty_selection_is_an_error_not_an_empty_library(tmp_path):
    good = tmp_path / "kernels.yaml"
    good.write_text(GOOD_GROUP)
    proc = subprocess.run([sys.executable, "-m", "codegen", "list", "--manifest", str(good),
                           "--targets", "cpu", "--filter", "conv_*"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "no kernels for targets cpu match filter 'conv_*'" in proc.stderr


@pytest.mark.parametrize("name", [
    "gemm_bf16_rcr_streamk_deterministic_96x128x256_r6x16_cpu",
    "conv_bwddata_nhwgc_fp16_64x64x64_r4x16_cpu",
    "gemm_bf16_rcr_streamk_atomic_128x256x64_c2x1_coop_sm90a",
    # data-parallel CUTLASS GEMMs are built for programmatic dependent launch, stream-K ones not
    "gemm_bf16_rcr_standard_128x128x64_c1x1_pp_sm90a",
])
def test_emitted_sources_match_golden_files(name):
    text = emit_source(config_from_name(name))
    assert text.startswith("// Generated by tiledispatch codegen")
    assert "do not edit" in text
    assert text == (GOLDEN / f"{name}.cpp").read_text()


def test_write_if_changed_leaves_identical_files_alone(tmp_path):
    target = tmp_path / "x.cpp"
    assert write_if_changed(target, "int x;\n") is True
    os.utime(target, (1_000_000, 1_000_000))
    assert write_if_changed(target, "int x;\n") is False
    assert target.stat().st_mtime == 1_000_000
    assert write_if_changed(target, "int y;\n") is True
    assert target.read_text() == "int y;\n"


def test_table_and_registry_come_from_the_same_expansion():
    configs = default_expansion().configs
    table = table_source(configs, "gemm", "cpu")
    gemms = [c for c in configs if c.op == "gemm"]
    assert f"const size_t gemm_table_size = {len(gemms)};" in table
    for c in gemms:
        assert f"&kernel_{c.name}," in table
    reg = registry_dict(configs)
    assert [k["name"] for k in reg["kernels"]] == [c.name for c in configs]
    assert {(lib["op"], lib["target"], lib["kernels"]) for lib in reg["libraries"]} == {
        ("gemm", "cpu", len(gemms)), ("conv", "cpu", len(configs) - len(gemms))}


def test_conv_layouts_imply_rank_and_partner_layouts():
    assert ConvLayout.parse("NDHWGC,GKZYXC,NDHWGK") is ConvLayout.NDHWGC
    assert ConvLayout.NWGC.ndim == 1 and ConvLayout.NWGC.weight_layout == "GKXC"
    with pytest.raises(ValueError):
        ConvLayout.parse("NHWGC,GKXC,NHWGK")


def test_auto_targets_skip_gpus_this_machine_cannot_build(monkeypatch):
    from tiledispatch.codegen import targets, toolchain
    monkeypatch.setattr(targets, "detect_gpus", lambda: ["sm_90a", "gfx942"])
    monkeypatch.setattr(targets.shutil, "which", lambda name: "/usr/bin/nvcc" if name == "nvcc" else None)
    messages = []
    monkeypatch.setattr(toolchain.importlib.util, "find_spec", lambda name: None)
    assert targets.resolve(["auto"], messages.append) == ["cpu"]
    assert any("CUTLASS headers are not installed" in m for m in messages)
    assert any("gfx942" in m and "needs a HIP compiler" in m for m in messages)
    with pytest.raises(ValueError, match="unknown target 'sm_99'"):
        targets.resolve(["cpu", "sm_99"], messages.append)
    assert targets.resolve(["cpu", "sm_90a"], messages.append) == ["cpu", "sm_90a"]  # explicit: kept


def test_auto_targets_come_from_the_runtimes_gpu_detection(monkeypatch):
    """The build's `auto` asks tiledispatch._cuda, as the runtime does; GPUs this version
    does not know are left out."""
    from tiledispatch import _cuda
    from tiledispatch.codegen import targets
    monkeypatch.setattr(_cuda, "device_targets", lambda: ("sm_90a", "sm_75", "gfx942"))
    assert targets.detect_gpus() == ["sm_90a", "gfx942"]
    monkeypatch.setattr(_cuda, "device_targets", lambda: ())
    messages = []
    assert targets.resolve(["auto"], messages.append) == ["cpu"] and messages == []


def sm90_default_configs():
    """Every sm_90a variant the default manifest expands to."""
    return expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a"]).configs


def test_default_manifest_sm90a_direct_conv_variants():
    """Own direct kernels for every direction and rank, each channel count per group of the
    suite (1, 2, 4, 8, 16) and the generic one, bf16 and fp16."""
    every = [c for c in sm90_default_configs() if c.op == "conv"]
    convs = [c for c in every if c.knobs.algorithm == "direct"]
    assert len(convs) == 6 * 3 * 3 * 2 + 2 * 2 * 3 * 2  # + two more depthwise pixel counts
    mma = [c for c in every if c.knobs.algorithm == "mma"]
    assert len(mma) == 5 * 2 * 3 * 2 and {c.direction.key for c in mma} == {"fwd", "bwd_data"}
    assert "conv_fwd_ndhwgc_bf16_32x16x16_mma_cpg16_sm90a" in {c.name for c in mma}
    assert {c.knobs.channels_per_group for c in convs} == {0, 1, 2, 4, 8, 16}
    assert {c.dtype for c in convs} == {DType.BF16, DType.FP16}
    name = "conv_bwdweight_nhwgc_bf16_1x8x128_direct_cpg4_sm90a"
    assert name in {c.name for c in convs} and config_from_name(name).knobs.algorithm == "direct"


def test_tiled_mma_conv_variants_expand_and_names_round_trip():
    """Tensor-core grouped conv from shared-memory tiles: every direction and rank, 4, 8 and
    16 channels per group, two tiles per direction, bf16 and fp16; names parse back."""
    configs = [c for c in sm90_default_configs() if c.knobs.algorithm == "tiled_mma"]
    assert len(configs) == 3 * 3 * 3 * 2 * 2 + 2 * 3 * 2  # + 16 channels per block at 16 per group
    assert {c.knobs.channels_per_group for c in configs} == {4, 8, 16}
    names = {c.name for c in configs}
    assert "conv_fwd_nhwgc_bf16_128x32x16_tiledmma_cpg8_sm90a" in names
    assert "conv_bwdweight_ndhwgc_fp16_512x32x16_tiledmma_cpg16_sm90a" in names
    for c in configs:
        assert config_from_name(c.name) == c


def test_depthwise_conv_variants_expand_and_names_round_trip():
    """Depthwise kernels compiled per filter size: 2D fwd / bwd_data two tiles, 1D one,
    bwd_weight's row kernel in 1D and 2D and two sliding tiles in 2D, bf16 and fp16; names
    parse back; no 3D; the sliding tiles (rows > 1) only in 2D bwd_weight."""
    configs = [c for c in sm90_default_configs() if c.knobs.algorithm == "depthwise"]
    assert len(configs) == (2 * 2 + 1 * 2 + 1 * 2 + 2) * 2
    assert {c.ndim for c in configs} == {1, 2}
    names = {c.name for c in configs}
    assert "conv_fwd_nhwgc_bf16_3x4x4_dw_sm90a" in names
    assert "conv_bwdweight_nwgc_fp16_1x8x4_dw_sm90a" in names
    assert {"conv_bwdweight_nhwgc_bf16_8x8x2_dw_sm90a", "conv_bwdweight_nhwgc_fp16_8x4x1_dw_sm90a"} <= names
    for c in configs:
        assert config_from_name(c.name) == c
        if c.direction is Direction.BWD_WEIGHT and c.tile[0] > 1:
            assert c.ndim == 2 and c.tile[2] in (1, 2)


def sm90_conv_manifest_error(tmp_path, knobs, tile, direction="fwd", layout="NHWGC"):
    """A one-group sm_90a conv manifest (cuda knobs on line 8) that must fail to expand:
    its path and the error message."""
    path = tmp_path / "k.yaml"
    path.write_text(f"schema_version: 1\nconv:\n  - direction: {direction}\n    layout: {layout}\n    dtype: bf16\n"
                    f"    tile: {tile}\n    targets: [sm_90a]\n    cuda: {knobs}\n")
    with pytest.raises(ManifestError) as info:
        expand(load_manifest(path), ["sm_90a"])
    return path, str(info.value)


@pytest.mark.parametrize("layout, direction, tile, why", [
    ("NDHWGC", "fwd", "[1, 8, 4]", "the depthwise kernels take 1D and 2D layouts"),
    ("NWGC", "fwd", "[2, 4, 4]", "a 1D depthwise kernel has one output row per thread, not 2"),
    ("NHWGC", "bwd_weight", "[17, 4, 1]", "sliding depthwise tile must be [2..16 rows, 1..8 columns"),
    ("NWGC", "bwd_weight", "[8, 4, 1]", "a 1D depthwise kernel has one output row per thread, not 8"),
    ("NHWGC", "bwd_weight", "[8, 4, 8]", "sliding depthwise tile must be"),
    ("NHWGC", "fwd", "[8, 4, 8]", "sliding depthwise tile must be [5..16 rows"),
    ("NHWGC", "bwd_weight", "[1, 4, 1]", "depthwise tile must be [1..4 rows, 1..8 columns, 2|4|8 channels]"),
])
def test_bad_depthwise_variants_name_the_rule(tmp_path, layout, direction, tile, why):
    path, message = sm90_conv_manifest_error(tmp_path, "{algorithm: depthwise}", tile, direction, layout)
    assert why in message and str(path) + ":8" in message


@pytest.mark.parametrize("layout, direction, tile, knobs, why", [
    ("NWGC", "fwd", "[16, 32, 16]", "{algorithm: depthwise_mma}", "the depthwise_mma kernels take the 2D layout only"),
    ("NDHWGC", "bwd_data", "[16, 32, 16]", "{algorithm: depthwise_mma}", "the 2D layout only"),
    ("NDHWGC", "bwd_weight", "[16, 32, 16]", "{algorithm: depthwise_mma}", "the 2D layout only"),
    ("NHWGC", "fwd", "[8, 32, 16]", "{algorithm: depthwise_mma}", "depthwise_mma tile must be [16|32 rows"),
    ("NHWGC", "fwd", "[16, 48, 16]", "{algorithm: depthwise_mma}", "16|32|64 columns"),
    ("NHWGC", "fwd", "[16, 32, 4]", "{algorithm: depthwise_mma}", "8|16|32|64 channels"),
    ("NHWGC", "fwd", "[16, 32, 16]", "{algorithm: depthwise_mma, cluster: [1, 2]}", "takes no cluster"),
    ("NHWGC", "bwd_weight", "[16, 32, 16]", "{algorithm: depthwise_mma}", "bwd_weight tile must be [4|8 input rows"),
    ("NHWGC", "bwd_weight", "[4, 32, 8]", "{algorithm: depthwise_mma}", "16|32|64 channels"),
    ("NHWGC", "bwd_weight", "[8, 32, 64]", "{algorithm: depthwise_mma}", "TMA rings need 249 KB of shared memory"),
])
def test_bad_depthwise_mma_variants_name_the_rule(tmp_path, layout, direction, tile, knobs, why):
    path, message = sm90_conv_manifest_error(tmp_path, knobs, tile, direction, layout)
    assert why in message and str(path) + ":8" in message


def test_toeplitz_mma_variants_round_trip_and_name_their_rules(tmp_path):
    """The grouped Toeplitz kernels: opt-in (bench/sweeps/sm90_conv_depthwise_mma.yaml), not in
    kernels.yaml (level with tiled_mma)."""
    assert not [c for c in sm90_default_configs() if c.knobs.algorithm == "toeplitz_mma"]
    sweep = Path(__file__).resolve().parents[1] / "bench" / "sweeps" / "sm90_conv_depthwise_mma.yaml"
    configs = [c for c in expand(load_manifest(sweep), ["sm_90a"]).configs if c.knobs.algorithm == "toeplitz_mma"]
    names = {c.name for c in configs}
    assert names == {f"conv_{d}_nhwgc_bf16_16x32x16_tpmma_cpg{g}_sm90a" for d in ("fwd", "bwddata") for g in (2, 4)}
    for c in configs:
        assert config_from_name(c.name) == c
        assert "cuda::Sm90DwMmaConv<" in emit_source(c) and f", {c.knobs.channels_per_group}>" in emit_source(c)
    for knobs, direction, why in (("{algorithm: toeplitz_mma, channels_per_group: 8}", "fwd", "not one of 2, 4"),
                                  ("{algorithm: toeplitz_mma, channels_per_group: 4}", "bwd_weight",
                                   "the toeplitz_mma kernels compute fwd and bwd_data")):
        path, message = sm90_conv_manifest_error(tmp_path, knobs, "[16, 32, 16]", direction)
        assert why in message and str(path) + ":" in message


def test_depthwise_mma_variants_round_trip_and_the_default_manifest_has_them():
    configs = [c for c in sm90_default_configs() if c.knobs.algorithm == "depthwise_mma"]
    names = {c.name for c in configs}
    assert names == {f"conv_{d}_nhwgc_{t}_{tile}_dwmma_sm90a" for d in ("fwd", "bwddata") for t in ("bf16", "fp16")
                     for tile in ("16x32x16", "16x16x16")} | \
        {f"conv_bwdweight_nhwgc_{t}_{tile}_dwmma_sm90a" for t in ("bf16", "fp16") for tile in ("4x32x32", "8x16x32")}
    for c in configs:
        assert config_from_name(c.name) == c
        assert "cuda::Sm90DwMmaConv<" in emit_source(c) and "cuda/conv_depthwise_mma.cuh" in emit_source(c)


def test_implicit_conv_variants_expand_and_names_round_trip():
    """CUTLASS sm90 implicit-GEMM convolution in the default manifest: every direction and
    rank, two tiles each, bf16 and fp16, names parsed back to the same config."""
    configs = [c for c in sm90_default_configs() if c.knobs.algorithm == "implicit"]
    assert len(configs) == 3 * 3 * 2 * 2 + 3 * 2  # + bwd_weight split (up to 4)
    names = {c.name for c in configs}
    assert "conv_bwdweight_ndhwgc_fp16_64x128x64_implicit_c1x1_sm90a" in names
    assert "conv_fwd_nhwgc_bf16_64x256x64_implicit_c1x1_sm90a" in names
    for c in configs:
        assert config_from_name(c.name) == c


@pytest.mark.parametrize("path", sorted((ROOT / "bench/sweeps").glob("sm90_conv_*.yaml")), ids=lambda p: p.name)
def test_opt_in_conv_manifests_expand(path):
    """The opt-in conv manifests of bench/sweeps (their headers give the one-run recipe):
    every variant buildable for sm_90a, names parsed back."""
    configs = expand(load_manifest(path), ["sm_90a"]).configs
    assert configs and all(c.op == "conv" for c in configs)
    for c in configs:
        assert config_from_name(c.name) == c


def test_wgrad_split_manifest_expands_and_names_round_trip():
    """The batch-split bwd_weight variants: split up to 4 at every cluster in the opt-in
    sweep, split up to 4 in the default manifest (bwd_weight only), in the name and the knobs,
    parsed back."""
    configs = expand(load_manifest(ROOT / "bench/sweeps/sm90_conv_wgrad_split.yaml"), ["sm_90a"]).configs
    split = [c for c in configs if getattr(c.knobs, "split", 1) > 1]
    assert len(split) == 4 and {c.knobs.split for c in split} == {4}
    names = {c.name for c in split}
    assert "conv_bwdweight_nhwgc_bf16_128x128x64_implicit_c2x2_s4_sm90a" in names
    for c in configs:
        assert config_from_name(c.name) == c
    default = [c for c in sm90_default_configs() if hasattr(c.knobs, "split")]
    split = [c for c in default if getattr(c.knobs, "split", 1) > 1]
    assert len(split) == 3 * 2 and {c.knobs.split for c in split} == {4}
    assert {c.direction.key for c in split} == {"bwd_weight"}


def test_dense_small_sweep_variants_round_trip_and_stay_out_of_the_default_manifest():
    """bench/sweeps/sm90_conv_dense_small.yaml: im2col with `misaligned: pad` (`_pad`), the
    split-K bwd_weight GEMM (`_splitk`, KernelInfo's GEMM variant, the template's split-K
    argument) and the pointwise kernels (`_pw`), every name parsed back; none of them in the
    default manifest until they have run on a GPU."""
    configs = expand(load_manifest(ROOT / "bench/sweeps/sm90_conv_dense_small.yaml"), ["sm_90a"]).configs
    by_name = {c.name: c for c in configs}
    assert len(configs) == 60
    for c in configs:
        assert config_from_name(c.name) == c
    split = by_name["conv_bwdweight_nhwgc_bf16_128x128x64_im2col_c1x1_coop_splitk_sm90a"]
    assert split.knobs.to_dict() == {"algorithm": "im2col", "cluster": [1, 1], "schedule": "cooperative",
                                     "gemm": "split_k"}
    assert split.knobs.info(split)["variant"] == 2 and split.knobs.info(split)["pad"] == 0  # TD_GEMM_SPLIT_K
    assert "1, 1, false, true, false>" in emit_source(split)
    both = by_name["conv_bwdweight_nhwgc_bf16_128x128x64_im2col_c1x1_coop_splitk_pad_sm90a"]
    assert both.knobs.split_k and both.knobs.pad and "1, 1, false, true, true>" in emit_source(both)
    pad = by_name["conv_fwd_ndhwgc_fp16_128x256x64_im2col_c2x1_coop_pad_sm90a"]
    assert pad.knobs.to_dict()["misaligned"] == "pad" and pad.knobs.info(pad)["pad"] == 1
    pw = by_name["conv_bwddata_nwgc_bf16_1x64x128_pw_sm90a"]
    assert pw.family == "pointwise" and "Sm90PointwiseConv<2, 1, 1, 64, 128>" in emit_source(pw)
    assert {c.tile for c in configs if c.family == "pointwise" and c.direction.key == "bwd_weight"} == {(1, 64, 256)}
    default = {c.name for c in sm90_default_configs()}
    assert not {n for n in default if "_pad_sm90a" in n and n.startswith("conv_") or "_splitk_sm90a" in n
                and n.startswith("conv_") or "_pw_" in n}
    plain = next(c for c in sm90_default_configs() if c.family == "im2col")
    assert plain.knobs.info(plain)["variant"] == 0 and "gemm" not in plain.knobs.to_dict()


@pytest.mark.parametrize("knobs, tile, why", [
    ("{algorithm: direct, channels_per_group: 3}", "[4, 8, 128]", "channels_per_group 3 not one of"),
    ("{algorithm: direct, channels_per_group: 4}", "[4, 6, 128]", "must be a multiple of 8"),
    ("{algorithm: direct, channels_per_group: any}", "[4, 8, 128]", "tile 1x1xT"),
    ("{channels_per_group: 4}", "[4, 8, 128]", "channels_per_group applies only to algorithm direct"),
    ("{schedule: cooperative}", "[128, 128, 64]", "uses algorithm direct, depthwise, depthwise_mma, toeplitz_mma, mma, tiled_mma, im2col, implicit, grouped_mma, pointwise or cudnn"),
    ("{algorithm: implicit, cluster: [1, 1], schedule: pingpong}", "[128, 128, 64]", "takes cluster and split only"),
    ("{algorithm: implicit, split: 2}", "[128, 128, 64]", "applies to bwd_weight only"),  # direction fwd
    ("{algorithm: implicit, split: 3}", "[128, 128, 64]", "split 3 not one of 1, 2, 4, 8"),
    ("{algorithm: im2col, split: 2}", "[128, 256, 64]", "split applies only to algorithm implicit"),
    ("{algorithm: im2col, gemm: split_k}", "[128, 128, 64]", "applies to bwd_weight only"),  # direction fwd
    ("{algorithm: im2col, gemm: stream_k}", "[128, 128, 64]", "gemm 'stream_k' not one of standard, split_k"),
    ("{algorithm: im2col, misaligned: sometimes}", "[128, 128, 64]", "unknown misaligned 'sometimes'"),
    ("{algorithm: pointwise}", "[1, 48, 256]", "pointwise tile must be [1, 32|64 channels written"),
    ("{algorithm: implicit}", "[128, 128, 32]", "tile"),
    ("{algorithm: implicit}", "[128, 256, 64]", "too many accumulators"),
    ("{algorithm: mma, channels_per_group: 4}", "[32, 16, 16]", "mma tile must be [16|32|64, 8, 16]"),
    ("{algorithm: mma, channels_per_group: 1}", "[32, 8, 16]", "not one of 2, 4, 8, 16, 32 (mma)"),
    ("{algorithm: tiled_mma, channels_per_group: 32}", "[128, 32, 16]", "not one of 1, 2, 4, 8, 16 (tiled_mma)"),
    ("{algorithm: tiled_mma, channels_per_group: 8}", "[96, 32, 16]", "tiled_mma tile must be [64|128|256|512, 16|32, 16]"),
    ("{algorithm: tiled_mma, channels_per_group: 8, cluster: [1, 1]}", "[128, 32, 16]", "takes no cluster"),
    ("{algorithm: depthwise}", "[2, 4, 3]", "depthwise tile must be [1..4 rows, 1..8 columns, 2|4|8 channels]"),
    ("{algorithm: depthwise}", "[4, 8, 4]", "4 x 8 x 4 is more than 64 values per thread"),
    ("{algorithm: depthwise, channels_per_group: 1}", "[1, 8, 4]", "the depthwise algorithm takes no channels_per_group"),
])
def test_bad_sm90a_conv_variants_name_file_and_line(tmp_path, knobs, tile, why):
    path, message = sm90_conv_manifest_error(tmp_path, knobs, tile)
    assert why in message and str(path) + ":" in message


def test_fp8_promote_knob_names_round_trip_and_the_default_manifest_uses_our_mainloop():
    """promote: tile (our two-buffer mainloop, no name token), N (CUTLASS's fp8 mainloop
    every N MMAs: _pN), fast (_fastacc, run only when named)."""
    configs = expand(load_manifest(ROOT / "bench/sweeps/sm90_fp8.yaml"), ["sm_90a"]).configs
    by_name = {c.name: c for c in configs}
    assert by_name["gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_sm90a"].knobs.promote == 1
    assert by_name["gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_p8_sm90a"].knobs.promote == 8
    assert by_name["gemm_fp8e4m3_rcr_standard_128x256x128_c2x1_coop_fastacc_sm90a"].knobs.promote == 0
    for c in configs:
        assert config_from_name(c.name) == c
        assert c.named_only == c.name.endswith("_fastacc_sm90a")  # never picked (KernelInfo.named_only)
    fp8 = [c for c in expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a"]).configs
           if c.op == "gemm" and c.dtype.nbytes == 1 and c.family != "cutlass_grouped"]
    # 12 CUTLASS (5 in N slices), 3 fused (row-wise scales), 2 skinny, 2 skinny generic, cuBLASLt,
    # 4 block-wise (CUTLASS's blockwise mainloop: no promote knob)
    assert len(fp8) == 24 and all(getattr(c.knobs, "promote", 1) == 1 for c in fp8)
    assert "false, false, false, 8>" in emit_source(by_name["gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_p8_sm90a"])
    # wider tiles run the promotion in N slices (the same rule as fp8_mainloop.cuh's fp8_slices)
    assert "gemm_fp8e4m3_rcr_standard_128x256x128_c2x1_coop_sm90a" in by_name
    from tiledispatch.codegen.families.cutlass import fp8_slices
    assert [fp8_slices(r, n) for r, n in ((64, 128), (56, 112), (96, 192), (128, 256), (192, 192), (256, 256))] == \
        [1, 1, 2, 4, 0, 0]


FP8_GROUP = """\
schema_version: 1
gemm:
  - dtype: fp8_e4m3
    layout: rcr
    tile: [128, 128, 128]
    targets: [sm_90a]
"""


@pytest.mark.parametrize("text, message", [
    (FP8_GROUP + "    cuda: {promote: 6}\n", "promote 6 not one of tile, 4, 8, 12, 16, 24, 32 or fast"),
    (FP8_GROUP + "    cuda: {promote: 0}\n", "promote must be tile, 4, 8, 12, 16, 24, 32 or fast, got 0"),
    (FP8_GROUP + "    cuda: {promote: sometimes}\n", "promote must be tile, 4, 8, 12, 16, 24, 32 or fast"),
    (FP8_GROUP.replace("fp8_e4m3", "bf16").replace("128, 128, 128", "128, 128, 64") + "    cuda: {promote: 8}\n",
     "promote applies to fp8 only"),
    # 128 x 256 accumulators a thread: no slicing leaves room for two partial sets
    (FP8_GROUP.replace("128, 128, 128", "256, 256, 128") + "    cuda: {schedule: cooperative}\n",
     "fp8 tile 256x256 with promote tile: no N slicing leaves room"),
])
def test_bad_fp8_promote_names_file_and_line(text, message):
    with pytest.raises(ManifestError) as info:
        expand(parse(text), ["sm_90a"])
    assert str(info.value).startswith("kernels.yaml:7: ") and message in str(info.value), str(info.value)


@pytest.mark.parametrize("text, message", [
    # one 128-byte row of shared memory a K step for fp8, one or two for 16-bit
    (FP8_GROUP.replace("128, 128, 128", "128, 128, 64"), "tile K must be 128 for fp8_e4m3"),
    (FP8_GROUP.replace("fp8_e4m3", "bf16").replace("128, 128, 128", "128, 128, 32"),
     "tile K must be 64 or 128 for bf16"),
])
def test_bad_tile_k_names_file_and_line(text, message):
    with pytest.raises(ManifestError) as info:
        expand(parse(text), ["sm_90a"])
    assert str(info.value).startswith("kernels.yaml:5: ") and message in str(info.value), str(info.value)


def test_16_bit_tiles_may_step_k_by_128():
    """bf16 / fp16 CUTLASS tiles: K 64 (kernels.yaml) or 128 (bench/sweeps/sm90_bf16_k128.yaml,
    measured slower); the name carries it."""
    text = FP8_GROUP.replace("fp8_e4m3", "fp16")
    names = [c.name for c in expand(parse(text), ["sm_90a"]).configs]
    assert names == ["gemm_fp16_rcr_standard_128x128x128_c1x1_coop_sm90a"]
    assert config_from_name(names[0]).tile == (128, 128, 128)


def test_ping_pong_tiles_hold_at_most_128x192_accumulators():
    """A ping-pong warp group holds its whole tile: 128x192 (192 fp32 accumulators a thread,
    kernels.yaml) builds, 128x256 is refused with file and line; 64 rows take any N."""
    text = FP8_GROUP.replace("fp8_e4m3", "bf16").replace("128, 128, 128", "TILE") + "    cuda: {schedule: pingpong}\n"
    names = [c.name for c in expand(parse(text.replace("TILE", "128, 192, 64")), ["sm_90a"]).configs]
    assert names == ["gemm_bf16_rcr_standard_128x192x64_c1x1_pp_sm90a"]
    assert [c.name for c in expand(parse(text.replace("TILE", "64, 256, 64")), ["sm_90a"]).configs] == [
        "gemm_bf16_rcr_standard_64x256x64_c1x1_pp_sm90a"]
    with pytest.raises(ManifestError) as info:
        expand(parse(text.replace("TILE", "128, 256, 64")), ["sm_90a"])
    assert str(info.value).startswith("kernels.yaml:7: ")  # the cuda knobs' line
    assert "ping-pong tile 128x256 holds too many accumulators per warp group" in str(info.value)


def test_skinny_gemm_names_and_rules():
    """algorithm skinny (our decode GEMM): rcr, 16-bit or OCP fp8, tile [8|16|32|64, 16|32,
    warps x 32 (16-bit) or 64 (fp8) k]; its knobs are the tile and fusion (none, or generic: the
    epilogue bits of KernelInfo.features, no batch and no block-wise scale)."""
    from tiledispatch.codegen import families
    ok = GemmKernelConfig("bf16", "rcr", tile=(16, 16, 128), knobs=families.Skinny(), target="sm_90a")
    assert ok.name == "gemm_bf16_rcr_standard_16x16x128_skinny_sm90a" and config_from_name(ok.name) == ok
    assert "cuda::SkinnyGemm<2, 16, 16, 128, 0>" in emit_source(ok)
    generic = GemmKernelConfig("fp8_e4m3", "rcr", tile=(16, 16, 256),
                               knobs=families.knobs_from_yaml(families.Backend.CUDA,
                                                              {"algorithm": "skinny", "fusion": "generic"}),
                               target="sm_90a")
    assert generic.name == "gemm_fp8e4m3_rcr_standard_16x16x256_skinny_generic_sm90a"
    assert config_from_name(generic.name) == generic
    assert generic.knobs.features == 255  # beta, bias N / M, activation, aux, row / column scale, out dtype
    assert "cuda::SkinnyGemm<" in emit_source(generic) and ", 16, 16, 256, 255>" in emit_source(generic)
    with pytest.raises(ValueError, match="unknown fusion 'gelu' for the skinny algorithm"):
        families.knobs_from_yaml(families.Backend.CUDA, {"algorithm": "skinny", "fusion": "gelu"})

    def problems(dtype, layout, tile):
        return ok.knobs.problems("gemm", DType.parse(dtype), Layout.parse(layout), GemmVariant.STANDARD, tile,
                                 "sm_90a")
    assert problems("bf16", "rcr", (16, 16, 128)) == [] and problems("fp8_e4m3", "rcr", (16, 16, 256)) == []
    assert "layout rcr only" in problems("bf16", "rrr", (16, 16, 128))[0]
    assert "fp32" in problems("fp32", "rcr", (16, 16, 128))[0]
    assert "skinny tile must be" in problems("bf16", "rcr", (16, 16, 100))[0]
    assert "skinny tile must be" in problems("fp8_e4m3", "rcr", (16, 16, 96))[0]  # fp8: 64 k a warp step
    assert "32 accumulators" in problems("bf16", "rcr", (64, 32, 128))[0]
    with pytest.raises(ValueError, match="takes no cluster .its knobs are the tile and fusion"):
        families.knobs_from_yaml(families.Backend.CUDA, {"algorithm": "skinny", "cluster": [1, 1]})


def test_split_k_gemm_names_rules_and_source():
    """variant split_k (cuda gemm_sm90.cuh: K parts as the batch of one kernel, fp32
    partials, a second kernel sums them): its own name token; fp16 / bf16 only, in place
    (no pad); refused by the cpu and hip backends with file and line; its source is the
    data-parallel Sm90Gemm with SplitK set."""
    text = FP8_GROUP.replace("fp8_e4m3", "bf16").replace("128, 128, 128", "128, 128, 64") + "    variant: split_k\n"
    configs = expand(parse(text + "    cuda: {cluster: [2, 1]}\n"), ["sm_90a"]).configs
    assert [c.name for c in configs] == ["gemm_bf16_rcr_splitk_128x128x64_c2x1_coop_sm90a"]
    assert config_from_name(configs[0].name) == configs[0]
    assert configs[0].variant is GemmVariant.SPLIT_K and configs[0].reduction is None
    source = emit_source(configs[0])
    assert "cuda::Sm90Gemm<2, 0, false, -1, 128, 128, 64,\n                   2, 1, false, false, false, 1, true>" in source
    assert "CUTLASS_ENABLE_GDC_FOR_SM90" in source  # launched as a programmatic dependent
    for bad, why in ((text.replace("bf16", "fp8_e4m3").replace("128, 128, 64", "128, 128, 128"),
                      "split_k is built for fp16 and bf16 (fp32 partials), not fp8_e4m3"),
                     (text + "    cuda: {misaligned: pad}\n", "split_k reads its operands in place"),
                     (text + "    reduction: atomic\n", "'reduction' applies only to variant stream_k")):
        with pytest.raises(ManifestError) as info:
            expand(parse(bad), ["sm_90a"])
        assert str(info.value).startswith("kernels.yaml:") and why in str(info.value), str(info.value)
    cpu = text.replace("[sm_90a]", "[cpu]")
    with pytest.raises(ManifestError) as info:
        expand(parse(cpu), ["cpu"])
    assert str(info.value).startswith("kernels.yaml:5: ")  # the variant's tile line
    assert "variant split_k is built by the cuda backend only (sm_90a)" in str(info.value)
    with pytest.raises(ValueError, match="reduction applies only to variant stream_k"):
        GemmKernelConfig("bf16", "rcr", "split_k", "atomic", (128, 128, 64), target="sm_90a")


def test_cutlass_is_found_in_the_venv_an_isolated_build_hides(tmp_path, monkeypatch):
    """`pip install .` builds in an isolated environment whose PYTHONPATH (with a
    sitecustomize) hides the venv's packages, where the user installed nvidia-cutlass: the
    generator looks for the package as the interpreter sees it without that overlay. Shown
    with pyyaml, hidden the way pip hides it."""
    from tiledispatch.codegen import toolchain
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "sitecustomize.py").write_text(
        "import sys\nsys.path[:] = [p for p in sys.path if 'site-packages' not in p and 'dist-packages' not in p]\n")
    monkeypatch.setenv("PYTHONPATH", str(overlay))
    hidden = subprocess.run([sys.executable, "-c", toolchain.FIND_PACKAGE, "yaml"], capture_output=True, text=True)
    assert hidden.returncode == 0 and hidden.stdout.strip() == ""  # what the build environment sees
    found = toolchain._package_outside_the_build_environment("yaml")
    assert found and (Path(found) / "__init__.py").is_file()


def test_sm90_fusion_knobs_names_rules_and_source():
    """cutlass `fusion` (epilogue | relu | gelu | gelu_tanh | silu), `aux: store` and `out`:
    name tokens _f<act>, _aux, _o<type> (none keeps the plain names), the rules with the
    manifest's file and line, and the Sm90Gemm instance with the activation, aux and out code."""
    text = FP8_GROUP.replace("fp8_e4m3", "bf16").replace("128, 128, 128", "128, 128, 64")
    knobs = "    cuda: {cluster: [1, 1], fusion: [epilogue, gelu_tanh], aux: [none, store], out: [default, fp32]}\n"
    configs = expand(parse(text + knobs), ["sm_90a"]).configs
    assert [c.name for c in configs] == [
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fepi_aux_ofp32_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fepi_aux_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fepi_ofp32_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fepi_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fgelu_tanh_aux_ofp32_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fgelu_tanh_aux_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fgelu_tanh_ofp32_sm90a",
        "gemm_bf16_rcr_standard_128x128x64_c1x1_coop_fgelu_tanh_sm90a"]
    for c in configs:
        assert config_from_name(c.name) == c
    fp8_out = expand(parse(FP8_GROUP + "    cuda: {cluster: [1, 2], fusion: epilogue, out: [fp8_e4m3, fp8_e5m2]}\n"),
                     ["sm_90a"]).configs
    assert [c.name for c in fp8_out] == ["gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_fepi_ofp8e4m3_sm90a",
                                         "gemm_fp8e4m3_rcr_standard_128x128x128_c1x2_coop_fepi_ofp8e5m2_sm90a"]
    assert [config_from_name(c.name).knobs.out for c in fp8_out] == ["fp8_e4m3", "fp8_e5m2"]
    assert ", 0, false, 4>" in emit_source(fp8_out[0])  # TD_OUT_FP8_E4M3
    plain = expand(parse(text + "    cuda: {cluster: [1, 1], fusion: none}\n"), ["sm_90a"]).configs
    assert [c.name for c in plain] == ["gemm_bf16_rcr_standard_128x128x64_c1x1_coop_sm90a"]
    source = emit_source(configs[4])
    assert ("cuda::Sm90Gemm<2, 0, false, -1, 128, 128, 64,\n                   1, 1, false, false, false, 1, "
            "false, 3, true, 1>") in source
    assert "cuda::Sm90Gemm<2, 0, false, -1, 128, 128, 64,\n                   1, 1, false, false, false, 1>" \
        in emit_source(plain[0])  # the plain instance is unchanged
    for bad, why in (
            (text + "    variant: split_k\n    cuda: {fusion: gelu}\n", "a fused epilogue does not run with split_k"),
            (text + "    variant: stream_k\n    reduction: atomic\n    cuda: {fusion: gelu}\n",
             "a fused epilogue is built data-parallel only"),
            (text + "    cuda: {fusion: gelu, misaligned: pad}\n", "a fused epilogue reads C, aux and its vectors in place"),
            (text + "    cuda: {fusion: gelu, epilogue: nosmem}\n", "a fused epilogue needs the tma epilogue"),
            (text + "    cuda: {fusion: gelu, out: bf16}\n", "out bf16 is bf16's default output: leave out unset"),
            (text + "    cuda: {fusion: tanh}\n", "unknown fusion 'tanh'"),
            (text + "    cuda: {aux: store}\n", "aux and out come with a fused epilogue"),
            (text + "    cuda: {fusion: gelu, aux: keep}\n", "unknown aux 'keep' (expected none or store)"),
            (text + "    cuda: {fusion: gelu, out: fp64}\n", "unknown out 'fp64'"),
            (text + "    cuda: {fusion: gelu, out: fp8_e4m3}\n", "out fp8_e4m3 is built for fp8 inputs only, not bf16")):
        with pytest.raises(ManifestError) as info:
            expand(parse(bad), ["sm_90a"])
        assert str(info.value).startswith("kernels.yaml:") and why in str(info.value), str(info.value)
