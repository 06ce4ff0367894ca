// cuda backend: dense convolution (G = 1) as a CUTLASS sm90 GEMM (bindings/cuda/gemm_sm90.cuh).
//   fwd        y (N*P x K) = cols(x) (N*P x taps*C) * w^T        rcr, cols = x itself for 1x1/s1/p0
//   bwd_data   stride 1: the forward convolution of dy with the weights flipped in space and
//              transposed (K <-> C), padding dil*(f-1) - pad            rcr
//   bwd_weight dw (K x taps*C) = dy^T (K x N*P) * cols(x) (N*P x taps*C)    crr
// cols(x) is an explicit im2col buffer in the workspace (the GEMM reads it with TMA); the
// 1x1 stride-1 unpadded case reads the tensors in place.
//
// PadChannels (misaligned: pad): channel counts that are not a multiple of 8 (stems with 3
// input channels, squeeze-excite layers of 20 or 30 channels) run on channel-padded operands:
// C and K rounded up to 8 with zeros in the padding, so every GEMM row stays 16-byte aligned
// for TMA. The im2col buffer is written padded; a misaligned tensor read in place is copied
// padded first; a padded output is written to the workspace and its real channels copied out.
// Without it such problems are refused.
//
// SplitK (bwd_weight): the GEMM's reduction (the N*P output pixels) cut into equal parts run
// as one launch with fp32 partials, summed by a second kernel (deterministic). A dense
// bwd_weight has a small output (K x taps*C, often one or two 128x128 tiles) and a long
// reduction, so a data-parallel GEMM or CUTLASS's one-CTA-a-tile implicit wgrad leaves most
// SMs idle.
#pragma once

#include "cuda/conv_direct.cuh"
#include "cuda/gemm_sm90.cuh"

namespace td::cuda {

// The input pixel that output pixel m reads through tap (a flat index over N and the input's
// spatial sizes), or -1 in the padding.
__device__ __forceinline__ int64_t im2col_source(const DeviceGeometry& g, int64_t m, int tap) {
    int64_t r = m;
    const int o2 = (int)(r % g.out[2]); r /= g.out[2];
    const int o1 = (int)(r % g.out[1]); r /= g.out[1];
    const int o0 = (int)(r % g.out[0]);
    const int n = (int)(r / g.out[0]);
    const int f2 = tap % g.fil[2], f1 = tap / g.fil[2] % g.fil[1], f0 = tap / (g.fil[2] * g.fil[1]);
    const int p0 = o0 * g.stride[0] - g.pad[0] + f0 * g.dil[0];
    const int p1 = o1 * g.stride[1] - g.pad[1] + f1 * g.dil[1];
    const int p2 = o2 * g.stride[2] - g.pad[2] + f2 * g.dil[2];
    if (p0 < 0 || p0 >= g.in[0] || p1 < 0 || p1 >= g.in[1] || p2 < 0 || p2 >= g.in[2]) return -1;
    return (((int64_t)n * g.in[0] + p0) * g.in[1] + p1) * g.in[2] + p2;
}

// cols[m][tap][c] = x at output pixel m through tap (0 in the padding); 16-byte vectors (C % 8 == 0).
template <class T>
__global__ void conv_im2col(DeviceGeometry g, const T* __restrict__ x, T* __restrict__ cols) {
    const int vecs = g.C / 8;
    const int64_t total = (int64_t)g.N * g.out[0] * g.out[1] * g.out[2] * g.taps * vecs;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int v = (int)(e % vecs);
    const int tap = (int)(e / vecs % g.taps);
    const int64_t src = im2col_source(g, e / ((int64_t)vecs * g.taps), tap);
    uint4 val = make_uint4(0, 0, 0, 0);
    if (src >= 0) val = __ldg(reinterpret_cast<const uint4*>(x + src * g.C) + v);
    reinterpret_cast<uint4*>(cols)[e] = val;
}

// w2[c][tap'][k] = w[k][tap][c], tap' the spatially flipped tap (bwd_data as a forward conv).
template <class T>
__global__ void conv_flip_weights(DeviceGeometry g, const T* __restrict__ w, T* __restrict__ w2) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (int64_t)g.K * g.taps * g.C) return;
    const int c = (int)(e % g.C);
    const int tap = (int)(e / g.C % g.taps);
    const int k = (int)(e / ((int64_t)g.C * g.taps));
    const int f2 = tap % g.fil[2], f1 = tap / g.fil[2] % g.fil[1], f0 = tap / (g.fil[2] * g.fil[1]);
    const int flipped = ((g.fil[0] - 1 - f0) * g.fil[1] + (g.fil[1] - 1 - f1)) * g.fil[2] + (g.fil[2] - 1 - f2);
    w2[((int64_t)c * g.taps + flipped) * g.K + k] = w[e];
}

