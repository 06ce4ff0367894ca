// cuda backend: grouped convolution as an implicit GEMM on tensor cores (mma.sync m16n8k16,
// fp32 accumulation) for any channel counts per group that are multiples of 8 (the 16-byte
// copies), every direction, 1D/2D/3D, channels-last. Made for the groups of RegNet and
// ResNeXt (24 to a few hundred channels per group), where the specialised families (direct,
// mma, tiled_mma: up to 32 channels per group) have no kernel and the generic direct kernel
// computes one output per thread.
//
// Layouts: x[N][*in][G][C], w[G*K][*fil][C], y[N][*out][G][K]. Per group g, one GEMM
//   D[m][n] = sum over r of A[m][r] * B[n][r]:
//   fwd        m = output pixel (N x out pixels), n = output channel k (K), r = (tap, c)
//              A[m][(tap, c)] = x[in(m, tap)][g][c] (zero outside the image), B[k][r] = w[g K + k][r]
//   bwd_data   m = input pixel (N x in pixels), n = input channel c (C), r = (tap, k)
//              A[m][(tap, k)] = dy[o][g][k] where o = (i + pad - f dil) / stride is whole and
//              inside the output (else zero: at stride > 1 a gather with the missing taps
//              zero-filled), B[c][(tap, k)] = w[g K + k][tap][c]
//   bwd_weight m = output channel k (K), n = (tap, c) (taps x C), r = output pixel p (N x out pixels)
//              A[k][p] = dy[p][g][k], B[(tap, c)][p] = x[in(p, tap)][g][c]
// The group is the grid's z: one launch for all groups. A block computes a BM x BN tile of D
// with four warps (2 x 2, each BM/2 x BN/2) over the reduction in steps of BK = 32.
//
// Shared memory: kGmmaStages buffers of the A and B tiles filled by cp.async (16 bytes: 8
// channels of one pixel and tap, or 8 consecutive k / m / n; zero-filled where out of range),
// read by ldmatrix. An operand whose reduction index is contiguous in memory (fwd A and B,
// bwd_data A) is stored [row][BK] and read with ldmatrix; one contiguous along its rows (bwd_data
// B, bwd_weight A and B) is stored [BK][row] and read with ldmatrix.trans. Every row is padded by
// 16 bytes, an odd count of 16-byte slots, so the eight rows of one ldmatrix phase fall in
// distinct banks.
//
// bwd_weight's reduction (every output pixel of the batch) is split over the grid's y into
// slices of whole BK steps; with several slices each writes fp32 partial sums to the
// workspace and conv_bwd_weight_reduce adds them in a fixed order (deterministic, no atomics).
// The slice count depends on the problem only (kGmmaSms, not the device), so the workspace
// size and the result bits do too.
#pragma once

#include "cuda/conv_mma_tiled.cuh"

