/* tiledispatch C ABI.
 *
 * One shared library per (operation, target) exports these functions:
 * libtd_gemm_<target>.so the dispatcher_* and td_gemm_* ones, libtd_conv_<target>.so the
 * conv_dispatcher_* and td_conv_* ones; both export td_abi_version, td_library_target,
 * td_library_op, td_last_error, td_get_options and td_set_options.
 *
 * Status codes: TD_OK 0; TD_ERROR -1 (bad argument, device error, exception caught at
 * the boundary); TD_UNSUPPORTED -2 (no kernel supports the problem); TD_REJECTED -3 (the
 * chosen kernel rejected the arguments). td_last_error() holds this thread's message for
 * the last failed call. No C++ exception and no abort crosses this boundary; every
 * function is safe to call from several threads at once.
 */
#ifndef TILEDISPATCH_H
#define TILEDISPATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TD_API __declspec(dllexport)
#else
#define TD_API __attribute__((visibility("default")))
#endif

/* TD_ABI_VERSION, the status codes, the enums (dtype, layout, direction, GEMM variant,
 * stream-K reduction, kernel family) and the structs TdGemmProblem, ConvProblemC,
 * TdConvProblem and TdOptions: generated from python/tiledispatch/codegen/abi.py. */
#include "tiledispatch/abi_types.h"

/* ---- common ---- */
TD_API int td_abi_version(void);
TD_API const char* td_library_target(void);
TD_API const char* td_library_op(void);
TD_API const char* td_last_error(void);
/* Messages about the tuning tables (a table ignored and why; a table naming kernels this
 * library lacks), newline-separated, "" when none; the call clears them. The text stays
 * valid until this thread calls it again. Selection reads the tables named by
 * TILEDISPATCH_TUNING (':'-separated) and the shipped tuning_<target>.json beside the
 * library (unless TILEDISPATCH_NO_SHIPPED_TUNING=1) when it ranks a problem it has not
 * ranked under the same environment. */
TD_API const char* td_tuning_messages(void);
/* This process's device for the tuning tables' header check: a JSON object of strings and
 * numbers, e.g. {"device": "NVIDIA H200", "sm_count": 132} ({"device": CPU model, "cores":
 * n} on cpu). A table whose "header" object holds one of these keys with another value was
 * measured on another device: it is ignored, with a message naming the file and both
 * devices. NULL or "" clears it (no check, the default). Call it before the first selection;
 * the tables are read again after it. The Python package calls it when it loads a library. */
TD_API int td_tuning_set_device(const char* identity);

/* Run-time options of this library (TdOptions; every field 1 by default), one value for the
 * whole process, read by the kernels' host code at each call: tma 0 makes the convolution
 * kernels that move tiles by TMA copy them in software instead (the tensor-core depthwise
 * bwd_weight, TMA only, then declines its problems); pdl 0 launches every kernel the usual
 * way instead of as a programmatic dependent; multi_row 0 runs the tiled_mma forward's
 * one-row loop instead of the row-reuse loop. td_set_options fails with TD_ERROR unless
 * every field is 0 or 1. Each library holds its own options: set them in each. */
TD_API int td_get_options(TdOptions* out);
TD_API int td_set_options(const TdOptions* in);

/* ---- GEMM: the reference system's functions (layout rcr, packed, host pointers; the
 * element type is td_legacy_dtype(): fp32 where the library has fp32 kernels, else bf16,
 * else fp16) ---- */
TD_API int td_legacy_dtype(void);
TD_API int dispatcher_init(void);
TD_API int dispatcher_is_supported(int64_t M, int64_t N, int64_t K); /* 1 yes, 0 no, <0 error */
TD_API int dispatcher_select_kernel(int64_t M, int64_t N, int64_t K, char* name, int size);
TD_API int dispatcher_run_gemm(const void* A, const void* B, void* C, int64_t M, int64_t N,
                               int64_t K, float* time_ms);
TD_API int dispatcher_get_kernel_count(void);
TD_API const char* dispatcher_export_registry_json(void);
TD_API void dispatcher_cleanup(void);

/* ---- GEMM: extended ABI. kernel NULL or "" = let the dispatcher choose. ---- */
TD_API int td_gemm_is_supported(const TdGemmProblem* p, const char* kernel); /* 1, 0, <0 */
/* The dispatcher's kernel: the tuning tables' pick where they give one, else the cost
 * model's (every call that runs without a kernel name runs this one first). */
TD_API int td_gemm_select(const TdGemmProblem* p, char* name, size_t size);
/* The tuning tables' pick alone ("" where they give none), and the cost model's alone. */
TD_API int td_gemm_tuned(const TdGemmProblem* p, char* name, size_t size);
TD_API int td_gemm_model_select(const TdGemmProblem* p, char* name, size_t size);
/* The cost model's prediction for a named kernel (arbitrary units, lower is faster; the
 * tuning tables calibrate it with measurements). */
TD_API int td_gemm_cost(const TdGemmProblem* p, const char* kernel, double* cost);
TD_API int td_gemm_workspace_size(const TdGemmProblem* p, const char* kernel, size_t* bytes);
/* Pointers are device pointers for GPU targets (host memory for cpu). workspace may be NULL:
 * the library then allocates what it needs. stream is the backend's stream (NULL: default). */
