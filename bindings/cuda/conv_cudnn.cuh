// cuda backend: cuDNN's convolution as a kernel of the registry (the cudnn family), so that
// selection weighs the vendor against our kernels and a problem never runs slower than cuDNN
// by more than the dispatcher's own misjudgment.
//
// cuDNN's legacy convolution API (cudnn_cnn, cuDNN 9): NHWC tensors with the groups as the
// descriptor's group count, fp32 accumulation. The library is opened at run time
// (vendor_lib.hpp); the headers come from the toolkit or the nvidia-cudnn wheel at build time.
// Per problem and device, one plan: descriptors and the algorithm cuDNN's own benchmark
// (cudnnFind...) ranks fastest, as torch's cudnn.benchmark does. During CUDA-graph capture,
// where a benchmark cannot run, the plan takes cuDNN's heuristic choice instead and the next
// call outside capture benchmarks. 1D problems run as 2D with a height of 1.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/vendor_lib.hpp"
#include "dispatcher.hpp"
#include "tiledispatch/conv_geometry.hpp"

#ifndef TD_CUDNN_LIBDIR
#define TD_CUDNN_LIBDIR ""
#endif

namespace td::cuda {

// cuDNN's entry points, resolved once from the shared library.
struct CudnnApi {
    decltype(&::cudnnGetVersion) GetVersion;
    decltype(&::cudnnGetErrorString) GetErrorString;
    decltype(&::cudnnCreate) Create;
    decltype(&::cudnnSetStream) SetStream;
    decltype(&::cudnnCreateTensorDescriptor) CreateTensorDescriptor;
    decltype(&::cudnnSetTensorNdDescriptor) SetTensorNdDescriptor;
    decltype(&::cudnnCreateFilterDescriptor) CreateFilterDescriptor;
    decltype(&::cudnnSetFilterNdDescriptor) SetFilterNdDescriptor;
    decltype(&::cudnnCreateConvolutionDescriptor) CreateConvolutionDescriptor;
    decltype(&::cudnnSetConvolutionNdDescriptor) SetConvolutionNdDescriptor;
    decltype(&::cudnnSetConvolutionGroupCount) SetConvolutionGroupCount;
    decltype(&::cudnnSetConvolutionMathType) SetConvolutionMathType;
    decltype(&::cudnnFindConvolutionForwardAlgorithm) FindForward;
    decltype(&::cudnnGetConvolutionForwardAlgorithm_v7) HeuristicForward;
    decltype(&::cudnnConvolutionForward) Forward;
    decltype(&::cudnnFindConvolutionBackwardDataAlgorithm) FindBackwardData;
    decltype(&::cudnnGetConvolutionBackwardDataAlgorithm_v7) HeuristicBackwardData;
    decltype(&::cudnnConvolutionBackwardData) BackwardData;
    decltype(&::cudnnFindConvolutionBackwardFilterAlgorithm) FindBackwardFilter;
    decltype(&::cudnnGetConvolutionBackwardFilterAlgorithm_v7) HeuristicBackwardFilter;
    decltype(&::cudnnConvolutionBackwardFilter) BackwardFilter;
};

// The API, or nullptr with the reason in *why (no library, a missing symbol, cuDNN < 9).
inline const CudnnApi* cudnn_api(std::string* why) {
    static vendor::Library lib({"libcudnn.so.9", "libcudnn_cnn.so.9", "libcudnn_ops.so.9", "libcudnn_graph.so.9"},
                               TD_CUDNN_LIBDIR);
    static CudnnApi api{};
    static std::string problem;
    static std::once_flag once;
    std::call_once(once, [] {
        if (!lib.open(&problem)) {
            problem = "cuDNN is not available: " + problem;
            return;
        }
        std::string missing;
        vendor::resolve(lib, "cudnnGetVersion", &api.GetVersion, &missing);
        vendor::resolve(lib, "cudnnGetErrorString", &api.GetErrorString, &missing);
        vendor::resolve(lib, "cudnnCreate", &api.Create, &missing);
        vendor::resolve(lib, "cudnnSetStream", &api.SetStream, &missing);
        vendor::resolve(lib, "cudnnCreateTensorDescriptor", &api.CreateTensorDescriptor, &missing);
        vendor::resolve(lib, "cudnnSetTensorNdDescriptor", &api.SetTensorNdDescriptor, &missing);
        vendor::resolve(lib, "cudnnCreateFilterDescriptor", &api.CreateFilterDescriptor, &missing);
        vendor::resolve(lib, "cudnnSetFilterNdDescriptor", &api.SetFilterNdDescriptor, &missing);
        vendor::resolve(lib, "cudnnCreateConvolutionDescriptor", &api.CreateConvolutionDescriptor, &missing);
        vendor::resolve(lib, "cudnnSetConvolutionNdDescriptor", &api.SetConvolutionNdDescriptor, &missing);
        vendor::resolve(lib, "cudnnSetConvolutionGroupCount", &api.SetConvolutionGroupCount, &missing);
        vendor::resolve(lib, "cudnnSetConvolutionMathType", &api.SetConvolutionMathType, &missing);
        vendor::resolve(lib, "cudnnFindConvolutionForwardAlgorithm", &api.FindForward, &missing);
        vendor::resolve(lib, "cudnnGetConvolutionForwardAlgorithm_v7", &api.HeuristicForward, &missing);
        vendor::resolve(lib, "cudnnConvolutionForward", &api.Forward, &missing);
        vendor::resolve(lib, "cudnnFindConvolutionBackwardDataAlgorithm", &api.FindBackwardData, &missing);
        vendor::resolve(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", &api.HeuristicBackwardData, &missing);
        vendor::resolve(lib, "cudnnConvolutionBackwardData", &api.BackwardData, &missing);
        vendor::resolve(lib, "cudnnFindConvolutionBackwardFilterAlgorithm", &api.FindBackwardFilter, &missing);
        vendor::resolve(lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", &api.HeuristicBackwardFilter, &missing);
        vendor::resolve(lib, "cudnnConvolutionBackwardFilter", &api.BackwardFilter, &missing);
        if (!missing.empty()) {
            problem = "the cuDNN library lacks " + missing;
        } else if (api.GetVersion() < 90000) {
            problem = "cuDNN " + std::to_string(api.GetVersion()) + " is older than 9.0";
        }
    });
    if (!problem.empty()) {
        if (why) *why = problem;
        return nullptr;
    }
    return &api;
}

inline int cudnn_fail(const CudnnApi& api, cudnnStatus_t s, const char* what) {
    return fail(TD_ERROR, std::string(what) + ": " + api.GetErrorString(s));
}

#define TD_CUDNN(api, call, what)                                      \
    do {                                                               \
        const cudnnStatus_t td_status_ = (call);                       \
        if (td_status_ != CUDNN_STATUS_SUCCESS) return cudnn_fail(api, td_status_, what); \
    } while (0)

// One problem's descriptors and algorithm (never freed: a plan lives as long as the process,
// as torch's cache of them does).
struct CudnnPlan {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    int algo = -1;
    cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;
    size_t workspace = 0;
    bool benchmarked = false;  // false: cuDNN's heuristic choice (made during graph capture)
};

// The element types cuDNN names.
inline cudnnDataType_t cudnn_type(int dtype) {
    return dtype == TD_FP16 ? CUDNN_DATA_HALF : dtype == TD_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

// Why cuDNN's legacy API cannot take the problem ("" where it can): its int dimensions and
// strides, and at least two spatial dimensions (1D runs as 2D).
inline std::string cudnn_limits(const ConvGeometry& g) {
    const int64_t big = INT32_MAX;
    const int64_t sizes[3] = {g.N * g.in_pixels() * g.G * g.C, g.N * g.out_pixels() * g.G * g.K,
                              g.G * g.K * g.taps() * g.C};
    for (int64_t v : sizes)
        if (v > big) return "a tensor has more than 2^31 - 1 elements (cuDNN's legacy API takes int sizes)";
    return "";
}

// A cuDNN handle per device and thread (cuDNN's rule: one handle per thread is safe).
inline int cudnn_handle(const CudnnApi& api, cudnnHandle_t* out) {
    static thread_local std::map<int, cudnnHandle_t> handles;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
    auto it = handles.find(device);
    if (it == handles.end()) {
        cudnnHandle_t h = nullptr;
        TD_CUDNN(api, api.Create(&h), "cudnnCreate");
        it = handles.emplace(device, h).first;
    }
    *out = it->second;
    return TD_OK;
}

// The descriptors of a problem: NHWC (strided NCHW in cuDNN's terms), the filter KCRS in
// NHWC order, G groups. Spatial dims as cuDNN wants them: 2D for 1D and 2D problems.
inline int cudnn_describe(const CudnnApi& api, const TdConvProblem& p, const ConvGeometry& g, CudnnPlan* plan) {
    const int spatial = p.ndim == 3 ? 3 : 2;
    const int first = 3 - spatial;  // the geometry's index of cuDNN's first spatial dim
    const cudnnDataType_t type = cudnn_type(p.dtype);
    auto tensor = [&](cudnnTensorDescriptor_t* desc, int64_t channels, const int64_t* size) -> int {
        int dims[5], strides[5];
        dims[0] = (int)g.N;
        dims[1] = (int)channels;
        int64_t stride = channels;
        for (int d = spatial - 1; d >= 0; --d) {
            dims[2 + d] = (int)size[first + d];
            strides[2 + d] = (int)stride;
            stride *= size[first + d];
        }
        strides[1] = 1;
        strides[0] = (int)stride;
        TD_CUDNN(api, api.CreateTensorDescriptor(desc), "cudnnCreateTensorDescriptor");
        TD_CUDNN(api, api.SetTensorNdDescriptor(*desc, type, spatial + 2, dims, strides), "cudnnSetTensorNdDescriptor");
        return TD_OK;
    };
    if (int s = tensor(&plan->x, g.G * g.C, g.in)) return s;
    if (int s = tensor(&plan->y, g.G * g.K, g.out)) return s;
    int fdims[5] = {(int)(g.G * g.K), (int)g.C, 1, 1, 1};
    int pad[3], stride[3], dil[3];
    for (int d = 0; d < spatial; ++d) {
        fdims[2 + d] = (int)g.fil[first + d];
        pad[d] = (int)g.pad[first + d];
        stride[d] = (int)g.stride[first + d];
        dil[d] = (int)g.dil[first + d];
    }
    TD_CUDNN(api, api.CreateFilterDescriptor(&plan->w), "cudnnCreateFilterDescriptor");
    TD_CUDNN(api, api.SetFilterNdDescriptor(plan->w, type, CUDNN_TENSOR_NHWC, spatial + 2, fdims),
             "cudnnSetFilterNdDescriptor");
    TD_CUDNN(api, api.CreateConvolutionDescriptor(&plan->conv), "cudnnCreateConvolutionDescriptor");
    TD_CUDNN(api, api.SetConvolutionNdDescriptor(plan->conv, spatial, pad, stride, dil, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT),
             "cudnnSetConvolutionNdDescriptor");
    TD_CUDNN(api, api.SetConvolutionGroupCount(plan->conv, (int)g.G), "cudnnSetConvolutionGroupCount");
    TD_CUDNN(api, api.SetConvolutionMathType(plan->conv, CUDNN_TENSOR_OP_MATH), "cudnnSetConvolutionMathType");
    return TD_OK;
}

// Chooses the plan's algorithm: cuDNN's benchmark (its fastest that succeeded) or, during
// capture, its heuristic's first.
template <class Perf, class Choose>
int cudnn_choose(const CudnnApi& api, Choose choose, CudnnPlan* plan, const char* what) {
    Perf perf[16];
    int count = 0;
    TD_CUDNN(api, choose(16, &count, perf), what);
    for (int i = 0; i < count; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        plan->algo = (int)perf[i].algo;
        plan->math = perf[i].mathType;
        plan->workspace = perf[i].memory;
        return TD_OK;
    }
    return fail(TD_REJECTED, std::string(what) + ": cuDNN has no algorithm for this problem");
}

// The plan of a problem on the current device (built on first use; *plan valid for the
// process's life).
inline int cudnn_plan(const CudnnApi& api, const TdConvProblem& p, cudnnHandle_t h, bool capturing,
                      const CudnnPlan** out) {
    static std::mutex lock;
    static std::map<std::string, std::unique_ptr<CudnnPlan>> plans;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return fail(TD_ERROR, "cudaGetDevice failed");
    std::string key(reinterpret_cast<const char*>(&p), sizeof p);
    key.append(reinterpret_cast<const char*>(&device), sizeof device);
    std::lock_guard<std::mutex> guard(lock);
    std::unique_ptr<CudnnPlan>& plan = plans[key];
    if (plan && (plan->benchmarked || capturing)) {
        *out = plan.get();
        return TD_OK;
    }
    if (!plan) {
        ConvGeometry g{};
        conv_geometry(p, &g);
        auto fresh = std::make_unique<CudnnPlan>();
        if (int s = cudnn_describe(api, p, g, fresh.get())) return s;
        plan = std::move(fresh);
    }
    CudnnPlan* pl = plan.get();
    const int dir = p.base.direction;
    int s = TD_OK;
    if (dir == TD_CONV_FWD) {
        s = capturing ? cudnn_choose<cudnnConvolutionFwdAlgoPerf_t>(api, [&](int n, int* c, auto* perf) {
                return api.HeuristicForward(h, pl->x, pl->w, pl->conv, pl->y, n, c, perf); }, pl, "cudnnGetConvolutionForwardAlgorithm_v7")
                      : cudnn_choose<cudnnConvolutionFwdAlgoPerf_t>(api, [&](int n, int* c, auto* perf) {
                return api.FindForward(h, pl->x, pl->w, pl->conv, pl->y, n, c, perf); }, pl, "cudnnFindConvolutionForwardAlgorithm");
    } else if (dir == TD_CONV_BWD_DATA) {
        s = capturing ? cudnn_choose<cudnnConvolutionBwdDataAlgoPerf_t>(api, [&](int n, int* c, auto* perf) {
                return api.HeuristicBackwardData(h, pl->w, pl->y, pl->conv, pl->x, n, c, perf); }, pl, "cudnnGetConvolutionBackwardDataAlgorithm_v7")
                      : cudnn_choose<cudnnConvolutionBwdDataAlgoPerf_t>(api, [&](int n, int* c, auto* perf) {
                return api.FindBackwardData(h, pl->w, pl->y, pl->conv, pl->x, n, c, perf); }, pl, "cudnnFindConvolutionBackwardDataAlgorithm");
    } else {
        s = capturing ? cudnn_choose<cudnnConvolutionBwdFilterAlgoPerf_t>(api, [&](int n, int* c, auto* perf) {
                return api.HeuristicBackwardFilter(h, pl->x, pl->y, pl->conv, pl->w, n, c, perf); }, pl, "cudnnGetConvolutionBackwardFilterAlgorithm_v7")
                      : cudnn_choose<cudnnConvolutionBwdFilterAlgoPerf_t>(api, [&](int n, int* c, auto* perf) {
                return api.FindBackwardFilter(h, pl->x, pl->y, pl->conv, pl->w, n, c, perf); }, pl, "cudnnFindConvolutionBackwardFilterAlgorithm");
    }
    if (s) return s;
    pl->benchmarked = !capturing;
    TD_CUDNN(api, api.SetConvolutionMathType(pl->conv, pl->math), "cudnnSetConvolutionMathType");
    *out = pl;
    return TD_OK;
}

template <int Dtype, int Ndim, int Direction>
struct CudnnConv {
    static int supports(const TdConvProblem& p, std::string* why) {
        if (p.dtype != Dtype) return *why = "dtype differs", TD_UNSUPPORTED;
        if (p.ndim != Ndim) return *why = "layout differs", TD_UNSUPPORTED;
        if (p.base.direction != Direction) return *why = "direction differs", TD_UNSUPPORTED;
        ConvGeometry g{};
        const std::string bad = conv_geometry(p, &g);
        if (!bad.empty()) return *why = bad, TD_UNSUPPORTED;
        const std::string limit = cudnn_limits(g);
        if (!limit.empty()) return *why = limit, TD_UNSUPPORTED;
        if (!cudnn_api(why)) return TD_UNSUPPORTED;
        return TD_OK;
    }

    // The workspace comes from the backend's scratch buffer (its size is the algorithm's,
    // known once cuDNN has benchmarked the problem on its first run).
    static size_t workspace_size(const TdConvProblem&) { return 0; }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        std::string why;
        const CudnnApi* api = cudnn_api(&why);
        if (!api) return fail(TD_REJECTED, why);
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess)
            return fail(TD_ERROR, "cudaStreamIsCapturing failed");
        cudnnHandle_t h = nullptr;
        if (int s = cudnn_handle(*api, &h)) return s;
        TD_CUDNN(*api, api->SetStream(h, stream), "cudnnSetStream");
        const CudnnPlan* plan = nullptr;
        if (int s = cudnn_plan(*api, p, h, capture != cudaStreamCaptureStatusNone, &plan)) return s;
        void* work = nullptr;
        if (plan->workspace) {
            if (ws && ws_bytes >= plan->workspace) {
                work = ws;
            } else if (int s = device::scratch(plan->workspace, stream_ptr, &work)) {
                return s;
            }
        }
        const float one = 1.0f, zero = 0.0f;
        if constexpr (Direction == TD_CONV_FWD) {
            TD_CUDNN(*api, api->Forward(h, &one, plan->x, in, plan->w, wei, plan->conv,
                                        (cudnnConvolutionFwdAlgo_t)plan->algo, work, plan->workspace, &zero,
                                        plan->y, out),
                     "cudnnConvolutionForward");
        } else if constexpr (Direction == TD_CONV_BWD_DATA) {
            // in = dx (written), out = dy
            TD_CUDNN(*api, api->BackwardData(h, &one, plan->w, wei, plan->y, out, plan->conv,
                                             (cudnnConvolutionBwdDataAlgo_t)plan->algo, work, plan->workspace,
                                             &zero, plan->x, const_cast<void*>(in)),
                     "cudnnConvolutionBackwardData");
        } else {
            // wei = dw (written), out = dy
            TD_CUDNN(*api, api->BackwardFilter(h, &one, plan->x, in, plan->y, out, plan->conv,
                                               (cudnnConvolutionBwdFilterAlgo_t)plan->algo, work, plan->workspace,
                                               &zero, plan->w, const_cast<void*>(wei)),
                     "cudnnConvolutionBackwardFilter");
        }
        return TD_OK;
    }
};

}  // namespace td::cuda
