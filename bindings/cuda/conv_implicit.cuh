// cuda backend: dense convolution (G = 1) as a CUTLASS 3.x sm90 implicit GEMM
// (cutlass::conv::kernel::ConvUniversal built with the conv CollectiveBuilder): fprop, dgrad
// and wgrad, 1D/2D/3D, TMA im2col loads, no buffer in global memory.
//   fwd        A = x (N D H W C), B = w (K Z Y X C), D = y (N Do Ho Wo K)
//   bwd_data   A = dy, B = w, D = dx
//   bwd_weight A = dy, B = x, D = dw
// Our channels-last layouts at G = 1 are exactly CUTLASS's NDHWC / KTRSC. Verified on the
// H200 (tests/test_gpu_conv.py, bench/RESULTS.md); dgrad is wrong in CUTLASS at stride > 1
// and refused there.
//
// Split > 1 (bwd_weight only): CUTLASS's sm90 conv kernel is non-persistent with no stream-K,
// so a wgrad with few output tiles (3x3 256->256: 36 tiles of 128x128 for 132 SMs) leaves
// the GPU idle. The batch is split into up to Split slices, chosen per problem at run time
// (implicit_wgrad_slices: the caller's split_k, else 1 where one slice fills 45% of the SMs,
// else the most slices that still run in one wave), each a CUTLASS wgrad with fp32 output into its own partial on its own stream
// (fork/join with events off the caller's stream); the partials are added in a fixed order
// (deterministic). Correct on the H200; 3x3 256->256 bwd_weight 119 us unsplit, 55.5 us in
// 3 slices.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>

#include "cutlass/kernel_hardware_info.hpp"
#include "cute/tensor.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "cuda/conv_direct.cuh"
#include "cuda/cutlass_start.cuh"

namespace td::cuda {

template <int DType> struct CutlassConvElement;
template <> struct CutlassConvElement<TD_FP16> { using T = cutlass::half_t; };
template <> struct CutlassConvElement<TD_BF16> { using T = cutlass::bfloat16_t; };

// Activation layouts, and the filter layout as wgrad's output (GEMM modes (K, (C, S, R, T))).
template <int Ndim> struct CutlassConvLayout;
template <> struct CutlassConvLayout<1> { using Act = cutlass::layout::TensorNWC; using Flt = cutlass::layout::TensorKCS; };
template <> struct CutlassConvLayout<2> { using Act = cutlass::layout::TensorNHWC; using Flt = cutlass::layout::TensorKCSR; };
template <> struct CutlassConvLayout<3> { using Act = cutlass::layout::TensorNDHWC; using Flt = cutlass::layout::TensorKCSRT; };

// Fork/join streams of one thread and device: the split wgrad's slices run on them
// concurrently, ordered after the caller's stream by `fork` and before it again by `join`.
struct ForkJoin {
    static constexpr int kMax = 8;
    cudaStream_t side[kMax] = {};
    cudaEvent_t fork = nullptr, join[kMax] = {};
};

inline int fork_join(ForkJoin** out) {
    static thread_local std::map<int, ForkJoin> by_device;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
    auto found = by_device.find(device);
    if (found == by_device.end()) {
        ForkJoin f;
        bool ok = cudaEventCreateWithFlags(&f.fork, cudaEventDisableTiming) == cudaSuccess;
        for (int i = 0; ok && i < ForkJoin::kMax; ++i)
            ok = cudaStreamCreateWithFlags(&f.side[i], cudaStreamNonBlocking) == cudaSuccess &&
                 cudaEventCreateWithFlags(&f.join[i], cudaEventDisableTiming) == cudaSuccess;
        if (!ok) return fail(TD_ERROR, std::string("creating the split's streams: ") + cudaGetErrorString(cudaGetLastError()));
        found = by_device.emplace(device, f).first;
    }
    *out = &found->second;
    return TD_OK;
}

template <int DType, int Ndim, int Direction, int TM, int TN, int TK, int CM, int CN, int Split = 1>
struct Sm90ImplicitConv {
    static_assert(Split == 1 || Direction == TD_CONV_BWD_WEIGHT, "the batch split is for bwd_weight only");
    static_assert(Split >= 1 && Split <= ForkJoin::kMax, "split 1..8");
    using Element = typename CutlassConvElement<DType>::T;
    using Layout = typename CutlassConvLayout<Ndim>::Act;
    using LayoutOut = cute::conditional_t<Direction == TD_CONV_BWD_WEIGHT, typename CutlassConvLayout<Ndim>::Flt, Layout>;
    static constexpr int kAlign = 8;  // elements per 16 bytes
    static constexpr cutlass::conv::Operator kOp = Direction == TD_CONV_FWD        ? cutlass::conv::Operator::kFprop
                                                   : Direction == TD_CONV_BWD_DATA ? cutlass::conv::Operator::kDgrad
                                                                                   : cutlass::conv::Operator::kWgrad;
    // the K mode is a nested shape for every direction, and wgrad's N mode too (its N is (C, S, R, T))
    using TileN = cute::conditional_t<Direction == TD_CONV_BWD_WEIGHT, cute::Shape<cute::Int<TN>>, cute::Int<TN>>;
    using TileShape = cute::Shape<cute::Int<TM>, TileN, cute::Shape<cute::Int<TK>>>;
    using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
    // CUTLASS's one sm90 conv schedule (its persistent ones are not supported for conv)
    using Schedule = cutlass::conv::KernelImplicitTmaWarpSpecializedSm90;

