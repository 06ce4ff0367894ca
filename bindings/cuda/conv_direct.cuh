// cuda backend: direct grouped convolution for small channel counts per group (depthwise,
// ResNeXt-style groups, Mamba-style causal conv1d), every direction, 1D/2D/3D.
//
// Memory-bound by design: channels-last tensors, 16-byte vector loads along the channels,
// register tiling over output pixels along W, no im2col buffer, fp32 accumulation.
//   input  x[N][Di][Hi][Wi][G][C]   weight w[G][K][Z][Y][X][C]   output y[N][Do][Ho][Wo][G][K]
// Lower ranks use the same code with the leading spatial sizes 1 (conv_geometry).
//
// Knobs fixed at compile time (all in the variant's name): element type, direction, CPG
// (input = output channels per group; 0: a generic kernel with run-time C and K, one
// output element per thread), PW (output pixels per thread along W), VC (channels per
// thread: VC / CPG whole groups), THREADS (per block).
//   fwd        thread = (n, od, oh, PW output pixels along W, VC output channels)
//   bwd_data   thread = (n, id, ih, PW input pixels along W, VC input channels)
//   bwd_weight thread = (VC/CPG groups x KT output channels x CPG input channels, one tap)
//              over a slice of the output pixels; the slices' fp32 partial sums go to the
//              workspace and a second kernel adds them in a fixed order (deterministic).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/launch.cuh"
#include "dispatcher.hpp"
#include "tiledispatch/conv_geometry.hpp"
#include "tiledispatch/device.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::cuda {

template <int DType> struct ConvElement;
template <> struct ConvElement<TD_FP16> { using T = __half; };
template <> struct ConvElement<TD_BF16> { using T = __nv_bfloat16; };

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// A register array of fp32 sums set to zero (unrolled: the array stays in registers).
template <int A, int B, int C>
__device__ __forceinline__ void zero_sums(float (&acc)[A][B][C]) {
#pragma unroll
    for (int i = 0; i < A; ++i)
#pragma unroll
        for (int j = 0; j < B; ++j)
#pragma unroll
            for (int v = 0; v < C; ++v) acc[i][j][v] = 0.f;
}

// Sizes on the device: 32-bit coordinates, 64-bit offsets.
struct DeviceGeometry {
    int N, G, C, K;
    int in[3], fil[3], out[3], stride[3], pad[3], dil[3];
    int taps;
};

inline DeviceGeometry device_geometry(const ConvGeometry& g) {
    DeviceGeometry d{};
    d.N = (int)g.N; d.G = (int)g.G; d.C = (int)g.C; d.K = (int)g.K;
    for (int i = 0; i < 3; ++i) {
        d.in[i] = (int)g.in[i]; d.fil[i] = (int)g.fil[i]; d.out[i] = (int)g.out[i];
        d.stride[i] = (int)g.stride[i]; d.pad[i] = (int)g.pad[i]; d.dil[i] = (int)g.dil[i];
    }
    d.taps = (int)g.taps();
    return d;
}

// VC consecutive elements (16-byte aligned, VC a multiple of 8) as floats.
template <int VC, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[VC]) {
    static_assert(VC % 8 == 0, "16-byte vectors of 2-byte elements");
#pragma unroll
    for (int i = 0; i < VC / 8; ++i) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + i);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i * 8 + j] = to_float(e[j]);
    }
}

// Raw 16-byte vectors kept in registers (a window along W), converted where used.
template <int VC>
struct RawVec {
    uint4 q[VC / 8];
};

template <int VC, class T>
__device__ __forceinline__ RawVec<VC> load_raw(const T* p) {
    RawVec<VC> r;
#pragma unroll
    for (int i = 0; i < VC / 8; ++i) r.q[i] = __ldg(reinterpret_cast<const uint4*>(p) + i);
    return r;
}

template <int VC>
__device__ __forceinline__ RawVec<VC> zero_raw() {
    RawVec<VC> r;
#pragma unroll
    for (int i = 0; i < VC / 8; ++i) r.q[i] = make_uint4(0, 0, 0, 0);
    return r;
}

template <int VC, class T>
__device__ __forceinline__ void raw_to_float(const RawVec<VC>& r, float (&v)[VC]) {
#pragma unroll
    for (int i = 0; i < VC / 8; ++i) {
        const T* e = reinterpret_cast<const T*>(&r.q[i]);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[i * 8 + j] = to_float(e[j]);
    }
}

// The window fast path (stride 1, dilation 1 along W, filter width up to kMaxX): a thread
// loads the PW + X - 1 input vectors of a filter row once and reuses them for every tap.
constexpr int kMaxX = 7;
template <int CPG, int VC, int PW>
constexpr bool use_window() { return VC * CPG <= 64 && (PW + kMaxX - 1) * VC <= 128; }

template <int VC, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&v)[VC]) {
#pragma unroll
    for (int i = 0; i < VC / 8; ++i) {
        uint4 raw;
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int j = 0; j < 8; ++j) e[j] = from_float<T>(v[i * 8 + j]);
        reinterpret_cast<uint4*>(p)[i] = raw;
    }
}

// The weights, transposed once per call into fp32 wt[tap][k][c][g] (groups fastest), so
// that the threads of a warp, which hold consecutive groups, read consecutive addresses.
template <class T>
__global__ void conv_transpose_weights(DeviceGeometry g, const T* __restrict__ w, float* __restrict__ wt) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)g.G * g.K * g.taps * g.C) return;
    int64_t r = e;
    const int c = (int)(r % g.C); r /= g.C;
    const int tap = (int)(r % g.taps); r /= g.taps;
    const int k = (int)(r % g.K);
    const int grp = (int)(r / g.K);
    wt[(((int64_t)tap * g.K + k) * g.C + c) * g.G + grp] = to_float(w[e]);
}

