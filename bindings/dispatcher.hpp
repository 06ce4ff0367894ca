// The dispatcher core shared by every library: errors at the ABI boundary and selection
// (supports -> the tuning tables' pick (tuning.hpp) -> the family's cost model
// (bindings/cost/) -> name; never first-fit), implemented once for the C ABI and Python.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cost/models.hpp"
#include "tiledispatch/device.hpp"
#include "tiledispatch/kernel.hpp"
#include "tiledispatch/options.hpp"
#include "tuning.hpp"

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

// The tuning tables' kernel for a problem (tuning.hpp), or nullptr where they give none.
// cost(problem, kernel): the kernel's family's prediction.
template <class Kernel, class Problem, class CostFn>
const Kernel* tuned_pick(const Kernel* const* table, size_t count, const Problem& p, CostFn cost) {
    tuning::KernelTable<Kernel, Problem, CostFn> kernels(table, count, p, cost);
    const long i = tuning::pick(table_target, table_op, tuning::describe(p), kernels);
    return i < 0 ? nullptr : table[i];
}

// Whether a ranking reads the tuning tables or ranks by the cost model alone.
enum class Tables { read, ignore };

// The kernels for a problem, best first. name non-empty: just that kernel (TD_UNSUPPORTED
// when the library has none of that name, TD_REJECTED when it refuses the problem).
// Otherwise every kernel not marked named_only (nor vendor, where TdOptions.vendor is 0, nor a
// grouped GEMM kernel, which runs grouped calls only) whose supports() accepts the problem: the
// tuning tables' pick first (unless Tables::ignore), then the others by predicted cost
// (cost(problem, kernel)), then by name; TD_UNSUPPORTED when there is none.
template <class Kernel, class Problem, class CostFn>
int rank(const Kernel* const* table, size_t count, const Problem& p, const char* name, CostFn cost,
         Tables tables, std::vector<const Kernel*>* out) {
    out->clear();
    if (name && *name) {
        for (size_t i = 0; i < count; ++i) {
            if (std::strcmp(table[i]->info.name, name) != 0) continue;
            std::string why;
            if (kernel_supports(*table[i], p, &why) != TD_OK)
                return fail(TD_REJECTED, std::string("kernel ") + name + " rejects this problem: " + why);
            out->push_back(table[i]);
            return TD_OK;
        }
        return fail(TD_UNSUPPORTED, std::string("no kernel named ") + name + " in the " +
                                        table_op + " library for target " + table_target);
    }
    std::vector<std::pair<double, const Kernel*>> scored;
    std::string reasons;
    const bool vendor = options().vendor != 0;
    for (size_t i = 0; i < count; ++i) {
        if (table[i]->info.named_only || (table[i]->info.vendor && !vendor)) continue;
        if (table[i]->info.variant == TD_GEMM_GROUPED) continue;  // grouped calls only: not a reason worth listing
        std::string why;
        if (kernel_supports(*table[i], p, &why) != TD_OK) {
            if (why != "dtype differs" && why != "layout differs" && reasons.size() < 400)
                reasons += std::string("; ") + table[i]->info.name + ": " + why;
            continue;
        }
        scored.emplace_back(cost(p, *table[i]), table[i]);
    }
    if (scored.empty())
        return fail(TD_UNSUPPORTED, std::string("no ") + table_op + " kernel for target " + table_target +
                                        " supports this problem (" + std::to_string(count) +
                                        " kernels registered)" + reasons);
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : std::strcmp(a.second->info.name, b.second->info.name) < 0;
    });
    const Kernel* tuned = tables == Tables::read ? tuned_pick(table, count, p, cost) : nullptr;
    if (tuned) out->push_back(tuned);
    for (const auto& entry : scored)
        if (entry.second != tuned) out->push_back(entry.second);
    return TD_OK;
}

// Ranked lists of recent selections, shared by every thread: a ranking depends only on the
// problem, the kernel name asked for, the GPU's SM count, the library's options and the
// environment that chooses the tuning tables, so a repeated one skips the checks and the
// ranking. Each thread keeps
// the list it used last in front of the shared map (no lock, no copy for a loop that runs
// one problem again). Keys compare the problem byte for byte.
template <class Kernel>
class RankCache {
  public:
    using List = std::vector<const Kernel*>;

    // The list for (p, name), ranked by rank_list(&list) where it is not cached; valid until
    // this thread's next call. nullptr with *status set where the ranking fails. p: the
    // problem as the key holds it (fields no selection reads zeroed).
    template <class Problem, class RankFn>
    const List* get(const Problem& p, const char* name, RankFn rank_list, int* status) {
        Front& f = front_;
        std::string& key = f.next_key;
        key.assign(reinterpret_cast<const char*>(&p), sizeof(Problem));
        const int workers = device::multiprocessors();
        key.append(reinterpret_cast<const char*>(&workers), sizeof workers);
        const TdOptions opts = options();  // a kernel's supports() may read them (tma)
        key.append(reinterpret_cast<const char*>(&opts), sizeof opts);
        key.append(name ? name : "");
        key.push_back('\0');
        tuning::append_environment(&key);
        *status = TD_OK;
        if (f.list && key == f.key) return f.list.get();
        std::shared_ptr<const List> list;
        {
            std::lock_guard<std::mutex> guard(lock_);
            auto it = entries_.find(key);
            if (it != entries_.end()) list = it->second;
        }
        if (!list) {
            auto fresh = std::make_shared<List>();
            if ((*status = rank_list(fresh.get()))) return nullptr;
            list = fresh;
            std::lock_guard<std::mutex> guard(lock_);
            if (entries_.size() >= 4096) entries_.clear();
            entries_.emplace(key, list);
        }
        f.key = key;
        f.list = list;
        return f.list.get();
    }

  private:
    struct Front {
        std::string key;       // of the list below
        std::shared_ptr<const List> list;
        std::string next_key;  // the key being looked up (kept to reuse its buffer)
    };
    inline static thread_local Front front_;
    std::mutex lock_;
    std::unordered_map<std::string, std::shared_ptr<const List>> entries_;
};

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
