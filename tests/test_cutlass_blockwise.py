"""The cutlass_blockwise family (fp8 with block-wise scales on sm_90a) as the generator sees it:
its names, its manifest variants, its rules, its emitted source and KernelInfo (features)."""
import re
from pathlib import Path

import pytest

from tiledispatch.codegen import GemmKernelConfig, ManifestError, config_from_name, expand, families, load_manifest
from tiledispatch.codegen import abi
from tiledispatch.codegen.emit import emit_source
from tiledispatch.codegen.families import Cutlass, CutlassBlockwise
from tiledispatch.codegen.model import Backend, Feature

ROOT = Path(__file__).resolve().parents[1]
E4M3_COOP = "gemm_fp8e4m3_rcr_standard_128x128x128_blockwise_c1x1_coop_sm90a"


def test_the_manifest_builds_four_blockwise_kernels():
    configs = [c for c in expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a"]).configs
               if c.family == "cutlass_blockwise"]
    assert [c.name for c in configs] == [
        "gemm_fp8e4m3_rcr_standard_128x128x128_blockwise_c1x1_coop_sm90a",
        "gemm_fp8e4m3_rcr_standard_128x128x128_blockwise_c2x1_coop_sm90a",
        "gemm_fp8e4m3_rcr_standard_64x128x128_blockwise_c1x1_pp_sm90a",
        "gemm_fp8e5m2_rcr_standard_128x128x128_blockwise_c1x1_coop_sm90a",
    ]
    for config in configs:
        assert config_from_name(config.name) == config
        assert config.to_dict()["knobs"]["algorithm"] == "cutlass_blockwise"


def test_names_round_trip_and_do_not_clash_with_the_cutlass_family():
    made = GemmKernelConfig("fp8_e5m2", "rcr", tile=(64, 128, 128), knobs=CutlassBlockwise(1, 2, "pingpong"),
                            target="sm_90a")
    assert made.name == "gemm_fp8e5m2_rcr_standard_64x128x128_blockwise_c1x2_pp_sm90a"
    assert config_from_name(made.name) == made
    assert Cutlass.from_token("blockwise_c1x1_coop") is None
    assert CutlassBlockwise.from_token("c1x1_coop") is None
    assert isinstance(config_from_name("gemm_fp8e4m3_rcr_standard_128x128x128_c1x1_coop_sm90a").knobs, Cutlass)
    assert families.by_code(16) is CutlassBlockwise
    assert "    TD_FAMILY_CUTLASS_BLOCKWISE = 16,\n" in abi.render_c_types(families.FAMILIES)
    assert "cluster" in families.manifest_keys(Backend.CUDA) and "schedule" in families.manifest_keys(Backend.CUDA)


@pytest.mark.parametrize("dtype, layout, tile, knobs, message", [
    ("bf16", "rcr", (128, 128, 64), CutlassBlockwise(), "block-wise scaling is built for fp8_e4m3 and fp8_e5m2, not bf16"),
    ("fp8_e4m3", "rrr", (128, 128, 128), CutlassBlockwise(), "fp8 wgmma needs K-major A and B: layout rcr only"),
    ("fp8_e4m3", "rcr", (128, 64, 128), CutlassBlockwise(), "tile N must be 128, not 64"),
    ("fp8_e4m3", "rcr", (128, 256, 128), CutlassBlockwise(2, 1), "tile N must be 128, not 256"),
    ("fp8_e4m3", "rcr", (128, 128, 64), CutlassBlockwise(), "tile K must be 128 for fp8_e4m3"),
    ("fp8_e4m3", "rcr", (256, 128, 128), CutlassBlockwise(), "cooperative tile 256x128: the mainloop's two "
                                                              "accumulator sets"),
    ("fp8_e4m3", "rcr", (128, 128, 128), CutlassBlockwise(1, 1, "pingpong"), "pingpong tile 128x128"),
    ("fp8_e4m3", "rcr", (64, 128, 128), CutlassBlockwise(), "the cooperative schedule needs tile M 128 or 256"),
    ("fp8_e4m3", "rcr", (128, 128, 128), CutlassBlockwise(4, 1), "cluster 4x1: each side must be 1 or 2"),
])
def test_the_rules(dtype, layout, tile, knobs, message):
    config = GemmKernelConfig(dtype, layout, tile=tile, knobs=knobs, target="sm_90a")
    found = families.problems(knobs, "gemm", config.dtype, config.layout, config.variant, tile, "sm_90a")
    assert any(message in p for p in found), found


