"""Optional: spread a sweep over the hosts of a Ray cluster (pip install 'tiledispatch[ray]').

Ray is the scheduler, not us: one Ray task per batch, each running the same worker
protocol (a worker process fed JSON on stdin) on whichever node Ray picks, with one GPU
per task on GPU targets (Ray sets CUDA_VISIBLE_DEVICES). The build directory must be
visible at the same path on every node (a shared filesystem), or built on each.
"""
from __future__ import annotations

from .._options import options
from .runner import Worker


def _run_batch(job: dict, target: str, kernels_dir: str, timeout: float) -> list:
    worker = Worker("inherit", kernels_dir)
    out = []
    try:
        for result in worker.run_batch({**job, "target": target}, timeout):
            out.append(result)
    finally:
        worker.stop()
    return out


def run(jobs, target: str, kernels_dir, timeout: float, address: str | None = None, on_result=None) -> list:
    """Same contract as runner.run: results of every kernel of every job."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("the Ray executor needs ray: pip install 'tiledispatch[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    task = ray.remote(num_gpus=0 if target == "cpu" else 1)(_run_batch)
    here = options()  # the caller's library options travel with each batch
    futures = [task.remote({"options": here, **job}, target, str(kernels_dir), timeout) for job in jobs]
    results = []
    for job, future in zip(jobs, futures):
        for result in ray.get(future):
            if "pick" in result:
                job["pick"], job["model_pick"] = result["pick"], result.get("model_pick")
                continue
            result.update(problem=job["problem"], device=result.get("device", "ray"))
            results.append(result)
            if on_result:
                on_result(result)
    return results
