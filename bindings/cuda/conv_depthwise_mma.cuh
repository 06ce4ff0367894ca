// cuda backend: depthwise convolution on tensor cores (mma.sync m16n8k16, fp32 accumulation):
// 2D, stride 1, dilation 1, filters 3x3, 5x5 and 7x7, forward and backward-data (the forward
// over dy with the filter flipped, as in conv_depthwise.cuh), and backward-weight
// (conv_dw_mma_wgrad, below). The tiles move by TMA (see "the tiles by TMA" below) unless
// the library's option tma is 0 or the driver refuses a map (fwd / bwd_data then copy in software;
// bwd_weight declines the problem).
//
// The CUDA-core kernels (conv_depthwise.cuh) spend one FMA per product: ConvNeXt's 7x7 over
// 32 x 28 x 28 x 384 is 472 M products, 14 us at the H200's FP32 peak against a 9 us memory
// floor. Here the products of one channel run as MMAs whose weight operand is a Toeplitz
// matrix: per channel c and filter row kh, 8 output columns of 16 output rows are one MMA
//   A[m][k] = x[oh0 + m + kh - ph][ow0 + 8j + k - pw]         16 rows x 16 input columns
//   B[k][n] = w[c][kh][k - n] where 0 <= k - n < KW, else 0   16 x 8 (KW <= 9)
//   D[m][n] = y[oh0 + m][ow0 + 8j + n]
// B is the same for every row and column tile of the channel, so it is built once per
// channel. The MMA needs the channel's pixels contiguous, the tensors keep channels
// contiguous, so a block transposes through shared memory both ways:
//   1. load its input tile (TH + KH - 1 rows x TW + 8 columns x CB channels) in 16-byte
//      vectors of 8 channels, 4 columns a thread, and store it as CB planes [row][column];
//   2. each warp takes channels: per filter row one ldmatrix of the left 8 columns, then per
//      8-column tile one ldmatrix of the next 8 (the right half of one tile is the left half
//      of the next) and one MMA; the sums go, as T, over the rows of the channel's plane the
//      warp has read;
//   3. write the output rows back as 16-byte vectors of 8 channels.
// Measured (Nsight Compute, MobileNetV2 3x3 at 16x32x16): the L1 is the limit, and the
// global accesses take much of it: a pixel's CB channels are CB x 2 contiguous bytes, so a
// warp's 16-byte accesses touch up to 16 lines at 16 channels, 4 at 64. The output over the
// input planes keeps the shared memory of a block to its input tile.
// The zeros of B multiply input columns the output does not read: a non-finite input value
// can therefore spread to outputs up to 15 columns away (the direct kernels keep it to its
// receptive field).
// conv_gmma applies the same MMAs to grouped convolution at 2 and 4 channels per group (each
// output channel sums its group's inputs; a warp per group). It measured level with the
// tiled_mma kernels (ResNeXt-50), so only an opt-in sweep builds it.
#pragma once

#include "cuda/conv_depthwise.cuh"
#include "cuda/conv_mma.cuh"
#include "cuda/conv_mma_tiled.cuh"