// Weights of one tap for GB groups: wv[j][k][c] = w[g0 + j][k][tap][c] from wt.
template <int GB, int CPG>
__device__ __forceinline__ void load_tap_weights(const float* __restrict__ wt, int G, int g0, int tap,
                                                 float (&wv)[GB][CPG][CPG]) {
#pragma unroll
    for (int k = 0; k < CPG; ++k)
#pragma unroll
        for (int c = 0; c < CPG; ++c) {
            const float* src = wt + ((int64_t)(tap * CPG + k) * CPG + c) * G + g0;
            if constexpr (GB % 4 == 0) {
#pragma unroll
                for (int j = 0; j < GB; j += 4) {
                    const float4 v = __ldg(reinterpret_cast<const float4*>(src + j));
                    wv[j][k][c] = v.x; wv[j + 1][k][c] = v.y; wv[j + 2][k][c] = v.z; wv[j + 3][k][c] = v.w;
                }
            } else if constexpr (GB == 2) {
                const float2 v = __ldg(reinterpret_cast<const float2*>(src));
                wv[0][k][c] = v.x; wv[1][k][c] = v.y;
            } else {
#pragma unroll
                for (int j = 0; j < GB; ++j) wv[j][k][c] = __ldg(src + j);
            }
        }
}

// ---------------------------------------------------------------- forward
// Registers capped so that several blocks fit an SM: 128 per thread up to 4 channels per
// group, about 170 above.
template <int CPG, int Threads>
constexpr int min_blocks() { return CPG <= 4 ? 65536 / (Threads * 128) : 65536 / (Threads * 255) + 1; }

