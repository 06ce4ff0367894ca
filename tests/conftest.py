"""Shared test setup. Codegen tests import the source tree's `codegen`; runtime tests
import the installed `tiledispatch`."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
