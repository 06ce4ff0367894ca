// cpu GEMM kernels: operand packing with dtype conversion for every layout, and the
// entry a generated variant registers. Instantiated once per variant by codegen.
#pragma once

#include <chrono>
#include <cmath>
#include <new>
#include <string>

#include "blocked_gemm.hpp"
#include "dtypes.hpp"
#include "dispatcher.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::cpu {

// Leading dimensions of a problem after filling in the packed defaults.
struct GemmLeading {
    int64_t lda, ldb, ldc;
};

inline GemmLeading leading_dims(const TdGemmProblem& p, bool a_row, bool b_row, bool c_row) {
    return {p.lda ? p.lda : (a_row ? p.K : p.M), p.ldb ? p.ldb : (b_row ? p.N : p.K),
            p.ldc ? p.ldc : (c_row ? p.N : p.M)};
}

template <class In, bool ARow, bool BRow, bool CRow>
struct GemmOperands {
    using A_t = typename In::storage;
    using Out = typename In::out;
    const A_t* a;
    const A_t* b;
    typename Out::storage* c;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha;

    int64_t batch() const { return 1; }
    int64_t m() const { return M; }
    int64_t n() const { return N; }
    int64_t k() const { return K; }

    float A(int64_t i, int64_t p) const { return In::load(ARow ? a[i * lda + p] : a[p * lda + i]); }
    float B(int64_t p, int64_t j) const { return In::load(BRow ? b[p * ldb + j] : b[j * ldb + p]); }

    template <int MR>
    void pack_a(int64_t, int64_t i0, int64_t k0, int mc, int kc, float* dst) const {
        for (int ip = 0; ip < mc; ip += MR, dst += (size_t)MR * kc) {
            const int rows = std::min(MR, mc - ip);
            if (ARow) {
                for (int ii = 0; ii < MR; ++ii) {
                    if (ii >= rows) {
                        for (int p = 0; p < kc; ++p) dst[p * MR + ii] = 0.0f;
                        continue;
                    }
                    const A_t* src = a + (i0 + ip + ii) * lda + k0;
                    for (int p = 0; p < kc; ++p) dst[p * MR + ii] = In::load(src[p]);
                }
            } else {
                for (int p = 0; p < kc; ++p) {
                    const A_t* src = a + (k0 + p) * lda + i0 + ip;
                    for (int ii = 0; ii < MR; ++ii) dst[p * MR + ii] = ii < rows ? In::load(src[ii]) : 0.0f;
                }
            }
        }
    }

    template <int NR>
    void pack_b(int64_t, int64_t k0, int64_t j0, int kc, int nc, float* dst) const {
        for (int jp = 0; jp < nc; jp += NR, dst += (size_t)NR * kc) {
            const int cols = std::min(NR, nc - jp);
            if (BRow) {
                for (int p = 0; p < kc; ++p) {
                    const A_t* src = b + (k0 + p) * ldb + j0 + jp;
                    for (int jj = 0; jj < NR; ++jj) dst[p * NR + jj] = jj < cols ? In::load(src[jj]) : 0.0f;
                }
            } else {
                for (int jj = 0; jj < NR; ++jj) {
                    if (jj >= cols) {
                        for (int p = 0; p < kc; ++p) dst[p * NR + jj] = 0.0f;
                        continue;
                    }
                    const A_t* src = b + (j0 + jp + jj) * ldb + k0;
                    for (int p = 0; p < kc; ++p) dst[p * NR + jj] = In::load(src[p]);
                }
            }
        }
    }

    void store(int64_t, int64_t i0, int64_t j0, int mc, int nc, const float* acc, int ld) const {
        for (int i = 0; i < mc; ++i)
            for (int j = 0; j < nc; ++j) {
                const int64_t at = CRow ? (i0 + i) * ldc + j0 + j : (j0 + j) * ldc + i0 + i;
                c[at] = Out::store(alpha * acc[i * ld + j]);
            }
    }
};

// ---- the generic epilogue (variants with `fusion: generic`): every feature at run time

// The element type of D, C, aux and bias: the problem's out_dtype, else the input type's output.
inline int out_code(const TdGemmProblem& p) {
    if (p.out_dtype != TD_OUT_DEFAULT) return p.out_dtype;
    return p.dtype == TD_FP32 ? TD_OUT_FP32 : p.dtype == TD_FP16 ? TD_OUT_FP16 : TD_OUT_BF16;
}

