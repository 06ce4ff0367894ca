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