namespace td::cuda {

// Shared memory of a block: the input planes [CB][IR][IW] (a warp writes its channels' output
// rows over the planes once it has read them: [TH][IW] at a plane's start), then the block's
// filters as stored: WPC values a channel ([KH][KW] depthwise, [KH][KW][CPG] grouped). IW / 8
// odd: the 16 rows of an ldmatrix fall on distinct banks.
//
// Channel c = 8 o + i (octet o) has plane i x CB / 8 + o, and a plane is padded so that the
// octets' planes start 64 / 32 / 16 bytes apart modulo 128 at 16 / 32 / 64 channels: the
// transposing stores and loads, whose lanes take the octets of one pixel (its CB x 2 bytes
// contiguous in global memory) and the next columns, then fall on distinct banks (counted
// per half warp of 8-byte accesses; a pad of 32 bytes at every CB left them two-way at 16
// and 64 channels).
template <int TH, int TW, int CB, int KH, int WPC>
struct DwMmaSmem {
    static constexpr int IR = TH + KH - 1;
    static constexpr int IW = TW + 8;
    static constexpr int PAD = CB == 16 ? 32 : CB == 32 ? 16 : 8;  // the plane modulo 64 elements
    static constexpr int PLANE = IR * IW + (PAD - IR * IW % 64 + 64) % 64;
    static constexpr int in_bytes = CB * PLANE * 2;
    static constexpr int w_bytes = CB * WPC * 2;  // a multiple of 16: CB is a multiple of 8
    static constexpr int bytes = in_bytes + w_bytes;
    static_assert((IW / 8) % 2 == 1, "TW / 8 must be even");
};

// 4 warps a block, 8 from 32 channels (a block's shared memory then allows 1-2 a SM).
constexpr int dw_mma_threads(int cb) { return cb >= 32 ? 256 : 128; }
constexpr int kDwMmaSmemMost = 227 * 1024;

__device__ __forceinline__ unsigned dw_word(const uint4& v, int m) {
    return m == 0 ? v.x : m == 1 ? v.y : m == 2 ? v.z : v.w;
}
__device__ __forceinline__ unsigned dw_word(const uint2& v, int m) { return m == 0 ? v.x : v.y; }

// Four pixels' vectors of 8 channels (v[p]: pixel p) into their octet's 8 planes: channel j
// of the octet as one 8-byte piece (the 4 pixels) at dst + j x step (dst: the piece in the
// octet's first plane; step: elements from one of its planes to the next).
__device__ __forceinline__ void dw_put_quad(const uint4 (&v)[4], unsigned short* dst, int step) {
#pragma unroll
    for (int m = 0; m < 4; ++m) {  // word m of a vector: channels 2m (low half), 2m + 1
        const unsigned a0 = dw_word(v[0], m), a1 = dw_word(v[1], m);
        const unsigned a2 = dw_word(v[2], m), a3 = dw_word(v[3], m);
        *reinterpret_cast<uint2*>(dst + (2 * m) * step) = make_uint2(__byte_perm(a0, a1, 0x5410), __byte_perm(a2, a3, 0x5410));
        *reinterpret_cast<uint2*>(dst + (2 * m + 1) * step) =
            make_uint2(__byte_perm(a0, a1, 0x7632), __byte_perm(a2, a3, 0x7632));
    }
}

// A block's place: block = (channel chunk fastest, column tile, row tile, image); the last
// chunk may hold fewer than CB channels (cn, a multiple of 8).
struct DwMmaBlock {
    int n, c0, cn, oh0, ow0;
};
template <int TH, int TW, int CB>
__device__ __forceinline__ DwMmaBlock dw_mma_block(const DwGeometry& g) {
    const int chunks = (g.C + CB - 1) / CB;
    const int wbs = (g.wo + TW - 1) / TW, hbs = (g.ho + TH - 1) / TH;
    unsigned b = blockIdx.x;
    DwMmaBlock k;
    const int chunk = (int)(b % (unsigned)chunks); b /= (unsigned)chunks;
    const int wb = (int)(b % (unsigned)wbs); b /= (unsigned)wbs;
    const int hb = (int)(b % (unsigned)hbs);
    k.n = (int)(b / (unsigned)hbs);
    k.c0 = chunk * CB;
    k.cn = min(CB, g.C - k.c0);
    k.oh0 = hb * TH;
    k.ow0 = wb * TW;
    return k;
}

// 1. The block's filters (cn x WPC contiguous values, 16-byte aligned: c0 and cn are
// multiples of 8) and its input tile, transposed into the planes: item = (octet fastest, 4
// columns, row); zeros outside the image and beyond the TW + KW - 1 columns the outputs read.
// Weights: false where the caller stores its own form of the filters (conv_dw_mma's pairs).
template <int TH, int TW, int CB, int KH, int KW, int WPC, bool Weights = true>
__device__ __forceinline__ void dw_mma_stage(const DwGeometry& g, const DwMmaBlock& k, const unsigned short* __restrict__ x,
                                             const unsigned short* __restrict__ w, unsigned short* sin, unsigned short* sw) {
    using S = DwMmaSmem<TH, TW, CB, KH, WPC>;
    constexpr int THREADS = dw_mma_threads(CB), PLANE = S::PLANE, OCT = CB / 8;
    const int tid = threadIdx.x, oct_n = k.cn / 8;
    constexpr int WV = CB * WPC / 8, WIT = (WV + THREADS - 1) / THREADS;
    const int wv_n = k.cn * WPC / 8;
    uint4 wv[WIT];
    const uint4* wsrc = reinterpret_cast<const uint4*>(w + (int64_t)k.c0 * WPC);
#pragma unroll
    for (int i = 0; i < WIT; ++i) {
        const int e = i * THREADS + tid;
        wv[i] = Weights && e < wv_n ? __ldg(wsrc + e) : make_uint4(0, 0, 0, 0);
    }
    constexpr int QROW = S::IW / 4, BATCH = 4;
    constexpr int items = OCT * S::IR * QROW;  // octets from oct_n on: the last chunk's missing channels
    const int ih0 = k.oh0 - g.ph, iw0 = k.ow0 - g.pw;
    const unsigned short* xn = x + (int64_t)k.n * g.hi * g.wi * g.C + k.c0;
    for (int base = 0; base < items; base += BATCH * THREADS) {
        uint4 v[BATCH][4];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int it = base + i * THREADS + tid;
            const int oct = it % OCT, rest = it / OCT, q = rest % QROW, rr = rest / QROW;
            const int ih = ih0 + rr;
            const bool row_in = it < items && oct < oct_n && ih >= 0 && ih < g.hi;
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int s = 4 * q + p, iw = iw0 + s;
                const bool inside = row_in && s < TW + KW - 1 && iw >= 0 && iw < g.wi;
                v[i][p] = inside ? __ldg(reinterpret_cast<const uint4*>(xn + ((int64_t)ih * g.wi + iw) * g.C + oct * 8))
                                 : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int it = base + i * THREADS + tid;
            if (it < items && it % OCT < oct_n) {
                const int oct = it % OCT, rest = it / OCT, q = rest % QROW, rr = rest / QROW;
                unsigned short* dst = sin + oct * PLANE + rr * S::IW + 4 * q;  // channel 8 oct + j: plane j OCT + oct
                dw_put_quad(v[i], dst, OCT * PLANE);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < WIT; ++i) {
        const int e = i * THREADS + tid;
        if (Weights && e < wv_n) reinterpret_cast<uint4*>(sw)[e] = wv[i];
    }
}

// The plane of channel c of the block.
template <int CB>
__device__ __forceinline__ int dw_mma_plane(int c) { return c % 8 * (CB / 8) + c / 8; }

// One M tile of one input plane against B fragments: acc[o][j] += A(rows 16 mt + kh.., 8-column
// tile j) x bf[o] for each filter row's fragments (ldmatrix: the right half of one column
// tile is the left half of the next). row: this lane's ldmatrix address of the tile's first row.
template <class T, int NT, int NO>
__device__ __forceinline__ void dw_mma_row(float (&acc)[NO][NT][4], unsigned row, const uint32_t (&bf)[NO][2]) {
    uint32_t lo[2];
    ldsm_x2(lo, row);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        uint32_t hi[2];
        ldsm_x2(hi, row + (unsigned)((8 * j + 8) * 2));
        const uint32_t a[4] = {lo[0], lo[1], hi[0], hi[1]};
#pragma unroll
        for (int o = 0; o < NO; ++o) mma16816<T>(acc[o][j], a, bf[o]);
        lo[0] = hi[0];
        lo[1] = hi[1];
    }
}

// The D fragments (r, 2q..) and (r + 8, 2q..) of M tile mt as T, over the plane's rows
// [16 mt, 16 mt + 16) (the caller has read them: __syncwarp first).
template <class T, int NT, int IW>
__device__ __forceinline__ void dw_mma_put(const float (&acc)[NT][4], unsigned short* plane, int mt, int lane) {
    unsigned short* oc = plane + 2 * (lane % 4);
    const int r = lane / 4;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        *reinterpret_cast<uint32_t*>(oc + (mt * 16 + r) * IW + 8 * j) = pack_pair<T>(acc[j][0], acc[j][1]);
        *reinterpret_cast<uint32_t*>(oc + (mt * 16 + r + 8) * IW + 8 * j) = pack_pair<T>(acc[j][2], acc[j][3]);
    }
}

// B[k][n] = f(k - n) for 0 <= k - n < KW, else 0: lane (r, q) holds k - n = 2q - r + {0, 1, 8, 9}.
template <int KW, class Tap>
__device__ __forceinline__ void dw_toeplitz(uint32_t (&b)[2], int lane, Tap&& tap) {
    const int k0 = 2 * (lane % 4) - lane / 4;
    auto at = [&](int kw) -> uint32_t { return kw >= 0 && kw < KW ? tap(kw) : 0u; };
    b[0] = at(k0) | at(k0 + 1) << 16;
    b[1] = at(k0 + 8) | at(k0 + 9) << 16;
}

