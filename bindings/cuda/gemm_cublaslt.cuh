// cuda backend: cuBLASLt's matmul as a kernel of the registry (the cublaslt family), so that
// selection weighs the vendor against our GEMMs. fp32 accumulation; the output is bf16 for
// bf16 and fp8 inputs, fp16 for fp16. The library is opened at run time (vendor_lib.hpp);
// its headers come from the toolkit or the nvidia-cublas wheel at build time.
//
// Our row-major C (M x N) is cuBLAS's column-major C^T (N x M) = op(B) op(A) with our B as
// cuBLAS's A and our A as its B: a row-major operand is the transpose of a column-major one
// with the same leading dimension. rcr is cuBLAS's "TN", the layout its fp8 kernels need.
// Per problem, pointer alignment and device one plan: descriptors and the algorithm
// cuBLASLt's heuristic ranks first (what cublasGemmEx / torch.matmul run), with a 32 MiB
// workspace at most.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/vendor_lib.hpp"
#include "dispatcher.hpp"

#ifndef TD_CUBLASLT_LIBDIR
#define TD_CUBLASLT_LIBDIR ""
#endif

namespace td::cuda {

struct CublasLtApi {
    decltype(&::cublasLtCreate) Create;
    decltype(&::cublasLtMatmulDescCreate) DescCreate;
    decltype(&::cublasLtMatmulDescSetAttribute) DescSet;
    decltype(&::cublasLtMatrixLayoutCreate) LayoutCreate;
    decltype(&::cublasLtMatmulPreferenceCreate) PrefCreate;
    decltype(&::cublasLtMatmulPreferenceSetAttribute) PrefSet;
    decltype(&::cublasLtMatmulAlgoGetHeuristic) Heuristic;
    decltype(&::cublasLtMatmul) Matmul;
};

inline const CublasLtApi* cublaslt_api(std::string* why) {
    static vendor::Library lib({"libcublasLt.so.13", "libcublasLt.so.12"}, TD_CUBLASLT_LIBDIR);
    static CublasLtApi api{};
    static std::string problem;
    static std::once_flag once;
    std::call_once(once, [] {
        if (!lib.open(&problem)) {
            // a process with CUDA 12's cuBLASLt only: the second soname
            problem = "cuBLASLt is not available: " + problem;
            return;
        }
        std::string missing;
        vendor::resolve(lib, "cublasLtCreate", &api.Create, &missing);
        vendor::resolve(lib, "cublasLtMatmulDescCreate", &api.DescCreate, &missing);
        vendor::resolve(lib, "cublasLtMatmulDescSetAttribute", &api.DescSet, &missing);
        vendor::resolve(lib, "cublasLtMatrixLayoutCreate", &api.LayoutCreate, &missing);
        vendor::resolve(lib, "cublasLtMatmulPreferenceCreate", &api.PrefCreate, &missing);
        vendor::resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &api.PrefSet, &missing);
        vendor::resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &api.Heuristic, &missing);
        vendor::resolve(lib, "cublasLtMatmul", &api.Matmul, &missing);
        if (!missing.empty()) problem = "the cuBLASLt library lacks " + missing;
    });
    if (!problem.empty()) {
        if (why) *why = problem;
        return nullptr;
    }
    return &api;
}

#define TD_CUBLAS(call, what)                                                                      \
    do {                                                                                           \
        const cublasStatus_t td_status_ = (call);                                                  \
        if (td_status_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return fail(TD_ERROR, std::string(what) + " failed: cuBLAS status " + std::to_string((int)td_status_)); \
    } while (0)

constexpr size_t kCublasLtWorkspace = size_t(32) << 20;

struct CublasLtPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
};

// The largest power of two up to 256 that divides an address.
inline uint32_t cublaslt_alignment(const void* p) {
    const uintptr_t v = reinterpret_cast<uintptr_t>(p);
    uint32_t a = 256;
    while (a > 1 && v % a) a /= 2;
    return a;
}

template <int Dtype, int Layout>
struct CublasLtGemm {
    static constexpr bool a_row = Layout == TD_RCR || Layout == TD_RRR;
    static constexpr bool b_row = Layout == TD_RRR || Layout == TD_CRR;
    static constexpr bool fp8 = Dtype == TD_FP8_E4M3;

    static cudaDataType_t in_type() {
        return Dtype == TD_FP16 ? CUDA_R_16F : Dtype == TD_BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    }
    static cudaDataType_t out_type() { return Dtype == TD_FP16 ? CUDA_R_16F : CUDA_R_16BF; }

    static int supports(const TdGemmProblem& p, std::string* why) {
        if (p.dtype != Dtype) return *why = "dtype differs", TD_UNSUPPORTED;
        if (p.layout != Layout) return *why = "layout differs", TD_UNSUPPORTED;
        if (p.M <= 0 || p.N <= 0 || p.K <= 0) return *why = "M, N and K must be positive", TD_UNSUPPORTED;
        const int64_t lda = p.lda ? p.lda : (a_row ? p.K : p.M);
        const int64_t ldb = p.ldb ? p.ldb : (b_row ? p.N : p.K);
        const int64_t ldc = p.ldc ? p.ldc : p.N;
        if (lda < (a_row ? p.K : p.M) || ldb < (b_row ? p.N : p.K) || ldc < p.N)
            return *why = "a leading dimension is smaller than its operand's rows", TD_UNSUPPORTED;
        if (fp8 && (p.K % 16 || lda % 16 || ldb % 16 || ldc % 8))
            return *why = "cuBLASLt's fp8 matmul needs K, lda and ldb multiples of 16 and ldc a multiple of 8",
                   TD_UNSUPPORTED;
        if (!cublaslt_api(why)) return TD_UNSUPPORTED;
        return TD_OK;
    }