template <class T, int CPG, int VC, int PW, int Threads>
__global__ void __launch_bounds__(Threads, min_blocks<CPG, Threads>()) conv_fwd_direct(DeviceGeometry g, const T* __restrict__ x, const float* __restrict__ wt,
                                T* __restrict__ y) {
    constexpr int GB = VC / CPG;
    const int cblocks = g.G * CPG / VC;
    const int wblocks = (g.out[2] + PW - 1) / PW;
    // 32-bit index arithmetic: supports() keeps every tensor below 2^31 elements.
    unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
    if ((int64_t)idx >= (int64_t)g.N * g.out[0] * g.out[1] * wblocks * cblocks) return;
    const int cb = (int)(idx % (unsigned)cblocks); idx /= (unsigned)cblocks;
    const int wb = (int)(idx % (unsigned)wblocks); idx /= (unsigned)wblocks;
    const int oh = (int)(idx % (unsigned)g.out[1]); idx /= (unsigned)g.out[1];
    const int od = (int)(idx % (unsigned)g.out[0]);
    const int n = (int)(idx / (unsigned)g.out[0]);
    const int ow0 = wb * PW, g0 = cb * GB;
    const int64_t chans = (int64_t)g.G * CPG;
    const bool window = g.stride[2] == 1 && g.dil[2] == 1 && g.fil[2] <= kMaxX;
    float acc[PW][VC];
#pragma unroll
    for (int p = 0; p < PW; ++p)
#pragma unroll
        for (int v = 0; v < VC; ++v) acc[p][v] = 0.f;
    for (int z = 0; z < g.fil[0]; ++z) {
        const int id = od * g.stride[0] - g.pad[0] + z * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int yy = 0; yy < g.fil[1]; ++yy) {
            const int ih = oh * g.stride[1] - g.pad[1] + yy * g.dil[1];
            if (ih < 0 || ih >= g.in[1]) continue;
            const T* row = x + (((int64_t)n * g.in[0] + id) * g.in[1] + ih) * g.in[2] * chans + cb * VC;
            if constexpr (use_window<CPG, VC, PW>()) {
                if (window) {
                    constexpr int WN = PW + kMaxX - 1;
                    RawVec<VC> win[WN];
                    const int iw0 = ow0 - g.pad[2];
#pragma unroll
                    for (int j = 0; j < WN; ++j) {
                        const int iw = iw0 + j;
                        win[j] = (j < PW + g.fil[2] - 1 && iw >= 0 && iw < g.in[2]) ? load_raw<VC>(row + (int64_t)iw * chans)
                                                                                    : zero_raw<VC>();
                    }
#pragma unroll
                    for (int t = 0; t < kMaxX; ++t) {
                        if (t >= g.fil[2]) break;
                        float wv[GB][CPG][CPG];
                        load_tap_weights<GB, CPG>(wt, g.G, g0, (z * g.fil[1] + yy) * g.fil[2] + t, wv);
#pragma unroll
                        for (int p = 0; p < PW; ++p) {
                            float xv[VC];
                            raw_to_float<VC, T>(win[p + t], xv);
#pragma unroll
                            for (int j = 0; j < GB; ++j)
#pragma unroll
                                for (int k = 0; k < CPG; ++k) {
                                    float sum = acc[p][j * CPG + k];
#pragma unroll
                                    for (int c = 0; c < CPG; ++c) sum = fmaf(xv[j * CPG + c], wv[j][k][c], sum);
                                    acc[p][j * CPG + k] = sum;
                                }
                        }
                    }
                    continue;
                }
            }
            for (int xx = 0; xx < g.fil[2]; ++xx) {
                const int tap = (z * g.fil[1] + yy) * g.fil[2] + xx;
                float wv[GB][CPG][CPG];
                load_tap_weights<GB, CPG>(wt, g.G, g0, tap, wv);
#pragma unroll
                for (int p = 0; p < PW; ++p) {
                    const int iw = (ow0 + p) * g.stride[2] - g.pad[2] + xx * g.dil[2];
                    if (iw < 0 || iw >= g.in[2]) continue;
                    float xv[VC];
                    load_vec<VC>(row + (int64_t)iw * chans, xv);
#pragma unroll
                    for (int j = 0; j < GB; ++j)
#pragma unroll
                        for (int k = 0; k < CPG; ++k) {
                            float s = acc[p][j * CPG + k];
#pragma unroll
                            for (int c = 0; c < CPG; ++c) s = fmaf(xv[j * CPG + c], wv[j][k][c], s);
                            acc[p][j * CPG + k] = s;
                        }
                }
            }
        }
    }
    T* out = y + ((((int64_t)n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow0) * chans + cb * VC;
#pragma unroll
    for (int p = 0; p < PW; ++p)
        if (ow0 + p < g.out[2]) store_vec<VC>(out + p * chans, acc[p]);
}

// ---------------------------------------------------------------- backward data
// dx[n][i][g][c] = sum over taps and k of dy[n][o][g][k] * w[g][k][tap][c],
// where o = (i + pad - f * dil) / stride when that divides exactly and lands inside.
template <class T, int CPG, int VC, int PW, int Threads>
__global__ void __launch_bounds__(Threads, min_blocks<CPG, Threads>()) conv_bwd_data_direct(DeviceGeometry g, T* __restrict__ dx, const float* __restrict__ wt,
                                     const T* __restrict__ dy) {
    constexpr int GB = VC / CPG;
    const int cblocks = g.G * CPG / VC;
    const int wblocks = (g.in[2] + PW - 1) / PW;
    unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
    if ((int64_t)idx >= (int64_t)g.N * g.in[0] * g.in[1] * wblocks * cblocks) return;
    const int cb = (int)(idx % (unsigned)cblocks); idx /= (unsigned)cblocks;
    const int wb = (int)(idx % (unsigned)wblocks); idx /= (unsigned)wblocks;
    const int ih = (int)(idx % (unsigned)g.in[1]); idx /= (unsigned)g.in[1];
    const int id = (int)(idx % (unsigned)g.in[0]);
    const int n = (int)(idx / (unsigned)g.in[0]);
    const int iw0 = wb * PW, g0 = cb * GB;
    const int64_t chans = (int64_t)g.G * CPG;
    const bool window = g.stride[2] == 1 && g.dil[2] == 1 && g.fil[2] <= kMaxX;
    float acc[PW][VC];
#pragma unroll
    for (int p = 0; p < PW; ++p)
#pragma unroll
        for (int v = 0; v < VC; ++v) acc[p][v] = 0.f;
    for (int z = 0; z < g.fil[0]; ++z) {
        const int nd = id + g.pad[0] - z * g.dil[0];
        if (nd < 0 || nd % g.stride[0]) continue;
        const int od = nd / g.stride[0];
        if (od >= g.out[0]) continue;
        for (int yy = 0; yy < g.fil[1]; ++yy) {
            const int nh = ih + g.pad[1] - yy * g.dil[1];
            if (nh < 0 || nh % g.stride[1]) continue;
            const int oh = nh / g.stride[1];
            if (oh >= g.out[1]) continue;
            const T* row = dy + (((int64_t)n * g.out[0] + od) * g.out[1] + oh) * g.out[2] * chans + cb * VC;
            if constexpr (use_window<CPG, VC, PW>()) {
                if (window) {
                    constexpr int WN = PW + kMaxX - 1;
                    RawVec<VC> win[WN];
                    const int ob = iw0 + g.pad[2] - (kMaxX - 1);
#pragma unroll
                    for (int j = 0; j < WN; ++j) {
                        const int ow = ob + j;
                        win[j] = (j >= kMaxX - g.fil[2] && ow >= 0 && ow < g.out[2]) ? load_raw<VC>(row + (int64_t)ow * chans)
                                                                                    : zero_raw<VC>();
                    }
#pragma unroll
                    for (int t = 0; t < kMaxX; ++t) {
                        if (t >= g.fil[2]) break;
                        float wv[GB][CPG][CPG];
                        load_tap_weights<GB, CPG>(wt, g.G, g0, (z * g.fil[1] + yy) * g.fil[2] + t, wv);
#pragma unroll
                        for (int p = 0; p < PW; ++p) {
                            float gv[VC];
                            raw_to_float<VC, T>(win[p - t + kMaxX - 1], gv);
#pragma unroll
                            for (int j = 0; j < GB; ++j)
#pragma unroll
                                for (int c = 0; c < CPG; ++c) {
                                    float sum = acc[p][j * CPG + c];
#pragma unroll
                                    for (int k = 0; k < CPG; ++k) sum = fmaf(gv[j * CPG + k], wv[j][k][c], sum);
                                    acc[p][j * CPG + c] = sum;
                                }
                        }
                    }
                    continue;
                }
            }
            for (int xx = 0; xx < g.fil[2]; ++xx) {
                const int tap = (z * g.fil[1] + yy) * g.fil[2] + xx;
                float wv[GB][CPG][CPG];
                load_tap_weights<GB, CPG>(wt, g.G, g0, tap, wv);
#pragma unroll
                for (int p = 0; p < PW; ++p) {
                    const int nw = iw0 + p + g.pad[2] - xx * g.dil[2];
                    if (nw < 0 || nw % g.stride[2]) continue;
                    const int ow = nw / g.stride[2];
                    if (ow >= g.out[2]) continue;
                    float gv[VC];
                    load_vec<VC>(row + (int64_t)ow * chans, gv);
#pragma unroll
                    for (int j = 0; j < GB; ++j)
#pragma unroll
                        for (int c = 0; c < CPG; ++c) {
                            float s = acc[p][j * CPG + c];
#pragma unroll
                            for (int k = 0; k < CPG; ++k) s = fmaf(gv[j * CPG + k], wv[j][k][c], s);
                            acc[p][j * CPG + c] = s;
                        }
                }
            }
        }
    }
    T* out = dx + ((((int64_t)n * g.in[0] + id) * g.in[1] + ih) * g.in[2] + iw0) * chans + cb * VC;
#pragma unroll
    for (int p = 0; p < PW; ++p)
        if (iw0 + p < g.in[2]) store_vec<VC>(out + p * chans, acc[p]);
}


// ---------------------------------------------------------------- backward weight
// Output channels per thread: all of a group while the accumulators stay within 64.
template <int CPG, int VC>
constexpr int bwd_weight_kt() { return VC * CPG <= 64 ? CPG : (64 / VC > 0 ? 64 / VC : 1); }

// Output pixel flat index -> coordinates (n, od, oh, ow), advanced one at a time.
struct PixelCursor {
    int n, o[3];
    __device__ void set(int64_t flat, const DeviceGeometry& g) {
        o[2] = (int)(flat % g.out[2]); flat /= g.out[2];
        o[1] = (int)(flat % g.out[1]); flat /= g.out[1];
        o[0] = (int)(flat % g.out[0]);
        n = (int)(flat / g.out[0]);
    }
    __device__ void next(const DeviceGeometry& g) {
        if (++o[2] < g.out[2]) return;
        o[2] = 0;
        if (++o[1] < g.out[1]) return;
        o[1] = 0;
        if (++o[0] < g.out[0]) return;
        o[0] = 0;
        ++n;
    }
    __device__ int64_t out_pixel(const DeviceGeometry& g) const {
        return (((int64_t)n * g.out[0] + o[0]) * g.out[1] + o[1]) * g.out[2] + o[2];
    }
    // The input pixel this output pixel reads through tap f, or -1 when it is padding.
    __device__ int64_t in_pixel(const DeviceGeometry& g, const int f[3]) const {
        int pos[3];
#pragma unroll
        for (int d = 0; d < 3; ++d) {
            pos[d] = o[d] * g.stride[d] - g.pad[d] + f[d] * g.dil[d];
            if (pos[d] < 0 || pos[d] >= g.in[d]) return -1;
        }
        return (((int64_t)n * g.in[0] + pos[0]) * g.in[1] + pos[1]) * g.in[2] + pos[2];
    }
};

__device__ __forceinline__ void tap_coords(int tap, const DeviceGeometry& g, int f[3]) {
    f[2] = tap % g.fil[2];
    f[1] = (tap / g.fil[2]) % g.fil[1];
    f[0] = tap / (g.fil[2] * g.fil[1]);
}

// Block (32 lanes, SY slices): lane = (tap, k chunk, channel block), channel block fastest
// so a warp reads consecutive channel vectors. Each thread reduces the output pixels of its
// slice; the block adds its SY slices in shared memory (in order) and writes one row of
// partial[row][g][k][tap][c], row = blockIdx.y.
template <class T, int CPG, int VC, int SY>
__global__ void conv_bwd_weight_direct(DeviceGeometry g, const T* __restrict__ x, const T* __restrict__ dy,
                                       float* __restrict__ partial, int slices) {
    constexpr int GB = VC / CPG;
    constexpr int KT = bwd_weight_kt<CPG, VC>();
    constexpr int ACC = GB * KT * CPG;
    __shared__ float red[SY - 1][ACC][32];
    const int cblocks = g.G * CPG / VC;
    const int kchunks = CPG / KT;
    const int lane = blockIdx.x * 32 + threadIdx.x;
    const bool active = lane < g.taps * kchunks * cblocks;
    const int cb = lane % cblocks;
    const int kc = (lane / cblocks) % kchunks;
    const int tap = lane / (cblocks * kchunks);
    const int slice = blockIdx.y * SY + threadIdx.y;
    const int g0 = cb * GB;
    const int64_t chans = (int64_t)g.G * CPG;
    const int64_t pixels = (int64_t)g.N * g.out[0] * g.out[1] * g.out[2];
    const int64_t per = (pixels + slices - 1) / slices;
    const int64_t begin = (int64_t)slice * per;
    const int64_t end = !active ? begin : begin + per < pixels ? begin + per : pixels;
    int f[3];
    tap_coords(active ? tap : 0, g, f);
    float acc[GB][KT][CPG];
    zero_sums(acc);
    PixelCursor cur;
    if (begin < end) cur.set(begin, g);
    for (int64_t pix = begin; pix < end; ++pix, cur.next(g)) {
        const int64_t ip = cur.in_pixel(g, f);
        if (ip < 0) continue;
        float xv[VC];
        load_vec<VC>(x + ip * chans + cb * VC, xv);
        const T* grad = dy + cur.out_pixel(g) * chans + cb * VC;
        float gv[GB][KT];
        if constexpr (KT == CPG) {
            float all[VC];
            load_vec<VC>(grad, all);
#pragma unroll
            for (int j = 0; j < GB; ++j)
#pragma unroll
                for (int k = 0; k < KT; ++k) gv[j][k] = all[j * CPG + k];
        } else {
#pragma unroll
            for (int j = 0; j < GB; ++j)
#pragma unroll
                for (int k = 0; k < KT; ++k) gv[j][k] = to_float(__ldg(grad + j * CPG + kc * KT + k));
        }
#pragma unroll
        for (int j = 0; j < GB; ++j)
#pragma unroll
            for (int k = 0; k < KT; ++k)
#pragma unroll
                for (int c = 0; c < CPG; ++c) acc[j][k][c] = fmaf(gv[j][k], xv[j * CPG + c], acc[j][k][c]);
    }
    if (threadIdx.y > 0) {
#pragma unroll
        for (int j = 0; j < GB; ++j)
#pragma unroll
            for (int k = 0; k < KT; ++k)
#pragma unroll
                for (int c = 0; c < CPG; ++c) red[threadIdx.y - 1][(j * KT + k) * CPG + c][threadIdx.x] = acc[j][k][c];
    }
    __syncthreads();
    if (threadIdx.y > 0 || !active) return;
    float* out = partial + (int64_t)blockIdx.y * g.G * CPG * g.taps * CPG;
#pragma unroll
    for (int j = 0; j < GB; ++j)
#pragma unroll
        for (int k = 0; k < KT; ++k)
#pragma unroll
            for (int c = 0; c < CPG; ++c) {
                float s = acc[j][k][c];
#pragma unroll
                for (int y = 0; y < SY - 1; ++y) s += red[y][(j * KT + k) * CPG + c][threadIdx.x];
                out[(((int64_t)(g0 + j) * CPG + kc * KT + k) * g.taps + tap) * CPG + c] = s;
            }
}

// Depthwise bwd_weight, window path (stride 1, dilation 1 along W, X <= kMaxX): a thread owns
// one filter row (z, y) of VC channels and walks whole output rows of its slice PW pixels at
// a time: PW dy vectors and the PW + X - 1 input vectors under them, each loaded once, feed
// all X taps. Block (32 lanes, SY slices) as conv_bwd_weight_direct; partial rows likewise.
template <class T, int VC, int PW, int SY, int MAXX>
__global__ void conv_bwd_weight_dw_window(DeviceGeometry g, const T* __restrict__ x, const T* __restrict__ dy,
                                          float* __restrict__ partial, int slices, int seg_len) {
    __shared__ float red[SY - 1][MAXX * VC][32];
    const int cblocks = g.G / VC;
    const int filter_rows = g.fil[0] * g.fil[1];
    const int lane = blockIdx.x * 32 + threadIdx.x;
    const bool active = lane < filter_rows * cblocks;
    const int cb = lane % cblocks;
    const int frow = lane / cblocks;
    const int fz = frow / g.fil[1], fy = frow % g.fil[1];
    const int slice = blockIdx.y * SY + threadIdx.y;
    // Work units: segments of seg_len output pixels along W of each output row.
    const int segs = (g.out[2] + seg_len - 1) / seg_len;
    const int64_t units = (int64_t)g.N * g.out[0] * g.out[1] * segs;
    const int64_t per = (units + slices - 1) / slices;
    const int64_t begin = (int64_t)slice * per;
    const int64_t end = !active ? begin : begin + per < units ? begin + per : units;
    const int64_t chans = g.G;
    float acc[MAXX][VC];
#pragma unroll
    for (int t = 0; t < MAXX; ++t)
#pragma unroll
        for (int v = 0; v < VC; ++v) acc[t][v] = 0.f;
    // the unit's (segment, row, plane, image), advanced per unit: no 64-bit division per unit
    int seg = 0, oh = 0, od = 0, n = 0;
    if (begin < end) {
        const int64_t r = begin / segs;
        seg = (int)(begin % segs);
        oh = (int)(r % g.out[1]);
        od = (int)(r / g.out[1] % g.out[0]);
        n = (int)(r / ((int64_t)g.out[1] * g.out[0]));
    }
    auto advance = [&]() {
        if (++seg < segs) return;
        seg = 0;
        if (++oh < g.out[1]) return;
        oh = 0;
        if (++od < g.out[0]) return;
        od = 0;
        ++n;
    };
    for (int64_t u = begin; u < end; ++u, advance()) {
        const int w_begin = seg * seg_len;
        const int w_end = w_begin + seg_len < g.out[2] ? w_begin + seg_len : g.out[2];
        const int id = od * g.stride[0] - g.pad[0] + fz * g.dil[0];
        const int ih = oh * g.stride[1] - g.pad[1] + fy * g.dil[1];
        if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) continue;
        const T* xrow = x + (((int64_t)n * g.in[0] + id) * g.in[1] + ih) * g.in[2] * chans + cb * VC;
        const T* grow = dy + (((int64_t)n * g.out[0] + od) * g.out[1] + oh) * g.out[2] * chans + cb * VC;
        for (int ow0 = w_begin; ow0 < w_end; ow0 += PW) {
            RawVec<VC> gr[PW];
            RawVec<VC> win[PW + MAXX - 1];
#pragma unroll
            for (int p = 0; p < PW; ++p)
                gr[p] = ow0 + p < w_end ? load_raw<VC>(grow + (int64_t)(ow0 + p) * chans) : zero_raw<VC>();
#pragma unroll
            for (int j = 0; j < PW + MAXX - 1; ++j) {
                const int iw = ow0 - g.pad[2] + j;
                win[j] = (j < PW + g.fil[2] - 1 && iw >= 0 && iw < g.in[2]) ? load_raw<VC>(xrow + (int64_t)iw * chans)
                                                                           : zero_raw<VC>();
            }
#pragma unroll
            for (int p = 0; p < PW; ++p) {
                float gv[VC];
                raw_to_float<VC, T>(gr[p], gv);
#pragma unroll
                for (int t = 0; t < MAXX; ++t) {
                    if (t >= g.fil[2]) break;
                    float xv[VC];
                    raw_to_float<VC, T>(win[p + t], xv);
#pragma unroll
                    for (int v = 0; v < VC; ++v) acc[t][v] = fmaf(gv[v], xv[v], acc[t][v]);
                }
            }
        }
    }
    if (threadIdx.y > 0) {
#pragma unroll
        for (int t = 0; t < MAXX; ++t)
#pragma unroll
            for (int v = 0; v < VC; ++v) red[threadIdx.y - 1][t * VC + v][threadIdx.x] = acc[t][v];
    }
    __syncthreads();
    if (threadIdx.y > 0 || !active) return;
    float* out = partial + (int64_t)blockIdx.y * g.G * g.taps;
    for (int t = 0; t < g.fil[2] && t < MAXX; ++t)
#pragma unroll
        for (int v = 0; v < VC; ++v) {
            float sum = acc[t][v];
#pragma unroll
            for (int y = 0; y < SY - 1; ++y) sum += red[y][t * VC + v][threadIdx.x];
            out[(int64_t)(cb * VC + v) * g.taps + frow * g.fil[2] + t] = sum;  // dw[g][0][tap][0]
        }
}