// 3. The output rows back to channels-last: item = (octet fastest, 4 columns, row).
template <int TH, int TW, int CB, int KH, int WPC>
__device__ __forceinline__ void dw_mma_write(const DwGeometry& g, const DwMmaBlock& k, const unsigned short* sin,
                                             unsigned short* __restrict__ y) {
    using S = DwMmaSmem<TH, TW, CB, KH, WPC>;
    constexpr int THREADS = dw_mma_threads(CB), PLANE = S::PLANE, OCT = CB / 8;
    constexpr int OQ = TW / 4, oitems = OCT * TH * OQ;
    const int oct_n = k.cn / 8;
    unsigned short* yn = y + (int64_t)k.n * g.ho * g.wo * g.C + k.c0;
    for (int it = threadIdx.x; it < oitems; it += THREADS) {
        const int oct = it % OCT, rest = it / OCT, q4 = rest % OQ, row = rest / OQ;
        const int oh = k.oh0 + row, ow = k.ow0 + 4 * q4;
        if (oct >= oct_n || oh >= g.ho || ow >= g.wo) continue;
        uint2 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            v[i] = *reinterpret_cast<const uint2*>(sin + (i * OCT + oct) * PLANE + row * S::IW + 4 * q4);
        unsigned short* dst = yn + ((int64_t)oh * g.wo + ow) * g.C + oct * 8;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            if (ow + p >= g.wo) break;
            const unsigned sel = p % 2 ? 0x7632 : 0x5410;
            const int m = p / 2;
            *reinterpret_cast<uint4*>(dst + (int64_t)p * g.C) =
                make_uint4(__byte_perm(dw_word(v[0], m), dw_word(v[1], m), sel),
                           __byte_perm(dw_word(v[2], m), dw_word(v[3], m), sel),
                           __byte_perm(dw_word(v[4], m), dw_word(v[5], m), sel),
                           __byte_perm(dw_word(v[6], m), dw_word(v[7], m), sel));
        }
    }
}

// ---------------------------------------------------------------- the tiles by TMA
// One thread copies the block's input box (CB channels x BW columns x IR rows, zeros outside
// the image) into shared memory with one instruction, and the threads transpose it into the
// planes from shared memory instead of global memory; the results go back the same way
// (planes -> staging tile [TH][TW][CB] -> one TMA store, clipped at the tensor's edges). The
// software copies' 16-byte global accesses touch a line per pixel at 16 channels (32 bytes
// of it), which kept the L1 busy (Nsight Compute: about 40% of its wavefronts, 90% busy).
// The box and the staging tile lie over the planes (both are smaller): a transposition reads
// all its values into registers, waits for the block, then writes, so the shared memory (and
// the blocks per SM) stay those of the software copies. (H200, a separate staging area for
// the box: ConvNeXt 7x7 16x32x16 31.1 us against 29.1 with software copies, 3 blocks a SM
// by shared memory instead of 5.)
// Bank-conflict free (counted per quarter warp of 16-byte accesses):
//   unstage: lanes take the octets, then 8 / octets rows, then 4-column quads; BW = TW + 7 is
//            odd, so the rows' pixels fall on all 8 bank groups;
//   restage: lanes take the octets, then the quads; a lane writes its 4 pixels in the order
//            p ^ rot (rot from its quad), so that a quarter warp writes 8 distinct groups.
// Shared memory: the planes (first the box, last the staging tile), the filters, the mbarrier.
template <int TH, int TW, int CB, int KH, int WPC>
struct DwMmaTma {
    using S = DwMmaSmem<TH, TW, CB, KH, WPC>;
    static constexpr int BW = TW + 7;  // >= TW + KW - 1 for KW <= 8, odd
    static constexpr int box_bytes = S::IR * BW * CB * 2;
    static constexpr int bar_off = S::in_bytes + S::w_bytes;  // a multiple of 16
    static constexpr int bytes = bar_off + 8;
    static_assert(BW % 2 == 1 && BW <= 256 && S::IR <= 256, "a TMA box side is at most 256");
    static_assert(box_bytes <= S::in_bytes && TH * TW * CB * 2 <= S::in_bytes, "the box and the staging tile fit the planes");
};

// The depthwise B fragments come from a table of filter pairs. Lane (r, q) of the Toeplitz
// fragment (dw_toeplitz) needs w[k0], w[k0 + 1] (b[0]) and w[k0 + 8], w[k0 + 9] (b[1]) with
// k0 = 2q - r in [-7, 6]; for a row of at most 8 taps, b[0] is zero where k0 < -1 and b[1]
// where k0 >= -1, so each lane needs one pair: word j + 1 of its row's table holds
// w[j] | w[j + 1] << 16 for j in [-1, 6] (zeros outside the row), j = k0 or k0 + 8. One 32-bit
// shared load a filter row instead of four 2-byte ones. A thread builds one filter row's 8
// words from its taps (loaded at once); the filter flipped for bwd_data.
constexpr int kDwPairs = 8;
constexpr int dw_wpc(int kh, int kw, int cpg) { return cpg == 1 ? kh * kDwPairs * 2 : kh * kw * cpg; }

template <int CB, int KH, int KW, bool Flip>
__device__ __forceinline__ void dw_mma_pairs(const DwMmaBlock& k, const unsigned short* __restrict__ w, uint32_t* table) {
    static_assert(KW <= kDwPairs, "a filter row of at most 8 taps");
    for (int row = threadIdx.x; row < k.cn * KH; row += dw_mma_threads(CB)) {
        const int kh = row % KH, c = row / KH;
        const unsigned short* src = w + ((int64_t)(k.c0 + c) * KH + (Flip ? KH - 1 - kh : kh)) * KW;
        uint32_t tap[KW];
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) tap[kw] = __ldg(src + (Flip ? KW - 1 - kw : kw));
        auto at = [&](int t) -> uint32_t { return t >= 0 && t < KW ? tap[t] : 0u; };
        uint4* dst = reinterpret_cast<uint4*>(table + row * kDwPairs);
        dst[0] = make_uint4(at(-1) | at(0) << 16, at(0) | at(1) << 16, at(1) | at(2) << 16, at(2) | at(3) << 16);
        dst[1] = make_uint4(at(3) | at(4) << 16, at(4) | at(5) << 16, at(5) | at(6) << 16, at(6) | at(7) << 16);
    }
}

// 1'. A box [ROWS][BOXW][CB] (channels-last, TMA's layout) into CB planes [ROWS][PITCH]
// (channel 8 o + i at plane i CB / 8 + o, PLANE elements apart) over it: item = (octet, row
// of 8 / OCT, quad of columns, row block); every value is read before the block's barrier,
// written after it. Columns from VALID on are zeros. (fwd: the input box, VALID = the TW +
// KW - 1 columns the outputs read; bwd_weight: also the dy box, VALID = TW.)
template <int CB, int ROWS, int BOXW, int PITCH, int PLANE, int VALID>
__device__ __forceinline__ void dw_unstage_box(int oct_n, unsigned short* sin) {
    constexpr int THREADS = dw_mma_threads(CB), OCT = CB / 8, R8 = OCT >= 8 ? 1 : 8 / OCT;
    constexpr int QROW = PITCH / 4, RB = (ROWS + R8 - 1) / R8;
    constexpr int items = OCT * R8 * QROW * RB, PER = (items + THREADS - 1) / THREADS;
    static_assert(PITCH % 4 == 0 && VALID <= BOXW && BOXW % 2 == 1, "quads of columns; an odd box width");
    const unsigned char* box = reinterpret_cast<const unsigned char*>(sin);
    const int tid = threadIdx.x;
    uint4 v[PER][4];
    int dst_off[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int it = i * THREADS + tid;
        const int oct = it % OCT, rest = it / OCT, rl = rest % R8, q = rest / R8 % QROW;
        const int rr = rest / R8 / QROW * R8 + rl;
        const bool row_in = it < items && oct < oct_n && rr < ROWS;
        dst_off[i] = row_in ? oct * PLANE + rr * PITCH + 4 * q : -1;
        const unsigned char* src = box + ((rr * BOXW + 4 * q) * OCT + oct) * 16;
#pragma unroll
        for (int p = 0; p < 4; ++p)
            v[i][p] = row_in && 4 * q + p < VALID ? *reinterpret_cast<const uint4*>(src + p * OCT * 16)
                                                  : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();  // the box is read: the planes may overwrite it
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        if (dst_off[i] < 0) continue;
        unsigned short* dst = sin + dst_off[i];  // channel 8 oct + j: plane j OCT + oct
        dw_put_quad(v[i], dst, OCT * PLANE);
    }
}

