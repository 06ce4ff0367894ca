// What a generated kernel gives the dispatcher core: its description (KernelInfo, generated
// from python/tiledispatch/codegen/abi.py), three functions of its family's template and its
// family's cost-model entry. Every backend fills the same structs, so selection and the C ABI
// are shared.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "tiledispatch/kernel_info.hpp"
#include "tiledispatch/tiledispatch.h"

namespace td {

enum class Op { gemm = 0, conv = 1 };

struct ConvGeometry;  // tiledispatch/conv_geometry.hpp

// What a cost function may read besides the kernel and the problem.
struct CostContext {
    int workers;  // SMs of the current GPU, or host threads on cpu
};

// A family's cost-model entry (bindings/cost/): the predicted time of running kernel `k` on
// a problem, in arbitrary units (lower is faster); only kernels whose supports() accepted the
// problem are asked.
using GemmCostFn = double (*)(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx);
using ConvCostFn = double (*)(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g,
                              const CostContext& ctx);

// supports(): TD_OK, or TD_UNSUPPORTED with the reason in *why.
// run(): TD_OK, TD_REJECTED (arguments the kernel cannot take) or TD_ERROR.
// run_ex(): run() with the epilogue's operands (TdGemmEpilogue); nullptr for a family whose
// kernels implement no feature (KernelInfo.features 0): those run through run().
using GemmRunExFn = int (*)(const TdGemmProblem& p, const void* a, const void* b, void* d,
                            const TdGemmEpilogue& ep, void* workspace, size_t workspace_bytes, void* stream);
// The grouped GEMM entry of a family whose kernels run a whole grouped call in one launch
// (KernelInfo.variant TD_GEMM_GROUPED; nullptr for every other family). groups are host
// memory; `p` gives the dtype, layout, alpha and epilogue fields (its sizes are not read).
// supports_grouped(): TD_OK, or TD_UNSUPPORTED / TD_REJECTED with the reason (a group's size,
// leading dimension or pointer the kernel cannot take). grouped_workspace_size(): the
// workspace of a call of `count` groups. run_grouped(): one launch for every group of M > 0.
using GemmRunGroupedFn = int (*)(const TdGemmProblem& p, const TdGemmGroup* groups, int64_t count, void* workspace,
                                 size_t workspace_bytes, void* stream);
using GemmSupportsGroupedFn = int (*)(const TdGemmProblem& p, const TdGemmGroup* groups, int64_t count,
                                      std::string* why);
using GemmGroupedWorkspaceFn = size_t (*)(const TdGemmProblem& p, int64_t count);
struct GemmKernel {
    KernelInfo info;
    int (*supports)(const TdGemmProblem& p, std::string* why);
    size_t (*workspace_size)(const TdGemmProblem& p);
    int (*run)(const TdGemmProblem& p, const void* a, const void* b, void* c, void* workspace,
               size_t workspace_bytes, void* stream);
    GemmCostFn cost;
    GemmRunExFn run_ex;
    GemmRunGroupedFn run_grouped;
    GemmSupportsGroupedFn supports_grouped;
    GemmGroupedWorkspaceFn grouped_workspace_size;
};

// The TD_FEATURE_* bits a GEMM problem needs: what a kernel must implement to run it.
inline int gemm_features(const TdGemmProblem& p) {
    const bool default_out = p.out_dtype == TD_OUT_DEFAULT ||
                             (p.out_dtype == TD_OUT_FP32 && p.dtype == TD_FP32) ||
                             (p.out_dtype == TD_OUT_FP16 && p.dtype == TD_FP16) ||
                             (p.out_dtype == TD_OUT_BF16 && p.dtype != TD_FP32 && p.dtype != TD_FP16);
    int f = 0;
    if (p.beta != 0.0f) f |= TD_FEATURE_BETA;
    if (p.bias == TD_BIAS_N) f |= TD_FEATURE_BIAS_N;
    if (p.bias == TD_BIAS_M) f |= TD_FEATURE_BIAS_M;
    if (p.activation != TD_ACT_NONE) f |= TD_FEATURE_ACTIVATION;
    if (p.aux) f |= TD_FEATURE_AUX;
    if (p.row_scale) f |= TD_FEATURE_ROW_SCALE;
    if (p.col_scale) f |= TD_FEATURE_COL_SCALE;
    if (!default_out) f |= TD_FEATURE_OUT_DTYPE;
    if (p.batch > 1) f |= TD_FEATURE_BATCH;
    if (p.block_scale) f |= TD_FEATURE_BLOCK_SCALE;
    return f;
}

// A kernel's answer for a problem, the one selection and the tuning tables ask: the features the
// problem needs that the kernel's KernelInfo.features lacks are refused here, for every backend,
// before the family's supports() sees the problem (a family never has to know of them).
// A grouped kernel (KernelInfo.variant TD_GEMM_GROUPED) runs grouped calls only: a plain problem is
// refused here, so no plain selection ever ranks one (the grouped call asks kernel_supports_group).
inline int kernel_supports(const GemmKernel& k, const TdGemmProblem& p, std::string* why);

inline int kernel_features_supported(const GemmKernel& k, const TdGemmProblem& p, std::string* why) {
    const int missing = gemm_features(p) & ~k.info.features;
    if (missing) {
        static const char* const names[] = {"beta * C", "bias along N", "bias along M", "activation", "aux output",
                                            "row scale", "column scale", "output dtype", "batch", "block-wise scale"};
        *why = "this kernel implements no ";
        bool first = true;
        for (int bit = 0; bit < 10; ++bit)
            if (missing & (1 << bit)) *why += (first ? "" : ", ") + std::string(names[bit]), first = false;
        return TD_UNSUPPORTED;
    }
    return k.supports(p, why);
}

inline int kernel_supports(const GemmKernel& k, const TdGemmProblem& p, std::string* why) {
    if (k.info.variant == TD_GEMM_GROUPED) {
        *why = "a grouped kernel runs grouped calls only (td_gemm_grouped_run)";
        return TD_UNSUPPORTED;
    }
    return kernel_features_supported(k, p, why);
}

// A grouped kernel's answer for one grouped call: the features and the family's supports() for the
// call's problem `p` (sizes of one of its groups), then every group (supports_grouped).
inline int kernel_supports_group(const GemmKernel& k, const TdGemmProblem& p, const TdGemmGroup* groups,
                                 int64_t count, std::string* why) {
    if (!k.run_grouped) {
        *why = "not a grouped kernel";
        return TD_UNSUPPORTED;
    }
    if (int s = kernel_features_supported(k, p, why)) return s;
    return k.supports_grouped(p, groups, count, why);
}

struct ConvKernel {
    KernelInfo info;
    int (*supports)(const TdConvProblem& p, std::string* why);
    size_t (*workspace_size)(const TdConvProblem& p);
    int (*run)(const TdConvProblem& p, const void* in, const void* wei, void* out,
               void* workspace, size_t workspace_bytes, void* stream);
    ConvCostFn cost;
};

inline int kernel_supports(const ConvKernel& k, const TdConvProblem& p, std::string* why) { return k.supports(p, why); }

// One registered kernel: a family template's static supports / workspace_size / run, the
// variant's KernelInfo and the family's cost function (the generated source of each variant
// calls this; python/tiledispatch/codegen/frame.py). Not constexpr: in HIP a
// constant-initialized namespace-scope const is implicitly __constant__, which would drag the
// host functions into the device link.
// A GEMM family template's run_ex where it has one (else nullptr).
template <class Impl, class = void>
struct RunExOf {
    static constexpr GemmRunExFn value = nullptr;
};
template <class Impl>
struct RunExOf<Impl, std::void_t<decltype(&Impl::run_ex)>> {
    static constexpr GemmRunExFn value = &Impl::run_ex;
};

// A GEMM family template's grouped entry (run_grouped, supports_grouped, grouped_workspace_size)
// where it has one (else nullptr).
template <class Impl, class = void>
struct GroupedOf {
    static constexpr GemmRunGroupedFn run = nullptr;
    static constexpr GemmSupportsGroupedFn supports = nullptr;
    static constexpr GemmGroupedWorkspaceFn workspace_size = nullptr;
};
template <class Impl>
struct GroupedOf<Impl, std::void_t<decltype(&Impl::run_grouped)>> {
    static constexpr GemmRunGroupedFn run = &Impl::run_grouped;
    static constexpr GemmSupportsGroupedFn supports = &Impl::supports_grouped;
    static constexpr GemmGroupedWorkspaceFn workspace_size = &Impl::grouped_workspace_size;
};

template <class Kernel, class Impl, class CostFn>
inline Kernel make_kernel(const KernelInfo& info, CostFn cost) {
    if constexpr (std::is_same_v<Kernel, GemmKernel>)
        return Kernel{info, &Impl::supports, &Impl::workspace_size, &Impl::run, cost, RunExOf<Impl>::value,
                      GroupedOf<Impl>::run, GroupedOf<Impl>::supports, GroupedOf<Impl>::workspace_size};
    else
        return Kernel{info, &Impl::supports, &Impl::workspace_size, &Impl::run, cost};
}

// Provided by the generated registration table of each library.
extern const char* const table_target;
extern const char* const table_op;
extern const char* const table_registry_json;
extern const GemmKernel* const gemm_table[];
extern const size_t gemm_table_size;
extern const ConvKernel* const conv_table[];
extern const size_t conv_table_size;

}  // namespace td
