// cuda backend: grouped convolution on tensor cores from shared-memory tiles (mma.sync
// m16n8k16 fed by ldmatrix, fp32 accumulation) for 1 to 16 channels per group (the default
// manifest builds 4, 8 and 16: below 4 the direct kernels were faster); every direction,
// 1D/2D/3D, channels-last. A block has eight warps. bindings/cuda/conv_mma.cuh reads its fragments from
// global memory with per-element index arithmetic; this kernel copies each tile once.
//
// A block owns BC channels (TC: 32, or 16 where G x CPG is not a multiple of 32) and a tile of
// output pixels (TM at most: th rows x tw columns of one output depth plane). The channels
// form virtual groups of VG (8 below 16 channels per group, else 16): a virtual group holds
// VG / CPG real groups, and its weight matrix is block-diagonal (zeros between real
// groups), so one MMA shape serves every CPG and nothing crosses a real group.
//   fwd        D[pixel][n] = sum over (tap, k) of x[in(pixel, tap)][k] * W[tap][k][n]
//              A: 16 output pixels x 16 of (tap, channel) from the input tile (ldmatrix:
//              every lane gives the address of its pixel's 16 bytes, so any pixel mapping,
//              stride and dilation works); B: the packed weights in shared memory.
//   bwd_data   stride 1: the forward over dy with the filter flipped and each group's matrix
//              transposed (pad' = dil (F - 1) - pad), as conv_tiled.cuh does.
//   bwd_weight D[k][c] (one 16-channel virtual group, one tap) = sum over pixels of
//              dy[pixel][k] * x[in(pixel, tap)][c]: both operands from the tiles through
//              ldmatrix.trans (at 4 and 8 channels per group transposed, D[(tap pair, c)][k]
//              per 8 channels: two taps in M, dy as B, fewer MMAs on the zeros between real
//              groups); a warp owns (virtual group, up to MAXT taps), or at 4 and 8
//              channels per group (8-channel half, every tap pair, a slice of each tile's
//              m tiles), and keeps its sums in registers across the block's band of tiles;
//              each band writes one fp32 partial row; conv_bwd_weight_reduce adds the rows
//              in a fixed order.
// A forward block walks a band of tiles too where few blocks fit an SM (weights loaded once,
// the next tile's copy started before this tile's results are stored); where 4 or more fit,
// one tile (tc_fwd_band). At VG 16 with 3-row filters at row stride 1
// its warps own rows of output and feed each A fragment to every output row it reaches
// (tc_fwd_rows, the row-reuse loop).
// The weights are packed once per call by a small kernel into the exact shared-memory image
// every block copies (block-diagonal, taps padded, bwd_data flipped), followed by the pixel and
// tap offset tables every forward block shares: no per-block index math.
// The tiles move by TMA (cuda/tma.cuh; one thread a copy, zeros outside the image, the
// forward's results clipped at its edge) unless the library's option tma is 0 or the driver
// refuses a tensor map; then the threads copy with cp.async. The eight rows one ldmatrix
// phase reads must sit in different banks: under TMA every tile swizzles each pixel's BC x 2
// bytes (TMA's 64B / 32B modes); the software copies give a pixel BC x 2 + 16 bytes, an odd
// count of 16-byte slots. (Swizzled bwd_weight TMA boxes against boxes 8 channels wider for
// that padding, H200: ResNeXt-101 bwd_weight 54.4 us against 62.5, ResNeXt-50 36.5 against
// 40.6, whose smaller stages fit two buffers at 3 blocks a SM.)
#pragma once

#include "cuda/conv_mma.cuh"
#include "cuda/tma.cuh"
#include "tiledispatch/options.hpp"

