// cuda backend: CUTLASS 3.x sm90 pointer-array grouped GEMMs (the cutlass_grouped family): one
// persistent launch runs every group of a grouped call (mixture of experts), each group of its own
// M, N, K, leading dimensions and operand pointers. CUTLASS's grouped tile scheduler walks the
// output tiles of all groups in turn over one grid of at most one CTA per SM; each CTA rewrites
// its TMA descriptors in global memory when it moves to another group's tile.
//
// Compile-time knobs (all in the variant's name): element type, layout, block tile, cluster and
// kernel schedule (cooperative / ping-pong, with the pointer-array TMA epilogue of the same
// schedule). Run-time: the groups, alpha, raster order and swizzle. D = alpha * A * B: no C, no
// fused epilogue (KernelInfo.features 0). Groups of M 0 are left out of the launch.
//
// The launch reads the problem list, the pointer arrays and the strides from device memory: they
// are built on the host in a page-locked staging buffer and copied into the workspace with
// cudaMemcpyAsync in stream order before the launch. A staging buffer is reused only after its
// copy has completed (an event recorded after it), so a call never waits for the GPU unless many
// calls are in flight at once. Inside CUDA graph capture the copy becomes a graph node that reads
// the staging buffer at each replay: that buffer is then one of its own, kept for the life of the
// process, and the call needs the caller's workspace (the library's scratch buffer cannot be
// allocated during capture and is shared by the stream's other work).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cuda/cutlass_start.cuh"
#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::cuda {

template <int DType> struct GroupedElement;
template <> struct GroupedElement<TD_FP16> { using in = cutlass::half_t; using out = cutlass::half_t; };
template <> struct GroupedElement<TD_BF16> { using in = cutlass::bfloat16_t; using out = cutlass::bfloat16_t; };
template <> struct GroupedElement<TD_FP8_E4M3> { using in = cutlass::float_e4m3_t; using out = cutlass::bfloat16_t; };

inline size_t grouped_round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// Page-locked host buffers for the argument copies of grouped launches (see the top of the file).
class GroupedStaging {
  public:
    // A buffer of at least `bytes` whose previous copy has completed. capturing: a buffer of its
    // own that is never reused nor freed (a captured graph reads it at each replay).
    static int take(size_t bytes, bool capturing, void** host, cudaEvent_t* done) {
        *done = nullptr;
        if (capturing) {
            static std::mutex lock;
            static std::vector<void*> kept;  // for the life of the process
            void* buffer = nullptr;
            // an allocation is no stream work: allowed here whatever the capture's mode
            cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
            cudaThreadExchangeStreamCaptureMode(&mode);
            const cudaError_t err = cudaMallocHost(&buffer, bytes);
            cudaThreadExchangeStreamCaptureMode(&mode);
            if (err != cudaSuccess)
                return fail(TD_ERROR, "cudaMallocHost (grouped GEMM arguments): " +
                                          std::string(cudaGetErrorString(cudaGetLastError())));
            std::lock_guard<std::mutex> guard(lock);
            kept.push_back(buffer);
            *host = buffer;
            return TD_OK;
        }
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess)
            return fail(TD_ERROR, std::string("cudaGetDevice: ") + cudaGetErrorString(cudaGetLastError()));
        std::vector<Slot>& pool = pools()[device];
        Slot* slot = nullptr;
        for (Slot& s : pool)
            if (!s.done || cudaEventQuery(s.done) == cudaSuccess) {
                slot = &s;
                break;
            }
        cudaGetLastError();  // a cudaEventQuery of cudaErrorNotReady leaves no error, others are reported below
        if (!slot && pool.size() < kMaxSlots) {
            pool.emplace_back();
            slot = &pool.back();
        }
        if (!slot) {  // every buffer's copy still waits for the stream: wait for the oldest
            slot = &pool[next_wait_ % pool.size()];
            ++next_wait_;
            if (cudaEventSynchronize(slot->done) != cudaSuccess)
                return fail(TD_ERROR, std::string("waiting for a grouped GEMM's argument copy: ") +
                                          cudaGetErrorString(cudaGetLastError()));
        }
        if (slot->bytes < bytes) {
            if (slot->ptr) cudaFreeHost(slot->ptr);
            slot->ptr = nullptr, slot->bytes = 0;
            const size_t grown = grouped_round_up(bytes + bytes / 4, 4096);
            if (cudaMallocHost(&slot->ptr, grown) != cudaSuccess)
                return fail(TD_ERROR, "cudaMallocHost (grouped GEMM arguments): " +
                                          std::string(cudaGetErrorString(cudaGetLastError())));
            slot->bytes = grown;
        }
        if (!slot->done && cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming) != cudaSuccess)
            return fail(TD_ERROR, std::string("cudaEventCreate: ") + cudaGetErrorString(cudaGetLastError()));
        *host = slot->ptr;
        *done = slot->done;
        return TD_OK;
    }

  private:
    static constexpr size_t kMaxSlots = 16;
    struct Slot {
        void* ptr = nullptr;
        size_t bytes = 0;
        cudaEvent_t done = nullptr;  // recorded after the copy out of ptr
    };
    struct Pools : std::map<int, std::vector<Slot>> {
        ~Pools() {  // at thread exit; errors ignored (the runtime may be gone at process exit)
            for (auto& entry : *this)
                for (Slot& s : entry.second) {
                    if (s.done) cudaEventSynchronize(s.done), cudaEventDestroy(s.done);
                    if (s.ptr) cudaFreeHost(s.ptr);
                }
        }
    };
    static Pools& pools() {
        static thread_local Pools p;
        return p;
    }
    inline static thread_local size_t next_wait_ = 0;
};

