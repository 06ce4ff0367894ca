"""The hip backend without an AMD GPU: codegen rules, the shared engine run by the host
emulator, and the gfx942 assembly of every dtype holding its MFMA instructions.

The assembly tests need a HIP compiler (CI installs Debian's clang-19, lld-19,
libamdhip64-dev and rocm-device-libs); they skip with the reason where there is none."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tiledispatch.codegen import emit, manifest
from tiledispatch.codegen import DType, GemmKernelConfig, config_from_name
from tiledispatch.codegen.families import Mfma as HipKnobs
from tiledispatch.codegen.toolchain import hip_toolchain

ROOT = Path(__file__).resolve().parents[1]


def hip_or_skip(targets=("gfx942",)):
    try:
        return hip_toolchain(list(targets))
    except ValueError as err:
        pytest.skip(f"no HIP toolchain for {', '.join(targets)}: {err}")


def default_hip_configs(target="gfx942"):
    return manifest.expand(manifest.load_manifest(ROOT / "kernels.yaml"), [target]).configs


# ---------------------------------------------------------------- codegen

GENERIC = "gemm_bf16_rcr_standard_128x128x32_w2x2x1_m32x32x8_compv3_intrawave_pad_generic_gfx942"


def test_hip_names_round_trip_and_carry_every_knob():
    configs = default_hip_configs()
    assert configs, "the default manifest has gfx942 variants"
    for c in configs:
        assert config_from_name(c.name) == c
    name = "gemm_bf16_rcr_streamk_atomic_128x128x32_w2x2x1_m32x32x8_compv3_intrawave_pad_gfx942"
    assert name in {c.name for c in configs}
    c = config_from_name(name)
    assert c.knobs == HipKnobs(2, 2, 1, 32, 32, 8, "compv3", "intrawave", True)


def test_default_manifest_covers_every_gfx942_dtype_and_both_reductions():
    configs = default_hip_configs()
    gemm = [c for c in configs if c.op == "gemm"]
    assert {c.dtype for c in gemm} == {DType.FP16, DType.BF16, DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ}
    assert {c.reduction.key for c in gemm if c.reduction} == {"atomic", "deterministic"}
    conv = [c for c in configs if c.op == "conv"]
    assert {(c.direction.key, c.ndim) for c in conv} == {(d, n) for d in ("fwd", "bwd_data", "bwd_weight")
                                                          for n in (1, 2, 3)}


def test_generic_variants_name_their_fusion_and_declare_their_features():
    from tiledispatch.codegen.frame import kernel_info
    from tiledispatch.codegen.model import Feature
    configs = {c.name: c for c in default_hip_configs()}
    generic = sorted(n for n in configs if "_generic_" in n)
    assert generic == [GENERIC, GENERIC.replace("bf16", "fp16")]
    c = config_from_name(GENERIC)
    assert c == configs[GENERIC] and c.knobs.fusion == "generic"
    assert c.knobs == HipKnobs(2, 2, 1, 32, 32, 8, "compv3", "intrawave", True, "generic")
    every_but_block_scale = sum(f.code for f in Feature) - Feature.BLOCK_SCALE.code
    assert kernel_info(c)["features"] == every_but_block_scale == 511
    assert "hip::HipGemmGeneric<2, 0, false, -1, 128, 128, 32, 2, 2, 1, 32, 32, 8," in c.knobs.instance(c)
    assert c.knobs.instance(c).endswith("true, false, true, 511>")
    # the plain variant of the same tile: its name, its instance and features 0, as before
    plain = configs[GENERIC.replace("_generic", "")]
    assert plain.knobs.fusion == "none" and kernel_info(plain)["features"] == 0
    assert plain.knobs.instance(plain).startswith("hip::HipGemm<2, 0, false, -1, 128, 128, 32")
    assert plain.knobs.to_dict()["fusion"] == "none"


def test_generic_fusion_is_gemm_only_and_checked():
    knobs = HipKnobs(2, 2, 1, fusion="generic")
    assert "fusion applies to gemm only" in knobs.problems("conv", DType.FP16, None, None, (128, 128, 32), "gfx942")
    assert knobs.problems("gemm", DType.FP16, None, None, (128, 128, 32), "gfx942") == []
    with pytest.raises(ValueError, match="unknown fusion 'fused'"):
        HipKnobs.from_yaml({"fusion": "fused"})
    assert HipKnobs.from_token("w2x2x1_m32x32x8_mem_interwave_nopad_generic") == \
        HipKnobs(2, 2, 1, 32, 32, 8, "mem", "interwave", False, "generic")
    assert HipKnobs.from_token("w2x2x1_m32x32x8_mem_interwave_nopad_fused") is None


@pytest.mark.parametrize("dtype, target, warp, why", [
    ("fp8_e4m3_fnuz", "gfx90a", (32, 32, 16), "gfx90a has no MFMA for fp8_e4m3_fnuz"),
    ("fp8_e4m3", "gfx942", (32, 32, 16), "gfx942 has no MFMA for fp8_e4m3 "),
    ("fp8_e4m3_fnuz", "gfx950", (32, 32, 16), "gfx950 has no MFMA for fp8_e4m3_fnuz"),
    ("fp16", "gfx942", (32, 32, 16), "warp tile 32x32x16 is not an MFMA shape of fp16 on gfx942"),
    ("bf16", "gfx942", (16, 16, 8), "warp tile 16x16x8 is not an MFMA shape"),
])
def test_mfma_shapes_are_checked_per_dtype_and_architecture(dtype, target, warp, why):
    knobs = HipKnobs(2, 2, 1, *warp)
    problems = knobs.problems("gemm", DType.parse(dtype), None, None, (128, 128, 64), target)
    assert any(why in p for p in problems), problems


def test_wave_shapes_and_lds_capacity_are_checked():
    assert any("wave shape 3x1x1" in p for p in
               HipKnobs(3, 1, 1).problems("gemm", DType.FP16, None, None, (96, 128, 32), "gfx942"))
    lds = HipKnobs(2, 2, 1).problems("gemm", DType.FP16, None, None, (256, 256, 64), "gfx942")
    assert any("bytes of LDS (64 KiB max)" in p for p in lds), lds
    assert HipKnobs(1, 4, 1, 16, 16, 16).problems("gemm", DType.BF16, None, None, (64, 128, 32), "gfx942") == []


def test_a_bad_hip_variant_in_a_manifest_names_file_and_line(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text("schema_version: 1\ngemm:\n  - dtype: fp8_e4m3_fnuz\n    layout: rcr\n"
                    "    tile: [128, 128, 64]\n    targets: [gfx90a]\n"
                    "    hip: {warp_tile: [32, 32, 16]}\n")
    with pytest.raises(manifest.ManifestError) as info:
        manifest.expand(manifest.load_manifest(path), ["gfx90a"])
    assert f"{path}:7" in str(info.value) and "gfx90a has no MFMA for fp8_e4m3_fnuz" in str(info.value)


def test_fnuz_types_map_to_ml_dtypes_and_are_not_built_for_cpu_or_cuda():
    import ml_dtypes
    import numpy as np
    from tiledispatch.arrays import numpy_dtype
    assert numpy_dtype(DType.FP8_E4M3_FNUZ) == np.dtype(ml_dtypes.float8_e4m3fnuz)
    assert numpy_dtype(DType.FP8_E5M2_FNUZ) == np.dtype(ml_dtypes.float8_e5m2fnuz)
    cfg = GemmKernelConfig("fp8_e4m3_fnuz", "rcr", tile=(96, 128, 256))
    assert any("FNUZ" in p for p in cfg.knobs.problems("gemm", cfg.dtype, cfg.layout, cfg.variant, cfg.tile, "cpu"))


def test_amd_gpus_are_found_through_the_kfd_topology(tmp_path, monkeypatch):
    from tiledispatch._cuda import amd_targets
    for i, version in enumerate((0, 90402, 90010, 90402)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "properties").write_text(f"cpu_cores_count 4\ngfx_target_version {version}\n")
    assert amd_targets(str(tmp_path)) == ("gfx942", "gfx90a")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    assert amd_targets(str(tmp_path)) == ()


# ---------------------------------------------------------------- the engine, emulated

def test_the_mfma_engine_computes_right_in_the_host_emulator(tmp_path):
    """GEMM (every layout, stream-K both reductions, fp16/bf16/fp8 OCP and FNUZ, odd sizes)
    and conv (fwd, bwd_data, bwd_weight; 1D/2D/3D, stride, dilation) through the same engine
    the gfx942 kernels are built from."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    exe = tmp_path / "hip_emulator"
    subprocess.run([cxx, "-std=c++17", "-O2", f"-I{ROOT / 'bindings'}", f"-I{ROOT / 'bindings' / 'include'}",
                    str(ROOT / "tests" / "hip_emulator.cpp"), "-o", str(exe)], check=True)
    done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    print(done.stdout)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[-1] == "all cases within tolerance"
    assert sum(line.startswith("ok ") for line in lines) == 26
    assert any("stream-K atomic" in line for line in lines) and any("stream-K deterministic" in line for line in lines)
    # the generic epilogue: the four activations' fp32 math, then six GEMMs through it
    assert sum(line.startswith("ok   activation ") for line in lines) == 4
    epilogue = [line for line in lines if line.startswith("ok   epilogue ")]
    assert len(epilogue) == 6
    for needed in ("act 1", "act 2", "act 3", "act 4", "bias 1", "bias 2", "(C is D)", "aux", "row_scale",
                   "col_scale", "out 1", "out 2", "out 3", "A broadcast", "B broadcast", "batch 3",
                   "stream-K atomic", "stream-K deterministic", "data-parallel"):
        assert any(needed in line for line in epilogue), needed


