"""bench/gemm_epilogue.py without a GPU: its shapes, its summary and its dry run."""
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gemm_epilogue.py"


def load():
    spec = importlib.util.spec_from_file_location("gemm_epilogue", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summary_geomean_min_and_count_below_1x():
    ge = load()
    s = ge.summary([2.0, 0.5, 1.0, 0.8])
    assert s["n"] == 4 and math.isclose(s["geomean"], 0.8 ** 0.25) and s["min"] == 0.5 and s["below_1x"] == 2
    assert ge.summary([]) == {"n": 0, "geomean": None, "min": None, "below_1x": 0}


def test_zoo_shapes_are_bf16_tma_aligned_and_batched_shapes_attention_like():
    ge = load()
    shapes = ge.zoo_shapes()
    assert len(shapes) > 100 and all(n % 8 == 0 and k % 8 == 0 for _, n, k in shapes)
    assert ge.zoo_shapes(limit=5) == shapes[:5]
    assert all(32 <= b <= 256 and 64 <= min(m, n, k) and max(m, n, k) <= 4096 for b, m, n, k in ge.BATCHED)


def test_dry_run_needs_no_torch_and_prints_both_tables():
    proc = subprocess.run([sys.executable, str(BENCH), "--dry-run", "--max-shapes", "7"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "fused: 7 zoo shapes" in proc.stdout and "batched: 14 shapes" in proc.stdout
    assert "fused (placeholder ratios)" in proc.stdout and "batched (placeholder ratios)" in proc.stdout
    help_text = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0 and "_addmm_activation" in help_text.stdout