template <int DType, int LayoutCode, int TM, int TN, int TK, int CM, int CN, bool Pingpong>
struct Sm90GroupedGemm {
    using In = typename GroupedElement<DType>::in;
    using Out = typename GroupedElement<DType>::out;
    static constexpr bool a_row = LayoutCode == TD_RCR || LayoutCode == TD_RRR;
    static constexpr bool b_row = LayoutCode == TD_RRR || LayoutCode == TD_CRR;
    using LayoutA = std::conditional_t<a_row, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
    using LayoutB = std::conditional_t<b_row, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
    using LayoutC = cutlass::layout::RowMajor;
    static constexpr int kAlignIn = 16 / sizeof(In);  // elements per 16 bytes (TMA)
    static constexpr int kAlignOut = 16 / sizeof(Out);

    using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
    using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
    using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                              cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
    using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                                cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
    using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
    using Shape3 = typename ProblemShape::UnderlyingProblemShape;

    // No C operand (ElementC void): D = alpha * A * B.
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutC*, kAlignOut, Out, LayoutC*,
        kAlignOut, EpilogueSchedule>::CollectiveOp;
    using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, In, LayoutA*, kAlignIn, In, LayoutB*, kAlignIn, float,
        TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        KernelSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    using StrideA = typename Kernel::InternalStrideA;
    using StrideB = typename Kernel::InternalStrideB;
    using StrideD = typename Kernel::InternalStrideD;

    // The device arguments of n groups, in one block (offsets in bytes, each 16-byte aligned).
    struct ArgLayout {
        size_t shapes, ptr_a, ptr_b, ptr_d, stride_a, stride_b, stride_d, bytes;
        explicit ArgLayout(int64_t n) {
            size_t at = 0;
            auto next = [&](size_t size) { const size_t here = at; at = grouped_round_up(at + size * n, 16); return here; };
            shapes = next(sizeof(Shape3));
            ptr_a = next(sizeof(const In*));
            ptr_b = next(sizeof(const In*));
            ptr_d = next(sizeof(Out*));
            stride_a = next(sizeof(StrideA));
            stride_b = next(sizeof(StrideB));
            stride_d = next(sizeof(StrideD));
            bytes = grouped_round_up(at, 256);
        }
    };

    static bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