namespace td::cuda {

constexpr int kGmmaThreads = 128;  // four warps, 2 x 2 over the block tile
constexpr int kGmmaStages = 3;     // shared-memory buffers: two tiles in flight under the MMAs
constexpr int kGmmaSms = 132;      // the H200's SMs: bwd_weight's slice count aims at them
constexpr int kGmmaPad = 8;        // elements of padding per shared-memory row (16 bytes)

template <int N>
__device__ __forceinline__ void gmma_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The GEMM of one group and how the grid covers it.
struct GmmaPlan {
    int M, Ng, Kred;      // per group: rows, columns, reduction length
    int mtiles, ntiles;   // tiles of BM rows, BN columns
    int splits, kslice;   // bwd_weight: reduction slices (grid y), reduction length per slice (whole BK steps)
    int64_t elems;        // bwd_weight: elements of dw (G K taps C), the stride of the partial rows
};

inline GmmaPlan gmma_plan(const ConvGeometry& g, int direction, int bm, int bn, int bk) {
    GmmaPlan p{};
    const int64_t taps = g.taps();
    if (direction == TD_CONV_FWD) {
        p.M = (int)(g.N * g.out_pixels()); p.Ng = (int)g.K; p.Kred = (int)(taps * g.C);
    } else if (direction == TD_CONV_BWD_DATA) {
        p.M = (int)(g.N * g.in_pixels()); p.Ng = (int)g.C; p.Kred = (int)(taps * g.K);
    } else {
        p.M = (int)g.K; p.Ng = (int)(taps * g.C); p.Kred = (int)(g.N * g.out_pixels());
    }
    p.mtiles = (p.M + bm - 1) / bm;
    p.ntiles = (p.Ng + bn - 1) / bn;
    p.elems = g.G * g.K * taps * g.C;
    p.splits = 1;
    p.kslice = (p.Kred + bk - 1) / bk * bk;
    if (direction == TD_CONV_BWD_WEIGHT) {
        // Enough blocks for about two waves of two blocks per SM, each slice at least 8 BK
        // steps long, at most 64 slices.
        const int64_t tiles = g.G * (int64_t)p.mtiles * p.ntiles;
        const int64_t steps = (p.Kred + bk - 1) / bk;
        int64_t s = (4LL * kGmmaSms + tiles - 1) / tiles;
        s = std::min<int64_t>({s, 64, std::max<int64_t>(1, steps / 8)});
        s = std::max<int64_t>(s, 1);
        p.kslice = (int)((steps + s - 1) / s) * bk;
        p.splits = (int)((p.Kred + p.kslice - 1) / p.kslice);
    }
    return p;
}

// Byte offsets of the shared-memory tiles of one stage.
template <int Direction, int BM, int BN, int BK>
struct GmmaSmem {
    static constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;
    static constexpr bool kATrans = kWgrad;                        // A stored [BK][BM]
    static constexpr bool kBTrans = Direction != TD_CONV_FWD;      // B stored [BK][BN]
    static constexpr int kAPitch = kATrans ? BM + kGmmaPad : BK + kGmmaPad;  // elements per row
    static constexpr int kBPitch = kBTrans ? BN + kGmmaPad : BK + kGmmaPad;
    static constexpr int kABytes = (kATrans ? BK : BM) * kAPitch * 2;
    static constexpr int kBBytes = (kBTrans ? BK : BN) * kBPitch * 2;
    static constexpr int kStageBytes = kABytes + kBBytes;
    static constexpr int kBytes = kGmmaStages * kStageBytes;
};

// fwd / bwd_data A: BM rows (pixels) x BK of (tap, channel), gathered from the source tensor
// src[N][*S][G][CH] (fwd: x, S = in, CH = C; bwd_data: dy, S = out, CH = K). A thread copies
// column v (8 channels) of BM / 32 rows; every row of a thread is at the same r, so one
// (tap, channel) state per thread, advanced by BK each step (no division in the loop).
template <class T, int Direction, int BM, int BK>
struct GmmaGatherA {
    static constexpr int kRows = BM * BK / 8 / kGmmaThreads;  // rows a thread copies
    static constexpr int kVecs = BK / 8;                      // 16-byte vectors per row
    int base[kRows];        // element offset of the row's image and group; -1: past the GEMM's rows
    int pos[kRows][3];      // fwd: out * stride - pad; bwd_data: in + pad
    int c, f[3];            // the thread's (tap as filter coordinates, channel) at the current step
    int row0, v;

    __device__ __forceinline__ void init(const DeviceGeometry& g, int grp, int m0, int M) {
        constexpr bool fwd = Direction == TD_CONV_FWD;
        const int* rows = fwd ? g.out : g.in;
        const int* src = fwd ? g.in : g.out;
        const int ch = fwd ? g.C : g.K;
        v = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const int m = m0 + row0 + i * (kGmmaThreads / kVecs);
            base[i] = -1;
            pos[i][0] = pos[i][1] = pos[i][2] = 0;
            if (m < M) {
                int rest = m;
                const int c2 = rest % rows[2]; rest /= rows[2];
                const int c1 = rest % rows[1]; rest /= rows[1];
                const int c0 = rest % rows[0];
                const int n = rest / rows[0];
                const int cc[3] = {c0, c1, c2};
#pragma unroll
                for (int d = 0; d < 3; ++d) pos[i][d] = fwd ? cc[d] * g.stride[d] - g.pad[d] : cc[d] + g.pad[d];
                base[i] = (n * src[0] * src[1] * src[2] * g.G + grp) * ch;
            }
        }
        // r = 8 v: its tap and channel
        const int r = 8 * v;
        const int tap = r / ch;
        c = r % ch;
        f[2] = tap % g.fil[2];
        f[1] = (tap / g.fil[2]) % g.fil[1];
        f[0] = tap / (g.fil[2] * g.fil[1]);
    }