namespace td::cuda {

constexpr int kTcThreads = 256;  // eight warps: two or four per virtual group
constexpr int kTcWarps = kTcThreads / 32;
constexpr int kTcBand = 8;  // fwd / bwd_data: tiles a block walks at most

struct TcPlan {
    int bc, vg, vgs;              // channels per block, virtual group, virtual groups per block
    int tw, th, tm_pad;           // output tile (columns, rows), pixels rounded up to 16
    int tiles_w, tiles_h, chunks; // tiles per plane, channel blocks
    int rows_in, cols_in, planes_in;
    int pitch;                    // bytes per pixel in shared memory
    int tp;                       // taps padded (even for VG 8: two taps per MMA K step)
    int in_bytes, out_bytes, w_bytes, table_bytes;
    int tap_groups, group_taps;   // bwd_weight: taps split over blocks, taps per block
    int maxt;                     // bwd_weight: taps per warp (accumulators held in registers)
    int stages;                   // bwd_weight: tile buffers (2: the next tile's copy under this one's MMAs)
    int tma;                      // fwd / bwd_data: 3 = tiles in and out by TMA (0: software copies)
    int box_bytes;                // the input box's bytes (in_bytes: rounded up to the swizzle's 1024)
    int opitch;                   // fwd: bytes per pixel of the staging tile
    int64_t pixel_tiles;          // output tiles in all
    int band, bands;              // tiles one block walks; bands = blocks along the pixels
    int rows;                     // fwd / bwd_data: output rows a warp carries in the row-reuse loop (0: one-row loop)
    int64_t blocks;               // chunks x tap groups x bands
    size_t smem;
};

// bwd_weight blocks per SM, held by __launch_bounds__ (the plan counts on them). 16 channels
// per group: 3 at 4 taps a warp (at most 85 registers), 2 at 8 (122 used), 1 at 16 (212).
// At 4 and 8 channels per group (tc_wgrad_pairs) a warp carries every tap of its tap group,
// kTcPairTaps at most, for 8 channels (2D 3x3: 5 pairs, 20 sums), at 4 blocks a SM (64
// registers, 12 bytes spilled; H200, both 8-channel halves in a warp at 80 registers and 3
// blocks: ResNeXt-101 49.8 us, ResNeXt-50 33.3; one half at 4 blocks 48.3-49.0, 33.1-33.9).
constexpr int kTcPairTaps = 10;
constexpr bool tc_wgrad_pairs(int cpg) { return cpg == 4 || cpg == 8; }
constexpr int tc_wgrad_blocks_by_regs(int cpg, int maxt) {
    return tc_wgrad_pairs(cpg) ? 4 : maxt <= 4 ? 3 : maxt <= 8 ? 2 : 1;
}

// The forward's row-reuse loop (conv_fwd_tc<..., Rows = 4 or 2>, tc_fwd_rows) at 16 channels a
// virtual group, for 3-row filters at row stride and dilation 1: a warp owns kTcRows output
// rows of one 16-column segment, and each A fragment it loads (16 input pixels of one input
// row, one filter column) feeds the MMAs of every output row that input row reaches (up to 3),
// instead of one. Off with the library's option multi_row 0 (the one-row loop then runs: A/B
// measurements, tests of both).
constexpr int kTcRows = 4;  // output rows a warp carries: 4, or 2 where 4 leaves warps idle
inline bool tc_rows_wanted() { return options().multi_row != 0; }

// fwd / bwd_data: bytes of the offset tables (tc_table_entry) in the workspace and in shared
// memory, rounded up to the 16-byte copies that move them.
__host__ __device__ inline int tc_table_bytes(const TcPlan& p) { return ((p.tm_pad + p.tp) * 4 + 15) / 16 * 16; }

// Balanced tiling of n into pieces of at most `most`: the piece size.
inline int balanced(int n, int most) {
    const int pieces = (n + most - 1) / most;
    return (n + pieces - 1) / pieces;
}

// The plan of a problem described as a forward (bwd_data: over dy with the flipped filter).
// wgrad: bwd_weight, whose blocks each walk several tiles (fewer fp32 partial rows).
// tma: the tiles move by TMA (fwd / bwd_data: a pixel takes bc x 2 bytes in shared memory,
// swizzled, and the input has two buffers where they cost no resident block; bwd_weight: the
// boxes take bc + 8 channels, the padded pitch); false where a box side would pass 256 (the
// plan is then the software copies').
inline bool tc_plan(const DeviceGeometry& g, int cpg, int tm, int tc, bool wgrad, int sms, bool tma, TcPlan* out) {
    TcPlan p{};
    const int chans = g.G * cpg;
    p.vg = (wgrad || cpg == 16) ? 16 : 8;
    p.bc = chans % 32 == 0 && tc >= 32 ? 32 : (chans % 16 == 0 ? 16 : 0);
    if (!p.bc || p.bc < p.vg || cpg > p.vg || p.vg % cpg) return false;
    p.vgs = p.bc / p.vg;
    // under TMA: bc x 2 bytes a pixel, swizzled; the software copies: one 16-byte slot more,
    // so that ldmatrix rows fall in distinct banks
    // (H200: fwd with TMA boxes of bc + 8 channels and the padded pitch, no swizzle arithmetic,
    // ResNeXt-101 53.8 us against 48.5 swizzled; 3D 81.2 against 72.3)
    p.pitch = tma ? p.bc * 2 : p.bc * 2 + 16;
    p.opitch = p.pitch;  // fwd: the staging tile's pitch
    p.tp = p.vg == 8 ? (g.taps + 1) / 2 * 2 : g.taps;
    p.rows = !wgrad && p.vg == 16 && g.fil[1] == 3 && g.stride[1] == 1 && g.dil[1] == 1 && tc_rows_wanted();
    if (wgrad && tc_wgrad_pairs(cpg)) {  // a warp takes every tap of the block's tap group
        p.maxt = g.taps <= 4 ? 4 : kTcPairTaps;
        p.tap_groups = (g.taps + p.maxt - 1) / p.maxt;
        p.group_taps = (g.taps + p.tap_groups - 1) / p.tap_groups;  // balanced
    } else if (wgrad) {  // warps per virtual group split the taps; 4, 8 or 16 accumulator sets a warp
        // (registers: 2D 3x3 needs 3 and at 8 ran two blocks per SM where 4 allows three)
        const int wpg = kTcWarps / p.vgs;
        const int per_warp = (g.taps + wpg - 1) / wpg;
        p.maxt = per_warp <= 4 ? 4 : per_warp <= 8 ? 8 : 16;
        p.tap_groups = (per_warp + p.maxt - 1) / p.maxt;
        p.group_taps = p.maxt * wpg;
    } else {
        p.tap_groups = 1;
        p.group_taps = g.taps;
    }
    p.planes_in = (g.fil[0] - 1) * g.dil[0] + 1;
    p.tw = balanced(g.out[2], std::min(g.out[2], tm));
    p.th = balanced(g.out[1], std::max(1, std::min(g.out[1], tm / p.tw)));
    if (p.rows) {  // whole row groups of kTcRows where the tile has that many rows
        const int most = std::min(g.out[1], tm / p.tw);
        if (most >= kTcRows) p.th = most / kTcRows * kTcRows;
    }
    for (;;) {
        p.rows_in = (p.th - 1) * g.stride[1] + (g.fil[1] - 1) * g.dil[1] + 1;
        p.cols_in = (p.tw - 1) * g.stride[2] + (g.fil[2] - 1) * g.dil[2] + 1;
        p.tm_pad = (p.th * p.tw + 15) / 16 * 16;
        const int64_t in_px = (int64_t)p.planes_in * p.rows_in * p.cols_in;
        p.box_bytes = (int)std::min<int64_t>(in_px * p.pitch, INT32_MAX);
        // TMA: swizzle-aligned (1024) buffers (bwd_weight's dy tile too: the stages follow it)
        p.in_bytes = tma ? (p.box_bytes + 1023) / 1024 * 1024 : (p.box_bytes + 127) / 128 * 128;
        p.out_bytes = p.tm_pad * p.opitch;  // fwd: the output staging; bwd_weight: the dy tile
        if (tma && wgrad) p.out_bytes = (p.out_bytes + 1023) / 1024 * 1024;
        p.w_bytes = wgrad ? 0 : p.vgs * p.tp * p.vg * p.vg * 2;
        // a zero slot, the TMA mbarriers, the band's tiles, pixel offsets, tap offsets
        p.table_bytes = 32 + kTcBand * 16 + (wgrad ? (p.tm_pad + p.tp) * 4 : tc_table_bytes(p));
        p.smem = (size_t)p.in_bytes + p.out_bytes + p.w_bytes + p.table_bytes;
        if (p.smem <= 112 * 1024) break;
        if (p.th > 1) p.th = balanced(g.out[1], (p.th + 1) / 2);
        else if (p.tw > 16) p.tw = balanced(g.out[2], (p.tw + 1) / 2);
        else return false;
    }
    if (tma) {
        if (p.cols_in > 256 || p.rows_in > 256 || p.planes_in > 256 || p.tw > 256 || p.th > 256)
            return tc_plan(g, cpg, tm, tc, wgrad, sms, false, out);
        p.tma = 3;
    }
    if (tma && !wgrad) {
        // a second input buffer (the next tile's copy under this tile's MMAs) only where it
        // costs no resident block. H200, bf16: ResNeXt-50 fwd one buffer 29.2 us (5 blocks a
        // SM by shared memory), two 31.7 (3); ResNeXt-101 48.2 and 47.7
        const size_t two = p.smem + p.in_bytes;
        const bool fits = two <= 112 * 1024 && (227u << 10) / (two + 1024) >= (227u << 10) / (p.smem + 1024);
        p.stages = fits ? 2 : 1;
        if (fits) p.smem = two;
    }
    // the rows loop's work units (virtual group, 16-column segment, kTcRows or 2 rows): fewer
    // than the block's warps would leave warps idle, where the one-row loop splits the m tiles
    // (H200, 3D problem of bench/conv.py: rows of 4 where they make 8 units 54.9 us; 128-pixel
    // tiles, 4 units of 4 rows left to the one-row loop 80.0, 8 units of 2 rows 57.6)
    if (p.rows) {
        const int col_units = p.vgs * ((p.tw + 15) / 16);
        p.rows = col_units * ((p.th + kTcRows - 1) / kTcRows) >= kTcWarps ? kTcRows
               : col_units * ((p.th + 1) / 2) >= kTcWarps ? 2 : 0;
    }
    p.tiles_w = (g.out[2] + p.tw - 1) / p.tw;
    p.tiles_h = (g.out[1] + p.th - 1) / p.th;
    p.chunks = chans / p.bc;
    p.pixel_tiles = (int64_t)g.N * g.out[0] * p.tiles_h * p.tiles_w;
    // tiles per block: fwd / bwd_data about 6 blocks per SM's worth of blocks (each loads its
    // weight image once); bwd_weight one wave: as many tiles as let every block be resident
    // at once (blocks per SM by registers, tc_wgrad_blocks_by_regs, and shared memory), so each
    // block's tables and partial-row stores serve many tiles (H200, ResNeXt-101: 1792 blocks
    // of 2 tiles spent 42 M instructions for 1.8 M MMAs), and at least as many as bring the
    // fp32 partial rows under a quarter of the bytes the kernel reads
    const int64_t lanes = (int64_t)p.chunks * p.tap_groups;
    const int64_t fill = std::max<int64_t>(1, p.pixel_tiles * lanes / (3LL * sms));
    int64_t band = 1;
    if (wgrad) {
        const int64_t elems = (int64_t)g.G * cpg * g.taps * cpg;
        const int64_t read = 2LL * g.N * ((int64_t)g.in[0] * g.in[1] * g.in[2] + (int64_t)g.out[0] * g.out[1] * g.out[2]) * chans;
        const int64_t rows_ok = std::max<int64_t>(1, read / 4 / (elems * 4));
        const int64_t need = (p.pixel_tiles + rows_ok - 1) / rows_ok;
        const int by_regs = tc_wgrad_blocks_by_regs(cpg, p.maxt);
        // two tile buffers where that costs no resident block. H200 (bench/RESULTS.md): at the
        // same blocks per SM they gained (128-pixel tiles: ResNeXt-101 109.7 -> 100.6 us, 3D
        // 136.8 -> 128.8); trading 3 blocks for 2 lost (ResNeXt-101, 256 pixels: 92.1 -> 95.2)
        const size_t two = p.smem + (size_t)p.in_bytes + p.out_bytes;
        const int per_sm_one = std::min<int>(by_regs, (int)((227u << 10) / (p.smem + 1024)));
        const int per_sm_two = std::min<int>(by_regs, (int)((227u << 10) / (two + 1024)));
        p.stages = two <= 112 * 1024 && per_sm_two >= per_sm_one ? 2 : 1;
        if (p.stages == 2) p.smem = two;
        // the pairs kernel sums its m slices' registers through shared memory at the end
        if (tc_wgrad_pairs(cpg)) p.smem = std::max(p.smem, (size_t)p.vgs * (p.maxt / 2) * 1024);
        const int per_sm = std::max(1, p.stages == 2 ? per_sm_two : per_sm_one);
        const int64_t bands_most = std::max<int64_t>(1, (int64_t)per_sm * sms / lanes);
        band = std::max((p.pixel_tiles + bands_most - 1) / bands_most, need);
    } else {
        band = std::max<int64_t>(1, std::min<int64_t>(fill / 2, kTcBand));
    }
    p.band = (int)std::min<int64_t>(band, p.pixel_tiles);
    p.bands = (int)((p.pixel_tiles + p.band - 1) / p.band);
    p.blocks = (int64_t)p.bands * lanes;
    if (p.blocks > INT32_MAX) return false;
    *out = p;
    return true;
}

// fwd / bwd_data: the band (tiles a block walks) once the kernel's resident blocks per SM
// are known. At 4 or more, one tile a block: a block's copy, MMAs and store then overlap
// those of the SM's other blocks, and the block scheduler evens out the SMs' work (H200,
// bench/conv.py: ResNeXt-50 fwd 27.9 us with 2 tiles a block, 27.6 with 3 (one wave), 26.4
// with 1; ResNeXt-101 44.3 / 44.3 / 43.8). With fewer blocks resident the band of tc_plan
// (the 3D problem, 2 blocks a SM: 1 tile 59.5 us, 2 54.8, 4 54.4).
inline void tc_fwd_band(TcPlan* pl, int per_sm) {
    int band = per_sm >= 4 ? 1 : pl->band;
    pl->band = (int)std::min<int64_t>(std::min(band, kTcBand), pl->pixel_tiles);
    pl->bands = (int)((pl->pixel_tiles + pl->band - 1) / pl->band);
    pl->blocks = (int64_t)pl->bands * pl->chunks;
}

// Resident blocks per SM of a kernel at this shared memory on the current device (the last
// answer cached: the query costs host time).
inline int tc_blocks_per_sm(const void* kernel, size_t smem) {
    thread_local const void* k_last = nullptr;
    thread_local size_t s_last = 0;
    thread_local int d_last = -1, n_last = 0;
    int dev = 0;
    cudaGetDevice(&dev);
    if (kernel != k_last || smem != s_last || dev != d_last) {
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kTcThreads, smem) != cudaSuccess) {
            cudaGetLastError();
            n = 1;  // the band of tc_plan
        }
        k_last = kernel; s_last = smem; d_last = dev; n_last = n;
    }
    return n_last;
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t (&r)[2], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x1(uint32_t& r, unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
    T pair[2] = {from_float<T>(lo), from_float<T>(hi)};
    return *reinterpret_cast<const uint32_t*>(pair);
}

