"""bench/train_step.py --smoke runs (CPU, a tiny torch-only model): the GPU benchmark's
script is exercised in CI."""
import json
import subprocess
import sys

from conftest import ROOT, import_torch

import_torch()


def test_train_step_smoke(tmp_path):
    out = tmp_path / "train_step.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "train_step.py"), "--smoke", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())["results"]
    assert [(r["mode"], r["variant"]) for r in results] == [
        ("eager", "torch"), ("eager", "patched"), ("compiled", "torch"), ("compiled", "patched")]
    assert [r["swapped"] for r in results] == [0, 2, 0, 2]   # the depthwise and the grouped conv
    for torch_run, patched in (results[0:2], results[2:4]):
        assert len(patched["losses"]) == 3 and patched["images_per_s"] > 0
        assert patched["loss_rel_diff"] < 1e-2
        assert len(set(torch_run["losses"])) == 3   # a loss per step, each different: it trained
    assert "tiny" in proc.stdout and "ratio" in proc.stdout
