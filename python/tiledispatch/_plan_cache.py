"""The cache of the lean paths (_gemm_plans, _conv_plans): what a call decided from its
arguments' metadata, kept under that metadata for the calls that repeat it."""
from __future__ import annotations


class PlanCache(dict):
    """Plans by metadata key; a None key (the lean path does not apply) is never stored, and
    the cache empties itself when it holds `limit` plans (a workload of ever-new shapes)."""

    def __init__(self, limit: int = 4096):
        super().__init__()
        self.limit = limit

    def store(self, key, plan) -> None:
        if key is None:
            return
        if len(self) >= self.limit:
            self.clear()
        self[key] = plan

    def lookup(self, key):
        return None if key is None else self.get(key)


def torch_raw_stream():
    """torch's current raw stream of a device index (torch._C's, else through torch.cuda)."""
    import torch
    return getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
        lambda index: torch.cuda.current_stream(index).cuda_stream)
