// The GEMM library's C ABI: the reference system's dispatcher_* functions and td_gemm_*.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dispatcher.hpp"
#include "tiledispatch/checked.hpp"
#include "tiledispatch/device.hpp"

namespace td {
namespace {

bool a_row(const TdGemmProblem& p) { return p.layout == TD_RCR || p.layout == TD_RRR; }
bool b_row(const TdGemmProblem& p) { return p.layout == TD_RRR || p.layout == TD_CRR; }

int check_problem(const TdGemmProblem* p) {
    if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
    if (p->M <= 0 || p->N <= 0 || p->K <= 0)
        return fail(TD_ERROR, "M, N and K must be positive (got M=" + std::to_string(p->M) +
                                  " N=" + std::to_string(p->N) + " K=" + std::to_string(p->K) + ")");
    if (p->dtype < 0 || p->dtype >= TD_DTYPE_COUNT)
        return fail(TD_ERROR, "unknown dtype code " + std::to_string(p->dtype));
    if (p->layout < 0 || p->layout >= TD_LAYOUT_COUNT)
        return fail(TD_ERROR, "unknown layout code " + std::to_string(p->layout));
    if (p->splits < 0) return fail(TD_ERROR, "splits must not be negative");
    if (p->raster < 0 || p->raster > 2) return fail(TD_ERROR, "raster must be 0, 1 or 2");
    if (p->swizzle != 0 && p->swizzle != 1 && p->swizzle != 2 && p->swizzle != 4 && p->swizzle != 8)
        return fail(TD_ERROR, "swizzle must be 0, 1, 2, 4 or 8");
    const int64_t min_lda = a_row(*p) ? p->K : p->M, min_ldb = b_row(*p) ? p->N : p->K, min_ldc = p->N;
    if (p->lda < 0 || (p->lda && p->lda < min_lda))
        return fail(TD_ERROR, "lda " + std::to_string(p->lda) + " is below " + std::to_string(min_lda));
    if (p->ldb < 0 || (p->ldb && p->ldb < min_ldb))
        return fail(TD_ERROR, "ldb " + std::to_string(p->ldb) + " is below " + std::to_string(min_ldb));
    if (p->ldc < 0 || (p->ldc && p->ldc < min_ldc))
        return fail(TD_ERROR, "ldc " + std::to_string(p->ldc) + " is below " + std::to_string(min_ldc));
    if (p->splits > kMaxSplits)
        return fail(TD_ERROR, "splits " + std::to_string(p->splits) + " is above the maximum " +
                                  std::to_string(kMaxSplits));
    if (p->batch < 0) return fail(TD_ERROR, "batch must not be negative (got " + std::to_string(p->batch) + ")");
    if (p->stride_a < 0 || p->stride_b < 0 || p->stride_c < 0)
        return fail(TD_ERROR, "batch strides must not be negative");
    if (!std::isfinite(p->beta)) return fail(TD_ERROR, "beta must be finite");
    if (p->bias < 0 || p->bias >= TD_BIAS_COUNT) return fail(TD_ERROR, "unknown bias code " + std::to_string(p->bias));
    if (p->activation < 0 || p->activation >= TD_ACTIVATION_COUNT)
        return fail(TD_ERROR, "unknown activation code " + std::to_string(p->activation));
    if (p->out_dtype < 0 || p->out_dtype >= TD_OUT_DTYPE_COUNT)
        return fail(TD_ERROR, "unknown out_dtype code " + std::to_string(p->out_dtype));
    if ((p->out_dtype == TD_OUT_FP8_E4M3 || p->out_dtype == TD_OUT_FP8_E5M2) && p->dtype != TD_FP8_E4M3 &&
        p->dtype != TD_FP8_E5M2)
        return fail(TD_ERROR, "an fp8 output (out_dtype fp8_e4m3 or fp8_e5m2) takes fp8 inputs");
    for (const auto& flag : {std::pair<const char*, int32_t>{"aux", p->aux}, {"row_scale", p->row_scale},
                             {"col_scale", p->col_scale}, {"block_scale", p->block_scale}})
        if (flag.second != 0 && flag.second != 1) return fail(TD_ERROR, std::string(flag.first) + " must be 0 or 1");
    // Every operand's extent (leading dimensions included) in bytes must fit in int64.
    const int64_t lda = p->lda ? p->lda : min_lda, ldb = p->ldb ? p->ldb : min_ldb, ldc = p->ldc ? p->ldc : min_ldc;
    const int64_t a_rows = a_row(*p) ? p->M : p->K, b_rows = b_row(*p) ? p->K : p->N;
    const int64_t a_cols = a_row(*p) ? p->K : p->M, b_cols = b_row(*p) ? p->N : p->K;
    const int64_t elem = 8;  // no element type is wider
    int64_t t;
    struct { const char* what; int64_t rows, ld, cols; } ops[] = {
        {"A", a_rows, lda, a_cols}, {"B", b_rows, ldb, b_cols}, {"C", p->M, ldc, p->N}};
    const int64_t batch_strides[] = {p->stride_a, p->stride_b, p->stride_c};
    const int64_t extra = p->batch > 1 ? p->batch - 1 : 0;  // matrices after the first
    for (int i = 0; i < 3; ++i) {
        const auto& o = ops[i];
        int64_t step = 0;
        if (!checked_mul(o.rows - 1, o.ld, &t) || !checked_add(t, o.cols, &t) ||
            !checked_mul(extra, batch_strides[i], &step) || !checked_add(t, step, &t) || !checked_mul(t, elem, &t))
            return fail(TD_ERROR, std::string("the problem is too large: ") + o.what + " spans " +
                                      std::to_string(o.rows) + " x " + std::to_string(o.ld) +
                                      " elements (batch " + std::to_string(p->batch) +
                                      "), more bytes than a pointer can address (M=" +
                                      std::to_string(p->M) + " N=" + std::to_string(p->N) + " K=" +
                                      std::to_string(p->K) + ")");
    }
    if (extra && p->stride_c < (p->M - 1) * ldc + p->N)
        return fail(TD_ERROR, "stride_c " + std::to_string(p->stride_c) + " is below one output matrix's span " +
                                  std::to_string((p->M - 1) * ldc + p->N) + ": the batch's outputs would overlap");
    if (!checked_mul(p->M, p->N, &t) || !checked_mul(t, p->K, &t))
        return fail(TD_ERROR, "the problem is too large: M*N*K overflows int64 (M=" + std::to_string(p->M) +
                                  " N=" + std::to_string(p->N) + " K=" + std::to_string(p->K) + ")");
    return TD_OK;
}

// The reference system's functions carry no dtype: they use fp32 when the library has an
// fp32 rcr kernel, else bf16, else fp16 (GPU libraries build no fp32 kernels).
int legacy_dtype() {
    for (int dtype : {TD_FP32, TD_BF16, TD_FP16})
        for (size_t i = 0; i < gemm_table_size; ++i)
            if (gemm_table[i]->info.dtype == dtype && gemm_table[i]->info.layout == TD_RCR) return dtype;
    return TD_FP32;
}

TdGemmProblem legacy_problem(int64_t M, int64_t N, int64_t K) {
    TdGemmProblem p{};
    p.M = M; p.N = N; p.K = K;
    p.dtype = legacy_dtype();
    p.layout = TD_RCR;
    p.alpha = 1.0f;
    return p;
}

// The kernel's family's prediction (arbitrary units; lower is faster; bindings/cost/).
double cost_of(const TdGemmProblem& p, const GemmKernel& k, int workers) {
    return k.cost(k.info, p, CostContext{workers});
}

// The cost model's prediction for every kernel of a problem (check_problem passed).
auto costs(int workers) {
    return [workers](const TdGemmProblem& q, const GemmKernel& k) { return cost_of(q, k, workers); };
}

int ranked(const TdGemmProblem* p, const char* name, Tables tables, std::vector<const GemmKernel*>* out) {
    if (int s = check_problem(p)) return s;
    return rank(gemm_table, gemm_table_size, *p, name, costs(device::multiprocessors()), tables, out);
}

// The ranked list for a problem (tuning tables first), through the rank cache; valid until
// this thread's next call. nullptr with *status set where there is none.
const std::vector<const GemmKernel*>* ranked_list(const TdGemmProblem* p, const char* name, int* status) {
    static RankCache<GemmKernel> cache;
    if (!p) return *status = fail(TD_ERROR, "the problem pointer is NULL"), nullptr;
    TdGemmProblem key = *p;
    key.alpha = 0.0f;  // no selection reads it: per-call scales (fp8) share one entry
    key.beta = key.beta != 0.0f ? 1.0f : 0.0f;  // selection reads only whether C is added
    return cache.get(key, name, [&](std::vector<const GemmKernel*>* out) { return ranked(p, name, Tables::read, out); },
                     status);
}

int pick(const TdGemmProblem* p, const char* name, const GemmKernel** out) {
    int status = TD_OK;
    const std::vector<const GemmKernel*>* list = ranked_list(p, name, &status);
    *out = list ? list->front() : nullptr;
    return status;
}

// The epilogue operands a problem asks for are there (the problem passed check_problem).
int check_epilogue(const TdGemmProblem& p, const TdGemmEpilogue& e) {
    if (p.beta != 0.0f && !e.c) return fail(TD_ERROR, "beta is nonzero but C is NULL");
    if (p.bias != TD_BIAS_NONE && !e.bias) return fail(TD_ERROR, "the problem has a bias but the bias pointer is NULL");
    if (p.aux && !e.aux) return fail(TD_ERROR, "the problem asks for aux but the aux pointer is NULL");
    if (p.row_scale && !e.row_scale) return fail(TD_ERROR, "the problem has row scales but row_scale is NULL");
    if (p.col_scale && !e.col_scale) return fail(TD_ERROR, "the problem has column scales but col_scale is NULL");
    if (p.block_scale && (!e.scale_a || !e.scale_b))
        return fail(TD_ERROR, "the problem has block-wise scales but scale_a or scale_b is NULL");
    return TD_OK;
}

// Runs on device pointers; ep NULL: no epilogue operands (td_gemm_run).
int run(const TdGemmProblem* p, const char* name, const void* a, const void* b, void* c, const TdGemmEpilogue* ep,
        void* ws, size_t ws_bytes, void* stream, float* time_ms) {
    int status = TD_OK;
    const std::vector<const GemmKernel*>* list = ranked_list(p, name, &status);
    if (!list) return status;
    if (!a || !b || !c) return fail(TD_ERROR, "A, B and C must not be NULL");
    const TdGemmEpilogue none{};
    const TdGemmEpilogue& e = ep ? *ep : none;
    if (int s = check_epilogue(*p, e)) return s;
    return run_first_accepting(*list, stream, time_ms, [&](const GemmKernel* k) {
        return k->run_ex ? k->run_ex(*p, a, b, c, e, ws, ws_bytes, stream) : k->run(*p, a, b, c, ws, ws_bytes, stream);
    });
}

int run(const TdGemmProblem* p, const char* name, const void* a, const void* b, void* c, void* ws,
        size_t ws_bytes, void* stream, float* time_ms) {
    return run(p, name, a, b, c, nullptr, ws, ws_bytes, stream, time_ms);
}

// Group g as a problem of its own: its sizes and leading dimensions, p's other fields.
TdGemmProblem group_problem(const TdGemmProblem& p, const TdGemmGroup& g) {
    TdGemmProblem q = p;
    q.M = g.M, q.N = g.N, q.K = g.K, q.lda = g.lda, q.ldb = g.ldb, q.ldc = g.ldc;
    q.batch = 0, q.stride_a = q.stride_b = q.stride_c = 0;
    return q;
}

// The call's arguments, and every group of M > 0 as a problem of its own (check_problem).
int check_groups(const TdGemmProblem* p, const TdGemmGroup* groups, int64_t count) {
    if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
    if (count < 0) return fail(TD_ERROR, "the group count must not be negative");
    if (count > 0 && !groups) return fail(TD_ERROR, "groups is NULL");
    if (p->batch > 1) return fail(TD_ERROR, "a grouped call takes no batch (batch " + std::to_string(p->batch) + ")");
    for (int64_t i = 0; i < count; ++i) {
        const TdGemmGroup& g = groups[i];
        if (g.M < 0) return fail(TD_ERROR, "group " + std::to_string(i) + ": M must not be negative");
        if (g.M == 0) continue;
        const std::string at = "group " + std::to_string(i) + ": ";
        const TdGemmProblem q = group_problem(*p, g);
        if (check_problem(&q) != TD_OK) {
            const std::string why = td_last_error();
            return fail(TD_ERROR, at + why);
        }
        if (!g.a || !g.b || !g.d) return fail(TD_ERROR, at + "A, B and D must not be NULL");
    }
    return TD_OK;
}

// The grouped kernels (KernelInfo.variant TD_GEMM_GROUPED, one launch for the whole call) that
// take a call, best first. name given: that kernel alone where it is a grouped kernel
// (TD_REJECTED when it refuses the call), none where it is another (the call runs as the
// per-group loop with it). No name: every grouped kernel not named_only (nor vendor, where
// TdOptions.vendor is 0) that takes every group, ranked by its family's cost entry summed over
// the groups of M > 0 (bindings/cost/), then by name. Empty: no grouped kernel takes the call,
// or every group is empty.
int grouped_candidates(const TdGemmProblem& p, const char* name, const TdGemmGroup* groups, int64_t count,
                       std::vector<const GemmKernel*>* out) {
    out->clear();
    const TdGemmGroup* first = nullptr;
    for (int64_t i = 0; i < count && !first; ++i)
        if (groups[i].M > 0) first = &groups[i];
    if (!first) return TD_OK;
    const TdGemmProblem q = group_problem(p, *first);  // check_groups passed
    const bool named = name && *name;
    const bool vendor = options().vendor != 0;
    const CostContext ctx{device::multiprocessors()};
    std::vector<std::pair<double, const GemmKernel*>> scored;
    for (size_t i = 0; i < gemm_table_size; ++i) {
        const GemmKernel& k = *gemm_table[i];
        if (!k.run_grouped) continue;
        if (named ? std::strcmp(k.info.name, name) != 0 : (k.info.named_only || (k.info.vendor && !vendor))) continue;
        std::string why;
        if (kernel_supports_group(k, q, groups, count, &why) != TD_OK) {
            if (named) return fail(TD_REJECTED, std::string("kernel ") + name + " rejects this grouped call: " + why);
            continue;
        }
        double cost = 0.0;
        for (int64_t g = 0; g < count; ++g)
            if (groups[g].M > 0) cost += k.cost(k.info, group_problem(p, groups[g]), ctx);
        scored.emplace_back(cost, &k);
    }
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : std::strcmp(a.second->info.name, b.second->info.name) < 0;
    });
    for (const auto& entry : scored) out->push_back(entry.second);
    return TD_OK;
}

