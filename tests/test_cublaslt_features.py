"""The cublaslt family's GEMM features on the codegen side (no GPU, no cuBLASLt needed):
KernelInfo.features of every cublaslt variant of the default manifest, the template instance
that checks them at compile time (static_assert in bindings/cuda/gemm_cublaslt.cuh), and the
refusals its supports() documents. The GPU side: tests/test_gpu_vendor.py, whose float64
references are checked here against the ABI's reference implementation (the cpu target's
`fusion: generic` kernels) so that a GPU failure there is the vendor mapping's, not the test's."""

import re

import pytest

from conftest import ROOT

from tiledispatch.codegen import expand, load_manifest
from tiledispatch.codegen.families.cublaslt import features_of
from tiledispatch.codegen.frame import definition, kernel_info
from tiledispatch.codegen.model import DType, Feature

EVERY_DTYPE = (Feature.BETA.code | Feature.BIAS_N.code | Feature.ACTIVATION.code | Feature.AUX.code
               | Feature.OUT_DTYPE.code | Feature.BATCH.code)
FP8_ONLY = Feature.ROW_SCALE.code | Feature.COL_SCALE.code | Feature.BLOCK_SCALE.code


def cublaslt_configs():
    configs = expand(load_manifest(ROOT / "kernels.yaml"), ["sm_90a"]).configs
    return [c for c in configs if c.op == "gemm" and c.family == "cublaslt"]


def test_feature_values():
    assert EVERY_DTYPE == 411 and EVERY_DTYPE | FP8_ONLY == 1019
    assert features_of(DType.BF16) == features_of(DType.FP16) == 411
    assert features_of(DType.FP8_E4M3) == 1019
    # never bias along M (cuBLASLt has no such epilogue): the core refuses it before supports()
    assert not features_of(DType.FP8_E4M3) & Feature.BIAS_M.code


def test_every_cublaslt_variant_registers_its_features():
    configs = cublaslt_configs()
    assert len(configs) == 9
    for config in configs:
        info = kernel_info(config)
        want = 1019 if config.dtype is DType.FP8_E4M3 else 411
        assert info["features"] == want, config.name
        assert info["vendor"] == 1, config.name
        source = definition(config)
        # the instance carries the bits; the template static_asserts they are what run_ex does
        assert f"cuda::CublasLtGemm<{config.dtype.code}, {config.layout.code}, {want}>" in source, config.name
        assert re.search(rf"KernelInfo\{{\"{config.name}\",.*, {want}\}}", source), config.name


def test_named_variants():
    names = {c.name: kernel_info(c)["features"] for c in cublaslt_configs()}
    assert names["gemm_bf16_rcr_standard_1x1x1_cublaslt_sm90a"] == 411
    assert names["gemm_fp16_ccr_standard_1x1x1_cublaslt_sm90a"] == 411
    assert names["gemm_fp8e4m3_rcr_standard_1x1x1_cublaslt_sm90a"] == 1019


def test_header_features_match_the_family():
    """The C++ template's kFeatures is the same set as the family's (the static_assert ties
    them at compile time; this reads the header so a CPU-only checkout sees a mismatch too)."""
    header = (ROOT / "bindings/cuda/gemm_cublaslt.cuh").read_text()
    block = re.search(r"kFeatures = (.*?);", header, re.S).group(1)
    every = set(re.findall(r"TD_FEATURE_(\w+)", block.split("(fp8 ?")[0]))
    fp8 = set(re.findall(r"TD_FEATURE_(\w+)", block.split("(fp8 ?")[1]))
    from tiledispatch.codegen.families.cublaslt import FEATURES, FP8_FEATURES
    assert every == {f.name for f in FEATURES}
    assert fp8 == {f.name for f in FP8_FEATURES}


def test_header_refusals_are_documented():
    """supports() refuses what the coarse feature bits cannot say, each with its reason."""
    header = " ".join((ROOT / "bindings/cuda/gemm_cublaslt.cuh").read_text().split())
    header = header.replace('" "', "")  # C++ string literals continued on the next line
    assert "cuBLASLt's bias runs along the rows of its column-major D^T" in header  # why no BIAS_M bit
    for reason in ("it has no erf GELU", "cuBLASLt has no SiLU epilogue",
                   "cuBLASLt's ReLU aux output is a bit mask, not the pre-activation value",
                   "aux needs activation gelu_tanh", "cuBLASLt has no fp16 matmul with a bf16 output",
                   "cuBLASLt has no bf16 matmul with an fp16 output", "with an fp32 output takes a bf16 bias",
                   "cuBLASLt's 128-element block scales need M and N multiples of 4",
                   "cuBLASLt's scale modes take fp8 inputs only",
                   "block-wise scales with a batch are not implemented"):
        assert reason in header, reason


# ---- tests/test_gpu_vendor.py's cublaslt cases on the cpu target's generic kernels -----------

CPU_TWINS = {"LT_BF16": "gemm_bf16_rcr_standard_48x64x128_r6x16_generic_cpu",
             "LT_FP16_CCR": "gemm_fp16_ccr_standard_48x64x128_r6x16_generic_cpu",
             "LT_FP8": "gemm_fp8e4m3_rcr_standard_48x64x128_r6x16_generic_cpu"}


@pytest.fixture
def on_cpu(monkeypatch):
    """test_gpu_vendor with its cublaslt kernel names replaced by the cpu generic twins."""
    pytest.importorskip("torch", reason="the GPU tests' references need torch")
    import tiledispatch as td
    try:
        cpu = {k.name for k in td.registry().kernels("gemm", "cpu")}
    except Exception as err:  # noqa: BLE001 - no built library: nothing to run on
        pytest.skip(f"no cpu library: {err}")
    missing = set(CPU_TWINS.values()) - cpu
    if missing:
        pytest.skip(f"not built: {', '.join(sorted(missing))}")
    import test_gpu_vendor as vendor
    monkeypatch.setattr(vendor, "DEVICE", "cpu")
    for name, twin in CPU_TWINS.items():
        monkeypatch.setattr(vendor, name, twin)
    return vendor


def test_gpu_references_agree_with_the_cpu_reference(on_cpu):
    v = on_cpu
    for _, case in v.LT_CASES:
        v.test_cublaslt_bf16_features(dict(case))
    v.test_cublaslt_fp16_ccr_features()
    for _, case in v.FP8_CASES:
        v.test_cublaslt_fp8_features(dict(case))
    for rows, cols in ((True, True), (True, False), (False, True)):
        v.test_cublaslt_fp8_row_and_column_scales(rows, cols)
    v.test_cublaslt_fp8_row_scales_with_a_batch_run_or_are_refused_by_cublaslt()
    for shape in ((128, 384, 512), (64, 320, 384), (36, 264, 208)):
        v.test_cublaslt_fp8_block_scales(shape)
    v.test_cublaslt_fp8_block_scales_with_an_epilogue_run_or_are_refused_by_cublaslt()
