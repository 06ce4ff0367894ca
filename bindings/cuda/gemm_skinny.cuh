// cuda backend: our own GEMM for decode shapes (few rows of A, layout rcr):
// C = alpha A B^T with A M x K row-major, B N x K row-major (K-contiguous rows, "column-major
// K x N") and C M x N row-major.
//
// With M small the time is B's bytes: 16 x 6144 x 4096 bf16 reads 50 MB, 12 us at the
// H200's copy bandwidth, where cuBLAS takes 23 us and CUTLASS's smallest tiles as long. So
// no shared memory on the inputs: every lane streams 16-byte vectors of B's rows straight
// into the registers an mma.sync takes as its A operand (B's rows are the MMA's M), and A's
// rows as its B operand (the MMA's N), D warp steps in flight. (A TMA ring into shared
// memory, read in swizzled 16-byte pieces, measured slower on every bf16 decode shape:
// bench/RESULTS.md.)
//
// The vectors fit the fragments because the sum over k may run in any order, provided both
// operands use the same one: for m16n8k16, lane (g = lane / 4, c = lane % 4) holds rows g
// and g + 8 at logical k {2c, 2c+1, 2c+8, 2c+9}; a 16-byte vector of 8 consecutive k at
// c * 8 gives those four (elements 0-3) and the next MMA's (4-7). fp8 (m16n8k32) is the
// same with 4-byte groups. One warp step: 4 lanes x 16 bytes = 64 bytes of each row.
//
// A block holds NT = 16 R rows of B and MT rows of A; its W warps interleave the warp steps
// over its k range (a block step reads W x 64 contiguous bytes of each row) and add their
// accumulators through shared memory at the end. Split-K over gridDim.z for problems with
// few blocks: fp32 partials, added in a fixed order by a second kernel (deterministic).
// fp8: each pair of MMAs (64 k) starts from zero and is added to fp32 accumulators by the CUDA
// cores (the tensor core's own fp8 accumulation is short; this kernel has issue slots to spare).
//
// Knobs fixed at compile time (the variant's tile MT x NT x KT, KT = W x the warp step's k):
// element type, MT (rows of A a block, a multiple of 8), NT (rows of B, 16 or 32), W, and
// Features: 0, or the generic epilogue (`fusion: generic`), which applies in the store, element
// by element, in fp32, as the cpu reference does:
//   x = alpha * acc * row_scale[m] * col_scale[n] + beta * C + bias;  aux = x;  D = act(x)
// with D, C, aux and bias of the output type chosen at run time (fp32, fp16 or bf16). The
// store is M x N elements against B's N x K, so a decode GEMM with an epilogue streams B as
// fast as the plain one. C is read before D is written by the same thread: C may be D.
// Run time: the split count (TdGemmProblem.splits; 0 = chosen here).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/launch.cuh"
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

// d += A B on one tensor-core MMA: m16n8k16 for 16-bit inputs, m16n8k32 for fp8.
template <int DType>
__device__ __forceinline__ void skinny_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TD_SKINNY_MMA(SHAPE, TYPES)                                                                              \
    asm volatile("mma.sync.aligned." SHAPE ".row.col.f32." TYPES ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
                 "{%0,%1,%2,%3};\n"                                                                              \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
    if constexpr (DType == TD_BF16) TD_SKINNY_MMA("m16n8k16", "bf16.bf16");
    if constexpr (DType == TD_FP16) TD_SKINNY_MMA("m16n8k16", "f16.f16");
    if constexpr (DType == TD_FP8_E4M3) TD_SKINNY_MMA("m16n8k32", "e4m3.e4m3");
    if constexpr (DType == TD_FP8_E5M2) TD_SKINNY_MMA("m16n8k32", "e5m2.e5m2");
#undef TD_SKINNY_MMA
#endif
}

