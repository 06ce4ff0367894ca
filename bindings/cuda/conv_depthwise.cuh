// cuda backend: depthwise convolution (one input and one output channel per group), stride 1
// and dilation 1, 1D and 2D, every direction, channels-last, fp32 accumulation.
//
// The direct kernels (conv_direct.cuh) take the filter size at run time: their windows are
// sized for the widest filter (7) and they hold 8 channels per thread, so they run at
// 128-145 registers and 19-25% occupancy, latency-bound (Nsight Compute, bench/RESULTS.md).
// These kernels are instantiated per filter size (2D: 3x3, 5x5, 7x7; 1D: 3, 4, 5, 7 wide)
// and keep VC channels (2, 4 or 8) per thread, so the loops unroll completely and the
// registers hold only what the tile needs.
//
//   fwd        thread = (n, TH output rows x TW output columns, VC channels): it walks the
//              TH + KH - 1 input rows under its outputs; each row's TW + KW - 1 vectors are
//              loaded once, converted once, and feed every (output row, tap) that reads them.
//              The weights (fp32, [tap][C]) stay in registers where KH x KW x VC <= 36, else
//              they are read per use (L1-resident).
//   bwd_data   the forward over dy with the filter flipped (pad' = F - 1 - pad).
//   bwd_weight thread = (KR filter rows, VC channels) of one slice of the output rows: per TW
//              output columns it loads the TW dy vectors and, per filter row, the TW + KW - 1
//              input vectors under them, and adds their products into KR x KW x VC sums.
//              A block holds several slices of one channel chunk (every filter row of it, so
//              the row groups share their loads through L1), adds them in shared memory in
//              order and writes one fp32 partial row; conv_bwd_weight_reduce adds the rows in
//              a fixed order (deterministic).
//   sliding    (2D; bwd_weight tile rows > 1, fwd / bwd_data rows > 4) a thread walks down a
//              segment of output rows, its input rows arriving through a per-warp cp.async
//              ring; see conv_dw_bwd_weight_slide and conv_dw_fwd_slide below.
#pragma once

#include <type_traits>

#include "cuda/conv_direct.cuh"

namespace td::cuda {

// VC consecutive 2-byte elements as one raw load (VC x 2 bytes, aligned to that).
template <int VC> struct DwRaw;
template <> struct DwRaw<1> { using U = unsigned short; };
template <> struct DwRaw<2> { using U = unsigned; };
template <> struct DwRaw<4> { using U = uint2; };
template <> struct DwRaw<8> { using U = uint4; };

template <int VC, class T>
__device__ __forceinline__ typename DwRaw<VC>::U dw_load_raw(const T* p, bool inside) {
    using U = typename DwRaw<VC>::U;
    return inside ? __ldg(reinterpret_cast<const U*>(p)) : U{};
}

// VC elements as floats. bf16 pairs by bit operations (a bf16 is the high half of its
// float: one shift and one mask per 32-bit word), fp16 pairs by the paired conversion.
template <int VC, class T>
__device__ __forceinline__ void dw_unpack(typename DwRaw<VC>::U raw, float (&v)[VC]) {
    if constexpr (VC == 1) {
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
            v[0] = __uint_as_float((unsigned)raw << 16);
        } else {
            v[0] = __half2float(__ushort_as_half(raw));
        }
    } else {
        const unsigned* w = reinterpret_cast<const unsigned*>(&raw);
#pragma unroll
        for (int i = 0; i < VC / 2; ++i) {
            if constexpr (std::is_same_v<T, __nv_bfloat16>) {
                v[2 * i] = __uint_as_float(w[i] << 16);
                v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
                v[2 * i] = f.x;
                v[2 * i + 1] = f.y;
            }
        }
    }
}

// One row of RW vectors starting at column iw0 of row xr (Checked: zeros outside [0, wi)
// and where !row_inside; unchecked: the caller knows the window is inside).
template <bool Checked, int RW, int VC, class T>
__device__ __forceinline__ void dw_row_raw(const T* xr, int C, int iw0, int wi, bool row_inside,
                                           typename DwRaw<VC>::U (&raw)[RW]) {
    if constexpr (Checked) {
#pragma unroll
        for (int j = 0; j < RW; ++j) {
            const int iw = iw0 + j;
            const bool inside = row_inside && iw >= 0 && iw < wi;
            raw[j] = dw_load_raw<VC>(xr + (inside ? iw : 0) * C, inside);
        }
    } else {
        const T* p = xr + (int64_t)iw0 * C;
#pragma unroll
        for (int j = 0; j < RW; ++j) raw[j] = dw_load_raw<VC>(p + j * C, true);
    }
}

template <int VC>
__device__ __forceinline__ void dw_weights(const float* p, float (&v)[VC]) {
    if constexpr (VC == 1) {
        v[0] = __ldg(p);
    } else if constexpr (VC == 2) {
        const float2 a = __ldg(reinterpret_cast<const float2*>(p));
        v[0] = a.x; v[1] = a.y;
    } else {
#pragma unroll
        for (int i = 0; i < VC; i += 4) {
            const float4 a = __ldg(reinterpret_cast<const float4*>(p + i));
            v[i] = a.x; v[i + 1] = a.y; v[i + 2] = a.z; v[i + 3] = a.w;
        }
    }
}

template <int VC, class T>
__device__ __forceinline__ void dw_store(T* p, const float (&v)[VC]) {
    using U = typename DwRaw<VC>::U;
    U raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < VC; ++j) e[j] = from_float<T>(v[j]);
    *reinterpret_cast<U*>(p) = raw;
}

// The 2D view every kernel here works on: rows H, columns W, channels C (1D: H = 1).
struct DwGeometry {
    int N, C, hi, wi, ho, wo, ph, pw;
};