def test_the_rules_accept_the_built_tiles_and_refuse_other_variants_and_targets():
    from tiledispatch.codegen.model import DType, GemmVariant, Layout
    ok = [((128, 128, 128), CutlassBlockwise()), ((128, 128, 128), CutlassBlockwise(2, 1)),
          ((64, 128, 128), CutlassBlockwise(1, 1, "pingpong"))]
    for tile, knobs in ok:
        for dtype in (DType.FP8_E4M3, DType.FP8_E5M2):
            assert knobs.problems("gemm", dtype, Layout.RCR, GemmVariant.STANDARD, tile, "sm_90a") == []
    assert "variant standard" in " ".join(CutlassBlockwise().problems(
        "gemm", DType.FP8_E4M3, Layout.RCR, GemmVariant.STREAM_K, (128, 128, 128), "sm_90a"))
    assert CutlassBlockwise().problems("gemm", DType.FP8_E4M3, Layout.RCR, GemmVariant.STANDARD, (128, 128, 128),
                                       "gfx942") == ["the cuda backend builds kernels for sm_90a only, not gfx942"]
    assert families.problems(CutlassBlockwise(), "conv", DType.FP8_E4M3, None, None, (128, 128, 128), "sm_90a")


def test_a_bad_knob_is_refused(tmp_path):
    path = tmp_path / "kernels.yaml"
    path.write_text("schema_version: 1\ngemm:\n  - dtype: fp8_e4m3\n    layout: rcr\n"
                    "    tile: [128, 128, 128]\n    targets: [sm_90a]\n"
                    "    cuda: {algorithm: cutlass_blockwise, promote: 4}\n")
    with pytest.raises(ManifestError, match="the cutlass_blockwise algorithm takes no promote"):
        expand(load_manifest(path), ["sm_90a"])


def test_the_emitted_source_and_its_kernel_info():
    text = emit_source(config_from_name(E4M3_COOP))
    assert '#include "cuda/gemm_sm90_blockwise.cuh"' in text
    assert "CUTLASS_ENABLE_GDC_FOR_SM90" not in text  # never a programmatic dependent
    assert "cuda::Sm90BlockwiseGemm<3, 128, 128, 128, 1, 1, false>" in text
    assert "double cutlass_blockwise_gemm_cost(const KernelInfo&, const TdGemmProblem&, const CostContext&);" in text
    info = re.search(r"KernelInfo\{(.*)\}", text).group(1).split(", ")
    fields = [f for f, _ in abi.KERNEL_INFO]
    assert len(info) == len(fields)
    value = dict(zip(fields, info))
    assert value["family"] == "16" and value["features"] == str(Feature.BLOCK_SCALE.code) == "512"
    assert (value["cluster_m"], value["cluster_n"], value["pingpong"]) == ("1", "1", "0")
    pp = emit_source(config_from_name("gemm_fp8e4m3_rcr_standard_64x128x128_blockwise_c1x1_pp_sm90a"))
    assert "cuda::Sm90BlockwiseGemm<3, 64, 128, 128, 1, 1, true>" in pp


def test_the_cost_source_is_compiled_with_the_others():
    from tiledispatch.codegen import cli
    assert (ROOT / "bindings" / CutlassBlockwise.COST_SOURCE).is_file()
    assert (ROOT / "bindings" / CutlassBlockwise.HEADER).is_file()
    assert "bindings/cost/cutlass_blockwise.cpp" in cli._sources("cost")
