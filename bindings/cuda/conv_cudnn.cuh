// cuda backend: cuDNN's convolution as a kernel of the registry (the cudnn family), so that
// selection weighs the vendor against our kernels and a problem never runs slower than cuDNN
// by more than the dispatcher's own misjudgment.
//
// cuDNN's graph (backend) API, as torch and cudnn-frontend use it: one convolution operation
// on NHWC tensors (the groups implied by the filter's channels), fp32 accumulation. Per
// problem, pointer alignment and handle, one execution plan, kept for the process's life: the
// engine configurations cuDNN's heuristic (mode A, then the fallback list) proposes are built
// and, on the first run outside CUDA-graph capture, timed on the caller's tensors; the fastest
// is kept, as torch's cudnn.benchmark does. During capture, where nothing can be timed, the
// heuristic's first plan runs and the next call outside capture times them. (cuDNN 9's legacy
// API, cudnnConvolutionForward and its Find, measured 3-40x slower than torch's cuDNN on the
// H200: host work on every call and the legacy engines.) The library is opened at run time
// (vendor_lib.hpp); the headers come from the toolkit or the nvidia-cudnn wheel at build time.
// 1D problems run as 2D with a height of 1.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
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
    decltype(&::cudnnBackendCreateDescriptor) CreateDescriptor;
    decltype(&::cudnnBackendDestroyDescriptor) DestroyDescriptor;
    decltype(&::cudnnBackendSetAttribute) SetAttribute;
    decltype(&::cudnnBackendGetAttribute) GetAttribute;
    decltype(&::cudnnBackendFinalize) Finalize;
    decltype(&::cudnnBackendExecute) Execute;
};