// wt[tap][c] = w[c][tap] as fp32; flipped (tap -> taps - 1 - tap) for bwd_data.
template <class T>
__global__ void dw_pack_weights(int C, int taps, bool flip, const T* __restrict__ w, float* __restrict__ wt) {
    pdl_trigger();  // the convolution may be placed now: it waits for these weights (pdl_launch)
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= C * taps) return;
    const int c = e / taps, tap = e % taps;
    wt[(flip ? taps - 1 - tap : tap) * C + c] = to_float(w[e]);
}

constexpr int kDwThreads = 128;

template <class T, int KH, int KW, int TH, int TW, int VC>
__global__ void __launch_bounds__(kDwThreads) conv_dw_fwd(DwGeometry g, const T* __restrict__ x,
                                                          const float* __restrict__ wt, T* __restrict__ y) {
    pdl_wait();  // the packed weights (dw_pack_weights, just before)
    constexpr bool kWeightsInRegs = KH * KW * VC <= 36;
    constexpr int RW = TW + KW - 1;
    constexpr bool kPrefetch = (TH + KH - 1) * RW * VC <= 128;  // raw window within 64 registers
    const int cvs = g.C / VC;
    const int wbs = (g.wo + TW - 1) / TW, hbs = (g.ho + TH - 1) / TH;
    // 32-bit index arithmetic: supports() keeps every tensor below 2^31 elements.
    unsigned idx = blockIdx.x * kDwThreads + threadIdx.x;
    if ((int64_t)idx >= (int64_t)g.N * hbs * wbs * cvs) return;
    const int cv = (int)(idx % (unsigned)cvs); idx /= (unsigned)cvs;
    const int wb = (int)(idx % (unsigned)wbs); idx /= (unsigned)wbs;
    const int hb = (int)(idx % (unsigned)hbs);
    const int n = (int)(idx / (unsigned)hbs);
    const int c0 = cv * VC, oh0 = hb * TH, ow0 = wb * TW;
    float wr[kWeightsInRegs ? KH * KW : 1][VC];
    if constexpr (kWeightsInRegs) {
#pragma unroll
        for (int t = 0; t < KH * KW; ++t) dw_weights<VC>(wt + t * g.C + c0, wr[t]);
    }
    float acc[TH][TW][VC];
    zero_sums(acc);
    const T* xn = x + (int64_t)n * g.hi * g.wi * g.C + c0;
    const int iw0 = ow0 - g.pw;
    // One input row: its TW + KW - 1 vectors (zeros outside the image) into every
    // (output row, tap) that reads it.
    auto consume = [&](int r, const float (&row)[RW][VC]) {
#pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
            const int oh = r - kh;
            if (oh < 0 || oh >= TH) continue;  // resolved at compile time
#pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
                float wv[VC];
                if constexpr (kWeightsInRegs) {
#pragma unroll
                    for (int v = 0; v < VC; ++v) wv[v] = wr[kh * KW + kw][v];
                } else {
                    dw_weights<VC>(wt + (kh * KW + kw) * g.C + c0, wv);
                }
#pragma unroll
                for (int ow = 0; ow < TW; ++ow)
#pragma unroll
                    for (int v = 0; v < VC; ++v) acc[oh][ow][v] = fmaf(row[ow + kw][v], wv[v], acc[oh][ow][v]);
            }
        }
    };
    if constexpr (kPrefetch) {
        // small windows: every load issued before the first use (more bytes in flight)
        typename DwRaw<VC>::U raw[TH + KH - 1][RW];
#pragma unroll
        for (int r = 0; r < TH + KH - 1; ++r) {
            const int ih = oh0 - g.ph + r;
            const bool row_inside = ih >= 0 && ih < g.hi;
            dw_row_raw<true, RW, VC>(xn + (int64_t)(row_inside ? ih : 0) * g.wi * g.C, g.C, iw0, g.wi, row_inside,
                                     raw[r]);
        }
#pragma unroll
        for (int r = 0; r < TH + KH - 1; ++r) {
            float row[RW][VC];
#pragma unroll
            for (int j = 0; j < RW; ++j) dw_unpack<VC, T>(raw[r][j], row[j]);
            consume(r, row);
        }
    } else {
#pragma unroll
        for (int r = 0; r < TH + KH - 1; ++r) {
            const int ih = oh0 - g.ph + r;
            if (ih < 0 || ih >= g.hi) continue;
            typename DwRaw<VC>::U raw[RW];
            dw_row_raw<true, RW, VC>(xn + (int64_t)ih * g.wi * g.C, g.C, iw0, g.wi, true, raw);
            float row[RW][VC];
#pragma unroll
            for (int j = 0; j < RW; ++j) dw_unpack<VC, T>(raw[j], row[j]);
            consume(r, row);
        }
    }
    T* yn = y + (int64_t)n * g.ho * g.wo * g.C + c0;
#pragma unroll
    for (int i = 0; i < TH; ++i) {
        if (oh0 + i >= g.ho) break;
#pragma unroll
        for (int j = 0; j < TW; ++j)
            if (ow0 + j < g.wo) dw_store<VC>(yn + ((int64_t)(oh0 + i) * g.wo + ow0 + j) * g.C, acc[i][j]);
    }
}

// bwd_weight work: units are (image, output row, segment of seg_len columns); a slice is a
// contiguous run of units. Block = sb slices x lanes (KH / KR row groups x cb channel
// vectors, row group slowest); blockIdx.x = slice block, blockIdx.y = channel chunk.
struct DwWgradPlan {
    int kr, rgs;        // filter rows per thread, row groups
    int cb, chunks;     // channel vectors per block, channel chunks
    int sb, threads;    // slices per block, threads per block
    int seg_len, segs;  // columns per unit (a multiple of TW), units per output row
    int64_t units;
    int slice_blocks;   // partial rows
    int64_t per;        // units per slice
    size_t smem;        // the block's in-order reduction
};

constexpr int kDwWgradThreads = 256;  // at most, per block
constexpr int kDwWgradLanes = 128;    // at most: row groups x channel vectors of a slice

