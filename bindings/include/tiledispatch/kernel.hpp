// What a generated kernel gives the dispatcher core: its description and three functions.
// Every backend fills the same structs, so selection and the C ABI are shared.
#pragma once

#include <cstddef>
#include <string>

#include "tiledispatch/tiledispatch.h"

namespace td {

enum class Op { gemm = 0, conv = 1 };

struct KernelInfo {
    const char* name;
    int dtype;      // enum td_dtype
    int layout;     // gemm: enum td_layout; conv: spatial rank 1/2/3
    int variant;    // gemm: 0 standard, 1 stream-K, 2 split-K; conv: enum td_conv_direction
    int reduction;  // stream-K: 0 atomic, 1 deterministic; cuda implicit conv: the batch split; otherwise -1
    int tile_m, tile_n, tile_k;
    int micro_m, micro_n;  // cpu: register micro tile; cuda: cluster shape
    int schedule;          // cuda: 0 cooperative, 1 ping-pong; cpu: 0
    int pad;               // 1: stages misaligned operands through aligned copies
    int named_only;        // 1: never picked, run only when named (fp8 fast accumulation: less precise)
};

// supports(): TD_OK, or TD_UNSUPPORTED with the reason in *why.
// run(): TD_OK, TD_REJECTED (arguments the kernel cannot take) or TD_ERROR.
struct GemmKernel {
    KernelInfo info;
    int (*supports)(const TdGemmProblem& p, std::string* why);
    size_t (*workspace_size)(const TdGemmProblem& p);
    int (*run)(const TdGemmProblem& p, const void* a, const void* b, void* c, void* workspace,
               size_t workspace_bytes, void* stream);
};

struct ConvKernel {
    KernelInfo info;
    int (*supports)(const TdConvProblem& p, std::string* why);
    size_t (*workspace_size)(const TdConvProblem& p);
    int (*run)(const TdConvProblem& p, const void* in, const void* wei, void* out,
               void* workspace, size_t workspace_bytes, void* stream);
};

// Provided by the generated registration table of each library.
extern const char* const table_target;
extern const char* const table_op;
extern const char* const table_registry_json;
extern const GemmKernel* const gemm_table[];
extern const size_t gemm_table_size;
extern const ConvKernel* const conv_table[];
extern const size_t conv_table_size;

}  // namespace td