// The API, or nullptr with the reason in *why (no library, a missing symbol, cuDNN < 9).
inline const CudnnApi* cudnn_api(std::string* why) {
    static vendor::Library lib({"libcudnn.so.9", "libcudnn_graph.so.9"}, TD_CUDNN_LIBDIR);
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
        vendor::resolve(lib, "cudnnBackendCreateDescriptor", &api.CreateDescriptor, &missing);
        vendor::resolve(lib, "cudnnBackendDestroyDescriptor", &api.DestroyDescriptor, &missing);
        vendor::resolve(lib, "cudnnBackendSetAttribute", &api.SetAttribute, &missing);
        vendor::resolve(lib, "cudnnBackendGetAttribute", &api.GetAttribute, &missing);
        vendor::resolve(lib, "cudnnBackendFinalize", &api.Finalize, &missing);
        vendor::resolve(lib, "cudnnBackendExecute", &api.Execute, &missing);
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

using BackendDesc = cudnnBackendDescriptor_t;

// One execution plan (never destroyed: plans live for the process's life, as torch's cache).
struct CudnnPlan {
    BackendDesc plan = nullptr;
    int64_t workspace = 0;
    bool benchmarked = false;  // false: the heuristic's first (chosen during graph capture)
};

// Why cuDNN cannot take the problem ("" where it can): its 32-bit element offsets.
inline std::string cudnn_limits(const ConvGeometry& g) {
    const int64_t sizes[3] = {g.N * g.in_pixels() * g.G * g.C, g.N * g.out_pixels() * g.G * g.K,
                              g.G * g.K * g.taps() * g.C};
    for (int64_t v : sizes)
        if (v > INT32_MAX) return "a tensor has more than 2^31 - 1 elements";
    return "";
}

// A cuDNN handle per device and thread (cuDNN's rule: a handle is not shared between threads).
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

// The largest power of two up to 16 that divides every address.
inline int64_t cudnn_alignment(const void* a, const void* b, const void* c) {
    const uintptr_t v = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                        reinterpret_cast<uintptr_t>(c);
    int64_t align = 16;
    while (align > 1 && v % align) align /= 2;
    return align;
}

constexpr int64_t kCudnnX = 'x', kCudnnW = 'w', kCudnnY = 'y';  // the tensors' unique ids

// The finalized operation graph of a problem: x (N, G*C, spatial...), w (G*K, C, filter...),
// y (N, G*K, out...), every one NHWC in memory.
inline int cudnn_graph(const CudnnApi& api, const TdConvProblem& p, const ConvGeometry& g, cudnnHandle_t h,
                       int64_t align, BackendDesc* out) {
    const int spatial = p.ndim == 3 ? 3 : 2;
    const int first = 3 - spatial;  // the geometry's index of cuDNN's first spatial dim
    const cudnnDataType_t type = p.dtype == TD_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    auto set = [&](BackendDesc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t kind, int64_t n,
                   const void* value) { return api.SetAttribute(d, name, kind, n, value); };
    auto tensor = [&](BackendDesc* desc, int64_t uid, int64_t n, int64_t channels, const int64_t* size) -> int {
        int64_t dims[5], strides[5];
        dims[0] = n;
        dims[1] = channels;
        int64_t stride = channels;
        for (int d = spatial - 1; d >= 0; --d) {
            dims[2 + d] = size[first + d];
            strides[2 + d] = stride;
            stride *= size[first + d];
        }
        strides[1] = 1;
        strides[0] = stride;
        const int64_t rank = spatial + 2;
        TD_CUDNN(api, api.CreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, desc), "tensor descriptor");
        TD_CUDNN(api, set(*desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), "tensor data type");
        TD_CUDNN(api, set(*desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims), "tensor dimensions");
        TD_CUDNN(api, set(*desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides), "tensor strides");
        TD_CUDNN(api, set(*desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), "tensor id");
        TD_CUDNN(api, set(*desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), "tensor alignment");
        TD_CUDNN(api, api.Finalize(*desc), "tensor finalize");
        return TD_OK;
    };
    BackendDesc x = nullptr, w = nullptr, y = nullptr, conv = nullptr, op = nullptr, graph = nullptr;
    const int64_t filter_size[3] = {g.fil[0], g.fil[1], g.fil[2]};
    if (int s = tensor(&x, kCudnnX, g.N, g.G * g.C, g.in)) return s;
    if (int s = tensor(&y, kCudnnY, g.N, g.G * g.K, g.out)) return s;
    if (int s = tensor(&w, kCudnnW, g.G * g.K, g.C, filter_size)) return s;
    int64_t pad[3], stride[3], dil[3];
    for (int d = 0; d < spatial; ++d) {
        pad[d] = g.pad[first + d];
        stride[d] = g.stride[first + d];
        dil[d] = g.dil[first + d];
    }
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = spatial;
    TD_CUDNN(api, api.CreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv), "convolution descriptor");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute), "compute type");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode), "mode");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims), "spatial dims");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, pad), "paddings");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, pad), "paddings");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, stride), "strides");
    TD_CUDNN(api, set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, dil), "dilations");
    TD_CUDNN(api, api.Finalize(conv), "convolution finalize");
    // The operation of each direction and its attributes: x (dx), w (dw), y (dy), the
    // convolution, alpha and beta.
    struct OpAttributes {
        cudnnBackendDescriptorType_t kind;
        cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
    };
    static const OpAttributes kOps[3] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
    };
    const OpAttributes& a = kOps[p.base.direction == TD_CONV_FWD ? 0 : p.base.direction == TD_CONV_BWD_DATA ? 1 : 2];
    const float alpha = 1.0f, beta = 0.0f;
    const auto D = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    TD_CUDNN(api, api.CreateDescriptor(a.kind, &op), "operation descriptor");
    TD_CUDNN(api, set(op, a.x, D, 1, &x), "operation x");
    TD_CUDNN(api, set(op, a.w, D, 1, &w), "operation w");
    TD_CUDNN(api, set(op, a.y, D, 1, &y), "operation y");
    TD_CUDNN(api, set(op, a.conv, D, 1, &conv), "operation convolution");
    TD_CUDNN(api, set(op, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha), "operation alpha");
    TD_CUDNN(api, set(op, a.beta, CUDNN_TYPE_FLOAT, 1, &beta), "operation beta");
    TD_CUDNN(api, api.Finalize(op), "operation finalize");
    TD_CUDNN(api, api.CreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph), "graph descriptor");
    TD_CUDNN(api, set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, D, 1, &op), "graph ops");
    TD_CUDNN(api, set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), "graph handle");
    TD_CUDNN(api, api.Finalize(graph), "graph finalize");
    *out = graph;
    return TD_OK;
}

