// Functions every library exports and the error channel.
#include <algorithm>
#include <cmath>
#include <string>

#include "dispatcher.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace td {

namespace {
thread_local std::string last_error;
}

int fail(int status, const std::string& message) {
    try {
        last_error = message;
    } catch (...) {
    }
    return status;
}

void clear_error() { last_error.clear(); }

int host_threads() {
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

}
