"""The conv and gemm ops on CUDA tensors, and their runs inside CUDA graph capture.

Outside capture a kernel that needs a workspace takes the library's scratch buffer, which
the library grows with cudaMallocAsync on the caller's stream. Inside capture nothing may
be allocated that outlives the graph, so a captured run sizes the workspace beforehand
(td_*_workspace_size for the kernel the library selects), takes it from torch's allocator
(the graph's memory pool) and passes it with the kernel's name. cuDNN's plans size their
workspace only when they are made, so a run that would select a cuDNN kernel is refused in
capture with an error saying how to leave cuDNN out."""
from __future__ import annotations

import torch

from . import api
from ._torch_views import DTYPES, out_dtype
from .errors import UnsupportedProblemError
from .problems import GemmProblem

CUBLASLT_WORKSPACE = 32 << 20  # the most a cuBLASLt plan of the library asks for


def capturing() -> bool:
    return torch.cuda.is_current_stream_capturing()


def gemm(a: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * a @ b on CUDA tensors: the lean path (api._torch_fast), else the general one."""
    if capturing():
        return _gemm_captured(a, b, alpha)
    out = api._torch_fast(a, b, None, alpha)
    if out is None:
        out = api._gemm_device(a, b, layout=None, out=None, kernel=None, alpha=alpha, target=None)
    return out


def _order(t: torch.Tensor):
    """(t, row_major, ld): t itself where it is row- or column-major, else a contiguous copy."""
    found = api._strided_order(t.stride(), *t.shape)
    if found is None:
        t = t.contiguous()
        found = api._strided_order(t.stride(), *t.shape)
    return (t, *found)


def _gemm_captured(a, b, alpha):
    if a.dtype not in DTYPES:
        raise TypeError(f"unsupported element type {a.dtype}")
    (M, K), N = a.shape, b.shape[1]
    a, a_row, lda = _order(a)
    b, b_row, ldb = _order(b)
    problem = GemmProblem(M, N, K, DTYPES[a.dtype], api._LAYOUT[(a_row, b_row)], lda, ldb, N, alpha)
    out = torch.empty((M, N), dtype=out_dtype(a.dtype), device=a.device)
    run(api.dispatcher("gemm", api._device_target("gemm")), problem, a, b, out)
    return out


def run(d, problem, a, b, c) -> None:
    """One run on the current stream: in capture with a workspace sized beforehand."""
    if not capturing():
        d.run(problem, a, b, c, timed=False)
        return
    name = d.select(problem)
    if "_cudnn_" in name:
        raise UnsupportedProblemError(
            f"{name} (cuDNN) sizes its workspace only when its plan is made, which cannot happen inside "
            "CUDA graph capture: call tiledispatch.set_options(vendor=False) before capturing")
    size = d.workspace_size(problem, name)
    if "_cublaslt_" in name:
        size = max(size, CUBLASLT_WORKSPACE)
    workspace = torch.empty(size, dtype=torch.uint8, device=c.device) if size else None
    d.run(problem, a, b, c, kernel=name, workspace=None if workspace is None else workspace.data_ptr(),
          workspace_bytes=size, timed=False)