    // The CUTLASS operator writing Out (Element; fp32 for the split's partials). The
    // no-shared-memory epilogue was slower for the partials (H200: 3x3 256->256 in 3 slices
    // 69.8 us against 65.9).
    template <class Out, class EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized>
    struct Build {
        using ElementOut = Out;
        static constexpr int kAlignOut = 16 / sizeof(Out);
        using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
            cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
            cutlass::epilogue::collective::EpilogueTileAuto, float, float, Out, LayoutOut, kAlignOut, Out, LayoutOut,
            kAlignOut, EpilogueSchedule>::CollectiveOp;
        using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
            cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, kOp, Element, Layout, kAlign, Element, Layout, kAlign,
            float, TileShape, ClusterShape,
            cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
                sizeof(typename CollectiveEpilogue::SharedStorage))>,
            Schedule>::CollectiveOp;
        using ProblemShape =
            cutlass::conv::ConvProblemShape<kOp, CollectiveMainloop::DispatchPolicy::NumSpatialDimensions>;
        using Kernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
        using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
    };
    using Main = Build<Element>;
    using Partial = Build<float>;  // instantiated only where Split > 1
    using Conv = typename Main::Conv;
    using ProblemShape = typename Main::ProblemShape;

    // CUTLASS's problem: the activation (N, spatial, C) and filter (K, spatial, C) shapes,
    // padding, stride, dilation, one group; spatial dimensions outermost first.
    static ProblemShape problem_shape(const ConvGeometry& g) {
        cute::array<int, Ndim + 2> act{}, flt{};
        cute::array<int, Ndim> pad{}, stride{}, dil{};
        act[0] = (int)g.N;
        act[Ndim + 1] = (int)g.C;
        flt[0] = (int)g.K;
        flt[Ndim + 1] = (int)g.C;
        for (int d = 0; d < Ndim; ++d) {
            const int s = 3 - Ndim + d;  // ConvGeometry keeps 3 spatial dimensions, leading ones 1
            act[d + 1] = (int)g.in[s];
            flt[d + 1] = (int)g.fil[s];
            pad[d] = (int)g.pad[s];
            stride[d] = (int)g.stride[s];
            dil[d] = (int)g.dil[s];
        }
        return ProblemShape(cutlass::conv::Mode::kCrossCorrelation, act, flt, pad, pad, stride, dil, 1);
    }

    // The output's stride in the epilogue's GEMM modes: ((spatial..., N), K) for fprop and
    // dgrad, (K, (C, spatial...)) for wgrad; packed.
    template <class Stride>
    static Stride output_stride(const ProblemShape& shape) {
        if constexpr (Direction == TD_CONV_BWD_WEIGHT) {
            return cutlass::make_cute_packed_stride(Stride{}, shape.shape_C, shape.stride_C, kOp);
        } else {
            Stride s{};
            cute::for_each(cute::make_seq<cute::rank<0>(Stride{})>{}, [&](auto i) {
                cute::get<0, i>(s) = shape.stride_C[ProblemShape::RankT - 2 - i];
            });
            return s;
        }
    }