// d += the two MMAs of one 16-byte piece of B's rows g and g + 8 (lo, hi) and of A's row
// (x). fp8: the pair's sum starts from zero and is added to d in fp32 (every 64 k, as
// precise as CUTLASS's promotion every 4 MMAs of 32).
template <int DType>
__device__ __forceinline__ void skinny_mma_pair(float (&d)[4], const uint4& lo, const uint4& hi, const uint4& x) {
    if constexpr (DType == TD_BF16 || DType == TD_FP16) {
        skinny_mma<DType>(d, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
        skinny_mma<DType>(d, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
    } else {
        float t[4] = {0.f, 0.f, 0.f, 0.f};
        skinny_mma<DType>(t, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
        skinny_mma<DType>(t, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
        d[0] += t[0], d[1] += t[1], d[2] += t[2], d[3] += t[3];
    }
}

// One 16-byte vector, zero where `ok` is false (no load issued). Stream (B, read once): no
// L1 allocation, 256-byte L2 fetches (a warp step reads 64 bytes of a row, the block step
// the next W x 64); otherwise (A, read by every block) through L1.
template <bool Stream>
__device__ __forceinline__ uint4 skinny_load(const char* p, bool ok) {
    uint4 v;
#define TD_SKINNY_LOAD(QUALIFIERS)                                                                            \
    asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n"             \
                 " mov.b32 %2, 0;\n mov.b32 %3, 0;\n @q ld.global.nc" QUALIFIERS ".v4.u32 {%0,%1,%2,%3}, [%4];\n}\n" \
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                                 \
                 : "l"(p), "r"((int)ok))
    if constexpr (Stream)
        TD_SKINNY_LOAD(".L1::no_allocate.L2::256B");
    else
        TD_SKINNY_LOAD("");
#undef TD_SKINNY_LOAD
    return v;
}

// The generic epilogue's operands (null where the problem asks for none) and fields.
struct SkinnyEpilogue {
    const void* c;
    const void* bias;
    void* aux;
    const float* row_scale;
    const float* col_scale;
    float beta;
    int bias_kind;  // enum td_bias
    int act;        // enum td_activation
    int out;        // enum td_out_dtype of D, C, aux and bias: fp32, fp16 or bf16
};

__device__ __forceinline__ float skinny_load_out(const void* base, int64_t at, int out) {
    if (out == TD_OUT_FP32) return static_cast<const float*>(base)[at];
    if (out == TD_OUT_FP16) return __half2float(static_cast<const __half*>(base)[at]);
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[at]);
}

__device__ __forceinline__ void skinny_store_out(void* base, int64_t at, int out, float v) {
    if (out == TD_OUT_FP32) static_cast<float*>(base)[at] = v;
    else if (out == TD_OUT_FP16) static_cast<__half*>(base)[at] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(base)[at] = __float2bfloat16_rn(v);
}

// enum td_activation, the cpu reference's formulas: gelu the erf form, gelu_tanh the tanh one.
__device__ __forceinline__ float skinny_activate(int act, float x) {
    switch (act) {
        case TD_ACT_RELU: return x < 0.0f ? 0.0f : x;  // NaN stays NaN
        case TD_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        case TD_ACT_GELU_TANH: return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        case TD_ACT_SILU: return x / (1.0f + expf(-x));
        default: return x;
    }
}

// D[m][n] from the sum over k, through the generic epilogue (alpha applied here).
__device__ __forceinline__ void skinny_epilogue(const SkinnyEpilogue& e, void* d, int64_t ldc, float alpha, int m,
                                                int n, float sum) {
    const int64_t at = (int64_t)m * ldc + n;
    float x = alpha * sum;
    if (e.row_scale) x *= e.row_scale[m];
    if (e.col_scale) x *= e.col_scale[n];
    if (e.beta != 0.0f) x += e.beta * skinny_load_out(e.c, at, e.out);
    if (e.bias_kind == TD_BIAS_N) x += skinny_load_out(e.bias, n, e.out);
    if (e.bias_kind == TD_BIAS_M) x += skinny_load_out(e.bias, m, e.out);
    if (e.aux) skinny_store_out(e.aux, at, e.out, x);
    skinny_store_out(d, at, e.out, skinny_activate(e.act, x));
}

struct SkinnyArgs {
    const char* a;
    const char* b;
    void* c;
    float* partial;  // split-K: [split][M][N]
    int M, N, K;
    int64_t lda, ldb, ldc;  // elements
    float alpha;
    int k_split;  // k of one split: a multiple of the block step
    SkinnyEpilogue epi;  // read by generic variants only
};

// 16-bit: at most 128 registers (4 blocks of 4 warps a SM); fp8 168 (3 blocks; 128 spills)
template <int DType, int MT, int R, int W, bool Generic>
__global__ void __launch_bounds__(W * 32, SkinnyType<DType>::bytes == 2 ? 512 / (W * 32) : 384 / (W * 32)) gemm_skinny(SkinnyArgs p) {
    using Out = typename SkinnyType<DType>::Out;
    constexpr int EB = SkinnyType<DType>::bytes;
    constexpr int E = 16 / EB;   // elements of a 16-byte vector
    constexpr int KW = 4 * E;    // k of one warp step
    constexpr int J = MT / 8;    // n8 MMA tiles over A's rows
    constexpr int LOADS = 2 * R + J;
    constexpr int D = LOADS <= 4 ? 4 : LOADS <= 6 ? 3 : 2;  // warp steps in flight
    constexpr int ACC = R * J * 4;
    __shared__ float red[W][ACC][32];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int n0 = blockIdx.x * 16 * R, m0 = blockIdx.y * MT;
    const int kbeg = blockIdx.z * p.k_split;
    const int kend = min(p.K, kbeg + p.k_split);
    pdl_trigger();  // the split-K reduction may be placed while this runs

    const char* brow[R][2];
    bool bok[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + 16 * r + 8 * h + g;
            bok[r][h] = n < p.N;
            brow[r][h] = p.b + (int64_t)(bok[r][h] ? n : 0) * p.ldb * EB + c * 16;
        }
    const char* arow[J];
    bool aok[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int m = m0 + 8 * j + g;
        aok[j] = m < p.M;
        arow[j] = p.a + (int64_t)(aok[j] ? m : 0) * p.lda * EB + c * 16;
    }

    float acc[R][J][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < J; ++j) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;

    // A register pipeline D warp steps deep: step t + D - 1's loads are issued before step
    // t's MMAs, every load and MMA an asm volatile so that the compiler keeps that order
    // (left to itself it issued one step ahead: too few bytes in flight for the bandwidth).
    // kw is the warp's step start, the same in every lane (the MMAs need the whole warp); a
    // lane's vector starts c * E further and lies inside [kbeg, kend) when it starts there.
    constexpr int kstep = W * KW;
    const int kw0 = kbeg + warp * KW;
    const int steps = kw0 < kend ? (kend - kw0 + kstep - 1) / kstep : 0;
    uint4 bv[D][R][2], av[D][J];
    auto load = [&](uint4 (&bs)[R][2], uint4 (&as)[J], int step) {
        const int kk = kw0 + step * kstep;
        const bool in = kk + c * E < kend;
        const int64_t off = (int64_t)kk * EB;
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) bs[r][h] = skinny_load<true>(brow[r][h] + off, in && bok[r][h]);
#pragma unroll
        for (int j = 0; j < J; ++j) as[j] = skinny_load<false>(arow[j] + off, in && aok[j]);
    };
#pragma unroll
    for (int u = 0; u < D - 1; ++u) load(bv[u], av[u], u);
    for (int t = 0; t < steps; t += D) {
#pragma unroll
        for (int u = 0; u < D; ++u) {
            load(bv[(u + D - 1) % D], av[(u + D - 1) % D], t + u + D - 1);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    skinny_mma_pair<DType>(acc[r][j], bv[u][r][0], bv[u][r][1], av[u][j]);
                }
        }
    }

#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) red[warp][(r * J + j) * 4 + e][lane] = acc[r][j][e];
    __syncthreads();
    // accumulator i = (r, j, e) of lane (g, c): C[m0 + 8j + 2c + e % 2][n0 + 16r + g + 8 (e / 2)]
    for (int idx = threadIdx.x; idx < ACC * 32; idx += W * 32) {
        const int i = idx >> 5, l = idx & 31;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < W; ++w) sum += red[w][i][l];
        const int r = i / (J * 4), j = (i >> 2) % J, e = i & 3;
        const int n = n0 + 16 * r + (l >> 2) + 8 * (e >> 1), m = m0 + 8 * j + 2 * (l & 3) + (e & 1);
        if (n >= p.N || m >= p.M) continue;
        if (gridDim.z == 1 && Generic)
            skinny_epilogue(p.epi, p.c, p.ldc, p.alpha, m, n, sum);
        else if (gridDim.z == 1)
            skinny_store(static_cast<Out*>(p.c) + (int64_t)m * p.ldc + n, p.alpha * sum);
        else
            p.partial[((int64_t)blockIdx.z * p.M + m) * p.N + n] = sum;
    }
}