    // A plain problem: only the type and layout are read here (the dispatcher core refuses grouped
    // kernels every plain call; a grouped call passes one of its groups).
    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != LayoutCode) { *why = "layout differs"; return TD_UNSUPPORTED; }
        return TD_OK;
    }
    static size_t workspace_size(const TdGemmProblem&) { return 0; }
    static int run(const TdGemmProblem&, const void*, const void*, void*, void*, size_t, void*) {
        return fail(TD_REJECTED, "a grouped kernel runs grouped calls only (td_gemm_grouped_run)");
    }

    // Every group of M > 0 as TMA takes it: sizes below 2^31, 16-byte aligned pointers, leading
    // dimensions and contiguous extents (A's K or M, B's K or N, D's N) in whole 16 bytes.
    static int supports_grouped(const TdGemmProblem& p, const TdGemmGroup* groups, int64_t count, std::string* why) {
        if (int s = supports(p, why)) return s;
        int64_t used = 0;
        for (int64_t i = 0; i < count; ++i) {
            const TdGemmGroup& g = groups[i];
            if (g.M == 0) continue;
            ++used;
            const std::string at = "group " + std::to_string(i) + ": ";
            if (g.M > INT32_MAX || g.N > INT32_MAX || g.K > INT32_MAX) {
                *why = at + "a size exceeds 2^31";
                return TD_UNSUPPORTED;
            }
            const int64_t lda = g.lda ? g.lda : (a_row ? g.K : g.M), ldb = g.ldb ? g.ldb : (b_row ? g.N : g.K);
            const int64_t ldd = g.ldc ? g.ldc : g.N;
            if ((a_row ? g.K : g.M) % kAlignIn || (b_row ? g.N : g.K) % kAlignIn || g.N % kAlignOut ||
                lda % kAlignIn || ldb % kAlignIn || ldd % kAlignOut) {
                *why = at + "a leading dimension or contiguous extent is not a multiple of 16 bytes (TMA)";
                return TD_UNSUPPORTED;
            }
            if (!aligned(g.a) || !aligned(g.b) || !aligned(g.d)) {
                *why = at + "an operand's address is not 16-byte aligned (TMA)";
                return TD_REJECTED;
            }
        }
        if (used > INT32_MAX) {
            *why = "more than 2^31 groups";
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    static typename Gemm::Arguments arguments(const TdGemmProblem& p, int32_t groups, Shape3* device_shapes,
                                              const Shape3* host_shapes, const char* dev_args) {
        const ArgLayout at(groups);
        cutlass::KernelHardwareInfo hw;
        cudaGetDevice(&hw.device_id);
        hw.sm_count = device::multiprocessors();
        typename Gemm::Arguments args{};
        args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
        args.problem_shape = {groups, device_shapes, host_shapes};
        args.mainloop.ptr_A = reinterpret_cast<const In**>(const_cast<char*>(dev_args + at.ptr_a));
        args.mainloop.dA = reinterpret_cast<StrideA*>(const_cast<char*>(dev_args + at.stride_a));
        args.mainloop.ptr_B = reinterpret_cast<const In**>(const_cast<char*>(dev_args + at.ptr_b));
        args.mainloop.dB = reinterpret_cast<StrideB*>(const_cast<char*>(dev_args + at.stride_b));
        args.epilogue.ptr_C = nullptr;
        args.epilogue.dC = nullptr;
        args.epilogue.ptr_D = reinterpret_cast<Out**>(const_cast<char*>(dev_args + at.ptr_d));
        args.epilogue.dD = reinterpret_cast<StrideD*>(const_cast<char*>(dev_args + at.stride_d));
        args.epilogue.thread.alpha = p.alpha;
        args.epilogue.thread.beta = 0.0f;
        args.hw_info = hw;
        using Raster = decltype(args.scheduler.raster_order);
        args.scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
        if (p.swizzle > 0) args.scheduler.max_swizzle_size = p.swizzle;
        return args;
    }

    // CUTLASS's own workspace (TMA descriptors per SM; it depends on the SM count, not the groups).
    static size_t cutlass_workspace(const TdGemmProblem& p) {
        return grouped_round_up(Gemm::get_workspace_size(arguments(p, 1, nullptr, nullptr, nullptr)), 256);
    }

    static size_t grouped_workspace_size(const TdGemmProblem& p, int64_t count) {
        return cutlass_workspace(p) + ArgLayout(count > 0 ? count : 1).bytes;
    }

    // The arguments of the groups of M > 0 into the staging buffer `host` (laid out as ArgLayout),
    // and their sizes into `shapes` (the host copy CUTLASS reads for its grid and its checks).
    static void fill(const TdGemmGroup* groups, int64_t count, int32_t used, char* host, std::vector<Shape3>* shapes) {
        const ArgLayout at(used);
        auto* sh = reinterpret_cast<Shape3*>(host + at.shapes);
        auto* pa = reinterpret_cast<const In**>(host + at.ptr_a);
        auto* pb = reinterpret_cast<const In**>(host + at.ptr_b);
        auto* pd = reinterpret_cast<Out**>(host + at.ptr_d);
        auto* sa = reinterpret_cast<StrideA*>(host + at.stride_a);
        auto* sb = reinterpret_cast<StrideB*>(host + at.stride_b);
        auto* sd = reinterpret_cast<StrideD*>(host + at.stride_d);
        shapes->clear();
        int32_t j = 0;
        for (int64_t i = 0; i < count; ++i) {
            const TdGemmGroup& g = groups[i];
            if (g.M == 0) continue;
            const int M = (int)g.M, N = (int)g.N, K = (int)g.K;
            const int64_t lda = g.lda ? g.lda : (a_row ? g.K : g.M), ldb = g.ldb ? g.ldb : (b_row ? g.N : g.K);
            const int64_t ldd = g.ldc ? g.ldc : g.N;
            StrideA a_stride = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(M, K, 1));
            StrideB b_stride = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(N, K, 1));
            StrideD d_stride = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(M, N, 1));
            // the one dynamic stride of each operand is its leading dimension
            if constexpr (a_row) cute::get<0>(a_stride) = lda; else cute::get<1>(a_stride) = lda;
            if constexpr (b_row) cute::get<1>(b_stride) = ldb; else cute::get<0>(b_stride) = ldb;
            cute::get<0>(d_stride) = ldd;
            const Shape3 shape{M, N, K};
            sh[j] = shape;
            pa[j] = static_cast<const In*>(g.a);
            pb[j] = static_cast<const In*>(g.b);
            pd[j] = static_cast<Out*>(g.d);
            sa[j] = a_stride, sb[j] = b_stride, sd[j] = d_stride;
            shapes->push_back(shape);
            ++j;
        }
    }

    static int run_grouped(const TdGemmProblem& p, const TdGemmGroup* groups, int64_t count, void* ws,
                           size_t ws_bytes, void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        std::string why;
        if (int s = supports_grouped(p, groups, count, &why)) return fail(TD_REJECTED, why);
        int32_t used = 0;
        for (int64_t i = 0; i < count; ++i) used += groups[i].M > 0 ? 1 : 0;
        if (used == 0) return TD_OK;
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) capture = cudaStreamCaptureStatusNone;
        const bool capturing = capture != cudaStreamCaptureStatusNone;
        // TD_ERROR, not TD_REJECTED: the call fails here rather than fall back to the per-group loop
        if (capturing && !ws)
            return fail(TD_ERROR, "a grouped GEMM launch copies its problem list into the workspace; during CUDA "
                                  "graph capture pass one (td_gemm_grouped_run_ex; its size: "
                                  "td_gemm_grouped_workspace_size)");
        const ArgLayout at(used);
        const size_t lib_bytes = cutlass_workspace(p);
        const size_t need = lib_bytes + at.bytes;
        char* base = static_cast<char*>(ws);
        if (ws && ws_bytes < need)
            return fail(TD_REJECTED, "workspace of " + std::to_string(ws_bytes) + " bytes, the grouped kernel needs " +
                                         std::to_string(need));
        if (!ws)
            if (int s = device::scratch(need, stream_ptr, reinterpret_cast<void**>(&base))) return s;
        char* dev_args = base + lib_bytes;
        void* host = nullptr;
        cudaEvent_t done = nullptr;
        if (int s = GroupedStaging::take(at.bytes, capturing, &host, &done)) return s;
        std::vector<Shape3> shapes;
        fill(groups, count, used, static_cast<char*>(host), &shapes);
        if (cudaMemcpyAsync(dev_args, host, at.bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess)
            return fail(TD_ERROR, std::string("copying the grouped GEMM's arguments: ") +
                                      cudaGetErrorString(cudaGetLastError()));
        if (done && cudaEventRecord(done, stream) != cudaSuccess)
            return fail(TD_ERROR, std::string("cudaEventRecord: ") + cudaGetErrorString(cudaGetLastError()));
        Gemm gemm;
        const auto args = arguments(p, used, reinterpret_cast<Shape3*>(dev_args + at.shapes), shapes.data(), dev_args);
        return cutlass_start(gemm, args, lib_bytes ? base : nullptr, stream);
    }
};

}  // namespace td::cuda
