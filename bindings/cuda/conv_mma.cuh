// cuda backend: grouped convolution on tensor cores (mma.sync m16n8k16, fp32 accumulation)
// for 2..32 channels per group, forward and backward-data. One warp computes 16 x PM output
// pixels x all K output channels (8 x PN, the tail masked) of one group, as an implicit GEMM
// over (tap, channel) read straight from the channels-last tensors: no im2col buffer, no
// shared memory, 32-bit loads of channel pairs.
//   fwd       y[pix][g][k]  = sum over (tap, c) of x[pos(pix, tap)][g][c] * w[g][k][tap][c]
//   bwd_data  dx[pix][g][c] = sum over (tap, k) of dy[o(pix, tap)][g][k] * w[g][k][tap][c]
// Fragment layouts (PTX ISA, mma.m16n8k16 .row.col): r = lane / 4, q = lane % 4;
//   A: a0 (r, 2q..2q+1)  a1 (r+8, 2q..)  a2 (r, 2q+8..)  a3 (r+8, 2q+8..)
//   B: b0 (k 2q..2q+1, n r)  b1 (k 2q+8.., n r);  C: c0,c1 (r, 2q..)  c2,c3 (r+8, 2q..)
#pragma once

#include "cuda/conv_direct.cuh"

namespace td::cuda {

template <class T> struct MmaName;
template <> struct MmaName<__half> { static constexpr bool bf16 = false; };
template <> struct MmaName<__nv_bfloat16> { static constexpr bool bf16 = true; };

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if constexpr (MmaName<T>::bf16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// m16n8k8: A a0 (r, 2q..2q+1) a1 (r+8, 2q..); B b0 (k 2q..2q+1, n r); C as m16n8k16.
template <class T>
__device__ __forceinline__ void mma1688(float (&d)[4], const uint32_t (&a)[2], uint32_t b) {
    if constexpr (MmaName<T>::bf16) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(b));
    } else {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(b));
    }
}