    static size_t workspace_size(const TdGemmProblem&) { return 0; }  // the backend's scratch buffer

    static int plan_for(const CublasLtApi& api, cublasLtHandle_t h, const TdGemmProblem& p, uint32_t align,
                        const CublasLtPlan** out) {
        static std::mutex lock;
        static std::map<std::string, std::unique_ptr<CublasLtPlan>> plans;
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
        const int64_t key_fields[7] = {p.M, p.N, p.K, p.lda, p.ldb, p.ldc, (int64_t)align << 32 | (uint32_t)device};
        const std::string key(reinterpret_cast<const char*>(key_fields), sizeof key_fields);
        std::lock_guard<std::mutex> guard(lock);
        std::unique_ptr<CublasLtPlan>& plan = plans[key];
        if (plan) return *out = plan.get(), TD_OK;
        auto fresh = std::make_unique<CublasLtPlan>();
        const int64_t lda = p.lda ? p.lda : (a_row ? p.K : p.M);
        const int64_t ldb = p.ldb ? p.ldb : (b_row ? p.N : p.K);
        const int64_t ldc = p.ldc ? p.ldc : p.N;
        TD_CUBLAS(api.DescCreate(&fresh->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        // cuBLAS's A = our B: op T where B is column-major (K x N), N where row-major
        const cublasOperation_t ta = b_row ? CUBLAS_OP_N : CUBLAS_OP_T, tb = a_row ? CUBLAS_OP_N : CUBLAS_OP_T;
        TD_CUBLAS(api.DescSet(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
        TD_CUBLAS(api.DescSet(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
        // stored column-major: cuBLAS's A is (N x K) or (K x N), its B (K x M) or (M x K), C (N x M)
        TD_CUBLAS(api.LayoutCreate(&fresh->a, in_type(), b_row ? p.N : p.K, b_row ? p.K : p.N, ldb), "layout A");
        TD_CUBLAS(api.LayoutCreate(&fresh->b, in_type(), a_row ? p.K : p.M, a_row ? p.M : p.K, lda), "layout B");
        TD_CUBLAS(api.LayoutCreate(&fresh->c, out_type(), p.N, p.M, ldc), "layout C");
        cublasLtMatmulPreference_t pref = nullptr;
        TD_CUBLAS(api.PrefCreate(&pref), "cublasLtMatmulPreferenceCreate");
        const uint64_t ws = kCublasLtWorkspace;
        TD_CUBLAS(api.PrefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace preference");
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            TD_CUBLAS(api.PrefSet(pref, attr, &align, sizeof align), "alignment preference");
        cublasLtMatmulHeuristicResult_t result{};
        int count = 0;
        const cublasStatus_t found =
            api.Heuristic(h, fresh->desc, fresh->a, fresh->b, fresh->c, fresh->c, pref, 1, &result, &count);
        if (found == CUBLAS_STATUS_NOT_SUPPORTED || (found == CUBLAS_STATUS_SUCCESS && count < 1))
            return fail(TD_REJECTED, "cuBLASLt has no algorithm for this problem");
        TD_CUBLAS(found, "cublasLtMatmulAlgoGetHeuristic");
        fresh->algo = result.algo;
        fresh->workspace = result.workspaceSize;
        plan = std::move(fresh);
        *out = plan.get();
        return TD_OK;
    }

    static int run(const TdGemmProblem& p, const void* a, const void* b, void* c, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        std::string why;
        const CublasLtApi* api = cublaslt_api(&why);
        if (!api) return fail(TD_REJECTED, why);
        static thread_local std::map<int, cublasLtHandle_t> handles;
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
        cublasLtHandle_t& h = handles[device];
        if (!h) TD_CUBLAS(api->Create(&h), "cublasLtCreate");
        uint32_t align = std::min(cublaslt_alignment(a), std::min(cublaslt_alignment(b), cublaslt_alignment(c)));
        const CublasLtPlan* plan = nullptr;
        if (int s = plan_for(*api, h, p, align, &plan)) return s;
        void* work = nullptr;
        if (plan->workspace) {
            if (ws && ws_bytes >= plan->workspace) work = ws;
            else if (int s = device::scratch(plan->workspace, stream_ptr, &work)) return s;
        }
        const float alpha = p.alpha, beta = 0.0f;
        TD_CUBLAS(api->Matmul(h, plan->desc, &alpha, b, plan->a, a, plan->b, &beta, c, plan->c, c, plan->c,
                              &plan->algo, work, plan->workspace, static_cast<cudaStream_t>(stream_ptr)),
                  "cublasLtMatmul");
        return TD_OK;
    }
};

}  // namespace td::cuda
