// cuda backend: the checked start of a CUTLASS 3.x device operator (GEMM or convolution
// adapter): can_implement -> TD_REJECTED, initialize / run failures -> TD_ERROR with CUDA's
// last error.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cutlass/cutlass.h"
#include "dispatcher.hpp"

namespace td::cuda {

template <class Op>
int cutlass_start(Op& op, const typename Op::Arguments& args, void* workspace, cudaStream_t stream) {
    if (op.can_implement(args) != cutlass::Status::kSuccess)
        return fail(TD_REJECTED, "CUTLASS cannot implement this problem with this kernel");
    if (op.initialize(args, workspace, stream) != cutlass::Status::kSuccess)
        return fail(TD_ERROR, std::string("CUTLASS initialize failed: ") + cudaGetErrorString(cudaGetLastError()));
    if (op.run(stream) != cutlass::Status::kSuccess)
        return fail(TD_ERROR, std::string("kernel launch failed: ") + cudaGetErrorString(cudaGetLastError()));
    return TD_OK;
}

}  // namespace td::cuda
