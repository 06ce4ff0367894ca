// The conv library's C ABI: the reference system's conv_dispatcher_* functions and td_conv_*.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tiledispatch/conv_geometry.hpp"
#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"

namespace td {
namespace {

int check_problem(const TdConvProblem* p, ConvGeometry* g) {
    if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
    if (p->dtype < 0 || p->dtype >= TD_DTYPE_COUNT)
        return fail(TD_ERROR, "unknown dtype code " + std::to_string(p->dtype));
    if (p->base.direction < 0 || p->base.direction >= TD_CONV_DIRECTION_COUNT)
        return fail(TD_ERROR, "unknown direction code " + std::to_string(p->base.direction));
    if (p->base.split_k < 0) return fail(TD_ERROR, "split_k must not be negative");
    if (p->base.split_k > kMaxSplits)
        return fail(TD_ERROR, "split_k " + std::to_string(p->base.split_k) + " is above the maximum " +
                                  std::to_string(kMaxSplits));
    const std::string why = conv_geometry(*p, g);
    if (!why.empty()) return fail(TD_ERROR, "bad convolution problem: " + why);
    return TD_OK;
}

// The reference system's struct carries no rank: 3D when a depth is set, else 2D.
TdConvProblem legacy_problem(const ConvProblemC* p) {
    TdConvProblem e{};
    if (p) e.base = *p;
    e.ndim = (p && (p->input_d > 1 || p->filter_z > 1)) ? 3 : 2;
    e.dtype = TD_FP32;
    return e;
}

// The kernel's family's prediction (arbitrary units; lower is faster; bindings/cost/).
double cost_of(const TdConvProblem& p, const ConvGeometry& g, const ConvKernel& k, int workers) {
    return k.cost(k.info, p, g, CostContext{workers});
}

// The cost model's prediction for every kernel of a problem (a well-formed one: check_problem
// passed, or a tuning table's entry that tuning::to_problem checked).
auto costs(int workers) {
    return [workers](const TdConvProblem& q, const ConvKernel& k) {
        ConvGeometry g{};
        conv_geometry(q, &g);
        return cost_of(q, g, k, workers);
    };
}

int ranked(const TdConvProblem* p, const char* name, Tables tables, std::vector<const ConvKernel*>* out) {
    ConvGeometry g{};
    if (int s = check_problem(p, &g)) return s;
    return rank(conv_table, conv_table_size, *p, name, costs(device::multiprocessors()), tables, out);
}

// The ranked list for a problem (tuning tables first), through the rank cache; valid until
// this thread's next call. nullptr with *status set where there is none.
const std::vector<const ConvKernel*>* ranked_list(const TdConvProblem* p, const char* name, int* status) {
    static RankCache<ConvKernel> cache;
    if (!p) return *status = fail(TD_ERROR, "the problem pointer is NULL"), nullptr;
    return cache.get(*p, name, [&](std::vector<const ConvKernel*>* out) { return ranked(p, name, Tables::read, out); },
                     status);
}

int pick(const TdConvProblem* p, const char* name, const ConvKernel** out) {
    int status = TD_OK;
    const std::vector<const ConvKernel*>* list = ranked_list(p, name, &status);
    *out = list ? list->front() : nullptr;
    return status;
}

int run(const TdConvProblem* p, const char* name, const void* in, const void* wei, void* out, void* ws,
        size_t ws_bytes, void* stream, float* time_ms) {
    int status = TD_OK;
    const std::vector<const ConvKernel*>* list = ranked_list(p, name, &status);
    if (!list) return status;
    if (!in || !wei || !out) return fail(TD_ERROR, "input, weight and output must not be NULL");
    return run_first_accepting(*list, stream, time_ms,
                               [&](const ConvKernel* k) { return k->run(*p, in, wei, out, ws, ws_bytes, stream); });
}

struct DeviceBuffer {
    void* ptr = nullptr;
    ~DeviceBuffer() { device::release(ptr); }
};

// Host pointers: copy the tensors in, run, copy the written one back.
int run_host(const TdConvProblem* p, const char* name, const void* in, const void* wei, void* out,
             float* time_ms) {
    ConvGeometry g{};
    if (int s = check_problem(p, &g)) return s;
    if (!in || !wei || !out) return fail(TD_ERROR, "input, weight and output must not be NULL");
    if (device::host_is_device()) return run(p, name, in, wei, out, nullptr, 0, nullptr, time_ms);
    const int64_t elem = p->dtype == TD_FP32 ? 4 : (p->dtype == TD_FP16 || p->dtype == TD_BF16) ? 2 : 1;
    const int64_t out_elem = p->dtype == TD_FP32 ? 4 : 2;
    const int dir = p->base.direction;
    const size_t sizes[3] = {
        (size_t)(g.N * g.in_pixels() * g.G * g.C * (dir == TD_CONV_BWD_DATA ? out_elem : elem)),
        (size_t)(g.G * g.K * g.taps() * g.C * (dir == TD_CONV_BWD_WEIGHT ? out_elem : elem)),
        (size_t)(g.N * g.out_pixels() * g.G * g.K * (dir == TD_CONV_FWD ? out_elem : elem))};
    const void* host[3] = {in, wei, out};
    const int written = dir == TD_CONV_FWD ? 2 : dir == TD_CONV_BWD_DATA ? 0 : 1;
    DeviceBuffer dev[3];
    for (int i = 0; i < 3; ++i) {
        if (int s = device::allocate(&dev[i].ptr, sizes[i])) return s;
        if (i != written)
            if (int s = device::copy_to_device(dev[i].ptr, host[i], sizes[i], nullptr)) return s;
    }
    if (int s = run(p, name, dev[0].ptr, dev[1].ptr, dev[2].ptr, nullptr, 0, nullptr, time_ms)) return s;
    return device::copy_to_host(const_cast<void*>(host[written]), dev[written].ptr, sizes[written], nullptr);
}

}  // namespace
}  // namespace td

