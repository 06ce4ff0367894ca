"""The conv and gemm ops on CUDA tensors, and their runs inside CUDA graph capture.

Outside capture a kernel that needs a workspace takes the library's scratch buffer, which
the library grows with cudaMallocAsync on the caller's stream. Inside capture nothing may
be allocated that outlives the graph, so a captured run sizes the workspace beforehand
(td_*_workspace_size for the kernel the library selects), takes it from torch's allocator
(the graph's memory pool) and passes it with the kernel's name. A cuDNN plan's workspace is
known once the plan is made (a run before capture, as torch.compile's warm-up does); where
the plan is first made inside the capture, the library refuses the run for its workspace
(nothing is enqueued), and the run is repeated with the size it reports then."""
from __future__ import annotations

import torch

from . import _autotune, api
from ._torch_views import DTYPES, out_dtype
from .errors import KernelRejectedError
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
    d = api.dispatcher("gemm", api._device_target("gemm"))
    run(d, problem, a, b, out, kernel=_autotune.kernel_for(d, problem, (a, b, out)))
    return out


def run(d, problem, a, b, c, kernel=None) -> None:
    """One run on the current stream (kernel None: the library's pick): in capture with a
    workspace sized beforehand."""
    if not capturing():
        d.run(problem, a, b, c, kernel=kernel, timed=False)
        return
    name = kernel or d.select(problem)
    size = d.workspace_size(problem, name)
    if "_cublaslt_" in name:
        size = max(size, CUBLASLT_WORKSPACE)
    try:
        _run_with_workspace(d, problem, a, b, c, name, size)
    except KernelRejectedError:
        # a cuDNN plan made inside the capture: its workspace is known now that it is made
        again = d.workspace_size(problem, name)
        if "_cudnn_" not in name or again <= size:
            raise
        _run_with_workspace(d, problem, a, b, c, name, again)


def _run_with_workspace(d, problem, a, b, c, name, size) -> None:
    workspace = torch.empty(size, dtype=torch.uint8, device=c.device) if size else None
    d.run(problem, a, b, c, kernel=name, workspace=None if workspace is None else workspace.data_ptr(),
          workspace_bytes=size, timed=False)
