// cuda backend: cuBLASLt's matmul as a kernel of the registry (the cublaslt family), so that
// selection weighs the vendor against our GEMMs. fp32 accumulation; the output is bf16 for
// bf16 and fp8 inputs, fp16 for fp16 (or the problem's out_dtype, below). The library is opened at run time (vendor_lib.hpp);
// its headers come from the toolkit or the nvidia-cublas wheel at build time.
//
// Our row-major C (M x N) is cuBLAS's column-major C^T (N x M) = op(B) op(A) with our B as
// cuBLAS's A and our A as its B: a row-major operand is the transpose of a column-major one
// with the same leading dimension. rcr is cuBLAS's "TN", the layout its fp8 kernels need.
// Per problem, pointer alignment and device one plan: descriptors and the algorithm
// cuBLASLt's heuristic ranks first (what cublasGemmEx / torch.matmul run), with a 32 MiB
// workspace at most.
//
// The GEMM features (run_ex; KernelInfo.features from codegen/families/cublaslt.py) map onto
// cuBLASLt's own D = epilogue(alpha * op(A) op(B) + beta * C) with its bias added before the
// activation, so D = act(alpha * acc * scales + beta * C + bias) as the ABI has it:
//  - beta * C: cuBLASLt's C with D's layout descriptor (C may be D itself);
//  - bias along N: our columns are the rows of its column-major D^T, the direction of its
//    BIAS epilogues (bias along M has no cuBLASLt epilogue: no TD_FEATURE_BIAS_M);
//  - relu: RELU(_BIAS); gelu_tanh: GELU(_BIAS), the tanh approximation (cuBLAS docs,
//    cublasLtEpilogue_t note); aux: GELU_AUX(_BIAS), whose aux is the GELU input, our
//    pre-activation value (RELU_AUX writes a bit mask: refused);
//  - out_dtype: D, C and bias of fp16 / bf16 / fp32 where cuBLASLt's type table has them;
//  - batch: strided batches of every layout (stride 0 repeats A or B);
//  - fp8 row / column scales: the OUTER_VEC_32F scale mode (cuBLASLt's A is our B, so its A
//    scale is our col_scale and its B scale our row_scale);
//  - fp8 block-wise scales: VEC128_32F for our A, BLK128x128_32F for our B, the scales
//    transposed into cuBLASLt's layouts first (cublaslt_scale_a_mn_major below).
// A feature problem's plan is made per thread (the descriptors carry the epilogue's pointers,
// set before every call); a plan cuBLASLt refuses is TD_REJECTED with its status, never run.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
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
    decltype(&::cublasLtMatrixLayoutSetAttribute) LayoutSet;
    decltype(&::cublasLtGetStatusName) StatusName;  // nullptr where the library lacks it
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
        vendor::resolve(lib, "cublasLtMatrixLayoutSetAttribute", &api.LayoutSet, &missing);
        if (!missing.empty()) problem = "the cuBLASLt library lacks " + missing;
        std::string optional;
        vendor::resolve(lib, "cublasLtGetStatusName", &api.StatusName, &optional);
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
    std::string rejected;  // a feature plan cuBLASLt refused: why (its descriptors unused)
};

// The largest power of two up to 256 that divides an address.
inline uint32_t cublaslt_alignment(const void* p) {
    const uintptr_t v = reinterpret_cast<uintptr_t>(p);
    uint32_t a = 256;
    while (a > 1 && v % a) a /= 2;
    return a;
}

// ---- the feature path (run_ex): what the plain product above does not need

// A cuBLAS status as text: its number and, where the library names it, its name.
inline std::string cublaslt_status(const CublasLtApi& api, cublasStatus_t status) {
    std::string text = "cuBLAS status " + std::to_string((int)status);
    if (api.StatusName) text += std::string(" (") + api.StatusName(status) + ")";
    return text;
}

constexpr int64_t kCublasLtScaleBlock = 128;  // the ABI's block-wise scales: 1 x 128 of A, 128 x 128 of B

inline int64_t cublaslt_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline size_t cublaslt_round256(size_t bytes) { return (bytes + 255) / 256 * 256; }
inline unsigned cublaslt_blocks(int64_t n) { return (unsigned)std::min<int64_t>(cublaslt_cdiv(n, 256), 4096); }