__device__ __forceinline__ uint32_t ld32(const void* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
__device__ __forceinline__ uint32_t ld16(const void* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }

// Coordinates of one GEMM row (an output pixel for fwd, an input pixel for bwd_data).
struct MmaRow {
    int n, c[3];
    bool valid;
};

constexpr int kMmaMaxTaps = 512;

template <class T, int Direction, int CPG, int PM>
__global__ void __launch_bounds__(128) conv_mma(DeviceGeometry g, const T* __restrict__ x, const T* __restrict__ w,
                                                const T* __restrict__ dy, T* __restrict__ dst) {
    constexpr int PN = (CPG + 7) / 8;
    // Tap offsets (f * dil per dimension) once per block: no division in the K loop.
    __shared__ int4 tap_off[kMmaMaxTaps];
    for (int t = threadIdx.x; t < g.taps; t += blockDim.x) {
        const int f2 = t % g.fil[2], f1 = (t / g.fil[2]) % g.fil[1], f0 = t / (g.fil[2] * g.fil[1]);
        tap_off[t] = make_int4(f0 * g.dil[0], f1 * g.dil[1], f2 * g.dil[2], 0);
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int* rows_size = Direction == TD_CONV_FWD ? g.out : g.in;
    const int* src_size = Direction == TD_CONV_FWD ? g.in : g.out;
    const int64_t pixels = (int64_t)g.N * rows_size[0] * rows_size[1] * rows_size[2];
    const unsigned pblocks = (unsigned)((pixels + 16 * PM - 1) / (16 * PM));
    if (warp >= pblocks * (unsigned)g.G) return;  // whole warps: mma.sync needs every lane
    const int grp = (int)(warp % (unsigned)g.G);
    const unsigned pb = warp / (unsigned)g.G;
    const int r = lane >> 2, q = lane & 3;
    const int taps = g.taps, kk_total = taps * CPG;
    const int chans = g.G * CPG;
    const bool unit_stride = g.stride[0] == 1 && g.stride[1] == 1 && g.stride[2] == 1;
    const T* src = Direction == TD_CONV_FWD ? x : dy;

    MmaRow row[PM][2];
#pragma unroll
    for (int i = 0; i < PM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t pix = (int64_t)pb * 16 * PM + i * 16 + r + 8 * h;
            MmaRow& m = row[i][h];
            m.valid = pix < pixels;
            int64_t rest = m.valid ? pix : 0;
            m.c[2] = (int)(rest % rows_size[2]); rest /= rows_size[2];
            m.c[1] = (int)(rest % rows_size[1]); rest /= rows_size[1];
            m.c[0] = (int)(rest % rows_size[0]);
            m.n = (int)(rest / rows_size[0]);
            // fwd: input position = c * stride - pad + off;  bwd_data: output = (c + pad - off) / stride
#pragma unroll
            for (int d = 0; d < 3; ++d)
                m.c[d] = Direction == TD_CONV_FWD ? m.c[d] * g.stride[d] - g.pad[d] : m.c[d] + g.pad[d];
        }

    // A element pair (kk, kk + 1) of row m: both in one tap (CPG even), one 32-bit load.
    auto a_pair = [&](const MmaRow& m, int kk) -> uint32_t {
        if (!m.valid || kk >= kk_total) return 0u;
        const int tap = kk / CPG, ch = kk % CPG;  // shifts: CPG is a power of two
        const int4 off = tap_off[tap];
        int p0, p1, p2;
        if (Direction == TD_CONV_FWD) {
            p0 = m.c[0] + off.x; p1 = m.c[1] + off.y; p2 = m.c[2] + off.z;
        } else {
            p0 = m.c[0] - off.x; p1 = m.c[1] - off.y; p2 = m.c[2] - off.z;
            if (!unit_stride) {
                if (p0 < 0 || p1 < 0 || p2 < 0 || p0 % g.stride[0] || p1 % g.stride[1] || p2 % g.stride[2]) return 0u;
                p0 /= g.stride[0]; p1 /= g.stride[1]; p2 /= g.stride[2];
            }
        }
        if ((unsigned)p0 >= (unsigned)src_size[0] || (unsigned)p1 >= (unsigned)src_size[1] ||
            (unsigned)p2 >= (unsigned)src_size[2])
            return 0u;
        const unsigned at = (((unsigned)(m.n * src_size[0] + p0) * src_size[1] + p1) * src_size[2] + p2) * chans +
                            grp * CPG + ch;
        return ld32(src + at);
    };
    // B element pair (kk, kk + 1) at column n: fwd w[g][n][tap][c] (contiguous pair);
    // bwd_data w[g][k][tap][n] for k, k + 1 (two 16-bit loads).
    auto b_pair = [&](int kk, int n) -> uint32_t {
        if (n >= CPG || kk >= kk_total) return 0u;
        if (Direction == TD_CONV_FWD) return ld32(w + ((int64_t)grp * CPG + n) * kk_total + kk);
        const int tap = kk / CPG, k = kk % CPG;
        const T* base = w + (((int64_t)grp * CPG + k) * taps + tap) * CPG + n;
        return ld16(base) | (ld16(base + (int64_t)taps * CPG) << 16);
    };

    float acc[PM][PN][4];
    zero_sums(acc);

    for (int kk0 = 0; kk0 < kk_total; kk0 += 16) {
        uint32_t b[PN][2];
#pragma unroll
        for (int j = 0; j < PN; ++j) {
            b[j][0] = b_pair(kk0 + 2 * q, j * 8 + r);
            b[j][1] = b_pair(kk0 + 2 * q + 8, j * 8 + r);
        }
#pragma unroll
        for (int i = 0; i < PM; ++i) {
            const uint32_t a[4] = {a_pair(row[i][0], kk0 + 2 * q), a_pair(row[i][1], kk0 + 2 * q),
                                   a_pair(row[i][0], kk0 + 2 * q + 8), a_pair(row[i][1], kk0 + 2 * q + 8)};
#pragma unroll
            for (int j = 0; j < PN; ++j) mma16816<T>(acc[i][j], a, b[j]);
        }
    }

#pragma unroll
    for (int i = 0; i < PM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const MmaRow& m = row[i][h];
            if (!m.valid) continue;
            const int64_t pix = (int64_t)pb * 16 * PM + i * 16 + r + 8 * h;  // rows are stored in order
            const int64_t at = pix * chans + grp * CPG;
#pragma unroll
            for (int j = 0; j < PN; ++j) {
                const int col = j * 8 + 2 * q;
                if (col >= CPG) continue;
                T pair[2] = {from_float<T>(acc[i][j][2 * h]), from_float<T>(acc[i][j][2 * h + 1])};
                *reinterpret_cast<uint32_t*>(dst + at + col) = *reinterpret_cast<const uint32_t*>(pair);
            }
        }
}

// tile = (16 x PM pixels per warp, 8 x PN channels per warp, 16 = the MMA's K); 128 threads.
template <int DType, int Ndim, int Direction, int CPG, int TM>
struct Sm90MmaConv {
    using T = typename ConvElement<DType>::T;
    static constexpr int PM = TM / 16;

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (int st = conv_channels_are(g, CPG, why)) return st;
        if (int st = conv_tensors_fit_int32(g, why)) return st;
        if (g.taps() > kMmaMaxTaps) { *why = "more than 512 filter taps"; return TD_UNSUPPORTED; }
        return TD_OK;
    }

    static size_t workspace_size(const TdConvProblem&) { return 0; }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void*, size_t,
                   void* stream_ptr) {
        const auto aligned4 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 3u) == 0; };
        if (!(aligned4(in) && aligned4(wei) && aligned4(out)))
            return fail(TD_REJECTED, "a tensor's address is not 4-byte aligned (the channel-pair loads need it)");
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DeviceGeometry g = device_geometry(geo);
        const int64_t pixels = geo.N * (Direction == TD_CONV_FWD ? geo.out_pixels() : geo.in_pixels());
        const int64_t warps = (pixels + TM - 1) / TM * geo.G;
        const unsigned blocks = (unsigned)((warps * 32 + 127) / 128);
        const T* x = static_cast<const T*>(in);
        const T* w = static_cast<const T*>(wei);
        const T* dy = static_cast<const T*>(out);
        T* dst = static_cast<T*>(Direction == TD_CONV_FWD ? out : const_cast<void*>(in));
        conv_mma<T, Direction, CPG, PM><<<blocks, 128, 0, static_cast<cudaStream_t>(stream_ptr)>>>(g, x, w, dy, dst);
        return launch_status();
    }
};

}  // namespace td::cuda
