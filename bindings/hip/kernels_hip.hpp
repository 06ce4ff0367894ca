// hip backend: the GPU side of our MFMA kernels (GEMM regular and stream-K; grouped conv
// fwd, bwd_data, bwd_weight as implicit GEMM), compiled with clang -x hip for gfx90a /
// gfx942 / gfx950. The engine (bindings/hip/mfma_engine.hpp) is shared with the host
// emulator; this file adds the MFMA builtins, the per-thread executor and the launches.
//
// The kernels call no device-library function (work-item ids through the amdgcn builtins,
// conversions in the engine), so they link with -nogpulib where the device libraries lack
// the architecture (Debian's ROCm 5.2 libraries have no gfx942).
#pragma once

#include <hip/hip_runtime.h>

#include <string>
#include <type_traits>

#include "dispatcher.hpp"
#include "hip/epilogue.hpp"
#include "hip/operands.hpp"
#include "tiledispatch/conv_geometry.hpp"
#include "tiledispatch/device.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::hip {

typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
typedef short short4_t __attribute__((ext_vector_type(4)));
typedef float float4_t __attribute__((ext_vector_type(4)));
typedef float float16_t __attribute__((ext_vector_type(16)));

// One MFMA: c (CPL floats of this lane) += A fragment x B fragment.
template <int DT, int MM, class S, int KPL, int CPL>
__device__ inline void mfma_step(const S (&a)[KPL], const S (&b)[KPL], float (&c)[CPL]) {
    using C = std::conditional_t<CPL == 16, float16_t, float4_t>;
    C acc;
    __builtin_memcpy(&acc, c, sizeof acc);
    if constexpr (DT == TD_FP16) {
        half4_t x, y;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            x[i] = __builtin_bit_cast(_Float16, a[i]);
            y[i] = __builtin_bit_cast(_Float16, b[i]);
        }
        if constexpr (MM == 32) acc = __builtin_amdgcn_mfma_f32_32x32x8f16(x, y, acc, 0, 0, 0);
        else acc = __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, acc, 0, 0, 0);
    } else if constexpr (DT == TD_BF16) {
        const short4_t x = __builtin_bit_cast(short4_t, a), y = __builtin_bit_cast(short4_t, b);
        if constexpr (MM == 32) acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(x, y, acc, 0, 0, 0);
        else acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(x, y, acc, 0, 0, 0);
    } else {
        // fp8: the instruction reads OCP (gfx950) or FNUZ (gfx942) encodings by architecture.
        const long x = __builtin_bit_cast(long, a), y = __builtin_bit_cast(long, b);
        constexpr bool e4m3 = DT == TD_FP8_E4M3 || DT == TD_FP8_E4M3_FNUZ;
        if constexpr (MM == 32 && e4m3) acc = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(x, y, acc, 0, 0, 0);
        else if constexpr (MM == 32) acc = __builtin_amdgcn_mfma_f32_32x32x16_bf8_bf8(x, y, acc, 0, 0, 0);
        else if constexpr (e4m3) acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(x, y, acc, 0, 0, 0);
        else acc = __builtin_amdgcn_mfma_f32_16x16x32_bf8_bf8(x, y, acc, 0, 0, 0);
    }
    __builtin_memcpy(c, &acc, sizeof acc);
}

// The executor on the GPU: this work-item's share of each phase, barriers between them.
template <class E, int DT, int MM, int MK, bool Interwave>
struct DeviceBlock {
    using S = typename E::S;
    S* base;
    int tid;
    typename E::Acc acc_;
    __device__ S* lds(int i) { return base + i * E::kLds; }
    __device__ typename E::Acc& acc(int) { return acc_; }
    template <class F> __device__ void for_each_thread(F f) { f(tid); }
    __device__ void barrier() {  // __syncthreads() without the device library's fence function
        __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
        __builtin_amdgcn_s_barrier();
        __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    }
    __device__ void mma(const S* l) {
        const int wave = tid / 64, lane = tid % 64;
        if (Interwave) __builtin_amdgcn_s_setprio(1);  // interwave: this wave's MFMA block first
        for (int kk = 0; kk < E::kTK; kk += MK)
            TD_UNROLL
            for (int rm = 0; rm < E::RM; ++rm)
                TD_UNROLL
                for (int rn = 0; rn < E::RN; ++rn) {
                    S a[E::KPL], b[E::KPL];
                    E::fragment(l, wave, lane, kk, rm, rn, a, b);
                    mfma_step<DT, MM, S, E::KPL, E::CPL>(a, b, acc_.v[rm][rn]);
                }
        if (Interwave) __builtin_amdgcn_s_setprio(0);
    }
};

