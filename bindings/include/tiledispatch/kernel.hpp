// What a generated kernel gives the dispatcher core: its description (KernelInfo, generated
// from python/tiledispatch/codegen/abi.py), three functions of its family's template and its
// family's cost-model entry. Every backend fills the same structs, so selection and the C ABI
// are shared.
#pragma once

#include <cstddef>
#include <string>

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
struct GemmKernel {
    KernelInfo info;
    int (*supports)(const TdGemmProblem& p, std::string* why);
    size_t (*workspace_size)(const TdGemmProblem& p);
    int (*run)(const TdGemmProblem& p, const void* a, const void* b, void* c, void* workspace,
               size_t workspace_bytes, void* stream);
    GemmCostFn cost;
};

struct ConvKernel {
    KernelInfo info;
    int (*supports)(const TdConvProblem& p, std::string* why);
    size_t (*workspace_size)(const TdConvProblem& p);
    int (*run)(const TdConvProblem& p, const void* in, const void* wei, void* out,
               void* workspace, size_t workspace_bytes, void* stream);
    ConvCostFn cost;
};

// One registered kernel: a family template's static supports / workspace_size / run, the
// variant's KernelInfo and the family's cost function (the generated source of each variant
// calls this; python/tiledispatch/codegen/frame.py). Not constexpr: in HIP a
// constant-initialized namespace-scope const is implicitly __constant__, which would drag the
// host functions into the device link.
template <class Kernel, class Impl, class CostFn>
inline Kernel make_kernel(const KernelInfo& info, CostFn cost) {
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
