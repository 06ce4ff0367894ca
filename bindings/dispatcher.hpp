// The dispatcher core shared by every library: errors at the ABI boundary, the cost
// model, and selection (supports -> cost -> name; never first-fit).
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "tiledispatch/kernel.hpp"

namespace td {

// This thread's message for the last failed call; returns `status` for convenience.
int fail(int status, const std::string& message);
void clear_error();

// Runs f() and turns any C++ exception into TD_ERROR with a message.
template <class F>
int guarded(F&& f) noexcept {
    try {
        clear_error();
        return f();
    } catch (const std::bad_alloc&) {
        return fail(TD_ERROR, "out of host memory");
    } catch (const std::exception& e) {
        return fail(TD_ERROR, std::string("internal error: ") + e.what());
    } catch (...) {
        return fail(TD_ERROR, "internal error: unknown C++ exception");
    }
}

// The (batched) GEMM a problem becomes, for the cost model.
struct GemmShape {
    int64_t batch, m, n, k;
};

// Predicted time in arbitrary units of running kernel `k` on `shape` with `threads`
// workers: tile waves (quantization included), K-loop length, padding waste, packing and
// micro-tile efficiency, stream-K balance plus its fix-up.
double predicted_cost(const KernelInfo& k, const GemmShape& shape, bool streamk, int64_t workers,
                      int threads);

int host_threads();

// Copies name into buf or fails with TD_ERROR when it does not fit.
int copy_name(const char* name, char* buf, size_t size);

// Picks the kernel for a problem. name non-empty: that kernel (TD_UNSUPPORTED when the
// library has none of that name, TD_REJECTED when it refuses the problem).
template <class Kernel, class Problem, class CostFn>
int choose(const Kernel* const* table, size_t count, const Problem& p, const char* name,
           CostFn cost, const Kernel** out) {
    *out = nullptr;
    if (name && *name) {
        for (size_t i = 0; i < count; ++i) {
            if (std::strcmp(table[i]->info.name, name) != 0) continue;
            std::string why;
            if (table[i]->supports(p, &why) != TD_OK)
                return fail(TD_REJECTED, std::string("kernel ") + name + " rejects this problem: " + why);
            *out = table[i];
            return TD_OK;
        }
        return fail(TD_UNSUPPORTED, std::string("no kernel named ") + name + " in the " +
                                        table_op + " library for target " + table_target);
    }
    double best_cost = 0;
    for (size_t i = 0; i < count; ++i) {
        std::string why;
        if (table[i]->supports(p, &why) != TD_OK) continue;
        const double c = cost(table[i]->info);
        if (!*out || c < best_cost ||
            (c == best_cost && std::strcmp(table[i]->info.name, (*out)->info.name) < 0)) {
            *out = table[i];
            best_cost = c;
        }
    }
    if (!*out)
        return fail(TD_UNSUPPORTED, std::string("no ") + table_op + " kernel for target " + table_target +
                                        " supports this problem (" + std::to_string(count) +
                                        " kernels registered)");
    return TD_OK;
}

}  // namespace td