struct AtomicAdd {
    __device__ void operator()(float* p, float v) const {
        __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    }
};

// One or two waves per SIMD: the register file goes to accumulators and fragments rather
// than to occupancy (without this the 128x128 tiles spilled 280 bytes per lane).
template <class E, class Ops, int DT, int MM, int MK, bool Interwave>
__global__ void __launch_bounds__(E::kThreads) __attribute__((amdgpu_waves_per_eu(1, 2)))
    mfma_gemm_kernel(Ops ops, Grid grid, bool streamk, StreamK sk, bool atomic, float* ws, float alpha) {
    __shared__ typename E::S lds[E::kBuffers * E::kLds];
    DeviceBlock<E, DT, MM, MK, Interwave> blk{lds, (int)__builtin_amdgcn_workitem_id_x(), {}};
    run_block<E>(blk, ops, grid, streamk, sk, atomic, ws, (int64_t)__builtin_amdgcn_workgroup_id_x(), alpha,
                 AtomicAdd{});
}

template <class E, class Ops, int DT, int MM, int MK, bool Interwave>
__global__ void __launch_bounds__(E::kThreads)
    mfma_fixup_kernel(Ops ops, StreamK sk, bool atomic, const float* ws, float alpha) {
    DeviceBlock<E, DT, MM, MK, Interwave> blk{nullptr, (int)__builtin_amdgcn_workitem_id_x(), {}};
    fixup_tile<E>(blk, ops, sk, atomic, ws, (int64_t)__builtin_amdgcn_workgroup_id_x(), alpha);
}

inline int hip_launch_status() {
    const hipError_t err = hipGetLastError();
    if (err != hipSuccess) return fail(TD_ERROR, std::string("kernel launch failed: ") + hipGetErrorString(err));
    return TD_OK;
}

// The launches of one GEMM: data-parallel (one block per tile), or stream-K (units sharing
// the K iterations, then one fix-up block per tile). Ops decides what store() writes.
template <class Eng, class Ops, int DT, int MM, int MK, bool Interwave, bool Streamk, int Reduction>
int launch_gemm(const Ops& ops, const Grid& g, const StreamK& sk, size_t need, void* ws, size_t ws_bytes,
                void* stream_ptr, float alpha) {
    const hipStream_t stream = static_cast<hipStream_t>(stream_ptr);
    if (!Streamk) {
        mfma_gemm_kernel<Eng, Ops, DT, MM, MK, Interwave>
            <<<(unsigned)g.tiles(), Eng::kThreads, 0, stream>>>(ops, g, false, StreamK{}, false, nullptr, alpha);
        return hip_launch_status();
    }
    float* work = nullptr;
    if (int st = take_workspace(need, ws, ws_bytes, stream_ptr, reinterpret_cast<void**>(&work))) return st;
    const bool atomic = Reduction == 0;
    if (atomic && hipMemsetAsync(work, 0, need, stream) != hipSuccess) return hip_launch_status();
    mfma_gemm_kernel<Eng, Ops, DT, MM, MK, Interwave>
        <<<(unsigned)sk.units, Eng::kThreads, 0, stream>>>(ops, g, true, sk, atomic, work, alpha);
    mfma_fixup_kernel<Eng, Ops, DT, MM, MK, Interwave>
        <<<(unsigned)g.tiles(), Eng::kThreads, 0, stream>>>(ops, sk, atomic, work, alpha);
    return hip_launch_status();
}

template <int DT, int Layout, bool Streamk, int Reduction, int TM, int TN, int TK, int WM, int WN, int WK, int MM,
          int MN, int MK, bool DoubleBuf, bool Interwave, bool Pad>
struct HipGemm {
    using Eng = Engine<DT, TM, TN, TK, WM, WN, MM, MN, MK, Pad, DoubleBuf>;
    using Ops = GemmOps<DT, Layout>;
    using S = typename Eng::S;
    static_assert(WK == 1, "waves along K are not split");

