"""The tile engine's benchmark worker with faults injected, for the runner's tests (never
shipped): the runner starts it through runner.run(..., worker_command=[sys.executable,
this file, ...]) and it speaks the real worker's protocol, running the real worker's main,
except for the kernels it is told to fail on.

    python tests/fault_worker.py [--crash NAME] [--hang NAME] [--crash-timed NAME]

--crash: the process aborts while preparing that kernel; --hang: it sleeps for an hour
there; --crash-timed: it aborts on that kernel's first timed run (after its preparation).
"""
import argparse
import os
import sys
import time

from tiledispatch.dispatcher import Dispatcher
from tiledispatch.tile_engine import worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crash", help="abort while preparing this kernel")
    parser.add_argument("--hang", help="never return from preparing this kernel")
    parser.add_argument("--crash-timed", help="abort on this kernel's first timed run")
    args = parser.parse_args()

    prepare, run, prepared = worker._prepare, Dispatcher.run, set()

    def faulty_prepare(d, case, name, warmup, verify):
        if name == args.crash:
            os.abort()
        if name == args.hang:
            time.sleep(3600)
        result = prepare(d, case, name, warmup, verify)
        prepared.add(name)
        return result

    def faulty_run(self, problem, *arrays, kernel=None, **options):
        if kernel is not None and kernel == args.crash_timed and kernel in prepared:
            os.abort()
        return run(self, problem, *arrays, kernel=kernel, **options)

    worker._prepare = faulty_prepare
    Dispatcher.run = faulty_run
    return worker.main()


if __name__ == "__main__":
    sys.exit(main())