// The execution plans cuDNN's heuristic `mode` proposes for a graph, in its order (at most
// `limit`; configurations that do not finalize are skipped).
inline void cudnn_candidates(const CudnnApi& api, cudnnHandle_t h, BackendDesc graph, cudnnBackendHeurMode_t mode,
                             size_t limit, std::vector<CudnnPlan>* out) {
    BackendDesc heur = nullptr;
    if (api.CreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS) return;
    if (api.SetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) !=
            CUDNN_STATUS_SUCCESS ||
        api.SetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) != CUDNN_STATUS_SUCCESS ||
        api.Finalize(heur) != CUDNN_STATUS_SUCCESS)
        return;
    int64_t count = 0;
    if (api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr) !=
            CUDNN_STATUS_SUCCESS || count <= 0)
        return;
    std::vector<BackendDesc> configs((size_t)count, nullptr);
    for (auto& c : configs) api.CreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c);
    int64_t got = 0;
    if (api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                         configs.data()) != CUDNN_STATUS_SUCCESS)
        return;
    for (int64_t i = 0; i < got && out->size() < limit; ++i) {
        BackendDesc plan = nullptr;
        if (api.CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
        int64_t ws = 0, n = 0;
        if (api.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) != CUDNN_STATUS_SUCCESS ||
            api.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                             &configs[i]) != CUDNN_STATUS_SUCCESS ||
            api.Finalize(plan) != CUDNN_STATUS_SUCCESS ||
            api.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) !=
                CUDNN_STATUS_SUCCESS) {
            api.DestroyDescriptor(plan);
            continue;
        }
        out->push_back(CudnnPlan{plan, ws, false});
    }
}

// Runs one plan on the caller's tensors. The variant pack (the tensors' addresses and the
// workspace, keyed by the graph's unique ids, which every plan shares) is kept per thread and
// reused while the addresses repeat, as they do in a training loop or a benchmark: creating and
// finalizing one costs microseconds of host time on every call otherwise.
inline cudnnStatus_t cudnn_execute(const CudnnApi& api, cudnnHandle_t h, const CudnnPlan& plan, const void* x,
                                   const void* w, const void* y, void* workspace) {
    struct Pack {
        const void* ptrs[4] = {nullptr, nullptr, nullptr, nullptr};
        BackendDesc desc = nullptr;
    };
    static thread_local Pack last;
    const void* key[4] = {x, w, y, workspace};
    if (!last.desc || !std::equal(key, key + 4, last.ptrs)) {
        if (last.desc) api.DestroyDescriptor(last.desc);
        last = Pack{};
        BackendDesc pack = nullptr;
        cudnnStatus_t s = api.CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
        if (s != CUDNN_STATUS_SUCCESS) return s;
        const int64_t uids[3] = {kCudnnX, kCudnnW, kCudnnY};
        void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
        if ((s = api.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = api.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = api.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)) !=
                CUDNN_STATUS_SUCCESS ||
            (s = api.Finalize(pack)) != CUDNN_STATUS_SUCCESS) {
            api.DestroyDescriptor(pack);
            return s;
        }
        std::copy(key, key + 4, last.ptrs);
        last.desc = pack;
    }
    return api.Execute(h, plan.plan, last.desc);
}

constexpr int64_t kCudnnMaxWorkspace = int64_t(1) << 30;

// Keeps the GPU busy for `cycles` clocks. Launched ahead of each timed run, so that the run
// is enqueued while the GPU spins and its events time the GPU alone: on a small layer the
// host's cudnnBackendExecute takes as long as the kernel, and timing it would rank the
// engines by their host overhead.
template <int Unused>
__global__ void cudnn_spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}
constexpr long long kCudnnSpinCycles = 100000;  // about 50 us at 2 GHz

// The fastest of the candidates on the caller's tensors (each run once to warm up, then
// timed five times behind a spin, the median kept); -1 where none runs.
inline long cudnn_fastest(const CudnnApi& api, cudnnHandle_t h, const std::vector<CudnnPlan>& plans,
                          cudaStream_t stream, const void* x, const void* w, const void* y, void* workspace) {
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) return -1;
    long best = -1;
    float best_ms = 0.0f;
    for (size_t i = 0; i < plans.size(); ++i) {
        if (plans[i].workspace > kCudnnMaxWorkspace) continue;
        if (cudnn_execute(api, h, plans[i], x, w, y, workspace) != CUDNN_STATUS_SUCCESS) continue;
        float ms[5];
        bool ok = true;
        for (float& m : ms) {
            cudnn_spin<0><<<1, 1, 0, stream>>>(kCudnnSpinCycles);
            cudaEventRecord(start, stream);
            ok = ok && cudnn_execute(api, h, plans[i], x, w, y, workspace) == CUDNN_STATUS_SUCCESS;
            cudaEventRecord(stop, stream);
            ok = ok && cudaEventSynchronize(stop) == cudaSuccess && cudaEventElapsedTime(&m, start, stop) == cudaSuccess;
        }
        if (!ok) continue;
        std::sort(ms, ms + 5);
        if (best < 0 || ms[2] < best_ms) best = (long)i, best_ms = ms[2];
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGetLastError();  // a candidate's launch failure is not the call's
    return best;
}