template <class T, int KH, int KW, int KR, int TW, int VC>
__global__ void __launch_bounds__(kDwWgradThreads, 2) conv_dw_bwd_weight(DwGeometry g, DwWgradPlan pl, const T* __restrict__ x, const T* __restrict__ dy,
                                   float* __restrict__ partial) {
    pdl_trigger();  // the reduction of the partial rows may be placed: it waits for this kernel
    constexpr int ACC = KR * KW * VC;
    constexpr int RW = TW + KW - 1;
    extern __shared__ float red[];  // [sb - 1][lanes][ACC]
    const int lanes = pl.rgs * pl.cb;
    const int lane = threadIdx.x % lanes;
    const int s_in_block = threadIdx.x / lanes;
    const int rg = lane / pl.cb;
    const int cv = blockIdx.y * pl.cb + lane % pl.cb;
    const bool active = s_in_block < pl.sb && cv < g.C / VC;
    const int c0 = active ? cv * VC : 0;
    const int64_t slice = (int64_t)blockIdx.x * pl.sb + s_in_block;
    const int64_t begin = slice * pl.per;
    const int64_t end = !active ? begin : begin + pl.per < pl.units ? begin + pl.per : pl.units;
    float acc[KR][KW][VC];
    zero_sums(acc);
    // the unit's (segment, row, image), advanced per unit
    int seg = 0, oh = 0, n = 0;
    if (begin < end) {
        seg = (int)(begin % pl.segs);
        const int64_t r = begin / pl.segs;
        oh = (int)(r % g.ho);
        n = (int)(r / g.ho);
    }
    for (int64_t u = begin; u < end; ++u) {
        const int w_begin = seg * pl.seg_len;
        const int w_end = min(w_begin + pl.seg_len, g.wo);
        const T* grow = dy + ((int64_t)n * g.ho + oh) * g.wo * g.C + c0;
        const T* xn = x + (int64_t)n * g.hi * g.wi * g.C + c0;
        // One step of TW output columns: unchecked loads where its window lies inside the
        // image and the segment, else each load checked (zeros outside).
        auto step = [&](int ow0, auto checked) {
            constexpr bool kChecked = decltype(checked)::value;
            typename DwRaw<VC>::U graw[TW];
            dw_row_raw<kChecked, TW, VC>(grow, g.C, ow0, w_end, true, graw);  // columns up to the segment's end
            float gv[TW][VC];
#pragma unroll
            for (int j = 0; j < TW; ++j) dw_unpack<VC, T>(graw[j], gv[j]);
#pragma unroll
            for (int kr = 0; kr < KR; ++kr) {
                const int ih = oh - g.ph + rg * KR + kr;
                if (ih < 0 || ih >= g.hi) continue;
                typename DwRaw<VC>::U raw[RW];
                dw_row_raw<kChecked, RW, VC>(xn + (int64_t)ih * g.wi * g.C, g.C, ow0 - g.pw,
                                             kChecked ? min(g.wi, w_end - g.pw + KW - 1) : g.wi, true, raw);
                float row[RW][VC];
#pragma unroll
                for (int j = 0; j < RW; ++j) dw_unpack<VC, T>(raw[j], row[j]);
#pragma unroll
                for (int kw = 0; kw < KW; ++kw)
#pragma unroll
                    for (int j = 0; j < TW; ++j)
#pragma unroll
                        for (int v = 0; v < VC; ++v) acc[kr][kw][v] = fmaf(gv[j][v], row[j + kw][v], acc[kr][kw][v]);
            }
        };
        for (int ow0 = w_begin; ow0 < w_end; ow0 += TW) {
            if (ow0 - g.pw >= 0 && ow0 - g.pw + RW <= g.wi && ow0 + TW <= w_end) {
                step(ow0, std::false_type{});
            } else {
                step(ow0, std::true_type{});
            }
        }
        if (++seg == pl.segs) {
            seg = 0;
            if (++oh == g.ho) { oh = 0; ++n; }
        }
    }
    if (s_in_block > 0 && s_in_block < pl.sb) {
        float* mine = red + ((int64_t)(s_in_block - 1) * lanes + lane) * ACC;
#pragma unroll
        for (int i = 0; i < KR; ++i)
#pragma unroll
            for (int j = 0; j < KW; ++j)
#pragma unroll
                for (int v = 0; v < VC; ++v) mine[(i * KW + j) * VC + v] = acc[i][j][v];
    }
    if (pl.sb > 1) __syncthreads();
    if (s_in_block > 0 || !active) return;
    float* out = partial + (int64_t)blockIdx.x * g.C * KH * KW;  // dw[c][0][tap][0]
#pragma unroll
    for (int i = 0; i < KR; ++i)
#pragma unroll
        for (int j = 0; j < KW; ++j)
#pragma unroll
            for (int v = 0; v < VC; ++v) {
                float s = acc[i][j][v];
                for (int b = 1; b < pl.sb; ++b) s += red[((int64_t)(b - 1) * lanes + lane) * ACC + (i * KW + j) * VC + v];
                out[(int64_t)(c0 + v) * KH * KW + (rg * KR + i) * KW + j] = s;
            }
}

// ---------------------------------------------------------------- bwd_weight, sliding
// Tile rows > 1 (2D): thread = (image, segment of at least TH output rows, TW output
// columns, VC channels), with the sums of every tap (KH x KW x VC) in registers. It walks its
// output rows downwards keeping the KH input rows under the current one, converted, in
// registers: per output row it converts one new input row (TW + KW - 1 vectors) and one dy
// row (TW vectors) for KH x KW x TW x VC products, where the row-at-a-time kernel reloads
// KH input rows. A warp holds 32 consecutive channel vectors; its rows arrive through a
// ring of kDwSlideStages row steps in shared memory, copied 16 bytes at a time (cp.async)
// three steps ahead, so the loads' latency hides behind the products without registers.
// The 4 warps of a block take items of the same channels and add their sums in shared
// memory in order; one fp32 partial row per block.
struct DwSlidePlan {
    int L, segs;        // output rows per segment, segments per image
    int cbs;            // column blocks of TW per row
    int64_t items;      // N x segs x cbs per channel group
    int64_t per_block;  // items per block (its 4 warps take every 4th)
    int blocks;         // blocks per channel group (= partial rows)
    int groups;         // channel groups of 32 vectors
};

