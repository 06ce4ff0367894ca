// cuda backend: pointwise convolution (G = 1, every filter side 1, no padding, any stride)
// with few channels, on CUDA cores. Such a layer is a GEMM whose K (the channels read per
// pixel) and N (the channels written) are small over many pixels, or whose pixels are few: the
// stem-side 1x1 layers of MobileNet, EfficientNet, GhostNet and RegNet (16 -> 24 channels at
// 112 x 112) and the squeeze-excite 1x1 layers (20 -> 72 channels on 1 x 1 pixels). A
// tensor-core GEMM tile of 128 x 256 x 64 does a fraction of its work there and pays its start
// per tile; these kernels stream the pixels once, memory-bound, with the weights in shared
// memory. fwd and bwd_data take any channel counts (the cost model keeps them to the small
// ones); bwd_weight at most 64 x 64.
//   fwd        thread = one output pixel and MaxOut of its channels:
//              y[m][k] = sum_c x[in(m)][c] w[k][c]
//   bwd_data   thread = one input pixel and MaxOut of its channels:
//              dx[i][c] = sum_k dy[out(i)][k] w[k][c] (0 off the stride grid)
//   bwd_weight block = a range of output pixels staged through shared memory, each thread a
//              few (k, c) sums; the blocks' fp32 partial sums go to the workspace and a second
//              kernel adds them in a fixed order (deterministic).
// Channel counts need not be multiples of 8 (scalar loads); rows of 8 channels load and
// store 16 bytes at a time.
#pragma once

#include "cuda/conv_direct.cuh"