TD_API int td_gemm_run(const TdGemmProblem* p, const char* kernel, const void* A, const void* B,
                       void* C, void* workspace, size_t workspace_bytes, void* stream,
                       float* time_ms);

/* td_gemm_run with no workspace argument (the library allocates what it needs) and no
 * timing: the short call of the Python fast path, whose host time counts per call. */
TD_API int td_gemm_launch(const TdGemmProblem* p, const char* kernel, const void* A, const void* B,
                          void* C, void* stream);

/* td_gemm_run with the epilogue's operands: D = act(alpha * (A * B) * row_scale * col_scale +
 * beta * C + bias) as the problem's fields say (docs/abi.md gives the order); epilogue NULL
 * where the problem asks for no operand. C may be D itself (in-place accumulation). A kernel
 * lacking a feature the problem needs (KernelInfo.features) is never chosen. */
TD_API int td_gemm_run_ex(const TdGemmProblem* p, const char* kernel, const void* A, const void* B, void* D,
                          const TdGemmEpilogue* epilogue, void* workspace, size_t workspace_bytes, void* stream,
                          float* time_ms);

/* count GEMMs in one call (grouped GEMM, mixture-of-experts): each group's sizes, leading
 * dimensions and operands; dtype, layout, alpha, beta and the epilogue fields from p (its
 * sizes and batch are not read; batch must be 0 or 1). A group of M 0 is skipped. groups are
 * host memory. Where a grouped kernel (variant TD_GEMM_GROUPED, e.g. the cutlass_grouped
 * family) takes every group, the call is one launch of it: the groups' sizes, operand pointers
 * and strides are copied to the device (into the workspace) first, in stream order; otherwise
 * (and on cpu) each group runs as its own GEMM, with its own selection. kernel: a grouped
 * kernel's name runs that kernel (TD_REJECTED where it refuses a group); another kernel's name
 * runs the per-group loop with it. During CUDA graph capture a grouped kernel needs the
 * caller's workspace (td_gemm_grouped_run_ex; its size: td_gemm_grouped_workspace_size):
 * without one the call fails (TD_ERROR) rather than run the loop. */
TD_API int td_gemm_grouped_run(const TdGemmProblem* p, const char* kernel, const TdGemmGroup* groups, int64_t count,
                               void* stream, float* time_ms);
TD_API int td_gemm_grouped_run_ex(const TdGemmProblem* p, const char* kernel, const TdGemmGroup* groups,
                                  int64_t count, void* workspace, size_t workspace_bytes, void* stream,
                                  float* time_ms);
/* The grouped kernel a call without a kernel name launches, or "" where it runs the per-group
 * loop; and the workspace a call needs (0 for the loop). */
TD_API int td_gemm_grouped_select(const TdGemmProblem* p, const TdGemmGroup* groups, int64_t count, char* name,
                                  size_t size);
TD_API int td_gemm_grouped_workspace_size(const TdGemmProblem* p, const char* kernel, const TdGemmGroup* groups,
                                          int64_t count, size_t* bytes);

/* Host pointers: copied to the device, run, C copied back (on cpu: td_gemm_run). */
TD_API int td_gemm_run_host(const TdGemmProblem* p, const char* kernel, const void* A, const void* B,
                            void* C, float* time_ms);

/* ---- conv: the reference system's functions (fp32; 3D when input_d or filter_z > 1) ---- */
TD_API int conv_dispatcher_init(void);
TD_API int conv_dispatcher_is_supported(const ConvProblemC* p); /* 1, 0, <0 */
TD_API int conv_dispatcher_select_kernel(const ConvProblemC* p, char* name, int size);
/* input/weight/output by role: fwd writes output, bwd_data writes input,
 * bwd_weight writes weight; the other two are read. */
TD_API int conv_dispatcher_run(const void* input, const void* weight, void* output,
                               const ConvProblemC* p, float* time_ms);
TD_API int conv_dispatcher_get_kernel_count(void);
TD_API const char* conv_dispatcher_export_registry_json(void);
TD_API void conv_dispatcher_cleanup(void);

/* ---- conv: extended ABI ---- */
TD_API int td_conv_is_supported(const TdConvProblem* p, const char* kernel);
TD_API int td_conv_select(const TdConvProblem* p, char* name, size_t size);
TD_API int td_conv_tuned(const TdConvProblem* p, char* name, size_t size);
TD_API int td_conv_model_select(const TdConvProblem* p, char* name, size_t size);
TD_API int td_conv_cost(const TdConvProblem* p, const char* kernel, double* cost);
TD_API int td_conv_workspace_size(const TdConvProblem* p, const char* kernel, size_t* bytes);
TD_API int td_conv_run(const TdConvProblem* p, const char* kernel, const void* input,
                       const void* weight, void* output, void* workspace,
                       size_t workspace_bytes, void* stream, float* time_ms);

TD_API int td_conv_run_host(const TdConvProblem* p, const char* kernel, const void* input,
                            const void* weight, void* output, float* time_ms);

#ifdef __cplusplus
}
#endif
#endif /* TILEDISPATCH_H */