# ---------------------------------------------------------------- gfx942 ISA

MFMA = {  # (dtype, MFMA shape) -> the instruction gfx942 assembly must hold
    (DType.FP16, (32, 32, 8)): "v_mfma_f32_32x32x8_f16",
    (DType.FP16, (16, 16, 16)): "v_mfma_f32_16x16x16_f16",
    (DType.BF16, (32, 32, 8)): "v_mfma_f32_32x32x8_bf16",
    (DType.BF16, (16, 16, 16)): "v_mfma_f32_16x16x16_bf16",
    (DType.FP8_E4M3_FNUZ, (32, 32, 16)): "v_mfma_f32_32x32x16_fp8_fp8",
    (DType.FP8_E4M3_FNUZ, (16, 16, 32)): "v_mfma_f32_16x16x32_fp8_fp8",
    (DType.FP8_E5M2_FNUZ, (32, 32, 16)): "v_mfma_f32_32x32x16_bf8_bf8",
    (DType.FP8_E5M2_FNUZ, (16, 16, 32)): "v_mfma_f32_16x16x32_bf8_bf8",
}


def one_per_mfma():
    seen, out = set(), []
    for c in default_hip_configs():
        key = (c.dtype, c.knobs.warp)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


@pytest.mark.parametrize("config", one_per_mfma(), ids=lambda c: c.name)
def test_gfx942_assembly_holds_the_mfma_of_its_dtype(config, tmp_path):
    compiler, flags = hip_or_skip()
    src = tmp_path / f"{config.name}.hip"
    emit.write_if_changed(src, emit.emit_source(config))
    asm = tmp_path / f"{config.name}.s"
    subprocess.run([compiler, "-x", "hip", "--offload-arch=gfx942", *flags["gfx942"], "-O3", "-std=c++17",
                    "-DNDEBUG", f"-I{ROOT / 'bindings' / 'include'}", f"-I{ROOT / 'bindings'}",
                    "--cuda-device-only", "-S", str(src), "-o", str(asm)], check=True)
    text = asm.read_text()
    want = MFMA[(config.dtype, config.knobs.warp)]
    assert want in text, f"{config.name}: no {want} in the gfx942 assembly"
    others = {v for k, v in MFMA.items() if v != want}
    assert not any(o in text for o in others)
    # accumulators and fragments in registers: no kernel of the file uses scratch memory
    scratch = [int(v) for v in re.findall(r"\.private_segment_fixed_size:\s+(\d+)", text)]
    assert scratch and max(scratch) == 0, f"{config.name}: scratch bytes per lane {scratch}"


