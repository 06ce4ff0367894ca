// Functions every library exports, the error channel and the run-time options.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "dispatcher.hpp"
#include "tiledispatch/options.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __unix__
#include <unistd.h>
#endif

namespace td {

namespace {
thread_local std::string last_error;

// The options as one bit each, so one load reads all of them consistently.
constexpr unsigned kOptionTma = 1, kOptionPdl = 2, kOptionMultiRow = 4, kOptionVendor = 8;
std::atomic<unsigned> option_bits{kOptionTma | kOptionPdl | kOptionMultiRow | kOptionVendor};

// TD_OK when an options field is 0 or 1; TD_ERROR naming it otherwise.
int check_option(const char* field, int32_t value) {
    if (value == 0 || value == 1) return TD_OK;
    return fail(TD_ERROR, std::string("TdOptions.") + field + " is " + std::to_string(value) + "; each field is 0 or 1");
}
}  // namespace

TdOptions options() {
    const unsigned bits = option_bits.load(std::memory_order_relaxed);
    TdOptions out{};
    out.tma = (bits & kOptionTma) ? 1 : 0;
    out.pdl = (bits & kOptionPdl) ? 1 : 0;
    out.multi_row = (bits & kOptionMultiRow) ? 1 : 0;
    out.vendor = (bits & kOptionVendor) ? 1 : 0;
    return out;
}

int fail(int status, const std::string& message) {
    try {
        last_error = message;
    } catch (...) {
    }
    return status;
}

void clear_error() { last_error.clear(); }

#if defined(_OPENMP) && defined(__unix__)
namespace {
// The process that loaded the library. In a process forked from it libgomp's thread pool
// (the parent's threads) is gone, and a parallel region waits for them forever: there the
// cpu kernels run on the calling thread only.
const pid_t loaded_pid = getpid();
}  // namespace
#endif

int host_threads() {
#if defined(_OPENMP) && defined(__unix__)
    if (getpid() != loaded_pid) return 1;
#endif
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int copy_name(const char* name, char* buf, size_t size) {
    if (!buf) return fail(TD_ERROR, "the name buffer is NULL");
    const size_t len = std::strlen(name);
    if (len + 1 > size)
        return fail(TD_ERROR, "the name buffer holds " + std::to_string(size) + " bytes, the name needs " +
                                  std::to_string(len + 1));
    std::memcpy(buf, name, len + 1);
    return TD_OK;
}

}  // namespace td

extern "C" {

TD_API int td_abi_version(void) { return TD_ABI_VERSION; }
TD_API const char* td_library_target(void) { return td::table_target; }
TD_API const char* td_library_op(void) { return td::table_op; }
TD_API const char* td_last_error(void) { return td::last_error.c_str(); }

TD_API int td_get_options(TdOptions* out) {
    td::clear_error();
    if (!out) return td::fail(TD_ERROR, "td_get_options: the options pointer is NULL");
    *out = td::options();
    return TD_OK;
}

TD_API int td_set_options(const TdOptions* in) {
    td::clear_error();
    if (!in) return td::fail(TD_ERROR, "td_set_options: the options pointer is NULL");
    if (int s = td::check_option("tma", in->tma)) return s;
    if (int s = td::check_option("pdl", in->pdl)) return s;
    if (int s = td::check_option("multi_row", in->multi_row)) return s;
    if (int s = td::check_option("vendor", in->vendor)) return s;
    td::option_bits.store((in->tma ? td::kOptionTma : 0u) | (in->pdl ? td::kOptionPdl : 0u) |
                              (in->multi_row ? td::kOptionMultiRow : 0u) | (in->vendor ? td::kOptionVendor : 0u),
                          std::memory_order_relaxed);
    return TD_OK;
}

}
