// cuda backend: fp8 GEMMs with block-wise scales (DeepSeek-V3 style: one fp32 scale per 1x128
// block of A, one per 128x128 block of B) on CUTLASS's sm90 blockwise-scaled fp8 mainloop
// (sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp), one instantiation per
// generated variant (the cutlass_blockwise family).
//
// D = alpha * sum over K blocks kb of (A_blk * B_blk) * scale_a[i, kb] * scale_b[kb, j / 128]:
// the mainloop multiplies each K tile's partial sums by the tile's scales as it promotes them
// into the fp32 accumulators (the tile's K is the scale block's 128), the epilogue applies alpha
// and writes bf16.
//
// The scales are read where the caller keeps them, no copy: the problem's scale_a (M x
// ceil(K/128), row-major) is CUTLASS's SFA in its K-major form, scale_b (ceil(K/128) x
// ceil(N/128), row-major) its SFB in the N-major form (Sm90BlockwiseScaleConfig<1, 128, 128,
// K, MN>). With those majors the producer's auxiliary warp loads the scales with cp.async,
// predicated on the scale tensors' extents, so M and N need not be multiples of the tile or of
// 128; a partial last K block reads A's and B's zero fill (TMA) against its scale.
//
// Rules: layout rcr (fp8 wgmma reads K-major A and B), K a multiple of 16 and N of 8 (TMA's
// 16-byte rows of A, B and the bf16 D), leading dimensions likewise, 16-byte aligned operand
// addresses; batch 1. Launched the usual way, never as a programmatic dependent: CUTLASS 4.2's
// cooperative kernel issues the scale loads from a warp that does not wait on the kernel before
// it (griddepcontrol.wait).
#pragma once

#include "cuda/gemm_sm90.cuh"  // Element, round_up, aligned16, cutlass_start (the cutlass family's helpers)
#include "cutlass/detail/blockwise_scale_layout.hpp"

namespace td::cuda {

constexpr int kScaleBlock = 128;  // the K and N extent of one scale block (A's blocks are 1 x 128)

template <int DType, int TM, int TN, int TK, int CM, int CN, bool Pingpong>
struct Sm90BlockwiseGemm {
    using In = typename Element<DType>::in;
    using Out = typename Element<DType>::out;
    static_assert(sizeof(In) == 1, "block-wise scaling is built for fp8 inputs");
    static_assert(TK == kScaleBlock, "one K tile is one scale block along K");
    static_assert(TN == kScaleBlock, "one scale block of B a tile (CUTLASS 4.2 with per-row scales of A)");
    using LayoutA = cutlass::layout::RowMajor;     // rcr: A K-major
    using LayoutB = cutlass::layout::ColumnMajor;  // rcr: B K-major
    using LayoutC = cutlass::layout::RowMajor;
    static constexpr int kAlignIn = 16 / sizeof(In);
    static constexpr int kAlignOut = 16 / sizeof(Out);

    using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kScaleBlock, kScaleBlock, cute::GMMA::Major::K,
                                                                  cute::GMMA::Major::MN>;
    using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
    using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

    using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
    using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
    using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
                                              cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
    using EpilogueSchedule =
        std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized, cutlass::epilogue::TmaWarpSpecializedCooperative>;

    // No C operand (ElementC void), as the cutlass family's kernels: D = alpha * accumulators.
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutC, kAlignOut, Out, LayoutC,
        kAlignOut, EpilogueSchedule>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, cute::tuple<LayoutA, LayoutSFA>, kAlignIn, In,
        cute::tuple<LayoutB, LayoutSFB>, kAlignIn, float, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        KernelSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;

