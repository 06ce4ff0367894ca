// cuda backend: an fp8 GEMM mainloop that promotes the tensor cores' partial sums to fp32
// without draining the tensor cores.
//
// Hopper's fp8 wgmma keeps a short accumulator, so a precise fp8 GEMM adds the partial sums
// of each K tile (128) into separate fp32 registers. CUTLASS's fp8 mainloop
// (MainloopSm90TmaGmmaWarpSpecializedFP8, interval 4) does that with one set of partial
// registers: it must wait for every MMA in flight (warpgroup_wait<0>) before each addition,
// so the tensor cores idle once per K tile. H200, 4096^3, 128x128x128 c1x2 in one run
// (bench/RESULTS.md): CUTLASS interval 4 1143 TFLOP/s, interval 8 1274 (less precise),
// this mainloop 1287, cuBLASLt 1336.
//
// This mainloop keeps two sets of partial registers and alternates them by K tile: the
// MMAs of tile t write one set while the CUDA cores add tile t-1's set into the fp32
// accumulators, so one batch of MMAs stays in flight (warpgroup_wait<1>), as in the bf16
// mainloop. The sums are the same as at interval 4 (each K tile's partial sum added once,
// in order). Cost: one more set of accumulator registers (64 per thread for a 128x128
// cooperative tile: 3 x 64 in all, within the 240 a consumer warp group holds).
//
// Wider tiles (64x192 or 64x256 a consumer warp group: 96 or 128 accumulators a thread)
// have no room for two more full sets. There the MMAs of each K tile run in N slices (two
// of 96 columns, or four of 64), a batch per slice, and the two partial sets are slice-sized
// and alternate by batch: 96 + 2 x 48 or 128 + 2 x 32 registers. The sums are the same (each
// K tile's partial sum added once, in order), and one batch stays in flight across K tiles.
// H200 (bench/RESULTS.md): 128x256 1.01-1.08x cuBLASLt on the large and prefill shapes
// against 0.95-1.04x for 128x128; kernels.yaml builds 128x256 and 128x192. (Draining the
// last slice of every K tile instead is 5-9% slower.)
//
// It reuses everything of CUTLASS's fp8 collective (shared-memory layouts, TMA, pipeline,
// arguments, can_implement) and replaces only the consumer's mma(): a policy type derived
// from CUTLASS's fp8 policy selects this specialization, and the kernel layer (cooperative,
// ping-pong, stream-K) dispatches on the policy's Schedule, which it inherits.
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"

namespace td::cuda {

// N slices of a K tile's MMAs for a consumer warp group holding `regs` fp32 accumulators a
// thread in a tile `n` wide: 1 where two more full sets fit in 192 registers (the 64x128
// tile), else the fewest (even, so that the two partial sets alternate by slice) that fit;
// 0: none fits.
constexpr int fp8_slices(int regs, int n) {
    if (3 * regs <= 192) return 1;
    for (int h = 2; h <= n / 8; h += 2)
        if (n % (8 * h) == 0 && regs + 2 * regs / h <= 192) return h;
    return 0;
}

template <int Stages, class ClusterShape, class KernelSchedule>
struct Fp8TwoBufferPolicy : cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<Stages, ClusterShape, KernelSchedule> {};

// The CollectiveMma the CollectiveBuilder chose for an fp8 problem, with our policy.
template <class Collective>
struct TwoBufferOf;
template <int Stages, class ClusterShape, class KernelSchedule, class... Rest>
struct TwoBufferOf<cutlass::gemm::collective::CollectiveMma<
    cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<Stages, ClusterShape, KernelSchedule>, Rest...>> {
    using type = cutlass::gemm::collective::CollectiveMma<Fp8TwoBufferPolicy<Stages, ClusterShape, KernelSchedule>,
                                                          Rest...>;
};
template <class Collective, bool Apply>
struct TwoBufferIf {
    using type = Collective;
};
template <class Collective>
struct TwoBufferIf<Collective, true> {
    using type = typename TwoBufferOf<Collective>::type;
};

}  // namespace td::cuda

