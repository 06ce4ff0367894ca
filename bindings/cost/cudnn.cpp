// The cudnn family's cost-model entry (cuda/conv_cudnn.cuh): where our kernels stand against
// cuDNN by class of layer, the prior that selection uses where no tuning table speaks (the
// conv tables measured over the model zoo, bench/zoo.py, refine it per layer). Our conv
// families' costs are ordinal bands (models.hpp); cuDNN takes
//   0.45 behind our specialised kernels (depthwise 0.3-0.4, tiled_mma 0.4) and ahead of the
//        mma.sync (0.5) and direct (1.0) ones, on the classes where ours measured ahead on
//        the H200: depthwise and 2-16 channels per group, stride 1, no dilation, fwd and
//        bwd_data, and depthwise bwd_weight at stride 1;
//   0.5  behind the grouped_mma family ([0.45, 0.5)) on groups of 17 to 48 channels (C = K),
//        every direction and stride: RegNet's and ResNeXt's grouped layers, where it measured
//        1.1-5.5x cuDNN on the H200 (every one of 16 sampled layer-directions of the zoo,
//        24 and 48 channels a group, stride 1 and 2, batch 32 and 1);
//   0.0  ahead of every family of ours elsewhere: dense layers (ours 0.31x cuDNN over the
//        dense layers of six timm models), groups of more than 48 channels (G 4 x 64, 56 x 56:
//        cuDNN 42 us, grouped_mma 181), strided or dilated depthwise and small-group layers
//        (0.4-0.57x), the other bwd_weight problems; and three classes inside the windows
//        above where the whole zoo (431 layers, bf16, H100) measured ours behind:
//        - depthwise with a channel count that is not a multiple of 8 (no 16-byte channel
//          vectors: our scalar-channel kernels), in bwd_weight (0.44-0.91x, 9 of 9 layers) and
//          in fwd with filters larger than 3 x 3 (0.56-0.91x);
//        - single-image depthwise fwd (inference) on the CUDA-core kernels: cuDNN's batch-1
//          kernels took 5.7-6.3 us where ours take 7.3-7.9 (a weight-packing launch before the
//          convolution), 0.73-0.88x on 24 of 36 3x3 layers. 0.34: ahead of the depthwise family
//          (0.35), behind depthwise_mma where its tiles fit the image (5x5 and 7x7 at 14 x 14
//          and up: 1.3-2.7x cuDNN at batch 1);
//        - groups of 32 channels (C = K = 32, ResNeXt's), fwd and bwd_weight: 0.58-0.94x, where
//          cuDNN has kernels for them; bwd_data stays ours (1.12-1.51x).
#include "cost/models.hpp"

namespace td {

double cudnn_conv_cost(const KernelInfo&, const TdConvProblem& p, const ConvGeometry& g, const CostContext&) {
    bool unit = true;
    for (int d = 0; d < 3; ++d) unit = unit && g.stride[d] == 1 && g.dil[d] == 1;
    const bool depthwise = g.C == 1 && g.K == 1;
    const bool small_groups = g.G > 1 && g.C <= 16 && g.K <= 16 && g.C == g.K;
    const int direction = p.base.direction;
    if (g.G > 1 && g.C == 32 && g.K == 32) return direction == TD_CONV_BWD_DATA ? 0.5 : 0.0;
    if (g.G > 1 && g.C == g.K && g.C > 16 && g.C <= 48) return 0.5;
    if (!unit || g.G == 1 || !(depthwise || small_groups)) return 0.0;
    if (depthwise) {
        const bool vectors = g.G % 8 == 0;
        if (direction == TD_CONV_BWD_WEIGHT) return vectors ? 0.45 : 0.0;
        if (direction == TD_CONV_FWD && !vectors && g.taps() > 9) return 0.0;
        if (direction == TD_CONV_FWD && g.N == 1) return 0.34;
        return 0.45;
    }
    if (direction == TD_CONV_BWD_WEIGHT) return 0.0;
    return 0.45;
}

}  // namespace td