using namespace td;

extern "C" {

TD_API int conv_dispatcher_init(void) { return TD_OK; }

TD_API int conv_dispatcher_is_supported(const ConvProblemC* p) {
    return guarded([&]() -> int {
        if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
        const TdConvProblem e = legacy_problem(p);
        const ConvKernel* k = nullptr;
        const int s = pick(&e, nullptr, &k);
        return s == TD_OK ? 1 : s == (int)TD_UNSUPPORTED ? 0 : s;
    });
}

TD_API int conv_dispatcher_select_kernel(const ConvProblemC* p, char* name, int size) {
    return guarded([&]() -> int {
        if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
        const TdConvProblem e = legacy_problem(p);
        const ConvKernel* k = nullptr;
        if (int s = pick(&e, nullptr, &k)) return s;
        return copy_name(k->info.name, name, size < 0 ? 0 : (size_t)size);
    });
}

TD_API int conv_dispatcher_run(const void* input, const void* weight, void* output, const ConvProblemC* p,
                               float* time_ms) {
    return guarded([&]() -> int {
        if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
        const TdConvProblem e = legacy_problem(p);
        return run_host(&e, nullptr, input, weight, output, time_ms);
    });
}

TD_API int conv_dispatcher_get_kernel_count(void) { return (int)conv_table_size; }
TD_API const char* conv_dispatcher_export_registry_json(void) { return table_registry_json; }
TD_API void conv_dispatcher_cleanup(void) {}

TD_API int td_conv_is_supported(const TdConvProblem* p, const char* kernel) {
    return guarded([&]() -> int {
        const ConvKernel* k = nullptr;
        const int s = pick(p, kernel, &k);
        return s == TD_OK ? 1 : (s == (int)TD_UNSUPPORTED || s == (int)TD_REJECTED) ? 0 : s;
    });
}

TD_API int td_conv_select(const TdConvProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        const ConvKernel* k = nullptr;
        if (int s = pick(p, nullptr, &k)) return s;
        return copy_name(k->info.name, name, size);
    });
}

TD_API int td_conv_tuned(const TdConvProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        ConvGeometry g{};
        if (int s = check_problem(p, &g)) return s;
        const ConvKernel* k = tuned_pick(conv_table, conv_table_size, *p, costs(device::multiprocessors()));
        return copy_name(k ? k->info.name : "", name, size);
    });
}

TD_API int td_conv_model_select(const TdConvProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        std::vector<const ConvKernel*> list;
        if (int s = ranked(p, nullptr, Tables::ignore, &list)) return s;
        return copy_name(list.front()->info.name, name, size);
    });
}

TD_API int td_conv_cost(const TdConvProblem* p, const char* kernel, double* cost) {
    return guarded([&]() -> int {
        if (!cost) return fail(TD_ERROR, "cost must not be NULL");
        if (!kernel || !*kernel) return fail(TD_ERROR, "td_conv_cost needs a kernel name");
        const ConvKernel* k = nullptr;
        if (int s = pick(p, kernel, &k)) return s;
        ConvGeometry g{};
        if (int s = check_problem(p, &g)) return s;
        *cost = cost_of(*p, g, *k, device::multiprocessors());
        return TD_OK;
    });
}

TD_API int td_conv_workspace_size(const TdConvProblem* p, const char* kernel, size_t* bytes) {
    return guarded([&]() -> int {
        if (!bytes) return fail(TD_ERROR, "bytes must not be NULL");
        const ConvKernel* k = nullptr;
        if (int s = pick(p, kernel, &k)) return s;
        *bytes = k->workspace_size(*p);
        return TD_OK;
    });
}

TD_API int td_conv_run(const TdConvProblem* p, const char* kernel, const void* input, const void* weight,
                       void* output, void* workspace, size_t workspace_bytes, void* stream,
                       float* time_ms) {
    return guarded([&]() -> int { return run(p, kernel, input, weight, output, workspace, workspace_bytes, stream, time_ms); });
}

TD_API int td_conv_run_host(const TdConvProblem* p, const char* kernel, const void* input, const void* weight,
                            void* output, float* time_ms) {
    return guarded([&]() -> int { return run_host(p, kernel, input, weight, output, time_ms); });
}

}  // extern "C"