// The per-group loop: one run (its own selection) per group of M > 0. The cpu path, and the
// fallback where no grouped kernel takes the call.
int run_each_group(const TdGemmProblem* p, const char* name, const TdGemmGroup* groups, int64_t count, void* stream,
                   float* time_ms) {
    float total = 0.0f;
    for (int64_t i = 0; i < count; ++i) {
        const TdGemmGroup& g = groups[i];
        if (g.M == 0) continue;
        const TdGemmProblem q = group_problem(*p, g);
        float t = 0.0f;
        if (int s = run(&q, name, g.a, g.b, g.d, &g.epilogue, nullptr, 0, stream, time_ms ? &t : nullptr)) {
            const std::string why = td_last_error();
            return fail(s, "group " + std::to_string(i) + ": " + why);
        }
        total += t;
    }
    if (time_ms) *time_ms = total;
    return TD_OK;
}

// One call for a list of GEMMs that share the problem's type, layout and epilogue fields: one
// launch of the best grouped kernel that takes it (grouped_candidates), else the per-group loop.
int run_grouped(const TdGemmProblem* p, const char* name, const TdGemmGroup* groups, int64_t count, void* ws,
                size_t ws_bytes, void* stream, float* time_ms) {
    if (int s = check_groups(p, groups, count)) return s;
    std::vector<const GemmKernel*> list;
    if (int s = grouped_candidates(*p, name, groups, count, &list)) return s;
    if (!list.empty()) {
        const int s = run_first_accepting(list, stream, time_ms, [&](const GemmKernel* k) {
            return k->run_grouped(*p, groups, count, ws, ws_bytes, stream);
        });
        if (s != TD_REJECTED || (name && *name)) return s;
        // every grouped kernel rejected the arguments at run time: the loop runs them
    }
    if (time_ms) *time_ms = 0.0f;
    return run_each_group(p, name, groups, count, stream, time_ms);
}