constexpr int kDwSlideWarps = 4;
constexpr int kDwSlideStages = 4;

// A sliding item: image n, output columns from ow0, output rows [oh_begin, oh_begin + rows).
struct DwSlideItem {
    int64_t n;
    int ow0, oh_begin, rows;

    __device__ __forceinline__ DwSlideItem(int64_t it, const DwSlidePlan& pl, int tw, int ho) {
        const int64_t rest = it / pl.cbs;
        ow0 = (int)(it % pl.cbs) * tw;
        oh_begin = (int)(rest % pl.segs) * pl.L;
        rows = min(oh_begin + pl.L, ho) - oh_begin;
        n = rest / pl.segs;
    }
};

// Shared memory of a sliding block: the warps' rings (bwd_weight: input and dy pixels a
// step) and bwd_weight's in-order reduction.
constexpr int dw_slide_smem(bool wgrad, int kh, int kw, int tw, int vc) {
    return wgrad ? kDwSlideWarps * kDwSlideStages * (2 * tw + kw - 1) * 64 * vc + (kDwSlideWarps - 1) * kh * kw * vc * 32 * 4
                 : kDwSlideWarps * kDwSlideStages * (tw + kw - 1) * 64 * vc;
}
// Filter sizes a sliding variant compiles: its sums, weights and window within 140 registers
// (bwd_weight 7x7 takes one channel per thread, 3x3 up to 2 x 8 columns) and static shared
// memory within 48 KB.
template <bool Wgrad, int KH, int KW, int TW, int VC>
constexpr bool dw_slide_fits() {
    const int values = Wgrad ? VC * KH * KW + VC * KH * (TW + KW - 1)                   // sums, input rows
                             : VC * KH * TW + VC * KH * KW + VC * (TW + KW - 1);        // sums, weights, row
    return values <= 140 && dw_slide_smem(Wgrad, KH, KW, TW, VC) <= 48 * 1024;
}

template <int N>
__device__ __forceinline__ void cp_async_wait_newest() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// A warp's ring row step: NA pixels of row A from column colA, then NB pixels of row B from
// column colB, each pixel the warp's 32 x VC channels in 16-byte pieces. Per lane: its
// pieces' offsets from the rows' first pixels and whether their columns and channels are
// inside, fixed for an item; then per step one copy per piece (zeros where outside).
template <int NA, int NB, int VC>
struct DwRingStep {
    static constexpr int PARTS = 4 * VC;
    static constexpr int PIECES = (NA + NB) * PARTS;
    static constexpr int PER_LANE = (PIECES + 31) / 32;
    int off[PER_LANE];
    bool ok[PER_LANE];

    __device__ __forceinline__ DwRingStep(int lane, int cw, int C, int colA, int widthA, int colB, int widthB) {
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            const int q = lane + 32 * i;
            const int pix = q / PARTS, c = cw + q % PARTS * 8;
            const int col = pix < NA ? colA + pix : colB + pix - NA;
            ok[i] = q < PIECES && c < C && col >= 0 && col < (pix < NA ? widthA : widthB);
            off[i] = ok[i] ? col * C + c : 0;
        }
    }

    template <class T>
    __device__ __forceinline__ void issue(uint4* dst, int lane, const T* rowA, bool okA, const T* rowB, bool okB) const {
#pragma unroll
        for (int i = 0; i < PER_LANE; ++i) {
            const int q = lane + 32 * i;
            if (q >= PIECES) break;
            const bool a = q < NA * PARTS;
            cp_async16(dst + q, (a ? rowA : rowB) + off[i], ok[i] && (a ? okA : okB));
        }
    }
};

