// Convolution geometry shared by every backend: the problem struct turned into sizes,
// with the output size and the checks that make a problem well formed.
#pragma once

#include <cstdint>
#include <string>

#include "tiledispatch/checked.hpp"
#include "tiledispatch/tiledispatch.h"

namespace td {

struct ConvGeometry {
    int64_t N, G, C, K;
    int64_t in[3], fil[3], out[3], stride[3], pad[3], dil[3];  // order d, h, w
    int64_t in_pixels() const { return in[0] * in[1] * in[2]; }
    int64_t out_pixels() const { return out[0] * out[1] * out[2]; }
    int64_t taps() const { return fil[0] * fil[1] * fil[2]; }
};

// Fills g from the problem; returns an empty string or why the problem is malformed.
inline std::string conv_geometry(const TdConvProblem& p, ConvGeometry* g) {
    const ConvProblemC& b = p.base;
    if (p.ndim < 1 || p.ndim > 3) return "ndim must be 1, 2 or 3";
    if (b.N <= 0 || b.G <= 0 || b.C <= 0 || b.K <= 0) return "N, G, C and K must be positive";
    g->N = b.N; g->G = b.G; g->C = b.C; g->K = b.K;
    const int in[3] = {b.input_d, b.input_h, b.input_w}, fil[3] = {b.filter_z, b.filter_y, b.filter_x};
    const int st[3] = {b.stride_d, b.stride_h, b.stride_w}, pad[3] = {b.pad_d, b.pad_h, b.pad_w};
    const int dil[3] = {b.dilation_d, b.dilation_h, b.dilation_w};
    for (int d = 0; d < 3; ++d) {
        const bool used = d >= 3 - p.ndim;
        if (!used) {
            if ((in[d] > 1 || fil[d] > 1))
                return "a spatial dimension beyond ndim has a size above 1";
            g->in[d] = g->fil[d] = g->stride[d] = g->dil[d] = 1; g->pad[d] = 0; g->out[d] = 1;
            continue;
        }
        if (in[d] <= 0 || fil[d] <= 0) return "input and filter sizes must be positive";
        if (st[d] <= 0 || dil[d] <= 0) return "stride and dilation must be positive";
        if (pad[d] < 0) return "padding must not be negative";
        g->in[d] = in[d]; g->fil[d] = fil[d]; g->stride[d] = st[d]; g->pad[d] = pad[d]; g->dil[d] = dil[d];
        const int64_t span = (int64_t)dil[d] * (fil[d] - 1) + 1;
        const int64_t padded = (int64_t)in[d] + 2 * (int64_t)pad[d];
        if (padded < span) return "the filter is larger than the padded input";
        g->out[d] = (padded - span) / st[d] + 1;
        if (g->out[d] < 1) return "the output size is below 1";
    }
    // Pixel counts and every tensor's size in bytes (8 per element at most) must fit in int64.
    int64_t in_px = 1, out_px = 1, taps = 1, t;
    for (int d = 0; d < 3; ++d)
        if (!checked_mul(in_px, g->in[d], &in_px) || !checked_mul(out_px, g->out[d], &out_px) ||
            !checked_mul(taps, g->fil[d], &taps))
            return "the pixel count overflows int64";
    const int64_t tensors[3][4] = {{g->N, in_px, g->G, g->C}, {g->N, out_px, g->G, g->K}, {g->G, g->K, g->C, taps}};
    for (const auto& dims : tensors) {
        t = 8;
        for (int64_t v : dims)
            if (!checked_mul(t, v, &t)) return "a tensor's size overflows int64 (the problem is too large)";
    }
    if (!checked_mul(g->N * out_px, g->G * g->K, &t) || !checked_mul(t, g->C, &t) || !checked_mul(t, taps, &t))
        return "the operation count overflows int64 (the problem is too large)";
    return "";
}

// Batch slices of a dense bwd_weight cut along the batch (CUTLASS implicit wgrad with a
// split, bindings/cuda/conv_implicit.cuh; the cost model in conv_abi.cpp uses the same
// count). One launch has `ctas` CTAs: the GEMM view's output tiles (K x taps*C), each
// side rounded up to the cluster. The caller's split_k where given; else one slice where
// the CTAs fill 45% of the SMs or more, otherwise the most slices whose CTAs all run in one
// wave (one CTA per SM: CUTLASS's stages fill shared memory), at most max_split and at most
// one image per slice. H200, 128x128 tiles (bench/RESULTS.md): 3x3 256->256 (36 CTAs) 119
// us unsplit, 71 in 2 slices, 55.5 in 3, 81 in 4 (two waves); 1x1 512->2048 (64 CTAs)
// 35.9 us unsplit, 31 in 2, but 25.3 unsplit with 64x128 tiles (128 CTAs). Where one slice
// fills 45%, a smaller unsplit tile fills the rest without the partials, so the split
// variant stays at one slice there (and ranks behind it in the cost model).
inline int64_t implicit_wgrad_ctas(const ConvGeometry& g, int tm, int tn, int cm, int cn) {
    const int64_t m = (g.K + tm - 1) / tm, n = (g.taps() * g.C + tn - 1) / tn;
    return (m + cm - 1) / cm * cm * ((n + cn - 1) / cn * cn);
}

inline int implicit_wgrad_slices(const ConvGeometry& g, int tm, int tn, int cm, int cn, int max_split,
                                 int split_k, int sms) {
    if (max_split <= 1) return 1;
    if (split_k > 0) return split_k;
    const int64_t ctas = implicit_wgrad_ctas(g, tm, tn, cm, cn);
    if (ctas * 100 >= 45LL * sms) return 1;
    int64_t s = sms / ctas;
    if (s > max_split) s = max_split;
    if (s > g.N) s = g.N;
    return s < 1 ? 1 : (int)s;
}

// Decodes a flat pixel index over sizes s[3] into coordinates.
inline void decode3(int64_t idx, const int64_t s[3], int64_t c[3]) {
    c[2] = idx % s[2]; idx /= s[2];
    c[1] = idx % s[1];
    c[0] = idx / s[1];
}

}  // namespace td
