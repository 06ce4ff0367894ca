// The cpu backend's runtime: host memory, memcpy, a steady clock, OpenMP threads.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"

namespace td::device {

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool host_is_device() { return true; }

int allocate(void** ptr, size_t bytes) {
    *ptr = std::malloc(bytes ? bytes : 1);
    return *ptr ? TD_OK : fail(TD_ERROR, "out of host memory");
}

void release(void* ptr) { std::free(ptr); }

int copy_to_device(void* dst, const void* src, size_t bytes, void*) {
    std::memcpy(dst, src, bytes);
    return TD_OK;
}

int copy_to_host(void* dst, const void* src, size_t bytes, void*) {
    std::memcpy(dst, src, bytes);
    return TD_OK;
}

int synchronize(void*) { return TD_OK; }
int multiprocessors() { return host_threads(); }

int scratch(size_t, void*, void** ptr) {
    *ptr = nullptr;  // cpu kernels allocate their own workspace when none is given
    return TD_OK;
}

int Timer::start(void*) {
    host_start_ = now_ms();
    return TD_OK;
}

int Timer::stop(void*, float* ms) {
    *ms = (float)(now_ms() - host_start_);
    return TD_OK;
}

Timer::~Timer() = default;

}  // namespace td::device