// The forward's staging tile swizzles its 16-byte pieces as its input does: pixel m's piece
// j sits at j ^ ((m >> sw_shift) & sw_out) (the same for m and m + 8). tc_stage_pair writes
// one pair of results, channels chan and chan + 1, with that swizzle (sw, bytes).
__device__ __forceinline__ int tc_stage_swizzle(int m, int sw_shift, int sw_out) { return ((m >> sw_shift) & sw_out) << 4; }
template <class T>
__device__ __forceinline__ void tc_stage_pair(unsigned char* otile, int opitch, int m, int chan, int sw, float lo, float hi) {
    *reinterpret_cast<uint32_t*>(otile + m * opitch + ((chan * 2) ^ sw)) = pack_pair<T>(lo, hi);
}

// The pixel and tap offset tables (the same for every tile of every block), one span: entry i
// is pixoff[i] for i < tm_pad (byte offset of output pixel i's input pixel at tap 0; 0 for
// the padding rows), then tapoff[i - tm_pad] (byte offset of that tap; -1 for padded taps).
__device__ __forceinline__ int tc_table_entry(const DeviceGeometry& g, const TcPlan& pl, int i) {
    if (i < pl.tm_pad) {
        const int m = i;
        return m < pl.th * pl.tw ? ((m / pl.tw) * g.stride[1] * pl.cols_in + (m % pl.tw) * g.stride[2]) * pl.pitch : 0;
    }
    const int t = i - pl.tm_pad;
    if (t >= g.taps) return -1;
    const int fx = t % g.fil[2], fy = (t / g.fil[2]) % g.fil[1], fz = t / (g.fil[2] * g.fil[1]);
    return ((fz * g.dil[0] * pl.rows_in + fy * g.dil[1]) * pl.cols_in + fx * g.dil[2]) * pl.pitch;
}

// The shared-memory weight image of every channel block, [chunk][vg][tap][k / 8][n][k % 8]:
// fwd n = output channel, k = input channel; flip (bwd_data) n = input channel, k = output
// channel at the mirrored tap. Zeros between real groups and at the padded taps. After the
// images (total elements), the offset tables every block copies with its image
// (tc_table_entry: the same for every block, so built once here, not in each block: H200,
// ResNeXt-50 fwd, 1792 blocks of one tile, the tables cost about 2 us of the kernel's
// skeleton).
template <class T, int CPG, int VG>
__global__ void tc_pack_weights(DeviceGeometry g, TcPlan pl, bool flip, const T* __restrict__ w, T* __restrict__ img,
                                int64_t total) {
    pdl_trigger();  // the convolution may be placed now: it waits for this kernel's image
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int tp = pl.tp;
    if (e >= total) {
        const int i = (int)(e - total);
        if (i < tc_table_bytes(pl) / 4) reinterpret_cast<int*>(img + total)[i] = i < pl.tm_pad + pl.tp ? tc_table_entry(g, pl, i) : 0;
        return;
    }
    unsigned r = (unsigned)e;  // the image is far below 2^31 elements
    int n, k, t;
    int64_t vgl;
    // bwd_data: consecutive threads read consecutive weights (a = n % CPG, then the mirrored
    // tap, then k), where the image order read them 2 x taps x CPG bytes apart (H200,
    // ResNeXt-50 bwd_data 26.1 / 27.1 -> 26.0 / 26.1 us: within the runs' spread)
    if (flip) {
        const int a = (int)(r % CPG); r /= CPG;
        t = (int)(r % (unsigned)tp); r /= (unsigned)tp;
        k = (int)(r % VG); r /= VG;
        n = (int)(r % (VG / CPG)) * CPG + a; r /= VG / CPG;
        vgl = r;
    } else {
        const int k8 = (int)(r % 8); r /= 8;
        n = (int)(r % VG); r /= VG;
        const int kh = (int)(r % (VG / 8)); r /= VG / 8;
        t = (int)(r % (unsigned)tp);
        vgl = r / (unsigned)tp;  // virtual group over all channels
        k = kh * 8 + k8;
    }
    const int64_t at = (((vgl * tp + t) * (VG / 8) + k / 8) * VG + n) * 8 + k % 8;
    T v = from_float<T>(0.f);
    if (n / CPG == k / CPG && t < g.taps) {
        const int64_t grp = vgl * (VG / CPG) + n / CPG;
        const int a = n % CPG, b = k % CPG;
        v = flip ? w[((grp * CPG + b) * g.taps + (g.taps - 1 - t)) * CPG + a] : w[((grp * CPG + a) * g.taps + t) * CPG + b];
    }
    img[at] = v;
}

// One output tile: batch image, output depth plane, first row and column. 32-bit unsigned
// arithmetic (tc_plan keeps the tile count below 2^31): a 64-bit division is a long
// software routine, and four of them per tile were most of the kernel's instructions
// (Nsight Compute: integer ALU the busiest pipe).
struct TcTile {
    int n, od, oh0, ow0;
};
__device__ __forceinline__ TcTile tc_tile(const DeviceGeometry& g, const TcPlan& pl, int64_t index) {
    TcTile t;
    unsigned i = (unsigned)index;
    const int tw = (int)(i % (unsigned)pl.tiles_w); i /= (unsigned)pl.tiles_w;
    const int th = (int)(i % (unsigned)pl.tiles_h); i /= (unsigned)pl.tiles_h;
    t.od = (int)(i % (unsigned)g.out[0]);
    t.n = (int)(i / (unsigned)g.out[0]);
    t.oh0 = th * pl.th;
    t.ow0 = tw * pl.tw;
    return t;
}

// A walk over the pixels first, first + step, ... of a planes x rows x cols box without a
// division or a loop per step: the step is split once into (planes, rows, columns).
struct BoxWalk {
    int z, r, c;
    int dz, dr, dc;
    __device__ __forceinline__ BoxWalk(int p, int step, int rows, int cols) {
        c = p % cols;
        const int q = p / cols;
        r = q % rows;
        z = q / rows;
        dc = step % cols;
        const int sq = step / cols;
        dr = sq % rows;
        dz = sq / rows;
    }
    __device__ __forceinline__ void advance(int rows, int cols) {
        c += dc;
        r += dr;
        z += dz;
        if (c >= cols) { c -= cols; ++r; }  // dc < cols, dr < rows: one carry each
        if (r >= rows) { r -= rows; ++z; }
    }
};

// bwd_weight builds the tables (tc_table_entry) in each block; the forward copies them from
// the packing kernel's workspace.
__device__ __forceinline__ void tc_tables(const DeviceGeometry& g, const TcPlan& pl, int* pixoff) {
    for (int i = threadIdx.x; i < pl.tm_pad + pl.tp; i += kTcThreads) pixoff[i] = tc_table_entry(g, pl, i);
}

// The walk of this thread's first pixel over the input box and over the output tile (the
// same for every tile of a block: built once, its divisions out of the tile loop).
__device__ __forceinline__ BoxWalk tc_input_walk(const TcPlan& pl) {
    const int units = pl.bc / 8;
    return BoxWalk((int)threadIdx.x / units, kTcThreads / units, pl.rows_in, pl.cols_in);
}
__device__ __forceinline__ BoxWalk tc_output_walk(const TcPlan& pl) {
    const int units = pl.bc / 8;
    return BoxWalk((int)threadIdx.x / units, kTcThreads / units, pl.th, pl.tw);
}

// The two walks kept in registers across a block's tiles (Keep), or rebuilt for each tile
// where the registers are short. bwd_weight keeps them; the forward rebuilds them, since only
// its software copies (no TMA) use them and kept they cost registers on the TMA path too
// (with software copies only, keeping them took the 8-channel forward from 70.0 to 63.9 us
// on the H200).
template <bool Keep>
struct TcWalks {
    BoxWalk in, out;
    __device__ __forceinline__ explicit TcWalks(const TcPlan& pl) : in(tc_input_walk(pl)), out(tc_output_walk(pl)) {}
    __device__ __forceinline__ BoxWalk input(const TcPlan&) const { return in; }
    __device__ __forceinline__ BoxWalk output(const TcPlan&) const { return out; }
};
template <>
struct TcWalks<false> {
    __device__ __forceinline__ explicit TcWalks(const TcPlan&) {}
    __device__ __forceinline__ BoxWalk input(const TcPlan& pl) const { return tc_input_walk(pl); }
    __device__ __forceinline__ BoxWalk output(const TcPlan& pl) const { return tc_output_walk(pl); }
};