template <class T, int KH, int KW, int TW, int VC>
__global__ void __launch_bounds__(32 * kDwSlideWarps) conv_dw_bwd_weight_slide(DwGeometry g, DwSlidePlan pl, const T* __restrict__ x,
                                                                                const T* __restrict__ dy, float* __restrict__ partial) {
    pdl_trigger();  // the reduction of the partial rows may be placed: it waits for this kernel
    constexpr int RW = TW + KW - 1;
    constexpr int PIX = RW + TW;       // a row step: RW input pixels, then TW dy pixels
    constexpr int PARTS = 4 * VC;      // 16-byte pieces of a pixel's 32 x VC channels
    constexpr int ACC = KH * KW * VC;
    constexpr int S = kDwSlideStages;
    using U = typename DwRaw<VC>::U;
    __shared__ uint4 ring[kDwSlideWarps][S][PIX * PARTS];
    __shared__ float red[kDwSlideWarps - 1][ACC][32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int cw = blockIdx.y * 32 * VC;  // the warp's first channel
    const bool active = cw + lane * VC < g.C;
    float acc[KH][KW][VC];
    zero_sums(acc);
    const int64_t first = (int64_t)blockIdx.x * pl.per_block;
    const int64_t last = first + pl.per_block < pl.items ? first + pl.per_block : pl.items;
    for (int64_t it = first + warp; it < last; it += kDwSlideWarps) {
        const DwSlideItem item(it, pl, TW, g.ho);
        const int64_t n = item.n;
        const int ow0 = item.ow0, iw0 = ow0 - g.pw, oh_begin = item.oh_begin;
        const int steps = item.rows + KH - 1;  // step r: input row r, dy row r - (KH - 1)
        const T* xn = x + n * g.hi * g.wi * g.C;
        const T* dyn = dy + n * g.ho * g.wo * g.C;
        const DwRingStep<RW, TW, VC> pieces(lane, cw, g.C, iw0, g.wi, ow0, g.wo);
        auto issue = [&](int r) {
            if (r < steps) {
                const int ih = oh_begin - g.ph + r, oh = oh_begin + r - (KH - 1);
                const bool x_ok = ih >= 0 && ih < g.hi, dy_ok = oh >= oh_begin;
                pieces.issue(ring[warp][r % S], lane, xn + (int64_t)(x_ok ? ih : 0) * g.wi * g.C, x_ok,
                             dyn + (int64_t)(dy_ok ? oh : 0) * g.wo * g.C, dy_ok);
            }
            cp_async_commit();  // empty past the end: the group count stays per step
        };
#pragma unroll
        for (int r = 0; r < S - 1; ++r) issue(r);
        float win[KH][RW][VC];  // slot r % KH holds input row step r
        for (int r0 = 0; r0 < steps; r0 += KH) {
#pragma unroll
            for (int s = 0; s < KH; ++s) {
                const int r = r0 + s;
                if (r >= steps) break;
                cp_async_wait_newest<S - 2>();  // step r landed
                __syncwarp();                   // the other lanes' copies too; step r - 1 read by all
                issue(r + S - 1);
                const U* st = reinterpret_cast<const U*>(ring[warp][r % S]) + lane;
#pragma unroll
                for (int j = 0; j < RW; ++j) dw_unpack<VC, T>(st[j * 32], win[s][j]);
                if (r < KH - 1) continue;
                float gv[TW][VC];
#pragma unroll
                for (int j = 0; j < TW; ++j) dw_unpack<VC, T>(st[(RW + j) * 32], gv[j]);
                // column outermost: consecutive products go to different sums
#pragma unroll
                for (int j = 0; j < TW; ++j)
#pragma unroll
                    for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                        for (int kx = 0; kx < KW; ++kx)
#pragma unroll
                            for (int v = 0; v < VC; ++v)
                                acc[ky][kx][v] = fmaf(gv[j][v], win[(s + 1 + ky) % KH][j + kx][v], acc[ky][kx][v]);
            }
        }
        cp_async_wait_all();
        __syncwarp();  // the ring is free for the next item
    }
    // the warps' sums added in order (warp 0, 1, 2, 3)
    if (warp > 0) {
#pragma unroll
        for (int i = 0; i < KH; ++i)
#pragma unroll
            for (int j = 0; j < KW; ++j)
#pragma unroll
                for (int v = 0; v < VC; ++v) red[warp - 1][(i * KW + j) * VC + v][lane] = acc[i][j][v];
    }
    __syncthreads();
    if (warp > 0 || !active) return;
    const int c0 = cw + lane * VC;
    float* out = partial + (int64_t)blockIdx.x * g.C * KH * KW;  // dw[c][0][tap][0]
#pragma unroll
    for (int i = 0; i < KH; ++i)
#pragma unroll
        for (int j = 0; j < KW; ++j)
#pragma unroll
            for (int v = 0; v < VC; ++v) {
                float s = acc[i][j][v];
#pragma unroll
                for (int w = 0; w < kDwSlideWarps - 1; ++w) s += red[w][(i * KW + j) * VC + v][lane];
                out[(int64_t)(c0 + v) * KH * KW + i * KW + j] = s;
            }
}

// Forward sliding (tile rows > 4, 2D; bwd_data runs it over dy with the filter flipped):
// thread = (image, segment of at least TH output rows, TW output columns, VC channels),
// weights in registers. It walks the input rows down: each row, converted once, adds into
// the KH output rows that read it (KH rows of sums in registers, a ring indexed by output
// row); the output row it completes is stored. Input rows arrive through the same per-warp
// cp.async ring as bwd_weight's.
template <class T, int KH, int KW, int TW, int VC>
__global__ void __launch_bounds__(32 * kDwSlideWarps) conv_dw_fwd_slide(DwGeometry g, DwSlidePlan pl, const T* __restrict__ x,
                                                                         const float* __restrict__ wt, T* __restrict__ y) {
    pdl_wait();  // the packed weights (dw_pack_weights, just before)
    constexpr int RW = TW + KW - 1;
    constexpr int S = kDwSlideStages;
    using U = typename DwRaw<VC>::U;
    __shared__ uint4 ring[kDwSlideWarps][S][RW * 4 * VC];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int cw = blockIdx.y * 32 * VC;  // the warp's first channel
    const bool active = cw + lane * VC < g.C;
    const int c0 = active ? cw + lane * VC : 0;
    float w[KH][KW][VC];
#pragma unroll
    for (int ky = 0; ky < KH; ++ky)
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) dw_weights<VC>(wt + (ky * KW + kx) * g.C + c0, w[ky][kx]);
    const int64_t first = (int64_t)blockIdx.x * pl.per_block;
    const int64_t last = first + pl.per_block < pl.items ? first + pl.per_block : pl.items;
    for (int64_t it = first + warp; it < last; it += kDwSlideWarps) {
        const DwSlideItem item(it, pl, TW, g.ho);
        const int64_t n = item.n;
        const int ow0 = item.ow0, iw0 = ow0 - g.pw, oh_begin = item.oh_begin, rows = item.rows;
        const int steps = rows + KH - 1;  // step r: input row oh_begin - ph + r
        const T* xn = x + n * g.hi * g.wi * g.C;
        T* yn = y + (n * g.ho + oh_begin) * g.wo * g.C + c0;
        const DwRingStep<RW, 0, VC> pieces(lane, cw, g.C, iw0, g.wi, 0, 0);
        auto issue = [&](int r) {
            if (r < steps) {
                const int ih = oh_begin - g.ph + r;
                const bool ok = ih >= 0 && ih < g.hi;
                pieces.issue(ring[warp][r % S], lane, xn + (int64_t)(ok ? ih : 0) * g.wi * g.C, ok, xn, false);
            }
            cp_async_commit();
        };
#pragma unroll
        for (int r = 0; r < S - 1; ++r) issue(r);
        float acc[KH][TW][VC];  // slot o % KH: output row o of the segment
        zero_sums(acc);
        for (int r0 = 0; r0 < steps; r0 += KH) {
#pragma unroll
            for (int s = 0; s < KH; ++s) {
                const int r = r0 + s;
                if (r >= steps) break;
                cp_async_wait_newest<S - 2>();
                __syncwarp();
                issue(r + S - 1);
                const U* st = reinterpret_cast<const U*>(ring[warp][r % S]) + lane;
                float row[RW][VC];
#pragma unroll
                for (int j = 0; j < RW; ++j) dw_unpack<VC, T>(st[j * 32], row[j]);
                bool use[KH];  // output row r - ky is one of the segment's
#pragma unroll
                for (int ky = 0; ky < KH; ++ky) use[ky] = r - ky >= 0 && r - ky < rows;
#pragma unroll
                for (int kx = 0; kx < KW; ++kx)
#pragma unroll
                    for (int ky = 0; ky < KH; ++ky) {
                        if (!use[ky]) continue;
#pragma unroll
                        for (int j = 0; j < TW; ++j)
#pragma unroll
                            for (int v = 0; v < VC; ++v)
                                acc[(s - ky + KH) % KH][j][v] = fmaf(w[ky][kx][v], row[j + kx][v], acc[(s - ky + KH) % KH][j][v]);
                    }
                const int done = r - (KH - 1);  // its last input row was this one
                if (done >= 0) {
                    float (&o)[TW][VC] = acc[(s + 1) % KH];
                    if (active) {
#pragma unroll
                        for (int j = 0; j < TW; ++j) {
                            if (ow0 + j >= g.wo) break;
                            T* dst = yn + ((int64_t)done * g.wo + ow0 + j) * g.C;
                            if constexpr (VC == 1) {
                                *dst = from_float<T>(o[j][0]);
                            } else {
                                dw_store<VC>(dst, o[j]);
                            }
                        }
                    }
#pragma unroll
                    for (int j = 0; j < TW; ++j)
#pragma unroll
                        for (int v = 0; v < VC; ++v) o[j][v] = 0.f;
                }
            }
        }
        cp_async_wait_all();
        __syncwarp();  // the ring is free for the next item
    }
}