    // batches: 1, or the batch of a generic variant (HipGemmGeneric)
    static Grid grid(const TdGemmProblem& p, int64_t batches = 1) {
        return Grid{batches, (p.M + TM - 1) / TM, (p.N + TN - 1) / TN, (p.K + TK - 1) / TK};
    }
    static StreamK plan(const Grid& g, const TdGemmProblem& p) {
        return StreamK::make(g, p.splits > 0 ? p.splits : device::multiprocessors());
    }
    static StreamK plan(const TdGemmProblem& p) { return plan(grid(p), p); }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DT) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != Layout) { *why = "layout differs"; return TD_UNSUPPORTED; }
        if (!Pad && (p.M % TM || p.N % TN || p.K % TK)) {
            *why = "sizes are not multiples of the tile (a pad variant takes any size)";
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        if (!Streamk) return 0;
        return (size_t)streamk_workspace_floats<TM, TN>(plan(p), Reduction == 0) * sizeof(float);
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const Ops ops{static_cast<const S*>(a), static_cast<const S*>(b), static_cast<uint16_t*>(c),
                      p.M, p.N, p.K, p.lda, p.ldb, p.ldc};
        const float alpha = p.alpha == 0.0 ? 1.0f : (float)p.alpha;
        return launch_gemm<Eng, Ops, DT, MM, MK, Interwave, Streamk, Reduction>(
            ops, grid(p), Streamk ? plan(p) : StreamK{}, workspace_size(p), ws, ws_bytes, stream_ptr, alpha);
    }
};

// A `fusion: generic` variant: the same engine and tiles with EpilogueGemmOps
// (bindings/hip/epilogue.hpp) as its operands: every epilogue, the output type and the
// batch at run time (one kernel per activation, picked at run time). Features: the
// TD_FEATURE_* bits it implements (all but block-wise scales); the dispatcher core refuses
// problems needing others before supports(). Compiled, not yet run on a GPU.
template <int DT, int Layout, bool Streamk, int Reduction, int TM, int TN, int TK, int WM, int WN, int WK, int MM,
          int MN, int MK, bool DoubleBuf, bool Interwave, bool Pad, int Features>
struct HipGemmGeneric {
    using Plain = HipGemm<DT, Layout, Streamk, Reduction, TM, TN, TK, WM, WN, WK, MM, MN, MK, DoubleBuf, Interwave, Pad>;
    using Eng = typename Plain::Eng;
    template <int Act> using Ops = EpilogueGemmOps<DT, Layout, Act>;
    using S = typename Eng::S;
    static_assert((Features & TD_FEATURE_BLOCK_SCALE) == 0, "block-wise scales are not implemented");

    static int64_t batches(const TdGemmProblem& p) { return p.batch > 1 ? p.batch : 1; }

    // enum td_out_dtype of D, C, aux and bias: the problem's, else the input type's output.
    static int out_code(const TdGemmProblem& p) {
        if (p.out_dtype != TD_OUT_DEFAULT) return p.out_dtype;
        return DT == TD_FP16 ? TD_OUT_FP16 : TD_OUT_BF16;
    }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.out_dtype == TD_OUT_FP8_E4M3 || p.out_dtype == TD_OUT_FP8_E5M2) {
            *why = "an fp8 output is not implemented in the mfma epilogue (fp32, fp16 or bf16 D)";
            return TD_UNSUPPORTED;
        }
        return Plain::supports(p, why);
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        if (!Streamk) return 0;
        const StreamK sk = Plain::plan(Plain::grid(p, batches(p)), p);
        return (size_t)streamk_workspace_floats<TM, TN>(sk, Reduction == 0) * sizeof(float);
    }

    template <int Act>
    static int launch(const TdGemmProblem& p, const void* a, const void* b, void* d, const TdGemmEpilogue& ep,
                      void* ws, size_t ws_bytes, void* stream_ptr) {
        using O = Ops<Act>;
        const bool batched = p.batch > 1;
        const O ops{static_cast<const S*>(a), static_cast<const S*>(b), d,
                    p.beta != 0.0f ? ep.c : nullptr, p.bias != TD_BIAS_NONE ? ep.bias : nullptr,
                    p.aux ? ep.aux : nullptr, p.row_scale ? ep.row_scale : nullptr,
                    p.col_scale ? ep.col_scale : nullptr,
                    p.M, p.N, p.K, p.lda ? p.lda : (O::a_row ? p.K : p.M), p.ldb ? p.ldb : (O::b_row ? p.N : p.K),
                    p.ldc ? p.ldc : p.N, batched ? p.stride_a : 0, batched ? p.stride_b : 0,
                    batched ? p.stride_c : 0, p.beta, p.bias, out_code(p)};
        const Grid g = Plain::grid(p, batches(p));
        return launch_gemm<Eng, O, DT, MM, MK, Interwave, Streamk, Reduction>(
            ops, g, Streamk ? Plain::plan(g, p) : StreamK{}, workspace_size(p), ws, ws_bytes, stream_ptr, p.alpha);
    }

    static int run_ex(const TdGemmProblem& p, const void* a, const void* b, void* d, const TdGemmEpilogue& ep,
                      void* ws, size_t ws_bytes, void* stream) {
        if (gemm_features(p) & ~Features)  // selection never hands such a problem here
            return fail(TD_REJECTED, "the kernel implements no block-wise scale");
        switch (p.activation) {
            case TD_ACT_NONE: return launch<TD_ACT_NONE>(p, a, b, d, ep, ws, ws_bytes, stream);
            case TD_ACT_RELU: return launch<TD_ACT_RELU>(p, a, b, d, ep, ws, ws_bytes, stream);
            case TD_ACT_GELU: return launch<TD_ACT_GELU>(p, a, b, d, ep, ws, ws_bytes, stream);
            case TD_ACT_GELU_TANH: return launch<TD_ACT_GELU_TANH>(p, a, b, d, ep, ws, ws_bytes, stream);
            case TD_ACT_SILU: return launch<TD_ACT_SILU>(p, a, b, d, ep, ws, ws_bytes, stream);
            default: return fail(TD_REJECTED, "unknown activation code " + std::to_string(p.activation));
        }
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws, size_t ws_bytes,
                   void* stream) {
        return run_ex(p, a, b, c, TdGemmEpilogue{}, ws, ws_bytes, stream);
    }
};