// 3'. The output rows into the staging tile [TH][TW][CB] at the planes' start (channels-last,
// as the TMA store reads it): item = (octet fastest, 4 columns, row), read before the block's
// barrier, written after it; pixel p of a lane's four is written at p ^ rot.
template <int TH, int TW, int CB, int KH, int WPC>
__device__ __forceinline__ void dw_mma_restage(const DwMmaBlock& k, unsigned short* sin) {
    using S = DwMmaSmem<TH, TW, CB, KH, WPC>;
    constexpr int THREADS = dw_mma_threads(CB), PLANE = S::PLANE, OCT = CB / 8;
    constexpr int OQ = TW / 4, oitems = OCT * TH * OQ, PER = (oitems + THREADS - 1) / THREADS;
    const int oct_n = k.cn / 8;
    uint2 v[PER][8];
    bool live[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int it = j * THREADS + threadIdx.x;
        const int oct = it % OCT, rest = it / OCT, q4 = rest % OQ, row = rest / OQ;
        live[j] = it < oitems && oct < oct_n;  // past the last channel: the store clips them
        if (!live[j]) continue;
#pragma unroll
        for (int i = 0; i < 8; ++i)
            v[j][i] = *reinterpret_cast<const uint2*>(sin + (i * OCT + oct) * PLANE + row * S::IW + 4 * q4);
    }
    __syncthreads();  // the output rows are read: the staging tile may overwrite them
    unsigned char* stage = reinterpret_cast<unsigned char*>(sin);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        if (!live[j]) continue;
        const int it = j * THREADS + threadIdx.x;
        const int oct = it % OCT, rest = it / OCT, q4 = rest % OQ, row = rest / OQ;
        // quarter warp: OCT 1 -> quads 0..7 (pixels 4 apart: rot from quad / 2), 2 -> quads
        // 0..3, 4 -> 0..1 (rot from the quad), 8 -> one pixel's 128 bytes (no rotation)
        const int rot = OCT == 8 ? 0 : (OCT == 1 ? q4 >> 1 : q4) & 3;
        if (rot & 2) {  // pixel p ^ 2 takes the other word
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const unsigned t = v[j][i].x;
                v[j][i].x = v[j][i].y;
                v[j][i].y = t;
            }
        }
        const unsigned s_even = rot & 1 ? 0x7632 : 0x5410, s_odd = rot & 1 ? 0x5410 : 0x7632;
        unsigned char* dst = stage + ((row * TW + 4 * q4) * OCT + oct) * 16;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const unsigned sel = p % 2 ? s_odd : s_even;
            const int m = p / 2;
            *reinterpret_cast<uint4*>(dst + (p ^ rot) * OCT * 16) =
                make_uint4(__byte_perm(dw_word(v[j][0], m), dw_word(v[j][1], m), sel),
                           __byte_perm(dw_word(v[j][2], m), dw_word(v[j][3], m), sel),
                           __byte_perm(dw_word(v[j][4], m), dw_word(v[j][5], m), sel),
                           __byte_perm(dw_word(v[j][6], m), dw_word(v[j][7], m), sel));
        }
    }
}

// Depthwise: a warp per channel. A warp writes its channel's output rows over the plane's
// first rows once it has read the rows under them: output rows [16 mt, 16 mt + 16) after M
// tile mt, whose input rows reach 16 mt + 15 + KH - 1; the next tile reads from row
// 16 (mt + 1) on.
// Tma: the tiles in and out by TMA (xmap: the input box; ymap: the output tile). 32 rows: at
// most 128 registers, the 4 blocks a SM its shared memory allows (the TMA path took 136, 3
// blocks: ConvNeXt 7x7 at 28 x 28 27.8 us, 25.3 with the bound).
template <class T, int KH, int KW, int TH, int TW, int CB, bool Flip, bool Tma>
__global__ void __launch_bounds__(dw_mma_threads(CB), TH == 32 ? 4 : 1)
    conv_dw_mma(DwGeometry g, const unsigned short* __restrict__ x, const unsigned short* __restrict__ w,
                unsigned short* __restrict__ y, const __grid_constant__ CUtensorMap xmap,
                const __grid_constant__ CUtensorMap ymap) {
    constexpr int WPC = dw_wpc(KH, KW, 1);
    using S = DwMmaSmem<TH, TW, CB, KH, WPC>;
    using L = DwMmaTma<TH, TW, CB, KH, WPC>;
    constexpr int NT = TW / 8, MT = TH / 16;
    extern __shared__ __align__(128) unsigned char dw_mma_smem[];  // TMA: 128-byte aligned boxes
    unsigned short* sin = reinterpret_cast<unsigned short*>(dw_mma_smem);
    unsigned short* sw = reinterpret_cast<unsigned short*>(dw_mma_smem + S::in_bytes);
    uint64_t* bar = reinterpret_cast<uint64_t*>(dw_mma_smem + L::bar_off);
    const DwMmaBlock k = dw_mma_block<TH, TW, CB>(g);
    if constexpr (Tma) {
        if (threadIdx.x == 0) {
            mbar_init(bar, 1);
            mbar_expect(bar, (unsigned)L::box_bytes);
            const int c[5] = {k.c0, k.ow0 - g.pw, k.oh0 - g.ph, 0, k.n};
            tma_load_5d(sin, &xmap, c, bar);  // the box over the planes' start
        }
        dw_mma_pairs<CB, KH, KW, Flip>(k, w, reinterpret_cast<uint32_t*>(sw));
        __syncthreads();  // the mbarrier is initialized before any thread waits on it
        mbar_wait(bar, 0);
        dw_unstage_box<CB, S::IR, L::BW, S::IW, S::PLANE, TW + KW - 1>(k.cn / 8, sin);
    } else {
        dw_mma_pairs<CB, KH, KW, Flip>(k, w, reinterpret_cast<uint32_t*>(sw));
        dw_mma_stage<TH, TW, CB, KH, KW, WPC, false>(g, k, x, w, sin, sw);
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned in_base = (unsigned)__cvta_generic_to_shared(sin) + (unsigned)(lane % 16) * S::IW * 2;
    // this lane's pair (dw_mma_pairs): its table word and which half of the fragment it fills
    const int k0 = 2 * (lane % 4) - lane / 4;
    const int pair = (k0 >= -1 ? k0 : k0 + 8) + 1;
    const uint32_t lo_mask = k0 >= -1 ? ~0u : 0u;
    for (int c = warp; c < k.cn; c += dw_mma_threads(CB) / 32) {
        uint32_t bf[KH][1][2];
        const uint32_t* pairs = reinterpret_cast<const uint32_t*>(sw) + c * KH * kDwPairs + pair;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
            const uint32_t wp = pairs[kh * kDwPairs];
            bf[kh][0][0] = wp & lo_mask;
            bf[kh][0][1] = wp & ~lo_mask;
        }
        const int pc = dw_mma_plane<CB>(c);
        const unsigned plane = in_base + (unsigned)(pc * S::PLANE * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float acc[1][NT][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) acc[0][j][0] = acc[0][j][1] = acc[0][j][2] = acc[0][j][3] = 0.f;
#pragma unroll
            for (int kh = 0; kh < KH; ++kh)
                dw_mma_row<T, NT, 1>(acc, plane + (unsigned)((mt * 16 + kh) * S::IW * 2), bf[kh]);
            __syncwarp();  // every lane's reads of these rows are done
            dw_mma_put<T, NT, S::IW>(acc[0], sin + pc * S::PLANE, mt, lane);
        }
    }
    __syncthreads();
    if constexpr (Tma) {
        dw_mma_restage<TH, TW, CB, KH, WPC>(k, sin);
        fence_async_shared();  // the staging writes, visible to the TMA store
        __syncthreads();
        if (threadIdx.x == 0) {
            const int c[5] = {k.c0, k.ow0, k.oh0, 0, k.n};
            tma_store_5d(&ymap, sin, c);
            tma_store_wait_read();  // the shared memory outlives the store's reads
        }
    } else {
        dw_mma_write<TH, TW, CB, KH, WPC>(g, k, sin, y);
    }
}