// cols[m][tap][c] (row pitch taps * cp) = x (C channels) at output pixel m through tap, 0 in the
// padding and in channels C..cp-1: the scalar form for a C that is not a multiple of 8.
template <class T>
__global__ void conv_im2col_padded(DeviceGeometry g, const T* __restrict__ x, T* __restrict__ cols, int cp) {
    const int64_t total = (int64_t)g.N * g.out[0] * g.out[1] * g.out[2] * g.taps * cp;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int c = (int)(e % cp);
    const int tap = (int)(e / cp % g.taps);
    const int64_t src = c < g.C ? im2col_source(g, e / ((int64_t)cp * g.taps), tap) : -1;
    cols[e] = src >= 0 ? x[src * g.C + c] : from_float<T>(0.0f);
}

// dst (dst_rows x dst_pitch) = src (src_rows x src_pitch) where both have the element, 0 elsewhere:
// pads rows with zero channels (dst_pitch > src_pitch, extra zero rows) or takes the real
// channels of padded rows back out (dst_pitch < src_pitch).
template <class T>
__global__ void conv_repitch(const T* __restrict__ src, int64_t src_rows, int src_pitch, T* __restrict__ dst,
                             int64_t dst_rows, int dst_pitch) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= dst_rows * dst_pitch) return;
    const int64_t r = e / dst_pitch;
    const int c = (int)(e % dst_pitch);
    dst[e] = r < src_rows && c < src_pitch ? src[r * src_pitch + c] : from_float<T>(0.0f);
}

template <class T>
inline void launch_repitch(const T* src, int64_t src_rows, int64_t src_pitch, T* dst, int64_t dst_rows,
                           int64_t dst_pitch, cudaStream_t stream) {
    const int64_t n = dst_rows * dst_pitch;
    conv_repitch<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(src, src_rows, (int)src_pitch, dst, dst_rows,
                                                                     (int)dst_pitch);
}

template <int DType, int Ndim, int Direction, int TM, int TN, int TK, int CM, int CN, bool Pingpong,
          bool SplitK = false, bool PadChannels = false>
struct Sm90GemmConv {
    static_assert(!SplitK || (Direction == TD_CONV_BWD_WEIGHT && !Pingpong),
                  "split-K: bwd_weight, cooperative schedule");
    using T = typename ConvElement<DType>::T;
    using Gemm = Sm90Gemm<DType, Direction == TD_CONV_BWD_WEIGHT ? TD_CRR : TD_RCR, false, -1, TM, TN, TK, CM, CN,
                          Pingpong, false, false, 1, SplitK>;

    static int64_t up8(int64_t v) { return (v + 7) / 8 * 8; }
    // The problem with C and K rounded up to multiples of 8 (the one the GEMM runs).
    static ConvGeometry padded(const ConvGeometry& g) {
        ConvGeometry q = g;
        q.C = up8(g.C);
        q.K = up8(g.K);
        return q;
    }

    // The forward problem this direction runs as (bwd_data: dy with flipped weights).
    static DeviceGeometry as_forward(const ConvGeometry& geo) {
        DeviceGeometry g = device_geometry(geo);
        if (Direction != TD_CONV_BWD_DATA) return g;
        DeviceGeometry f = g;
        f.C = g.K;
        f.K = g.C;
        for (int d = 0; d < 3; ++d) {
            f.in[d] = g.out[d];
            f.out[d] = g.in[d];
            f.pad[d] = g.dil[d] * (g.fil[d] - 1) - g.pad[d];
        }
        return f;
    }
    static bool pointwise(const DeviceGeometry& f) {
        for (int d = 0; d < 3; ++d)
            if (f.fil[d] != 1 || f.stride[d] != 1 || f.pad[d] != 0) return false;
        return true;
    }
    static int64_t rows(const DeviceGeometry& f) { return (int64_t)f.N * f.out[0] * f.out[1] * f.out[2]; }
    static int64_t in_rows(const DeviceGeometry& f) { return (int64_t)f.N * f.in[0] * f.in[1] * f.in[2]; }