// ---------------------------------------------------------------- host side
// TH x TW x VC: the forward's output rows x columns x channels per thread; the row
// bwd_weight (TH 1) uses TW (columns per step) and VC; the sliding kernels take TH as the
// fewest output rows a segment has.
template <int DType, int Ndim, int Direction, int TH, int TW, int VC>
struct Sm90DwConv {
    using T = typename ConvElement<DType>::T;
    // bwd_weight with tile rows > 1 (2D): the sliding kernel, segments of at least TH rows.
    // fwd / bwd_data with tile rows > 4 (2D): the sliding forward.
    static constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;
    static constexpr bool kSlide = kWgrad ? TH > 1 : TH > 4;
    static_assert(VC == 2 || VC == 4 || VC == 8 || (kSlide && VC == 1), "2, 4 or 8 channels per thread (sliding: 1 too)");
    static_assert(Ndim == 2 || !kSlide, "the sliding kernels are 2D");
    static constexpr int kSmCount = 132;

    // Calls f(integral_constant<KH>, integral_constant<KW>) for a compiled filter size;
    // false when the size is not one of them.
    template <class F>
    static bool with_filter(int fh, int fw, F&& f) {
        using std::integral_constant;
        if constexpr (Ndim == 1) {
            if (fh != 1) return false;
            switch (fw) {
                case 3: f(integral_constant<int, 1>{}, integral_constant<int, 3>{}); return true;
                case 4: f(integral_constant<int, 1>{}, integral_constant<int, 4>{}); return true;
                case 5: f(integral_constant<int, 1>{}, integral_constant<int, 5>{}); return true;
                case 7: f(integral_constant<int, 1>{}, integral_constant<int, 7>{}); return true;
                default: return false;
            }
        } else {
            if (fh != fw) return false;
            switch (fw) {
                case 3: f(integral_constant<int, 3>{}, integral_constant<int, 3>{}); return true;
                case 5: f(integral_constant<int, 5>{}, integral_constant<int, 5>{}); return true;
                case 7: f(integral_constant<int, 7>{}, integral_constant<int, 7>{}); return true;
                default: return false;
            }
        }
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (int st = conv_channels_are(g, 1, why)) return st;
        if (g.G % VC) {
            *why = "G = " + std::to_string(g.G) + " is not a multiple of " + std::to_string(VC) + " channels per thread";
            return TD_UNSUPPORTED;
        }
        for (int i = 0; i < 3; ++i)
            if (g.stride[i] != 1 || g.dil[i] != 1) {
                *why = "stride and dilation must be 1 (the direct kernels take the others)";
                return TD_UNSUPPORTED;
            }
        if (!with_filter((int)g.fil[1], (int)g.fil[2], [](auto, auto) {})) {
            *why = Ndim == 1 ? "filter width not one of 3, 4, 5, 7" : "filter not one of 3x3, 5x5, 7x7";
            return TD_UNSUPPORTED;
        }
        if (kSlide && g.G % 8) {
            *why = "G = " + std::to_string(g.G) + " is not a multiple of 8 (the sliding kernel copies 16-byte pieces)";
            return TD_UNSUPPORTED;
        }
        if (kSlide && !slide_fits((int)g.fil[1], (int)g.fil[2])) {
            *why = "this tile's sums and input window for a " + std::to_string(g.fil[1]) + "x" + std::to_string(g.fil[2]) +
                   " filter exceed the registers (fewer columns or channels per thread take it)";
            return TD_UNSUPPORTED;
        }
        return conv_tensors_fit_int32(g, why);
    }