// C = alpha * (sum of the splits' partials, in split order); Generic: through the epilogue.
template <class Out, bool Generic>
__global__ void gemm_skinny_reduce(const float* __restrict__ partial, void* c, int M, int N, int64_t ldc,
                                   int splits, float alpha, SkinnyEpilogue epi) {
    pdl_wait();
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t elems = (int64_t)M * N;
    if (e >= elems) return;
    float sum = 0.f;
    for (int z = 0; z < splits; ++z) sum += partial[z * elems + e];
    if constexpr (Generic)
        skinny_epilogue(epi, c, ldc, alpha, (int)(e / N), (int)(e % N), sum);
    else
        skinny_store(static_cast<Out*>(c) + (e / N) * ldc + e % N, alpha * sum);
}

template <int DType, int MT, int NT, int KT, int Features = 0>
struct SkinnyGemm {
    using Out = typename SkinnyType<DType>::Out;
    static constexpr bool kGeneric = Features != 0;
    static constexpr int kBytes = SkinnyType<DType>::bytes;
    static constexpr int kVec = 16 / kBytes;
    static constexpr int kWarpK = 4 * kVec;
    static constexpr int R = NT / 16, W = KT / kWarpK;
    static constexpr int kMaxSplits = 16;
    static_assert(MT % 8 == 0 && NT % 16 == 0 && KT % kWarpK == 0 && W >= 1 && W <= 16, "skinny tile");
    static_assert(R * (MT / 8) <= 8, "skinny: at most 32 accumulators a thread");

