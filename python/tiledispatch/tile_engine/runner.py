"""Phase 3: worker processes (one per device), batches on stdin, per-kernel timeouts.

A worker that dies or stops answering costs the kernel it was running (MISSING); a new
worker takes the rest of the batch. The kernels of one problem are timed in rounds (see
worker.measure). The worker is WORKER_COMMAND unless the caller names another command that
speaks the same protocol on stdin / stdout (worker_command).
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

from .._cuda import device_count
from .._options import options

WORKER_COMMAND = (sys.executable, "-m", "tiledispatch.tile_engine.worker")


class Worker:
    def __init__(self, device: str, kernels_dir: str, command=WORKER_COMMAND):
        self.device, self.kernels_dir, self.command = device, kernels_dir, list(command)
        self.proc = None
        self.lines = None

    def start(self):
        env = dict(os.environ)
        env["TILEDISPATCH_KERNELS_DIR"] = str(self.kernels_dir)
        if self.device not in ("cpu", "inherit"):  # inherit: keep what Ray (or the caller) set
            env["CUDA_VISIBLE_DEVICES"] = self.device
        self.proc = subprocess.Popen(self.command, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc, self.lines), daemon=True).start()

    @staticmethod
    def _pump(proc, lines):
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # end of output: the worker exited

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def run_batch(self, batch: dict, timeout: float):
        """Yields one result dict per kernel of the batch, MISSING for a crash or a hang.

        The worker prepares the kernels in order ({"ready": name} after each), then times
        them in rounds. A crash or a hang while preparing costs the kernel being prepared;
        one while timing (which kernel is not known) sends the rest of the batch again, to
        be timed one kernel after another, where a crash costs the kernel being timed.
        The worker runs the kernels under this process's library options (td.options())
        unless the batch names others ("options")."""
        batch = {"options": options(), **batch}
        pending = list(batch["kernels"])
        interleave = batch.get("interleave", True)
        while pending:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            self.proc.stdin.write(json.dumps({**batch, "kernels": pending, "interleave": interleave}) + "\n")
            self.proc.stdin.flush()
            ready = 0  # kernels of `pending` the worker has prepared (and not yet reported)
            while pending:
                try:
                    line = self.lines.get(timeout=timeout)
                except queue.Empty:
                    line, why = None, f"no answer within {timeout:g} s"
                else:
                    why = "the worker process died"
                if line is None:
                    self.stop()
                    if interleave and ready >= len(pending):  # while timing: time them one by one
                        interleave = False
                        break
                    culprit = pending.pop(ready if interleave else 0)  # the kernel being prepared, or timed
                    yield {"kernel": culprit, "status": "MISSING", "latency_ms": None, "tflops": None,
                           "max_rel": None, "error": why}
                    break
                result = json.loads(line)
                if "ready" in result:
                    ready += 1
                    continue
                if "round" in result:
                    continue
                if result.get("done"):
                    if "pick" in result:
                        yield {"pick": result["pick"], "model_pick": result.get("model_pick")}
                    break
                if result["kernel"] == pending[0]:
                    pending.pop(0)
                    ready -= 1  # a kernel's result always follows its ready line
                yield result
            else:
                try:
                    done = json.loads(self.lines.get(timeout=timeout) or "{}")  # the batch's {"done": ...}
                except queue.Empty:
                    self.stop()
                    return
                if "pick" in done:
                    yield {"pick": done["pick"], "model_pick": done.get("model_pick")}


def devices_for(target: str) -> list:
    if target == "cpu":
        return ["cpu"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [d for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(max(1, device_count()))]


def run(jobs, target: str, kernels_dir, timeout: float, on_result=None, worker_command=WORKER_COMMAND) -> list:
    """jobs: batches {"problem", "kernels", ...}; spread over one worker per device, each
    worker a process running worker_command."""
    todo = queue.Queue()
    for job in jobs:
        todo.put(job)
    results, lock = [], threading.Lock()

    def device_loop(device):
        worker = Worker(device, kernels_dir, worker_command)
        try:
            while True:
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    return
                for result in worker.run_batch({**job, "target": target}, timeout):
                    if "pick" in result:
                        job["pick"], job["model_pick"] = result["pick"], result.get("model_pick")
                        continue
                    result.update(problem=job["problem"], device=device)
                    with lock:
                        results.append(result)
                        if on_result:
                            on_result(result)
        finally:
            worker.stop()

    threads = [threading.Thread(target=device_loop, args=(d,)) for d in devices_for(target)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