namespace cutlass::gemm::collective {

template <int Stages, class ClusterShape, class KernelSchedule, class TileShape_, class ElementA_, class StrideA_,
          class ElementB_, class StrideB_, class TiledMma_, class GmemTiledCopyA_, class SmemLayoutAtomA_,
          class SmemCopyAtomA_, class TransformA_, class GmemTiledCopyB_, class SmemLayoutAtomB_,
          class SmemCopyAtomB_, class TransformB_>
struct CollectiveMma<td::cuda::Fp8TwoBufferPolicy<Stages, ClusterShape, KernelSchedule>, TileShape_, ElementA_,
                     StrideA_, ElementB_, StrideB_, TiledMma_, GmemTiledCopyA_, SmemLayoutAtomA_, SmemCopyAtomA_,
                     TransformA_, GmemTiledCopyB_, SmemLayoutAtomB_, SmemCopyAtomB_, TransformB_>
    : CollectiveMma<MainloopSm90TmaGmmaWarpSpecializedFP8<Stages, ClusterShape, KernelSchedule>, TileShape_,
                    ElementA_, StrideA_, ElementB_, StrideB_, TiledMma_, GmemTiledCopyA_, SmemLayoutAtomA_,
                    SmemCopyAtomA_, TransformA_, GmemTiledCopyB_, SmemLayoutAtomB_, SmemCopyAtomB_, TransformB_> {
    using Base = CollectiveMma<MainloopSm90TmaGmmaWarpSpecializedFP8<Stages, ClusterShape, KernelSchedule>, TileShape_,
                               ElementA_, StrideA_, ElementB_, StrideB_, TiledMma_, GmemTiledCopyA_,
                               SmemLayoutAtomA_, SmemCopyAtomA_, TransformA_, GmemTiledCopyB_, SmemLayoutAtomB_,
                               SmemCopyAtomB_, TransformB_>;
    using DispatchPolicy = td::cuda::Fp8TwoBufferPolicy<Stages, ClusterShape, KernelSchedule>;
    using typename Base::MainloopPipeline;
    using typename Base::Params;
    using typename Base::PipelineState;
    using typename Base::SmemLayoutA;
    using typename Base::SmemLayoutB;
    using typename Base::TensorStorage;
    using typename Base::TiledMma;
    // mma() leaves exactly one K tile's stage unreleased, as the base's does, so the
    // base's mma_tail (which releases min(K_PIPE_MMAS = 1, k_tile_count) stages) fits.
    static_assert(Base::K_PIPE_MMAS == 1, "mma_tail releases one stage");

    static constexpr int kTileM = cute::size<0>(TileShape_{});
    static constexpr int kTileN = cute::size<1>(TileShape_{});
    static constexpr int kTileK = cute::size<2>(TileShape_{});
    static constexpr bool kCooperative = !std::is_base_of_v<KernelTmaWarpSpecializedPingpong, KernelSchedule>;
    static constexpr int kRegs = (kCooperative ? kTileM / 2 : kTileM) * kTileN / 128;  // a thread's accumulators
    static constexpr int kSlices = td::cuda::fp8_slices(kRegs, kTileN);
    static_assert(kSlices > 0, "no N slicing of this tile leaves room for two partial sets (192 registers)");
    // The MMAs of one N slice, tiled over the warp groups as the CollectiveBuilder tiles them.
    using SliceMma = decltype(cute::make_tiled_mma(
        cute::GMMA::ss_op_selector<ElementA_, ElementB_, float,
                                   cute::Shape<cute::_64, cute::Int<kTileN / kSlices>, cute::Int<kTileK>>,
                                   cute::GMMA::Major::K, cute::GMMA::Major::K>(),
        std::conditional_t<kCooperative, cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>,
                           cute::Layout<cute::Shape<cute::_1, cute::_1, cute::_1>>>{}));
    static_assert(kSlices > 1 || std::is_same_v<SliceMma, TiledMma_>, "one slice is the builder's own MMA");

    // The shared-memory operands as `mma`'s descriptor fragments for this thread's warp
    // group: (A (MMA,MMA_M,MMA_K,PIPE), B (MMA,MMA_N,MMA_K,PIPE)).
    template <class Mma>
    CUTLASS_DEVICE static auto operand_fragments(Mma const& mma, TensorStorage& shared_tensors, int thread_idx) {
        using namespace cute;
        Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
        Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
        constexpr int kWarpGroups = size(Mma{}) / NumThreadsPerWarpGroup;
        Layout warp_groups = make_layout(Int<kWarpGroups>{}, Int<NumThreadsPerWarpGroup>{});
        const int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / NumThreadsPerWarpGroup, 0);
        auto thread_mma = mma.get_slice(warp_groups(warp_group));
        return make_tuple(thread_mma.make_fragment_A(thread_mma.partition_A(sA)),
                          thread_mma.make_fragment_B(thread_mma.partition_B(sB)));
    }

