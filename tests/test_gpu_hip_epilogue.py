"""The mfma `fusion: generic` GEMM variants on an AMD MI300 (gfx942): every activation, bias
along N and M, beta * C (C apart and C = D), aux, row and column scales, fp32 / fp16 / bf16
outputs and batches with a broadcast operand, against float64 on the same quantized inputs.
Skipped, with the reason shown, where there is no gfx942 GPU, no torch (ROCm build) or no
gfx942 library; the same engine runs in the host emulator in CI (tests/test_hip.py)."""
import itertools

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch import reference
from tiledispatch._cuda import device_targets
from tiledispatch.codegen import Activation, Bias, OutDType

torch = pytest.importorskip("torch", reason="torch is needed for the GPU tests")
GPU = "gfx942" if "gfx942" in device_targets() and "gfx942" in td.registry().targets else None
pytestmark = pytest.mark.skipif(
    GPU is None, reason=f"no gfx942 GPU with a library in this installation (GPUs seen: "
                        f"{device_targets() or 'none'}, libraries: {td.registry().targets})")

TORCH = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def generic_kernels():
    return [k for k in td.registry().kernels("gemm", GPU) if k.name.endswith("_generic_gfx942")] if GPU else []


def quantized(shape, dtype, gen):
    return (torch.rand(*shape, generator=gen, device="cuda") * 2 - 1).to(getattr(torch, TORCH[dtype]))


def f64(t):
    return t.double().cpu().numpy()


CASES = list(itertools.product(
    [a for a in Activation],
    [(Bias.N, 0.0, False, "default"), (Bias.M, -0.75, False, "fp32"), (Bias.NONE, 1.0, True, "default"),
     (Bias.N, 0.5, True, "bf16")]))


@pytest.mark.parametrize("kernel", generic_kernels(), ids=lambda k: k.name)
@pytest.mark.parametrize("act,fields", CASES, ids=[f"{a.key}-{i % 4}" for i, (a, _) in enumerate(CASES)])
def test_generic_epilogue_matches_float64(kernel, act, fields):
    bias_kind, beta, c_is_d, out = fields
    gen = torch.Generator(device="cuda").manual_seed(7)
    M, N, K = 197, 131, 300  # odd sizes: the pad variant's bounds checks and partial tiles
    dt = kernel.dtype.key
    out_key = dt if out == "default" else out
    a = quantized((M, K), dt, gen)
    b_t = quantized((N, K), dt, gen)  # rcr: B column-major, stored as its transpose
    d = quantized((M, N), out_key, gen)
    c = d if c_is_d else quantized((M, N), out_key, gen)
    c0 = f64(c)
    bias = quantized((N if bias_kind is Bias.N else M,), out_key, gen)
    aux = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, TORCH[out_key]))
    rs = torch.rand(M, generator=gen, device="cuda") + 0.5
    cs = torch.rand(N, generator=gen, device="cuda") + 0.5
    problem = td.GemmProblem(M, N, K, kernel.dtype, kernel.layout, K, K, N, 1.25, beta=beta, bias=bias_kind,
                             activation=act, aux=True, row_scale=True, col_scale=True,
                             out_dtype=OutDType.DEFAULT if out == "default" else OutDType.parse(out))
    epilogue = {"c": c.data_ptr() if beta else None, "bias": bias.data_ptr() if bias_kind is not Bias.NONE else None,
                "aux": aux.data_ptr(), "row_scale": rs.data_ptr(), "col_scale": cs.data_ptr()}
    td.Dispatcher("gemm", GPU).run(problem, a, b_t, d, kernel=kernel.name, epilogue=epilogue,
                                   stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    pre, ref, mag = reference.gemm_epilogue(
        f64(a), f64(b_t).T, alpha=1.25, beta=beta, c=c0 if beta else None,
        bias=f64(bias) if bias_kind is not Bias.NONE else None, bias_along="m" if bias_kind is Bias.M else "n",
        activation=act.key, row_scale=f64(rs), col_scale=f64(cs))
    for got, want in ((d, ref), (aux, pre)):
        cmp = reference.compare_out(f64(got), want, mag, out_key, K)
        assert cmp["ok"], cmp


@pytest.mark.parametrize("kernel", generic_kernels(), ids=lambda k: k.name)
def test_generic_batch_with_broadcast_b(kernel):
    gen = torch.Generator(device="cuda").manual_seed(11)
    G, M, N, K = 3, 130, 70, 96
    dt = kernel.dtype.key
    a = quantized((G, M, K), dt, gen)
    b_t = quantized((N, K), dt, gen)  # one B for the batch: stride 0
    bias = quantized((N,), dt, gen)
    d = torch.full((G, M, N), float("nan"), device="cuda", dtype=getattr(torch, TORCH[dt]))
    problem = td.GemmProblem(M, N, K, kernel.dtype, kernel.layout, K, K, N, 1.0, batch=G, stride_a=M * K,
                             stride_b=0, stride_c=M * N, bias=Bias.N, activation=Activation.GELU)
    td.Dispatcher("gemm", GPU).run(problem, a, b_t, d, kernel=kernel.name, epilogue={"bias": bias.data_ptr()},
                                   stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    _, ref, mag = reference.gemm_epilogue(f64(a), np.broadcast_to(f64(b_t).T, (G, K, N)), bias=f64(bias),
                                          activation="gelu")
    cmp = reference.compare_out(f64(d), ref, mag, dt, K)
    assert cmp["ok"], cmp
