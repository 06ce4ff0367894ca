// gpu_helper M N K [--validate]: the reference system's JSON tool. Runs one fp32 GEMM
// (layout rcr) through the legacy ABI of the GEMM library it is linked with and prints
//   {"problem":{...},"kernel":...,"execution":{...},"validation":{...},"status":...}
// Validation compares every output (or 4096 sampled ones on large problems) against a
// float64 reference, with the fp32 tolerance of python/tiledispatch/reference.py:
// |c - ref| <= (8 * 2^-24 * sqrt(K) + 2^-24) * sum_k |a_ik * b_kj|.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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
    const long long v = std::strtoll(text, &end, 10);
    if (!end || *end || v <= 0) return false;
    *out = v;
    return true;
}

int main(int argc, char** argv) {
    if (argc < 4 || argc > 5) return usage();
    int64_t M, N, K;
    if (!parse_size(argv[1], &M) || !parse_size(argv[2], &N) || !parse_size(argv[3], &K)) {
        std::fprintf(stderr, "gpu_helper: M, N and K must be positive integers\n");
        return 2;
    }
    const bool validate = argc == 5 && std::strcmp(argv[4], "--validate") == 0;
    if (argc == 5 && !validate) return usage();

    std::printf("{\"problem\":{\"M\":%lld,\"N\":%lld,\"K\":%lld},", (long long)M, (long long)N, (long long)K);
    char name[256] = "";
    int status = dispatcher_select_kernel(M, N, K, name, sizeof name);
    std::vector<float> a, b, c;
    float ms = 0;
    if (status == TD_OK) {
        try {
            a.resize((size_t)(M * K));
            b.resize((size_t)(K * N));
            c.assign((size_t)(M * N), NAN);
        } catch (...) {
            std::printf("\"kernel\":\"%s\",\"status\":\"error\",\"error\":\"out of host memory\"}\n", name);
            return 1;
        }
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        for (auto& v : a) v = dist(rng);
        for (auto& v : b) v = dist(rng);
        status = dispatcher_run_gemm(a.data(), b.data(), c.data(), M, N, K, &ms);
    }
    if (status != TD_OK) {
        std::printf("\"kernel\":\"%s\",\"status\":\"error\",\"code\":%d,\"error\":\"%s\"}\n", name, status,
                    json_escape(td_last_error()).c_str());
        return 1;
    }
    const double tflops = ms > 0 ? 2.0 * M * N * K / (ms * 1e-3) / 1e12 : 0.0;
    std::printf("\"kernel\":\"%s\",\"execution\":{\"time_ms\":%.6f,\"tflops\":%.6f},", name, ms, tflops);
    if (validate) {
        const double tol = 8.0 * std::ldexp(1.0, -24) * std::sqrt((double)K) + std::ldexp(1.0, -24);
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