// dw[e] = sum over rows of partial[row][e]. Block (32 elements, 8 row lanes); each lane
// adds every 8th row, then lane 0 adds the 8 lanes in order (deterministic). Waits for the
// kernel that wrote the rows where it was launched by pdl_launch.
template <class T>
__global__ void conv_bwd_weight_reduce(const float* __restrict__ partial, T* __restrict__ dw, int64_t elems,
                                       int rows) {
    __shared__ float red[8][32];
    pdl_wait();
    const int64_t e = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (e < elems) {
#pragma unroll 4
        for (int r = threadIdx.y; r < rows; r += 8) s += partial[(int64_t)r * elems + e];
    }
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y || e >= elems) return;
    float total = 0.f;
#pragma unroll
    for (int y = 0; y < 8; ++y) total += red[y][threadIdx.x];
    dw[e] = from_float<T>(total);
}

// The same sum for a few rows (a batch split's slices): a thread adds 4 consecutive
// elements of every row, row by row (for rows <= 8 the same order, so the same bits, as
// conv_bwd_weight_reduce). elems must be a multiple of 4 and partial 16-byte aligned.
template <class T>
__global__ void conv_bwd_weight_reduce_rows(const float* __restrict__ partial, T* __restrict__ dw, int64_t elems,
                                            int rows) {
    const int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (e >= elems) return;
    float4 s = __ldg(reinterpret_cast<const float4*>(partial + e));
    for (int r = 1; r < rows; ++r) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(partial + (int64_t)r * elems + e));
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    dw[e] = from_float<T>(s.x);
    dw[e + 1] = from_float<T>(s.y);
    dw[e + 2] = from_float<T>(s.z);
    dw[e + 3] = from_float<T>(s.w);
}

