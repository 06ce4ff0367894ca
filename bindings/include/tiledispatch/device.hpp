// What the dispatcher core needs from a backend's runtime: memory, copies, timing and the
// size of the machine. Each library links one implementation (cpu: host memory and a
// steady clock; cuda: the CUDA runtime). Functions return TD_OK or fail() with a message.
#pragma once

#include <cstddef>

namespace td::device {

bool host_is_device();  // true on cpu: host pointers are device pointers
int allocate(void** ptr, size_t bytes);
void release(void* ptr);
int copy_to_device(void* dst, const void* src, size_t bytes, void* stream);
int copy_to_host(void* dst, const void* src, size_t bytes, void* stream);
int synchronize(void* stream);
int multiprocessors();  // SMs of the current device, or host threads

// A reusable scratch buffer of at least `bytes` for work on `stream` (kept per device and
// stream, grown in stream order, never shrunk).
int scratch(size_t bytes, void* stream, void** ptr);

// Times work enqueued on a stream between start() and stop() (stop waits for it).
class Timer {
public:
    int start(void* stream);
    int stop(void* stream, float* ms);
    ~Timer();

private:
    void* begin_ = nullptr;
    void* end_ = nullptr;
    double host_start_ = 0;
};

}  // namespace td::device
