"""The lean path of td.gemm's extra arguments on torch CUDA tensors (tiledispatch._gemm_plans),
on stand-in tensors: the metadata key, the overlap checks made on every call, the outputs
allocated, and the one C call with the epilogue's addresses. The GPU tests run it for real
(tests/test_gpu_gemm_features.py calls every form twice)."""
import ctypes

import pytest

from tiledispatch import _gemm_plans as plans
from tiledispatch.errors import InvalidArgumentError


class Tensor:
    """What the lean path reads of a torch tensor."""
    is_cuda = True

    def __init__(self, shape, ptr, item=2, dtype="bf16", strides=None):
        self.shape, self.ptr, self.item, self.dtype = tuple(shape), ptr, item, dtype
        if strides is None:
            strides, acc = [], 1
            for n in reversed(self.shape):
                strides.insert(0, acc)
                acc *= n
        self.strides = tuple(strides)

    def stride(self):
        return self.strides

    def get_device(self):
        return 0

    def element_size(self):
        return self.item

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def data_ptr(self):
        return self.ptr

    def new_empty(self, shape, dtype=None):
        Tensor.allocated += 1
        return Tensor(shape, 0x7000_0000 + 0x100_0000 * Tensor.allocated)


class Lib:
    def __init__(self):
        self.calls = []

    def td_gemm_run_ex(self, problem, kernel, a, b, d, epilogue, workspace, workspace_bytes, stream, time_ms):
        ep = ctypes.cast(epilogue, ctypes.POINTER(plans._ffi.TdGemmEpilogue)).contents
        self.calls.append((kernel, a, b, d, {f: getattr(ep, f) for f, _ in ep._fields_}, stream))
        return 0

    def check(self, status):
        raise AssertionError(status)


@pytest.fixture(autouse=True)
def fake_torch(monkeypatch):
    monkeypatch.setattr(plans, "_TENSOR", [Tensor])
    Tensor.allocated = 0
    plans.clear()
    yield
    plans.clear()


def arrays(**given):
    base = dict.fromkeys(plans.ARRAYS)
    base.update(given)
    return base


def plan_for(args, lib, want_aux=False, return_aux=False):
    struct = plans._ffi.TdGemmProblem()
    return plans.Plan(struct, None, lib, lambda device: 77, 0, (64, 128), "bf16", want_aux, return_aux, args)


def test_the_key_is_metadata_and_refuses_what_is_not_a_cuda_tensor():
    a, b = Tensor((64, 32), 0x1000_0000), Tensor((32, 128), 0x2000_0000, strides=(1, 32))
    k1 = plans.key(arrays(a=a, b=b), (1.0, "gelu"))
    moved = plans.key(arrays(a=Tensor((64, 32), 0x5000_0000), b=Tensor((32, 128), 0x6000_0000, strides=(1, 32))),
                      (1.0, "gelu"))
    assert k1 == moved  # addresses are not part of it
    assert plans.key(arrays(a=a, b=Tensor((32, 128), 0x2000_0000)), (1.0, "gelu")) != k1  # strides are
    assert plans.key(arrays(a=a, b=b), (1.0, "relu")) != k1
    assert plans.key(arrays(a=a, b=b, scale_a=0.5), ()) != plans.key(arrays(a=a, b=b, scale_a=0.25), ())
    assert plans.key(arrays(a=a, b=b, bias=[1.0, 2.0]), ()) is None  # a host list: the general path
    assert plans.key(arrays(a=a, b=b), ({"unhashable": 1},)) is None


def test_a_stored_plan_allocates_the_output_and_passes_every_epilogue_address():
    lib = Lib()
    a, b = Tensor((64, 32), 0x1000_0000), Tensor((32, 128), 0x2000_0000)
    bias = Tensor((128,), 0x3000_0000)
    args = arrays(a=a, b=b, bias=bias)
    plan = plan_for(args, lib, want_aux=True, return_aux=True)
    out, aux = plans.execute(plan, args)
    assert out.shape == aux.shape == (64, 128) and out.ptr != aux.ptr
    (kernel, pa, pb, pd, ep, stream), = lib.calls
    assert (kernel, pa, pb, pd, stream) == (None, a.ptr, b.ptr, out.ptr, 77)
    assert ep["bias"] == bias.ptr and ep["aux"] == aux.ptr and ep["c"] is None


def test_overlaps_are_checked_on_every_call_with_the_call_addresses():
    lib = Lib()
    a, b = Tensor((64, 32), 0x1000_0000), Tensor((32, 128), 0x2000_0000)
    out = Tensor((64, 128), 0x4000_0000)
    plan = plan_for(arrays(a=a, b=b, out=out), lib)
    plans.execute(plan, arrays(a=a, b=b, out=out))
    inside_a = Tensor((64, 128), 0x1000_0000 + 64)  # same metadata as out, inside A's bytes
    with pytest.raises(InvalidArgumentError, match="out overlaps a"):
        plans.execute(plan, arrays(a=a, b=b, out=inside_a))
    after_b = Tensor((64, 128), 0x2000_0000 + 32 * 128 * 2)  # right after B's last byte: fine
    plans.execute(plan, arrays(a=a, b=b, out=after_b))
    assert len(lib.calls) == 2


def test_c_may_be_out_but_not_overlap_it_otherwise():
    lib = Lib()
    a, b = Tensor((64, 32), 0x1000_0000), Tensor((32, 128), 0x2000_0000)
    out = Tensor((64, 128), 0x4000_0000)
    plan = plan_for(arrays(a=a, b=b, out=out, c=out), lib)
    plans.execute(plan, arrays(a=a, b=b, out=out, c=out))
    assert lib.calls[-1][4]["c"] == out.ptr
    shifted = Tensor((64, 128), 0x4000_0000 + 256)
    with pytest.raises(InvalidArgumentError, match="out overlaps c"):
        plans.execute(plan, arrays(a=a, b=b, out=out, c=shifted))


def test_a_callers_aux_must_not_overlap_out_or_the_inputs():
    lib = Lib()
    a, b = Tensor((64, 32), 0x1000_0000), Tensor((32, 128), 0x2000_0000)
    out, aux = Tensor((64, 128), 0x4000_0000), Tensor((64, 128), 0x5000_0000)
    plan = plan_for(arrays(a=a, b=b, out=out, aux=aux), lib, want_aux=True)
    assert plans.execute(plan, arrays(a=a, b=b, out=out, aux=aux)) is out
    assert lib.calls[-1][4]["aux"] == aux.ptr
    with pytest.raises(InvalidArgumentError, match="aux overlaps out"):
        plans.execute(plan, arrays(a=a, b=b, out=out, aux=Tensor((64, 128), 0x4000_0000 + 2)))
