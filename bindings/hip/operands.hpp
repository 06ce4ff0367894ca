// hip backend: how the engine sees its operands, shared by the GPU kernels and the host
// emulator. a(batch, m, k), b(batch, k, n) return raw element bits (0 outside the
// problem: padding), store(batch, m, n, v) writes one output element.
#pragma once

#include <cstdint>

#include "hip/mfma_engine.hpp"

namespace td::hip {

// GEMM: C (M x N, row-major) = alpha * A (M x K) * B (K x N); layout code as enum td_layout
// (rcr 0, rrr 1, crr 2, ccr 3: A, B row- or column-major).
template <int DT, int LayoutCode>
struct GemmOps {
    using S = typename Storage<DT>::type;
    static constexpr bool a_row = LayoutCode == 0 || LayoutCode == 1;
    static constexpr bool b_row = LayoutCode == 1 || LayoutCode == 2;
    const S* A;
    const S* B;
    uint16_t* C;
    int64_t M, N, K, lda, ldb, ldc;

    TD_HD S a(int, int64_t m, int64_t k) const {
        if (m >= M || k >= K) return 0;
        return a_row ? A[m * lda + k] : A[k * lda + m];
    }
    TD_HD S b(int, int64_t k, int64_t n) const {
        if (k >= K || n >= N) return 0;
        return b_row ? B[k * ldb + n] : B[n * ldb + k];
    }
    TD_HD void store(int, int64_t m, int64_t n, float v) const { C[m * ldc + n] = encode_out<DT>(v); }
};

// Grouped convolution as implicit GEMM per group (batch = group), channels-last:
//   x[N][Di][Hi][Wi][G][C]   w[G][K][Z][Y][X][C]   y[N][Do][Ho][Wo][G][K]
//   fwd        M = N*out pixels, N = K,          K = taps*C       A = gather(x),  B = w
//   bwd_data   M = N*in pixels,  N = C,          K = taps*K       A = gather(dy), B = w
//   bwd_weight M = K,            N = taps*C,     K = N*out pixels A = dy^T,       B = gather(x)
struct ConvShape {
    int64_t n, g, c, k;
    int64_t in[3], fil[3], out[3], stride[3], pad[3], dil[3];  // d, h, w
    TD_HD int64_t in_pixels() const { return in[0] * in[1] * in[2]; }
    TD_HD int64_t out_pixels() const { return out[0] * out[1] * out[2]; }
    TD_HD int64_t taps() const { return fil[0] * fil[1] * fil[2]; }
};

template <int DT, int Direction>
struct ConvOps {
    using S = typename Storage<DT>::type;
    ConvShape s;
    const S* x;   // read in fwd and bwd_weight
    const S* w;   // read in fwd and bwd_data
    const S* dy;  // read in bwd_data and bwd_weight
    uint16_t* dst;
    int64_t M, N, K;

    TD_HD static ConvOps make(const ConvShape& s, const S* x, const S* w, const S* dy, uint16_t* dst) {
        ConvOps o{s, x, w, dy, dst, 0, 0, 0};
        if (Direction == 0) { o.M = s.n * s.out_pixels(); o.N = s.k; o.K = s.taps() * s.c; }
        else if (Direction == 1) { o.M = s.n * s.in_pixels(); o.N = s.c; o.K = s.taps() * s.k; }
        else { o.M = s.k; o.N = s.taps() * s.c; o.K = s.n * s.out_pixels(); }
        return o;
    }

    TD_HD static void decode3(int64_t idx, const int64_t size[3], int64_t c[3]) {
        c[2] = idx % size[2];
        idx /= size[2];
        c[1] = idx % size[1];
        c[0] = idx / size[1];
    }

    // x at output pixel opix (flat n * out_pixels + o) through tap, channel c; 0 in the padding.
    TD_HD S gather_x(int g, int64_t opix, int64_t tap, int64_t c) const {
        const int64_t n = opix / s.out_pixels();
        int64_t o[3], f[3];
        decode3(opix % s.out_pixels(), s.out, o);
        decode3(tap, s.fil, f);
        int64_t pos[3];
        for (int d = 0; d < 3; ++d) {
            pos[d] = o[d] * s.stride[d] - s.pad[d] + f[d] * s.dil[d];
            if (pos[d] < 0 || pos[d] >= s.in[d]) return 0;
        }
        return x[((((n * s.in[0] + pos[0]) * s.in[1] + pos[1]) * s.in[2] + pos[2]) * s.g + g) * s.c + c];
    }

    // dy reaching input pixel ipix through tap, output channel k; 0 where none does.
    TD_HD S gather_dy(int g, int64_t ipix, int64_t tap, int64_t k) const {
        const int64_t n = ipix / s.in_pixels();
        int64_t i[3], f[3], o[3];
        decode3(ipix % s.in_pixels(), s.in, i);
        decode3(tap, s.fil, f);
        for (int d = 0; d < 3; ++d) {
            const int64_t num = i[d] + s.pad[d] - f[d] * s.dil[d];
            if (num < 0 || num % s.stride[d]) return 0;
            o[d] = num / s.stride[d];
            if (o[d] >= s.out[d]) return 0;
        }
        return dy[((((n * s.out[0] + o[0]) * s.out[1] + o[1]) * s.out[2] + o[2]) * s.g + g) * s.k + k];
    }

    TD_HD S a(int g, int64_t m, int64_t kk) const {
        if (m >= M || kk >= K) return 0;
        if (Direction == 0) return gather_x(g, m, kk / s.c, kk % s.c);
        if (Direction == 1) return gather_dy(g, m, kk / s.k, kk % s.k);
        return dy[(kk * s.g + g) * s.k + m];
    }
    TD_HD S b(int g, int64_t kk, int64_t n) const {
        if (kk >= K || n >= N) return 0;
        if (Direction == 0) return w[(g * s.k + n) * s.taps() * s.c + kk];  // w[g][n][tap][c], kk = (tap, c)
        if (Direction == 1) return w[((g * s.k + kk % s.k) * s.taps() + kk / s.k) * s.c + n];
        return gather_x(g, kk, n / s.c, n % s.c);
    }
    TD_HD void store(int g, int64_t m, int64_t n, float v) const {
        int64_t at;
        if (Direction == 0) at = (m * s.g + g) * s.k + n;
        else if (Direction == 1) at = (m * s.g + g) * s.c + n;
        else at = (g * s.k + m) * s.taps() * s.c + n;
        dst[at] = encode_out<DT>(v);
    }
};

}  // namespace td::hip
