// cuda backend: the checked start of a CUTLASS 3.x device operator (GEMM or convolution
// adapter): can_implement -> TD_REJECTED, initialize / run failures -> TD_ERROR with CUDA's
// last error.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cutlass/cutlass.h"
#include "dispatcher.hpp"

namespace td::cuda {

// Launches an initialized operator. CUTLASS judges its launch by cudaGetLastError(), so an
// error left pending by an earlier call of this library would fail a good launch: it is
// cleared first. A failed launch names its grid (CUTLASS has already read the CUDA error).
// TD_ERROR for a failed launch: why, and the CUDA error that was pending before it, if any.
inline int launch_failed(std::string why, cudaError_t pending) {
    if (pending != cudaSuccess) why += std::string("; an earlier CUDA error was pending: ") + cudaGetErrorName(pending);
    return fail(TD_ERROR, why);
}

// The operator's launch: GEMM adapters take a programmatic-dependent-launch flag, the
// convolution adapter does not (and is never launched that way).
template <class Op>
auto run_operator(Op& op, cudaStream_t stream, bool pdl, int) -> decltype(op.run(stream, nullptr, pdl)) {
    return op.run(stream, nullptr, pdl);
}
template <class Op>
cutlass::Status run_operator(Op& op, cudaStream_t stream, bool, long) {
    return op.run(stream);
}

// A launch refused for its configuration, by the driver or by CUTLASS before it reached the
// driver (no CUDA error then): nothing ran and the context is intact.
inline bool launch_refused(cudaError_t err) {
    return err == cudaSuccess || err == cudaErrorInvalidValue || err == cudaErrorInvalidConfiguration ||
           err == cudaErrorLaunchOutOfResources || err == cudaErrorInvalidClusterSize;
}

// pdl: a programmatic dependent launch (launch.cuh), for kernels compiled with
// CUTLASS_ENABLE_GDC_FOR_SM90, whose load warps wait for the kernel before them
// (griddepcontrol.wait) before they read global memory. Never for a kernel without it.
// A refused launch (launch_refused, no error pending before it) is TD_REJECTED, so that the
// library's pick hands the problem to the next kernel of its list (run_first_accepting): an
// H100 refused every launch of the 128x128 cluster-1x2 ping-pong im2col variant, which ran on
// the H200. The message names the grid and CUDA's error.
template <class Op>
int cutlass_run(Op& op, cudaStream_t stream, bool pdl = false) {
    const cudaError_t pending = cudaGetLastError();
    if (run_operator(op, stream, pdl, 0) == cutlass::Status::kSuccess) return TD_OK;
    const cudaError_t err = cudaGetLastError();  // CUTLASS reports a status and leaves CUDA's error
    const dim3 grid = Op::get_grid_shape(op.params());
    std::string why = "kernel launch failed (grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" +
                      std::to_string(grid.z) + ")";
    if (err != cudaSuccess) why += std::string(": ") + cudaGetErrorName(err);
    if (pending == cudaSuccess && launch_refused(err)) return fail(TD_REJECTED, why + ", refused by the driver");
    return launch_failed(why, pending);
}

template <class Op>
int cutlass_start(Op& op, const typename Op::Arguments& args, void* workspace, cudaStream_t stream,
                  bool pdl = false) {
    if (op.can_implement(args) != cutlass::Status::kSuccess)
        return fail(TD_REJECTED, "CUTLASS cannot implement this problem with this kernel");
    if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess)
        return fail(TD_ERROR, std::string("CUTLASS initialize failed: ") + cudaGetErrorString(cudaGetLastError()));
    return cutlass_run(op, stream, pdl);
}

}  // namespace td::cuda
