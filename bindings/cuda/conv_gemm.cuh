// cuda backend: dense convolution (G = 1) as a CUTLASS sm90 GEMM (bindings/cuda/gemm_sm90.cuh).
//   fwd        y (N*P x K) = cols(x) (N*P x taps*C) * w^T        rcr, cols = x itself for 1x1/s1/p0
//   bwd_data   stride 1: the forward convolution of dy with the weights flipped in space and
//              transposed (K <-> C), padding dil*(f-1) - pad            rcr
//   bwd_weight dw (K x taps*C) = dy^T (K x N*P) * cols(x) (N*P x taps*C)    crr
// cols(x) is an explicit im2col buffer in the workspace (the GEMM reads it with TMA); the
// 1x1 stride-1 unpadded case reads the tensors in place.
#pragma once

#include "cuda/conv_direct.cuh"
#include "cuda/gemm_sm90.cuh"

namespace td::cuda {

// cols[m][tap][c] = x at output pixel m through tap (0 in the padding); 16-byte vectors (C % 8 == 0).
template <class T>
__global__ void conv_im2col(DeviceGeometry g, const T* __restrict__ x, T* __restrict__ cols) {
    const int vecs = g.C / 8;
    const int64_t total = (int64_t)g.N * g.out[0] * g.out[1] * g.out[2] * g.taps * vecs;
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= total) return;
    const int v = (int)(e % vecs);
    const int tap = (int)(e / vecs % g.taps);
    const int64_t m = e / ((int64_t)vecs * g.taps);
    int64_t r = m;
    const int o2 = (int)(r % g.out[2]); r /= g.out[2];
    const int o1 = (int)(r % g.out[1]); r /= g.out[1];
    const int o0 = (int)(r % g.out[0]);
    const int n = (int)(r / g.out[0]);
    const int f2 = tap % g.fil[2], f1 = tap / g.fil[2] % g.fil[1], f0 = tap / (g.fil[2] * g.fil[1]);
    const int p0 = o0 * g.stride[0] - g.pad[0] + f0 * g.dil[0];
    const int p1 = o1 * g.stride[1] - g.pad[1] + f1 * g.dil[1];
    const int p2 = o2 * g.stride[2] - g.pad[2] + f2 * g.dil[2];
    uint4 val = make_uint4(0, 0, 0, 0);
    if (p0 >= 0 && p0 < g.in[0] && p1 >= 0 && p1 < g.in[1] && p2 >= 0 && p2 < g.in[2])
        val = __ldg(reinterpret_cast<const uint4*>(x + ((((int64_t)n * g.in[0] + p0) * g.in[1] + p1) * g.in[2] + p2) * g.C) + v);
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

template <int DType, int Ndim, int Direction, int TM, int TN, int TK, int CM, int CN, bool Pingpong>
struct Sm90GemmConv {
    using T = typename ConvElement<DType>::T;
    using Gemm = Sm90Gemm<DType, Direction == TD_CONV_BWD_WEIGHT ? TD_CRR : TD_RCR, false, -1, TM, TN, TK, CM, CN,
                          Pingpong, false, false>;

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
        if (g.C % 8 || g.K % 8) { *why = "C and K must be multiples of 8 (16-byte rows for TMA)"; return TD_UNSUPPORTED; }
        if (Direction == TD_CONV_BWD_DATA) {
            for (int d = 0; d < 3; ++d) {
                if (g.stride[d] != 1) { *why = "bwd_data through the GEMM path needs stride 1"; return TD_UNSUPPORTED; }
                if (g.pad[d] > g.dil[d] * (g.fil[d] - 1)) { *why = "padding beyond the filter span"; return TD_UNSUPPORTED; }
            }
        }
        const int64_t cols = rows(as_forward(g)) * g.taps() * (Direction == TD_CONV_BWD_DATA ? g.K : g.C);
        if (cols > INT32_MAX) { *why = "the im2col buffer would hold 2^31 elements or more"; return TD_UNSUPPORTED; }
        return TD_OK;
    }

    struct Layout {
        size_t cols, wflip, gemm;
    };
    static Layout layout(const TdConvProblem& p) {
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DeviceGeometry f = as_forward(geo);
        Layout l{};
        if (!pointwise(f)) l.cols = (size_t)rows(f) * f.taps * f.C * sizeof(T);
        if (Direction == TD_CONV_BWD_DATA) l.wflip = (size_t)f.K * f.taps * f.C * sizeof(T);
        l.gemm = Gemm::workspace_size(gemm_problem(f));
        l.cols = (l.cols + 255) / 256 * 256;
        l.wflip = (l.wflip + 255) / 256 * 256;
        return l;
    }

    static size_t workspace_size(const TdConvProblem& p) {
        const Layout l = layout(p);
        return l.cols + l.wflip + l.gemm;
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DeviceGeometry f = as_forward(geo);
        const Layout l = layout(p);
        const size_t need = l.cols + l.wflip + l.gemm;
        char* base = nullptr;
        if (int st = take_workspace(need, ws, ws_bytes, stream_ptr, reinterpret_cast<void**>(&base))) return st;
        T* cols = reinterpret_cast<T*>(base);
        T* wflip = reinterpret_cast<T*>(base + l.cols);
        void* gemm_ws = base + l.cols + l.wflip;
        // the forward problem's input and weight
        const T* x = static_cast<const T*>(Direction == TD_CONV_BWD_DATA ? out : in);
        const T* w = static_cast<const T*>(wei);
        if (Direction == TD_CONV_BWD_DATA) {
            const DeviceGeometry g = device_geometry(geo);
            const int64_t n = (int64_t)g.K * g.taps * g.C;
            conv_flip_weights<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(g, w, wflip);
            w = wflip;
        }
        const T* a = x;
        if (!pointwise(f)) {
            const int64_t n = rows(f) * f.taps * (f.C / 8);
            conv_im2col<T><<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(f, x, cols);
            a = cols;
        }
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return fail(TD_ERROR, std::string("im2col launch failed: ") + cudaGetErrorString(err));
        const TdGemmProblem gp = gemm_problem(f);
        if (Direction == TD_CONV_BWD_WEIGHT)  // A = dy^T (column-major, lda K), B = cols
            return Gemm::run(gp, out, a, const_cast<void*>(wei), gemm_ws, l.gemm, stream_ptr);
        void* dst = Direction == TD_CONV_FWD ? out : const_cast<void*>(in);
        return Gemm::run(gp, a, w, dst, gemm_ws, l.gemm, stream_ptr);
    }
};

}  // namespace td::cuda