    // Copies this step's vectors into the tile ([BM][BK + pad]) and advances r by BK.
    __device__ __forceinline__ void load(const DeviceGeometry& g, const T* __restrict__ src, unsigned char* tile,
                                         int pitch) {
        constexpr bool fwd = Direction == TD_CONV_FWD;
        const int* ss = fwd ? g.in : g.out;
        const int ch = fwd ? g.C : g.K;
        const int gch = g.G * ch;
        const bool tap_ok = f[0] < g.fil[0];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            bool ok = tap_ok && base[i] >= 0;
            int p[3];
#pragma unroll
            for (int d = 0; d < 3; ++d) {
                const int off = f[d] * g.dil[d];
                if (fwd) {
                    p[d] = pos[i][d] + off;
                } else {
                    int o = pos[i][d] - off;
                    if (g.stride[d] != 1) {
                        ok = ok && o >= 0 && o % g.stride[d] == 0;
                        o /= g.stride[d];
                    }
                    p[d] = o;
                }
                ok = ok && (unsigned)p[d] < (unsigned)ss[d];
            }
            const T* at = ok ? src + base[i] + ((p[0] * ss[1] + p[1]) * ss[2] + p[2]) * gch + c : src;
            cp_async16(tile + ((row0 + i * (kGmmaThreads / kVecs)) * pitch + v * 8) * 2, at, ok);
        }
        // the next step: r + BK (BK / ch taps ahead at most 4 times round the channels)
        c += BK;
        while (c >= ch) {
            c -= ch;
            if (++f[2] == g.fil[2]) {
                f[2] = 0;
                if (++f[1] == g.fil[1]) { f[1] = 0; ++f[0]; }
            }
        }
    }
};

// fwd B: BN rows (output channels k) x BK of r = (tap, c), w[g K + k][r] contiguous in r.
template <class T, int BN, int BK>
struct GmmaWeightRows {
    static constexpr int kVecs = BK / 8;
    static constexpr int kRows = BN * BK / 8 / kGmmaThreads;
    const T* row_ptr[kRows];  // nullptr: past K
    int r, kred, row0, v;

    __device__ __forceinline__ void init(const DeviceGeometry& g, int grp, int n0, const T* w, int Kred) {
        v = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
        kred = Kred;
        r = 8 * v;
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const int n = n0 + row0 + i * (kGmmaThreads / kVecs);
            row_ptr[i] = n < g.K ? w + ((int64_t)grp * g.K + n) * Kred : nullptr;
        }
    }
    __device__ __forceinline__ void load(const T* w, unsigned char* tile, int pitch) {
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const bool ok = row_ptr[i] != nullptr && r < kred;
            cp_async16(tile + ((row0 + i * (kGmmaThreads / kVecs)) * pitch + v * 8) * 2, ok ? row_ptr[i] + r : w, ok);
        }
        r += BK;
    }
};

// bwd_data B, stored [BK][BN]: row r = (tap, k), columns c: w[g K + k][tap][c], 8 c a vector.
template <class T, int BN, int BK>
struct GmmaWeightCols {
    static constexpr int kVecs = BN / 8;                        // vectors per row
    static constexpr int kSlots = BK * BN / 8 / kGmmaThreads;   // vectors a thread copies
    static constexpr int kRowStep = kGmmaThreads / kVecs;
    int tap[kSlots], k[kSlots];  // each slot's row at the current step
    int col, row0;
    bool col_ok;

    __device__ __forceinline__ void init(const DeviceGeometry& g, int n0) {
        col = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
        col_ok = n0 + 8 * col < g.C;
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int r = row0 + s * kRowStep;
            tap[s] = r / g.K;
            k[s] = r % g.K;
        }
    }
    __device__ __forceinline__ void load(const DeviceGeometry& g, int grp, int n0, const T* w, unsigned char* tile,
                                         int pitch) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const bool ok = col_ok && tap[s] < g.taps;
            const T* at = ok ? w + (((int64_t)grp * g.K + k[s]) * g.taps + tap[s]) * g.C + n0 + 8 * col : w;
            cp_async16(tile + ((row0 + s * kRowStep) * pitch + col * 8) * 2, at, ok);
            k[s] += BK;
            while (k[s] >= g.K) { k[s] -= g.K; ++tap[s]; }
        }
    }
};

// bwd_weight A, stored [BK][BM]: row p (output pixel), columns k: dy[p][g][k].
template <class T, int BM, int BK>
struct GmmaDyRows {
    static constexpr int kVecs = BM / 8;
    static constexpr int kSlots = BK * BM / 8 / kGmmaThreads;
    static constexpr int kRowStep = kGmmaThreads / kVecs;
    int col, row0;
    bool col_ok;

