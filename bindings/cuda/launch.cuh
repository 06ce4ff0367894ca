// cuda backend: launch helpers shared by our own kernels (convolutions, the skinny GEMM):
// programmatic dependent launches and the launch status.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "dispatcher.hpp"
#include "tiledispatch/options.hpp"

namespace td::cuda {

// Programmatic dependent launch (sm_90): a kernel launched by pdl_launch may start while
// the kernel before it in the stream still runs (its blocks are placed and run their
// prologue instead of waiting for that kernel's end and a launch gap); it calls pdl_wait()
// before it reads what that kernel writes. Everything earlier in the stream is complete
// by then (that kernel itself started after it). pdl_trigger() in the earlier kernel lets
// the dependent one be placed as soon as every block of it has started. Both are no-ops
// in a kernel launched the usual way. The library's option pdl 0 (td_set_options) launches
// the usual way.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

inline bool pdl_wanted() { return options().pdl != 0; }

template <class... Params, class... Args>
void pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl_wanted() ? 1 : 0;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);  // an error: launch_status reports it
}

// TD_OK, or TD_ERROR naming the launch error of the kernels just launched.
inline int launch_status() {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return fail(TD_ERROR, std::string("kernel launch failed: ") + cudaGetErrorString(err));
    return TD_OK;
}

}  // namespace td::cuda
