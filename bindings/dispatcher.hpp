// The dispatcher core shared by every library: errors at the ABI boundary and selection
// (supports -> the family's cost model (bindings/cost/) -> name; never first-fit).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "cost/models.hpp"
#include "tiledispatch/device.hpp"
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

int host_threads();

// The workspace of one run: the caller's (TD_REJECTED when smaller than `need`) or, when
// the caller gave none, the backend's reusable scratch buffer for the stream.
inline int take_workspace(size_t need, void* ws, size_t ws_bytes, void* stream, void** out) {
    *out = ws;
    if (ws && ws_bytes < need)
        return fail(TD_REJECTED, "workspace of " + std::to_string(ws_bytes) + " bytes, the kernel needs " +
                                     std::to_string(need));
    if (!ws && need) return device::scratch(need, stream, out);
    return TD_OK;
}

// Copies name into buf or fails with TD_ERROR when it does not fit.
int copy_name(const char* name, char* buf, size_t size);

// The kernels for a problem, best first. name non-empty: just that kernel (TD_UNSUPPORTED
// when the library has none of that name, TD_REJECTED when it refuses the problem).
// Otherwise every kernel not marked named_only whose supports() accepts the problem, ranked by predicted cost,
// then by name; TD_UNSUPPORTED when there is none.
template <class Kernel, class Problem, class CostFn>
int rank(const Kernel* const* table, size_t count, const Problem& p, const char* name, CostFn cost,
         std::vector<const Kernel*>* out) {
    out->clear();
    if (name && *name) {
        for (size_t i = 0; i < count; ++i) {
            if (std::strcmp(table[i]->info.name, name) != 0) continue;
            std::string why;
            if (table[i]->supports(p, &why) != TD_OK)
                return fail(TD_REJECTED, std::string("kernel ") + name + " rejects this problem: " + why);
            out->push_back(table[i]);
            return TD_OK;
        }
        return fail(TD_UNSUPPORTED, std::string("no kernel named ") + name + " in the " +
                                        table_op + " library for target " + table_target);
    }
    std::vector<std::pair<double, const Kernel*>> scored;
    std::string reasons;
    for (size_t i = 0; i < count; ++i) {
        if (table[i]->info.named_only) continue;
        std::string why;
        if (table[i]->supports(p, &why) != TD_OK) {
            if (why != "dtype differs" && why != "layout differs" && reasons.size() < 400)
                reasons += std::string("; ") + table[i]->info.name + ": " + why;
            continue;
        }
        scored.emplace_back(cost(*table[i]), table[i]);
    }
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : std::strcmp(a.second->info.name, b.second->info.name) < 0;
    });
    for (const auto& entry : scored) out->push_back(entry.second);
    if (out->empty())
        return fail(TD_UNSUPPORTED, std::string("no ") + table_op + " kernel for target " + table_target +
                                        " supports this problem (" + std::to_string(count) +
                                        " kernels registered)" + reasons);
    return TD_OK;
}

// Runs the first kernel of a ranked list that accepts the arguments: a kernel that
// rejects them at run time (TD_REJECTED: a misaligned pointer, say) hands the problem to
// the next. run_one(kernel) launches one; the timer covers the accepted launch.
template <class Kernel, class RunOne>
int run_first_accepting(const std::vector<const Kernel*>& list, void* stream, float* time_ms, RunOne run_one) {
    std::string rejections;
    for (const Kernel* k : list) {
        device::Timer timer;
        if (time_ms)
            if (int s = timer.start(stream)) return s;
        const int status = run_one(k);
        if (status == TD_REJECTED) {
            rejections += std::string(rejections.empty() ? "" : "; ") + k->info.name + ": " + td_last_error();
            continue;
        }
        if (status != TD_OK) return status;  // the kernel set the message
        if (time_ms)
            if (int s = timer.stop(stream, time_ms)) return s;
        return TD_OK;
    }
    return fail(TD_REJECTED, "every kernel rejected the arguments: " + rejections);
}

}  // namespace td
