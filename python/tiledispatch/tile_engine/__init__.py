"""The tile engine: sweep -> scratch build -> isolated benchmark workers -> tuning table.

Phase 1 (`sweep`): a kernels.yaml fragment whose tile sizes may be ranges, expanded with
the codegen's rules; variants a backend cannot build are counted as rejected, with why.
Phase 2 (`build`): a scratch Meson build of exactly those variants; a variant that fails
to compile is recorded and left out. Phase 3 (`runner` + `worker`): one worker process
per device fed JSON batches on stdin; a crash or hang costs one kernel (MISSING), not the
sweep. `tuning` turns results into the table the dispatcher reads.
"""