def test_gfx942_assembly_of_the_generic_variant(tmp_path):
    """The generic variant: one kernel per activation (and its fix-up), each with the MFMA of
    its dtype, no scratch memory (the epilogue goes through LDS, the accumulators stay in
    registers) and no function call."""
    compiler, flags = hip_or_skip()
    config = config_from_name(GENERIC)
    src = tmp_path / f"{config.name}.hip"
    emit.write_if_changed(src, emit.emit_source(config))
    asm = tmp_path / f"{config.name}.s"
    subprocess.run([compiler, "-x", "hip", "--offload-arch=gfx942", *flags["gfx942"], "-O3", "-std=c++17",
                    "-DNDEBUG", f"-I{ROOT / 'bindings' / 'include'}", f"-I{ROOT / 'bindings'}",
                    "--cuda-device-only", "-S", str(src), "-o", str(asm)], check=True)
    text = asm.read_text()
    kernels = re.findall(r"^\s+\.name:\s+(_Z\S*mfma_gemm_kernel\S*)", text, re.M)
    assert len(kernels) == 5, kernels  # none, relu, gelu, gelu_tanh, silu
    assert "v_mfma_f32_32x32x8_bf16" in text
    scratch = [int(v) for v in re.findall(r"\.private_segment_fixed_size:\s+(\d+)", text)]
    assert len(scratch) == 10 and max(scratch) == 0, scratch
    assert "s_swappc" not in text


def test_every_dtype_of_gfx942_is_checked_in_assembly():
    assert {c.dtype for c in one_per_mfma()} == {DType.FP16, DType.BF16, DType.FP8_E4M3_FNUZ, DType.FP8_E5M2_FNUZ}
