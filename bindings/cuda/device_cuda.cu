// The cuda backend's runtime: the CUDA runtime API on the caller's current device.
#include <cuda_runtime.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"

namespace td::device {

static int cuda_fail(cudaError_t err, const char* what) {
    cudaGetLastError();  // clear a sticky-free error so the next call starts clean
    return fail(TD_ERROR, std::string(what) + ": " + cudaGetErrorString(err));
}

#define TD_CUDA(call, what)                                  \
    do {                                                     \
        cudaError_t err_ = (call);                           \
        if (err_ != cudaSuccess) return cuda_fail(err_, what); \
    } while (0)

bool host_is_device() { return false; }

int allocate(void** ptr, size_t bytes) {
    TD_CUDA(cudaMalloc(ptr, bytes ? bytes : 1), "cudaMalloc");
    return TD_OK;
}

void release(void* ptr) {
    if (ptr) cudaFree(ptr);
}

int copy_to_device(void* dst, const void* src, size_t bytes, void* stream) {
    TD_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream), "copy to device");
    return TD_OK;
}

int copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
    TD_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream), "copy to host");
    TD_CUDA(cudaStreamSynchronize((cudaStream_t)stream), "synchronize after copy to host");
    return TD_OK;
}

int synchronize(void* stream) {
    TD_CUDA(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
    return TD_OK;
}

// Without a CUDA device (a machine that only asks the selection, e.g. the leave-one-model-out
// check of bench/zoo.py): TILEDISPATCH_EMULATE_SMS=N, read once, else 1.
static int emulated_multiprocessors() {
    static const int count = [] {
        const char* v = std::getenv("TILEDISPATCH_EMULATE_SMS");
        const long n = v ? std::strtol(v, nullptr, 10) : 0;
        return n >= 1 && n <= 4096 ? (int)n : 1;
    }();
    return count;
}

int multiprocessors() {
    static std::mutex lock;
    static std::map<int, int> by_device;
    static thread_local int last_device = -1, last_count = 0;  // this thread's last answer, no lock
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return emulated_multiprocessors();
    if (device == last_device) return last_count;
    std::lock_guard<std::mutex> guard(lock);
    auto it = by_device.find(device);
    if (it == by_device.end()) {
        int count = 1;
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
        it = by_device.emplace(device, count).first;
    }
    last_device = device;
    last_count = it->second;
    return last_count;
}

int scratch(size_t bytes, void* stream, void** ptr) {
    static std::mutex lock;
    static std::map<std::pair<int, void*>, std::pair<void*, size_t>> buffers;
    int device = 0;
    TD_CUDA(cudaGetDevice(&device), "cudaGetDevice");
    std::lock_guard<std::mutex> guard(lock);
    auto& entry = buffers[{device, stream}];
    if (entry.second < bytes) {
        // Inside CUDA graph capture an allocation would belong to the graph, and this buffer
        // outlives it: the caller passes a workspace instead (td_*_workspace_size gives its size).
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing((cudaStream_t)stream, &capture) == cudaSuccess &&
            capture != cudaStreamCaptureStatusNone)
            return fail(TD_REJECTED, "the kernel needs a workspace of " + std::to_string(bytes) +
                                         " bytes, which cannot be allocated during CUDA graph capture: pass one "
                                         "(its size: td_gemm_workspace_size / td_conv_workspace_size), or run the "
                                         "problem once on this stream before capturing");
        if (entry.first) TD_CUDA(cudaFreeAsync(entry.first, (cudaStream_t)stream), "cudaFreeAsync");
        entry = {nullptr, 0};
        const size_t grown = bytes + bytes / 4;
        TD_CUDA(cudaMallocAsync(&entry.first, grown, (cudaStream_t)stream), "cudaMallocAsync (workspace)");
        entry.second = grown;
    }
    *ptr = entry.first;
    return TD_OK;
}

int Timer::start(void* stream) {
    TD_CUDA(cudaEventCreate((cudaEvent_t*)&begin_), "cudaEventCreate");
    TD_CUDA(cudaEventCreate((cudaEvent_t*)&end_), "cudaEventCreate");
    TD_CUDA(cudaEventRecord((cudaEvent_t)begin_, (cudaStream_t)stream), "cudaEventRecord");
    return TD_OK;
}

int Timer::stop(void* stream, float* ms) {
    TD_CUDA(cudaEventRecord((cudaEvent_t)end_, (cudaStream_t)stream), "cudaEventRecord");
    TD_CUDA(cudaEventSynchronize((cudaEvent_t)end_), "the kernel failed");
    TD_CUDA(cudaEventElapsedTime(ms, (cudaEvent_t)begin_, (cudaEvent_t)end_), "cudaEventElapsedTime");
    return TD_OK;
}

Timer::~Timer() {
    if (begin_) cudaEventDestroy((cudaEvent_t)begin_);
    if (end_) cudaEventDestroy((cudaEvent_t)end_);
}

}  // namespace td::device
