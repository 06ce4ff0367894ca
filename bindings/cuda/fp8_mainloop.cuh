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
// It reuses everything of CUTLASS's fp8 collective (shared-memory layouts, TMA, pipeline,
// arguments, can_implement) and replaces only the consumer's mma(): a policy type derived
// from CUTLASS's fp8 policy selects this specialization, and the kernel layer (cooperative,
// ping-pong, stream-K) dispatches on the policy's Schedule, which it inherits.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"

namespace td::cuda {

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

    template <class FrgTensorC>
    CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                            int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
        using namespace cute;
        static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
        Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
        Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
        constexpr int kWarpGroups = size(TiledMma{}) / NumThreadsPerWarpGroup;
        Layout warp_groups = make_layout(Int<kWarpGroups>{}, Int<NumThreadsPerWarpGroup>{});
        const int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / NumThreadsPerWarpGroup, 0);
        TiledMma tiled_mma;
        auto thread_mma = tiled_mma.get_slice(warp_groups(warp_group));
        Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,MMA_M,MMA_K,PIPE)
        Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,MMA_N,MMA_K,PIPE)

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
};

}  // namespace cutlass::gemm::collective
