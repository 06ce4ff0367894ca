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
//              A[m][(tap, k)] = dy[o][g][k] with o = (i + pad - f dil) / stride where that is
//              whole and inside the output (else zero), B[c][(tap, k)] = w[g K + k][tap][c].
//              At stride s > 1 the input pixels split into s^ndim phases (i mod s per dimension);
//              within a phase the taps whose division is whole are the same for every pixel, an
//              arithmetic progression f = first + t (s / gcd(s, dil)), and o = j + base - t step
//              for the phase's pixel i = phase + s j: a stride-1 gather over the phase's taps
//              only (no zero-filled taps). The phases are a grid dimension (y, with the column
//              tiles); a phase without taps writes zeros.
//   bwd_weight m = output channel k (K), n = (tap, c) (taps x C), r = output pixel p (N x out pixels)
//              A[k][p] = dy[p][g][k], B[(tap, c)][p] = x[in(p, tap)][g][c]
// The group is the grid's z: one launch for all groups. A block computes a BM x BN tile of D
// with four warps (2 x 2, each BM/2 x BN/2) over the reduction in steps of BK (32 or 64).
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
    int M, Ng, Kred;      // per group: rows, columns, reduction length (bwd_data: at stride 1)
    int mtiles, ntiles;   // tiles of BM rows (bwd_data: of the largest stride phase), BN columns
    int phases;           // bwd_data: stride phases (grid y = phases x ntiles); else 1
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
    p.phases = 1;
    if (direction == TD_CONV_BWD_DATA) {
        int64_t rows = g.N, phases = 1;  // phase 0's pixels: the most of any phase
        for (int d = 0; d < 3; ++d) {
            phases *= g.stride[d];
            rows *= (g.in[d] + g.stride[d] - 1) / g.stride[d];
            if (phases > INT32_MAX) phases = INT32_MAX;  // supports() refuses more than the grid's y takes
        }
        p.phases = (int)phases;
        p.mtiles = (int)((rows + bm - 1) / bm);
    }
    p.elems = g.G * g.K * taps * g.C;
    p.splits = 1;
    p.kslice = (p.Kred + bk - 1) / bk * bk;
    if (direction == TD_CONV_BWD_WEIGHT) {
        // About four blocks per SM (G x tiles x slices), each slice at least 8 BK steps long,
        // at most 64 slices.
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

// How the GEMM rows of one block map to pixels and its reduction's taps to source positions
// (fwd, and bwd_data's stride phase; see above): row m = (image, j) over the sizes cnt, the
// reduction's taps t over tcount; the source position of (j, t) is j mul + add + t tstep per
// dimension; the filter tap of t is first + t inc; the row's own pixel (bwd_data: where the
// result goes) is ph + j stride.
struct GmmaRows {
    int cnt[3], mul[3], add[3], tcount[3], tstep[3], first[3], inc[3], ph[3];
    int M, taps;
};

__device__ __forceinline__ GmmaRows gmma_rows(const DeviceGeometry& g, int direction, int phase) {
    GmmaRows r;
    int rest = phase;
#pragma unroll
    for (int d = 2; d >= 0; --d) {
        if (direction == TD_CONV_FWD) {
            r.cnt[d] = g.out[d]; r.mul[d] = g.stride[d]; r.add[d] = -g.pad[d];
            r.tcount[d] = g.fil[d]; r.tstep[d] = g.dil[d]; r.first[d] = 0; r.inc[d] = 1; r.ph[d] = 0;
            continue;
        }
        const int s = g.stride[d], dil = g.dil[d], pad = g.pad[d];
        const int p = rest % s;
        rest /= s;
        int a = s, b = dil;  // gcd(s, dil)
        while (b) { const int t = a % b; a = b; b = t; }
        const int inc = s / a;
        int first = -1;
        for (int f = 0; f < inc && f < g.fil[d]; ++f)
            if ((p + pad - f * dil) % s == 0) { first = f; break; }
        r.ph[d] = p;
        r.cnt[d] = p < g.in[d] ? (g.in[d] - p + s - 1) / s : 0;
        r.mul[d] = 1;
        r.first[d] = first < 0 ? 0 : first;
        r.inc[d] = inc;
        r.tcount[d] = first < 0 ? 0 : (g.fil[d] - 1 - first) / inc + 1;
        r.add[d] = first < 0 ? 0 : (p + pad - first * dil) / s;  // exact
        r.tstep[d] = -(inc * dil / s);
    }
    r.M = g.N * r.cnt[0] * r.cnt[1] * r.cnt[2];
    r.taps = r.tcount[0] * r.tcount[1] * r.tcount[2];
    return r;
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
// src[N][*S][G][CH] (fwd: x, S = in, CH = C; bwd_data: dy, S = out, CH = K) through GmmaRows.
// A thread copies column v (8 channels) of BM / 32 rows (BK 32; BM / 16 at BK 64); every row
// of a thread is at the same r, so one (tap, channel) state per thread, advanced by BK each
// step (no division in the loop).
template <class T, int Direction, int BM, int BK>
struct GmmaGatherA {
    static constexpr int kVecs = BK / 8;                      // 16-byte vectors per row
    static constexpr int kRowStep = kGmmaThreads / kVecs;
    static constexpr int kRows = BM / kRowStep;               // rows a thread copies
    int base[kRows];        // element offset of the row's image and group; -1: past the GEMM's rows
    int pos[kRows][3];      // the row's source position at tap 0
    int c, t[3];            // the thread's (tap, channel) at the current step
    int row0, v;

    __device__ __forceinline__ void init(const DeviceGeometry& g, const GmmaRows& rw, int grp, int m0) {
        constexpr bool fwd = Direction == TD_CONV_FWD;
        const int* src = fwd ? g.in : g.out;
        const int ch = fwd ? g.C : g.K;
        v = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const int m = m0 + row0 + i * kRowStep;
            base[i] = -1;
            pos[i][0] = pos[i][1] = pos[i][2] = 0;
            if (m < rw.M) {
                int rest = m;
                int j[3];
                j[2] = rest % rw.cnt[2]; rest /= rw.cnt[2];
                j[1] = rest % rw.cnt[1]; rest /= rw.cnt[1];
                j[0] = rest % rw.cnt[0];
                const int n = rest / rw.cnt[0];
#pragma unroll
                for (int d = 0; d < 3; ++d) pos[i][d] = j[d] * rw.mul[d] + rw.add[d];
                base[i] = (n * src[0] * src[1] * src[2] * g.G + grp) * ch;
            }
        }
        // r = 8 v: its tap and channel
        const int r = 8 * v;
        const int tap = rw.taps ? r / ch : 0;
        c = r % ch;
        t[2] = rw.taps ? tap % rw.tcount[2] : 0;
        t[1] = rw.taps ? (tap / rw.tcount[2]) % rw.tcount[1] : 0;
        t[0] = rw.taps ? tap / (rw.tcount[2] * rw.tcount[1]) : 0;
    }

    // Copies this step's vectors into the tile ([BM][BK + pad]) and advances r by BK.
    __device__ __forceinline__ void load(const DeviceGeometry& g, const GmmaRows& rw, const T* __restrict__ src,
                                         unsigned char* tile, int pitch) {
        constexpr bool fwd = Direction == TD_CONV_FWD;
        const int* ss = fwd ? g.in : g.out;
        const int ch = fwd ? g.C : g.K;
        const int gch = g.G * ch;
        const bool tap_ok = t[0] < rw.tcount[0];
        const int off0 = t[0] * rw.tstep[0], off1 = t[1] * rw.tstep[1], off2 = t[2] * rw.tstep[2];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const int p0 = pos[i][0] + off0, p1 = pos[i][1] + off1, p2 = pos[i][2] + off2;
            const bool ok = tap_ok && base[i] >= 0 && (unsigned)p0 < (unsigned)ss[0] && (unsigned)p1 < (unsigned)ss[1] &&
                            (unsigned)p2 < (unsigned)ss[2];
            const T* at = ok ? src + base[i] + ((p0 * ss[1] + p1) * ss[2] + p2) * gch + c : src;
            cp_async16(tile + ((row0 + i * kRowStep) * pitch + v * 8) * 2, at, ok);
        }
        // the next step: r + BK (at most BK / 8 times round the channels)
        c += BK;
        while (c >= ch) {
            c -= ch;
            if (++t[2] == rw.tcount[2]) {
                t[2] = 0;
                if (++t[1] == rw.tcount[1]) { t[1] = 0; ++t[0]; }
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

// bwd_data B, stored [BK][BN]: row r = (t, k) over the phase's taps, columns c:
// w[g K + k][tap(t)][c], 8 c a vector.
template <class T, int BN, int BK>
struct GmmaWeightCols {
    static constexpr int kVecs = BN / 8;                        // vectors per row
    static constexpr int kSlots = BK * BN / 8 / kGmmaThreads;   // vectors a thread copies
    static constexpr int kRowStep = kGmmaThreads / kVecs;
    int t[kSlots][3], k[kSlots];  // each slot's row at the current step
    int col, row0;
    bool col_ok;

    __device__ __forceinline__ void init(const DeviceGeometry& g, const GmmaRows& rw, int n0) {
        col = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
        col_ok = n0 + 8 * col < g.C;
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int r = row0 + s * kRowStep;
            const int tap = rw.taps ? r / g.K : 0;
            k[s] = r % g.K;
            t[s][2] = rw.taps ? tap % rw.tcount[2] : 0;
            t[s][1] = rw.taps ? (tap / rw.tcount[2]) % rw.tcount[1] : 0;
            t[s][0] = rw.taps ? tap / (rw.tcount[2] * rw.tcount[1]) : 0;
        }
    }
    __device__ __forceinline__ void load(const DeviceGeometry& g, const GmmaRows& rw, int grp, int n0, const T* w,
                                         unsigned char* tile, int pitch) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const bool ok = col_ok && t[s][0] < rw.tcount[0];
            const int tap = ((rw.first[0] + rw.inc[0] * t[s][0]) * g.fil[1] + rw.first[1] + rw.inc[1] * t[s][1]) * g.fil[2] +
                            rw.first[2] + rw.inc[2] * t[s][2];
            const T* at = ok ? w + (((int64_t)grp * g.K + k[s]) * g.taps + tap) * g.C + n0 + 8 * col : w;
            cp_async16(tile + ((row0 + s * kRowStep) * pitch + col * 8) * 2, at, ok);
            k[s] += BK;
            while (k[s] >= g.K) {
                k[s] -= g.K;
                if (++t[s][2] == rw.tcount[2]) {
                    t[s][2] = 0;
                    if (++t[s][1] == rw.tcount[1]) { t[s][1] = 0; ++t[s][0]; }
                }
            }
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
// A thread's column (tap, 8 channels) is fixed. Each of its rows keeps its pixel's
// coordinates (image, output position) and advances them by BK pixels a step as a mixed-radix
// addition (BK's digits in the radices of the output sizes, one carry per digit): no division
// in the loop.
template <class T, int BN, int BK>
struct GmmaXCols {
    static constexpr int kVecs = BN / 8;
    static constexpr int kSlots = BK * BN / 8 / kGmmaThreads;
    static constexpr int kRowStep = kGmmaThreads / kVecs;
    int col, row0, c, off[3];  // off: the tap's f * dil - pad
    bool col_ok;
    int p[kSlots], n[kSlots], o[kSlots][3];  // each row's pixel: linear, image, output position
    int step[4];                             // BK as digits: images, then output d, h, w

    __device__ __forceinline__ void init(const DeviceGeometry& g, int n0, int Ng, int p0) {
        col = threadIdx.x % kVecs;
        row0 = threadIdx.x / kVecs;
        const int nn = n0 + 8 * col;
        col_ok = nn < Ng;
        const int tap = col_ok ? nn / g.C : 0;
        c = col_ok ? nn % g.C : 0;
        const int f2 = tap % g.fil[2], f1 = (tap / g.fil[2]) % g.fil[1], f0 = tap / (g.fil[2] * g.fil[1]);
        off[0] = f0 * g.dil[0] - g.pad[0];
        off[1] = f1 * g.dil[1] - g.pad[1];
        off[2] = f2 * g.dil[2] - g.pad[2];
        auto digits = [&](int v, int* d) {
            d[3] = v % g.out[2]; v /= g.out[2];
            d[2] = v % g.out[1]; v /= g.out[1];
            d[1] = v % g.out[0];
            d[0] = v / g.out[0];
        };
        digits(BK, step);
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            int d[4];
            p[s] = p0 + row0 + s * kRowStep;
            digits(p[s], d);
            n[s] = d[0]; o[s][0] = d[1]; o[s][1] = d[2]; o[s][2] = d[3];
        }
    }
    __device__ __forceinline__ void load(const DeviceGeometry& g, int grp, int p_end, const T* x, unsigned char* tile,
                                         int pitch) {
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int i0 = o[s][0] * g.stride[0] + off[0], i1 = o[s][1] * g.stride[1] + off[1],
                      i2 = o[s][2] * g.stride[2] + off[2];
            const bool ok = col_ok && p[s] < p_end && (unsigned)i0 < (unsigned)g.in[0] &&
                            (unsigned)i1 < (unsigned)g.in[1] && (unsigned)i2 < (unsigned)g.in[2];
            const T* at = ok ? x + ((((int64_t)n[s] * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * g.G * g.C +
                                   grp * g.C + c
                             : x;
            cp_async16(tile + ((row0 + s * kRowStep) * pitch + col * 8) * 2, at, ok);
            // the row's next pixel: p + BK
            p[s] += BK;
            int carry;
            o[s][2] += step[3]; carry = o[s][2] >= g.out[2]; o[s][2] -= carry * g.out[2];
            o[s][1] += step[2] + carry; carry = o[s][1] >= g.out[1]; o[s][1] -= carry * g.out[1];
            o[s][0] += step[1] + carry; carry = o[s][0] >= g.out[0]; o[s][0] -= carry * g.out[0];
            n[s] += step[0] + carry;
        }
    }
};

// One block: a BM x BN tile of group blockIdx.z's D. fwd / bwd_data: blockIdx.x = m tile,
// blockIdx.y = n tile + ntiles x stride phase (bwd_data; fwd has one). bwd_weight: blockIdx.x = m tile + mtiles x n tile, blockIdx.y = slice.
//   fwd:        a = x,  b = w,  dst = y
//   bwd_data:   a = dy, b = w,  dst = dx
//   bwd_weight: a = dy, b = x,  dst = dw (one slice) or partial (fp32 rows, one per slice)
// Blocks per SM the registers must allow: up to 128 x 64 tiles as many as shared memory holds, at
// most four (128 registers a thread: the stride-phase bookkeeping of bwd_data would otherwise
// take 128 x 64 to 164 and three blocks); larger tiles one.
template <int Direction, int BM, int BN, int BK>
constexpr int gmma_min_blocks() {
    const int by_smem = 227 * 1024 / GmmaSmem<Direction, BM, BN, BK>::kBytes;
    return BM * BN <= 128 * 64 ? (by_smem < 4 ? (by_smem < 1 ? 1 : by_smem) : 4) : 1;
}

template <class T, int Direction, int BM, int BN, int BK>
__global__ void __launch_bounds__(kGmmaThreads, gmma_min_blocks<Direction, BM, BN, BK>()) conv_gmma(DeviceGeometry g, GmmaPlan pl, const T* __restrict__ a,
                                                          const T* __restrict__ b, T* __restrict__ dst,
                                                          float* __restrict__ partial) {
    using S = GmmaSmem<Direction, BM, BN, BK>;
    constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;
    constexpr int WM = BM / 2, WN = BN / 2, MI = WM / 16, NI = WN / 8;
    static_assert((BK == 32 || BK == 64) && BM % 32 == 0 && BN % 32 == 0 && NI % 2 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char gmma_smem[];

    const int grp = blockIdx.z;
    int mt, nt, kbeg, kend, rows_m;
    GmmaRows rw{};
    if (kWgrad) {
        mt = blockIdx.x % pl.mtiles;
        nt = blockIdx.x / pl.mtiles;
        kbeg = blockIdx.y * pl.kslice;
        kend = min(pl.Kred, kbeg + pl.kslice);
        rows_m = pl.M;
    } else {
        mt = blockIdx.x;
        nt = blockIdx.y % pl.ntiles;
        rw = gmma_rows(g, Direction, blockIdx.y / pl.ntiles);
        if (mt * BM >= rw.M) return;  // past this stride phase's pixels (the whole block)
        kbeg = 0;
        kend = rw.taps * (Direction == TD_CONV_FWD ? g.C : g.K);
        rows_m = rw.M;
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
        xc.init(g, n0, pl.Ng, kbeg);
    } else {
        ga.init(g, rw, grp, m0);
        if constexpr (Direction == TD_CONV_FWD) wr.init(g, grp, n0, b, pl.Kred);
        else wc.init(g, rw, n0);
    }
    int kload = kbeg;  // bwd_weight: the next step's first pixel
    auto load_stage = [&](int stage) {
        unsigned char* ta = gmma_smem + stage * S::kStageBytes;
        unsigned char* tb = ta + S::kABytes;
        if constexpr (kWgrad) {
            dr.load(g, grp, m0, kload, kend, a, ta, S::kAPitch);
            xc.load(g, grp, kend, b, tb, S::kBPitch);
            kload += BK;
        } else {
            ga.load(g, rw, a, ta, S::kAPitch);
            if constexpr (Direction == TD_CONV_FWD) wr.load(b, tb, S::kBPitch);
            else wc.load(g, rw, grp, n0, b, tb, S::kBPitch);
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
    // A stride phase without taps (steps 0) writes its zeros here too.
    const int r4 = lane >> 2, q = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm * WM + i * 16 + r4 + 8 * h;
            if (m >= rows_m) continue;
            int64_t row;  // the element offset of D's row m
            if constexpr (Direction == TD_CONV_FWD) {
                row = ((int64_t)m * g.G + grp) * g.K;
            } else if constexpr (Direction == TD_CONV_BWD_DATA) {
                int rest = m;  // (image, j) of the phase -> the input pixel ph + j stride
                const int j2 = rest % rw.cnt[2]; rest /= rw.cnt[2];
                const int j1 = rest % rw.cnt[1]; rest /= rw.cnt[1];
                const int j0 = rest % rw.cnt[0];
                const int img = rest / rw.cnt[0];
                const int i0 = rw.ph[0] + j0 * g.stride[0], i1 = rw.ph[1] + j1 * g.stride[1],
                          i2 = rw.ph[2] + j2 * g.stride[2];
                row = (((((int64_t)img * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2) * g.G + grp) * g.C;
            } else {
                row = ((int64_t)grp * g.K + m) * pl.Ng;
            }
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

// tile = BM x BN x BK of the implicit GEMM (BM, BN 32, 64 or 128; BK 32 or 64); 128 threads.
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
        if ((int64_t)pl.mtiles * (kWgrad ? pl.ntiles : 1) > INT32_MAX ||
            (!kWgrad && (int64_t)pl.ntiles * pl.phases > 65535)) {
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
            kernel<<<dim3((unsigned)pl.mtiles, (unsigned)(pl.ntiles * pl.phases), (unsigned)g.G), kGmmaThreads, S::kBytes,
                     stream>>>(g, pl, dy, w, static_cast<T*>(const_cast<void*>(in)), nullptr);
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