// Starts copying the input pixels under an output tile (all planes of the filter's depth,
// zeros outside the image) into shared memory. Consecutive threads take the 16-byte units
// of one pixel, then the next pixel: coalesced reads.
template <class T>
__device__ __forceinline__ void tc_load_input(const DeviceGeometry& g, const TcPlan& pl, const TcTile& t, int chunk,
                                              const T* __restrict__ x, unsigned char* tile, BoxWalk w) {
    const int units = pl.bc / 8;  // 2 or 4
    const int u = threadIdx.x & (units - 1), pstep = kTcThreads / units;
    const int chans = g.G * g.C;
    const int id0 = t.od * g.stride[0] - g.pad[0], ih0 = t.oh0 * g.stride[1] - g.pad[1],
              iw0 = t.ow0 * g.stride[2] - g.pad[2];
    const int total = pl.planes_in * pl.rows_in * pl.cols_in;
    // 32-bit element offsets: every tensor has fewer than 2^31 elements (supports)
    const T* cbase = x + (t.n * g.in[0] * g.in[1] * g.in[2] * chans + chunk * pl.bc + u * 8);
    int p = threadIdx.x / units;  // w: this pixel's walk (tc_input_walk), the same for every tile
    for (; p < total; p += pstep, w.advance(pl.rows_in, pl.cols_in)) {
        const int id = id0 + w.z, ih = ih0 + w.r, iw = iw0 + w.c;
        const bool ok = (unsigned)id < (unsigned)g.in[0] && (unsigned)ih < (unsigned)g.in[1] &&
                        (unsigned)iw < (unsigned)g.in[2];
        const T* src = ok ? cbase + ((id * g.in[1] + ih) * g.in[2] + iw) * chans : x;
        cp_async16(tile + p * pl.pitch + u * 16, src, ok);
    }
}

// ---------------------------------------------------------------- forward (and bwd_data)
// The rows loop of one tile (pl.rows: 16 channels a virtual group, filter rows 3, row stride
// and dilation 1). Work unit of a warp: (virtual group, 16-column segment, R (pl.rows) output
// rows); the segment's columns past the tile's width compute the last column again and are
// not stored. Per filter plane and column, the three filter rows' B fragments are loaded, then
// input rows r0 .. r0 + R + 1 one at a time (the next row's ldmatrix issued before this row's
// MMAs), each A fragment multiplied into the accumulators of every output row ri - kh it
// reaches: 6 MMAs an ldmatrix, where the one-row loop has 2. Results go to the staging tile as
// the one-row loop writes them (pixel m = row x tw + column, the same swizzle).
// At 8 channels a virtual group the same loop (A fragments of two filter columns, 5 MMAs an
// output row) is slower on the H200 at every register bound measured (bench/RESULTS.md), so
// those kernels run the one-row loop.
template <class T, int R>
__device__ __forceinline__ void tc_fwd_rows(const DeviceGeometry& g, const TcPlan& pl, unsigned tile_s, unsigned w_s,
                                            unsigned zero_s, unsigned char* otile, unsigned sw_mask, int sw_shift,
                                            int sw_out) {
    constexpr int FH = 3, VG = 16, NT = 2, RI = R + FH - 1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4;
    const int mat = lane >> 3, brow = lane & 7;
    const int segs = (pl.tw + 15) >> 4, rgroups = (pl.th + R - 1) / R;
    const int gshift = 31 - __clz(pl.vgs);  // vgs: 1 or 2
    const int units = (pl.vgs * segs) * rgroups;
    const unsigned row_bytes = (unsigned)(pl.cols_in * pl.pitch);
    const unsigned plane_bytes = row_bytes * (unsigned)pl.rows_in * (unsigned)g.dil[0];
    const unsigned col_bytes = (unsigned)(g.dil[2] * pl.pitch);
    constexpr unsigned b_step = 2 * 16 * 16;  // bytes per tap of the image
    for (int u = warp; u < units; u += kTcWarps) {
        const int vg = u & (pl.vgs - 1);
        const int rest = u >> gshift;
        const int seg = rest % segs, r0 = rest / segs * R;
        // this lane's A row: pixel a_row of the segment (clamped to the tile), its 8 channels
        const int col = min(seg * 16 + a_row, pl.tw - 1);
        const unsigned piece = (unsigned)(vg * VG * 2 + a_half * 16);
        const unsigned lane_base = tile_s + piece + (unsigned)(col * g.stride[2] * pl.pitch) + (unsigned)r0 * row_bytes;
        const int rows_ok = pl.rows_in - r0;  // input rows of the box from r0 on
        const unsigned b_base = w_s + (unsigned)(((vg * pl.tp * 2 + (mat & 1)) * 16 + (mat >> 1) * 8 + brow) * 16);
        auto ld_a = [&](uint32_t (&a)[4], unsigned o, bool ok) { ldsm_x4(a, ok ? o ^ ((o >> 3) & sw_mask) : zero_s); };
        float acc[R][NT][4];
        zero_sums(acc);
        for (int kd = 0; kd < g.fil[0]; ++kd) {
            for (int kw = 0; kw < g.fil[2]; ++kw) {
                uint32_t bf[FH][NT][2];
#pragma unroll
                for (int kh = 0; kh < FH; ++kh) {
                    uint32_t r4[4];
                    ldsm_x4(r4, b_base + ((kd * FH + kh) * g.fil[2] + kw) * b_step);
                    bf[kh][0][0] = r4[0]; bf[kh][0][1] = r4[1]; bf[kh][1][0] = r4[2]; bf[kh][1][1] = r4[3];
                }
                const unsigned base = lane_base + (unsigned)kd * plane_bytes + (unsigned)kw * col_bytes;
                uint32_t a[2][4];
                ld_a(a[0], base, 0 < rows_ok);
#pragma unroll
                for (int ri = 0; ri < RI; ++ri) {
                    if (ri + 1 < RI) ld_a(a[(ri + 1) & 1], base + (unsigned)(ri + 1) * row_bytes, ri + 1 < rows_ok);
#pragma unroll
                    for (int kh = 0; kh < FH; ++kh) {
                        const int ro = ri - kh;
                        if (ro < 0 || ro >= R) continue;
#pragma unroll
                        for (int j = 0; j < NT; ++j) mma16816<T>(acc[ro][j], a[ri & 1], bf[kh][j]);
                    }
                }
            }
        }
        // accumulators -> the staging tile: rows lane / 4 and + 8 of the segment, channels 2q, 2q + 1
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int ro = r0 + r;
            if (ro >= pl.th) break;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = seg * 16 + (lane >> 2) + 8 * h;
                if (c >= pl.tw) continue;
                const int m = ro * pl.tw + c;
                const int sw = tc_stage_swizzle(m, sw_shift, sw_out);
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    tc_stage_pair<T>(otile, pl.opitch, m, vg * VG + j * 8 + 2 * (lane & 3), sw, acc[r][j][2 * h],
                                     acc[r][j][2 * h + 1]);
            }
        }
    }
}

