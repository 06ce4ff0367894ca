/* Generated from python/tiledispatch/codegen/abi.py by `python -m codegen abi --write`;
 * do not edit (tests/test_abi.py checks it is current). */

#ifndef TILEDISPATCH_ABI_TYPES_H
#define TILEDISPATCH_ABI_TYPES_H

#include <stdint.h>

#define TD_ABI_VERSION 4

/* Status codes of every call. */
enum td_status {
    TD_OK = 0,  /* success */
    TD_ERROR = -1,  /* bad argument, device error, exception caught at the boundary */
    TD_UNSUPPORTED = -2,  /* no kernel supports the problem */
    TD_REJECTED = -3,  /* the chosen kernel rejected the arguments */
};

/* Input element types (fp8: OCP, FNUZ for gfx942). The output is fp32 for fp32, fp16 for fp16, bf16 otherwise. */
enum td_dtype {
    TD_FP32 = 0,
    TD_FP16 = 1,
    TD_BF16 = 2,
    TD_FP8_E4M3 = 3,
    TD_FP8_E5M2 = 4,
    TD_FP8_E4M3_FNUZ = 5,
    TD_FP8_E5M2_FNUZ = 6,
};
#define TD_DTYPE_COUNT 7

/* GEMM layouts: A, B, C row- (r) or column-major (c). */
enum td_layout {
    TD_RCR = 0,
    TD_RRR = 1,
    TD_CRR = 2,
    TD_CCR = 3,
};
#define TD_LAYOUT_COUNT 4

/* Convolution directions. */
enum td_conv_direction {
    TD_CONV_FWD = 0,
    TD_CONV_BWD_DATA = 1,
    TD_CONV_BWD_WEIGHT = 2,
};
#define TD_CONV_DIRECTION_COUNT 3

/* GEMM variants: data-parallel tiles, stream-K, split-K through the batch. */
enum td_gemm_variant {
    TD_GEMM_STANDARD = 0,
    TD_GEMM_STREAM_K = 1,
    TD_GEMM_SPLIT_K = 2,
};
#define TD_GEMM_VARIANT_COUNT 3

/* How stream-K combines the partial tiles of a split output tile. */
enum td_reduction {
    TD_REDUCTION_ATOMIC = 0,
    TD_REDUCTION_DETERMINISTIC = 1,
};
#define TD_REDUCTION_COUNT 2

/* Kernel families (KernelInfo.family; registry.json names them). */
enum td_family {
    TD_FAMILY_BLOCKED = 0,
    TD_FAMILY_MFMA = 1,
    TD_FAMILY_CUTLASS = 2,
    TD_FAMILY_SKINNY = 3,
    TD_FAMILY_DIRECT = 4,
    TD_FAMILY_DEPTHWISE = 5,
    TD_FAMILY_DEPTHWISE_MMA = 6,
    TD_FAMILY_TOEPLITZ_MMA = 7,
    TD_FAMILY_MMA = 8,
    TD_FAMILY_TILED_MMA = 9,
    TD_FAMILY_IM2COL = 10,
    TD_FAMILY_IMPLICIT = 11,
    TD_FAMILY_CUDNN = 12,
    TD_FAMILY_CUBLASLT = 13,
    TD_FAMILY_GROUPED_MMA = 14,
};
#define TD_FAMILY_COUNT 15

/* C = alpha * A(MxK) * B(KxN). */
typedef struct TdGemmProblem {
    int64_t M;
    int64_t N;
    int64_t K;
    int32_t dtype;  /* enum td_dtype */
    int32_t layout;  /* enum td_layout */
    int64_t lda;  /* leading dimensions in elements; 0: packed */
    int64_t ldb;
    int64_t ldc;
    float alpha;  /* 1.0f for a plain product; per-tensor fp8 scales multiply in here */
    int32_t splits;  /* cpu stream-K: workers (0 = one per thread); cuda stream-K and split-K: the split count (0 = the kernel's choice) */
    int32_t raster;  /* cuda tile order: 0 heuristic, 1 along M, 2 along N (cpu: ignored) */
    int32_t swizzle;  /* cuda tile swizzle: 0 default (1), or 1, 2, 4, 8 (cpu: ignored) */
} TdGemmProblem;

/* The reference system's convolution problem. 1D problems use the *_w fields, 2D *_h and *_w; unused dims are 1 (pad 0). */
typedef struct ConvProblemC {
    int N;
    int G;
    int C;  /* input channels per group */
    int K;  /* output channels per group */
    int input_d;
    int input_h;
    int input_w;
    int filter_z;
    int filter_y;
    int filter_x;
    int stride_d;
    int stride_h;
    int stride_w;
    int pad_d;
    int pad_h;
    int pad_w;
    int dilation_d;
    int dilation_h;
    int dilation_w;
    int direction;  /* enum td_conv_direction */
    int split_k;  /* 0 = automatic */
} ConvProblemC;

/* Extended conv problem: the reference struct plus the spatial rank and the dtype. Layouts are channels-last with groups: NWGC/NHWGC/NDHWGC input, GKXC/GKYXC/GKZYXC weight, NWGK/NHWGK/NDHWGK output. */
typedef struct TdConvProblem {
    ConvProblemC base;
    int32_t ndim;  /* 1, 2 or 3 */
    int32_t dtype;  /* enum td_dtype */
} TdConvProblem;

/* Run-time options of a library (td_get_options / td_set_options); every field 1 by default. */
typedef struct TdOptions {
    int32_t tma;  /* 1: the convolution kernels that can move tiles by TMA do (0: software copies) */
    int32_t pdl;  /* 1: kernels that support it are launched as programmatic dependents */
    int32_t multi_row;  /* 1: the tiled_mma forward reuses A over several output rows */
    int32_t vendor;  /* 1: selection weighs the vendor-library kernels (cuDNN, cuBLASLt) too (0: our own kernels alone; a vendor kernel still runs when named) */
} TdOptions;

#endif /* TILEDISPATCH_ABI_TYPES_H */