// ---------------------------------------------------------------- generic (any C, K)
template <class T>
__global__ void conv_fwd_generic(DeviceGeometry g, const T* __restrict__ x, const T* __restrict__ w,
                                 T* __restrict__ y) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)g.N * g.out[0] * g.out[1] * g.out[2] * g.G * g.K;
    if (idx >= total) return;
    const int64_t flat = idx;
    const int k = (int)(idx % g.K); idx /= g.K;
    const int grp = (int)(idx % g.G); idx /= g.G;
    PixelCursor cur;
    cur.set(idx, g);
    float s = 0.f;
    for (int tap = 0; tap < g.taps; ++tap) {
        int f[3];
        tap_coords(tap, g, f);
        const int64_t ip = cur.in_pixel(g, f);
        if (ip < 0) continue;
        const T* xr = x + (ip * g.G + grp) * g.C;
        const T* wr = w + (((int64_t)grp * g.K + k) * g.taps + tap) * g.C;
        for (int c = 0; c < g.C; ++c) s = fmaf(to_float(xr[c]), to_float(__ldg(wr + c)), s);
    }
    y[flat] = from_float<T>(s);
}

template <class T>
__global__ void conv_bwd_data_generic(DeviceGeometry g, T* __restrict__ dx, const T* __restrict__ w,
                                      const T* __restrict__ dy) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)g.N * g.in[0] * g.in[1] * g.in[2] * g.G * g.C;
    if (idx >= total) return;
    const int64_t flat = idx;
    const int c = (int)(idx % g.C); idx /= g.C;
    const int grp = (int)(idx % g.G); idx /= g.G;
    int i[3];
    i[2] = (int)(idx % g.in[2]); idx /= g.in[2];
    i[1] = (int)(idx % g.in[1]); idx /= g.in[1];
    i[0] = (int)(idx % g.in[0]);
    const int n = (int)(idx / g.in[0]);
    float s = 0.f;
    for (int tap = 0; tap < g.taps; ++tap) {
        int f[3], o[3];
        tap_coords(tap, g, f);
        bool inside = true;
        for (int d = 0; d < 3; ++d) {
            const int num = i[d] + g.pad[d] - f[d] * g.dil[d];
            o[d] = num >= 0 ? num / g.stride[d] : -1;
            inside = inside && num >= 0 && num % g.stride[d] == 0 && o[d] < g.out[d];
        }
        if (!inside) continue;
        const int64_t op = (((int64_t)n * g.out[0] + o[0]) * g.out[1] + o[1]) * g.out[2] + o[2];
        const T* gr = dy + (op * g.G + grp) * g.K;
        const T* wr = w + ((int64_t)grp * g.K * g.taps + tap) * g.C + c;
        for (int k = 0; k < g.K; ++k) s = fmaf(to_float(gr[k]), to_float(__ldg(wr + (int64_t)k * g.taps * g.C)), s);
    }
    dx[flat] = from_float<T>(s);
}