// The plan for a problem on this handle and alignment (built on first use, timed on the first
// run outside capture); *out valid for the process's life.
// The plans made so far, keyed by the problem's bytes, then the handle and the alignment.
struct CudnnPlans {
    std::mutex lock;
    std::map<std::string, CudnnPlan> plans;
};

inline CudnnPlans& cudnn_plans() {
    static CudnnPlans cache;
    return cache;
}

// The largest workspace of the plans made for a problem (any handle or alignment); 0 where
// none is made yet.
inline size_t cudnn_known_workspace(const TdConvProblem& p) {
    CudnnPlans& cache = cudnn_plans();
    const std::string prefix(reinterpret_cast<const char*>(&p), sizeof p);
    std::lock_guard<std::mutex> guard(cache.lock);
    int64_t most = 0;
    for (auto it = cache.plans.lower_bound(prefix);
         it != cache.plans.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        most = std::max(most, it->second.workspace);
    return (size_t)most;
}

inline int cudnn_plan(const CudnnApi& api, const TdConvProblem& p, cudnnHandle_t h, cudaStream_t stream,
                      bool capturing, const void* x, const void* w, const void* y, const CudnnPlan** out) {
    CudnnPlans& cache = cudnn_plans();
    std::map<std::string, CudnnPlan>& plans = cache.plans;
    const int64_t align = cudnn_alignment(x, w, y);
    std::string key(reinterpret_cast<const char*>(&p), sizeof p);
    key.append(reinterpret_cast<const char*>(&h), sizeof h);
    key.append(reinterpret_cast<const char*>(&align), sizeof align);
    std::lock_guard<std::mutex> guard(cache.lock);
    auto it = plans.find(key);
    if (it != plans.end() && (it->second.benchmarked || capturing)) return *out = &it->second, TD_OK;
    ConvGeometry g{};
    conv_geometry(p, &g);
    BackendDesc graph = nullptr;
    if (int s = cudnn_graph(api, p, g, h, align, &graph)) return s;
    std::vector<CudnnPlan> candidates;
    cudnn_candidates(api, h, graph, CUDNN_HEUR_MODE_A, capturing ? 1 : 16, &candidates);
    if (candidates.empty()) cudnn_candidates(api, h, graph, CUDNN_HEUR_MODE_FALLBACK, capturing ? 1 : 4, &candidates);
    if (candidates.empty()) return fail(TD_REJECTED, "cuDNN has no engine for this problem");
    long chosen = 0;
    if (!capturing) {
        int64_t most = 0;
        for (const CudnnPlan& c : candidates)
            if (c.workspace <= kCudnnMaxWorkspace) most = std::max(most, c.workspace);
        void* workspace = nullptr;
        if (most)
            if (int s = device::scratch((size_t)most, stream, &workspace)) return s;
        chosen = cudnn_fastest(api, h, candidates, stream, x, w, y, workspace);
        if (chosen < 0) return fail(TD_REJECTED, "none of cuDNN's engines ran this problem");
    }
    CudnnPlan kept = candidates[(size_t)chosen];
    kept.benchmarked = !capturing;
    for (size_t i = 0; i < candidates.size(); ++i)
        if ((long)i != chosen) api.DestroyDescriptor(candidates[i].plan);
    plans[key] = kept;
    *out = &plans[key];
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

    // The workspace of the plans made for the problem (0 before its first run: a plan's size
    // is known once cuDNN has made it). Without a workspace from the caller the run takes the
    // backend's scratch buffer; inside CUDA graph capture, where that cannot grow, a caller
    // whose run is refused for its workspace asks again here (the plan is made by then).
    static size_t workspace_size(const TdConvProblem& p) { return cudnn_known_workspace(p); }

    // in, wei, out: x, w, y (fwd), dx, w, dy (bwd_data), x, dw, dy (bwd_weight).
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
        if (int s = cudnn_plan(*api, p, h, stream, capture != cudaStreamCaptureStatusNone, in, wei, out, &plan))
            return s;
        void* work = nullptr;
        if (plan->workspace) {
            if (ws && ws_bytes >= (size_t)plan->workspace) {
                work = ws;
            } else if (int s = device::scratch((size_t)plan->workspace, stream_ptr, &work)) {
                return s;
            }
        }
        TD_CUDNN(*api, cudnn_execute(*api, h, *plan, in, wei, out, work), "cudnnBackendExecute");
        return TD_OK;
    }
};

}  // namespace td::cuda