    __device__ __forceinline__ void init(const DeviceGeometry& g, int m0) {
        col = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
        col_ok = m0 + 8 * col < g.K;
    }
    __device__ __forceinline__ void load(const DeviceGeometry& g, int grp, int m0, int p0, int p_end, const T* dy,
                                         unsigned char* tile, int pitch) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int p = p0 + row0 + s * kRowStep;
            const bool ok = col_ok && p < p_end;
            const T* at = ok ? dy + ((int64_t)p * g.G + grp) * g.K + m0 + 8 * col : dy;
            cp_async16(tile + ((row0 + s * kRowStep) * pitch + col * 8) * 2, at, ok);
        }
    }
};

// bwd_weight B, stored [BK][BN]: row p (output pixel), columns n = (tap, c): x[in(p, tap)][g][c].
// A thread's column (tap, 8 channels) is fixed; its rows' pixels are decoded each step.
template <class T, int BN, int BK>
struct GmmaXCols {
    static constexpr int kVecs = BN / 8;
    static constexpr int kSlots = BK * BN / 8 / kGmmaThreads;
    static constexpr int kRowStep = kGmmaThreads / kVecs;
    int col, row0, c, off[3];  // off: the tap's f * dil - pad
    bool col_ok;

    __device__ __forceinline__ void init(const DeviceGeometry& g, int n0, int Ng) {
        col = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
        const int n = n0 + 8 * col;
        col_ok = n < Ng;
        const int tap = col_ok ? n / g.C : 0;
        c = col_ok ? n % g.C : 0;
        const int f2 = tap % g.fil[2], f1 = (tap / g.fil[2]) % g.fil[1], f0 = tap / (g.fil[2] * g.fil[1]);
        off[0] = f0 * g.dil[0] - g.pad[0];
        off[1] = f1 * g.dil[1] - g.pad[1];
        off[2] = f2 * g.dil[2] - g.pad[2];
    }
    __device__ __forceinline__ void load(const DeviceGeometry& g, int grp, int p0, int p_end, const T* x,
                                         unsigned char* tile, int pitch) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int p = p0 + row0 + s * kRowStep;
            bool ok = col_ok && p < p_end;
            int rest = ok ? p : 0;
            const int o2 = rest % g.out[2]; rest /= g.out[2];
            const int o1 = rest % g.out[1]; rest /= g.out[1];
            const int o0 = rest % g.out[0];
            const int n = rest / g.out[0];
            const int i0 = o0 * g.stride[0] + off[0], i1 = o1 * g.stride[1] + off[1], i2 = o2 * g.stride[2] + off[2];
            ok = ok && (unsigned)i0 < (unsigned)g.in[0] && (unsigned)i1 < (unsigned)g.in[1] &&
                 (unsigned)i2 < (unsigned)g.in[2];
            const T* at =
                ok ? x + ((((int64_t)n * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * g.G * g.C + grp * g.C + c : x;
            cp_async16(tile + ((row0 + s * kRowStep) * pitch + col * 8) * 2, at, ok);
        }
    }
};

// One block: a BM x BN tile of group blockIdx.z's D. fwd / bwd_data: blockIdx.x = m tile,
// blockIdx.y = n tile. bwd_weight: blockIdx.x = m tile + mtiles x n tile, blockIdx.y = slice.
//   fwd:        a = x,  b = w,  dst = y
//   bwd_data:   a = dy, b = w,  dst = dx
//   bwd_weight: a = dy, b = x,  dst = dw (one slice) or partial (fp32 rows, one per slice)
template <class T, int Direction, int BM, int BN, int BK>
__global__ void __launch_bounds__(kGmmaThreads) conv_gmma(DeviceGeometry g, GmmaPlan pl, const T* __restrict__ a,
                                                          const T* __restrict__ b, T* __restrict__ dst,
                                                          float* __restrict__ partial) {
    using S = GmmaSmem<Direction, BM, BN, BK>;
    constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;
    constexpr int WM = BM / 2, WN = BN / 2, MI = WM / 16, NI = WN / 8;
    static_assert(BK == 32 && BM % 32 == 0 && BN % 32 == 0 && NI % 2 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char gmma_smem[];

    const int grp = blockIdx.z;
    int mt, nt, kbeg, kend;
    if (kWgrad) {
        mt = blockIdx.x % pl.mtiles;
        nt = blockIdx.x / pl.mtiles;
        kbeg = blockIdx.y * pl.kslice;
        kend = min(pl.Kred, kbeg + pl.kslice);
    } else {
        mt = blockIdx.x;
        nt = blockIdx.y;
        kbeg = 0;
        kend = pl.Kred;
    }
    const int m0 = mt * BM, n0 = nt * BN;
    const int steps = (kend - kbeg + BK - 1) / BK;

    // the loaders of this direction (the others stay unused)
    GmmaGatherA<T, Direction, BM, BK> ga;
    GmmaWeightRows<T, BN, BK> wr;
    GmmaWeightCols<T, BN, BK> wc;
    GmmaDyRows<T, BM, BK> dr;
    GmmaXCols<T, BN, BK> xc;
    if constexpr (kWgrad) {
        dr.init(g, m0);
        xc.init(g, n0, pl.Ng);
    } else {
        ga.init(g, grp, m0, pl.M);
        if constexpr (Direction == TD_CONV_FWD) wr.init(g, grp, n0, b, pl.Kred);
        else wc.init(g, n0);
    }
    int kload = kbeg;  // bwd_weight: the next step's first pixel
    auto load_stage = [&](int stage) {
        unsigned char* ta = gmma_smem + stage * S::kStageBytes;
        unsigned char* tb = ta + S::kABytes;
        if constexpr (kWgrad) {
            dr.load(g, grp, m0, kload, kend, a, ta, S::kAPitch);
            xc.load(g, grp, kload, kend, b, tb, S::kBPitch);
            kload += BK;
        } else {
            ga.load(g, a, ta, S::kAPitch);
            if constexpr (Direction == TD_CONV_FWD) wr.load(b, tb, S::kBPitch);
            else wc.load(g, grp, n0, b, tb, S::kBPitch);
        }
    };

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp & 1, wn = warp >> 1;
    float acc[MI][NI][4];
    zero_sums(acc);

#pragma unroll
    for (int s = 0; s < kGmmaStages - 1; ++s) {
        if (s < steps) load_stage(s);
        cp_async_commit();
    }
    const unsigned smem_base = (unsigned)__cvta_generic_to_shared(gmma_smem);
    const int li = lane & 7, lj = lane >> 3;  // ldmatrix: row within a matrix, matrix
    for (int it = 0; it < steps; ++it) {
        gmma_cp_async_wait<kGmmaStages - 2>();
        __syncthreads();  // step it's tiles are in; every warp is done with the buffer refilled next
        if (it + kGmmaStages - 1 < steps) load_stage((it + kGmmaStages - 1) % kGmmaStages);
        cp_async_commit();
        const unsigned ta = smem_base + (it % kGmmaStages) * S::kStageBytes;
        const unsigned tb = ta + S::kABytes;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int mrow = wm * WM + i * 16;
                if constexpr (S::kATrans) {
                    ldsm_x4_trans(af[i], ta + ((kk + li + (lj >> 1) * 8) * S::kAPitch + mrow + (lj & 1) * 8) * 2);
                } else {
                    ldsm_x4(af[i], ta + ((mrow + (lane & 15)) * S::kAPitch + kk + (lane >> 4) * 8) * 2);
                }
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                const int ncol = wn * WN + j * 8;
                uint32_t r[4];
                if constexpr (S::kBTrans) {
                    ldsm_x4_trans(r, tb + ((kk + li + (lj & 1) * 8) * S::kBPitch + ncol + (lj >> 1) * 8) * 2);
                } else {
                    ldsm_x4(r, tb + ((ncol + li + (lj >> 1) * 8) * S::kBPitch + kk + (lj & 1) * 8) * 2);
                }
                bf[j][0] = r[0]; bf[j][1] = r[1]; bf[j + 1][0] = r[2]; bf[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma16816<T>(acc[i][j], af[i], bf[j]);
        }
    }
    gmma_cp_async_wait<0>();

    // Results: rows m, column pairs (n, n + 1) (Ng is a multiple of 8: a pair is in or out whole).
    const int r4 = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm * WM + i * 16 + r4 + 8 * h;
            if (m >= pl.M) continue;
            int64_t row;  // the element offset of D's row m
            if constexpr (Direction == TD_CONV_FWD) row = ((int64_t)m * g.G + grp) * g.K;
            else if constexpr (Direction == TD_CONV_BWD_DATA) row = ((int64_t)m * g.G + grp) * g.C;
            else row = ((int64_t)grp * g.K + m) * pl.Ng;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int n = n0 + wn * WN + j * 8 + 2 * q;
                if (n >= pl.Ng) continue;
                const float lo = acc[i][j][2 * h], hi = acc[i][j][2 * h + 1];
                if (kWgrad && pl.splits > 1) {
                    *reinterpret_cast<float2*>(partial + blockIdx.y * pl.elems + row + n) = make_float2(lo, hi);
                } else {
                    *reinterpret_cast<uint32_t*>(dst + row + n) = pack_pair<T>(lo, hi);
                }
            }
        }
}