    // f: the padded forward problem.
    static TdGemmProblem gemm_problem(const DeviceGeometry& f) {
        TdGemmProblem gp{};
        gp.dtype = DType;
        gp.alpha = 1.0f;
        const int64_t red = (int64_t)f.taps * f.C;
        if (Direction == TD_CONV_BWD_WEIGHT) {  // dw (K x taps*C) = dy^T * cols
            gp.layout = TD_CRR;
            gp.M = f.K; gp.N = red; gp.K = rows(f);
            gp.lda = f.K; gp.ldb = red; gp.ldc = red;
        } else {  // y (rows x K) = cols * w^T
            gp.layout = TD_RCR;
            gp.M = rows(f); gp.N = f.K; gp.K = red;
            gp.lda = red; gp.ldb = red; gp.ldc = f.K;
        }
        return gp;
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (g.G != 1) { *why = "the GEMM path takes dense convolutions (G = 1)"; return TD_UNSUPPORTED; }
        if (!PadChannels && (g.C % 8 || g.K % 8)) {
            *why = "C and K must be multiples of 8 (16-byte rows for TMA); a variant with misaligned: pad takes others";
            return TD_UNSUPPORTED;
        }
        if (Direction == TD_CONV_BWD_DATA) {
            for (int d = 0; d < 3; ++d) {
                if (g.stride[d] != 1) { *why = "bwd_data through the GEMM path needs stride 1"; return TD_UNSUPPORTED; }
                if (g.pad[d] > g.dil[d] * (g.fil[d] - 1)) { *why = "padding beyond the filter span"; return TD_UNSUPPORTED; }
            }
        }
        const ConvGeometry q = padded(g);
        const int64_t biggest = std::max({q.N * q.in_pixels() * q.C, q.N * q.out_pixels() * q.K, q.K * q.taps() * q.C,
                                          rows(as_forward(q)) * q.taps() * (Direction == TD_CONV_BWD_DATA ? q.K : q.C)});
        if (biggest > INT32_MAX) {
            *why = "a tensor or the im2col buffer (channels padded to 8) would hold 2^31 elements or more";
            return TD_UNSUPPORTED;
        }
        if constexpr (SplitK) {
            if (int st = Gemm::supports(gemm_problem(as_forward(q)), why)) return st;
        }
        return TD_OK;
    }

    // The workspace: the im2col buffer, the flipped weights (bwd_data), the channel-padded
    // copies of misaligned operands, the padded output, then the GEMM's own.
    struct Layout {
        size_t cols, wflip, wpad, apad, dypad, outpad, gemm;
        size_t total() const { return cols + wflip + wpad + apad + dypad + outpad + gemm; }
    };
    static size_t bytes(int64_t elems) { return (size_t)((elems * (int64_t)sizeof(T) + 255) / 256 * 256); }
    static Layout layout(const TdConvProblem& p) {
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const ConvGeometry q = padded(geo);
        const DeviceGeometry f = as_forward(q);  // f.C, f.K: the forward problem's padded channels
        const bool c_pad = q.C != geo.C, k_pad = q.K != geo.K;
        const bool in_pad = Direction == TD_CONV_BWD_DATA ? k_pad : c_pad;  // the forward input's channels
        Layout l{};
        if (!pointwise(f)) l.cols = bytes(rows(f) * f.taps * f.C);
        else if (in_pad) l.apad = bytes(in_rows(f) * f.C);
        if (Direction == TD_CONV_BWD_DATA) l.wflip = bytes(q.K * q.taps() * q.C);
        if (c_pad || k_pad) l.wpad = Direction == TD_CONV_BWD_WEIGHT ? 0 : bytes(q.K * q.taps() * q.C);
        if (Direction == TD_CONV_BWD_WEIGHT && k_pad) l.dypad = bytes(rows(f) * q.K);
        if (Direction == TD_CONV_FWD && k_pad) l.outpad = bytes(rows(f) * q.K);
        if (Direction == TD_CONV_BWD_DATA && c_pad) l.outpad = bytes(rows(f) * q.C);
        if (Direction == TD_CONV_BWD_WEIGHT && (c_pad || k_pad)) l.outpad = bytes(q.K * q.taps() * q.C);
        l.gemm = (Gemm::workspace_size(gemm_problem(f)) + 255) / 256 * 256;
        return l;
    }

