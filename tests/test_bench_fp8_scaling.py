"""bench/fp8_scaling.py without torch or a GPU: the zoo shapes it takes, the scale shapes, the
summary (geomean, min) and its table, --help and --dry-run."""
import math
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import fp8_scaling as fs  # noqa: E402

SCRIPT = ROOT / "bench" / "fp8_scaling.py"


def test_shapes_come_from_the_zoo_filtered_by_tokens_and_alignment():
    shapes = fs.load_shapes(tokens=(128, 4096), max_shapes=None)
    assert shapes == sorted(set(shapes)) and len(shapes) > 20
    assert {M for M, _, _ in shapes} == {128, 4096}
    assert all(N % 16 == 0 and K % 16 == 0 for _, N, K in shapes)
    assert (4096, 6144, 4096) in shapes  # llama-3-8b qkv at 4096 tokens
    capped = fs.load_shapes(tokens=(128, 4096), max_shapes=10)
    assert len(capped) == 10 and set(capped) <= set(shapes) and capped[0] == shapes[0]


def test_scale_shapes():
    assert fs.scale_shapes(37, 200, 300) == {"row_wise": {"scale_a": (37, 1), "scale_b": (1, 200)},
                                             "block_wise": {"scale_a": (37, 3), "scale_b": (3, 2)}}


def test_summary_and_table():
    rows = [{"M": 128, "N": 4096, "K": 4096, "row_us": 10.0, "torch_row_us": 12.0, "row_ratio": 1.2,
             "block_us": 12.5, "tensor_us": 10.0, "block_fraction": 0.8, "row_kernel": "r", "block_kernel": "b"},
            {"M": 4096, "N": 4096, "K": 4096, "row_us": 100.0, "torch_row_us": 80.0, "row_ratio": 0.8,
             "block_error": "no kernel"}]
    row = fs.summary(rows, "row_ratio")
    assert row["n"] == 2 and math.isclose(row["geomean"], math.sqrt(1.2 * 0.8)) and row["min"] == 0.8
    block = fs.summary(rows, "block_fraction")
    assert block == {"n": 1, "geomean": 0.8, "min": 0.8}
    text = fs.table(rows)
    assert "row-wise vs torch._scaled_mm: geomean 0.980, min 0.800 (2 shapes)" in text
    assert "block-wise / per-tensor throughput: geomean 0.800, min 0.800 (1 shapes; target >= 0.8)" in text
    assert math.isnan(fs.summary([], "row_ratio")["geomean"])


def test_help_and_dry_run_need_no_gpu():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True).stdout
    assert "--dry-run" in out and "torch._scaled_mm" in out
    out = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--tokens", "512", "--max-shapes", "5"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "5 shapes (tokens 512)"