// tile = BM x BN x BK of the implicit GEMM (BM, BN multiples of 32, BK 32); 128 threads.
template <int DType, int Ndim, int Direction, int BM, int BN, int BK>
struct Sm90GroupedMmaConv {
    using T = typename ConvElement<DType>::T;
    using S = GmmaSmem<Direction, BM, BN, BK>;
    static constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (g.C % 8 || g.K % 8) {
            *why = "channels per group C=" + std::to_string(g.C) + ", K=" + std::to_string(g.K) +
                   " (this kernel takes multiples of 8: 16-byte copies)";
            return TD_UNSUPPORTED;
        }
        if (g.G > 65535) { *why = "more than 65535 groups (the grid's z)"; return TD_UNSUPPORTED; }
        if (int st = conv_tensors_fit_int32(g, why)) return st;
        const GmmaPlan pl = gmma_plan(g, Direction, BM, BN, BK);
        if ((int64_t)pl.mtiles * (kWgrad ? pl.ntiles : 1) > INT32_MAX || (!kWgrad && pl.ntiles > 65535)) {
            *why = "too many tiles for the grid";
            return TD_UNSUPPORTED;
        }
        return TD_OK;
    }

    static size_t workspace_size(const TdConvProblem& p) {
        ConvGeometry g{};
        if (!kWgrad || !conv_geometry(p, &g).empty()) return 0;
        const GmmaPlan pl = gmma_plan(g, Direction, BM, BN, BK);
        return pl.splits > 1 ? (size_t)pl.splits * (size_t)pl.elems * sizeof(float) : 0;
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if (!(conv_aligned16(in) && conv_aligned16(wei) && conv_aligned16(out)))
            return fail(TD_REJECTED, "a tensor's address is not 16-byte aligned (the 16-byte copies need it); "
                                     "the generic kernel takes it");
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DeviceGeometry g = device_geometry(geo);
        const GmmaPlan pl = gmma_plan(geo, Direction, BM, BN, BK);
        void* scratch = nullptr;
        if (int st = take_workspace(workspace_size(p), ws, ws_bytes, stream_ptr, &scratch)) return st;
        auto kernel = conv_gmma<T, Direction, BM, BN, BK>;
        if (S::kBytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kBytes);
        const T* x = static_cast<const T*>(in);
        const T* w = static_cast<const T*>(wei);
        const T* dy = static_cast<const T*>(out);
        if constexpr (Direction == TD_CONV_FWD) {
            kernel<<<dim3((unsigned)pl.mtiles, (unsigned)pl.ntiles, (unsigned)g.G), kGmmaThreads, S::kBytes, stream>>>(
                g, pl, x, w, static_cast<T*>(out), nullptr);
        } else if constexpr (Direction == TD_CONV_BWD_DATA) {
            kernel<<<dim3((unsigned)pl.mtiles, (unsigned)pl.ntiles, (unsigned)g.G), kGmmaThreads, S::kBytes, stream>>>(
                g, pl, dy, w, static_cast<T*>(const_cast<void*>(in)), nullptr);
        } else {
            T* dw = static_cast<T*>(const_cast<void*>(wei));
            float* part = static_cast<float*>(scratch);
            kernel<<<dim3((unsigned)(pl.mtiles * pl.ntiles), (unsigned)pl.splits, (unsigned)g.G), kGmmaThreads,
                     S::kBytes, stream>>>(g, pl, dy, x, dw, part);
            if (pl.splits > 1)
                pdl_launch(conv_bwd_weight_reduce<T>, dim3((unsigned)((pl.elems + 31) / 32)), dim3(32, 8), 0, stream,
                           static_cast<const float*>(part), dw, pl.elems, pl.splits);
        }
        return launch_status();
    }
};

}  // namespace td::cuda
