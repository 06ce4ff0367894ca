// cuda backend: CUTLASS 3.x sm90 GEMMs (wgmma + TMA, warp-specialized) built with the
// CollectiveBuilder, one instantiation per generated variant.
//
// Knobs fixed at compile time (all in the variant's name): element type, layout, block
// tile, cluster, kernel schedule (cooperative / ping-pong), epilogue (TMA / no-smem),
// tile scheduler (persistent / stream-K) and whether misaligned operands are staged
// through aligned copies ("pad"). Run-time arguments: sizes, leading dimensions, alpha,
// stream-K reduction mode (atomic = Nondeterministic, deterministic = turnstile) and the
// split count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::cuda {

template <int DType> struct Element;
template <> struct Element<TD_FP16> { using in = cutlass::half_t; using out = cutlass::half_t; };
template <> struct Element<TD_BF16> { using in = cutlass::bfloat16_t; using out = cutlass::bfloat16_t; };
template <> struct Element<TD_FP8_E4M3> { using in = cutlass::float_e4m3_t; using out = cutlass::bfloat16_t; };
template <> struct Element<TD_FP8_E5M2> { using in = cutlass::float_e5m2_t; using out = cutlass::bfloat16_t; };

inline int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int DType, int LayoutCode, bool Streamk, int Reduction, int TM, int TN, int TK, int CM, int CN,
          bool Pingpong, bool NoSmem, bool Pad>
struct Sm90Gemm {
    using In = typename Element<DType>::in;
    using Out = typename Element<DType>::out;
    static constexpr bool fp8 = sizeof(In) == 1;
    static constexpr bool a_row = LayoutCode == TD_RCR || LayoutCode == TD_RRR;
    static constexpr bool b_row = LayoutCode == TD_RRR || LayoutCode == TD_CRR;
    using LayoutA = std::conditional_t<a_row, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
    using LayoutB = std::conditional_t<b_row, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
    using LayoutC = cutlass::layout::RowMajor;
    static constexpr int kAlignIn = 16 / sizeof(In);    // elements per 16 bytes (TMA)
    static constexpr int kAlignOut = 16 / sizeof(Out);

    using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
    using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
    using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
    using EpilogueSchedule = std::conditional_t<
        NoSmem, cutlass::epilogue::NoSmemWarpSpecialized,
        std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                           cutlass::epilogue::TmaWarpSpecializedCooperative>>;
    using Scheduler = std::conditional_t<Streamk, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;

    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, Out, LayoutC, kAlignOut, Out, LayoutC,
        kAlignOut, EpilogueSchedule>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, LayoutA, kAlignIn, In, LayoutB, kAlignIn, float,
        TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        KernelSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;

    // The leading dimensions the kernel sees, and the extra bytes the pad path stages.
    struct Plan {
        int64_t lda, ldb, ldc;              // of the caller's operands
        int64_t lda_k, ldb_k, ldc_k;        // of what the kernel reads and writes
        bool stage_a, stage_b, stage_c;
        size_t bytes_a, bytes_b, bytes_c;   // staging buffers
    };

    static bool ld_aligned(int64_t ld, size_t elem) { return (ld * (int64_t)elem) % 16 == 0; }

    static Plan plan(const TdGemmProblem& p, const void* a, const void* b, const void* c) {
        Plan s{};
        s.lda = p.lda ? p.lda : (a_row ? p.K : p.M);
        s.ldb = p.ldb ? p.ldb : (b_row ? p.N : p.K);
        s.ldc = p.ldc ? p.ldc : p.N;
        s.stage_a = Pad && (!ld_aligned(s.lda, sizeof(In)) || !aligned16(a));
        s.stage_b = Pad && (!ld_aligned(s.ldb, sizeof(In)) || !aligned16(b));
        s.stage_c = Pad && (!ld_aligned(s.ldc, sizeof(Out)) || !aligned16(c));
        s.lda_k = s.stage_a ? round_up(a_row ? p.K : p.M, kAlignIn) : s.lda;
        s.ldb_k = s.stage_b ? round_up(b_row ? p.N : p.K, kAlignIn) : s.ldb;
        s.ldc_k = s.stage_c ? round_up(p.N, kAlignOut) : s.ldc;
        s.bytes_a = s.stage_a ? round_up(s.lda_k * (a_row ? p.M : p.K) * sizeof(In), 256) : 0;
        s.bytes_b = s.stage_b ? round_up(s.ldb_k * (b_row ? p.K : p.N) * sizeof(In), 256) : 0;
        s.bytes_c = s.stage_c ? round_up(s.ldc_k * p.M * sizeof(Out), 256) : 0;
        return s;
    }