// g: the problem as a forward (bwd_data: over dy, flipped); x: its input; y: its output.
// A block loads its weight image once and walks pl.band tiles. Rows > 0: tc_fwd_rows computes
// each tile (VG 16 only; pl.rows says which); 0: the one-row loop below.
//   pl.tma: one thread moves each tile by TMA (xmap: the input box with its halo, zeros
//           outside the image; ymap: the staged results, clipped at the image's edge). A
//           pixel's bc x 2 bytes are one swizzled span in shared memory (16-byte piece j of
//           pixel p at j ^ (p / 2 % 4) for 32 channels, j ^ (p / 4 % 2) for 16), so the
//           ldmatrix rows of consecutive pixels and the staging writes hit distinct banks.
//           With pl.stages 2 the next tile's copy runs under this tile's MMAs.
//   else:   the threads copy the input with cp.async (padded pitch) after this tile's MMAs
//           and store the results with 16-byte writes.
template <class T, int VG, bool SwIn, int Rows>
__global__ void __launch_bounds__(kTcThreads, VG == 8 ? 5 : 1) conv_fwd_tc(DeviceGeometry g, TcPlan pl, const T* __restrict__ x,
                                                          const T* __restrict__ wimg, T* __restrict__ y,
                                                          const __grid_constant__ CUtensorMap xmap,
                                                          const __grid_constant__ CUtensorMap ymap) {
    extern __shared__ __align__(1024) unsigned char smem[];
    constexpr int NT = VG / 8;  // n8 tiles per virtual group
    constexpr int PM = 4;       // m16 tiles a warp carries at once (independent MMAs, one B load)
    // the output staging first (at the 1024-byte aligned base), then the input buffers (each
    // 1024-byte aligned under TMA), the weights, the tables
    const bool tma = pl.tma != 0;
    const int stages = tma ? pl.stages : 1;
    unsigned char* otile = smem;
    unsigned char* tiles_in = smem + pl.out_bytes;
    unsigned char* wsm = tiles_in + stages * pl.in_bytes;
    uint4* zero = reinterpret_cast<uint4*>(wsm + pl.w_bytes);  // 16 zero bytes: the padded taps' A rows
    uint64_t* bar = reinterpret_cast<uint64_t*>(zero + 1);      // the TMA copies' mbarriers, one a buffer
    TcTile* tiles = reinterpret_cast<TcTile*>(zero + 2);        // the band's tiles (at most kTcBand)
    int* pixoff = reinterpret_cast<int*>(tiles + kTcBand);
    int* tapoff = pixoff + pl.tm_pad;
    const int chunk = (int)(blockIdx.x % (unsigned)pl.chunks);
    const int64_t first = (int64_t)(blockIdx.x / (unsigned)pl.chunks) * pl.band;
    const int ntiles = (int)(min(first + pl.band, pl.pixel_tiles) - first);
    auto tma_input = [&](const TcTile& t, int buf) {
        const int c[5] = {chunk * pl.bc, t.ow0 * g.stride[2] - g.pad[2], t.oh0 * g.stride[1] - g.pad[1],
                          t.od * g.stride[0] - g.pad[0], t.n};
        mbar_expect(bar + buf, (unsigned)pl.box_bytes);
        tma_load_5d(tiles_in + buf * pl.in_bytes, &xmap, c, bar + buf);
    };

    // the first tile (under TMA its copy starts before pdl_wait: the input is older than the
    // packing kernel, and everything before that kernel in the stream is complete once it
    // runs), the weight image of this channel block (contiguous, 16-byte multiples), which
    // the packing kernel writes (pdl_launch: this block may be placed while that kernel
    // runs), the band's tile coordinates (their divisions once per block, not per tile and
    // thread)
    if (threadIdx.x == 0) {
        *zero = make_uint4(0, 0, 0, 0);
        if (tma) {
            mbar_init(bar, 1, false);
            mbar_init(bar + 1, 1);
            tma_input(tc_tile(g, pl, first), 0);
        }
    }
    pdl_wait();
    const int wvec = pl.w_bytes / 16;
    const uint4* wsrc = reinterpret_cast<const uint4*>(wimg) + (int64_t)chunk * wvec;
    for (int i = threadIdx.x; i < wvec; i += kTcThreads) cp_async16(reinterpret_cast<uint4*>(wsm) + i, wsrc + i, true);
    if constexpr (Rows == 0) {  // the offset tables, after every chunk's image (the rows loop needs none)
        const uint4* tsrc = reinterpret_cast<const uint4*>(wimg) + (int64_t)pl.chunks * wvec;
        for (int i = threadIdx.x; i < tc_table_bytes(pl) / 16; i += kTcThreads)
            cp_async16(reinterpret_cast<uint4*>(pixoff) + i, tsrc + i, true);
    }
    const TcWalks<false> walks(pl);  // the software copies' walks (rebuilt where used: TMA needs none)
    if (!tma) tc_load_input(g, pl, tc_tile(g, pl, first), chunk, x, tiles_in, walks.input(pl));
    cp_async_commit();
    if ((int)threadIdx.x < ntiles) tiles[threadIdx.x] = tc_tile(g, pl, first + threadIdx.x);
    __syncthreads();  // the mbarriers are initialized before any thread waits on them

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned w_s = (unsigned)__cvta_generic_to_shared(wsm);
    const unsigned zero_s = (unsigned)__cvta_generic_to_shared(zero);
    // warps over virtual groups (vgs: 1, 2 or 4), then m tiles: shifts, not divisions
    const int gshift = pl.vgs >= kTcWarps ? 3 : 31 - __clz(pl.vgs);
    const int gstep = 1 << gshift, mshift = 3 - gshift, mstep = 1 << mshift;
    const int mtiles = pl.tm_pad / 16;
    const int kchunks = VG == 16 ? pl.tp : pl.tp / 2;
    // VG 8: k chunks of two taps; an odd last tap is an MMA of 8 k (its padded partner's half
    // of the A fragment is not read: H200, ResNeXt-50 fwd 26.3 -> 25.4 us, ResNeXt-101 44.0 -> 42.1)
    const int kfull = VG == 16 ? kchunks : g.taps / 2;
    // A: lane -> (row of the 16, k half); B: lane -> (matrix, row)
    const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4;
    const int mat = lane >> 3, brow = lane & 7;
    const int units = pl.bc / 8;
    const int64_t ochans = (int64_t)g.G * g.K;
    T* ybase = y + (int64_t)chunk * pl.bc + (threadIdx.x & (units - 1)) * 8;
    // the swizzle: 16-byte piece j of the pixel at byte offset o sits at piece j ^ ((o >> 7) & sw_in)
    // (32 channels: 64-byte pixels, o >> 7 = p / 2; 16: 32-byte pixels, p / 4); the staging
    // tile the same way (pixel m: (m >> sw_shift) & sw_out)
    const int sw_shift = pl.bc == 32 ? 1 : 2, sw_out = tma ? (pl.bc == 32 ? 3 : 1) : 0;
    const unsigned sw_in = SwIn ? (unsigned)sw_out : 0u;  // SwIn: the input tile is swizzled
    // as a mask on the address: the input buffer is 1024-byte aligned and a pixel's pitch a
    // multiple of 32 bytes, so with the piece added the address a has the piece in bits 4-5
    // (32 channels; bit 4 at 16) and the piece sits at a ^ ((a >> 3) & sw_mask): one shift and
    // one three-input logic instruction per A row (H200 SASS: 5 before, with the add of the base)
    const unsigned sw_mask = sw_in << 4;

    for (int k = 0; k < ntiles; ++k) {
        const int buf = stages == 2 ? (k & 1) : 0;
        if (tma && threadIdx.x == 0 && stages == 2 && k + 1 < ntiles)
            tma_input(tiles[k + 1], buf ^ 1);  // that buffer's last reads ended at the last barrier
        cp_async_wait_all();
        if (tma) mbar_wait(bar + buf, stages == 2 ? (k >> 1) & 1 : k & 1);
        if (tma && threadIdx.x == 0) tma_store_wait_read();  // the last tile's staging was read
        __syncthreads();  // this tile's pixels (and the weights) are in; the staging is free
        const unsigned tile_s = (unsigned)__cvta_generic_to_shared(tiles_in + buf * pl.in_bytes);
        if constexpr (Rows > 0) tc_fwd_rows<T, Rows>(g, pl, tile_s, w_s, zero_s, otile, sw_mask, sw_shift, sw_out);
        else
        for (int vg = warp & (gstep - 1); vg < pl.vgs; vg += gstep) {
            // this lane's 16-byte piece of a pixel: channels vg x VG (+ 8 for the k half at VG 16)
            const unsigned piece = (unsigned)(vg * VG * 2 + (VG == 16 ? a_half * 16 : 0)) >> 4;
            const unsigned row_base = tile_s + (piece << 4);  // + the pixel's offset: its A row at tap 0
            // B row address of this lane at k chunk 0: VG 16: x4 (n tile, k half); VG 8: x2 (tap pair)
            const unsigned b_base = VG == 16
                ? w_s + (unsigned)(((vg * pl.tp * 2 + (mat & 1)) * 16 + (mat >> 1) * 8 + brow) * 16)
                : w_s + (unsigned)(((vg * pl.tp + (mat & 1)) * 8 + brow) * 16);
            const unsigned b_step = VG == 16 ? 2 * 16 * 16 : 2 * 8 * 16;  // bytes per k chunk
            for (int mt0 = warp >> gshift; mt0 < mtiles; mt0 += PM * mstep) {
                // C m tiles (mt0, + mstep, ...): all C fragments loaded before the C MMAs, no
                // branch inside (H200: the MMAs had waited on one ldmatrix each)
                auto step = [&](auto count) {
                    constexpr int C = decltype(count)::value;
                    float acc[C][NT][4];
                    unsigned prow[C];  // shared address of this lane's A row at tap 0, unswizzled
                    zero_sums(acc);
#pragma unroll
                    for (int i = 0; i < C; ++i) prow[i] = row_base + (unsigned)pixoff[(mt0 + i * mstep) * 16 + a_row];
                    for (int kc = 0; kc < kfull; ++kc) {
                        uint32_t a[C][4], bf[NT][2];
                        if constexpr (VG == 16) {
                            uint32_t r4[4];
                            ldsm_x4(r4, b_base + kc * b_step);
                            bf[0][0] = r4[0]; bf[0][1] = r4[1]; bf[1][0] = r4[2]; bf[1][1] = r4[3];
                        } else {
                            uint32_t r2[2];
                            ldsm_x2(r2, b_base + kc * b_step);
                            bf[0][0] = r2[0]; bf[0][1] = r2[1];
                        }
                        const int toff = tapoff[VG == 16 ? kc : 2 * kc + a_half];
#pragma unroll
                        for (int i = 0; i < C; ++i) {
                            const unsigned o = prow[i] + (unsigned)toff;
                            ldsm_x4(a[i], toff >= 0 ? o ^ ((o >> 3) & sw_mask) : zero_s);
                        }
#pragma unroll
                        for (int i = 0; i < C; ++i)
#pragma unroll
                            for (int j = 0; j < NT; ++j) mma16816<T>(acc[i][j], a[i], bf[j]);
                    }
                    if constexpr (VG == 8) {
                        if (kfull < kchunks) {  // an odd last tap alone: ldmatrix.x2 (lanes 0-15), m16n8k8
                            uint32_t a[C][2], b1;
                            ldsm_x1(b1, b_base + kfull * b_step);  // lanes 0-7: the tap's 8 n rows
                            const unsigned toff = (unsigned)tapoff[2 * kfull];
#pragma unroll
                            for (int i = 0; i < C; ++i) {
                                const unsigned o = prow[i] + toff;
                                ldsm_x2(a[i], o ^ ((o >> 3) & sw_mask));
                            }
#pragma unroll
                            for (int i = 0; i < C; ++i) mma1688<T>(acc[i][0], a[i], b1);
                        }
                    }
                    // accumulators -> the staging tile: rows r and r + 8, channels 2q, 2q + 1
#pragma unroll
                    for (int i = 0; i < C; ++i) {
                        const int m = (mt0 + i * mstep) * 16 + (lane >> 2);
                        const int sw = tc_stage_swizzle(m, sw_shift, sw_out);  // the same for m + 8
#pragma unroll
                        for (int j = 0; j < NT; ++j) {
                            const int chan = vg * VG + j * 8 + 2 * (lane & 3);
                            tc_stage_pair<T>(otile, pl.opitch, m, chan, sw, acc[i][j][0], acc[i][j][1]);
                            tc_stage_pair<T>(otile, pl.opitch, m + 8, chan, sw, acc[i][j][2], acc[i][j][3]);
                        }
                    }
                };
                const int count = ((mtiles - 1 - mt0) >> mshift) + 1;  // m tiles of this step (warp-uniform)
                if (count >= PM) step(std::integral_constant<int, PM>{});
                else if (count == 3) step(std::integral_constant<int, 3>{});
                else if (count == 2) step(std::integral_constant<int, 2>{});
                else step(std::integral_constant<int, 1>{});
            }
        }
        if (tma) fence_async_shared();  // the staging writes, visible to the TMA store
        __syncthreads();  // the input tile is free, the results are staged
        const TcTile done = tiles[k];
        if (tma) {
            if (threadIdx.x == 0) {
                if (stages == 1 && k + 1 < ntiles) tma_input(tiles[k + 1], 0);
                const int c[5] = {chunk * pl.bc, done.ow0, done.oh0, done.od, done.n};
                tma_store_5d(&ymap, otile, c);
            }
            continue;
        }
        if (k + 1 < ntiles) tc_load_input(g, pl, tiles[k + 1], chunk, x, tiles_in, walks.input(pl));
        cp_async_commit();
        // coalesced 16-byte stores of the tile's valid pixels
        const int pstep = kTcThreads / units;
        int m = threadIdx.x / units;
        BoxWalk w = walks.output(pl);
        for (; m < pl.th * pl.tw; m += pstep, w.advance(pl.th, pl.tw)) {
            const int oh = done.oh0 + w.r, ow = done.ow0 + w.c;
            if (oh >= g.out[1] || ow >= g.out[2]) continue;
            *reinterpret_cast<uint4*>(ybase + (((int64_t)(done.n * g.out[0] + done.od) * g.out[1] + oh) * g.out[2] + ow) * ochans) =
                *reinterpret_cast<const uint4*>(otile + m * pl.pitch + (threadIdx.x & (units - 1)) * 16);
        }
    }
    if (tma && threadIdx.x == 0) tma_store_wait_read();  // the shared memory outlives the stores' reads
}

