// cuda backend: our own GEMM for decode shapes (few rows of A, layout rcr):
// C = alpha A B^T with A M x K row-major, B N x K row-major (K-contiguous rows, "column-major
// K x N") and C M x N row-major.
//
// With M small the time is B's bytes: 16 x 6144 x 4096 bf16 reads 50 MB, 12 us at the
// H200's copy bandwidth, where cuBLAS takes 22 us and CUTLASS's smallest tiles as long. What
// it takes is bytes in flight (about 32 KB a SM at the copy bandwidth's latency), so:
// - a block holds NT = 16 WR rows of B and MT rows of A; one thread keeps S stages of KT
//   k in flight by TMA (boxes of 128 bytes a row, 128-byte swizzle), the other threads
//   only compute: the bytes in flight cost no registers;
// - its 4 warps are WR row groups x WK k groups (the boxes of a stage taken in turn); each
//   streams 16-byte pieces of its B rows from shared memory straight into the registers
//   an mma.sync takes as its A operand (B's rows are the MMA's M) and A's rows as its B
//   operand (the MMA's N);
// - the WK groups add their accumulators through shared memory at the end; split-K over
//   gridDim.z for problems with few blocks: fp32 partials, added in a fixed order by a
//   second kernel (deterministic).
//
// The 16-byte pieces fit the fragments because the sum over k may run in any order,
// provided both operands use the same one: for m16n8k16, lane (g = lane / 4, c = lane % 4)
// holds rows g and g + 8 at logical k {2c, 2c+1, 2c+8, 2c+9}; 8 consecutive k at c * 8 give
// those four (elements 0-3) and the next MMA's (4-7). fp8 (m16n8k32) is the same with 4-byte
// groups. One warp step: 4 lanes x 16 bytes = 64 bytes of each row; the 128-byte swizzle
// puts the 8 rows g of a step on 8 different bank groups.
// fp8: each MMA starts from zero and is added to fp32 accumulators by the CUDA cores (the
// tensor core's own fp8 accumulation is short; this kernel has the issue slots to spare).
//
// Knobs fixed at compile time (the variant's tile MT x NT x KT): element type, MT (rows of
// A a block: 8, 16, 32, 64), NT (rows of B: 16, 32, 64), KT (k a stage: 256 bytes of a row
// or more). Run time: the split count (TdGemmProblem.splits; 0 = chosen here).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/launch.cuh"
#include "cuda/tma.cuh"
#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::cuda {

template <int DType> struct SkinnyType;
template <> struct SkinnyType<TD_FP16> { using Out = __half; static constexpr int bytes = 2; };
template <> struct SkinnyType<TD_BF16> { using Out = __nv_bfloat16; static constexpr int bytes = 2; };
template <> struct SkinnyType<TD_FP8_E4M3> { using Out = __nv_bfloat16; static constexpr int bytes = 1; };
template <> struct SkinnyType<TD_FP8_E5M2> { using Out = __nv_bfloat16; static constexpr int bytes = 1; };

