// hip backend: the fused GEMM epilogue of the `fusion: generic` mfma variants, shared by the
// GPU kernels (bindings/hip/kernels_hip.hpp) and the host emulator (tests/hip_emulator.cpp).
// The same contract as the cpu reference (bindings/cpu/gemm_kernel.hpp GenericOperands),
// applied in the engine's store stage, element by element, in fp32:
//   x = alpha * acc * row_scale[i] * col_scale[j] + beta * C + bias;  aux = x;  D = act(x)
// with batch strides (0: A or B broadcast) and D / C / aux / bias in the output type (fp32,
// fp16 or bf16, chosen at run time). C is read before D is written by the same thread, so C
// may be D. One variant serves every epilogue.
//
// The math is fp32 arithmetic only (no device-library call: the kernels link with -nogpulib
// where the device libraries lack gfx942), so the emulator runs the same math code as the GPU.
#pragma once

#include <cstdint>

#include "hip/mfma_engine.hpp"
#include "tiledispatch/abi_types.h"

namespace td::hip {

// ---------------------------------------------------------------- fp32 math
// exp(x): reduction by ln 2 (split in two for an exact n * ln2_hi) and a degree-7
// polynomial on |r| <= ln2 / 2 (relative error a few ulp); 0 below -87, +inf above 88.
TD_HD inline float exp_f32(float x) {
    if (!(x == x)) return x;  // NaN
    if (x < -87.0f) return 0.0f;
    if (x > 88.0f) return bits_to_float(0x7f800000u);
    const float t = x * 1.44269504f;
    const int n = (int)(t + (t < 0.0f ? -0.5f : 0.5f));
    const float r = (x - (float)n * 6.93145752e-1f) - (float)n * 1.42860677e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * bits_to_float((uint32_t)(n + 127) << 23);
}

// erfc(x) with a relative error below 1.2e-7 everywhere (the Chebyshev fit of Numerical
// Recipes' erfcc), so gelu(x) = x / 2 * erfc(-x / sqrt 2) stays accurate for negative x too.
TD_HD inline float erfc_f32(float x) {
    const float z = x < 0.0f ? -x : x;
    const float t = 1.0f / (1.0f + 0.5f * z);
    const float poly =
        -1.26551223f +
        t * (1.00002368f +
             t * (0.37409196f +
                  t * (0.09678418f +
                       t * (-0.18628806f +
                            t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f +
                                                                                            t * 0.17087277f))))))));
    const float r = t * exp_f32(-z * z + poly);
    return x >= 0.0f ? r : 2.0f - r;  // NaN: 2 - NaN
}

// Act: enum td_activation, as the cpu reference: relu, gelu (erf), gelu_tanh, silu. gelu_tanh
// through x * sigmoid(2u) = x / 2 * (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3).
template <int Act>
TD_HD inline float activate(float x) {
    if constexpr (Act == TD_ACT_RELU) return x < 0.0f ? 0.0f : x;  // NaN stays NaN
    else if constexpr (Act == TD_ACT_GELU) return 0.5f * x * erfc_f32(-0.70710678f * x);
    else if constexpr (Act == TD_ACT_GELU_TANH) return x / (1.0f + exp_f32(-1.59576912f * (x + 0.044715f * x * x * x)));
    else if constexpr (Act == TD_ACT_SILU) return x / (1.0f + exp_f32(-x));
    else return x;
}

// ---------------------------------------------------------------- output elements
// enum td_out_dtype (never DEFAULT here: the host resolves it).
TD_HD inline float load_elem(const void* base, int64_t at, int out) {
    if (out == TD_OUT_FP32) return static_cast<const float*>(base)[at];
    const uint16_t v = static_cast<const uint16_t*>(base)[at];
    return out == TD_OUT_FP16 ? half_to_float(v) : bf16_to_float(v);
}

TD_HD inline void store_elem(void* base, int64_t at, int out, float v) {
    if (out == TD_OUT_FP32) static_cast<float*>(base)[at] = v;
    else static_cast<uint16_t*>(base)[at] = out == TD_OUT_FP16 ? encode_out<TD_FP16>(v) : encode_out<TD_BF16>(v);
}

// ---------------------------------------------------------------- operands
// GEMM with the epilogue: GemmOps (bindings/hip/operands.hpp) with batch strides and the
// epilogue in store(batch, m, n, v), v = alpha * acc from the engine. Optional operands are
// null pointers when the problem does not ask for them. The activation is a template
// argument (the host picks one of the five kernels at run time). The engine stores tiles
// through LDS for these operands (kStagedStore): an epilogue unrolled once per accumulator
// would leave the accumulators in scratch memory.
template <int DT, int LayoutCode, int Act>
struct EpilogueGemmOps {
    using S = typename Storage<DT>::type;
    static constexpr bool kStagedStore = true;
    static constexpr bool a_row = LayoutCode == TD_RCR || LayoutCode == TD_RRR;
    static constexpr bool b_row = LayoutCode == TD_RRR || LayoutCode == TD_CRR;
    const S* A;
    const S* B;
    void* D;
    const void* C;            // beta != 0
    const void* bias;         // bias_kind != TD_BIAS_NONE
    void* aux;                // the pre-activation, D's layout
    const float* row_scale;   // M floats
    const float* col_scale;   // N floats
    int64_t M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
    float beta;
    int bias_kind, out;  // enum td_bias, td_out_dtype

    TD_HD S a(int g, int64_t m, int64_t k) const {
        if (m >= M || k >= K) return 0;
        const S* base = A + g * stride_a;
        return a_row ? base[m * lda + k] : base[k * lda + m];
    }
    TD_HD S b(int g, int64_t k, int64_t n) const {
        if (k >= K || n >= N) return 0;
        const S* base = B + g * stride_b;
        return b_row ? base[k * ldb + n] : base[n * ldb + k];
    }
    TD_HD void store(int g, int64_t m, int64_t n, float v) const {
        const int64_t at = g * stride_c + m * ldc + n;
        float x = v;
        if (row_scale) x *= row_scale[m];
        if (col_scale) x *= col_scale[n];
        if (beta != 0.0f) x += beta * load_elem(C, at, out);
        if (bias_kind == TD_BIAS_N) x += load_elem(bias, n, out);
        else if (bias_kind == TD_BIAS_M) x += load_elem(bias, m, out);
        if (aux) store_elem(aux, at, out, x);
        store_elem(D, at, out, activate<Act>(x));
    }
};

}  // namespace td::hip
