/* Generated from python/tiledispatch/codegen/abi.py by `python -m codegen abi --write`;
 * do not edit (tests/test_abi.py checks it is current). */

#ifndef TILEDISPATCH_ABI_TYPES_H
#define TILEDISPATCH_ABI_TYPES_H

#include <stdint.h>

#define TD_ABI_VERSION 5

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

/* GEMM variants: data-parallel tiles, stream-K, split-K through the batch, grouped (one launch for a list of GEMMs; run by grouped calls only). */
enum td_gemm_variant {
    TD_GEMM_STANDARD = 0,
    TD_GEMM_STREAM_K = 1,
    TD_GEMM_SPLIT_K = 2,
    TD_GEMM_GROUPED = 3,
};
#define TD_GEMM_VARIANT_COUNT 4

/* How stream-K combines the partial tiles of a split output tile. */
enum td_reduction {
    TD_REDUCTION_ATOMIC = 0,
    TD_REDUCTION_DETERMINISTIC = 1,
};
#define TD_REDUCTION_COUNT 2

/* The activation of a GEMM epilogue: GELU is the erf form, GELU_TANH the tanh approximation. */
enum td_activation {
    TD_ACT_NONE = 0,
    TD_ACT_RELU = 1,
    TD_ACT_GELU = 2,
    TD_ACT_GELU_TANH = 3,
    TD_ACT_SILU = 4,
};
#define TD_ACTIVATION_COUNT 5

/* A GEMM epilogue's bias vector: none, one value per column (N), one per row (M). */
enum td_bias {
    TD_BIAS_NONE = 0,
    TD_BIAS_N = 1,
    TD_BIAS_M = 2,
};
#define TD_BIAS_COUNT 3

/* The element type of D, C and aux: DEFAULT is the input type's output (fp32 for fp32, fp16 for fp16, bf16 otherwise). */
enum td_out_dtype {
    TD_OUT_DEFAULT = 0,
    TD_OUT_FP32 = 1,
    TD_OUT_FP16 = 2,
    TD_OUT_BF16 = 3,
    TD_OUT_FP8_E4M3 = 4,
    TD_OUT_FP8_E5M2 = 5,
};
#define TD_OUT_DTYPE_COUNT 6

/* What a GEMM kernel implements beyond D = alpha * A * B (KernelInfo.features, a bit mask; TD_FEATURE_ALL: every bit). */
enum td_feature {
    TD_FEATURE_BETA = 1,
    TD_FEATURE_BIAS_N = 2,
    TD_FEATURE_BIAS_M = 4,
    TD_FEATURE_ACTIVATION = 8,
    TD_FEATURE_AUX = 16,
    TD_FEATURE_ROW_SCALE = 32,
    TD_FEATURE_COL_SCALE = 64,
    TD_FEATURE_OUT_DTYPE = 128,
    TD_FEATURE_BATCH = 256,
    TD_FEATURE_BLOCK_SCALE = 512,
};
#define TD_FEATURE_ALL 1023

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
    TD_FAMILY_CUTLASS_GROUPED = 15,
    TD_FAMILY_CUTLASS_BLOCKWISE = 16,
    TD_FAMILY_POINTWISE = 17,
};
#define TD_FAMILY_COUNT 18

/* D = act(alpha * (A(MxK) * B(KxN)) * row_scale * col_scale + beta * C + bias), in that order; every field after swizzle 0 is the plain product (docs/abi.md). */
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
    int64_t batch;  /* GEMMs in the batch; 0 or 1: one (TD_FEATURE_BATCH above 1) */
    int64_t stride_a;  /* elements between the batch's matrices of A; 0: A broadcast */
    int64_t stride_b;  /* the same for B; 0: B broadcast */
    int64_t stride_c;  /* the same for D, C and aux (at least one matrix's span when batch > 1) */
    float beta;  /* D = ... + beta * C; 0: C is not read */
    int32_t bias;  /* enum td_bias */
    int32_t activation;  /* enum td_activation */
    int32_t aux;  /* 1: the pre-activation value is written to aux too */
    int32_t row_scale;  /* 1: the product times row_scale[i] (M floats) */
    int32_t col_scale;  /* 1: the product times col_scale[j] (N floats) */
    int32_t block_scale;  /* 1: fp8 block-wise scales: scale_a (M x ceil(K/128)) per 1x128 block of A, scale_b (ceil(K/128) x ceil(N/128)) per 128x128 block of B */
    int32_t out_dtype;  /* enum td_out_dtype */
} TdGemmProblem;

/* The operands of a GEMM's epilogue and scales that the problem's fields ask for (others NULL). */
typedef struct TdGemmEpilogue {
    const void* c;  /* beta's C: D's type and layout (ldc, stride_c); may be D itself */
    const void* bias;  /* D's type; N or M values */
    void* aux;  /* the pre-activation: D's type and layout */
    const float* row_scale;  /* M floats */
    const float* col_scale;  /* N floats */
    const float* scale_a;  /* block_scale: M x ceil(K/128) floats, row-major */
    const float* scale_b;  /* block_scale: ceil(K/128) x ceil(N/128) floats, row-major */
} TdGemmEpilogue;

/* One GEMM of a grouped call: its sizes and operands; the rest comes from the call's problem. */
typedef struct TdGemmGroup {
    int64_t M;  /* 0: the group is skipped */
    int64_t N;
    int64_t K;
    int64_t lda;  /* 0: packed */
    int64_t ldb;
    int64_t ldc;
    const void* a;
    const void* b;
    void* d;
    TdGemmEpilogue epilogue;  /* this group's epilogue operands */
} TdGemmGroup;

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
