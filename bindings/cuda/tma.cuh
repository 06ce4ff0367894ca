// cuda backend: the Tensor Memory Accelerator (sm_90) for our own kernels. A tensor map
// describes a channels-last activation tensor as a 5-D array (channels, W, H, D, N); one
// thread then copies a whole box (a block's input tile with its halo) into shared memory
// with one instruction, zeros where the box leaves the tensor (the padding), and an
// mbarrier says when the bytes have landed. The per-pixel address arithmetic, bounds checks
// and 16-byte cp.async of a software copy go away (H200: about 45 instructions per 16 bytes
// in conv_mma_tiled.cuh's copy loop).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (header only: the encoder is found at run time)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace td::cuda {

// ------------------------------------------------------------------ host: the tensor map
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, looked up once (the libraries do not link libcuda).
inline EncodeTiledFn tma_encoder() {
    static EncodeTiledFn fn = []() -> EncodeTiledFn {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
        const cudaError_t err =
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
#else
        const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
        if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        return reinterpret_cast<EncodeTiledFn>(p);
    }();
    return fn;
}

// A tensor map over a channels-last tensor of 2-byte elements: dims[0] channels (all
// groups), dims[1..3] W, H, D, dims[4] N; box[5] in elements; swizzle: how the box is laid
// out in shared memory (SWIZZLE_64B: the 16-byte pieces of byte offset o at bits 4-5 XOR
// bits 7-8 of o; 32B: bit 4 XOR bit 7), which keeps a warp's row-wise accesses off one bank.
// False where the driver refuses (the caller then keeps its software copy).
inline bool tma_map_16bit(CUtensorMap* map, const void* base, const int64_t (&dims)[5], const int (&box)[5],
                          CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
    const EncodeTiledFn encode = tma_encoder();
    if (!encode || reinterpret_cast<uintptr_t>(base) % 16) return false;
    cuuint64_t size[5], stride[4];
    cuuint32_t boxdim[5], elem[5];
    uint64_t bytes = 2;
    for (int i = 0; i < 5; ++i) {
        if (dims[i] < 1 || box[i] < 1 || box[i] > 256) return false;
        size[i] = (cuuint64_t)dims[i];
        boxdim[i] = (cuuint32_t)box[i];
        elem[i] = 1;
        bytes *= (uint64_t)dims[i];
        if (i < 4) stride[i] = bytes;  // bytes from one index of dimension i + 1 to the next
    }
    if ((box[0] * 2) % 16 || stride[0] % 16) return false;
    std::memset(map, 0, sizeof(*map));
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 5, const_cast<void*>(base), size, stride, boxdim, elem,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// ------------------------------------------------------------------ device
// fence: make the initialization visible to the TMA (the async proxy); several barriers
// initialized together need it after the last one only.
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count, bool fence = true) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(count));
    if (fence) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The next phase of `bar` will complete when `bytes` have arrived (one thread calls it).
__device__ __forceinline__ void mbar_expect(uint64_t* bar, unsigned bytes) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait;\n"
        "}\n" ::"r"(a),
        "r"(parity)
        : "memory");
}

// One box of the tensor map at element coordinates c (channel, w, h, d, n; negative and
// past-the-end coordinates read zeros) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, const int (&c)[5], uint64_t* bar) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5, %6}], [%7];\n" ::"r"(d),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(b)
        : "memory");
}

// Starts bringing one box into L2 (no shared memory, no completion to wait for).
__device__ __forceinline__ void tma_prefetch_5d(const CUtensorMap* map, const int (&c)[5]) {
    asm volatile("cp.async.bulk.prefetch.tensor.5d.L2.global.tile [%0, {%1, %2, %3, %4, %5}];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
                 : "memory");
}

// Stores one box from shared memory to the tensor at coordinates c (the parts outside the
// tensor are not written), as one bulk group of this thread.
__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, const void* src, const int (&c)[5]) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(src);
    asm volatile(
        "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(s), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// This thread's bulk stores have read their shared memory (it may be written again).
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// ... and are complete.
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Makes this thread's shared-memory writes visible to the TMA (the async proxy).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace td::cuda