template <class T>
__global__ void conv_bwd_weight_generic(DeviceGeometry g, const T* __restrict__ x, const T* __restrict__ dy,
                                        float* __restrict__ partial, int slices) {
    const int64_t elems = (int64_t)g.G * g.K * g.taps * g.C;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= elems * slices) return;
    const int64_t e = idx % elems;
    const int slice = (int)(idx / elems);
    int64_t r = e;
    const int c = (int)(r % g.C); r /= g.C;
    const int tap = (int)(r % g.taps); r /= g.taps;
    const int k = (int)(r % g.K);
    const int grp = (int)(r / g.K);
    int f[3];
    tap_coords(tap, g, f);
    const int64_t pixels = (int64_t)g.N * g.out[0] * g.out[1] * g.out[2];
    const int64_t per = (pixels + slices - 1) / slices;
    const int64_t begin = (int64_t)slice * per;
    const int64_t end = begin + per < pixels ? begin + per : pixels;
    float s = 0.f;
    PixelCursor cur;
    if (begin < end) cur.set(begin, g);
    for (int64_t pix = begin; pix < end; ++pix, cur.next(g)) {
        const int64_t ip = cur.in_pixel(g, f);
        if (ip < 0) continue;
        s = fmaf(to_float(dy[(cur.out_pixel(g) * g.G + grp) * g.K + k]), to_float(x[(ip * g.G + grp) * g.C + c]), s);
    }
    partial[(int64_t)slice * elems + e] = s;
}

}  // namespace td::cuda

#include "conv_tiled.cuh"

namespace td::cuda {

// ---------------------------------------------------------------- host side
inline bool conv_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The checks every conv variant starts with: its dtype, rank and direction, a well-formed
// problem. TD_OK with the geometry in *g, else TD_UNSUPPORTED and the reason.
inline int conv_variant_matches(const TdConvProblem& p, int dtype, int ndim, int direction, ConvGeometry* g,
                                std::string* why) {
    if (p.dtype != dtype) { *why = "dtype differs"; return TD_UNSUPPORTED; }
    if (p.ndim != ndim) { *why = "spatial rank differs"; return TD_UNSUPPORTED; }
    if (p.base.direction != direction) { *why = "direction differs"; return TD_UNSUPPORTED; }
    if (!conv_geometry(p, g).empty()) { *why = "malformed problem"; return TD_UNSUPPORTED; }
    return TD_OK;
}

// The kernels specialised for a channel count per group: C = K = cpg, else TD_UNSUPPORTED.
inline int conv_channels_are(const ConvGeometry& g, int cpg, std::string* why) {
    if (g.C == cpg && g.K == cpg) return TD_OK;
    *why = "channels per group C=" + std::to_string(g.C) + ", K=" + std::to_string(g.K) +
           " (this kernel takes C = K = " + std::to_string(cpg) + ")";
    return TD_UNSUPPORTED;
}

// Every tensor below 2^31 elements (32-bit index arithmetic on the device), else TD_UNSUPPORTED.
inline int conv_tensors_fit_int32(const ConvGeometry& g, std::string* why) {
    const int64_t biggest = std::max({g.N * g.in_pixels() * g.G * g.C, g.N * g.out_pixels() * g.G * g.K,
                                      g.G * g.K * g.taps() * g.C});
    if (biggest <= INT32_MAX && g.N <= INT32_MAX) return TD_OK;
    *why = "a tensor has 2^31 elements or more";
    return TD_UNSUPPORTED;
}

template <int DType, int Ndim, int Direction, int CPG, int PW, int VC, int Threads>
struct Sm90DirectConv {
    using T = typename ConvElement<DType>::T;
    static constexpr int kSmCount = 132;

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (CPG > 0) {
            if (int st = conv_channels_are(g, CPG, why)) return st;
            if ((g.G * CPG) % VC) {
                *why = "G x channels is not a multiple of " + std::to_string(VC) + " channels per thread";
                return TD_UNSUPPORTED;
            }
        }
        return conv_tensors_fit_int32(g, why);
    }

    static constexpr int SY = Threads / 32;  // slices per block of the direct bwd_weight kernel