// Templates (as the other headers' kernels) so that every variant's source may define them.
template <int Unused = 0>
__global__ void cublaslt_fill(float* __restrict__ dst, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

// Block-wise scales in the layouts cuBLASLt reads (cuBLAS docs, "128-element 1D and 128x128
// 2D block scaling", scaling factors layouts; its M x K A is our B^T (N x K), its B our A^T):
//  - our A's scale_a (M x L row-major, L = ceil(K/128)) is its B's VEC128_32F scales, which are
//    "N-major with shape N x L": element (m, kb) at m + kb * M (M a multiple of 4);
//  - our B's scale_b (L x ceil(N/128) row-major) is its A's BLK128x128_32F scales, which are
//    "K-major, shape L4 x ceil(M/128)" with L4 = L rounded up to 4: element (kb, nb) at
//    kb + nb * L4, the rows kb >= L zero.
// Both differ from ours: transposed into the workspace before the matmul.
template <int Unused = 0>
__global__ void cublaslt_scale_a_mn_major(const float* __restrict__ src, float* __restrict__ dst, int64_t M,
                                          int64_t L) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * L; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[(i % M) * L + i / M];
}

template <int Unused = 0>
__global__ void cublaslt_scale_b_k_major(const float* __restrict__ src, float* __restrict__ dst, int64_t L,
                                         int64_t L4, int64_t NB) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < L4 * NB; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t kb = i % L4, nb = i / L4;
        dst[i] = kb < L ? src[kb * NB + nb] : 0.0f;
    }
}

// The element type of D, C, aux and bias of a problem (TD_OUT_*): its out_dtype, else the
// input type's output (fp16 for fp16, bf16 otherwise).
inline int cublaslt_out_code(const TdGemmProblem& p) {
    if (p.out_dtype != TD_OUT_DEFAULT) return p.out_dtype;
    return p.dtype == TD_FP16 ? TD_OUT_FP16 : TD_OUT_BF16;
}

