"""The cutlass_grouped family (CUTLASS sm90 pointer-array grouped GEMM) and the GEMM variant
`grouped` it alone builds: names, manifest rules, the emitted source, the ABI codes. No build:
the GPU side is tests/test_gpu_grouped_gemm.py."""
import re
from pathlib import Path

import pytest

from tiledispatch.codegen import GemmKernelConfig, ManifestError, config_from_name, expand, families, load_manifest
from tiledispatch.codegen.cli import _sources
from tiledispatch.codegen.emit import emit_source
from tiledispatch.codegen.families import Cutlass, CutlassGrouped
from tiledispatch.codegen.model import DType, GemmVariant, Layout

ROOT = Path(__file__).resolve().parents[1]
NAME = "gemm_bf16_rcr_grouped_128x128x64_ptrarray_c1x1_coop_sm90a"

GROUP = """\
schema_version: 1
gemm:
  - name: grouped
    dtype: bf16
    layout: rcr
    variant: grouped
    tile: [128, 128, 64]
    targets: [sm_90a]
    cuda: {algorithm: cutlass_grouped, cluster: [1, 1], schedule: cooperative}
"""


def manifest(tmp_path, text):
    path = tmp_path / "kernels.yaml"
    path.write_text(text)
    return load_manifest(path)


def test_the_name_carries_the_variant_and_the_knobs_and_round_trips():
    config = config_from_name(NAME)
    assert config == GemmKernelConfig(DType.BF16, Layout.RCR, GemmVariant.GROUPED, None, (128, 128, 64),
                                      CutlassGrouped(1, 1, "cooperative"), "sm_90a")
    assert config.family == "cutlass_grouped" and config.name == NAME
    pp = config_from_name("gemm_fp16_rcr_grouped_64x128x64_ptrarray_c1x1_pp_sm90a")
    assert pp.knobs == CutlassGrouped(1, 1, "pingpong")
    # the cutlass family's token does not parse as a grouped one, nor the other way round
    assert CutlassGrouped.from_token("c1x1_coop") is None
    assert Cutlass.from_token("ptrarray_c1x1_coop") is None


def test_family_code_and_abi_enums():
    assert CutlassGrouped.CODE == 15 and families.by_code(15) is CutlassGrouped
    header = (ROOT / "bindings/include/tiledispatch/abi_types.h").read_text()
    assert "TD_FAMILY_CUTLASS_GROUPED = 15," in header
    assert "TD_GEMM_GROUPED = 3," in header
    assert "bindings/cost/cutlass_grouped.cpp" in _sources("cost")


def test_the_manifest_group_expands_to_the_grouped_variant(tmp_path):
    configs = expand(manifest(tmp_path, GROUP), ["sm_90a"]).configs
    assert [c.name for c in configs] == [NAME]


@pytest.mark.parametrize("change, message", [
    (("    variant: grouped\n", ""), "algorithm cutlass_grouped builds the variant grouped only, not standard"),
    (("algorithm: cutlass_grouped, ", ""), "the variant grouped is built by algorithm cutlass_grouped"),
    (("dtype: bf16", "dtype: fp8_e5m2"), "grouped GEMMs are built for fp16, bf16 and fp8_e4m3, not fp8_e5m2"),
    (("tile: [128, 128, 64]", "tile: [128, 128, 32]"), "tile K must be 64 or 128 for bf16"),
    (("tile: [128, 128, 64]", "tile: [64, 128, 64]"), "the cooperative schedule needs tile M 128 or 256, not 64"),
    (("targets: [sm_90a]", "targets: [cpu]"), "the variant grouped is not built on the cpu backend"),
])
def test_the_rules_name_file_and_line(tmp_path, change, message):
    text = GROUP.replace(*change)
    if "targets: [cpu]" in text:
        text = text.replace("    cuda: {algorithm: cutlass_grouped, cluster: [1, 1], schedule: cooperative}\n", "")
    with pytest.raises(ManifestError) as info:
        expand(manifest(tmp_path, text), ["sm_90a", "cpu"])
    rendered = str(info.value)
    assert rendered.startswith(f"{tmp_path / 'kernels.yaml'}:"), rendered
    assert message in rendered, rendered


@pytest.mark.parametrize("key", ["epilogue: nosmem", "misaligned: pad", "promote: 8"])
def test_knobs_of_the_cutlass_family_are_refused(tmp_path, key):
    text = GROUP.replace("schedule: cooperative}", f"schedule: cooperative, {key}}}")
    with pytest.raises(ManifestError, match=r"the cutlass_grouped algorithm takes no .* \(it takes cluster and schedule\)"):
        expand(manifest(tmp_path, text), ["sm_90a"])


def test_the_emitted_source_instantiates_the_grouped_template():
    text = emit_source(config_from_name(NAME))
    assert '#include "cuda/gemm_sm90_grouped.cuh"' in text
    assert "make_kernel<GemmKernel,\n    cuda::Sm90GroupedGemm<2, 0, 128, 128, 64, 1, 1, false>>(" in text
    assert "&cutlass_grouped_gemm_cost" in text
    info = re.search(r"KernelInfo\{(.*)\}", text).group(1).split(", ")
    # name, family, dtype, layout, variant (3: grouped), reduction
    assert info[:6] == [f'"{NAME}"', "15", "2", "0", "3", "-1"]
    assert info[-1] == "0"  # features: D = alpha * A * B alone


def test_the_default_manifest_builds_grouped_variants_for_sm90a_only():
    configs = expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a", "cpu"]).configs
    grouped = [c for c in configs if c.op == "gemm" and c.variant is GemmVariant.GROUPED]
    assert grouped and all(c.family == "cutlass_grouped" and c.target == "sm_90a" for c in grouped)
    assert {c.dtype for c in grouped} == {DType.BF16, DType.FP16, DType.FP8_E4M3}
    assert all(c.family != "cutlass_grouped" for c in configs
               if c.op == "gemm" and c.variant is not GemmVariant.GROUPED)


def test_ci_compiles_a_grouped_variant():
    assert "gemm_bf16_rcr_grouped_128x128x64_ptrarray_c1x1_coop_sm90a" in (ROOT / ".ci/run").read_text()


def test_the_bench_needs_no_torch_for_help_and_dry_run():
    """bench/grouped_gemm.py: --help and --dry-run (the MoE shapes and the routing's loads)."""
    import subprocess
    import sys
    bench = ROOT / "bench" / "grouped_gemm.py"
    out = subprocess.run([sys.executable, str(bench), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "torch._grouped_mm" in out.stdout
    out = subprocess.run([sys.executable, str(bench), "--dry-run", "--tokens", "1024"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 4  # two models x (gate_up, down)
    assert any(line.startswith("Mixtral-8x7B  tokens   1024 gate_up  rows    2048 K  4096 N 28672") for line in lines)
    assert any(line.startswith("DeepSeek-V3   tokens   1024 down     rows    8192 K  2048 N  7168") for line in lines)


def test_the_bench_routing_is_seeded_and_imbalanced():
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("grouped_bench", ROOT / "bench" / "grouped_gemm.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks its module up
    spec.loader.exec_module(bench)
    counts = bench.route(4096, 256, 8)
    assert counts.sum() == 4096 * 8 and (counts == bench.route(4096, 256, 8)).all()
    assert 2.0 < counts.max() / counts.mean() < 6.0