    // bwd_weight: slices of the output pixels, enough threads to fill the GPU, at least 32
    // pixels each, and the fp32 partial rows kept below a quarter of the bytes the kernel
    // reads anyway. The direct kernel adds SY slices per block: a multiple of SY.
    static int slices(const TdConvProblem& p, const ConvGeometry& g) {
        const int64_t pixels = g.N * g.out_pixels();
        const int64_t elems = g.G * g.K * g.taps() * g.C;
        const int step = CPG > 0 ? SY : 1;
        int64_t s;
        if (p.base.split_k > 0) {
            s = std::min<int64_t>(p.base.split_k, pixels);
        } else {
            const int64_t lanes = CPG > 0 ? elems / (VC * bwd_weight_kt<CPG, VC>()) : elems;
            s = (int64_t)kSmCount * 2048 / std::max<int64_t>(1, lanes);
            s = std::min(s, std::max<int64_t>(1, pixels / 32));
            const int64_t read = 2 * (g.N * g.in_pixels() * g.G * g.C + g.N * g.out_pixels() * g.G * g.K);
            s = std::min(s, step * std::max<int64_t>(1, read / (4 * 4 * elems)));
        }
        s = std::max<int64_t>(1, std::min<int64_t>(s, (int64_t)65535 * step));
        return (int)((s + step - 1) / step * step);
    }
    static int rows(int slices) { return CPG > 0 ? slices / SY : slices; }

    // Depthwise bwd_weight through the window kernel: slices of output rows instead.
    static constexpr int kWindowPW = 8;
    static bool dw_window(const ConvGeometry& g) {
        return CPG == 1 && Direction == TD_CONV_BWD_WEIGHT && g.stride[2] == 1 && g.dil[2] == 1 && g.fil[2] <= kMaxX;
    }
    struct DwPlan {
        int slices, seg_len;
    };
    static DwPlan dw_plan(const TdConvProblem& p, const ConvGeometry& g) {
        const int64_t out_rows = g.N * g.out[0] * g.out[1], wo = g.out[2];
        const int64_t lanes = g.fil[0] * g.fil[1] * (g.G / VC);
        const int64_t elems = g.G * g.taps();
        int64_t want = p.base.split_k > 0 ? p.base.split_k : (int64_t)kSmCount * 1024 / std::max<int64_t>(1, lanes);
        // split rows along W where there are too few rows (1D): at least 4 x PW pixels a segment
        int64_t segs = std::max<int64_t>(1, std::min((want + out_rows - 1) / out_rows, (wo + 4 * kWindowPW - 1) / (4 * kWindowPW)));
        int64_t seg_len = (wo + segs - 1) / segs;
        seg_len = (seg_len + kWindowPW - 1) / kWindowPW * kWindowPW;
        segs = (wo + seg_len - 1) / seg_len;
        int64_t s = std::min(want, out_rows * segs);
        if (p.base.split_k <= 0) {
            const int64_t read = 2 * (g.N * g.in_pixels() * g.G + g.N * g.out_pixels() * g.G);
            s = std::min(s, SY * std::max<int64_t>(1, read / (4 * 4 * elems)));
        }
        s = std::max<int64_t>(1, std::min<int64_t>(s, (int64_t)65535 * SY));
        return DwPlan{(int)((s + SY - 1) / SY * SY), (int)seg_len};
    }

    // The shared-memory tiled kernels (conv_tiled.cuh) take 2D and 3D problems at 1 to 8
    // channels per group: fwd, bwd_data at stride 1, bwd_weight. PW is their rows per thread.
    // Where they run was measured on the H200 (bench/conv.py, bench/RESULTS.md): they win for
    // fwd / bwd_data at 4 and 8 channels per group (ResNeXt-50: 68 -> 63 us, ResNeXt-101:
    // 205 -> 194 us) and lose at 1 (depthwise: MobileNetV2 77 -> 94 us, ConvNeXt 85 -> 102 us),
    // so depthwise fwd and bwd_data keep the untiled kernels; they win for bwd_weight at 4 and
    // 8 channels per group (ResNeXt-50: 144 -> 118 us, ResNeXt-101: 393 -> 235 us) and for
    // depthwise filters wider than 3 (ConvNeXt 7x7: 164 -> 148 us), and lose for depthwise
    // 3x3 (119 -> 137 us).
    static constexpr bool kTiled = Ndim >= 2 && CPG >= 1 && CPG <= 8 && VC == kUnit;
    static bool tiled(const ConvGeometry& geo, TiledPlan* pl, DeviceGeometry* tg) {
        if constexpr (!kTiled) {
            return false;
        } else {
            DeviceGeometry d = device_geometry(geo);
            if (Direction == TD_CONV_BWD_WEIGHT) {
                if (CPG == 1 && d.fil[2] <= 3) return false;  // depthwise up to 3 wide: untiled
                *tg = d;
                return bwd_weight_tiled_plan(d, CPG, Threads, kSmCount, pl);
            }
            if (CPG == 1) return false;  // depthwise fwd / bwd_data: the untiled kernels
            if (Direction == TD_CONV_BWD_DATA) {  // the forward over dy with the flipped filter
                for (int i = 0; i < 3; ++i) {
                    if (d.stride[i] != 1) return false;
                    std::swap(d.in[i], d.out[i]);
                    d.pad[i] = d.dil[i] * (d.fil[i] - 1) - d.pad[i];
                }
            }
            *tg = d;
            return fwd_tiled_plan(d, CPG, PW, Threads, kSmCount, pl);
        }
    }

    // The workspace of a run: `pl` is the tiled plan, or null for the untiled kernels.
    static size_t workspace_bytes(const TdConvProblem& p, const ConvGeometry& g, const TiledPlan* pl) {
        const size_t elems = (size_t)(g.G * g.K * g.taps() * g.C);
        if (pl) return Direction == TD_CONV_BWD_WEIGHT ? (size_t)pl->blocks_x * elems * sizeof(float) : 0;
        if (Direction == TD_CONV_BWD_WEIGHT)
            return (size_t)(dw_window(g) ? dw_plan(p, g).slices / SY : rows(slices(p, g))) * elems * sizeof(float);
        return CPG > 0 ? elems * sizeof(float) : 0;  // the transposed weights
    }

    static size_t workspace_size(const TdConvProblem& p) {
        ConvGeometry g{};
        if (!conv_geometry(p, &g).empty()) return 0;
        TiledPlan pl{};
        DeviceGeometry tg{};
        return workspace_bytes(p, g, tiled(g, &pl, &tg) ? &pl : nullptr);
    }

