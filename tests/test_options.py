"""The libraries' run-time options (TdOptions): td_get_options / td_set_options in C,
td.options / td.set_options in Python, on the cpu libraries."""
import ctypes
import json
import sys

import pytest

import tiledispatch as td
from tiledispatch import _ffi
from tiledispatch.tile_engine import runner

ON = {"tma": True, "pdl": True, "multi_row": True, "vendor": True}


@pytest.fixture
def restored():
    """Leaves the options as the test found them."""
    previous = td.options()
    yield
    td.set_options(**previous)


def c_options(lib) -> dict:
    got = _ffi.TdOptions()
    assert lib.td_get_options(ctypes.byref(got)) == 0
    return {field: getattr(got, field) for field, _ in _ffi.TdOptions._fields_}


@pytest.mark.parametrize("op", ["gemm", "conv"])
def test_the_c_options_round_trip_and_default_to_one(op, restored):
    lib = _ffi.library(op, "cpu")
    assert c_options(lib) == {field: int(on) for field, on in td.options().items()}
    for values in ((0, 1, 0, 1), (1, 0, 1, 0), (0, 0, 0, 0), (1, 1, 1, 1)):
        assert lib.td_set_options(ctypes.byref(_ffi.TdOptions(*values))) == 0
        assert tuple(c_options(lib).values()) == values
    td.set_options(**ON)


@pytest.mark.parametrize("field", ["tma", "pdl", "multi_row", "vendor"])
def test_a_c_option_other_than_0_or_1_is_an_error_with_a_message(field, restored):
    lib = _ffi.library("gemm", "cpu")
    before = c_options(lib)
    bad = _ffi.TdOptions(1, 1, 1, 1)
    setattr(bad, field, 2)
    assert lib.td_set_options(ctypes.byref(bad)) == -1
    assert lib.last_error() == f"TdOptions.{field} is 2; each field is 0 or 1"
    assert c_options(lib) == before, "a refused call changes nothing"
    assert lib.td_set_options(None) == -1 and "NULL" in lib.last_error()
    assert lib.td_get_options(None) == -1 and "NULL" in lib.last_error()


def test_python_options_apply_to_loaded_libraries_and_round_trip(restored):
    gemm = _ffi.library("gemm", "cpu")
    td.set_options(**ON)
    previous = td.set_options(tma=False, multi_row=0)
    assert previous == ON
    assert td.options() == {"tma": False, "pdl": True, "multi_row": False, "vendor": True}
    assert c_options(gemm) == {"tma": 0, "pdl": 1, "multi_row": 0, "vendor": 1}
    assert c_options(_ffi.library("conv", "cpu")) == {"tma": 0, "pdl": 1, "multi_row": 0, "vendor": 1}
    td.set_options(pdl=False, vendor=False)  # the others stay as they are
    assert td.options() == {"tma": False, "pdl": False, "multi_row": False, "vendor": False}
    td.set_options(**previous)
    assert td.options() == ON and c_options(gemm) == {"tma": 1, "pdl": 1, "multi_row": 1, "vendor": 1}


@pytest.mark.parametrize("value", [2, -1, "yes", 0.5])
def test_a_python_option_other_than_a_bool_raises_and_changes_nothing(value, restored):
    before = td.options()
    with pytest.raises(td.InvalidArgumentError, match="option tma is"):
        td.set_options(tma=value)
    assert td.options() == before


def test_the_kernels_run_with_every_option_off(rng, restored):
    """The cpu kernels do not read the options; a GEMM runs the same with all of them off."""
    import numpy as np
    a = rng.standard_normal((33, 17), dtype=np.float32)
    b = rng.standard_normal((17, 29), dtype=np.float32)
    td.set_options(tma=False, pdl=False, multi_row=False)
    np.testing.assert_allclose(td.gemm(a, b, target="cpu"), a @ b, rtol=1e-5, atol=1e-5)


# A stand-in worker: reports each kernel of a batch with the options the batch carried.
ECHO_WORKER = ("import json, sys\n"
               "for line in sys.stdin:\n"
               "    batch = json.loads(line)\n"
               "    for name in batch['kernels']:\n"
               "        print(json.dumps({'ready': name}))\n"
               "        print(json.dumps({'kernel': name, 'status': 'OK', 'options': batch.get('options')}))\n"
               "    print(json.dumps({'done': True}), flush=True)\n")


def test_the_tile_engines_workers_run_under_the_callers_options(restored, tmp_path):
    td.set_options(tma=False, pdl=True, multi_row=False)
    worker = runner.Worker("cpu", tmp_path, [sys.executable, "-c", ECHO_WORKER])
    try:
        answers = list(worker.run_batch({"problem": {}, "kernels": ["k"]}, timeout=30))
        assert [a["options"] for a in answers] == [{"tma": False, "pdl": True, "multi_row": False, "vendor": True}]
        answers = list(worker.run_batch({"problem": {}, "kernels": ["k"], "options": {"pdl": False}}, timeout=30))
        assert [a["options"] for a in answers] == [{"pdl": False}]  # the batch's own, as given
    finally:
        worker.stop()