    static int64_t lda(const TdGemmProblem& p) { return p.lda ? p.lda : p.K; }
    static int64_t ldb(const TdGemmProblem& p) { return p.ldb ? p.ldb : p.K; }
    static int64_t ldc(const TdGemmProblem& p) { return p.ldc ? p.ldc : p.N; }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != TD_RCR) { *why = "layout differs"; return TD_UNSUPPORTED; }
        if (p.M > INT32_MAX || p.N > INT32_MAX || p.K > INT32_MAX) { *why = "a size exceeds 2^31"; return TD_UNSUPPORTED; }
        if ((p.M + MT - 1) / MT > 65535) { *why = "more than 65535 row blocks of A"; return TD_UNSUPPORTED; }
        if (p.K % kVec || lda(p) % kVec || ldb(p) % kVec) {
            *why = "K and the leading dimensions of A and B must each be a multiple of 16 bytes (16-byte vector loads); "
                   "a pad variant takes it";
            return TD_UNSUPPORTED;
        }
        if (ldc(p) < p.N || lda(p) < p.K || ldb(p) < p.K) { *why = "a leading dimension is below its row"; return TD_UNSUPPORTED; }
        if (p.splits < 0 || p.splits > kMaxSplits) {
            *why = "splits must be 0 (chosen by the kernel) to " + std::to_string(kMaxSplits);
            return TD_UNSUPPORTED;
        }
        if (kGeneric && (p.out_dtype == TD_OUT_FP8_E4M3 || p.out_dtype == TD_OUT_FP8_E5M2)) {
            *why = "the skinny epilogue writes fp32, fp16 or bf16 (no fp8 output)";
            return TD_UNSUPPORTED;
        }
        if (kGeneric && (p.activation < 0 || p.activation >= TD_ACTIVATION_COUNT)) {
            *why = "unknown activation code " + std::to_string(p.activation);
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    // enum td_out_dtype of D, C, aux and bias: the problem's, else the input type's output.
    static int out_code(const TdGemmProblem& p) {
        if (kGeneric && p.out_dtype != TD_OUT_DEFAULT) return p.out_dtype;
        return DType == TD_FP16 ? TD_OUT_FP16 : TD_OUT_BF16;
    }

    // The split count: the caller's, or enough blocks for two a SM while a split keeps at
    // least 8 block steps; at most one split per block step.
    static int splits(const TdGemmProblem& p) {
        const int64_t steps = std::max<int64_t>(1, (p.K + KT - 1) / KT);
        int s = p.splits;
        if (s <= 0) {
            const int64_t blocks = ((p.N + NT - 1) / NT) * ((p.M + MT - 1) / MT);
            const int64_t want = 2 * (int64_t)device::multiprocessors();
            s = 1;
            while (s * 2 <= kMaxSplits && blocks * s < want && steps / (s * 2) >= 8) s *= 2;
        }
        s = (int)std::min<int64_t>(s, steps);
        const int64_t per = (steps + s - 1) / s;  // block steps a split
        return (int)((steps + per - 1) / per);    // no empty split
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        const int s = splits(p);
        return s > 1 ? (size_t)s * p.M * p.N * sizeof(float) : 0;
    }

    // The epilogue's operands as the kernel reads them: those the problem asks for, else null.
    static int epilogue(const TdGemmProblem& p, const TdGemmEpilogue& ep, SkinnyEpilogue* e) {
        const int out = out_code(p);
        *e = SkinnyEpilogue{p.beta != 0.0f ? ep.c : nullptr, p.bias != TD_BIAS_NONE ? ep.bias : nullptr,
                            p.aux ? ep.aux : nullptr, p.row_scale ? ep.row_scale : nullptr,
                            p.col_scale ? ep.col_scale : nullptr, p.beta, p.bias, p.activation, out};
        const size_t size = out == TD_OUT_FP32 ? 4 : 2;
        const struct { const void* ptr; bool asked; const char* what; size_t align; } operands[] = {
            {e->c, p.beta != 0.0f, "C", size}, {e->bias, p.bias != TD_BIAS_NONE, "the bias", size},
            {e->aux, p.aux != 0, "aux", size}, {e->row_scale, p.row_scale != 0, "row_scale", 4},
            {e->col_scale, p.col_scale != 0, "col_scale", 4}};
        for (const auto& o : operands) {
            if (o.asked && !o.ptr) return fail(TD_REJECTED, std::string(o.what) + " is null but the problem asks for it");
            if (reinterpret_cast<uintptr_t>(o.ptr) % o.align)
                return fail(TD_REJECTED, std::string(o.what) + " is not aligned to its element");
        }
        return TD_OK;
    }

    static int run_ex(const TdGemmProblem& p, const void* a, const void* b, void* c, const TdGemmEpilogue& ep,
                      void* ws, size_t ws_bytes, void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if (gemm_features(p) & ~Features)  // selection never hands such a problem here
            return fail(TD_REJECTED, "the kernel implements no such epilogue (a generic variant does)");
        if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15u)
            return fail(TD_REJECTED, "A and B must be 16-byte aligned (16-byte vector loads)");
        SkinnyEpilogue epi{};
        if (kGeneric)
            if (int st = epilogue(p, ep, &epi)) return st;
        const size_t d_size = kGeneric && epi.out == TD_OUT_FP32 ? 4 : sizeof(Out);
        if (reinterpret_cast<uintptr_t>(c) % d_size) return fail(TD_REJECTED, "C is not aligned to its element");
        if (p.M == 0 || p.N == 0) return TD_OK;
        const int s = splits(p);
        const int64_t steps = std::max<int64_t>(1, (p.K + KT - 1) / KT);
        SkinnyArgs args{static_cast<const char*>(a), static_cast<const char*>(b), c, nullptr, (int)p.M, (int)p.N,
                        (int)p.K, lda(p), ldb(p), ldc(p), p.alpha, (int)(((steps + s - 1) / s) * KT), epi};
        if (s > 1) {
            void* scratch = nullptr;
            if (int st = take_workspace(workspace_size(p), ws, ws_bytes, stream_ptr, &scratch)) return st;
            args.partial = static_cast<float*>(scratch);
        }
        const dim3 grid((unsigned)((p.N + NT - 1) / NT), (unsigned)((p.M + MT - 1) / MT), (unsigned)s);
        gemm_skinny<DType, MT, R, W, kGeneric><<<grid, W * 32, 0, stream>>>(args);
        if (s > 1) {
            const int64_t elems = p.M * p.N;
            pdl_launch(gemm_skinny_reduce<Out, kGeneric>, dim3((unsigned)((elems + 255) / 256)), dim3(256), 0, stream,
                       args.partial, c, (int)p.M, (int)p.N, ldc(p), s, p.alpha, epi);
        }
        return launch_status();
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        return run_ex(p, a, b, c, TdGemmEpilogue{}, ws, ws_bytes, stream_ptr);
    }
};

}  // namespace td::cuda
