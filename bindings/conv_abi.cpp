// The conv library's C ABI: the reference system's conv_dispatcher_* functions and td_conv_*.
#include <chrono>
#include <string>

#include "tiledispatch/conv_geometry.hpp"
#include "dispatcher.hpp"

namespace td {
namespace {

int check_problem(const TdConvProblem* p, ConvGeometry* g) {
    if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
    if (p->dtype < TD_FP32 || p->dtype > TD_FP8_E5M2)
        return fail(TD_ERROR, "unknown dtype code " + std::to_string(p->dtype));
    if (p->base.direction < TD_CONV_FWD || p->base.direction > TD_CONV_BWD_WEIGHT)
        return fail(TD_ERROR, "unknown direction code " + std::to_string(p->base.direction));
    if (p->base.split_k < 0) return fail(TD_ERROR, "split_k must not be negative");
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

GemmShape gemm_shape(const ConvGeometry& g, int direction) {
    const int64_t taps = g.taps();
    if (direction == TD_CONV_FWD) return {g.G, g.N * g.out_pixels(), g.K, taps * g.C};
    if (direction == TD_CONV_BWD_DATA) return {g.G, g.N * g.in_pixels(), g.C, taps * g.K};
    return {g.G, g.K, taps * g.C, g.N * g.out_pixels()};
}

int pick(const TdConvProblem* p, const char* name, const ConvKernel** out) {
    ConvGeometry g{};
    if (int s = check_problem(p, &g)) return s;
    const int threads = host_threads();
    const GemmShape shape = gemm_shape(g, p->base.direction);
    auto cost = [&](const KernelInfo& k) {
        return predicted_cost(k, shape, k.reduction >= 0,
                              p->base.split_k > 0 ? p->base.split_k : threads, threads);
    };
    return choose(conv_table, conv_table_size, *p, name, cost, out);
}

int run(const TdConvProblem* p, const char* name, const void* in, const void* wei, void* out, void* ws,
        size_t ws_bytes, void* stream, float* time_ms) {
    const ConvKernel* k = nullptr;
    if (int s = pick(p, name, &k)) return s;
    if (!in || !wei || !out) return fail(TD_ERROR, "input, weight and output must not be NULL");
    const auto start = std::chrono::steady_clock::now();
    const int status = k->run(*p, in, wei, out, ws, ws_bytes, stream);
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
        return run(&e, nullptr, input, weight, output, nullptr, 0, nullptr, time_ms);
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

}  // extern "C"