    template <class FrgTensorC>
    CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                            int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
        if constexpr (kSlices > 1) {
            mma_sliced(pipeline, smem_pipe_read, accum, k_tile_count, thread_idx, shared_tensors);
        } else {
            using namespace cute;
            static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
            TiledMma tiled_mma;
            auto fragments = operand_fragments(tiled_mma, shared_tensors, thread_idx);
            auto& tCrA = get<0>(fragments);  // (MMA,MMA_M,MMA_K,PIPE)
            auto& tCrB = get<1>(fragments);  // (MMA,MMA_N,MMA_K,PIPE)

            Tensor part0 = make_fragment_like(accum);  // a K tile's partial sums, even tiles
            Tensor part1 = make_fragment_like(accum);  // odd tiles
            PipelineState smem_pipe_release = smem_pipe_read;

            // The MMAs of the next K tile into part (overwritten: the first MMA scales it by 0).
            auto issue = [&](auto& part) {
                auto token = pipeline.consumer_try_wait(smem_pipe_read);
                pipeline.consumer_wait(smem_pipe_read, token);
                const int stage = smem_pipe_read.index();
                warpgroup_fence_operand(part);
                warpgroup_arrive();
                tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
                CUTLASS_PRAGMA_UNROLL
                for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
                    cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), part);
                    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
                }
                warpgroup_commit_batch();  // no fence on part here: it is in flight until a wait
                ++smem_pipe_read;
            };
            // Adds a finished K tile's partial sums into the fp32 accumulators.
            auto promote = [&](auto& part) {
                warpgroup_fence_operand(part);
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < size(accum); ++i) accum(i) += part(i);
            };
            // After the MMAs of the tile before the newest are done: its stage goes back to the
            // producer (the newest tile's stage stays with mma_tail).
            auto release = [&]() {
                pipeline.consumer_release(smem_pipe_release);
                ++smem_pipe_release;
            };

            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < size(accum); ++i) accum(i) = 0.0f;
            if (k_tile_count <= 0) return;
            // part0 is in flight at the top of every step, from before the loop or from the
            // step before: one control-flow merge with MMAs in flight, as in CUTLASS's own
            // mainloops, and each exit drains the tensor cores before leaving. (Branches that
            // merged with different sets in flight made ptxas serialize every wgmma, C7514;
            // this form leaves one wait ptxas adds before the loop, C7517: one drain per tile.)
            issue(part0);
            int remaining = k_tile_count - 1;
            CUTLASS_PRAGMA_NO_UNROLL
            while (true) {
                warpgroup_fence_operand(part0);
                warpgroup_fence_operand(part1);
                if (remaining == 0) {
                    warpgroup_wait<0>();
                    promote(part0);
                    break;
                }
                issue(part1);
                warpgroup_wait<1>();
                promote(part0);
                release();
                if (--remaining == 0) {
                    warpgroup_wait<0>();
                    promote(part1);
                    break;
                }
                issue(part0);
                warpgroup_wait<1>();
                promote(part1);
                release();
                --remaining;
            }
        }
    }

    // The K loop in N slices (kSlices even): a batch = the MMAs of one K tile for one slice,
    // slice s into part[s % 2]; after each batch the one before it is waited for and added
    // into its columns of the accumulators; the last slice of a K tile is waited for before
    // the next K tile (a short drain: one slice's batch).
    template <class FrgTensorC>
    CUTLASS_DEVICE void mma_sliced(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                                   int k_tile_count, int thread_idx, TensorStorage& shared_tensors) {
        using namespace cute;
        static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(accum); ++i) accum(i) = 0.0f;
        if (k_tile_count <= 0) return;
        SliceMma slice_mma;
        auto fragments = operand_fragments(slice_mma, shared_tensors, thread_idx);
        auto& tCrA = get<0>(fragments);  // (MMA,MMA_M,MMA_K,PIPE)
        auto& tCrB = get<1>(fragments);  // (MMA,kSlices,MMA_K,PIPE)
        static_assert(decltype(size<1>(tCrB))::value == kSlices, "one MMA of the slice's width per slice");
        // a slice's partial sums: (MMA,MMA_M,1)
        Tensor part0 = partition_fragment_C(slice_mma, Shape<Int<kTileM>, Int<kTileN / kSlices>>{});
        Tensor part1 = make_fragment_like(part0);
        constexpr int kSliceValues = decltype(size<0>(part0))::value;
        static_assert(decltype(size<0>(accum))::value == kSliceValues * kSlices &&
                          decltype(size<2>(accum))::value == 1,
                      "the accumulators hold the slices' values one after another");
        PipelineState smem_pipe_release = smem_pipe_read;

        auto issue = [&](auto& part, int stage, int slice) {
            warpgroup_fence_operand(part);
            warpgroup_arrive();
            slice_mma.accumulate_ = GMMA::ScaleOut::Zero;
            CUTLASS_PRAGMA_UNROLL
            for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
                Tensor b = tCrB(_, slice, k_block, stage);  // (MMA)
                cute::gemm(slice_mma, tCrA(_, _, k_block, stage), make_tensor(b.data(), append<2>(b.layout())), part);
                slice_mma.accumulate_ = GMMA::ScaleOut::One;
            }
            warpgroup_commit_batch();
        };
        auto promote = [&](auto& part, int slice) {
            warpgroup_fence_operand(part);
            CUTLASS_PRAGMA_UNROLL
            for (int m = 0; m < size<1>(part); ++m) {
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < kSliceValues; ++i) accum(slice * kSliceValues + i, m, 0) += part(i, m, 0);
            }
            warpgroup_fence_operand(part);  // the additions stay before the next issue or release
        };
        auto acquire = [&]() {
            auto token = pipeline.consumer_try_wait(smem_pipe_read);
            pipeline.consumer_wait(smem_pipe_read, token);
            return smem_pipe_read.index();
        };
        // Slices 1 .. kSlices-1 of the K tile in `stage`, slice 0 in flight in part0: each
        // batch issued, then the one before it waited for and added. Leaves the last slice
        // (part1) in flight.
        auto rest = [&](int stage) {
            CUTLASS_PRAGMA_UNROLL
            for (int s = 1; s < kSlices; ++s) {
                if (s % 2) {
                    issue(part1, stage, s);
                    warpgroup_wait<1>();
                    promote(part0, s - 1);
                } else {
                    issue(part0, stage, s);
                    warpgroup_wait<1>();
                    promote(part1, s - 1);
                }
            }
        };

        // Slice 0 of a K tile is in flight (part0) at the top of every step, from before the
        // loop or from the step before; the last slice of a K tile (part1) stays in flight
        // until the next K tile's slice 0 is issued, so the tensor cores never drain.
        // The loop's shape is what ptxas accepts: with the first exit test below (never taken:
        // `remaining` is at least 1 at the top) ptxas keeps every wgmma asynchronous; without it
        // (the same steps, one exit) ptxas serialized every wgmma, C7514 "non wgmma
        // instructions reading accumulator registers" (CUDA 13.0; -Xptxas -v says which).
        int stage = acquire();
        issue(part0, stage, 0);
        ++smem_pipe_read;
        int remaining = k_tile_count;  // K tiles whose slices 1.. are still to issue
        CUTLASS_PRAGMA_NO_UNROLL
        while (true) {
            warpgroup_fence_operand(part0);
            warpgroup_fence_operand(part1);
            if (remaining == 0) {  // not reached; see above
                warpgroup_wait<0>();
                promote(part0, 0);
                break;
            }
            rest(stage);
            if (--remaining == 0) {
                warpgroup_wait<0>();
                promote(part1, kSlices - 1);
                break;
            }
            stage = acquire();
            issue(part0, stage, 0);
            ++smem_pipe_read;
            warpgroup_wait<1>();
            promote(part1, kSlices - 1);  // the K tile before: all its batches are done
            pipeline.consumer_release(smem_pipe_release);  // its stage (the last K tile's stays with mma_tail)
            ++smem_pipe_release;
        }
    }
};

}  // namespace cutlass::gemm::collective