__device__ __forceinline__ void skinny_store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void skinny_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// d += A B on one tensor-core MMA: m16n8k16 for 16-bit inputs, m16n8k32 for fp8 (there from
// zero, then added in fp32).
template <int DType>
__device__ __forceinline__ void skinny_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (DType == TD_BF16 || DType == TD_FP16) {
        if constexpr (DType == TD_BF16)
            asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        else
            asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        float t[4];
        if constexpr (DType == TD_FP8_E4M3)
            asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%10,%10,%10,%10};\n"
                : "=f"(t[0]), "=f"(t[1]), "=f"(t[2]), "=f"(t[3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
        else
            asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%10,%10,%10,%10};\n"
                : "=f"(t[0]), "=f"(t[1]), "=f"(t[2]), "=f"(t[3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
        d[0] += t[0], d[1] += t[1], d[2] += t[2], d[3] += t[3];
    }
#endif
}

struct SkinnyArgs {
    void* c;
    float* partial;  // split-K: [split][M][N]
    int M, N, K;
    int64_t ldc;  // elements
    float alpha;
    int k_split;  // k of one split: a multiple of KT
};

// The tile's shapes: 4 warps, WR row groups of 16 B rows x WK k groups; S stages of
// (NT + MT) rows x KT elements in about 72 KB (three blocks a SM).
template <int DType, int MT, int NT, int KT>
struct SkinnyShape {
    static constexpr int EB = SkinnyType<DType>::bytes;
    static constexpr int WR = NT / 16, WK = 4 / WR, W = WR * WK;
    static constexpr int NB = KT * EB / 128;  // 128-byte boxes a row and stage
    static constexpr int stage_b = NT * KT * EB, stage_a = MT * KT * EB;
    static constexpr int S = std::min(8, std::max(2, 72 * 1024 / (stage_b + stage_a)));
    static constexpr int J = MT / 8;
    static constexpr int bytes = S * (stage_b + stage_a) + 1024 /* alignment */ + 64 /* barriers */;
    static_assert(NT % 16 == 0 && NT <= 64 && MT % 8 == 0 && MT <= 64 && (KT * EB) % 128 == 0 && NB >= WK,
                  "skinny tile");
};

template <int DType, int MT, int NT, int KT>
__global__ void __launch_bounds__(128) gemm_skinny(const __grid_constant__ CUtensorMap amap,
                                                    const __grid_constant__ CUtensorMap bmap, SkinnyArgs p) {
    using L = SkinnyShape<DType, MT, NT, KT>;
    using Out = typename SkinnyType<DType>::Out;
    constexpr int S = L::S, NB = L::NB, WR = L::WR, WK = L::WK, J = L::J;
    extern __shared__ __align__(128) unsigned char raw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    unsigned char* bs = smem;                      // [S][NB][NT][128]
    unsigned char* as = smem + S * L::stage_b;     // [S][NB][MT][128]
    uint64_t* full = reinterpret_cast<uint64_t*>(as + S * L::stage_a);
    __shared__ float red[WK][WR][J * 4][32];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wr = warp % WR, wk = warp / WR;
    const int n0 = blockIdx.x * NT, m0 = blockIdx.y * MT;
    const int kbeg = blockIdx.z * p.k_split;
    const int kend = min(p.K, kbeg + p.k_split);
    const int chunks = (kend - kbeg + KT - 1) / KT;
    pdl_trigger();  // the split-K reduction may be placed while this runs

    auto issue = [&](int i) {  // chunk i into stage i % S (one thread)
        const int s = i % S;
        mbar_expect(&full[s], L::stage_b + L::stage_a);
        const int x0 = (kbeg + i * KT) * L::EB / 2;  // in 2-byte elements
#pragma unroll
        for (int bx = 0; bx < NB; ++bx) {
            tma_load_2d(bs + s * L::stage_b + bx * NT * 128, &bmap, x0 + bx * 64, n0, &full[s]);
            tma_load_2d(as + s * L::stage_a + bx * MT * 128, &amap, x0 + bx * 64, m0, &full[s]);
        }
    };
    if (tid == 0) {
        for (int s = 0; s < S; ++s) mbar_init(&full[s], 1);
        for (int i = 0; i < S && i < chunks; ++i) issue(i);
    }
    __syncthreads();

    float acc[J][4];
#pragma unroll
    for (int j = 0; j < J; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    // lane (g, c) reads rows with row % 8 == g: the 16-byte piece q * 4 + c of a 128-byte
    // box row sits at piece (q * 4 + c) ^ g (the 128-byte swizzle)
    const int brow = (16 * wr + g) * 128;
    for (int i = 0; i < chunks; ++i) {
        const int s = i % S;
        mbar_wait(&full[s], (unsigned)(i / S) & 1u);
#pragma unroll
        for (int bx = wk; bx < NB; bx += WK) {
            const unsigned char* bbox = bs + s * L::stage_b + bx * NT * 128 + brow;
            const unsigned char* abox = as + s * L::stage_a + bx * MT * 128 + g * 128;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int piece = ((q * 4 + c) ^ g) * 16;
                const uint4 lo = *reinterpret_cast<const uint4*>(bbox + piece);
                const uint4 hi = *reinterpret_cast<const uint4*>(bbox + 8 * 128 + piece);
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const uint4 x = *reinterpret_cast<const uint4*>(abox + j * 8 * 128 + piece);
                    skinny_mma<DType>(acc[j], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
                    skinny_mma<DType>(acc[j], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
                }
            }
        }
        __syncthreads();  // stage s read by every warp: it may be loaded again
        if (tid == 0 && i + S < chunks) issue(i + S);
    }

#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[wk][wr][j * 4 + e][lane] = acc[j][e];
    __syncthreads();
    // accumulator (j, e) of lane (g, c) in row group r: C[m0 + 8j + 2c + e % 2][n0 + 16r + g + 8 (e / 2)]
    for (int idx = tid; idx < WR * J * 4 * 32; idx += 128) {
        const int l = idx & 31, i = (idx >> 5) % (J * 4), r = idx / (J * 4 * 32);
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WK; ++w) sum += red[w][r][i][l];
        const int j = i >> 2, e = i & 3;
        const int n = n0 + 16 * r + (l >> 2) + 8 * (e >> 1), m = m0 + 8 * j + 2 * (l & 3) + (e & 1);
        if (n >= p.N || m >= p.M) continue;
        if (gridDim.z == 1)
            skinny_store(static_cast<Out*>(p.c) + (int64_t)m * p.ldc + n, p.alpha * sum);
        else
            p.partial[((int64_t)blockIdx.z * p.M + m) * p.N + n] = sum;
    }
}

// C = alpha * (sum of the splits' partials, in split order).
template <class Out>
__global__ void gemm_skinny_reduce(const float* __restrict__ partial, Out* __restrict__ c, int M, int N, int64_t ldc,
                                   int splits, float alpha) {
    pdl_wait();
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t elems = (int64_t)M * N;
    if (e >= elems) return;
    float sum = 0.f;
    for (int z = 0; z < splits; ++z) sum += partial[z * elems + e];
    skinny_store(c + (e / N) * ldc + e % N, alpha * sum);
}

template <int DType, int MT, int NT, int KT>
struct SkinnyGemm {
    using Out = typename SkinnyType<DType>::Out;
    using L = SkinnyShape<DType, MT, NT, KT>;
    static constexpr int kBytes = SkinnyType<DType>::bytes;
    static constexpr int kVec = 16 / kBytes;
    static constexpr int kMaxSplits = 16;

    static int64_t lda(const TdGemmProblem& p) { return p.lda ? p.lda : p.K; }
    static int64_t ldb(const TdGemmProblem& p) { return p.ldb ? p.ldb : p.K; }
    static int64_t ldc(const TdGemmProblem& p) { return p.ldc ? p.ldc : p.N; }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != TD_RCR) { *why = "layout differs"; return TD_UNSUPPORTED; }
        if (p.M > INT32_MAX || p.N > INT32_MAX || p.K > INT32_MAX) { *why = "a size exceeds 2^31"; return TD_UNSUPPORTED; }
        if ((p.M + MT - 1) / MT > 65535) { *why = "more than 65535 row blocks of A"; return TD_UNSUPPORTED; }
        if (p.K % kVec || lda(p) % kVec || ldb(p) % kVec) {
            *why = "K and the leading dimensions of A and B must each be a multiple of 16 bytes (TMA); "
                   "a pad variant takes it";
            return TD_UNSUPPORTED;
        }
        if (ldc(p) < p.N || lda(p) < p.K || ldb(p) < p.K) { *why = "a leading dimension is below its row"; return TD_UNSUPPORTED; }
        if (p.splits < 0 || p.splits > kMaxSplits) {
            *why = "splits must be 0 (chosen by the kernel) to " + std::to_string(kMaxSplits);
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    // The split count: the caller's, or enough blocks for two a SM while a split keeps at
    // least 8 stages; at most one split per stage.
    static int splits(const TdGemmProblem& p) {
        const int64_t chunks = std::max<int64_t>(1, (p.K + KT - 1) / KT);
        int s = p.splits;
        if (s <= 0) {
            const int64_t blocks = ((p.N + NT - 1) / NT) * ((p.M + MT - 1) / MT);
            const int64_t want = 2 * (int64_t)device::multiprocessors();
            s = 1;
            while (s * 2 <= kMaxSplits && blocks * s < want && chunks / (s * 2) >= 8) s *= 2;
        }
        s = (int)std::min<int64_t>(s, chunks);
        const int64_t per = (chunks + s - 1) / s;  // stages a split
        return (int)((chunks + per - 1) / per);    // no empty split
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        const int s = splits(p);
        return s > 1 ? (size_t)s * p.M * p.N * sizeof(float) : 0;
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15u)
            return fail(TD_REJECTED, "A and B must be 16-byte aligned (TMA)");
        if (reinterpret_cast<uintptr_t>(c) % sizeof(Out)) return fail(TD_REJECTED, "C is not aligned to its element");
        if (p.M == 0 || p.N == 0) return TD_OK;
        CUtensorMap amap, bmap;
        if (!tma_map_rows(&amap, a, p.K * kBytes, p.M, lda(p) * kBytes, 64, MT, CU_TENSOR_MAP_SWIZZLE_128B) ||
            !tma_map_rows(&bmap, b, p.K * kBytes, p.N, ldb(p) * kBytes, 64, NT, CU_TENSOR_MAP_SWIZZLE_128B))
            return fail(TD_REJECTED, "the driver refused the tensor maps of A and B");
        const int s = splits(p);
        const int64_t chunks = std::max<int64_t>(1, (p.K + KT - 1) / KT);
        SkinnyArgs args{c, nullptr, (int)p.M, (int)p.N, (int)p.K, ldc(p), p.alpha, (int)(((chunks + s - 1) / s) * KT)};
        if (s > 1) {
            void* scratch = nullptr;
            if (int st = take_workspace(workspace_size(p), ws, ws_bytes, stream_ptr, &scratch)) return st;
            args.partial = static_cast<float*>(scratch);
        }
        const dim3 grid((unsigned)((p.N + NT - 1) / NT), (unsigned)((p.M + MT - 1) / MT), (unsigned)s);
        auto kernel = gemm_skinny<DType, MT, NT, KT>;
        static const cudaError_t attr =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::bytes);
        if (attr != cudaSuccess) return fail(TD_ERROR, std::string("skinny GEMM: ") + cudaGetErrorString(attr));
        kernel<<<grid, 128, L::bytes, stream>>>(amap, bmap, args);
        if (s > 1) {
            const int64_t elems = p.M * p.N;
            pdl_launch(gemm_skinny_reduce<Out>, dim3((unsigned)((elems + 255) / 256)), dim3(256), 0, stream,
                       args.partial, static_cast<Out*>(c), (int)p.M, (int)p.N, ldc(p), s, p.alpha);
        }
        return launch_status();
    }

    // schedule 2: our skinny kernel (the cost model's bandwidth branch); cluster 1 x 1.
    static constexpr GemmKernel entry(const char* name) {
        return GemmKernel{{name, DType, TD_RCR, 0, -1, MT, NT, KT, 1, 1, 2, 0, 0}, &supports, &workspace_size, &run};
    }
};

}  // namespace td::cuda