// ---------------------------------------------------------------- bwd_weight
// dW[c][kh][kw] = sum over n, oh, ow of dy[n][oh][ow][c] x[n][oh + kh - ph][ow + kw - pw][c].
// A block owns CB channels (16, 32 or 64: a pixel's CB x 2 bytes are one TMA row of 32, 64 or
// 128 bytes) and a band of strips (a strip: one image's output columns ow0 .. ow0 + TW - 1,
// every row). It walks down a strip R input rows a step: each step's x rows (TW + 7 columns
// with the halo) and the R dy rows ph further down (the lowest those x rows reach) come by
// TMA into two rings, two steps in flight ahead of the one computed, channels-last as in
// global memory (no transposition, no halo rows: every row comes once a strip). The dy ring
// keeps the 8 rows above (a filter of up to 9 rows reads them). Per input row r and
// 16 output columns j (an item), one MMA per channel:
//   A[m][k] = dy[r + ph - m][16 j + k]   m = kh (rows past KH: sums nobody reads)
//   B[k][n] = x[r][16 j + k + n]         n = kw: a Hankel matrix of the input row
//   D[m][n] = the sums of dW[kh = m][kw = n]
// A warp owns 8 channels (one 16-byte piece of a pixel) for the whole band, so its sums stay
// in registers and are the block's. A lane's fragments of its 8 channels come from 8 16-byte
// loads (4 pixels of dy, 4 of x) and byte permutes; the rings are swizzled by TMA (32B / 64B /
// 128B, as wide as a pixel), so a quarter warp's loads (8 pixels in a row; 4 + 4 in two
// rows of odd width) fall on distinct banks. Of the MMA's 16 x 8 sums KH x KW are used (7x7:
// 49 of 128): the tensor cores have room, the loads set the pace. One fp32 partial row per
// band; conv_bwd_weight_reduce adds the bands' rows in order (deterministic).
template <int TW, int CB, int R>
struct DwWgradRing {
    static constexpr int PB = CB * 2;                   // bytes a pixel: the swizzle's span
    static constexpr CUtensorMapSwizzle SWIZZLE = CB == 16   ? CU_TENSOR_MAP_SWIZZLE_32B
                                                  : CB == 32 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                             : CU_TENSOR_MAP_SWIZZLE_128B;
    static constexpr int WARPS = CB / 8;                // a warp per 8 channels
    static constexpr int PRE = 8;                       // dy rows kept above a step's first row
    static constexpr int PRE_STEPS = PRE / R;           // steps that only fill the dy ring
    static constexpr int AHEAD = 2;                     // steps in flight ahead of the one computed
    static constexpr int SX = AHEAD + 1, SD = PRE_STEPS + 1 + AHEAD;  // ring slots (steps)
    static constexpr int BWX = TW + 7, BWD = TW + 1;    // pixels a ring row; BWD odd (two rows' loads apart)
    static constexpr int x_box = R * BWX * PB, dy_box = R * BWD * PB;
    static constexpr int ALIGN = 8 * PB;                // the swizzle's period (bits 7.. of the offset)
    static constexpr int x_slot = (x_box + ALIGN - 1) / ALIGN * ALIGN, dy_slot = (dy_box + ALIGN - 1) / ALIGN * ALIGN;
    static constexpr int dy_off = SX * x_slot;          // every slot aligned to the period
    static constexpr int bar_off = dy_off + SD * dy_slot;
    static constexpr int bytes = bar_off + 8 * (AHEAD + 1);
    static constexpr int per_sm_smem = (kDwMmaSmemMost + 1024) / (bytes + 1024);
    static constexpr int per_sm_warps = 64 / WARPS;
    static constexpr int per_sm = per_sm_smem < per_sm_warps ? per_sm_smem : per_sm_warps;  // blocks an SM holds
    // (the launch bounds give the registers of per_sm blocks: 170 a thread at 3 blocks of 4 warps)
    static_assert(PRE % R == 0, "the dy ring keeps whole steps above");
    static_assert(BWX <= 256 && R <= 256, "TMA box sides");
};

// channel c of two pixels' 8-channel vectors as one fragment register (p's value low)
__device__ __forceinline__ uint32_t dw_pair(const uint4& p, const uint4& q, int c) {
    return __byte_perm(dw_word(p, c / 2), dw_word(q, c / 2), c % 2 ? 0x7632 : 0x5410);
}

// The byte offset of the 16-byte piece o of pixel p in a swizzled ring slot (aligned to 8
// pixels, the swizzle's period; PB bytes a pixel): TMA's 32B / 64B / 128B swizzle XORs the
// piece index with bits 7.. of the offset. Pixels 8 and 16 further are 8 x PB and 16 x PB bytes further (multiples of 256:
// the same XOR), so a row needs two of these (p and p + 1).
template <int PB>
__device__ __forceinline__ unsigned dw_swizzled(int p, int o) {
    const unsigned off = (unsigned)(p * PB + o * 16);
    return off ^ (((off >> 7) & (unsigned)(PB / 16 - 1)) << 4);
}

__device__ __forceinline__ uint4 dw_ld16(const unsigned char* base, unsigned off) {
    return *reinterpret_cast<const uint4*>(base + off);
}