    // The view of the problem the kernels take: the forward's, or for bwd_data the forward
    // over dy (sizes swapped, pad' = F - 1 - pad).
    static DwGeometry view(const ConvGeometry& g) {
        DwGeometry d{(int)g.N, (int)g.G, (int)g.in[1], (int)g.in[2], (int)g.out[1], (int)g.out[2],
                     (int)g.pad[1], (int)g.pad[2]};
        if (Direction == TD_CONV_BWD_DATA) {
            std::swap(d.hi, d.ho);
            std::swap(d.wi, d.wo);
            d.ph = (int)g.fil[1] - 1 - d.ph;
            d.pw = (int)g.fil[2] - 1 - d.pw;
        }
        return d;
    }

    // bwd_weight: filter rows per thread (all of them while the sums stay within 48).
    static int filter_rows_per_thread(int kh, int kw) { return kh * kw * VC <= 48 ? kh : 1; }

    static DwWgradPlan wgrad_plan(const TdConvProblem& p, const DwGeometry& d, int kh, int kw) {
        DwWgradPlan pl{};
        pl.kr = filter_rows_per_thread(kh, kw);
        pl.rgs = kh / pl.kr;
        const int cvs = d.C / VC;
        // channel chunks of at most 128 lanes (at least 4 vectors: 32-byte sectors), so that
        // several slices share a block and its in-order reduction
        const int cb_most = std::max(4, kDwWgradLanes / pl.rgs);
        pl.chunks = (cvs + cb_most - 1) / cb_most;
        pl.cb = (cvs + pl.chunks - 1) / pl.chunks;
        const int lanes = pl.rgs * pl.cb;
        pl.sb = std::max(1, kDwWgradThreads / lanes);
        pl.threads = (pl.sb * lanes + 31) / 32 * 32;
        // units: split output rows along W where there are too few rows (1D)
        const int64_t out_rows = (int64_t)d.N * d.ho;
        const int64_t want_threads = (int64_t)kSmCount * 1536;
        int64_t slices = p.base.split_k > 0 ? p.base.split_k
                                            : std::max<int64_t>(1, want_threads / ((int64_t)lanes * pl.chunks));
        const int64_t segs_most = std::max<int64_t>(1, (d.wo + 4 * TW - 1) / (4 * TW));
        int64_t segs = std::max<int64_t>(1, std::min((slices + out_rows - 1) / out_rows, segs_most));
        int64_t seg_len = (d.wo + segs - 1) / segs;
        seg_len = (seg_len + TW - 1) / TW * TW;
        pl.seg_len = (int)seg_len;
        pl.segs = (int)((d.wo + seg_len - 1) / seg_len);
        pl.units = out_rows * pl.segs;
        slices = std::min(slices, pl.units);
        int64_t slice_blocks = (slices + pl.sb - 1) / pl.sb;
        if (p.base.split_k <= 0) {  // fp32 partial rows: at most a quarter of the bytes read
            const int64_t read = 2 * ((int64_t)d.N * d.hi * d.wi * d.C + (int64_t)d.N * d.ho * d.wo * d.C);
            const int64_t row = 4 * (int64_t)d.C * kh * kw;
            slice_blocks = std::min(slice_blocks, std::max<int64_t>(1, read / (4 * row)));
        }
        slice_blocks = std::max<int64_t>(1, std::min<int64_t>(slice_blocks, 65535));
        const int64_t all = slice_blocks * pl.sb;
        pl.per = (pl.units + all - 1) / all;
        // no block without work: as many slice blocks as the units at `per` a slice need
        pl.slice_blocks = (int)(((pl.units + pl.per - 1) / pl.per + pl.sb - 1) / pl.sb);
        pl.smem = (size_t)(pl.sb - 1) * lanes * pl.kr * kw * VC * sizeof(float);
        return pl;
    }

    // Whether this variant compiles the sliding kernel for a filter size (registers).
    static bool slide_fits(int fh, int fw) {
        bool fits = false;
        with_filter(fh, fw, [&](auto kh, auto kw) { fits = dw_slide_fits<kWgrad, decltype(kh)::value, decltype(kw)::value, TW, VC>(); });
        return fits;
    }

