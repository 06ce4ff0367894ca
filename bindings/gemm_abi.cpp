// The GEMM library's C ABI: the reference system's dispatcher_* functions and td_gemm_*.
#include <chrono>
#include <string>

#include "dispatcher.hpp"

namespace td {
namespace {

int check_problem(const TdGemmProblem* p) {
    if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
    if (p->M <= 0 || p->N <= 0 || p->K <= 0)
        return fail(TD_ERROR, "M, N and K must be positive (got M=" + std::to_string(p->M) +
                                  " N=" + std::to_string(p->N) + " K=" + std::to_string(p->K) + ")");
    if (p->dtype < TD_FP32 || p->dtype > TD_FP8_E5M2)
        return fail(TD_ERROR, "unknown dtype code " + std::to_string(p->dtype));
    if (p->layout < TD_RCR || p->layout > TD_CCR)
        return fail(TD_ERROR, "unknown layout code " + std::to_string(p->layout));
    if (p->splits < 0) return fail(TD_ERROR, "splits must not be negative");
    const bool a_row = p->layout == TD_RCR || p->layout == TD_RRR;
    const bool b_row = p->layout == TD_RRR || p->layout == TD_CRR;
    const int64_t min_lda = a_row ? p->K : p->M, min_ldb = b_row ? p->N : p->K, min_ldc = p->N;
    if (p->lda < 0 || (p->lda && p->lda < min_lda))
        return fail(TD_ERROR, "lda " + std::to_string(p->lda) + " is below " + std::to_string(min_lda));
    if (p->ldb < 0 || (p->ldb && p->ldb < min_ldb))
        return fail(TD_ERROR, "ldb " + std::to_string(p->ldb) + " is below " + std::to_string(min_ldb));
    if (p->ldc < 0 || (p->ldc && p->ldc < min_ldc))
        return fail(TD_ERROR, "ldc " + std::to_string(p->ldc) + " is below " + std::to_string(min_ldc));
    return TD_OK;
}

TdGemmProblem legacy_problem(int64_t M, int64_t N, int64_t K) {
    TdGemmProblem p{};
    p.M = M; p.N = N; p.K = K;
    p.dtype = TD_FP32;
    p.layout = TD_RCR;
    p.alpha = 1.0f;
    return p;
}

int pick(const TdGemmProblem* p, const char* name, const GemmKernel** out) {
    if (int s = check_problem(p)) return s;
    const int threads = host_threads();
    auto cost = [&](const KernelInfo& k) {
        return predicted_cost(k, GemmShape{1, p->M, p->N, p->K}, k.variant == 1,
                              p->splits > 0 ? p->splits : threads, threads);
    };
    return choose(gemm_table, gemm_table_size, *p, name, cost, out);
}

int run(const TdGemmProblem* p, const char* name, const void* a, const void* b, void* c, void* ws,
        size_t ws_bytes, void* stream, float* time_ms) {
    const GemmKernel* k = nullptr;
    if (int s = pick(p, name, &k)) return s;
    if (!a || !b || !c) return fail(TD_ERROR, "A, B and C must not be NULL");
    const auto start = std::chrono::steady_clock::now();
    const int status = k->run(*p, a, b, c, ws, ws_bytes, stream);
    const auto stop = std::chrono::steady_clock::now();
    if (status == TD_REJECTED)
        return fail(status, std::string("kernel ") + k->info.name + " rejected the arguments (workspace too small?)");
    if (status != TD_OK) return fail(status, std::string("kernel ") + k->info.name + " failed");
    if (time_ms) *time_ms = std::chrono::duration<float, std::milli>(stop - start).count();
    return TD_OK;
}

}  // namespace
}  // namespace td

using namespace td;

extern "C" {

TD_API int dispatcher_init(void) { return TD_OK; }

TD_API int dispatcher_is_supported(int64_t M, int64_t N, int64_t K) {
    return guarded([&]() -> int {
        const TdGemmProblem p = legacy_problem(M, N, K);
        const GemmKernel* k = nullptr;
        const int s = pick(&p, nullptr, &k);
        return s == TD_OK ? 1 : s == (int)TD_UNSUPPORTED ? 0 : s;
    });
}

TD_API int dispatcher_select_kernel(int64_t M, int64_t N, int64_t K, char* name, int size) {
    return guarded([&]() -> int {
        const TdGemmProblem p = legacy_problem(M, N, K);
        const GemmKernel* k = nullptr;
        if (int s = pick(&p, nullptr, &k)) return s;
        return copy_name(k->info.name, name, size < 0 ? 0 : (size_t)size);
    });
}

TD_API int dispatcher_run_gemm(const void* A, const void* B, void* C, int64_t M, int64_t N, int64_t K,
                               float* time_ms) {
    return guarded([&]() -> int {
        const TdGemmProblem p = legacy_problem(M, N, K);
        return run(&p, nullptr, A, B, C, nullptr, 0, nullptr, time_ms);
    });
}

TD_API int dispatcher_get_kernel_count(void) { return (int)gemm_table_size; }
TD_API const char* dispatcher_export_registry_json(void) { return table_registry_json; }
TD_API void dispatcher_cleanup(void) {}

TD_API int td_gemm_is_supported(const TdGemmProblem* p, const char* kernel) {
    return guarded([&]() -> int {
        const GemmKernel* k = nullptr;
        const int s = pick(p, kernel, &k);
        return s == TD_OK ? 1 : (s == (int)TD_UNSUPPORTED || s == (int)TD_REJECTED) ? 0 : s;
    });
}

TD_API int td_gemm_select(const TdGemmProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        const GemmKernel* k = nullptr;
        if (int s = pick(p, nullptr, &k)) return s;
        return copy_name(k->info.name, name, size);
    });
}

TD_API int td_gemm_workspace_size(const TdGemmProblem* p, const char* kernel, size_t* bytes) {
    return guarded([&]() -> int {
        if (!bytes) return fail(TD_ERROR, "bytes must not be NULL");
        const GemmKernel* k = nullptr;
        if (int s = pick(p, kernel, &k)) return s;
        *bytes = k->workspace_size(*p);
        return TD_OK;
    });
}

TD_API int td_gemm_run(const TdGemmProblem* p, const char* kernel, const void* A, const void* B, void* C,
                       void* workspace, size_t workspace_bytes, void* stream, float* time_ms) {
    return guarded([&]() -> int { return run(p, kernel, A, B, C, workspace, workspace_bytes, stream, time_ms); });
}

}  // extern "C"