// ---------------------------------------------------------------- backward weight
// Block = (channel block, tap group, band of tiles); one fp32 partial row per band:
// partial[band][g][k][tap][c]. A warp owns one virtual group and MAXT taps of the group
// (t0 + i x tstep) and keeps their 16 x 16 sums in registers across the band's tiles.
template <class T, int CPG, int MAXT>
__global__ void __launch_bounds__(kTcThreads, tc_wgrad_blocks_by_regs(CPG, MAXT)) conv_wgrad_tc(DeviceGeometry g, TcPlan pl, const T* __restrict__ x,
                                                            const T* __restrict__ dy, float* __restrict__ partial,
                                                            const __grid_constant__ CUtensorMap xmap,
                                                            const __grid_constant__ CUtensorMap dymap) {
    extern __shared__ __align__(1024) unsigned char smem[];
    pdl_trigger();  // the reduction of the partial rows may be placed: it waits for this kernel
    // pl.stages buffers of (input tile, dy tile); with 2, the next tile's copy runs under
    // this tile's MMAs. pl.tma: one thread copies both tiles of a stage by TMA (bc x 2 bytes
    // a pixel, swizzled: 16-byte piece j of a pixel at address a sits at piece
    // j ^ ((a >> 7) & sw), as conv_fwd_tc reads its input; every buffer is 1024-byte
    // aligned), completing on the stage's mbarrier.
    const int stage_bytes = pl.in_bytes + pl.out_bytes;
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem + pl.stages * stage_bytes + 16);
    int* pixoff = reinterpret_cast<int*>(smem + pl.stages * stage_bytes + 32);
    int* tapoff = pixoff + pl.tm_pad;
    const bool tma = pl.tma != 0;
    unsigned bx = blockIdx.x;
    const int chunk = (int)(bx % (unsigned)pl.chunks); bx /= (unsigned)pl.chunks;
    const int tgroup = (int)(bx % (unsigned)pl.tap_groups); bx /= (unsigned)pl.tap_groups;
    const int band = (int)bx;
    const int64_t first = (int64_t)band * pl.band;
    const int64_t last = min(first + pl.band, pl.pixel_tiles);
    tc_tables(g, pl, pixoff);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned smem_s = (unsigned)__cvta_generic_to_shared(smem);
    // 4 and 8 channels per group (kPairs, below): a warp takes every tap of the tap group, one
    // 8-channel half jw of its virtual group and the m tiles mslice, + mstep, ... of each tile;
    // else the warps of a virtual group split the taps (t0 + i tstep)
    constexpr bool kPairs = tc_wgrad_pairs(CPG);
    const int vg = warp % pl.vgs, tstep = kPairs ? 1 : kTcWarps / pl.vgs;
    const int jw = kPairs ? (warp / pl.vgs) & 1 : 0;
    const int mslice = kPairs ? warp / (2 * pl.vgs) : 0, mstep = kPairs ? kTcWarps / (2 * pl.vgs) : 1;
    const int t0 = tgroup * pl.group_taps + (kPairs ? 0 : warp / pl.vgs);
    const int mat = lane >> 3, row = lane & 7;
    // A = dy^T (16 k x 16 pixels): matrix (pixel half mat >> 1, channel half mat & 1)
    const unsigned a_off = (unsigned)(pl.in_bytes + (row + 8 * (mat >> 1)) * pl.pitch + (vg * 16 + 8 * (mat & 1)) * 2);
    // B = x (16 pixels x 16 c): matrix (channel half mat >> 1, pixel half mat & 1)
    const int b_px = row + 8 * (mat & 1);
    const unsigned b_off = (unsigned)((vg * 16 + 8 * (mat >> 1)) * 2);
    const int mtiles = pl.tm_pad / 16;
    const int units = pl.bc / 8;
    const int ochans = g.G * g.K;  // 32-bit offsets: tensors below 2^31 elements
    const T* dbase = dy + (int64_t)chunk * pl.bc + (threadIdx.x & (units - 1)) * 8;
    const int valid = pl.th * pl.tw;
    // under TMA the tiles are swizzled (see above): an ldmatrix row's address a -> a ^ ((a >> 3) & sw)
    const unsigned sw = pl.tma && pl.pitch == pl.bc * 2 ? (pl.bc == 32 ? 0x30u : 0x10u) : 0u;
    auto swz = [sw](unsigned a) { return a ^ ((a >> 3) & sw); };

    // 4 and 8 channels per group: two of the warp's taps fill the MMA's M instead of the 16
    // k: A = x^T, rows (tap half, 8 c), from the input tile at the two taps; B = dy, the same
    // 8 channels as k (each n8 half of the virtual group is one MMA). At 8 channels per group
    // an 8 x 8 block is one real group, so no MMA works on the zero blocks between groups
    // (half of them with 16 k in M); at 4, half of each block is a weight (a quarter before).
    // Every warp carries all the pairs of one 8-channel half (an equal share of the work:
    // split by taps, 2D 3x3's 5 pairs left one warp of four with two, and each warp loaded the
    // dy fragments; both halves in a warp took 80 registers, 3 blocks a SM); the m slices'
    // sums are added through shared memory at the end.
    constexpr int NACC = kPairs ? MAXT / 2 : MAXT;  // accumulator sets: tap pairs, or taps
    constexpr int NJ = kPairs ? 1 : 2;              // n8 halves a warp carries
    float acc[NACC][NJ][4];
    zero_sums(acc);

    // starts the copies of tile ti (input under it, dy; zeros outside the image and in the
    // padding rows) into stage st, as one cp.async group
    const TcWalks<true> walks(pl);  // kept (3D bwd_weight 101.6 -> 98.0 us)
    auto load = [&](int64_t ti, int st) {
        const TcTile t = tc_tile(g, pl, ti);
        unsigned char* tile = smem + st * stage_bytes;
        unsigned char* dtile = tile + pl.in_bytes;
        if (tma) {
            if (threadIdx.x == 0) {
                const int cx[5] = {chunk * pl.bc, t.ow0 * g.stride[2] - g.pad[2], t.oh0 * g.stride[1] - g.pad[1],
                                   t.od * g.stride[0] - g.pad[0], t.n};
                const int cd[5] = {chunk * pl.bc, t.ow0, t.oh0, t.od, t.n};
                mbar_expect(bar + st, (unsigned)(pl.box_bytes + valid * pl.pitch));
                tma_load_5d(tile, &xmap, cx, bar + st);
                tma_load_5d(dtile, &dymap, cd, bar + st);
            }
            return;
        }
        tc_load_input(g, pl, t, chunk, x, tile, walks.input(pl));
        const int pstep = kTcThreads / units;
        int m = threadIdx.x / units;
        const T* tbase = dbase + ((t.n * g.out[0] + t.od) * g.out[1] * g.out[2] * ochans);
        BoxWalk w = walks.output(pl);
        for (; m < pl.tm_pad; m += pstep, w.advance(pl.th, pl.tw)) {
            const int oh = t.oh0 + w.r, ow = t.ow0 + w.c;
            const bool ok = m < valid && oh < g.out[1] && ow < g.out[2];
            const T* src = ok ? tbase + (oh * g.out[2] + ow) * ochans : dy;
            cp_async16(dtile + m * pl.pitch + (threadIdx.x & (units - 1)) * 16, src, ok);
        }
        cp_async_commit();
    };
    // this warp's taps t0 + i tstep (i < ntap) and their byte offsets, read once
    __syncthreads();  // the tables are written
    const int ntap = kPairs ? max(0, min(pl.group_taps, g.taps - t0))
                            : t0 < g.taps ? min(MAXT, (g.taps - t0 + tstep - 1) / tstep) : 0;
    unsigned toff[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) {
        if constexpr (kPairs) {  // this lane's half of pair i (an odd last tap: its first, results unused)
            const int mine = 2 * i + (mat & 1) < ntap ? 2 * i + (mat & 1) : 2 * i;
            toff[i] = mine < ntap ? (unsigned)tapoff[t0 + mine * tstep] : 0u;
        } else {
            toff[i] = i < ntap ? (unsigned)tapoff[t0 + i * tstep] : 0u;
        }
    }
    // pairs: B = dy (16 pixels x the 8 k of half jw): matrix (pixel half mat & 1), ldmatrix.x2;
    // A = x^T: matrix (tap half mat & 1, pixel half mat >> 1) at this lane's pixel row
    const unsigned d_off = (unsigned)(pl.in_bytes + (row + 8 * (mat & 1)) * pl.pitch + (vg * 16 + 8 * jw) * 2);
    const int x_px = row + 8 * (mat >> 1);
    const bool ahead = pl.stages > 1;
    if (tma) {  // the mbarriers; the dy rows past the tile's pixels stay zero (TMA writes the box only)
        if (threadIdx.x == 0) {
            mbar_init(bar, 1);
            mbar_init(bar + 1, 1);
        }
        for (int st = 0; st < pl.stages; ++st)
            for (int i = valid * pl.pitch / 16 + threadIdx.x; i < pl.tm_pad * pl.pitch / 16; i += kTcThreads)
                reinterpret_cast<uint4*>(smem + st * stage_bytes + pl.in_bytes)[i] = make_uint4(0, 0, 0, 0);
        __syncthreads();
    }
    // tile ti's stage has landed (TMA: the stage's mbarrier, in its (uses) & 1 phase)
    auto landed = [&](int64_t ti, int st, bool more) {
        if (tma) mbar_wait(bar + st, (unsigned)(((ti - first) >> (ahead ? 1 : 0)) & 1));
        else if (more) cp_async_wait_prior();  // tile ti's group landed; ti + 1's may still fly
        else cp_async_wait_all();
    };
    if (ahead && first < last) load(first, 0);
    for (int64_t ti = first; ti < last; ++ti) {
        const int st = ahead ? (int)((ti - first) & 1) : 0;
        __syncthreads();  // the reads of the stage about to be overwritten are done
        if (!ahead) {
            load(ti, 0);
            landed(ti, 0, false);
        } else if (ti + 1 < last) {
            load(ti + 1, st ^ 1);
            landed(ti, st, true);
        } else {
            landed(ti, st, false);
        }
        if (!tma) __syncthreads();  // the threads' copies are in (TMA: each thread waited on the mbarrier)
        const unsigned stage_s = smem_s + (unsigned)(st * stage_bytes);
        const unsigned a_base = stage_s + a_off, b_chan = stage_s + b_off;
        if constexpr (kPairs) {
            // every pair's MMAs, the unused ones included (their sums are not written): no
            // branch in the loop (a lane's unused taps read the tile at offset 0)
            const unsigned d_base = stage_s + d_off, x_chan = stage_s + (unsigned)(vg * 32 + jw * 16);
            int pnext = pixoff[min(mslice, mtiles - 1) * 16 + x_px];  // the next m tile's, loaded a step ahead
            for (int mt = mslice; mt < mtiles; mt += mstep) {
                uint32_t b[2];
                ldsm_x2_trans(b, swz(d_base + (unsigned)(mt * 16 * pl.pitch)));
                const unsigned px = x_chan + (unsigned)pnext;
                pnext = pixoff[min(mt + mstep, mtiles - 1) * 16 + x_px];
#pragma unroll
                for (int i = 0; i < NACC; ++i) {
                    uint32_t a[4];
                    ldsm_x4_trans(a, swz(px + toff[i]));
                    mma16816<T>(acc[i][0], a, b);
                }
            }
        } else {
            for (int mt = 0; mt < mtiles; ++mt) {
                uint32_t a[4];
                ldsm_x4_trans(a, swz(a_base + (unsigned)(mt * 16 * pl.pitch)));
                const unsigned px = b_chan + (unsigned)pixoff[mt * 16 + b_px];
#pragma unroll
                for (int i = 0; i < MAXT; i += 2) {  // two taps' fragments before their MMAs (3D: 95.2 -> 88.4 us)
                    if (i >= ntap) break;  // warp-uniform
                    const bool second = i + 1 < ntap;
                    uint32_t bq[4], bq2[4];
                    ldsm_x4_trans(bq, swz(px + toff[i]));
                    if (second) ldsm_x4_trans(bq2, swz(px + toff[i + 1]));
                    const uint32_t b0[2] = {bq[0], bq[1]}, b1[2] = {bq[2], bq[3]};
                    mma16816<T>(acc[i][0], a, b0);
                    mma16816<T>(acc[i][1], a, b1);
                    if (second) {
                        const uint32_t c0[2] = {bq2[0], bq2[1]}, c1[2] = {bq2[2], bq2[3]};
                        mma16816<T>(acc[i + 1][0], a, c0);
                        mma16816<T>(acc[i + 1][1], a, c1);
                    }
                }
            }
        }
    }
    if constexpr (kPairs) {  // the m slices' sums into slice 0's registers (the stages are free)
        float* red = reinterpret_cast<float*>(smem) + (vg * 2 + jw) * (NACC * 4 * 32) + lane;
        for (int s = 1; s < mstep; ++s) {
            __syncthreads();  // every read of the tiles (s = 1) or of the last slice's sums is done
            if (mslice == s)
#pragma unroll
                for (int i = 0; i < NACC; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) red[(i * 4 + e) * 32] = acc[i][0][e];
            __syncthreads();
            if (mslice == 0)
#pragma unroll
                for (int i = 0; i < NACC; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][0][e] += red[(i * 4 + e) * 32];
        }
        if (mslice != 0) return;
    }
    // D[k][c]: acc[i][j][0..1] -> (k = r, c = 8j + 2q, + 1), acc[i][j][2..3] -> k = r + 8
    const int64_t elems = (int64_t)g.G * g.K * g.taps * g.C;
    float* prow = partial + (int64_t)band * elems;
    const int q = lane & 3, r = lane >> 2;
    if constexpr (kPairs) {  // acc[i][0]: rows (tap half e >> 1, c = 8 jw + r), columns k = 8 jw + 2q + (e & 1)
#pragma unroll
        for (int i = 0; i < NACC; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int ti = 2 * i + (e >> 1), k = 2 * q + (e & 1);
                if (ti >= ntap || k / CPG != r / CPG) continue;  // across real groups: not a weight
                const int tap = t0 + ti * tstep;
                const int64_t grp = ((int64_t)chunk * pl.bc + vg * 16 + 8 * jw + r) / CPG;
                prow[((grp * CPG + k % CPG) * g.taps + tap) * CPG + r % CPG] = acc[i][0][e];
            }
    } else {
#pragma unroll
        for (int i = 0; i < MAXT; ++i) {
            const int tap = t0 + i * tstep;
            if (tap >= g.taps) break;
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int k = r + 8 * (e >> 1), c = 8 * j + 2 * q + (e & 1);
                    if (k / CPG != c / CPG) continue;  // across real groups: not a weight
                    const int64_t grp = ((int64_t)chunk * pl.bc + vg * 16 + k) / CPG;
                    prow[((grp * CPG + k % CPG) * g.taps + tap) * CPG + c % CPG] = acc[i][j][e];
                }
        }
    }
}