namespace td::cuda {

// The read channels a chunk of fwd / bwd_data; the most channels of either side in bwd_weight.
constexpr int kPointwiseMaxChannels = 64;

// A pointwise problem as the kernels walk it: `rows` pixels (fwd, bwd_weight: the output's;
// bwd_data: the input's), cin channels read and cout written a pixel.
struct PwGeometry {
    int64_t rows;
    int cin, cout;
    int out[3], in[3], stride[3];
    int strided;   // a stride above 1 somewhere
    int vec_in;    // cin a multiple of 8 and the read tensor 16-byte aligned
    int vec_out;   // cout a multiple of 8 and the written tensor 16-byte aligned
};

// The input pixel of output pixel m (fwd, bwd_weight).
__device__ __forceinline__ int64_t pw_input_pixel(const PwGeometry& g, int64_t m) {
    if (!g.strided) return m;
    const int o2 = (int)(m % g.out[2]);
    int64_t r = m / g.out[2];
    const int o1 = (int)(r % g.out[1]);
    r /= g.out[1];
    const int o0 = (int)(r % g.out[0]);
    const int64_t n = r / g.out[0];
    return ((n * g.in[0] + (int64_t)o0 * g.stride[0]) * g.in[1] + (int64_t)o1 * g.stride[1]) * g.in[2] +
           (int64_t)o2 * g.stride[2];
}

// The output pixel that reads input pixel i, or -1 where none does (bwd_data).
__device__ __forceinline__ int64_t pw_output_pixel(const PwGeometry& g, int64_t i) {
    if (!g.strided) return i;
    const int i2 = (int)(i % g.in[2]);
    int64_t r = i / g.in[2];
    const int i1 = (int)(r % g.in[1]);
    r /= g.in[1];
    const int i0 = (int)(r % g.in[0]);
    const int64_t n = r / g.in[0];
    if (i0 % g.stride[0] || i1 % g.stride[1] || i2 % g.stride[2]) return -1;
    return ((n * g.out[0] + i0 / g.stride[0]) * g.out[1] + i1 / g.stride[1]) * g.out[2] + i2 / g.stride[2];
}

// fwd (BwdData false) and bwd_data: one pixel a thread (blockIdx.x: Threads pixels),
// blockIdx.y: the MaxOut written channels [y MaxOut, (y + 1) MaxOut), fp32 sums in registers.
// The read channels go by in chunks of 64: the chunk's weights as wt[read][written] (pitch
// MaxOut, zeros past cout) in shared memory.
template <class T, int MaxOut, int Threads, bool BwdData>
__global__ void __launch_bounds__(Threads) conv_pw_rows(PwGeometry g, const T* __restrict__ src,
                                                        const T* __restrict__ w, T* __restrict__ dst) {
    constexpr int kChunk = kPointwiseMaxChannels;
    __shared__ __align__(16) float wt[kChunk * MaxOut];
    const int j0 = blockIdx.y * MaxOut;
    const int64_t m = (int64_t)blockIdx.x * Threads + threadIdx.x;
    const bool live = m < g.rows;
    const int64_t sp = !live ? -1 : BwdData ? pw_output_pixel(g, m) : pw_input_pixel(g, m);
    float acc[MaxOut];
#pragma unroll
    for (int j = 0; j < MaxOut; ++j) acc[j] = 0.f;
    for (int c0 = 0; c0 < g.cin; c0 += kChunk) {
        const int nc = g.cin - c0 < kChunk ? g.cin - c0 : kChunk;
        __syncthreads();  // the previous chunk's weights are used up
        for (int e = threadIdx.x; e < nc * MaxOut; e += Threads) {
            const int i = e / MaxOut, j = j0 + e % MaxOut;
            float v = 0.f;
            if (j < g.cout)
                v = to_float(BwdData ? w[(int64_t)(c0 + i) * g.cout + j] : w[(int64_t)j * g.cin + c0 + i]);
            wt[e] = v;
        }
        __syncthreads();
        if (sp < 0) continue;
        const T* row = src + sp * g.cin + c0;
        for (int i0 = 0; i0 < nc; i0 += 8) {
            float v[8];
            if (g.vec_in) {
                const uint4 raw = __ldg(reinterpret_cast<const uint4*>(row + i0));
                const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
                for (int t = 0; t < 8; ++t) v[t] = to_float(e[t]);
            } else {
#pragma unroll
                for (int t = 0; t < 8; ++t) v[t] = i0 + t < nc ? to_float(row[i0 + t]) : 0.f;
            }
            const int n = nc - i0 < 8 ? nc - i0 : 8;
            for (int t = 0; t < n; ++t) {
                const float4* wr = reinterpret_cast<const float4*>(wt + (i0 + t) * MaxOut);
#pragma unroll
                for (int j = 0; j < MaxOut / 4; ++j) {
                    const float4 q = wr[j];
                    acc[4 * j] = fmaf(v[t], q.x, acc[4 * j]);
                    acc[4 * j + 1] = fmaf(v[t], q.y, acc[4 * j + 1]);
                    acc[4 * j + 2] = fmaf(v[t], q.z, acc[4 * j + 2]);
                    acc[4 * j + 3] = fmaf(v[t], q.w, acc[4 * j + 3]);
                }
            }
        }
    }
    if (!live) return;
    T* out = dst + m * g.cout + j0;
    const int nj = g.cout - j0;
    if (g.vec_out) {
#pragma unroll
        for (int j = 0; j < MaxOut; j += 8) {
            if (j < nj) {
                uint4 raw;
                T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
                for (int t = 0; t < 8; ++t) e[t] = from_float<T>(acc[j + t]);
                reinterpret_cast<uint4*>(out + j)[0] = raw;
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < MaxOut; ++j)
            if (j < nj) out[j] = from_float<T>(acc[j]);
    }
}

// bwd_weight: block b sums output pixels [b per, (b + 1) per) into partial[b][k][c] (g.cin = C
// from x, g.cout = K from dy). kStage pixels at a time are staged in shared memory as fp32;
// thread t owns the sums e = t + j Threads (e = k C + c).
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) conv_pw_bwd_weight(PwGeometry g, const T* __restrict__ x,
                                                              const T* __restrict__ dy, float* __restrict__ partial,
                                                              int64_t per) {
    constexpr int kStage = 32;
    constexpr int kOwn = kPointwiseMaxChannels * kPointwiseMaxChannels / Threads;
    __shared__ float xs[kStage][kPointwiseMaxChannels + 1];
    __shared__ float ds[kStage][kPointwiseMaxChannels + 1];
    const int elems = g.cin * g.cout;
    float acc[kOwn];
    int kk[kOwn], cc[kOwn];
#pragma unroll
    for (int j = 0; j < kOwn; ++j) {
        const int e = threadIdx.x + j * Threads;
        acc[j] = 0.f;
        kk[j] = e / g.cin;
        cc[j] = e % g.cin;
    }
    const int64_t begin = (int64_t)blockIdx.x * per;
    const int64_t end = begin + per < g.rows ? begin + per : g.rows;
    for (int64_t m0 = begin; m0 < end; m0 += kStage) {
        const int np = end - m0 < kStage ? (int)(end - m0) : kStage;
        for (int e = threadIdx.x; e < kStage * g.cin; e += Threads) {
            const int p = e / g.cin, c = e % g.cin;
            xs[p][c] = p < np ? to_float(x[pw_input_pixel(g, m0 + p) * g.cin + c]) : 0.f;
        }
        for (int e = threadIdx.x; e < kStage * g.cout; e += Threads) {
            const int p = e / g.cout, k = e % g.cout;
            ds[p][k] = p < np ? to_float(dy[(m0 + p) * g.cout + k]) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kOwn; ++j) {
            if (threadIdx.x + j * Threads < elems) {
                float s = acc[j];
#pragma unroll 8
                for (int p = 0; p < kStage; ++p) s = fmaf(ds[p][kk[j]], xs[p][cc[j]], s);
                acc[j] = s;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < kOwn; ++j) {
        const int e = threadIdx.x + j * Threads;
        if (e < elems) partial[(int64_t)blockIdx.x * elems + e] = acc[j];
    }
}

template <int DType, int Ndim, int Direction, int MaxOut, int Threads>
struct Sm90PointwiseConv {
    using T = typename ConvElement<DType>::T;
    static_assert(MaxOut % 8 == 0 && MaxOut <= kPointwiseMaxChannels, "MaxOut: a multiple of 8 up to 64");
    static_assert(Threads == 128 || Threads == 256, "128 or 256 threads a block");

    // The channels a pixel reads and writes in this direction.
    static int64_t read_channels(const ConvGeometry& g) { return Direction == TD_CONV_BWD_DATA ? g.K : g.C; }
    static int64_t written_channels(const ConvGeometry& g) { return Direction == TD_CONV_BWD_DATA ? g.C : g.K; }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (g.G != 1) { *why = "the pointwise kernels take dense convolutions (G = 1)"; return TD_UNSUPPORTED; }
        for (int d = 0; d < 3; ++d) {
            if (g.fil[d] != 1 || g.pad[d] != 0) {
                *why = "the pointwise kernels take 1x1 filters without padding";
                return TD_UNSUPPORTED;
            }
        }
        if (Direction == TD_CONV_BWD_WEIGHT) {
            if (g.C > kPointwiseMaxChannels || g.K > kPointwiseMaxChannels) {
                *why = "bwd_weight takes at most 64 input and 64 output channels";
                return TD_UNSUPPORTED;
            }
        } else if ((written_channels(g) + MaxOut - 1) / MaxOut > 65535) {
            *why = "more than 65535 blocks of written channels";
            return TD_UNSUPPORTED;
        }
        const int64_t rows = g.N * std::max(g.in_pixels(), g.out_pixels());
        if ((rows + 255) / 256 > INT32_MAX) { *why = "more than 2^31 blocks of pixels"; return TD_UNSUPPORTED; }
        return TD_OK;
    }

    static PwGeometry geometry(const ConvGeometry& g, const void* read, const void* written) {
        PwGeometry q{};
        q.cin = (int)read_channels(g);
        q.cout = (int)written_channels(g);
        q.rows = g.N * (Direction == TD_CONV_BWD_DATA ? g.in_pixels() : g.out_pixels());
        for (int d = 0; d < 3; ++d) {
            q.out[d] = (int)g.out[d];
            q.in[d] = (int)g.in[d];
            q.stride[d] = (int)g.stride[d];
            q.strided = q.strided || g.stride[d] != 1;
        }
        q.vec_in = q.cin % 8 == 0 && conv_aligned16(read);
        q.vec_out = q.cout % 8 == 0 && conv_aligned16(written);
        return q;
    }

    // bwd_weight: pixels a block, blocks enough for four a SM (at least 128 pixels each).
    static int64_t per_block(int64_t rows) {
        const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(4 * (int64_t)device::multiprocessors(),
                                                                      (rows + 127) / 128));
        return (rows + blocks - 1) / blocks;
    }
    static int64_t blocks_of(int64_t rows) { return (rows + per_block(rows) - 1) / per_block(rows); }

    static size_t workspace_size(const TdConvProblem& p) {
        ConvGeometry g{};
        if (!conv_geometry(p, &g).empty() || Direction != TD_CONV_BWD_WEIGHT) return 0;
        return (size_t)(blocks_of(g.N * g.out_pixels()) * g.K * g.C) * sizeof(float);
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        if (Direction == TD_CONV_BWD_WEIGHT) {
            const PwGeometry g = geometry(geo, in, nullptr);
            const int64_t blocks = blocks_of(g.rows), elems = geo.K * geo.C;
            float* partial = nullptr;
            if (int st = take_workspace(workspace_size(p), ws, ws_bytes, stream_ptr, reinterpret_cast<void**>(&partial)))
                return st;
            conv_pw_bwd_weight<T, 256><<<(unsigned)blocks, 256, 0, stream>>>(
                g, static_cast<const T*>(in), static_cast<const T*>(out), partial, per_block(g.rows));
            conv_bwd_weight_reduce<T><<<(unsigned)((elems + 31) / 32), dim3(32, 8), 0, stream>>>(
                partial, static_cast<T*>(const_cast<void*>(wei)), elems, (int)blocks);
            return launch_status();
        }
        // fwd: x (in) -> y (out); bwd_data: dy (out) -> dx (in)
        const void* src = Direction == TD_CONV_BWD_DATA ? out : in;
        void* dst = Direction == TD_CONV_BWD_DATA ? const_cast<void*>(in) : out;
        const PwGeometry g = geometry(geo, src, dst);
        const dim3 grid((unsigned)((g.rows + Threads - 1) / Threads), (unsigned)((g.cout + MaxOut - 1) / MaxOut));
        conv_pw_rows<T, MaxOut, Threads, Direction == TD_CONV_BWD_DATA><<<grid, Threads, 0, stream>>>(
            g, static_cast<const T*>(src), static_cast<const T*>(wei), static_cast<T*>(dst));
        return launch_status();
    }
};

}  // namespace td::cuda
