"""The lean path of the conv ops on CUDA tensors (tiledispatch._conv_plans), on CPU tensors
with a stand-in library: the slot the result takes for each direction, the result's layout,
and where the lean path stays off. The GPU tests run it for real (tests/test_torch_gpu.py)."""
import ctypes

import pytest

torch = pytest.importorskip("torch")

from tiledispatch import _conv_plans as plans  # noqa: E402
from tiledispatch import _ffi  # noqa: E402


class Lib:
    def __init__(self, status=0):
        self.calls, self.status = [], status

    def td_conv_run(self, problem, kernel, x, w, y, workspace, workspace_bytes, stream, time_ms):
        self.calls.append((kernel, x, w, y, workspace, workspace_bytes, stream))
        return self.status

    def check(self, status):
        raise RuntimeError(f"status {status}")


def plan(lib, written, shape):
    p = plans.Plan(_ffi.TdConvProblem(), lib, written, shape, torch.bfloat16)
    p.raw_stream = lambda device: 99
    return p


@pytest.mark.parametrize("written", [0, 1, 2])
def test_the_result_takes_its_slot_and_the_reads_keep_theirs(written):
    lib = Lib()
    a = torch.zeros(2, 8, 5, 5).contiguous(memory_format=torch.channels_last)
    b = torch.zeros(2, 8, 5, 5).contiguous(memory_format=torch.channels_last)
    out = plans.execute(plan(lib, written, (2, 4, 4, 6)), a, b)
    assert out.shape == (2, 6, 4, 4) and out.dtype == torch.bfloat16
    assert out.permute(0, 2, 3, 1).is_contiguous()  # stored channels-last, seen channels-first
    (kernel, *ptrs, workspace, size, stream), = lib.calls
    reads = [ptrs[i] for i in range(3) if i != written]
    assert reads == [a.data_ptr(), b.data_ptr()]  # channels-last inputs are used in place
    assert ptrs[written] == out.data_ptr()
    assert (kernel, workspace, size, stream) == (None, None, 0, 99)


def test_a_channels_first_input_is_made_channels_last_first():
    lib = Lib()
    a = torch.arange(2 * 8 * 5 * 5, dtype=torch.float32).reshape(2, 8, 5, 5)  # contiguous NCHW
    b = torch.zeros(2, 8, 5, 5).contiguous(memory_format=torch.channels_last)
    plans.execute(plan(lib, 2, (2, 4, 4, 6)), a, b)
    x_ptr = lib.calls[0][1]
    assert x_ptr != a.data_ptr()  # a copy laid out (N, H, W, C)


def test_a_failed_status_raises_through_the_librarys_check():
    a = torch.zeros(1, 4, 3, 3)
    with pytest.raises(RuntimeError, match="status -3"):
        plans.execute(plan(Lib(status=-3), 2, (1, 3, 3, 4)), a, a)


def test_cpu_tensors_take_the_general_path():
    a = torch.zeros(1, 4, 3, 3)
    assert plans.key("fwd", a, a, ((1, 1), (0, 0), (1, 1), 1)) is None
    plans.store(None, object())
    assert plans.lookup(None) is None
    assert ctypes.sizeof(_ffi.TdConvProblem) > 0