template <int DT, int Ndim, int Direction, int TM, int TN, int TK, int WM, int WN, int WK, int MM, int MN, int MK,
          bool DoubleBuf, bool Interwave, bool Pad>
struct HipConv {
    using Eng = Engine<DT, TM, TN, TK, WM, WN, MM, MN, MK, Pad, DoubleBuf>;
    using Ops = ConvOps<DT, Direction>;
    using S = typename Eng::S;

    static ConvShape shape(const TdConvProblem& p) {
        ConvGeometry g{};
        conv_geometry(p, &g);
        ConvShape s{g.N, g.G, g.C, g.K, {}, {}, {}, {}, {}, {}};
        for (int d = 0; d < 3; ++d) {
            s.in[d] = g.in[d]; s.fil[d] = g.fil[d]; s.out[d] = g.out[d];
            s.stride[d] = g.stride[d]; s.pad[d] = g.pad[d]; s.dil[d] = g.dil[d];
        }
        return s;
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        if (p.dtype != DT) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.ndim != Ndim) { *why = "spatial rank differs"; return TD_UNSUPPORTED; }
        if (p.base.direction != Direction) { *why = "direction differs"; return TD_UNSUPPORTED; }
        if (!Pad) {
            const Ops o = Ops::make(shape(p), nullptr, nullptr, nullptr, nullptr);
            if (o.M % TM || o.N % TN || o.K % TK) {
                *why = "the implicit GEMM is not a multiple of the tile (a pad variant takes any size)";
                return TD_UNSUPPORTED;
            }
        }
        return TD_OK;
    }

    static size_t workspace_size(const TdConvProblem&) { return 0; }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void*, size_t,
                   void* stream_ptr) {
        const ConvShape s = shape(p);
        const S* x = static_cast<const S*>(in);
        const S* w = static_cast<const S*>(wei);
        const S* dy = static_cast<const S*>(out);
        uint16_t* dst = static_cast<uint16_t*>(Direction == 0 ? out : Direction == 1 ? const_cast<void*>(in)
                                                                                      : const_cast<void*>(wei));
        const Ops ops = Ops::make(s, x, w, dy, dst);
        const Grid g{s.g, (ops.M + TM - 1) / TM, (ops.N + TN - 1) / TN, (ops.K + TK - 1) / TK};
        mfma_gemm_kernel<Eng, Ops, DT, MM, MK, Interwave><<<(unsigned)g.tiles(), Eng::kThreads, 0,
                                                             static_cast<hipStream_t>(stream_ptr)>>>(
            ops, g, false, StreamK{}, false, nullptr, 1.0f);
        return hip_launch_status();
    }
};

}  // namespace td::hip