inline float load_out(const void* base, int64_t at, int code) {
    if (code == TD_OUT_FP32) return static_cast<const float*>(base)[at];
    if (code == TD_OUT_FP8_E4M3) return fp8e4m3_table()[static_cast<const uint8_t*>(base)[at]];
    if (code == TD_OUT_FP8_E5M2) return fp8e5m2_table()[static_cast<const uint8_t*>(base)[at]];
    const uint16_t v = static_cast<const uint16_t*>(base)[at];
    return code == TD_OUT_FP16 ? half_to_float(v) : bf16_to_float(v);
}

inline void store_out(void* base, int64_t at, int code, float v) {
    if (code == TD_OUT_FP32)
        static_cast<float*>(base)[at] = v;
    else if (code == TD_OUT_FP8_E4M3)
        static_cast<uint8_t*>(base)[at] = float_to_fp8e4m3(v);
    else if (code == TD_OUT_FP8_E5M2)
        static_cast<uint8_t*>(base)[at] = float_to_fp8e5m2(v);
    else
        static_cast<uint16_t*>(base)[at] = code == TD_OUT_FP16 ? float_to_half(v) : float_to_bf16(v);
}

inline float activate(int act, float x) {
    switch (act) {
        case TD_ACT_RELU: return x < 0.0f ? 0.0f : x;  // NaN stays NaN
        case TD_ACT_GELU: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
        case TD_ACT_GELU_TANH:
            return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        case TD_ACT_SILU: return x / (1.0f + std::exp(-x));
        default: return x;
    }
}

constexpr int64_t kScaleBlock = 128;  // block-wise scales: 1 x 128 blocks of A, 128 x 128 of B

// The operand policy of a generic variant: batch strides (0 broadcasts A or B), block-wise
// scales applied as the operands are packed (A[i,k] * scale_a[i, k/128], B[k,j] *
// scale_b[k/128, j/128]: the same sum as scaling each block's partial product), and the
// epilogue in store(), in fp32: x = alpha * acc * row_scale[i] * col_scale[j] + beta * C +
// bias; aux = x; D = act(x). C is read before D is written, element by element, so C may be D.
template <class In, bool ARow, bool BRow>
struct GenericOperands {
    using A_t = typename In::storage;
    const A_t* a;
    const A_t* b;
    void* d;
    TdGemmEpilogue ep;
    int64_t M, N, K, lda, ldb, ldc, batches, stride_a, stride_b, stride_c, k_blocks, n_blocks;
    float alpha, beta;
    int bias, act, aux, row_scale, col_scale, block_scale, out;

    int64_t batch() const { return batches; }
    int64_t m() const { return M; }
    int64_t n() const { return N; }
    int64_t k() const { return K; }

    float A(int64_t g, int64_t i, int64_t p) const {
        const float v = In::load(ARow ? a[g * stride_a + i * lda + p] : a[g * stride_a + p * lda + i]);
        return block_scale ? v * ep.scale_a[i * k_blocks + p / kScaleBlock] : v;
    }
    float B(int64_t g, int64_t p, int64_t j) const {
        const float v = In::load(BRow ? b[g * stride_b + p * ldb + j] : b[g * stride_b + j * ldb + p]);
        return block_scale ? v * ep.scale_b[(p / kScaleBlock) * n_blocks + j / kScaleBlock] : v;
    }

    // The plain operands of matrix g: its packing without scales is the plain variants'.
    GemmOperands<In, ARow, BRow, true> plain(int64_t g) const {
        return {a + g * stride_a, b + g * stride_b, nullptr, M, N, K, lda, ldb, ldc, alpha};
    }

    template <int MR>
    void pack_a(int64_t g, int64_t i0, int64_t k0, int mc, int kc, float* dst) const {
        if (!block_scale) return plain(g).template pack_a<MR>(0, i0, k0, mc, kc, dst);
        for (int ip = 0; ip < mc; ip += MR, dst += (size_t)MR * kc)
            for (int p = 0; p < kc; ++p)
                for (int ii = 0; ii < MR; ++ii)
                    dst[p * MR + ii] = ip + ii < mc ? A(g, i0 + ip + ii, k0 + p) : 0.0f;
    }

    template <int NR>
    void pack_b(int64_t g, int64_t k0, int64_t j0, int kc, int nc, float* dst) const {
        if (!block_scale) return plain(g).template pack_b<NR>(0, k0, j0, kc, nc, dst);
        for (int jp = 0; jp < nc; jp += NR, dst += (size_t)NR * kc)
            for (int p = 0; p < kc; ++p)
                for (int jj = 0; jj < NR; ++jj)
                    dst[p * NR + jj] = jp + jj < nc ? B(g, k0 + p, j0 + jp + jj) : 0.0f;
    }