template <class T, int KH, int KW, int R, int TW, int CB>
__global__ void __launch_bounds__(CB * 4, DwWgradRing<TW, CB, R>::per_sm) conv_dw_mma_wgrad(DwGeometry g, int bands, float* __restrict__ part,
                                                            const __grid_constant__ CUtensorMap xmap,
                                                            const __grid_constant__ CUtensorMap dymap) {
    using RG = DwWgradRing<TW, CB, R>;
    constexpr int NT = TW / 16, NB = RG::AHEAD + 1;
    static_assert(KW <= 8 && KH <= 8, "a filter row within the MMA's 8 columns, its rows within A's first 8");
    static_assert(KH - 1 <= RG::PRE, "the dy ring keeps the filter's rows above");
    extern __shared__ __align__(1024) unsigned char dw_mma_smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(dw_mma_smem + RG::bar_off);
    pdl_trigger();  // the reduction may be placed: it waits for this kernel's partial rows
    const int wbs = (g.wo + TW - 1) / TW, strips = g.N * wbs;  // supports(): every tensor below 2^31 elements
    const int band = (int)blockIdx.x, c0 = (int)blockIdx.y * CB;
    const int s0 = (int)((int64_t)strips * band / bands), count = (int)((int64_t)strips * (band + 1) / bands) - s0;
    const int steps = (g.hi + R - 1) / R + RG::PRE_STEPS;  // a strip's steps, the dy-only ones first
    const int total = count * steps;
    auto issue = [&](int i) {  // thread 0: the band's step i (x rows R s .. R s + R - 1, dy rows R s + ph ..)
        const int strip = s0 + i / steps, s = i % steps - RG::PRE_STEPS;
        const int n = strip / wbs, ow0 = strip % wbs * TW;
        uint64_t* bar = full + i % NB;
        mbar_expect(bar, (unsigned)((s >= 0 ? RG::x_box : 0) + RG::dy_box));
        if (s >= 0) {
            const int cx[5] = {c0, ow0 - g.pw, R * s, 0, n};
            tma_load_5d(dw_mma_smem + i % RG::SX * RG::x_slot, &xmap, cx, bar);
        }
        const int cd[5] = {c0, ow0, R * s + g.ph, 0, n};
        tma_load_5d(dw_mma_smem + RG::dy_off + i % RG::SD * RG::dy_slot, &dymap, cd, bar);
    };
    if (threadIdx.x == 0) {
        for (int b = 0; b < NB; ++b) mbar_init(full + b, 1);
        for (int i = 0; i <= RG::AHEAD && i < total; ++i) issue(i);
    }
    __syncthreads();  // the mbarriers are initialized before any thread waits on them

    const int o = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, q = lane % 4;
    const int kh = min(gq, KH - 1);  // A's rows past KH repeat the last (their sums are not read)
    // Row t of a step (input row r = R s + t): x at row t of the step's slot; dy row r + ph - kh
    // at row (t - kh + PRE) % R of the slot of the strip's step s + (t - kh + PRE) / R (counted
    // from its first, dy-only step: PRE rows above row 0). The lane's swizzled offsets in the
    // slots (pixels p and p + 1; + 8 and + 16 pixels keep the swizzle) are the same every step.
    unsigned xo[R][2], dof[R][2];
    int dlt[R];
#pragma unroll
    for (int t = 0; t < R; ++t) {
        const int e = t - kh + RG::PRE, px = t * RG::BWX + 2 * q + gq, pd = e % R * RG::BWD + 2 * q;
        dlt[t] = e / R;
        xo[t][0] = dw_swizzled<RG::PB>(px, o);
        xo[t][1] = dw_swizzled<RG::PB>(px + 1, o);
        dof[t][0] = dw_swizzled<RG::PB>(pd, o);
        dof[t][1] = dw_swizzled<RG::PB>(pd + 1, o);
        // kept in registers: recomputing them in the loop (ptxas's choice) costs ~30 instructions a row
        asm volatile("" : "+r"(xo[t][0]), "+r"(xo[t][1]), "+r"(dof[t][0]), "+r"(dof[t][1]), "+r"(dlt[t]));
    }
    float acc[8][4];
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
    // step i's slots and mbarrier, counted along: x slot i % SX, mbarrier i % NB (phase
    // parity i / NB), and the dy slot of the strip's step s (= i - PRE_STEPS) modulo SD
    int xs = 0, nb = 0, dslot = (RG::SD - RG::PRE_STEPS % RG::SD) % RG::SD, s = -RG::PRE_STEPS;
    unsigned parity = 0;
    for (int i = 0; i < total; ++i) {
        mbar_wait(full + nb, parity);
        if (s >= 0) {
            const unsigned char* xrow = dw_mma_smem + xs * RG::x_slot;
#pragma unroll
            for (int t = 0; t < R; ++t) {  // rows past the image and column tiles past it read zeros (TMA)
                int sl = dslot + dlt[t];
                sl -= sl >= RG::SD ? RG::SD : 0;
                const unsigned char* drow = dw_mma_smem + RG::dy_off + sl * RG::dy_slot;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    constexpr unsigned P8 = 8 * RG::PB;
                    const unsigned cj = (unsigned)(16 * j * RG::PB);
                    const uint4 a0 = dw_ld16(drow, dof[t][0] + cj), a1 = dw_ld16(drow, dof[t][1] + cj);
                    const uint4 a8 = dw_ld16(drow, dof[t][0] + cj + P8), a9 = dw_ld16(drow, dof[t][1] + cj + P8);
                    const uint4 b0 = dw_ld16(xrow, xo[t][0] + cj), b1 = dw_ld16(xrow, xo[t][1] + cj);
                    const uint4 b8 = dw_ld16(xrow, xo[t][0] + cj + P8), b9 = dw_ld16(xrow, xo[t][1] + cj + P8);
#pragma unroll
                    for (int c = 0; c < 8; ++c) {
                        const uint32_t a[4] = {dw_pair(a0, a1, c), 0u, dw_pair(a8, a9, c), 0u};
                        const uint32_t b[2] = {dw_pair(b0, b1, c), dw_pair(b8, b9, c)};
                        mma16816<T>(acc[c], a, b);
                    }
                }
            }
        }
        __syncthreads();  // every warp is done with step i: its x slot and the dy slot of step i - PRE_STEPS
        if (threadIdx.x == 0 && i + RG::AHEAD + 1 < total) issue(i + RG::AHEAD + 1);
        xs = xs + 1 == RG::SX ? 0 : xs + 1;
        dslot = dslot + 1 == RG::SD ? 0 : dslot + 1;
        if (++nb == NB) {
            nb = 0;
            parity ^= 1u;
        }
        if (++s == steps - RG::PRE_STEPS) s = -RG::PRE_STEPS;  // the next strip, from its dy-only steps
    }
    // lane (gq, q) holds D[gq][2q], D[gq][2q + 1] of each of its warp's 8 channels
    float* prow = part + (int64_t)band * g.C * KH * KW;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        const int ch = c0 + 8 * o + c;