inline cudaDataType_t cublaslt_out_type(int code) {
    return code == TD_OUT_FP32 ? CUDA_R_32F : code == TD_OUT_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

// The cuBLASLt epilogue of a problem's bias and activation (supports() refused the others).
inline cublasLtEpilogue_t cublaslt_epilogue(const TdGemmProblem& p) {
    const bool bias = p.bias == TD_BIAS_N;
    if (p.activation == TD_ACT_RELU) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    if (p.activation == TD_ACT_GELU_TANH) {
        if (p.aux) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    }
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The device pointers of one feature call that its descriptor carries (set before every call):
// the bias, the aux output, and cuBLASLt's A and B scales (our column and row scales, ones
// where the problem has one of the two, or the transposed block-wise scales).
struct CublasLtEpiloguePointers {
    const void* bias = nullptr;
    void* aux = nullptr;
    const float* scale_a = nullptr;  // cuBLASLt's A = our B
    const float* scale_b = nullptr;  // cuBLASLt's B = our A
};

// One cuBLASLt handle per device and thread.
inline int cublaslt_handle(const CublasLtApi& api, cublasLtHandle_t* out) {
    static thread_local std::map<int, cublasLtHandle_t> handles;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
    cublasLtHandle_t& h = handles[device];
    if (!h) TD_CUBLAS(api.Create(&h), "cublasLtCreate");
    *out = h;
    return TD_OK;
}

template <int Dtype, int Layout, int Features>
struct CublasLtGemm {
    static constexpr bool a_row = Layout == TD_RCR || Layout == TD_RRR;
    static constexpr bool b_row = Layout == TD_RRR || Layout == TD_CRR;
    static constexpr bool fp8 = Dtype == TD_FP8_E4M3;
    // What run_ex implements; cuBLASLt's scale modes are for narrow-precision inputs only. No
    // bias along M: cuBLASLt's bias runs along the rows of its column-major D^T, which are our
    // columns (N), and its C broadcast (ldc 0) runs the same way; the dispatcher core refuses it.
    static constexpr int kFeatures = TD_FEATURE_BETA | TD_FEATURE_BIAS_N | TD_FEATURE_ACTIVATION | TD_FEATURE_AUX |
                                     TD_FEATURE_OUT_DTYPE | TD_FEATURE_BATCH |
                                     (fp8 ? TD_FEATURE_ROW_SCALE | TD_FEATURE_COL_SCALE | TD_FEATURE_BLOCK_SCALE : 0);
    static_assert(Features == kFeatures, "KernelInfo.features (codegen/families/cublaslt.py) differs from run_ex");

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
        if (gemm_features(p))
            if (int s = supports_features(p, why)) return s;
        if (!cublaslt_api(why)) return TD_UNSUPPORTED;
        return TD_OK;
    }

    static int refuse(std::string* why, const char* reason) {
        *why = reason;
        return TD_UNSUPPORTED;
    }

    // The feature combinations cuBLASLt cannot compute as the ABI defines them (the features
    // bits are coarse: e.g. ACTIVATION is set, SiLU is refused here).
    static int supports_features(const TdGemmProblem& p, std::string* why) {
        const int out = cublaslt_out_code(p);
        if (out == TD_OUT_FP8_E4M3 || out == TD_OUT_FP8_E5M2)
            return refuse(why, "an fp8 output is not built for the cublaslt family (fp32, fp16 or bf16 D)");
        if (Dtype == TD_FP16 && out == TD_OUT_BF16)
            return refuse(why, "cuBLASLt has no fp16 matmul with a bf16 output (fp16 or fp32 only)");
        if (Dtype == TD_BF16 && out == TD_OUT_FP16)
            return refuse(why, "cuBLASLt has no bf16 matmul with an fp16 output (bf16 or fp32 only)");
        if (p.bias == TD_BIAS_N && fp8 && out == TD_OUT_FP32)
            return refuse(why, "cuBLASLt's fp8 matmul with an fp32 output takes a bf16 bias; the ABI's bias has D's "
                               "type (fp32)");
        if (p.activation == TD_ACT_GELU)
            return refuse(why, "cuBLASLt's GELU epilogue is the tanh approximation (activation gelu_tanh); it has no "
                               "erf GELU");
        if (p.activation == TD_ACT_SILU) return refuse(why, "cuBLASLt has no SiLU epilogue");
        if (p.aux && p.activation == TD_ACT_RELU)
            return refuse(why, "cuBLASLt's ReLU aux output is a bit mask, not the pre-activation value");
        if (p.aux && p.activation != TD_ACT_GELU_TANH)
            return refuse(why, "cuBLASLt writes the pre-activation value as aux only with its GELU epilogue: aux "
                               "needs activation gelu_tanh");
        const int64_t ldc = p.ldc ? p.ldc : p.N;
        if (p.aux && (ldc % 8 || (p.batch > 1 && p.stride_c % 8)))
            return refuse(why, "cuBLASLt's GELU aux output needs ldc and stride_c multiples of 8");
        if (p.batch > INT32_MAX) return refuse(why, "cuBLASLt's batch count is an int32");
        if (!fp8 && (p.row_scale || p.col_scale || p.block_scale))
            return refuse(why, "cuBLASLt's scale modes take fp8 inputs only");
        if (p.block_scale && (p.row_scale || p.col_scale))
            return refuse(why, "row or column scales with block-wise scales: cuBLASLt takes one scale mode per operand");
        if (p.block_scale && p.batch > 1)
            return refuse(why, "block-wise scales with a batch are not implemented (one scale set per call)");
        if (p.block_scale && (p.M % 4 || p.N % 4))
            return refuse(why, "cuBLASLt's 128-element block scales need M and N multiples of 4");
        return TD_OK;
    }

    // Device bytes a feature problem needs besides cuBLASLt's workspace: ones for the missing one
    // of row / column scales, or the block-wise scales in cuBLASLt's layouts.
    static size_t extra_bytes(const TdGemmProblem& p) {
        if (p.block_scale) {
            const int64_t L = cublaslt_cdiv(p.K, kCublasLtScaleBlock), L4 = cublaslt_cdiv(L, 4) * 4;
            return cublaslt_round256(sizeof(float) * p.M * L) +
                   cublaslt_round256(sizeof(float) * L4 * cublaslt_cdiv(p.N, kCublasLtScaleBlock));
        }
        if (p.row_scale != p.col_scale) return cublaslt_round256(sizeof(float) * (p.row_scale ? p.N : p.M));
        return 0;
    }

    // 0: the backend's scratch buffer (plain problems, and feature problems that need nothing
    // besides cuBLASLt's workspace). Else the extra bytes plus cuBLASLt's largest workspace.
    static size_t workspace_size(const TdGemmProblem& p) {
        const size_t extra = gemm_features(p) ? extra_bytes(p) : 0;
        return extra ? extra + kCublasLtWorkspace : 0;
    }

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

    // A feature problem's descriptors and algorithm, made once per thread (the descriptor
    // carries the call's epilogue pointers, set before each matmul) and per problem fields
    // that shape them, pointer alignment and device. A plan cuBLASLt refused keeps the reason.
    static int feature_plan(const CublasLtApi& api, cublasLtHandle_t h, const TdGemmProblem& p, uint32_t align,
                            uint32_t epilogue_align, const CublasLtEpiloguePointers& ptrs, CublasLtPlan** out) {
        static thread_local std::map<std::string, std::unique_ptr<CublasLtPlan>> plans;
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
        const bool batched = p.batch > 1;
        const int64_t key_fields[15] = {
            p.M, p.N, p.K, p.lda, p.ldb, p.ldc, batched ? p.batch : 1, batched ? p.stride_a : 0,
            batched ? p.stride_b : 0, batched ? p.stride_c : 0, (int64_t)p.bias << 32 | (uint32_t)p.activation,
            (int64_t)p.aux << 24 | p.row_scale << 16 | p.col_scale << 8 | p.block_scale,
            (int64_t)cublaslt_out_code(p) << 1 | (p.beta != 0.0f), (int64_t)align << 32 | (uint32_t)device,
            (int64_t)epilogue_align};
        const std::string key(reinterpret_cast<const char*>(key_fields), sizeof key_fields);
        std::unique_ptr<CublasLtPlan>& plan = plans[key];
        if (!plan) {
            auto fresh = std::make_unique<CublasLtPlan>();
            fresh->rejected = describe(api, h, p, align, ptrs, fresh.get());
            plan = std::move(fresh);
        }
        if (!plan->rejected.empty()) return fail(TD_REJECTED, plan->rejected);
        *out = plan.get();
        return TD_OK;
    }

#define TD_CUBLASLT_PLAN(call, what)                                                                    \
    do {                                                                                                \
        const cublasStatus_t td_status_ = (call);                                                       \
        if (td_status_ != CUBLAS_STATUS_SUCCESS)                                                        \
            return std::string("cuBLASLt refused ") + (what) + ": " + cublaslt_status(api, td_status_); \
    } while (0)

    // Fills a feature plan: "" on success, else why cuBLASLt refused it.
    static std::string describe(const CublasLtApi& api, cublasLtHandle_t h, const TdGemmProblem& p, uint32_t align,
                                const CublasLtEpiloguePointers& ptrs, CublasLtPlan* plan) {
        const int64_t lda = p.lda ? p.lda : (a_row ? p.K : p.M);
        const int64_t ldb = p.ldb ? p.ldb : (b_row ? p.N : p.K);
        const int64_t ldc = p.ldc ? p.ldc : p.N;
        const cudaDataType_t out = cublaslt_out_type(cublaslt_out_code(p));
        TD_CUBLASLT_PLAN(api.DescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "the matmul descriptor");
        const cublasOperation_t ta = b_row ? CUBLAS_OP_N : CUBLAS_OP_T, tb = a_row ? CUBLAS_OP_N : CUBLAS_OP_T;
        TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
        TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
        const uint32_t epilogue = cublaslt_epilogue(p);
        TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
                         "the epilogue " + std::to_string(epilogue));
        if (p.bias == TD_BIAS_N) {  // one bias for every matrix of a batch (BIAS_BATCH_STRIDE 0)
            const int32_t type = out;
            TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type),
                             "the bias type");
        }
        if (p.aux) {  // the GELU input in D's type and layout
            const int32_t type = out;
            const int64_t stride = p.batch > 1 ? p.stride_c : 0;
            TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &type, sizeof type),
                             "the aux type");
            TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldc, sizeof ldc),
                             "the aux leading dimension");
            if (p.batch > 1)
                TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride,
                                             sizeof stride),
                                 "the aux batch stride");
        }
        if (p.row_scale || p.col_scale || p.block_scale) {
            // cuBLASLt's A is our B: its A scales run along its M = our N (col_scale) or are
            // our B's 128 x 128 blocks; its B scales along its N = our M, or our A's 1 x 128 blocks.
            const int32_t mode_a = p.block_scale ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
            const int32_t mode_b = p.block_scale ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                 : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
            TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a),
                             "A's scale mode " + std::to_string(mode_a));
            TD_CUBLASLT_PLAN(api.DescSet(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b),
                             "B's scale mode " + std::to_string(mode_b));
        }
        if (std::string why = set_pointers(api, plan->desc, p, ptrs); !why.empty()) return why;
        TD_CUBLASLT_PLAN(api.LayoutCreate(&plan->a, in_type(), b_row ? p.N : p.K, b_row ? p.K : p.N, ldb), "layout A");
        TD_CUBLASLT_PLAN(api.LayoutCreate(&plan->b, in_type(), a_row ? p.K : p.M, a_row ? p.M : p.K, lda), "layout B");
        TD_CUBLASLT_PLAN(api.LayoutCreate(&plan->c, out, p.N, p.M, ldc), "layout C");
        if (p.batch > 1) {
            const int32_t count = (int32_t)p.batch;
            const struct { cublasLtMatrixLayout_t layout; int64_t stride; } batched[] = {
                {plan->a, p.stride_b}, {plan->b, p.stride_a}, {plan->c, p.stride_c}};  // 0 repeats A or B
            for (const auto& m : batched) {
                TD_CUBLASLT_PLAN(api.LayoutSet(m.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                                 "the batch count");
                TD_CUBLASLT_PLAN(api.LayoutSet(m.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &m.stride,
                                               sizeof m.stride),
                                 "a batch stride");
            }
        }
        cublasLtMatmulPreference_t pref = nullptr;
        TD_CUBLASLT_PLAN(api.PrefCreate(&pref), "the preference");
        const uint64_t ws = kCublasLtWorkspace;
        TD_CUBLASLT_PLAN(api.PrefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                         "the workspace preference");
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            TD_CUBLASLT_PLAN(api.PrefSet(pref, attr, &align, sizeof align), "the alignment preference");
        cublasLtMatmulHeuristicResult_t result{};
        int count = 0;
        const cublasStatus_t found =
            api.Heuristic(h, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &count);
        const std::string what = "epilogue " + std::to_string(epilogue) + (p.batch > 1 ? ", batched" : "") +
                                 (p.block_scale ? ", block-wise scales" : "") +
                                 (p.row_scale || p.col_scale ? ", outer-vector scales" : "");
        TD_CUBLASLT_PLAN(found, "the problem (" + what + ")");
        if (count < 1) return "cuBLASLt has no algorithm for this problem (" + what + ")";
        plan->algo = result.algo;
        plan->workspace = result.workspaceSize;
        return "";
    }

    // The call's pointers onto a feature plan's descriptor.
    static std::string set_pointers(const CublasLtApi& api, cublasLtMatmulDesc_t desc, const TdGemmProblem& p,
                                    const CublasLtEpiloguePointers& ptrs) {
        if (p.bias == TD_BIAS_N)
            TD_CUBLASLT_PLAN(api.DescSet(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptrs.bias, sizeof ptrs.bias),
                             "the bias pointer");
        if (p.aux)
            TD_CUBLASLT_PLAN(api.DescSet(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ptrs.aux, sizeof ptrs.aux),
                             "the aux pointer");
        if (ptrs.scale_a)
            TD_CUBLASLT_PLAN(
                api.DescSet(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ptrs.scale_a, sizeof ptrs.scale_a),
                "A's scale pointer");
        if (ptrs.scale_b)
            TD_CUBLASLT_PLAN(
                api.DescSet(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ptrs.scale_b, sizeof ptrs.scale_b),
                "B's scale pointer");
        return "";
    }