    static unsigned blocks(int64_t threads) { return (unsigned)((threads + Threads - 1) / Threads); }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DeviceGeometry g = device_geometry(geo);
        if (CPG > 0 && !(conv_aligned16(in) && conv_aligned16(wei) && conv_aligned16(out)))
            return fail(TD_REJECTED, "a tensor's address is not 16-byte aligned (the vector loads need it); "
                                     "the generic kernel takes it");
        const int64_t elems = geo.G * geo.K * geo.taps() * geo.C;
        TiledPlan pl{};
        DeviceGeometry tg{};
        const bool use_tiled = tiled(geo, &pl, &tg);
        float* scratch = nullptr;
        if (int st = take_workspace(workspace_bytes(p, geo, use_tiled ? &pl : nullptr), ws, ws_bytes, stream_ptr,
                                    reinterpret_cast<void**>(&scratch)))
            return st;
        if (use_tiled) return run_tiled(pl, tg, in, wei, out, scratch, elems, stream);
        const T* x = static_cast<const T*>(in);
        const T* w = static_cast<const T*>(wei);
        if (Direction != TD_CONV_BWD_WEIGHT && CPG > 0)
            conv_transpose_weights<T><<<blocks(elems), Threads, 0, stream>>>(g, w, scratch);
        if (Direction == TD_CONV_FWD) {
            T* y = static_cast<T*>(out);
            if constexpr (CPG > 0) {
                const int64_t n = (int64_t)g.N * g.out[0] * g.out[1] * ((g.out[2] + PW - 1) / PW) * (g.G * CPG / VC);
                conv_fwd_direct<T, CPG, VC, PW, Threads><<<blocks(n), Threads, 0, stream>>>(g, x, scratch, y);
            } else {
                conv_fwd_generic<T><<<blocks(geo.N * geo.out_pixels() * geo.G * geo.K), Threads, 0, stream>>>(g, x, w, y);
            }
        } else if (Direction == TD_CONV_BWD_DATA) {
            T* dx = static_cast<T*>(const_cast<void*>(in));
            const T* dy = static_cast<const T*>(out);
            if constexpr (CPG > 0) {
                const int64_t n = (int64_t)g.N * g.in[0] * g.in[1] * ((g.in[2] + PW - 1) / PW) * (g.G * CPG / VC);
                conv_bwd_data_direct<T, CPG, VC, PW, Threads><<<blocks(n), Threads, 0, stream>>>(g, dx, scratch, dy);
            } else {
                conv_bwd_data_generic<T><<<blocks(geo.N * geo.in_pixels() * geo.G * geo.C), Threads, 0, stream>>>(g, dx, w, dy);
            }
        } else {
            T* dw = static_cast<T*>(const_cast<void*>(wei));
            const T* dy = static_cast<const T*>(out);
            const bool window = dw_window(geo);
            const DwPlan plan = window ? dw_plan(p, geo) : DwPlan{0, 0};
            const int s = window ? plan.slices : slices(p, geo);
            if (window) {
                if constexpr (CPG == 1 && Direction == TD_CONV_BWD_WEIGHT) {
                    const int64_t lanes = (int64_t)g.fil[0] * g.fil[1] * (g.G / VC);
                    const dim3 grid((unsigned)((lanes + 31) / 32), (unsigned)(s / SY));
                    if (g.fil[2] <= 3)
                        conv_bwd_weight_dw_window<T, VC, kWindowPW, SY, 3>
                            <<<grid, dim3(32, SY), 0, stream>>>(g, x, dy, scratch, s, plan.seg_len);
                    else
                        conv_bwd_weight_dw_window<T, VC, kWindowPW, SY, kMaxX>
                            <<<grid, dim3(32, SY), 0, stream>>>(g, x, dy, scratch, s, plan.seg_len);
                }
            } else if constexpr (CPG > 0) {
                constexpr int KT = bwd_weight_kt<CPG, VC>();
                const int64_t lanes = (int64_t)g.taps * (CPG / KT) * (g.G * CPG / VC);
                const dim3 grid((unsigned)((lanes + 31) / 32), (unsigned)(s / SY));
                conv_bwd_weight_direct<T, CPG, VC, SY><<<grid, dim3(32, SY), 0, stream>>>(g, x, dy, scratch, s);
            } else {
                conv_bwd_weight_generic<T><<<blocks(elems * s), Threads, 0, stream>>>(g, x, dy, scratch, s);
            }
            conv_bwd_weight_reduce<T><<<(unsigned)((elems + 31) / 32), dim3(32, 8), 0, stream>>>(scratch, dw, elems,
                                                                                               window ? s / SY : rows(s));
        }
        return launch_status();
    }

    static int run_tiled(const TiledPlan& pl, const DeviceGeometry& tg, const void* in, const void* wei, void* out,
                         float* scratch, int64_t elems, cudaStream_t stream) {
        if constexpr (kTiled) {
            const unsigned grid = (unsigned)((int64_t)pl.blocks_x * (tg.G * CPG / kUnit / pl.cu));
            if constexpr (Direction == TD_CONV_BWD_WEIGHT) {
                auto kernel = conv_bwd_weight_tiled<T, CPG, Threads>;
                if (pl.smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem);
                kernel<<<grid, Threads, pl.smem, stream>>>(tg, pl, static_cast<const T*>(in), static_cast<const T*>(out),
                                                           scratch);
                conv_bwd_weight_reduce<T><<<(unsigned)((elems + 31) / 32), dim3(32, 8), 0, stream>>>(
                    scratch, static_cast<T*>(const_cast<void*>(wei)), elems, pl.blocks_x);
            } else if constexpr (CPG > 1) {  // depthwise fwd / bwd_data never take the tiled path
                auto kernel = conv_fwd_tiled<T, CPG, PW, Threads>;
                if (pl.smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem);
                const bool flip = Direction == TD_CONV_BWD_DATA;
                // fwd: x -> y; bwd_data: dy (the `out` argument) -> dx (the `in` argument)
                const T* src = static_cast<const T*>(flip ? out : in);
                T* dst = static_cast<T*>(const_cast<void*>(flip ? in : out));
                kernel<<<grid, Threads, pl.smem, stream>>>(tg, pl, src, static_cast<const T*>(wei), dst, flip);
            }
        }
        return launch_status();
    }
};

}  // namespace td::cuda
