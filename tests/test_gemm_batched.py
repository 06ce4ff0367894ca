"""Batched GEMM on the cpu target: 3-D operands with numpy.matmul semantics (a 2-D operand or
a batch of 1 is shared by the batch through a zero batch stride), against float64."""
import ml_dtypes
import numpy as np
import pytest

td = pytest.importorskip("tiledispatch")
from tiledispatch import reference  # noqa: E402

from test_gemm_epilogue import check, cpu_or_skip, matrix  # noqa: E402


@pytest.mark.parametrize("dtype,out", [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp8_e4m3", "bf16")])
@pytest.mark.parametrize("shapes", [((5, 7, 33), (5, 33, 9)), ((7, 33), (5, 33, 9)), ((5, 7, 33), (33, 9)),
                                    ((1, 7, 33), (4, 33, 9)), ((3, 1, 1), (3, 1, 1)), ((2, 65, 130), (2, 130, 67))])
def test_batched_matches_numpy_matmul(rng, dtype, out, shapes):
    cpu_or_skip()
    a, b = matrix(rng, shapes[0], dtype), matrix(rng, shapes[1], dtype)
    d = td.gemm(a, b, target="cpu")
    ref, mag = np.matmul(a.astype(np.float64), b.astype(np.float64)), np.matmul(
        np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    assert d.shape == ref.shape
    check(d, ref, mag, out, shapes[0][-1])


def test_batched_operands_in_place_column_major_and_broadcast(rng):
    cpu_or_skip()
    a = matrix(rng, (4, 20, 30), "fp32")
    b_t = matrix(rng, (4, 25, 30), "fp32")
    b = b_t.transpose(0, 2, 1)  # column-major matrices, no copy needed
    shared = np.broadcast_to(matrix(rng, (30, 25), "fp32"), (4, 30, 25))  # zero batch stride
    for bb in (b, shared):
        d = td.gemm(a, bb, target="cpu")
        check(d, np.matmul(a.astype(np.float64), bb), np.matmul(np.abs(a.astype(np.float64)), np.abs(bb)), "fp32", 30)


def test_batched_with_epilogue_and_in_place(rng):
    cpu_or_skip()
    a, b = matrix(rng, (3, 16, 40), "bf16"), matrix(rng, (3, 40, 24), "bf16")
    d = matrix(rng, (3, 16, 24), "bf16")
    before = d.copy()
    bias = matrix(rng, (24,), "bf16")
    td.gemm(a, b, c=d, out=d, beta=0.5, bias=bias, activation="gelu_tanh", target="cpu")
    _, ref, mag = reference.gemm_epilogue(a, b, beta=0.5, c=before, bias=bias, activation="gelu_tanh")
    check(d, ref, mag, "bf16", 40)


def test_batched_out_array_and_padded_batch_stride(rng):
    cpu_or_skip()
    a, b = matrix(rng, (3, 8, 16), "fp32"), matrix(rng, (3, 16, 12), "fp32")
    storage = np.zeros((3, 10, 12), np.float32)
    out = storage[:, :8, :]  # a batch stride larger than one matrix
    assert td.gemm(a, b, out=out, target="cpu") is out
    check(out, np.matmul(a.astype(np.float64), b), np.matmul(np.abs(a.astype(np.float64)), np.abs(b)), "fp32", 16)
    assert not storage[:, 8:].any()


def test_bad_batches():
    cpu_or_skip()
    E = td.InvalidArgumentError
    a = np.zeros((3, 4, 5), np.float32)
    with pytest.raises(E, match=r"batch sizes differ: A is \(3, 4, 5\), B is \(2, 5, 6\)"):
        td.gemm(a, np.zeros((2, 5, 6), np.float32), target="cpu")
    with pytest.raises(E, match="inner dimensions differ"):
        td.gemm(a, np.zeros((3, 4, 6), np.float32), target="cpu")
    with pytest.raises(E, match="M, N, K and the batch must be positive"):
        td.gemm(np.zeros((0, 4, 5), np.float32), np.zeros((0, 5, 6), np.float32), target="cpu")
    with pytest.raises(E, match="gemm takes 2-D or 3-D"):
        td.gemm(np.zeros((2, 3, 4, 5), np.float32), np.zeros((5, 6), np.float32), target="cpu")
    with pytest.raises(E, match=r"out must be a \(3, 4, 6\) float32"):
        td.gemm(a, np.zeros((5, 6), np.float32), out=np.zeros((4, 6), np.float32), target="cpu")
    with pytest.raises(E, match="zero stride inside its matrices"):
        td.gemm(a, np.broadcast_to(np.zeros(6, np.float32), (3, 5, 6)), target="cpu")
    with pytest.raises(TypeError, match="must share an element type"):
        td.gemm(a, np.zeros((3, 5, 6), ml_dtypes.bfloat16), target="cpu")


def test_c_abi_batch_checks():
    cpu_or_skip()
    d = td.Dispatcher("gemm", "cpu")
    with pytest.raises(td.InvalidArgumentError, match="stride_c 10 is below one output matrix's span 64"):
        d.is_supported(td.GemmProblem(8, 8, 8, batch=2, stride_c=10))
    with pytest.raises(td.InvalidArgumentError, match="the problem is too large: A spans"):
        d.is_supported(td.GemmProblem(8, 8, 8, batch=2**62, stride_a=2**40, stride_c=64))
    plain = [k.name for k in d.kernels if "generic" not in k.name]
    assert not d.is_supported(td.GemmProblem(8, 8, 8, batch=2, stride_c=64), plain[0])