    void store(int64_t g, int64_t i0, int64_t j0, int mc, int nc, const float* acc, int ld) const {
        for (int i = 0; i < mc; ++i)
            for (int j = 0; j < nc; ++j) {
                const int64_t row = i0 + i, col = j0 + j, at = g * stride_c + row * ldc + col;
                float x = alpha * acc[i * ld + j];
                if (row_scale) x *= ep.row_scale[row];
                if (col_scale) x *= ep.col_scale[col];
                if (beta != 0.0f) x += beta * load_out(ep.c, at, out);
                if (bias == TD_BIAS_N) x += load_out(ep.bias, col, out);
                if (bias == TD_BIAS_M) x += load_out(ep.bias, row, out);
                if (aux) store_out(ep.aux, at, out, x);
                store_out(d, at, out, activate(act, x));
            }
    }
};

// Everything a generated GEMM variant fixes at compile time. Features: the TD_FEATURE_* bits
// it implements (0, or every bit for `fusion: generic`, which runs GenericOperands).
template <class In, int DType, int LayoutCode, bool Streamk, int Reduction, int TM, int TN, int TK,
          int MR, int NR, int Features = 0>
struct GemmKernelImpl {
    static constexpr bool a_row = LayoutCode == TD_RCR || LayoutCode == TD_RRR;
    static constexpr bool b_row = LayoutCode == TD_RRR || LayoutCode == TD_CRR;
    static constexpr bool c_row = true;
    static constexpr bool generic = Features != 0;
    using Eng = Engine<TM, TN, TK, MR, NR>;
    using Operands = GemmOperands<In, a_row, b_row, c_row>;
    using Generic = GenericOperands<In, a_row, b_row>;

    static int64_t workers(const TdGemmProblem& p) { return p.splits > 0 ? p.splits : max_threads(); }

    static Operands operands(const TdGemmProblem& p, const void* a, const void* b, void* c) {
        const GemmLeading ld = leading_dims(p, a_row, b_row, c_row);
        return {static_cast<const typename In::storage*>(a), static_cast<const typename In::storage*>(b),
                static_cast<typename In::out::storage*>(c), p.M, p.N, p.K, ld.lda, ld.ldb, ld.ldc, p.alpha};
    }

    static Generic generic_operands(const TdGemmProblem& p, const void* a, const void* b, void* d,
                                    const TdGemmEpilogue& ep) {
        const GemmLeading ld = leading_dims(p, a_row, b_row, c_row);
        const bool batched = p.batch > 1;
        return {static_cast<const typename In::storage*>(a), static_cast<const typename In::storage*>(b), d, ep,
                p.M, p.N, p.K, ld.lda, ld.ldb, ld.ldc, batched ? p.batch : 1,
                batched ? p.stride_a : 0, batched ? p.stride_b : 0, batched ? p.stride_c : 0,
                ceil_div(p.K, kScaleBlock), ceil_div(p.N, kScaleBlock), p.alpha, p.beta, p.bias, p.activation,
                p.aux, p.row_scale, p.col_scale, p.block_scale, out_code(p)};
    }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != LayoutCode) { *why = "layout differs"; return TD_UNSUPPORTED; }
        if (p.block_scale && p.batch > 1) {
            *why = "block-wise scales with a batch are not implemented (one scale set per call)";
            return TD_UNSUPPORTED;
        }
        return TD_OK;  // the cpu kernels pad every edge and take any leading dimension
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        if (!Streamk) return 0;
        if (generic) return Eng::workspace_bytes(Eng::plan(generic_operands(p, nullptr, nullptr, nullptr, {}),
                                                           workers(p)), Reduction == 0);
        Operands ops = operands(p, nullptr, nullptr, nullptr);
        return Eng::workspace_bytes(Eng::plan(ops, workers(p)), Reduction == 0);
    }

    template <class Ops>
    static int run_ops(const TdGemmProblem& p, const Ops& ops, void* ws, size_t ws_bytes) {
        if (!Streamk) {
            Eng::run_data_parallel(ops);
            return TD_OK;
        }
        return Eng::run_stream_k_checked(ops, workers(p), Reduction == 0, ws, ws_bytes);
    }

    static int run_ex(const TdGemmProblem& p, const void* a, const void* b, void* d, const TdGemmEpilogue& ep,
                      void* ws, size_t ws_bytes, void*) {
        if (gemm_features(p) & ~Features)  // selection never hands such a problem here
            return fail(TD_REJECTED, "the kernel implements no epilogue, batch or block-wise scale");
        if (generic) return run_ops(p, generic_operands(p, a, b, d, ep), ws, ws_bytes);
        return run_ops(p, operands(p, a, b, d), ws, ws_bytes);
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws,
                   size_t ws_bytes, void* stream) {
        return run_ex(p, a, b, c, TdGemmEpilogue{}, ws, ws_bytes, stream);
    }
};

}  // namespace td::cpu
