"""Shared test setup. Codegen tests import the source tree's `codegen`; runtime tests
import the installed `tiledispatch`."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# --td-options: the library options the tests run under (td.set_options), to cover the
# kernels' other paths: e.g. `pytest --td-options no_tma,no_pdl tests/test_gpu_conv.py`.
TD_OPTION_FLAGS = {"no_tma": "tma", "no_pdl": "pdl", "no_multi_row": "multi_row", "no_vendor": "vendor"}


def pytest_addoption(parser):
    parser.addoption("--td-options", default="", metavar="FLAGS",
                     help="comma-separated, of " + ", ".join(TD_OPTION_FLAGS) +
                          ": turn those library options off (td.set_options) for every test of the run")


def pytest_configure(config):
    flags = [f for f in config.getoption("--td-options").split(",") if f]
    unknown = [f for f in flags if f not in TD_OPTION_FLAGS]
    if unknown:
        raise pytest.UsageError(f"--td-options: unknown {', '.join(unknown)} (known: {', '.join(TD_OPTION_FLAGS)})")
    if flags:
        import tiledispatch as td
        td.set_options(**{TD_OPTION_FLAGS[f]: False for f in flags})


# Folders a command writes by default into its working directory (`tiledispatch bench`:
# ./tiledispatch-bench), which is the source tree when pytest runs from there.
DEFAULT_OUTPUTS = ("tiledispatch-bench",)


@pytest.fixture(autouse=True, scope="session")
def _no_output_in_the_source_tree():
    """Removes, after the session, a default output folder that the tests created empty in the
    source tree (a bench that failed on its sweep, run by an installation older than the fix in
    tiledispatch.cli that removes it). A folder there before the session, or one holding
    anything, is left alone."""
    before = {name for name in DEFAULT_OUTPUTS if (ROOT / name).exists()}
    yield
    for name in DEFAULT_OUTPUTS:
        path = ROOT / name
        if name not in before and path.is_dir() and not any(path.iterdir()):
            path.rmdir()


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(20261130)


@pytest.fixture
def gen():
    """A CUDA torch generator with a fresh seed on every run (the GPU tests, which skip
    before this is used where torch or a GPU is missing)."""
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(torch.randint(0, 2**31, (1,)).item())
    return g


def import_torch():
    """torch, for the tests of the torch integration: they skip, saying why, where torch is
    not installed, but fail where TD_REQUIRE_TORCH=1 says it must be (CI)."""
    import os
    try:
        import torch
    except ImportError as err:
        if os.environ.get("TD_REQUIRE_TORCH") == "1":
            pytest.fail(f"TD_REQUIRE_TORCH=1 but torch does not import: {err}", pytrace=False)
        pytest.skip(f"torch is not installed ({err}): the torch integration is not tested", allow_module_level=True)
    return torch


def torch_gpu_missing(torch, op: str = "conv"):
    """Why the torch tests on CUDA tensors cannot run here (None: they can): no CUDA device,
    or no GPU library of `op` in this installation."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    import tiledispatch as td
    try:
        if td.registry().default_target(op) == "cpu":
            return "no GPU library in this installation"
    except td.TileDispatchError as err:
        return str(err)
    return None


def fresh_autotune_state(monkeypatch, tmp_path, env):
    """No autotune winners or statistics, no picks logged, none of the environment variables
    `env`, and an autotune cache folder of the test's own; returns the function that resets
    the state again after the test."""
    from tiledispatch import _autotune, _picklog
    for name in env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path / "cache"))

    def reset():
        _autotune.reset()
        _picklog.reset()

    reset()
    return reset