// Elements of A, B and C that the problem spans (leading dimensions included).
void extents(const TdGemmProblem& p, int64_t* a, int64_t* b, int64_t* c) {
    const int64_t lda = p.lda ? p.lda : (a_row(p) ? p.K : p.M);
    const int64_t ldb = p.ldb ? p.ldb : (b_row(p) ? p.N : p.K);
    const int64_t ldc = p.ldc ? p.ldc : p.N;
    *a = a_row(p) ? (p.M - 1) * lda + p.K : (p.K - 1) * lda + p.M;
    *b = b_row(p) ? (p.K - 1) * ldb + p.N : (p.N - 1) * ldb + p.K;
    *c = (p.M - 1) * ldc + p.N;
}

struct DeviceBuffer {
    void* ptr = nullptr;
    ~DeviceBuffer() { device::release(ptr); }
};

// Host pointers: copy in, run, copy out (the reference system's path).
int run_host(const TdGemmProblem* p, const char* name, const void* a, const void* b, void* c, float* time_ms) {
    if (int s = check_problem(p)) return s;
    if (!a || !b || !c) return fail(TD_ERROR, "A, B and C must not be NULL");
    if (device::host_is_device()) return run(p, name, a, b, c, nullptr, 0, nullptr, time_ms);
    if (gemm_features(*p))
        return fail(TD_UNSUPPORTED, "the host-pointer call copies one plain product: a batch, an epilogue or "
                                    "block-wise scales run through td_gemm_run_ex on device pointers");
    int64_t na, nb, nc;
    extents(*p, &na, &nb, &nc);
    const size_t ba = na * in_bytes(p->dtype), bb = nb * in_bytes(p->dtype), bc = nc * out_bytes(p->dtype);
    DeviceBuffer da, db, dc;
    if (int s = device::allocate(&da.ptr, ba)) return s;
    if (int s = device::allocate(&db.ptr, bb)) return s;
    if (int s = device::allocate(&dc.ptr, bc)) return s;
    if (int s = device::copy_to_device(da.ptr, a, ba, nullptr)) return s;
    if (int s = device::copy_to_device(db.ptr, b, bb, nullptr)) return s;
    if (int s = device::copy_to_device(dc.ptr, c, bc, nullptr)) return s;  // keeps C's padding
    if (int s = run(p, name, da.ptr, db.ptr, dc.ptr, nullptr, 0, nullptr, time_ms)) return s;
    return device::copy_to_host(c, dc.ptr, bc, nullptr);
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
        return run_host(&p, nullptr, A, B, C, time_ms);
    });
}

