// The hip backend's runtime: the HIP runtime API (ROCm), host side only on the caller's current device.
#include <hip/hip_runtime_api.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"

namespace td::device {

static int hip_fail(hipError_t err, const char* what) {
    (void)hipGetLastError();  // clear a sticky-free error so the next call starts clean
    return fail(TD_ERROR, std::string(what) + ": " + hipGetErrorString(err));
}

#define TD_HIP(call, what)                                  \
    do {                                                     \
        hipError_t err_ = (call);                           \
        if (err_ != hipSuccess) return hip_fail(err_, what); \
    } while (0)

bool host_is_device() { return false; }

int allocate(void** ptr, size_t bytes) {
    TD_HIP(hipMalloc(ptr, bytes ? bytes : 1), "hipMalloc");
    return TD_OK;
}

void release(void* ptr) {
    if (ptr) (void)hipFree(ptr);
}

int copy_to_device(void* dst, const void* src, size_t bytes, void* stream) {
    TD_HIP(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, (hipStream_t)stream), "copy to device");
    return TD_OK;
}

int copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
    TD_HIP(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, (hipStream_t)stream), "copy to host");
    TD_HIP(hipStreamSynchronize((hipStream_t)stream), "synchronize after copy to host");
    return TD_OK;
}

int synchronize(void* stream) {
    TD_HIP(hipStreamSynchronize((hipStream_t)stream), "hipStreamSynchronize");
    return TD_OK;
}

int multiprocessors() {
    static std::mutex lock;
    static std::map<int, int> by_device;
    int device = 0;
    if (hipGetDevice(&device) != hipSuccess) return 1;
    std::lock_guard<std::mutex> guard(lock);
    auto it = by_device.find(device);
    if (it != by_device.end()) return it->second;
    int count = 1;
    (void)hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount, device);
    by_device[device] = count;
    return count;
}

int scratch(size_t bytes, void* stream, void** ptr) {
    static std::mutex lock;
    static std::map<std::pair<int, void*>, std::pair<void*, size_t>> buffers;
    int device = 0;
    TD_HIP(hipGetDevice(&device), "hipGetDevice");
    std::lock_guard<std::mutex> guard(lock);
    auto& entry = buffers[{device, stream}];
    if (entry.second < bytes) {
        if (entry.first) TD_HIP(hipFreeAsync(entry.first, (hipStream_t)stream), "hipFreeAsync");
        entry = {nullptr, 0};
        const size_t grown = bytes + bytes / 4;
        TD_HIP(hipMallocAsync(&entry.first, grown, (hipStream_t)stream), "hipMallocAsync (workspace)");
        entry.second = grown;
    }
    *ptr = entry.first;
    return TD_OK;
}

int Timer::start(void* stream) {
    TD_HIP(hipEventCreate((hipEvent_t*)&begin_), "hipEventCreate");
    TD_HIP(hipEventCreate((hipEvent_t*)&end_), "hipEventCreate");
    TD_HIP(hipEventRecord((hipEvent_t)begin_, (hipStream_t)stream), "hipEventRecord");
    return TD_OK;
}

int Timer::stop(void* stream, float* ms) {
    TD_HIP(hipEventRecord((hipEvent_t)end_, (hipStream_t)stream), "hipEventRecord");
    TD_HIP(hipEventSynchronize((hipEvent_t)end_), "the kernel failed");
    TD_HIP(hipEventElapsedTime(ms, (hipEvent_t)begin_, (hipEvent_t)end_), "hipEventElapsedTime");
    return TD_OK;
}

Timer::~Timer() {
    if (begin_) (void)hipEventDestroy((hipEvent_t)begin_);
    if (end_) (void)hipEventDestroy((hipEvent_t)end_);
}

}  // namespace td::device