// TMA for the forward kernel's tiles unless the library's option tma is 0 (the software
// copies then run: the tests cover both paths that way, and bench/conv.py can compare them).
inline bool tc_tma_wanted() { return options().tma != 0; }

// The swizzle of a TMA plan's tiles: a pixel's bc x 2 bytes are one 64- or 32-byte span.
inline CUtensorMapSwizzle tc_swizzle(const TcPlan& pl) {
    return pl.bc == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
}

// The tensor map of a forward's input tile (box: bc channels by the tile's columns, rows and
// planes). False where the driver refuses it; run() then plans the software copies.
inline bool tc_input_map(const DeviceGeometry& d, const TcPlan& pl, const void* src, CUtensorMap* map) {
    const int64_t dims[5] = {(int64_t)d.G * d.C, d.in[2], d.in[1], d.in[0], d.N};
    const int box[5] = {pl.bc, pl.cols_in, pl.rows_in, pl.planes_in, 1};
    return tma_map_16bit(map, src, dims, box, tc_swizzle(pl));
}

// The tensor map of a forward's output tile (box: bc channels by the tile's columns and rows),
// swizzled as conv_fwd_tc writes its staging tile.
inline bool tc_output_map(const DeviceGeometry& d, const TcPlan& pl, const void* dst, CUtensorMap* map) {
    const int64_t dims[5] = {(int64_t)d.G * d.K, d.out[2], d.out[1], d.out[0], d.N};
    const int box[5] = {pl.bc, pl.tw, pl.th, 1, 1};
    return tma_map_16bit(map, dst, dims, box, tc_swizzle(pl));
}

