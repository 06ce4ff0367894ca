// Vendor libraries (cuDNN, cuBLASLt) opened at run time: a library built with a vendor family
// loads and runs without the vendor's shared library, whose kernels then decline every
// problem with the reason. Each soname is taken, in this order, from: the process, where it
// is loaded already (torch's copy, say); the folder the build found the headers' library in
// (TD_<VENDOR>_LIBDIR: the wheel torch installed, on a machine like the build's); the
// loader's search path. The first two come before the search path so that a system copy of
// another version does not shadow the one torch was built against.
#pragma once

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

namespace td::vendor {

// A shared library opened once: `sonames` are tried in order, each by name and then in
// `libdir`. symbol(name) looks the name up in each opened library in order.
class Library {
  public:
    Library(std::vector<std::string> sonames, std::string libdir)
        : sonames_(std::move(sonames)), libdir_(std::move(libdir)) {}

    // true where at least the first soname opened; *why says what failed otherwise.
    bool open(std::string* why) {
        std::call_once(once_, [this] {
            for (const std::string& soname : sonames_) {
                void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
                if (!handle && !libdir_.empty())
                    handle = dlopen((libdir_ + "/" + soname).c_str(), RTLD_NOW | RTLD_GLOBAL);
                if (!handle) handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_GLOBAL);
                if (handle) {
                    handles_.push_back(handle);
                } else if (handles_.empty()) {
                    const char* err = dlerror();
                    error_ = "cannot open " + soname + (libdir_.empty() ? "" : " (nor in " + libdir_ + ")") +
                             (err ? std::string(": ") + err : std::string());
                    return;
                }
            }
        });
        if (handles_.empty() && why) *why = error_;
        return !handles_.empty();
    }

    void* symbol(const char* name) const {
        for (void* handle : handles_)
            if (void* p = dlsym(handle, name)) return p;
        return nullptr;
    }

  private:
    std::vector<std::string> sonames_;
    std::string libdir_;
    std::once_flag once_;
    std::vector<void*> handles_;
    std::string error_;
};

// Resolves `name` into `*fn`; false (naming it in *missing) where no opened library has it.
template <class Fn>
bool resolve(const Library& lib, const char* name, Fn* fn, std::string* missing) {
    *fn = reinterpret_cast<Fn>(lib.symbol(name));
    if (!*fn) *missing += std::string(missing->empty() ? "" : ", ") + name;
    return *fn != nullptr;
}

}  // namespace td::vendor