#pragma unroll
        for (int e = 0; e < 2; ++e)
            if (ch < g.C && gq < KH && 2 * q + e < KW) prow[(int64_t)ch * KH * KW + gq * KW + 2 * q + e] = acc[c][e];
    }
}

// Grouped, CPG (2 or 4) channels per group: out[o] = sum over the group's inputs i and filter
// rows kh of A(plane i, rows + kh) x Toeplitz(w[o][kh][.][i]) (bwd_data, Flip: the forward
// over dy with w'[o][kh][kw][i] = w[i][KH-1-kh][KW-1-kw][o]). A warp per group: each A
// fragment feeds the CPG output channels' MMAs; the group's output rows go over its input
// planes once the M tile's rows are read.
template <class T, int CPG, int KH, int KW, int TH, int TW, int CB, bool Flip>
__global__ void __launch_bounds__(dw_mma_threads(CB)) conv_gmma(DwGeometry g, const unsigned short* __restrict__ x,
                                                                const unsigned short* __restrict__ w,
                                                                unsigned short* __restrict__ y) {
    constexpr int WPC = KH * KW * CPG;
    using S = DwMmaSmem<TH, TW, CB, KH, WPC>;
    constexpr int NT = TW / 8, MT = TH / 16;
    extern __shared__ __align__(128) unsigned char dw_mma_smem[];  // one declaration: the TMA kernels need 128
    unsigned short* sin = reinterpret_cast<unsigned short*>(dw_mma_smem);
    unsigned short* sw = reinterpret_cast<unsigned short*>(dw_mma_smem + S::in_bytes);
    const DwMmaBlock k = dw_mma_block<TH, TW, CB>(g);
    dw_mma_stage<TH, TW, CB, KH, KW, WPC>(g, k, x, w, sin, sw);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned in_base = (unsigned)__cvta_generic_to_shared(sin) + (unsigned)(lane % 16) * S::IW * 2;
    for (int grp = warp; grp * CPG < k.cn; grp += dw_mma_threads(CB) / 32) {
        const unsigned short* wg = sw + grp * CPG * WPC;  // the group's filters [o][kh][kw][i]
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float acc[CPG][NT][4];
#pragma unroll
            for (int o = 0; o < CPG; ++o)
#pragma unroll
                for (int j = 0; j < NT; ++j) acc[o][j][0] = acc[o][j][1] = acc[o][j][2] = acc[o][j][3] = 0.f;
#pragma unroll
            for (int i = 0; i < CPG; ++i) {
                const unsigned plane = in_base + (unsigned)(dw_mma_plane<CB>(grp * CPG + i) * S::PLANE * 2);
#pragma unroll
                for (int kh = 0; kh < KH; ++kh) {
                    uint32_t bf[CPG][2];
#pragma unroll
                    for (int o = 0; o < CPG; ++o)
                        dw_toeplitz<KW>(bf[o], lane, [&](int kw) -> uint32_t {
                            return Flip ? wg[((i * KH + KH - 1 - kh) * KW + KW - 1 - kw) * CPG + o]
                                        : wg[((o * KH + kh) * KW + kw) * CPG + i];
                        });
                    dw_mma_row<T, NT, CPG>(acc, plane + (unsigned)((mt * 16 + kh) * S::IW * 2), bf);
                }
            }
            __syncwarp();  // every lane's reads of these rows are done
#pragma unroll
            for (int o = 0; o < CPG; ++o)
                dw_mma_put<T, NT, S::IW>(acc[o], sin + dw_mma_plane<CB>(grp * CPG + o) * S::PLANE, mt, lane);
        }
    }
    __syncthreads();
    dw_mma_write<TH, TW, CB, KH, WPC>(g, k, sin, y);
}

// TH x TW x CB: output rows (16 or 32: the MMA's M) x output columns (16, 32 or 64) x
// channels per block (8, 16, 32 or 64; the last block of a row may hold fewer). CPG: 1
// (depthwise, conv_dw_mma) or 2 / 4 channels per group (conv_gmma).
template <int DType, int Ndim, int Direction, int TH, int TW, int CB, int CPG = 1>
struct Sm90DwMmaConv {
    using T = typename ConvElement<DType>::T;
    static_assert(Ndim == 2, "the tensor-core depthwise kernel is 2D");
    static_assert(Direction != TD_CONV_BWD_WEIGHT || CPG == 1, "bwd_weight: depthwise only");
    static constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;
    // bwd_weight: TH = input rows a step (4 or 8), CB = 16, 32 or 64 (a TMA row of 32 - 128 bytes)
    static_assert(kWgrad ? TH == 4 || TH == 8 : TH == 16 || TH == 32, "16 or 32 output rows (bwd_weight: 4 or 8 a step)");
    static_assert(TW == 16 || TW == 32 || TW == 64, "16, 32 or 64 output columns");
    static_assert(CB == 8 || CB == 16 || CB == 32 || CB == 64, "8, 16, 32 or 64 channels per block");
    static_assert(!kWgrad || CB >= 16, "bwd_weight: 16, 32 or 64 channels per block");
    static_assert(CPG == 1 || CPG == 2 || CPG == 4, "1, 2 or 4 channels per group");
    // the filter sizes and the view of the problem (bwd_data: the forward over dy)
    using Dw = Sm90DwConv<DType, 2, Direction, 1, 8, 4>;
    static constexpr bool kFlip = Direction == TD_CONV_BWD_DATA;

    template <int KH>
    static constexpr bool fits() {
        if constexpr (kWgrad) return DwWgradRing<TW, CB, TH>::bytes <= kDwMmaSmemMost;
        else return DwMmaSmem<TH, TW, CB, KH, dw_wpc(KH, KH, CPG)>::bytes <= kDwMmaSmemMost;
    }

    // bwd_weight: blocks of CB channels x bands of strips, as many bands as fill the SMs' block
    // slots once (at least one, at most a strip a band); one fp32 partial row a band.
    static int wgrad_bands(const DwGeometry& d) {
        const int per_sm = std::max(1, DwWgradRing<TW, CB, TH>::per_sm);
        const int64_t strips = (int64_t)d.N * ((d.wo + TW - 1) / TW);
        const int64_t slots = (int64_t)per_sm * device::multiprocessors(), groups = (d.C + CB - 1) / CB;
        return (int)std::max<int64_t>(1, std::min<int64_t>(strips, slots / groups));
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (int st = conv_channels_are(g, CPG, why)) return st;
        if ((g.G * CPG) % 8) {
            *why = "G x C = " + std::to_string(g.G * CPG) + " is not a multiple of 8 (16-byte channel vectors)";
            return TD_UNSUPPORTED;
        }
        for (int i = 0; i < 3; ++i)
            if (g.stride[i] != 1 || g.dil[i] != 1) {
                *why = "stride and dilation must be 1 (the direct kernels take the others)";
                return TD_UNSUPPORTED;
            }
        bool fit = false;
        if (!Dw::with_filter((int)g.fil[1], (int)g.fil[2], [&](auto kh, auto) { fit = fits<decltype(kh)::value>(); })) {
            *why = "filter not one of 3x3, 5x5, 7x7";
            return TD_UNSUPPORTED;
        }
        if (!fit) {
            *why = "this tile's shared memory for a " + std::to_string(g.fil[1]) + "x" + std::to_string(g.fil[2]) +
                   " filter exceeds 227 KB";
            return TD_UNSUPPORTED;
        }
        if (kWgrad && !tc_tma_wanted()) {  // its tiles move by TMA only
            *why = "bwd_weight on tensor cores needs TMA (the option tma is 0)";
            return TD_UNSUPPORTED;
        }
        return conv_tensors_fit_int32(g, why);
    }

