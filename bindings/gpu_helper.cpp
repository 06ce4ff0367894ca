// gpu_helper M N K [--validate]: the reference system's JSON tool. Runs one GEMM (layout
// rcr, element type td_legacy_dtype(): fp32 on cpu, bf16 on GPUs) through the legacy ABI
// of the GEMM library it is linked with (host pointers) and prints
//   {"problem":{...},"kernel":...,"execution":{...},"validation":{...},"status":...}
// Validation compares every output (or 4096 sampled ones on large problems) against a
// float64 reference on the same quantized inputs, with the tolerance of
// python/tiledispatch/reference.py: |c - ref| <= (8 * 2^-24 * sqrt(K) + u_out) * sum_k |a_ik b_kj|,
// u_out the unit roundoff of the output type (2^-24 fp32, 2^-11 fp16, 2^-8 bf16).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/dtypes.hpp"
#include "tiledispatch/tiledispatch.h"

static std::string json_escape(const char* s) {
    std::string out;
    for (; s && *s; ++s) {
        if (*s == '"' || *s == '\\') out += '\\';
        if ((unsigned char)*s < 0x20) continue;
        out += *s;
    }
    return out;
}

static int usage() {
    std::fprintf(stderr, "usage: gpu_helper M N K [--validate]\n");
    return 2;
}

static bool parse_size(const char* text, int64_t* out) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (!end || end == text || *end || errno == ERANGE || v <= 0) return false;
    *out = v;
    return true;
}

// The most elements A, B and C may hold together: the host buffers (fp32 copies plus the
// 16-bit storage) stay below about 6 GiB.
static const int64_t kMaxElements = int64_t(1) << 30;

// The JSON error on stdout, the message on stderr; returns the exit code.
static int arg_error(const std::string& message, int code) {
    std::fprintf(stderr, "gpu_helper: %s\n", message.c_str());
    std::printf("{\"status\":\"error\",\"code\":%d,\"error\":\"%s\"}\n", TD_ERROR,
                json_escape(message.c_str()).c_str());
    return code;
}

// Whether M*K + K*N + M*N fits in kMaxElements (no product may wrap on the way).
static bool sizes_fit(int64_t M, int64_t N, int64_t K) {
    const int64_t cap = kMaxElements;
    if (M > cap || N > cap || K > cap) return false;
    if (M > cap / K || K > cap / N || M > cap / N) return false;
    return M * K + K * N + M * N <= cap;
}

int main(int argc, char** argv) {
    if (argc < 4 || argc > 5) return usage();
    int64_t M, N, K;
    if (!parse_size(argv[1], &M) || !parse_size(argv[2], &N) || !parse_size(argv[3], &K))
        return arg_error(std::string("M, N and K must be positive integers below 2^63 (got ") + argv[1] + " " +
                         argv[2] + " " + argv[3] + ")", 2);
    if (!sizes_fit(M, N, K))
        return arg_error("the problem is too large: M*K + K*N + M*N must be at most " +
                         std::to_string(kMaxElements) + " elements (got M=" + std::to_string(M) + " N=" +
                         std::to_string(N) + " K=" + std::to_string(K) + ")", 1);
    const bool validate = argc == 5 && std::strcmp(argv[4], "--validate") == 0;
    if (argc == 5 && !validate) return usage();

    static const char* dtype_names[] = {"fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"};
    std::printf("{\"problem\":{\"M\":%lld,\"N\":%lld,\"K\":%lld,\"dtype\":\"%s\"},", (long long)M, (long long)N,
                (long long)K, dtype_names[td_legacy_dtype()]);
    char name[256] = "";
    int status = dispatcher_select_kernel(M, N, K, name, sizeof name);
    const int dtype = td_legacy_dtype();
    const bool wide = dtype == TD_FP32;
    std::vector<float> a, b, c;             // the quantized values, as float
    std::vector<uint16_t> a16, b16, c16;    // their 16-bit storage for fp16 / bf16
    float ms = 0;
    if (status == TD_OK) {
        try {
            a.resize((size_t)(M * K));
            b.resize((size_t)(K * N));
            c.assign((size_t)(M * N), NAN);
            if (!wide) {
                a16.resize(a.size());
                b16.resize(b.size());
                c16.assign(c.size(), 0x7fc0);
            }
        } catch (...) {
            std::printf("\"kernel\":\"%s\",\"status\":\"error\",\"error\":\"out of host memory\"}\n", name);
            return 1;
        }
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        auto quantize = [&](std::vector<float>& v, std::vector<uint16_t>& bits) {
            for (size_t i = 0; i < v.size(); ++i) {
                v[i] = dist(rng);
                if (dtype == TD_BF16) { bits[i] = td::float_to_bf16(v[i]); v[i] = td::bf16_to_float(bits[i]); }
                if (dtype == TD_FP16) { bits[i] = td::float_to_half(v[i]); v[i] = td::half_to_float(bits[i]); }
            }
        };
        quantize(a, a16);
        quantize(b, b16);
        if (wide) {
            status = dispatcher_run_gemm(a.data(), b.data(), c.data(), M, N, K, &ms);
        } else {
            status = dispatcher_run_gemm(a16.data(), b16.data(), c16.data(), M, N, K, &ms);
            for (size_t i = 0; i < c.size(); ++i)
                c[i] = dtype == TD_BF16 ? td::bf16_to_float(c16[i]) : td::half_to_float(c16[i]);
        }
    }
    if (status != TD_OK) {
        std::printf("\"kernel\":\"%s\",\"status\":\"error\",\"code\":%d,\"error\":\"%s\"}\n", name, status,
                    json_escape(td_last_error()).c_str());
        return 1;
    }
    const double tflops = ms > 0 ? 2.0 * M * N * K / (ms * 1e-3) / 1e12 : 0.0;
    std::printf("\"kernel\":\"%s\",\"execution\":{\"time_ms\":%.6f,\"tflops\":%.6f},", name, ms, tflops);
    if (validate) {
        const double u_out = std::ldexp(1.0, dtype == TD_FP32 ? -24 : dtype == TD_FP16 ? -11 : -8);
        const double tol = 8.0 * std::ldexp(1.0, -24) * std::sqrt((double)K) + u_out;
        const bool sample = (double)M * N * K > 4.0e9;
        const int64_t count = sample ? 4096 : M * N;
        std::mt19937_64 pick(99);
        int64_t good = 0;
        double max_error = 0;
        for (int64_t s = 0; s < count; ++s) {
            const int64_t idx = sample ? (int64_t)(pick() % (uint64_t)(M * N)) : s;
            const int64_t i = idx / N, j = idx % N;
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double prod = (double)a[i * K + k] * b[j * K + k];  // B column-major: b[j][k]
                ref += prod;
                mag += std::fabs(prod);
            }
            const double err = std::fabs((double)c[idx] - ref);
            if (err > max_error || std::isnan(err)) max_error = std::isnan(err) ? INFINITY : err;
            if (err <= tol * mag + 1e-30) ++good;
        }
        const double accuracy = 100.0 * (double)good / (double)count;
        std::printf("\"validation\":{\"accuracy\":%.4f,\"max_error\":%.6g,\"checked\":%lld},", accuracy,
                    max_error, (long long)count);
        if (good != count) {
            std::printf("\"status\":\"error\",\"error\":\"validation failed\"}\n");
            return 1;
        }
    }
    std::printf("\"status\":\"success\"}\n");
    return 0;
}