    static size_t workspace_size(const TdConvProblem& p) { return layout(p).total(); }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const ConvGeometry q = padded(geo);
        const DeviceGeometry fr = as_forward(geo);  // the forward problem, real channels
        const DeviceGeometry f = as_forward(q);     // and padded
        const bool c_pad = q.C != geo.C, k_pad = q.K != geo.K;
        const Layout l = layout(p);
        char* base = nullptr;
        if (int st = take_workspace(l.total(), ws, ws_bytes, stream_ptr, reinterpret_cast<void**>(&base))) return st;
        T* cols = reinterpret_cast<T*>(base);
        T* wflip = reinterpret_cast<T*>(base + l.cols);
        T* wpad = reinterpret_cast<T*>(base + l.cols + l.wflip);
        T* apad = reinterpret_cast<T*>(base + l.cols + l.wflip + l.wpad);
        T* dypad = reinterpret_cast<T*>(base + l.cols + l.wflip + l.wpad + l.apad);
        T* outpad = reinterpret_cast<T*>(base + l.cols + l.wflip + l.wpad + l.apad + l.dypad);
        void* gemm_ws = base + l.cols + l.wflip + l.wpad + l.apad + l.dypad + l.outpad;
        const int64_t taps = geo.taps();

        // The weights as the GEMM reads them: [K][taps][C] padded, flipped for bwd_data.
        const T* w = static_cast<const T*>(wei);
        if (Direction != TD_CONV_BWD_WEIGHT && (c_pad || k_pad)) {
            launch_repitch<T>(w, geo.K * taps, geo.C, wpad, q.K * taps, q.C, stream);
            w = wpad;
        }
        if (Direction == TD_CONV_BWD_DATA) {
            const DeviceGeometry gq = device_geometry(q);
            const int64_t n = q.K * taps * q.C;
            conv_flip_weights<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(gq, w, wflip);
            w = wflip;
        }
        // The forward problem's input (x, or dy for bwd_data) as rows of f.C channels, or its
        // im2col buffer.
        const T* x = static_cast<const T*>(Direction == TD_CONV_BWD_DATA ? out : in);
        const T* a = x;
        if (!pointwise(f)) {
            if (fr.C == f.C) {
                const int64_t n = rows(f) * f.taps * (f.C / 8);
                conv_im2col<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(f, x, cols);
            } else {
                const int64_t n = rows(f) * f.taps * f.C;
                conv_im2col_padded<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(fr, x, cols, f.C);
            }
            a = cols;
        } else if (fr.C != f.C) {
            launch_repitch<T>(x, in_rows(f), fr.C, apad, in_rows(f), f.C, stream);
            a = apad;
        }
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return fail(TD_ERROR, std::string("im2col launch failed: ") + cudaGetErrorString(err));
        const TdGemmProblem gp = gemm_problem(f);
        if (Direction == TD_CONV_BWD_WEIGHT) {  // A = dy^T (column-major, lda K), B = cols
            const T* dy = static_cast<const T*>(out);
            if (k_pad) {
                launch_repitch<T>(dy, rows(f), geo.K, dypad, rows(f), q.K, stream);
                dy = dypad;
            }
            T* dw = static_cast<T*>(const_cast<void*>(wei));
            T* dst = l.outpad ? outpad : dw;
            if (int st = Gemm::run(gp, dy, a, dst, gemm_ws, l.gemm, stream_ptr)) return st;
            if (l.outpad) launch_repitch<T>(outpad, geo.K * taps, q.C, dw, geo.K * taps, geo.C, stream);
        } else {
            T* y = static_cast<T*>(Direction == TD_CONV_FWD ? out : const_cast<void*>(in));
            T* dst = l.outpad ? outpad : y;
            if (int st = Gemm::run(gp, a, w, dst, gemm_ws, l.gemm, stream_ptr)) return st;
            if (l.outpad) launch_repitch<T>(outpad, rows(f), f.K, y, rows(f), fr.K, stream);
        }
        return launch_status();
    }
};

}  // namespace td::cuda
