// Tuning tables: problem -> kernel names ranked by measured latency, per target, written by
// the tile engine (tile_engine/tuning.py make_table / dumps). Every library reads them when
// it ranks the kernels for a problem: the table's pick first, then the cost model's order.
//
// Which tables: the shipped `tuning_<target>.json` beside the library file (unless the
// environment sets TILEDISPATCH_NO_SHIPPED_TUNING=1), then every file named in
// TILEDISPATCH_TUNING (':'-separated; ';' on Windows). The environment is read at selection
// time; each file is read once. A table that does not parse, has another schema or was
// measured for another target is ignored, with a message (td_tuning_messages). So is a
// table whose "header" object names another device than the one td_tuning_set_device gave
// (its keys, e.g. "device" and "sm_count", compared where the header has them; the message
// names the file and both devices). The header's other fields (build hash, CUDA and driver
// versions) are a record only: the kernel names a table lists are checked against this
// library's kernels, so a table stays valid across rebuilds of the same kernels.
//
// The pick (`pick`). Entries of the query's kind (gemm: dtype, layout; conv: dtype,
// direction, spatial rank) are compared by distance = sum of |log| ratios of the sizes
// (gemm M, N, K; conv N*G, C, K, input pixels, filter taps and the cubes of the stride and
// dilation products; summed as Python's sum() does),
// nearest first, equal distances in table order. A problem the table holds takes
// its fastest measured kernel that supports it; so does every problem where one of the
// NEIGHBOURS nearest entries has no latencies (the nearest entry's ranking). Any other
// problem takes the kernel with the lowest score over the nearest entries e (weights
// 1 / (distance + 0.05)):
//
//     score(k) = mean_e [ log(t(k, e) / t_best(e)) + ALPHA * log(cost(k, q) / cost(k, e)) ]
//
// the kernel's measured slowness relative to the fastest at e, moved by a damped share of the
// change the library's cost model predicts for that kernel from e to the query q.
// NEIGHBOURS = 6 and ALPHA = 0.25 were chosen by leave-one-out over the H200 training grid.
//
// A table does not speak for a kernel family it never measured: a kernel of a family that no
// entry of the kind lists (among the kernels this library has) competes through the cost
// model alone, taking the problem where the model predicts it faster than the table's pick.
// fp16 and bf16 stand in for each other: where the tables have no entry of the query's
// dtype, the entries of its twin serve it, with each kernel name's dtype token swapped
// (gemm_bf16_rcr_... -> gemm_fp16_rcr_...). Kernels marked named_only are never picked.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tiledispatch/kernel_info.hpp"
#include "tiledispatch/options.hpp"
#include "tiledispatch/tiledispatch.h"

namespace td {
namespace tuning {

constexpr int kSchema = 1;
constexpr int kNeighbours = 6;
constexpr double kAlpha = 0.25;

// A problem as a tuning table describes it (the tile engine's problem spec).
struct TableProblem {
    bool conv = false;
    std::string dtype;      // fp32, fp16, bf16, fp8_e4m3, ...
    std::string layout;     // gemm: rcr, rrr, crr, ccr
    std::string direction;  // conv: fwd, bwd_data, bwd_weight
    int ndim = 0;           // conv: spatial rank, 1 to 3
    int64_t M = 0, N = 0, K = 0;  // gemm M, N, K; conv N (batch) and K (filters per group)
    int64_t G = 0, C = 0;         // conv
    int64_t input[3] = {1, 1, 1}, filter[3] = {1, 1, 1};  // conv, the first ndim used
    int64_t stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};

    // Same op, dtype and layout (gemm) or direction and rank (conv).
    bool same_kind(const TableProblem& other) const;
    // gemm: M, N, K; conv: N*G, C, K, input pixels, filter taps, stride^3, dilation^3 (products).
    std::vector<double> sizes() const;
};

// The table problem of an ABI problem, and the ABI problem of a table entry (false where the
// entry cannot be one: an unknown dtype, a malformed convolution).
TableProblem describe(const TdGemmProblem& p);
TableProblem describe(const TdConvProblem& p);
bool to_problem(const TableProblem& spec, TdGemmProblem* out);
bool to_problem(const TableProblem& spec, TdConvProblem* out);

// What the pick asks of a library about its kernels, for one query problem.
class Candidates {
  public:
    virtual ~Candidates() = default;
    virtual size_t count() const = 0;
    virtual const char* name(size_t i) const = 0;
    virtual bool named_only(size_t i) const = 0;
    virtual int family(size_t i) const = 0;
    virtual bool supports(size_t i) = 0;  // the query problem
    virtual double cost(size_t i) = 0;    // the query problem; asked only where supports(i)
    // NaN where kernel i rejects `at` (or `at` is no problem of this library)
    virtual double cost_at(size_t i, const TableProblem& at) = 0;
};

// The tables' kernel for the query (an index of `kernels`), or -1: no table, no entry of
// its kind, or none that applies. target / op: the library's.
long pick(const char* target, const char* op, const TableProblem& query, Candidates& kernels);

// The tables this library reads now (the shipped one where it exists), for display.
std::vector<std::string> table_paths(const char* target);

// Appends the environment that chooses the tables to a key (selection's cache key).
void append_environment(std::string* key);

// Queues a message for td_tuning_messages.
void note(const std::string& message);

// A kernel's family for the never-measured rule: its KernelInfo family, with the split-K
// GEMM variant a family of its own (tables measured before those kernels existed never ranked
// them, so the cost model weighs them against the table's pick).
inline int pick_family(const KernelInfo& k) { return 2 * k.family + (k.variant == TD_GEMM_SPLIT_K ? 1 : 0); }

// Candidates over a library's kernel table; cost(problem, kernel): the cost model's time.
template <class Kernel, class Problem, class Cost>
class KernelTable final : public Candidates {
  public:
    KernelTable(const Kernel* const* table, size_t count, const Problem& query, Cost cost)
        : table_(table), count_(count), query_(query), cost_(cost), supports_(count, -1),
          costs_(count, std::numeric_limits<double>::quiet_NaN()) {}

    size_t count() const override { return count_; }
    const char* name(size_t i) const override { return table_[i]->info.name; }
    bool named_only(size_t i) const override { return table_[i]->info.named_only != 0; }
    int family(size_t i) const override { return pick_family(table_[i]->info); }
    bool supports(size_t i) override {
        if (supports_[i] < 0) {
            std::string why;
            supports_[i] = !(table_[i]->info.vendor && !options().vendor) &&
                                   kernel_supports(*table_[i], query_, &why) == TD_OK ? 1 : 0;
        }
        return supports_[i] == 1;
    }
    double cost(size_t i) override {
        if (std::isnan(costs_[i])) costs_[i] = cost_(query_, *table_[i]);
        return costs_[i];
    }
    double cost_at(size_t i, const TableProblem& at) override {
        Problem p{};
        std::string why;
        if (!to_problem(at, &p) || kernel_supports(*table_[i], p, &why) != TD_OK)
            return std::numeric_limits<double>::quiet_NaN();
        return cost_(p, *table_[i]);
    }

  private:
    const Kernel* const* table_;
    size_t count_;
    const Problem& query_;
    Cost cost_;
    std::vector<signed char> supports_;
    std::vector<double> costs_;
};

}  // namespace tuning
}  // namespace td
