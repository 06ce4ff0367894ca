// Overflow-checked size arithmetic for the checks at the C boundary (plain C++17: the
// CUDA and HIP libraries include it too).
#pragma once

#include <cstdint>

namespace td {

// The most workers (cpu Stream-K) or K slices (split_k) a caller may ask for: above it a
// problem is refused with TD_ERROR; every workspace sized by a split count stays bounded.
constexpr int64_t kMaxSplits = 4096;

// The largest byte count a size check lets through: what a pointer difference can hold.
constexpr int64_t kMaxBytes = INT64_MAX;

// *out = a * b for a, b >= 0; false (out untouched) when the product exceeds INT64_MAX.
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) {
    if (a < 0 || b < 0) return false;
    if (a != 0 && b > INT64_MAX / a) return false;
    *out = a * b;
    return true;
}

// *out = a + b for a, b >= 0; false when the sum exceeds INT64_MAX.
inline bool checked_add(int64_t a, int64_t b, int64_t* out) {
    if (a < 0 || b < 0 || b > INT64_MAX - a) return false;
    *out = a + b;
    return true;
}

}  // namespace td