    static DwSlidePlan slide_plan(const TdConvProblem& p, const DwGeometry& d, int kh) {
        DwSlidePlan pl{};
        pl.cbs = (d.wo + TW - 1) / TW;
        pl.groups = (d.C / VC + 31) / 32;
        // blocks resident at once: registers (bwd_weight: sums + window + dy + about 40 a
        // thread, ptxas gives 7x7 at 4x1 166, 3x3 at 8x2 118; forward: sums + weights + row
        // + 60: 7x7 at 4x1 147) and shared memory (the rings, bwd_weight's reduction)
        const int row = VC * (TW + kh - 1);
        const int regs = std::min(255, kWgrad ? VC * kh * kh + kh * row + TW * VC + 40 : VC * kh * (TW + kh) + row + 60);
        const int smem = dw_slide_smem(kWgrad, kh, kh, TW, VC) + 1024;  // + the driver's reserve
        const int per_sm = std::min({16, 65536 / (regs * 32 * kDwSlideWarps), (227 << 10) / smem});
        const int64_t resident = (int64_t)kSmCount * std::max(1, per_sm);
        const int64_t blocks_most = p.base.split_k > 0 ? p.base.split_k : std::max<int64_t>(1, resident / pl.groups);
        // segments: the fewest that minimise a thread's rows (its items x (rows + KH - 1 halo))
        const int segs_most = std::max(1, (d.ho + TH - 1) / TH);
        int64_t best = INT64_MAX;
        for (int segs = 1; segs <= segs_most; ++segs) {
            const int L = (d.ho + segs - 1) / segs;
            const int64_t items = (int64_t)d.N * segs * pl.cbs;
            const int64_t per_thread = (items + blocks_most * kDwSlideWarps - 1) / (blocks_most * kDwSlideWarps);
            const int64_t rows = per_thread * (L + kh - 1);
            if (rows < best) { best = rows; pl.segs = segs; pl.L = L; }
        }
        pl.segs = (d.ho + pl.L - 1) / pl.L;
        pl.items = (int64_t)d.N * pl.segs * pl.cbs;
        const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>({blocks_most, pl.items, 65535}));
        pl.per_block = (pl.items + blocks - 1) / blocks;
        pl.blocks = (int)((pl.items + pl.per_block - 1) / pl.per_block);  // none without work
        return pl;
    }

    static size_t workspace_bytes(const TdConvProblem& p, const ConvGeometry& g) {
        const size_t elems = (size_t)(g.G * g.taps());
        if (Direction != TD_CONV_BWD_WEIGHT) return elems * sizeof(float);  // the packed weights
        const int rows = kSlide ? slide_plan(p, view(g), (int)g.fil[1]).blocks
                                 : wgrad_plan(p, view(g), (int)g.fil[1], (int)g.fil[2]).slice_blocks;
        return (size_t)rows * elems * sizeof(float);
    }

    static size_t workspace_size(const TdConvProblem& p) {
        ConvGeometry g{};
        if (!conv_geometry(p, &g).empty()) return 0;
        return workspace_bytes(p, g);
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const uintptr_t vec = kSlide ? 16 : VC * sizeof(T);  // the sliding kernel copies 16-byte pieces
        if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & (vec - 1)) ||
            (reinterpret_cast<uintptr_t>(wei) & 1))
            return fail(TD_REJECTED, "a tensor's address is not aligned to the kernel's " + std::to_string(vec) +
                                         "-byte vectors; the generic kernel takes it");
        const DwGeometry d = view(geo);
        float* scratch = nullptr;
        if (int st = take_workspace(workspace_bytes(p, geo), ws, ws_bytes, stream_ptr, reinterpret_cast<void**>(&scratch)))
            return st;
        if constexpr (Direction == TD_CONV_BWD_WEIGHT) {
            const T* x = static_cast<const T*>(in);
            const T* dy = static_cast<const T*>(out);
            const int64_t elems = geo.G * geo.taps();
            if constexpr (kSlide) {
                const DwSlidePlan pl = slide_plan(p, d, (int)geo.fil[1]);
                with_filter((int)geo.fil[1], (int)geo.fil[2], [&](auto kh, auto kw) {
                    constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
                    if constexpr (dw_slide_fits<true, KH, KW, TW, VC>())
                        conv_dw_bwd_weight_slide<T, KH, KW, TW, VC>
                            <<<dim3(pl.blocks, pl.groups), 32 * kDwSlideWarps, 0, stream>>>(d, pl, x, dy, scratch);
                });
                pdl_launch(conv_bwd_weight_reduce<T>, dim3((unsigned)((elems + 31) / 32)), dim3(32, 8), 0, stream,
                           static_cast<const float*>(scratch), static_cast<T*>(const_cast<void*>(wei)), elems, pl.blocks);
                return launch_status();
            } else {
                const DwWgradPlan pl = wgrad_plan(p, d, (int)geo.fil[1], (int)geo.fil[2]);
                with_filter((int)geo.fil[1], (int)geo.fil[2], [&](auto kh, auto kw) {
                    constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
                    constexpr int KR = KH * KW * VC <= 48 ? KH : 1;  // filter_rows_per_thread
                    auto kernel = conv_dw_bwd_weight<T, KH, KW, KR, TW, VC>;
                    if (pl.smem > 48 * 1024)
                        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem);
                    kernel<<<dim3(pl.slice_blocks, pl.chunks), pl.threads, pl.smem, stream>>>(d, pl, x, dy, scratch);
                });
                pdl_launch(conv_bwd_weight_reduce<T>, dim3((unsigned)((elems + 31) / 32)), dim3(32, 8), 0, stream,
                           static_cast<const float*>(scratch), static_cast<T*>(const_cast<void*>(wei)), elems,
                           pl.slice_blocks);
                return launch_status();
            }
        } else {
            return run_forward(p, d, (int)geo.fil[1], (int)geo.fil[2], in, wei, out, scratch, stream);
        }
    }

    static int run_forward(const TdConvProblem& p, const DwGeometry& d, int fil_h, int fil_w, const void* in, const void* wei, void* out, float* scratch,
                           cudaStream_t stream) {
        const bool flip = Direction == TD_CONV_BWD_DATA;
        const int taps = fil_h * fil_w;
        // fwd: x -> y; bwd_data: dy (the `out` argument) -> dx (the `in` argument)
        const T* src = static_cast<const T*>(flip ? out : in);
        T* dst = static_cast<T*>(const_cast<void*>(flip ? in : out));
        dw_pack_weights<T><<<(unsigned)((d.C * taps + 255) / 256), 256, 0, stream>>>(
            d.C, taps, flip, static_cast<const T*>(wei), scratch);
        if constexpr (kSlide) {
            const DwSlidePlan pl = slide_plan(p, d, fil_h);
            with_filter(fil_h, fil_w, [&](auto kh, auto kw) {
                constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
                if constexpr (dw_slide_fits<false, KH, KW, TW, VC>())
                    pdl_launch(conv_dw_fwd_slide<T, KH, KW, TW, VC>, dim3(pl.blocks, pl.groups), dim3(32 * kDwSlideWarps),
                               0, stream, d, pl, src, static_cast<const float*>(scratch), dst);
            });
        } else {
            const int64_t threads = (int64_t)d.N * ((d.ho + TH - 1) / TH) * ((d.wo + TW - 1) / TW) * (d.C / VC);
            const unsigned grid = (unsigned)((threads + kDwThreads - 1) / kDwThreads);
            with_filter(fil_h, fil_w, [&](auto kh, auto kw) {
                constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
                pdl_launch(conv_dw_fwd<T, KH, KW, (KH == 1 ? 1 : TH), TW, VC>, dim3(grid), dim3(kDwThreads), 0, stream, d,
                           src, static_cast<const float*>(scratch), dst);
            });
        }
        return launch_status();
    }
};

}  // namespace td::cuda
