// Element types of the cpu backend: storage type plus conversion to and from fp32.
// bf16 and fp16 round to nearest even on store; fp8 (OCP e4m3fn / e5m2) load via a table.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace td {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);  // one vcvtph2ps where the CPU has F16C
#endif
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        const float v = std::ldexp((float)mant, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t x = float_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (ax >= 0x47800000u) return sign | 0x7c00;  // >= 65536: infinity
    if (ax < 0x38800000u) {                        // below 2^-14: subnormal or zero
        const float scaled = bits_float(ax) * 16777216.0f;  // exact: times 2^24
        return sign | (uint16_t)std::nearbyint(scaled);      // round to nearest even
    }
    uint32_t h = ((((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13));
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return sign | (uint16_t)h;
}

inline float bf16_to_float(uint16_t b) { return bits_float((uint32_t)b << 16); }

inline uint16_t float_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// fp8 decode table: exponent bits E, mantissa bits M, bias B, and whether the top
// exponent is IEEE-like (inf/NaN, e5m2) or finite but for the all-ones NaN (e4m3fn).
template <int E, int M, int B, bool IEEE>
struct Fp8Table {
    float value[256];
    Fp8Table() {
        for (int i = 0; i < 256; ++i) {
            const int sign = i >> 7, exp = (i >> M) & ((1 << E) - 1), mant = i & ((1 << M) - 1);
            float v;
            if (exp == 0) {
                v = std::ldexp((float)mant, 1 - B - M);
            } else if (IEEE && exp == (1 << E) - 1) {
                v = mant ? NAN : INFINITY;
            } else if (!IEEE && exp == (1 << E) - 1 && mant == (1 << M) - 1) {
                v = NAN;
            } else {
                v = std::ldexp(1.0f + (float)mant / (1 << M), exp - B);
            }
            value[i] = sign ? -v : v;
        }
    }
};

inline const float* fp8e4m3_table() { static const Fp8Table<4, 3, 7, false> t; return t.value; }
inline const float* fp8e5m2_table() { static const Fp8Table<5, 2, 15, true> t; return t.value; }

// fp8 encode: round to nearest, ties to even, with saturation (satfinite): a value beyond the
// largest finite one (code max_code: 448 in e4m3fn, 57344 in e5m2) stores that one with the
// value's sign, infinities included; NaN stores NaN (0x7f, the sign kept). The positive codes
// 0..max_code of `table` increase, so a binary search finds the two neighbours.
inline uint8_t float_to_fp8(const float* table, int max_code, float f) {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    if (std::isnan(f)) return sign | 0x7f;
    const float a = std::fabs(f);
    if (a >= table[max_code]) return sign | (uint8_t)max_code;
    int lo = 0, hi = max_code;  // table[lo] <= a < table[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        (table[mid] <= a ? lo : hi) = mid;
    }
    const float below = a - table[lo], above = table[hi] - a;  // exact: neighbours within 2x
    const int code = below < above ? lo : above < below ? hi : (lo & 1 ? hi : lo);
    return sign | (uint8_t)code;
}
inline uint8_t float_to_fp8e4m3(float f) { return float_to_fp8(fp8e4m3_table(), 0x7e, f); }
inline uint8_t float_to_fp8e5m2(float f) { return float_to_fp8(fp8e5m2_table(), 0x7b, f); }

// Element tags. `storage` is the in-memory type; `out` the tag a kernel writes for these inputs.
struct bf16_t {
    using storage = uint16_t;
    using out = bf16_t;
    static float load(storage v) { return bf16_to_float(v); }
    static storage store(float f) { return float_to_bf16(f); }
};
struct fp32_t {
    using storage = float;
    using out = fp32_t;
    static float load(storage v) { return v; }
    static storage store(float f) { return f; }
};
struct fp16_t {
    using storage = uint16_t;
    using out = fp16_t;
    static float load(storage v) { return half_to_float(v); }
    static storage store(float f) { return float_to_half(f); }
};
struct fp8e4m3_t {
    using storage = uint8_t;
    using out = bf16_t;
    static float load(storage v) { return fp8e4m3_table()[v]; }
};
struct fp8e5m2_t {
    using storage = uint8_t;
    using out = bf16_t;
    static float load(storage v) { return fp8e5m2_table()[v]; }
};

}  // namespace td