    template <class B = Main>
    static typename B::Conv::Arguments arguments(const ConvGeometry& g, const void* a, const void* b, void* d) {
        const ProblemShape shape = problem_shape(g);
        const auto sc = output_stride<typename B::Kernel::StrideC>(shape);
        const auto sd = output_stride<typename B::Kernel::StrideD>(shape);
        auto* out = static_cast<typename B::ElementOut*>(d);
        return typename B::Conv::Arguments{
            shape,
            {static_cast<const Element*>(a), static_cast<const Element*>(b)},
            {{1.0f, 0.0f}, out, sc, out, sd}};  // beta 0: C is never read
    }

    // Operands in CUTLASS's order for this direction: (A, B, D).
    struct Operands {
        const void* a;
        const void* b;
        void* d;
    };
    static Operands operands(const void* in, const void* wei, void* out) {
        if (Direction == TD_CONV_FWD) return {in, wei, out};
        if (Direction == TD_CONV_BWD_DATA) return {out, wei, const_cast<void*>(in)};
        return {out, in, const_cast<void*>(wei)};
    }

    // A 16-byte-aligned address standing for the tensors where only the shapes matter.
    static void* placeholder() {
        alignas(16) static char bytes[16];
        return bytes;
    }

    // The batch slices this kernel runs the problem in (always 1 where Split is 1).
    static int slices(const TdConvProblem& p, const ConvGeometry& g) {
        return implicit_wgrad_slices(g, TM, TN, CM, CN, Split, p.base.split_k, device::multiprocessors());
    }
    // Slice j of s: images [N j / s, N (j + 1) / s).
    static int64_t slice_begin(int64_t n, int j, int s) { return n * j / s; }
    // The slices' fp32 partials, one dw each.
    static size_t partial_bytes(const ConvGeometry& g, int s) {
        return (size_t)((s * g.K * g.taps() * g.C * (int64_t)sizeof(float) + 255) / 256 * 256);
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (g.G != 1) { *why = "CUTLASS sm90 convolution takes dense problems (G = 1)"; return TD_UNSUPPORTED; }
        if (g.C % kAlign || g.K % kAlign) { *why = "C and K must be multiples of 8 (16-byte rows for TMA)"; return TD_UNSUPPORTED; }
        // CUTLASS's sm90 dgrad accepts a stride above 1 in can_implement but computes a wrong
        // dx (measured on the H200: 90% of the elements off); the direct kernels take those
        if (Direction == TD_CONV_BWD_DATA && (g.stride[0] != 1 || g.stride[1] != 1 || g.stride[2] != 1)) {
            *why = "CUTLASS sm90 dgrad is used at stride 1 only (it is wrong at larger strides)";
            return TD_UNSUPPORTED;
        }
        const int s = slices(p, g);
        if (Split > 1 && p.base.split_k > Split) {
            *why = "split_k " + std::to_string(p.base.split_k) + " is above this kernel's batch split (" +
                   std::to_string(Split) + ")";
            return TD_UNSUPPORTED;
        }
        if (s > g.N) { *why = "split_k is above the number of images (a batch slice each)"; return TD_UNSUPPORTED; }
        const int64_t biggest = std::max({g.N * g.in_pixels() * g.C, g.N * g.out_pixels() * g.K, g.K * g.taps() * g.C});
        if (biggest > INT32_MAX) { *why = "a tensor has 2^31 elements or more"; return TD_UNSUPPORTED; }
        // can_implement looks at the shapes (TMA im2col limits, channel alignment), not at data
        bool ok;
        if constexpr (Split == 1) {
            Conv conv;
            ok = conv.can_implement(arguments(g, placeholder(), placeholder(), placeholder())) == cutlass::Status::kSuccess;
        } else {
            ok = partial_can_implement(g, s);
        }
        if (!ok) {
            *why = "CUTLASS cannot implement this problem with this kernel";
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    // The slices' CUTLASS wgrad (fp32 output) on the smallest slice; it must need no workspace.
    static bool partial_can_implement(const ConvGeometry& g, int s) {
        if constexpr (Split == 1) {
            return false;
        } else {
            typename Partial::Conv conv;
            ConvGeometry slice = g;
            slice.N = slice_begin(g.N, 1, s);
            return conv.can_implement(arguments<Partial>(slice, placeholder(), placeholder(), placeholder())) ==
                       cutlass::Status::kSuccess &&
                   Partial::Conv::get_workspace_size(arguments<Partial>(g, placeholder(), placeholder(), placeholder())) == 0;
        }
    }

    static size_t workspace_size(const TdConvProblem& p) {
        ConvGeometry g{};
        if (!conv_geometry(p, &g).empty()) return 0;
        if constexpr (Split > 1) return partial_bytes(g, slices(p, g));
        return Conv::get_workspace_size(arguments(g, placeholder(), placeholder(), placeholder()));
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if (!(conv_aligned16(in) && conv_aligned16(wei) && conv_aligned16(out)))
            return fail(TD_REJECTED, "a tensor's address is not 16-byte aligned (TMA needs it)");
        ConvGeometry g{};
        conv_geometry(p, &g);
        const Operands o = operands(in, wei, out);
        const int s = slices(p, g);
        if (s > Split || s > g.N) return fail(TD_REJECTED, "more batch slices than this kernel or the batch allows");
        // A variant with a batch split runs its fp32 Partial kernel even for one slice. Its
        // Main kernel is the same CUDA kernel as the unsplit variant of its tile; when both
        // sources launched that kernel, the unsplit variant's launch failed on the H200
        // (cudaErrorInvalidValue from cudaLaunchKernel, compute-sanitizer).
        if constexpr (Split > 1) return run_split(g, s, o, ws, ws_bytes, stream_ptr);
        const auto args = arguments(g, o.a, o.b, o.d);
        const size_t need = Conv::get_workspace_size(args);
        void* base = nullptr;
        if (int st = take_workspace(need, ws, ws_bytes, stream_ptr, &base)) return st;
        Conv conv;
        return cutlass_start(conv, args, need ? base : nullptr, stream);
    }

    // bwd_weight over s batch slices: A = dy and B = x of images [n0, n1), D = an fp32
    // partial dw; the slices run concurrently on the fork/join streams, then one reduce on
    // the caller's stream adds the partials in slice order into dw.
    static int run_split(const ConvGeometry& g, int s, const Operands& o, void* ws, size_t ws_bytes, void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        const int64_t elems = g.K * g.taps() * g.C;
        float* partial = nullptr;
        if (int st = take_workspace(partial_bytes(g, s), ws, ws_bytes,
                                    stream_ptr, reinterpret_cast<void**>(&partial)))
            return st;
        ForkJoin* fj = nullptr;
        if (int st = fork_join(&fj)) return st;
        if (cudaEventRecord(fj->fork, stream) != cudaSuccess)
            return fail(TD_ERROR, std::string("cudaEventRecord: ") + cudaGetErrorString(cudaGetLastError()));
        const auto* dy = static_cast<const Element*>(o.a);
        const auto* x = static_cast<const Element*>(o.b);
        int status = TD_OK;
        for (int j = 0; j < s; ++j) {
            // every started slice is joined back, even after a failure, so the streams stay ordered
            const cudaStream_t side = fj->side[j];
            if (cudaStreamWaitEvent(side, fj->fork, 0) != cudaSuccess) {
                status = fail(TD_ERROR, std::string("cudaStreamWaitEvent: ") + cudaGetErrorString(cudaGetLastError()));
                break;
            }
            const int64_t n0 = slice_begin(g.N, j, s), n1 = slice_begin(g.N, j + 1, s);
            ConvGeometry slice = g;
            slice.N = n1 - n0;
            typename Partial::Conv conv;
            if (status == TD_OK)
                status = cutlass_start(conv,
                                       arguments<Partial>(slice, dy + n0 * g.out_pixels() * g.K,
                                                          x + n0 * g.in_pixels() * g.C, partial + j * elems),
                                       nullptr, side);
            if (cudaEventRecord(fj->join[j], side) != cudaSuccess || cudaStreamWaitEvent(stream, fj->join[j], 0) != cudaSuccess) {
                status = fail(TD_ERROR, std::string("joining the split: ") + cudaGetErrorString(cudaGetLastError()));
                break;
            }
        }
        if (status != TD_OK) return status;
        using T = typename ConvElement<DType>::T;
        if (elems % 4 == 0 && reinterpret_cast<uintptr_t>(partial) % 16 == 0)  // elems: K, C multiples of 8
            conv_bwd_weight_reduce_rows<T><<<(unsigned)((elems / 4 + 255) / 256), 256, 0, stream>>>(
                partial, static_cast<T*>(o.d), elems, s);
        else
            conv_bwd_weight_reduce<T><<<(unsigned)((elems + 31) / 32), dim3(32, 8), 0, stream>>>(
                partial, static_cast<T*>(o.d), elems, s);
        return launch_status();
    }
};

}  // namespace td::cuda