TD_API int dispatcher_get_kernel_count(void) { return (int)gemm_table_size; }
TD_API int td_legacy_dtype(void) { return legacy_dtype(); }
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

TD_API int td_gemm_tuned(const TdGemmProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        if (int s = check_problem(p)) return s;
        const GemmKernel* k = tuned_pick(gemm_table, gemm_table_size, *p, costs(device::multiprocessors()));
        return copy_name(k ? k->info.name : "", name, size);
    });
}

TD_API int td_gemm_model_select(const TdGemmProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        std::vector<const GemmKernel*> list;
        if (int s = ranked(p, nullptr, Tables::ignore, &list)) return s;
        return copy_name(list.front()->info.name, name, size);
    });
}

TD_API int td_gemm_cost(const TdGemmProblem* p, const char* kernel, double* cost) {
    return guarded([&]() -> int {
        if (!cost) return fail(TD_ERROR, "cost must not be NULL");
        if (!kernel || !*kernel) return fail(TD_ERROR, "td_gemm_cost needs a kernel name");
        const GemmKernel* k = nullptr;
        if (int s = pick(p, kernel, &k)) return s;
        *cost = cost_of(*p, *k, device::multiprocessors());
        return TD_OK;
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

TD_API int td_gemm_run_ex(const TdGemmProblem* p, const char* kernel, const void* A, const void* B, void* D,
                          const TdGemmEpilogue* epilogue, void* workspace, size_t workspace_bytes, void* stream,
                          float* time_ms) {
    return guarded([&]() -> int { return run(p, kernel, A, B, D, epilogue, workspace, workspace_bytes, stream, time_ms); });
}

TD_API int td_gemm_grouped_run(const TdGemmProblem* p, const char* kernel, const TdGemmGroup* groups, int64_t count,
                               void* stream, float* time_ms) {
    return guarded([&]() -> int { return run_grouped(p, kernel, groups, count, nullptr, 0, stream, time_ms); });
}

TD_API int td_gemm_grouped_run_ex(const TdGemmProblem* p, const char* kernel, const TdGemmGroup* groups,
                                  int64_t count, void* workspace, size_t workspace_bytes, void* stream,
                                  float* time_ms) {
    return guarded([&]() -> int {
        return run_grouped(p, kernel, groups, count, workspace, workspace_bytes, stream, time_ms);
    });
}

TD_API int td_gemm_grouped_select(const TdGemmProblem* p, const TdGemmGroup* groups, int64_t count, char* name,
                                  size_t size) {
    return guarded([&]() -> int {
        if (int s = check_groups(p, groups, count)) return s;
        std::vector<const GemmKernel*> list;
        if (int s = grouped_candidates(*p, nullptr, groups, count, &list)) return s;
        return copy_name(list.empty() ? "" : list.front()->info.name, name, size);
    });
}

TD_API int td_gemm_grouped_workspace_size(const TdGemmProblem* p, const char* kernel, const TdGemmGroup* groups,
                                          int64_t count, size_t* bytes) {
    return guarded([&]() -> int {
        if (!bytes) return fail(TD_ERROR, "bytes must not be NULL");
        if (int s = check_groups(p, groups, count)) return s;
        std::vector<const GemmKernel*> list;
        if (int s = grouped_candidates(*p, kernel, groups, count, &list)) return s;
        *bytes = list.empty() ? 0 : list.front()->grouped_workspace_size(*p, count);
        return TD_OK;
    });
}

TD_API int td_gemm_launch(const TdGemmProblem* p, const char* kernel, const void* A, const void* B, void* C,
                          void* stream) {
    return guarded([&]() -> int { return run(p, kernel, A, B, C, nullptr, 0, stream, nullptr); });
}

TD_API int td_gemm_run_host(const TdGemmProblem* p, const char* kernel, const void* A, const void* B, void* C,
                            float* time_ms) {
    return guarded([&]() -> int { return run_host(p, kernel, A, B, C, time_ms); });
}

}  // extern "C"