    static size_t workspace_size(const TdConvProblem& p) {
        if constexpr (!kWgrad) {
            return 0;
        } else {
            ConvGeometry g{};
            if (!conv_geometry(p, &g).empty()) return 0;
            return (size_t)wgrad_bands(Dw::view(g)) * (size_t)(g.G * g.taps()) * sizeof(float);
        }
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        if constexpr (kWgrad) return run_wgrad(p, in, wei, out, ws, ws_bytes, stream_ptr);
        else return run_forward(p, in, wei, out, stream_ptr);
    }

    // fwd: x -> y; bwd_data: the forward over dy with the filter flipped
    static int run_forward(const TdConvProblem& p, const void* in, const void* wei, void* out, void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(wei)) & 15)
            return fail(TD_REJECTED, "a tensor's address is not aligned to the kernel's 16-byte vectors; the generic "
                                     "kernel takes it");
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        DwGeometry d = Dw::view(geo);
        d.C = (int)geo.G * CPG;  // every channel (the view counts groups)
        // fwd: x -> y; bwd_data: dy (the `out` argument) -> dx (the `in` argument)
        const auto* src = static_cast<const unsigned short*>(kFlip ? out : in);
        auto* dst = static_cast<unsigned short*>(const_cast<void*>(kFlip ? in : out));
        const auto* w = static_cast<const unsigned short*>(wei);
        const int64_t blocks = (int64_t)d.N * ((d.ho + TH - 1) / TH) * ((d.wo + TW - 1) / TW) * ((d.C + CB - 1) / CB);
        if (blocks > INT32_MAX) return fail(TD_REJECTED, "too many blocks for one launch");
        Dw::with_filter((int)geo.fil[1], (int)geo.fil[2], [&](auto kh, auto kw) {
            constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
            if constexpr (fits<KH>()) {
                if constexpr (CPG == 1) {
                    // depthwise: the tiles by TMA where the maps encode (else the software copies)
                    using L = DwMmaTma<TH, TW, CB, KH, dw_wpc(KH, KW, 1)>;
                    CUtensorMap xmap{}, ymap{};
                    if (L::bytes <= kDwMmaSmemMost && tc_tma_wanted() &&
                        tile_map(&xmap, src, d, true, L::BW, L::S::IR) && tile_map(&ymap, dst, d, false, TW, TH)) {
                        auto kernel = conv_dw_mma<T, KH, KW, TH, TW, CB, kFlip, true>;
                        if (L::bytes > 48 * 1024)
                            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::bytes);
                        kernel<<<(unsigned)blocks, dw_mma_threads(CB), L::bytes, stream>>>(d, src, w, dst, xmap, ymap);
                    } else {
                        constexpr int bytes = DwMmaSmem<TH, TW, CB, KH, dw_wpc(KH, KW, 1)>::bytes;
                        auto kernel = conv_dw_mma<T, KH, KW, TH, TW, CB, kFlip, false>;
                        if (bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
                        kernel<<<(unsigned)blocks, dw_mma_threads(CB), bytes, stream>>>(d, src, w, dst, xmap, ymap);
                    }
                } else {
                    constexpr int bytes = DwMmaSmem<TH, TW, CB, KH, KH * KW * CPG>::bytes;
                    auto kernel = conv_gmma<T, CPG, KH, KW, TH, TW, CB, kFlip>;
                    if (bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
                    kernel<<<(unsigned)blocks, dw_mma_threads(CB), bytes, stream>>>(d, src, w, dst);
                }
            }
        });
        return launch_status();
    }

    // bwd_weight: x (`in`) and dy (`out`) by TMA, one partial row a band in the workspace, then
    // their sum into dW (`wei`).
    static int run_wgrad(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                         void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15 || reinterpret_cast<uintptr_t>(wei) & 1)
            return fail(TD_REJECTED, "a tensor's address is not aligned to the kernel's 16-byte vectors; the generic "
                                     "kernel takes it");
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DwGeometry d = Dw::view(geo);
        const int bands = wgrad_bands(d);
        const int64_t elems = geo.G * geo.taps(), groups = (d.C + CB - 1) / CB;
        if (groups > 65535) return fail(TD_REJECTED, "more than 65535 channel blocks for one launch");
        float* part = nullptr;
        if (int st = take_workspace((size_t)bands * (size_t)elems * sizeof(float), ws, ws_bytes, stream_ptr,
                                    reinterpret_cast<void**>(&part)))
            return st;
        bool mapped = false;
        Dw::with_filter((int)geo.fil[1], (int)geo.fil[2], [&](auto kh, auto kw) {
            constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
            if constexpr (fits<KH>()) {
                using RG = DwWgradRing<TW, CB, TH>;
                CUtensorMap xmap{}, dymap{};
                if (!tile_map(&xmap, in, d, true, RG::BWX, TH, RG::SWIZZLE) ||
                    !tile_map(&dymap, out, d, false, RG::BWD, TH, RG::SWIZZLE))
                    return;
                mapped = true;
                auto kernel = conv_dw_mma_wgrad<T, KH, KW, TH, TW, CB>;
                if (RG::bytes > 48 * 1024)
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, RG::bytes);
                kernel<<<dim3((unsigned)bands, (unsigned)groups), 32 * RG::WARPS, RG::bytes, stream>>>(d, bands, part,
                                                                                                     xmap, dymap);
            }
        });
        if (!mapped) return fail(TD_REJECTED, "the driver refused a tensor map (this kernel moves its tiles by TMA only)");
        pdl_launch(conv_bwd_weight_reduce<T>, dim3((unsigned)((elems + 31) / 32)), dim3(32, 8), 0, stream,
                   static_cast<const float*>(part), static_cast<T*>(const_cast<void*>(wei)), elems, bands);
        return launch_status();
    }

    // A tensor map over one side of the view (input: C x wi x hi x N, the view's input being dy
    // for bwd_data; output: C x wo x ho x N) with boxes of CB channels x cols x rows.
    static bool tile_map(CUtensorMap* map, const void* base, const DwGeometry& d, bool input, int cols, int rows,
                         CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
        const int64_t dims[5] = {d.C, input ? d.wi : d.wo, input ? d.hi : d.ho, 1, d.N};
        const int box[5] = {CB, cols, rows, 1, 1};
        return tma_map_16bit(map, base, dims, box, swizzle);
    }
};

}  // namespace td::cuda