    static typename Gemm::Arguments arguments(const TdGemmProblem& p, const Plan& s, const void* a, const void* b,
                                              void* c) {
        const int M = (int)p.M, N = (int)p.N, K = (int)p.K;
        StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, 1));
        StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
        StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, 1));
        // The one dynamic stride of each operand is its leading dimension.
        if constexpr (a_row) cute::get<0>(sa) = s.lda_k; else cute::get<1>(sa) = s.lda_k;
        if constexpr (b_row) cute::get<1>(sb) = s.ldb_k; else cute::get<0>(sb) = s.ldb_k;
        cute::get<0>(sc) = s.ldc_k;
        cutlass::KernelHardwareInfo hw;
        cudaGetDevice(&hw.device_id);
        hw.sm_count = device::multiprocessors();
        typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                      {M, N, K, 1},
                                      {static_cast<const In*>(a), sa, static_cast<const In*>(b), sb},
                                      {{}, static_cast<const Out*>(c), sc, static_cast<Out*>(c), sc},
                                      hw};
        args.epilogue.thread.alpha = p.alpha;
        args.epilogue.thread.beta = 0.0f;
        if constexpr (Streamk) {
            using RM = decltype(args.scheduler.reduction_mode);
            using DM = decltype(args.scheduler.decomposition_mode);
            args.scheduler.reduction_mode = Reduction == 0 ? RM::Nondeterministic : RM::Deterministic;
            if (p.splits > 1) {
                args.scheduler.decomposition_mode = DM::SplitK;
                args.scheduler.splits = p.splits;
            } else {
                args.scheduler.decomposition_mode = DM::Heuristic;
            }
        }
        return args;
    }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != LayoutCode) { *why = "layout differs"; return TD_UNSUPPORTED; }
        if (p.M > INT32_MAX || p.N > INT32_MAX || p.K > INT32_MAX) { *why = "a size exceeds 2^31"; return TD_UNSUPPORTED; }
        if (!Pad) {
            const Plan s = plan(p, nullptr, nullptr, nullptr);
            if (!ld_aligned(s.lda, sizeof(In)) || !ld_aligned(s.ldb, sizeof(In)) || !ld_aligned(s.ldc, sizeof(Out))) {
                *why = "a leading dimension is not a multiple of 16 bytes (TMA); a pad variant takes it";
                return TD_UNSUPPORTED;
            }
        }
        return TD_OK;
    }

    static size_t cutlass_workspace(const TdGemmProblem& p, const Plan& s) {
        return Gemm::get_workspace_size(arguments(p, s, nullptr, nullptr, nullptr));
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        // Sized for unaligned pointers too, so a caller-provided workspace always suffices.
        static const char dummy[32] = {};
        const Plan s = plan(p, dummy + 1, dummy + 1, dummy + 1);
        return round_up(cutlass_workspace(p, s), 256) + s.bytes_a + s.bytes_b + s.bytes_c;
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if (!Pad && (!aligned16(a) || !aligned16(b) || !aligned16(c)))
            return fail(TD_REJECTED, "an operand's address is not 16-byte aligned (TMA needs it)");
        const Plan s = plan(p, a, b, c);
        const size_t lib_bytes = round_up(cutlass_workspace(p, s), 256);
        const size_t need = lib_bytes + s.bytes_a + s.bytes_b + s.bytes_c;
        char* base = static_cast<char*>(ws);
        if (ws && ws_bytes < need)
            return fail(TD_REJECTED, "workspace of " + std::to_string(ws_bytes) + " bytes, the kernel needs " +
                                         std::to_string(need));
        if (!ws && need)
            if (int st = device::scratch(need, stream_ptr, reinterpret_cast<void**>(&base))) return st;
        char* stage = base + lib_bytes;
        const void* ka = a;
        const void* kb = b;
        void* kc = c;
        if (s.stage_a) {
            const int64_t rows = a_row ? p.M : p.K, cols = a_row ? p.K : p.M;
            if (cudaMemcpy2DAsync(stage, s.lda_k * sizeof(In), a, s.lda * sizeof(In), cols * sizeof(In), rows,
                                  cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
                return fail(TD_ERROR, std::string("staging A: ") + cudaGetErrorString(cudaGetLastError()));
            ka = stage;
            stage += s.bytes_a;
        }
        if (s.stage_b) {
            const int64_t rows = b_row ? p.K : p.N, cols = b_row ? p.N : p.K;
            if (cudaMemcpy2DAsync(stage, s.ldb_k * sizeof(In), b, s.ldb * sizeof(In), cols * sizeof(In), rows,
                                  cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
                return fail(TD_ERROR, std::string("staging B: ") + cudaGetErrorString(cudaGetLastError()));
            kb = stage;
            stage += s.bytes_b;
        }
        if (s.stage_c) kc = stage;
        auto args = arguments(p, s, ka, kb, kc);
        Gemm gemm;
        if (gemm.can_implement(args) != cutlass::Status::kSuccess)
            return fail(TD_REJECTED, "CUTLASS cannot implement this problem with this kernel");
        if (gemm.initialize(args, lib_bytes ? base : nullptr, stream) != cutlass::Status::kSuccess)
            return fail(TD_ERROR, std::string("CUTLASS initialize failed: ") + cudaGetErrorString(cudaGetLastError()));
        if (gemm.run(stream) != cutlass::Status::kSuccess)
            return fail(TD_ERROR, std::string("kernel launch failed: ") + cudaGetErrorString(cudaGetLastError()));
        if (s.stage_c &&
            cudaMemcpy2DAsync(c, s.ldc * sizeof(Out), kc, s.ldc_k * sizeof(Out), p.N * sizeof(Out), p.M,
                              cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
            return fail(TD_ERROR, std::string("copying C back: ") + cudaGetErrorString(cudaGetLastError()));
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return fail(TD_ERROR, std::string("kernel launch failed: ") + cudaGetErrorString(err));
        return TD_OK;
    }

    static constexpr GemmKernel entry(const char* name) {
        return GemmKernel{{name, DType, LayoutCode, Streamk ? 1 : 0, Streamk ? Reduction : -1, TM, TN, TK, CM, CN,
                           Pingpong ? 1 : 0, Pad ? 1 : 0},
                          &supports, &workspace_size, &run};
    }
};

}  // namespace td::cuda
