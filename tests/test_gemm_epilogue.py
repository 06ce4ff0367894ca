"""Fused GEMM epilogues on the cpu target: D = act(alpha * (A @ B) * row_scale * col_scale +
beta * C + bias), aux = the pre-activation, against float64 references on the same quantized
inputs; and every kernel that does not implement a feature refuses the problem."""
import itertools
import subprocess
import sys
import json

import ml_dtypes
import numpy as np
import pytest

td = pytest.importorskip("tiledispatch")
from tiledispatch import reference  # noqa: E402
from tiledispatch.codegen import Activation, Bias, OutDType, config_from_name  # noqa: E402

NP = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
INPUTS = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
          "fp8_e5m2": ml_dtypes.float8_e5m2}
DEFAULT_OUT = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "bf16", "fp8_e5m2": "bf16"}


def cpu_or_skip():
    if "cpu" not in {lib["target"] for lib in td.registry().libraries if lib["op"] == "gemm"}:
        pytest.skip("no cpu gemm library in this installation")


def matrix(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(INPUTS.get(dtype, dtype))


def check(actual, ref, mag, out_key, k):
    cmp = reference.compare_out(actual, ref, mag, out_key, k)
    assert cmp["ok"], cmp


@pytest.mark.parametrize("dtype,activation,out,along,beta,scales", [
    (dtype, act, out, along, beta, scales)
    for (dtype, act), out, along, beta, scales in zip(
        itertools.product(INPUTS, [a.key for a in Activation]),
        itertools.cycle(["default", "fp32", "bf16", "fp16"]), itertools.cycle(["n", "m", None]),
        itertools.cycle([0.0, 0.5, -1.0]), itertools.cycle([False, True]))])
def test_epilogue_combinations_match_float64(rng, dtype, activation, out, along, beta, scales):
    cpu_or_skip()
    M, N, K = 37, 29, 131
    out_key = DEFAULT_OUT[dtype] if out == "default" else out
    a, b = matrix(rng, (M, K), dtype), matrix(rng, (K, N), dtype)
    c = matrix(rng, (M, N), out_key) if beta else None
    bias = matrix(rng, (N if along == "n" else M,), out_key) if along else None
    rs = rng.uniform(0.5, 2, M).astype(np.float32) if scales else None
    cs = rng.uniform(0.5, 2, N).astype(np.float32) if scales else None
    d, aux = td.gemm(a, b, alpha=1.5, c=c, beta=beta if c is not None else None, bias=bias,
                     bias_along=along or "n", activation=activation, row_scale=rs, col_scale=cs,
                     out_dtype=None if out == "default" else out, return_aux=True, target="cpu")
    assert d.dtype == NP[out_key] and aux.dtype == NP[out_key] and d.shape == (M, N)
    pre, ref, mag = reference.gemm_epilogue(a, b, alpha=1.5, beta=beta, c=c, bias=bias, bias_along=along or "n",
                                            activation=activation, row_scale=rs, col_scale=cs)
    check(d, ref, mag, out_key, K)
    check(aux, pre, mag, out_key, K)


@pytest.mark.parametrize("layout", ["rcr", "rrr", "crr", "ccr"])
def test_every_layout_and_odd_sizes(rng, layout):
    cpu_or_skip()
    for M, N, K in [(1, 1, 1), (7, 130, 3), (97, 5, 257)]:
        a, b = matrix(rng, (M, K), "fp32"), matrix(rng, (K, N), "fp32")
        a = a if layout[0] == "r" else np.asfortranarray(a)
        b = b if layout[1] == "r" else np.asfortranarray(b)
        bias = matrix(rng, (N,), "fp32")
        d = td.gemm(a, b, bias=bias, activation="relu", target="cpu")
        _, ref, mag = reference.gemm_epilogue(a, b, bias=bias, activation="relu")
        check(d, ref, mag, "fp32", K)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_c_may_be_d_in_place_accumulation(rng, dtype):
    cpu_or_skip()
    M, N, K = 50, 70, 90
    a, b = matrix(rng, (M, K), dtype), matrix(rng, (K, N), dtype)
    d = matrix(rng, (M, N), dtype)
    before = d.copy()
    result = td.gemm(a, b, c=d, out=d, beta=0.75, target="cpu")
    assert result is d
    _, ref, mag = reference.gemm_epilogue(a, b, beta=0.75, c=before)
    check(d, ref, mag, dtype, K)


def test_c_broadcasts_and_beta_zero_does_not_read_c(rng):
    cpu_or_skip()
    a, b = matrix(rng, (8, 16), "fp32"), matrix(rng, (16, 12), "fp32")
    row = matrix(rng, (12,), "fp32")
    d = td.gemm(a, b, c=row, target="cpu")  # beta defaults to 1 with c
    _, ref, mag = reference.gemm_epilogue(a, b, beta=1.0, c=np.broadcast_to(row, (8, 12)))
    check(d, ref, mag, "fp32", 16)
    nan = np.full((8, 12), np.nan, np.float32)
    d = td.gemm(a, b, c=nan, beta=0.0, target="cpu")
    assert np.isfinite(d).all()


def test_aux_array_is_written(rng):
    cpu_or_skip()
    a, b = matrix(rng, (9, 33), "bf16"), matrix(rng, (33, 11), "bf16")
    aux = np.zeros((9, 11), ml_dtypes.bfloat16)
    d = td.gemm(a, b, aux=aux, activation="silu", target="cpu")
    pre, ref, mag = reference.gemm_epilogue(a, b, activation="silu")
    check(aux, pre, mag, "bf16", 33)
    check(d, ref, mag, "bf16", 33)


def test_stream_k_kernels_are_plain_and_generic_kernels_take_plain_problems(rng):
    cpu_or_skip()
    d = td.Dispatcher("gemm", "cpu")
    generic = [k for k in d.kernels if "generic" in k.name]
    assert generic, "the default manifest builds fusion: generic cpu variants"
    a, b = matrix(rng, (20, 30), "fp32"), matrix(rng, (30, 40), "fp32")
    name = next(k.name for k in generic if k.name.startswith("gemm_fp32_rrr"))
    out = td.gemm(a, b, kernel=name, target="cpu")
    ref, mag = reference.gemm(a, b)
    check(out, ref, mag, "fp32", 30)


FEATURES = [(dict(beta=0.5), "beta \\* C"), (dict(bias=Bias.N), "bias along N"), (dict(bias=Bias.M), "bias along M"),
            (dict(activation=Activation.GELU), "activation"), (dict(aux=True), "aux output"),
            (dict(row_scale=True), "row scale"), (dict(col_scale=True), "column scale"),
            (dict(out_dtype=OutDType.FP16), "output dtype"), (dict(batch=2, stride_c=64 * 64), "batch"),
            (dict(block_scale=True), "block-wise scale"),
            (dict(bias=Bias.N, activation=Activation.RELU, aux=True), "bias along N, activation, aux output")]


@pytest.mark.parametrize("fields,named", FEATURES, ids=[",".join(f) for f, _ in FEATURES])
def test_every_kernel_without_the_feature_refuses_it(fields, named):
    cpu_or_skip()
    d = td.Dispatcher("gemm", "cpu")
    for k in d.kernels:
        if "out_dtype" in fields:  # an output type other than the input type's own
            fields = dict(out_dtype=OutDType.BF16 if k.dtype.key == "fp32" else OutDType.FP32)
        problem = td.GemmProblem(64, 64, 64, k.dtype, k.layout, **fields)
        generic = "generic" in k.name
        assert d.is_supported(problem, k.name) == generic, k.name
        if not generic:
            with pytest.raises(td.KernelRejectedError, match=f"this kernel implements no {named} "):
                d.run(problem, 0, 0, 0, kernel=k.name)


def test_only_generic_fused_and_vendor_variants_declare_features():
    """Of the default manifest's GEMM kernels, the generic cpu variants declare every feature;
    the generic gfx942 (mfma) ones every one but block-wise scales; the generic sm_90a skinny ones
    every one but block-wise scales and batch; the sm_90a CUTLASS fused
    variants beta, bias, scales and batch (+ activation, aux, out dtype as built); the plain
    CUTLASS data-parallel and stream-K variants without pad a batch alone; the block-wise fp8
    kernels block-wise scales alone; the cuBLASLt kernels what cuBLASLt computes
    (tests/test_cublaslt_features.py); every other kernel features 0: the dispatcher core
    refuses the rest for them."""
    from conftest import ROOT
    from tiledispatch.codegen import Feature, expand, load_manifest
    from tiledispatch.codegen.frame import kernel_info
    manifest = load_manifest(ROOT / "kernels.yaml")
    every = sum(f.code for f in Feature)
    run_time = (Feature.BETA.code | Feature.BIAS_N.code | Feature.BIAS_M.code | Feature.ROW_SCALE.code
                | Feature.COL_SCALE.code | Feature.BATCH.code)
    generic, fused = {}, 0
    for target in ("cpu", "sm_90a", "gfx942", "gfx90a", "gfx950"):
        for config in expand(manifest, [target]).configs:
            if config.op != "gemm":
                continue
            features = kernel_info(config).get("features", 0)
            knobs = config.knobs
            if config.family == "cublaslt":
                continue
            if config.family == "cutlass_blockwise":  # block-wise scaled problems only
                assert features == Feature.BLOCK_SCALE.code, config.name
            elif config.family == "skinny" and knobs.fusion == "generic":  # the decode GEMM: no batch
                generic[target] = generic.get(target, 0) + 1
                assert features == every - Feature.BLOCK_SCALE.code - Feature.BATCH.code, config.name
            elif getattr(knobs, "fusion", "none") == "generic":
                generic[target] = generic.get(target, 0) + 1
                assert features == (every if target == "cpu" else every - Feature.BLOCK_SCALE.code), config.name
            elif config.family == "cutlass" and knobs.fusion != "none":
                fused += 1
                want = run_time | (Feature.ACTIVATION.code if knobs.fusion != "epilogue" else 0) \
                    | (Feature.AUX.code if knobs.aux else 0) | (Feature.OUT_DTYPE.code if knobs.out else 0)
                assert features == want, config.name
            elif config.family == "cutlass" and not knobs.pad and config.variant.key != "split_k":
                assert features == Feature.BATCH.code, config.name
            else:
                assert features == 0, config.name
    assert generic == {"cpu": 20, "sm_90a": 4, "gfx942": 2} and fused == 35


def test_cli_epilogue_validates():
    cpu_or_skip()
    proc = subprocess.run([sys.executable, "-m", "tiledispatch", "gemm", "40", "24", "200", "--dtype", "bf16",
                           "--bias", "--activation", "gelu", "--beta", "0.5", "--aux", "--target", "cpu",
                           "--validate"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    assert "generic" in out["kernel"]
    assert out["validation"]["accuracy"] == 100.0 and out["validation"]["aux_accuracy"] == 100.0
    assert out["problem"]["epilogue"] == {"beta": 0.5, "bias": "n", "activation": "gelu", "aux": True}


FP8_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}


def fp8_round(x, out_key):
    """x (float32) stored as the fp8 type with saturation, the ABI's rule: beyond the largest
    finite value, that value with x's sign; round to nearest even inside (ml_dtypes)."""
    x = np.asarray(x, np.float32)
    return np.clip(x, -FP8_MAX[out_key], FP8_MAX[out_key]).astype(INPUTS[out_key])


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("out_key", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_output_of_fp8_inputs_matches_float64(rng, dtype, out_key):
    """beta C, a bias and an activation in fp8 D, C and bias (D's type), aux too."""
    cpu_or_skip()
    M, N, K = 37, 29, 131
    a, b = matrix(rng, (M, K), dtype), matrix(rng, (K, N), dtype)
    c, bias = matrix(rng, (M, N), out_key), matrix(rng, (N,), out_key)
    d, aux = td.gemm(a, b, alpha=0.5, c=c, beta=0.5, bias=bias, activation="gelu", out_dtype=out_key,
                     return_aux=True, target="cpu")
    assert d.dtype == INPUTS[out_key] and aux.dtype == INPUTS[out_key] and d.shape == (M, N)
    pre, ref, mag = reference.gemm_epilogue(a, b, alpha=0.5, beta=0.5, c=c, bias=bias, activation="gelu")
    assert np.abs(pre).max() < FP8_MAX["fp8_e4m3"]  # no saturation here: the next test has it
    check(d, ref, mag, out_key, K)
    check(aux, pre, mag, out_key, K)


@pytest.mark.parametrize("out_key", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_output_rounds_to_nearest_even_and_saturates_bit_exactly(out_key):
    """K = 1 and A = 1: D = fp8(alpha * b) in float32 arithmetic, compared bit for bit with
    ml_dtypes' rounding of the clipped value, over every finite fp8 e4m3 value of b and
    alphas that land between, on and beyond the output type's values."""
    cpu_or_skip()
    b_values = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    f32 = b_values.astype(np.float32)
    # finite values; not -0 (the sum over k starts at +0, and +0 + -0 is +0)
    b_values = b_values[np.isfinite(f32) & ~((f32 == 0) & np.signbit(f32))].reshape(1, -1)
    a = np.ones((1, 1), ml_dtypes.float8_e4m3fn)
    for alpha in (1.0, 1.0625, 0.96875, 3.0, 7.3, 200.0, 1e4, 1e30, -5.5):
        d = td.gemm(a, b_values, alpha=alpha, out_dtype=out_key, target="cpu")
        want = fp8_round(np.float32(alpha) * b_values.astype(np.float32), out_key)
        assert d.dtype == INPUTS[out_key]
        np.testing.assert_array_equal(d.view(np.uint8), want.view(np.uint8), err_msg=f"alpha {alpha}")
    big = td.gemm(a, b_values, alpha=1e30, out_dtype=out_key, target="cpu").astype(np.float32)
    assert set(np.abs(big[b_values.astype(np.float32) != 0]).tolist()) == {FP8_MAX[out_key]}


def test_fp8_output_refused_for_other_inputs_and_by_kernels_without_it(rng):
    cpu_or_skip()
    a, b = matrix(rng, (8, 16), "bf16"), matrix(rng, (16, 12), "bf16")
    with pytest.raises(td.InvalidArgumentError, match=r"for bf16 inputs \(fp8_e4m3 and fp8_e5m2 take fp8 inputs\)"):
        td.gemm(a, b, out_dtype="fp8_e4m3", target="cpu")
    a8, b8 = matrix(rng, (8, 16), "fp8_e4m3"), matrix(rng, (16, 12), "fp8_e4m3")
    d = td.gemm(a8, b8, out_dtype=ml_dtypes.float8_e5m2, target="cpu")  # the numpy type works as the key
    assert d.dtype == ml_dtypes.float8_e5m2
    plain = [k.name for k in td.Dispatcher("gemm", "cpu").kernels
             if k.dtype.key == "fp8_e4m3" and k.layout.key == "rrr" and getattr(k.knobs, "fusion", "none") != "generic"]
    if not plain:
        pytest.skip("this build has no plain fp8 e4m3 rrr cpu kernel (the default manifest has one)")
    with pytest.raises(td.KernelRejectedError, match="this kernel implements no output dtype"):
        td.gemm(a8, b8, out_dtype="fp8_e4m3", kernel=plain[0], target="cpu")


def test_name_round_trip_of_generic_variants():
    name = "gemm_fp8e4m3_ccr_standard_48x64x128_r6x16_generic_cpu"
    config = config_from_name(name)
    assert config.knobs.fusion == "generic" and config.name == name


# ---- bad input: exact error classes and messages

def test_bad_epilogue_arguments(rng):
    cpu_or_skip()
    a, b = matrix(rng, (8, 16), "fp32"), matrix(rng, (16, 12), "fp32")
    E = td.InvalidArgumentError
    cases = [
        (dict(bias=np.zeros(8, np.float32)), E, r"bias has shape \(8,\); it needs 12 values"),
        (dict(bias=np.zeros(12, np.float32), bias_along="m"), E, r"bias has shape \(12,\); it needs 8 values"),
        (dict(bias=np.zeros(12, np.float32), bias_along="x"), E, "bias_along must be 'n'"),
        (dict(bias=np.zeros(12, np.float16)), TypeError, "bias holds float16; it must be float32"),
        (dict(activation="tanh"), E, "unknown activation 'tanh'"),
        (dict(activation=3), E, "activation must be None"),
        (dict(beta=0.5), E, "beta needs c"),
        (dict(c=np.zeros((8, 12), np.float16)), TypeError, "c holds float16"),
        (dict(c=np.zeros((3, 12), np.float32)), E, r"c of shape \(3, 12\) does not broadcast"),
        (dict(c=np.zeros((8, 12), np.float32), beta=float("nan")), E, "beta must be finite"),
        (dict(aux=np.zeros((8, 11), np.float32)), E, r"aux must be a \(8, 12\) float32"),
        (dict(aux=np.zeros((8, 12), np.float16)), E, r"aux must be a \(8, 12\) float32"),
        (dict(row_scale=np.ones(7, np.float32)), E, r"row_scale has shape \(7,\); it needs 8 values"),
        (dict(col_scale=np.ones((2, 12), np.float32)), E, r"col_scale has shape \(2, 12\)"),
        (dict(out_dtype="fp8_e4m3"), E, r"out_dtype must be fp32, fp16 or bf16 \(or their numpy types\) for fp32 "
                                        r"inputs \(fp8_e4m3 and fp8_e5m2 take fp8 inputs\), got 'fp8_e4m3'"),
        (dict(out_dtype=np.int32), E, "out_dtype must be fp32, fp16 or bf16"),
        (dict(out=np.zeros((8, 12), np.float16), bias=np.zeros(12, np.float32)), E, r"out must be a \(8, 12\) float32"),
        (dict(return_aux="yes"), E, "return_aux must be True or False"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            td.gemm(a, b, target="cpu", **kwargs)
    ro = np.zeros((8, 12), np.float32)
    ro.flags.writeable = False
    with pytest.raises(E, match="out is read-only"):
        td.gemm(a, b, out=ro, bias=np.zeros(12, np.float32), target="cpu")
    aux = np.zeros((8, 12), np.float32)
    ro.flags.writeable = True
    with pytest.raises(E, match="aux overlaps out"):
        td.gemm(a, b, out=aux, aux=aux, target="cpu")
    big = np.zeros((9, 12), np.float32)
    with pytest.raises(E, match="c overlaps out without being out itself"):
        td.gemm(a, b, out=big[1:], c=big[:8], target="cpu")


def test_c_abi_refuses_missing_epilogue_operands(rng):
    cpu_or_skip()
    d = td.Dispatcher("gemm", "cpu")
    a, b = matrix(rng, (8, 16), "fp32"), np.asfortranarray(matrix(rng, (16, 12), "fp32"))
    out = np.zeros((8, 12), np.float32)
    for fields, message in [(dict(beta=1.0), "beta is nonzero but C is NULL"),
                            (dict(bias=Bias.N), "bias pointer is NULL"),
                            (dict(aux=True), "aux pointer is NULL"),
                            (dict(row_scale=True), "row_scale is NULL"),
                            (dict(block_scale=True), "scale_a or scale_b is NULL")]:
        with pytest.raises(td.InvalidArgumentError, match=message):
            d.run(td.GemmProblem(8, 12, 16, "fp32", "rcr", **fields), a, b, out, epilogue={})
    with pytest.raises(td.InvalidArgumentError, match="unknown activation"):
        td.GemmProblem(8, 12, 16, activation="tanh")
    with pytest.raises(td.InvalidArgumentError, match="beta must be finite"):
        td.GemmProblem(8, 12, 16, beta=float("inf"))


@pytest.mark.parametrize("field,value,message", [
    ("batch", -1, "batch must not be negative"), ("stride_a", -1, "batch strides must not be negative"),
    ("beta", float("nan"), "beta must be finite"), ("bias", 3, "unknown bias code 3"),
    ("activation", 5, "unknown activation code 5"), ("out_dtype", 6, "unknown out_dtype code 6"),
    ("out_dtype", 4, "an fp8 output (out_dtype fp8_e4m3 or fp8_e5m2) takes fp8 inputs"),
    ("aux", 2, "aux must be 0 or 1"), ("row_scale", -1, "row_scale must be 0 or 1"),
    ("col_scale", 7, "col_scale must be 0 or 1"), ("block_scale", 2, "block_scale must be 0 or 1")])
def test_c_abi_checks_the_new_fields(field, value, message):
    """The C library checks the raw struct itself (the Python classes check first)."""
    cpu_or_skip()
    import ctypes
    from tiledispatch import _ffi
    lib = td.Dispatcher("gemm", "cpu").lib
    raw = td.GemmProblem(8, 8, 8).to_c()
    setattr(raw, field, value)
    assert lib.td_gemm_is_supported(ctypes.byref(raw), None) == -1
    assert message in lib.last_error()
    assert isinstance(raw, _ffi.TdGemmProblem)


# ---- CUDA arrays: the argument checks come before any launch (no GPU needed) --------------------

class FakeCudaArray:
    """Only __cuda_array_interface__ (fp32 or fp16, C-contiguous unless strides are given)."""

    def __init__(self, ptr, shape, typestr="<f2", strides=None):
        item = 4 if typestr == "<f4" else 2
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape), "typestr": typestr,
                                         "strides": None if strides is None else tuple(s * item for s in strides),
                                         "version": 3}


BASE = 1 << 40
MB = 1 << 20


def fake(i, shape, typestr="<f2", strides=None):
    """Array i of a call: 1 MiB apart, so no two overlap unless asked."""
    return FakeCudaArray(BASE + i * MB, shape, typestr, strides)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(bias=fake(3, (23,))), td.InvalidArgumentError, r"bias has shape \(23,\); it needs 24 values"),
    (dict(bias=fake(3, (17,)), bias_along="m"), None, None),
    (dict(bias=fake(3, (24,), "<f4")), TypeError, "bias holds fp32; it must be fp16"),
    (dict(bias=np.zeros(24, np.float16)), td.InvalidArgumentError, "host and device arrays do not mix"),
    (dict(row_scale=fake(3, (17,), "<f2")), TypeError, "row_scale holds fp16; it must be fp32"),
    (dict(row_scale=fake(3, (17,), "<f4"), col_scale=fake(4, (24,), "<f4")), None, None),
    (dict(col_scale=fake(4, (2, 24), "<f4")), td.InvalidArgumentError, r"col_scale has shape \(2, 24\)"),
    (dict(c=fake(3, (17, 24))), None, None),
    (dict(c=fake(3, (24, 17), strides=(1, 24))), td.InvalidArgumentError, "c must be laid out as out"),
    (dict(c=fake(3, (17, 24), "<f4")), TypeError, "c holds fp32; it must be fp16"),
    (dict(beta=0.5), td.InvalidArgumentError, "beta needs c"),
    (dict(activation="tanh"), td.InvalidArgumentError, "activation"),
    (dict(out=fake(0, (17, 24)), activation="relu"), td.InvalidArgumentError, "out overlaps a"),
    (dict(out=fake(2, (17, 24), "<f4"), activation="relu"), td.InvalidArgumentError,
     r"out must be a \(17, 24\) fp16 array"),
    (dict(bias=fake(2, (24,), "<f2"), out=fake(2, (17, 24), "<f2")), td.InvalidArgumentError, "out overlaps bias"),
    (dict(out=fake(2, (17, 24), "<f4"), out_dtype="fp32"), None, None),
    (dict(aux=fake(3, (17, 24))), None, None),
    (dict(aux=fake(2, (17, 24))), td.InvalidArgumentError, "aux overlaps out"),
    (dict(scale_a=fake(3, (17, 1), "<f4"), scale_b=fake(4, (1, 24), "<f4")), None, None),
    (dict(scale_a=fake(3, (17, 1), "<f4"), row_scale=fake(4, (17,), "<f4")), td.InvalidArgumentError,
     "give row-wise scales once"),
    (dict(scale_a=fake(3, (17, 1), "<f4"), scale_b=fake(4, (1, 23), "<f4")), td.InvalidArgumentError,
     r"scale_b has shape \(1, 23\)"),
])
def test_device_arguments_are_checked_before_the_launch(kwargs, error, message):
    """td.gemm's extra arguments on CUDA arrays: the same shape, type and overlap checks as on
    numpy arrays, before any library call; arguments that pass reach the GPU library lookup
    (a cpu-only installation has none: UnsupportedProblemError) or its kernel selection."""
    a, b = fake(0, (17, 40)), fake(1, (40, 24), strides=(1, 40))  # rcr
    kwargs.setdefault("out", fake(2, (17, 24)))
    if error is None:
        try:
            td.gemm(a, b, **kwargs)
        except td.UnsupportedProblemError as err:  # no sm_90a library here, or no kernel implements it
            assert "library" in str(err) or "implements" in str(err)
        return
    with pytest.raises(error, match=message):
        td.gemm(a, b, **kwargs)


def test_device_batch_arguments_are_checked():
    a, b = fake(0, (4, 17, 40)), fake(1, (3, 40, 24))
    with pytest.raises(td.InvalidArgumentError, match="batch sizes differ"):
        td.gemm(a, b, out=fake(2, (4, 17, 24)))
    with pytest.raises(td.InvalidArgumentError, match="matrices overlap or run backwards"):
        td.gemm(fake(0, (4, 17, 40), strides=(40, 40, 1)), fake(1, (40, 24)), out=fake(2, (4, 17, 24)))
    with pytest.raises(td.InvalidArgumentError, match=r"out must be a \(4, 17, 24\) fp16 array"):
        td.gemm(a, fake(1, (40, 24)), out=fake(2, (17, 24)))
    with pytest.raises(td.InvalidArgumentError, match="out's matrices must not overlap"):
        td.gemm(a, fake(1, (40, 24)), out=fake(2, (4, 17, 24), strides=(24, 24, 1)))
    with pytest.raises(td.InvalidArgumentError, match="laid out as rrr, not rcr"):
        td.gemm(a, fake(1, (40, 24)), out=fake(2, (4, 17, 24)), layout="rcr")
    # block-wise fp8 scales on the device: float32, contiguous row-major, one GEMM
    with pytest.raises(td.InvalidArgumentError, match="block-wise scales take one GEMM"):
        td.gemm(fake(0, (2, 17, 256)), fake(1, (256, 24)), out=fake(2, (2, 17, 24)),
                scale_a=fake(3, (17, 2), "<f4"), scale_b=fake(4, (2, 1), "<f4"))
    with pytest.raises(TypeError, match="scale_a holds fp16; block-wise scales are float32"):
        td.gemm(fake(0, (17, 256)), fake(1, (256, 24)), out=fake(2, (17, 24)), scale_a=fake(3, (17, 2), "<f2"),
                scale_b=fake(4, (2, 1), "<f4"))
    with pytest.raises(td.InvalidArgumentError, match=r"scale_a must be a contiguous row-major \(17, 2\)"):
        td.gemm(fake(0, (17, 256)), fake(1, (256, 24)), out=fake(2, (17, 24)),
                scale_a=fake(3, (17, 2), "<f4", strides=(1, 17)), scale_b=fake(4, (2, 1), "<f4"))