#undef TD_CUBLASLT_PLAN

    // A device buffer of `bytes`: the caller's workspace (from its first 256-byte boundary)
    // where it is large enough, else the backend's scratch buffer.
    static int take(size_t bytes, void* ws, size_t ws_bytes, void* stream, char** out) {
        const size_t pad = ws ? (256 - reinterpret_cast<uintptr_t>(ws) % 256) % 256 : 0;
        if (ws && ws_bytes >= pad + bytes) return *out = static_cast<char*>(ws) + pad, TD_OK;
        void* scratch = nullptr;
        if (int s = device::scratch(bytes, stream, &scratch)) return s;
        *out = static_cast<char*>(scratch);
        return TD_OK;
    }

    // run() with the epilogue's operands: a plain problem takes run() itself.
    static int run_ex(const TdGemmProblem& p, const void* a, const void* b, void* d, const TdGemmEpilogue& ep,
                      void* ws, size_t ws_bytes, void* stream_ptr) {
        if (!gemm_features(p)) return run(p, a, b, d, ws, ws_bytes, stream_ptr);
        std::string why;
        if (supports_features(p, &why)) return fail(TD_REJECTED, why);  // a named kernel's call
        const CublasLtApi* api = cublaslt_api(&why);
        if (!api) return fail(TD_REJECTED, why);
        cublasLtHandle_t h = nullptr;
        if (int s = cublaslt_handle(*api, &h)) return s;
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        const void* c = p.beta != 0.0f ? ep.c : d;  // cuBLASLt's C with D's descriptor; C == D allowed

        // Ones for the missing one of row / column scales, or the block-wise scales transposed,
        // at the front of a buffer that holds cuBLASLt's largest workspace after them.
        const size_t extra = extra_bytes(p);
        char* buffer = nullptr;
        if (extra)
            if (int s = take(extra + kCublasLtWorkspace, ws, ws_bytes, stream_ptr, &buffer)) return s;
        CublasLtEpiloguePointers ptrs;
        ptrs.bias = p.bias == TD_BIAS_N ? ep.bias : nullptr;
        ptrs.aux = p.aux ? ep.aux : nullptr;
        if (p.row_scale || p.col_scale) {
            float* ones = reinterpret_cast<float*>(buffer);
            if (p.row_scale != p.col_scale) {
                const int64_t n = p.row_scale ? p.N : p.M;
                cublaslt_fill<<<cublaslt_blocks(n), 256, 0, stream>>>(ones, n, 1.0f);
            }
            ptrs.scale_a = p.col_scale ? ep.col_scale : ones;
            ptrs.scale_b = p.row_scale ? ep.row_scale : ones;
        }
        if (p.block_scale) {
            const int64_t L = cublaslt_cdiv(p.K, kCublasLtScaleBlock), L4 = cublaslt_cdiv(L, 4) * 4;
            const int64_t NB = cublaslt_cdiv(p.N, kCublasLtScaleBlock);
            float* a_scales = reinterpret_cast<float*>(buffer);
            float* b_scales = reinterpret_cast<float*>(buffer + cublaslt_round256(sizeof(float) * p.M * L));
            cublaslt_scale_a_mn_major<<<cublaslt_blocks(p.M * L), 256, 0, stream>>>(ep.scale_a, a_scales, p.M, L);
            cublaslt_scale_b_k_major<<<cublaslt_blocks(L4 * NB), 256, 0, stream>>>(ep.scale_b, b_scales, L, L4, NB);
            ptrs.scale_a = b_scales;
            ptrs.scale_b = a_scales;
        }
        if (extra && cudaPeekAtLastError() != cudaSuccess)
            return fail(TD_ERROR, std::string("the scale layout kernel failed to launch: ") +
                                      cudaGetErrorString(cudaGetLastError()));

        // A, B, C and D's alignment is the heuristic's preference; the epilogue pointers' it reads
        // from the descriptor: both in the plan's key.
        const uint32_t align = std::min(std::min(cublaslt_alignment(a), cublaslt_alignment(b)),
                                        std::min(cublaslt_alignment(c), cublaslt_alignment(d)));
        uint32_t epilogue_align = 256;
        for (const void* q : {ptrs.bias, static_cast<const void*>(ptrs.aux), static_cast<const void*>(ptrs.scale_a),
                              static_cast<const void*>(ptrs.scale_b)})
            if (q) epilogue_align = std::min(epilogue_align, cublaslt_alignment(q));
        CublasLtPlan* plan = nullptr;
        if (int s = feature_plan(*api, h, p, align, epilogue_align, ptrs, &plan)) return s;
        if (std::string bad = set_pointers(*api, plan->desc, p, ptrs); !bad.empty()) return fail(TD_REJECTED, bad);
        void* work = nullptr;
        if (plan->workspace) {
            if (buffer) {
                work = buffer + extra;
            } else {
                char* taken = nullptr;
                if (int s = take(plan->workspace, ws, ws_bytes, stream_ptr, &taken)) return s;
                work = taken;
            }
        }
        const float alpha = p.alpha, beta = p.beta;
        const cublasStatus_t status = api->Matmul(h, plan->desc, &alpha, b, plan->a, a, plan->b, &beta, c, plan->c, d,
                                                  plan->c, &plan->algo, work, plan->workspace, stream);
        if (status == CUBLAS_STATUS_SUCCESS) return TD_OK;
        const bool refused = status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
                             status == CUBLAS_STATUS_ARCH_MISMATCH;
        return fail(refused ? TD_REJECTED : TD_ERROR, "cublasLtMatmul failed: " + cublaslt_status(*api, status));
    }
};

}  // namespace td::cuda
