"""Rules every family of the cuda backend shares."""
from __future__ import annotations

from ..model import DType

CUDA_TARGETS = ("sm_90a",)


def target_problems(target: str) -> list[str]:
    if target not in CUDA_TARGETS:
        return [f"the cuda backend builds kernels for sm_90a only, not {target}"]
    return []


def half_precision_problems(what: str, dtype) -> list[str]:
    """Kernels built for fp16 and bf16 only."""
    if dtype not in (DType.FP16, DType.BF16):
        return [f"{what} take fp16 or bf16, not {dtype.key}"]
    return []