// The bwd_weight tensor maps: x under the input tile, dy under the output tile, boxes of bc
// channels swizzled as the forward's.
inline bool tc_wgrad_maps(const DeviceGeometry& d, const TcPlan& pl, const void* x, const void* dy, CUtensorMap* xmap,
                          CUtensorMap* dymap) {
    const int64_t xdims[5] = {(int64_t)d.G * d.C, d.in[2], d.in[1], d.in[0], d.N};
    const int xbox[5] = {pl.bc, pl.cols_in, pl.rows_in, pl.planes_in, 1};
    const int64_t ddims[5] = {(int64_t)d.G * d.K, d.out[2], d.out[1], d.out[0], d.N};
    const int dbox[5] = {pl.bc, pl.tw, pl.th, 1, 1};
    return tma_map_16bit(xmap, x, xdims, xbox, tc_swizzle(pl)) && tma_map_16bit(dymap, dy, ddims, dbox, tc_swizzle(pl));
}

template <int DType, int Ndim, int Direction, int CPG, int TM, int TC = 32>
struct Sm90TcConv {
    using T = typename ConvElement<DType>::T;
    static constexpr int VG = CPG == 16 ? 16 : 8;
    static constexpr bool kWgrad = Direction == TD_CONV_BWD_WEIGHT;

    // The problem as this kernel computes it: bwd_data as the forward over dy, flipped.
    static bool plan(const ConvGeometry& geo, DeviceGeometry* dg, TcPlan* pl, bool tma = tc_tma_wanted()) {
        DeviceGeometry d = device_geometry(geo);
        if (Direction == TD_CONV_BWD_DATA) {
            for (int i = 0; i < 3; ++i) {
                if (d.stride[i] != 1) return false;
                std::swap(d.in[i], d.out[i]);
                d.pad[i] = d.dil[i] * (d.fil[i] - 1) - d.pad[i];
            }
        }
        *dg = d;
        return tc_plan(d, CPG, TM, TC, kWgrad, device::multiprocessors(), tma, pl);
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (int st = conv_channels_are(g, CPG, why)) return st;
        if ((g.G * CPG) % 16) { *why = "G x channels is not a multiple of 16"; return TD_UNSUPPORTED; }
        if (Direction == TD_CONV_BWD_DATA && g.stride[0] * g.stride[1] * g.stride[2] != 1) {
            *why = "bwd_data at stride > 1 (this kernel runs the flipped forward)";
            return TD_UNSUPPORTED;
        }
        if (int st = conv_tensors_fit_int32(g, why)) return st;
        DeviceGeometry d{};
        TcPlan pl{};
        if (!plan(g, &d, &pl)) { *why = "the tile with its halo does not fit shared memory"; return TD_UNSUPPORTED; }
        return TD_OK;
    }

    static size_t workspace_bytes(const ConvGeometry& g, const TcPlan& pl) {
        if (kWgrad) return (size_t)pl.bands * (size_t)(g.G * g.K * g.taps() * g.C) * sizeof(float);
        return (size_t)pl.chunks * pl.w_bytes + tc_table_bytes(pl);  // the packed weight images, the tables
    }

    static size_t workspace_size(const TdConvProblem& p) {
        ConvGeometry g{};
        if (!conv_geometry(p, &g).empty()) return 0;
        DeviceGeometry d{};
        TcPlan pl{};
        return plan(g, &d, &pl) ? workspace_bytes(g, pl) : 0;
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws, size_t ws_bytes,
                   void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if (!(conv_aligned16(in) && conv_aligned16(wei) && conv_aligned16(out)))
            return fail(TD_REJECTED, "a tensor's address is not 16-byte aligned (the 16-byte copies need it); "
                                     "the generic kernel takes it");
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        DeviceGeometry d{};
        TcPlan pl{};
        if (!plan(geo, &d, &pl)) return fail(TD_REJECTED, "the tile with its halo does not fit shared memory");
        void* scratch = nullptr;
        if (int st = take_workspace(workspace_bytes(geo, pl), ws, ws_bytes, stream_ptr, &scratch)) return st;
        const T* x = static_cast<const T*>(in);
        const T* w = static_cast<const T*>(wei);
        const T* dy = static_cast<const T*>(out);
        if constexpr (kWgrad) {
            CUtensorMap xmap{}, dymap{};
            if (pl.tma && !(tc_wgrad_maps(d, pl, x, dy, &xmap, &dymap))) {
                // the driver refused a map: the software copies' plan
                if (!plan(geo, &d, &pl, false)) return fail(TD_REJECTED, "the tile with its halo does not fit shared memory");
            }
            auto kernel = conv_wgrad_tc<T, CPG, 4>;
            if constexpr (tc_wgrad_pairs(CPG)) {
                if (pl.maxt == kTcPairTaps) kernel = conv_wgrad_tc<T, CPG, kTcPairTaps>;
            } else {
                if (pl.maxt == 8) kernel = conv_wgrad_tc<T, CPG, 8>;
                if (pl.maxt == 16) kernel = conv_wgrad_tc<T, CPG, 16>;
            }
            if (pl.smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem);
            float* part = static_cast<float*>(scratch);
            kernel<<<(unsigned)pl.blocks, kTcThreads, pl.smem, stream>>>(d, pl, x, dy, part, xmap, dymap);
            const int64_t elems = geo.G * geo.K * geo.taps() * geo.C;
            pdl_launch(conv_bwd_weight_reduce<T>, dim3((unsigned)((elems + 31) / 32)), dim3(32, 8), 0, stream, part,
                       static_cast<T*>(const_cast<void*>(wei)), elems, pl.bands);
        } else {
            const bool flip = Direction == TD_CONV_BWD_DATA;
            // fwd: x -> y; bwd_data: dy (the `out` argument) -> dx (the `in` argument)
            const T* src = flip ? dy : x;
            T* dst = static_cast<T*>(const_cast<void*>(flip ? in : out));
            CUtensorMap xmap{}, ymap{};
            if (pl.tma && !(tc_input_map(d, pl, src, &xmap) && tc_output_map(d, pl, dst, &ymap))) {
                // the driver refused a map: the software copies' plan (its tiles, its pitch)
                const size_t had = workspace_bytes(geo, pl);
                if (!plan(geo, &d, &pl, false)) return fail(TD_REJECTED, "the tile with its halo does not fit shared memory");
                if (workspace_bytes(geo, pl) > had) return fail(TD_REJECTED, "the software copies' tables need more workspace");
            }
            // the weight images and the tables of the final plan
            T* img = static_cast<T*>(scratch);
            const int64_t total = (int64_t)pl.chunks * pl.w_bytes / 2;
            const int64_t threads = total + tc_table_bytes(pl) / 4;
            tc_pack_weights<T, CPG, VG><<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(d, pl, flip, w, img, total);
            const bool sw = pl.pitch == pl.bc * 2;
            auto kernel = sw ? conv_fwd_tc<T, VG, true, 0> : conv_fwd_tc<T, VG, false, 0>;
            if constexpr (VG == 16) {
                if (pl.rows == kTcRows) kernel = sw ? conv_fwd_tc<T, VG, true, kTcRows> : conv_fwd_tc<T, VG, false, kTcRows>;
                if (pl.rows == 2) kernel = sw ? conv_fwd_tc<T, VG, true, 2> : conv_fwd_tc<T, VG, false, 2>;
            }
            if (pl.smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem);
            tc_fwd_band(&pl, tc_blocks_per_sm(reinterpret_cast<const void*>(kernel), pl.smem));
            pdl_launch(kernel, dim3((unsigned)pl.blocks), dim3(kTcThreads), pl.smem, stream, d, pl, src,
                       static_cast<const T*>(img), dst, xmap, ymap);
        }
        return launch_status();
    }
};

}  // namespace td::cuda