    static int64_t lda(const TdGemmProblem& p) { return p.lda ? p.lda : p.K; }
    static int64_t ldb(const TdGemmProblem& p) { return p.ldb ? p.ldb : p.K; }
    static int64_t ldc(const TdGemmProblem& p) { return p.ldc ? p.ldc : p.N; }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (!p.block_scale) {
            *why = "the blockwise kernels run fp8 problems with block-wise scales only (the problem has none)";
            return TD_UNSUPPORTED;
        }
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != TD_RCR) { *why = "layout differs (the blockwise kernels are rcr)"; return TD_UNSUPPORTED; }
        if (p.batch > 1) { *why = "block-wise scales take one GEMM, not a batch"; return TD_UNSUPPORTED; }
        if (p.M > INT32_MAX || p.N > INT32_MAX || p.K > INT32_MAX) { *why = "a size exceeds 2^31"; return TD_UNSUPPORTED; }
        if (p.K % kAlignIn || lda(p) % kAlignIn || ldb(p) % kAlignIn || p.N % kAlignOut || ldc(p) % kAlignOut) {
            *why = "K, lda and ldb must be multiples of " + std::to_string(kAlignIn) + " and N and ldc of " +
                   std::to_string(kAlignOut) + " (16-byte rows for TMA)";
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    static typename Gemm::Arguments arguments(const TdGemmProblem& p, const void* a, const void* b, void* d,
                                              const float* scale_a, const float* scale_b) {
        const int M = (int)p.M, N = (int)p.N, K = (int)p.K;
        StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, 1));
        StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
        StrideC sc = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(M, N, 1));
        cute::get<0>(sa) = lda(p);
        cute::get<0>(sb) = ldb(p);
        cute::get<0>(sc) = ldc(p);
        // ((1, M), (128, ceil(K/128)), 1) K-major: element (i, kb) at i * ceil(K/128) + kb, and
        // ((128, ceil(N/128)), (128, ceil(K/128)), 1) N-major: (jb, kb) at kb * ceil(N/128) + jb.
        const auto shape = cute::make_shape(M, N, K, 1);
        cutlass::KernelHardwareInfo hw;
        cudaGetDevice(&hw.device_id);
        hw.sm_count = device::multiprocessors();
        typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                      {M, N, K, 1},
                                      {static_cast<const In*>(a), sa, static_cast<const In*>(b), sb, scale_a,
                                       ScaleConfig::tile_atom_to_shape_SFA(shape), scale_b,
                                       ScaleConfig::tile_atom_to_shape_SFB(shape)},
                                      {{}, nullptr, sc, static_cast<Out*>(d), sc},
                                      hw};
        args.epilogue.thread.alpha = p.alpha;
        args.epilogue.thread.beta = 0.0f;
        using Raster = decltype(args.scheduler.raster_order);
        args.scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
        if (p.swizzle > 0) args.scheduler.max_swizzle_size = p.swizzle;
        return args;
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        return round_up(Gemm::get_workspace_size(arguments(p, nullptr, nullptr, nullptr, nullptr, nullptr)), 256);
    }

    // The last launch on this thread, relaunched when the problem, the operands (scales
    // included), the stream and the device are the same: CUTLASS's initialize (TMA descriptors)
    // is most of the host time of a small GEMM.
    struct Last {
        bool valid = false;
        TdGemmProblem p{};
        const void *a = nullptr, *b = nullptr, *sa = nullptr, *sb = nullptr;
        void* d = nullptr;
        cudaStream_t stream = nullptr;
        int device = -1;
        Gemm gemm;
    };

    static bool same_problem(const TdGemmProblem& x, const TdGemmProblem& y) {
        return x.M == y.M && x.N == y.N && x.K == y.K && x.lda == y.lda && x.ldb == y.ldb && x.ldc == y.ldc &&
               x.alpha == y.alpha && x.raster == y.raster && x.swizzle == y.swizzle;
    }

    static int run_ex(const TdGemmProblem& p, const void* a, const void* b, void* d, const TdGemmEpilogue& ep,
                      void* ws, size_t ws_bytes, void* stream_ptr) {
        std::string why;
        if (supports(p, &why)) return fail(TD_REJECTED, why);
        if (!ep.scale_a || !ep.scale_b) return fail(TD_ERROR, "block-wise scales: scale_a or scale_b is NULL");
        if (!aligned16(a) || !aligned16(b) || !aligned16(d))
            return fail(TD_REJECTED, "an operand's address is not 16-byte aligned (TMA needs it)");
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        static thread_local Last last;
        int device = -1;
        const bool have_device = cudaGetDevice(&device) == cudaSuccess;
        if (have_device && last.valid && last.a == a && last.b == b && last.d == d && last.sa == ep.scale_a &&
            last.sb == ep.scale_b && last.stream == stream && last.device == device && same_problem(last.p, p))
            return cutlass_run(last.gemm, stream);
        const auto args = arguments(p, a, b, d, ep.scale_a, ep.scale_b);
        const size_t need = round_up(Gemm::get_workspace_size(args), 256);
        char* base = static_cast<char*>(ws);
        if (ws && ws_bytes < need)
            return fail(TD_REJECTED, "workspace of " + std::to_string(ws_bytes) + " bytes, the kernel needs " +
                                         std::to_string(need));
        if (!ws && need)
            if (int st = device::scratch(need, stream_ptr, reinterpret_cast<void**>(&base))) return st;
        last.valid = false;
        if (int st = cutlass_start(last.gemm, args, need ? base : nullptr, stream)) return st;
        if (have_device && need == 0) {
            last.p = p;
            last.a = a, last.b = b, last.d = d, last.sa = ep.scale_a, last.sb = ep.scale_b;
            last.stream = stream;
            last.device = device;
            last.valid = true;
        }
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return fail(TD_ERROR, std::string("kernel launch failed: ") + cudaGetErrorString(err));
        return TD_OK;
    }

    // Without the epilogue's operands there are no scales: the core never sends a problem
    // with block_scale here (it calls run_ex), and supports() refuses every other one.
    static int run(const TdGemmProblem& p, const void*, const void*, void*, void*, size_t, void*) {
        std::string why;
        if (supports(p, &why)) return fail(TD_REJECTED, why);
        return fail(TD_ERROR, "block-wise scales need the epilogue's scale_a and scale_b (td_gemm_run_ex)");
    }
};

}  // namespace td::cuda
