// The cudnn family's cost-model entry (cuda/conv_cudnn.cuh): where our kernels stand against
// cuDNN by class of layer, the prior that selection uses where no tuning table speaks (the
// conv tables measured over the model zoo, bench/zoo.py, refine it per layer). Our conv
// families' costs are ordinal bands (models.hpp); cuDNN takes
//   0.45 behind our specialised kernels (depthwise 0.3-0.4, tiled_mma 0.4) and ahead of the
//        mma.sync (0.5) and direct (1.0) ones, on the classes where ours measured ahead on
//        the H200: depthwise and 2-16 channels per group, stride 1, no dilation, fwd and
//        bwd_data, and depthwise bwd_weight at stride 1;
//   0.0  ahead of every family of ours elsewhere: dense layers (ours 0.31x cuDNN over the
//        dense layers of six timm models), groups of more than 16 channels, strided or
//        dilated depthwise and grouped layers (0.4-0.57x), the other bwd_weight problems.
#include "cost/models.hpp"

namespace td {

double cudnn_conv_cost(const KernelInfo&, const TdConvProblem& p, const ConvGeometry& g, const CostContext&) {
    bool unit = true;
    for (int d = 0; d < 3; ++d) unit = unit && g.stride[d] == 1 && g.dil[d] == 1;
    const bool depthwise = g.C == 1 && g.K == 1;
    const bool small_groups = g.G > 1 && g.C <= 16 && g.K <= 16 && g.C == g.K;
    if (!unit || g.G == 1 || !(depthwise || small_groups)) return 0.0;
    if (p.base.direction == TD_CONV_BWD_WEIGHT) return depthwise ? 0.45 : 0.0;
    return 0.45;
}

}  // namespace td
