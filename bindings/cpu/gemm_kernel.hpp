// cpu GEMM kernels: operand packing with dtype conversion for every layout, and the
// entry a generated variant registers. Instantiated once per variant by codegen.
#pragma once

#include <chrono>
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

// Everything a generated GEMM variant fixes at compile time.
template <class In, int DType, int LayoutCode, bool Streamk, int Reduction, int TM, int TN, int TK,
          int MR, int NR>
struct GemmKernelImpl {
    static constexpr bool a_row = LayoutCode == TD_RCR || LayoutCode == TD_RRR;
    static constexpr bool b_row = LayoutCode == TD_RRR || LayoutCode == TD_CRR;
    static constexpr bool c_row = true;
    using Eng = Engine<TM, TN, TK, MR, NR>;
    using Operands = GemmOperands<In, a_row, b_row, c_row>;

    static int64_t workers(const TdGemmProblem& p) { return p.splits > 0 ? p.splits : max_threads(); }

    static Operands operands(const TdGemmProblem& p, const void* a, const void* b, void* c) {
        const GemmLeading ld = leading_dims(p, a_row, b_row, c_row);
        return {static_cast<const typename In::storage*>(a), static_cast<const typename In::storage*>(b),
                static_cast<typename In::out::storage*>(c), p.M, p.N, p.K, ld.lda, ld.ldb, ld.ldc, p.alpha};
    }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.layout != LayoutCode) { *why = "layout differs"; return TD_UNSUPPORTED; }
        return TD_OK;  // the cpu kernels pad every edge and take any leading dimension
    }

    static size_t workspace_size(const TdGemmProblem& p) {
        if (!Streamk) return 0;
        Operands ops = operands(p, nullptr, nullptr, nullptr);
        return Eng::workspace_bytes(Eng::plan(ops, workers(p)), Reduction == 0);
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws,
                   size_t ws_bytes, void*) {
        Operands ops = operands(p, a, b, c);
        if (!Streamk) {
            Eng::run_data_parallel(ops);
            return TD_OK;
        }
        return Eng::run_stream_k_checked(ops, workers(p), Reduction == 0, ws, ws_bytes);
    }
};

}  // namespace td::cpu
