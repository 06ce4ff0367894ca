// cuda backend: shared-memory tiled direct convolution for small channel counts per group
// (depthwise, ResNeXt-style groups of up to 8 channels), 2D and 3D, channels-last.
// Included by conv_direct.cuh, whose Sm90DirectConv takes this path where it applies.
//
// A block owns CU channel units (8 channels, one 16-byte vector each) and a tile of output
// pixels. It copies the input pixels under the tile (halo included, zeros outside the image)
// into shared memory once, coalesced, and the weights of its channels as fp32; the threads
// then compute from shared memory. Each input vector leaves DRAM about once and no
// transposed-weight pass runs before the kernel.
//   fwd         thread = (unit, output column, PH output rows below each other)
//   bwd_data    stride 1 only: the forward kernel on dy with the filter flipped and each
//               group's weight matrix transposed (pad' = dil (F - 1) - pad)
//   bwd_weight  thread = (unit, filter row) for depthwise (X taps, a window along W),
//               (unit, tap) above; the threads of a job split the tile's pixels, add
//               in shared memory in a fixed order and write one fp32 partial row per block;
//               conv_bwd_weight_reduce adds the rows (deterministic).
// Which problems take these kernels (measured against the untiled ones) is decided in
// Sm90DirectConv::tiled (conv_direct.cuh): fwd / bwd_data from 2 channels per group,
// bwd_weight from 2 channels per group and for depthwise filters wider than 3.
// In shared memory a pixel's CU vectors are padded to an odd count of 16-byte slots, so
// that threads of a warp at neighbouring pixels hit different banks.
#pragma once

namespace td::cuda {

constexpr int kUnit = 8;  // channels per unit: one 16-byte vector of 2-byte elements

struct TiledPlan {
    int cu;               // channel units per block
    int sp;               // fwd: thread positions per unit (threads / cu)
    int bw, bh;           // output tile: columns, rows
    int tiles_w, tiles_h; // tiles per output plane
    int rows_in, cols_in; // input tile (one depth plane)
    int pitch;            // 16-byte slots per pixel in shared memory
    int jobs, split;      // bwd_weight: jobs per unit, threads sharing a job
    int bands;            // row tiles one block walks (prefetching the next while computing one)
    int blocks_x;         // grid x
    size_t smem;          // dynamic shared memory, bytes
};

inline int odd_pitch(int cu) { return cu % 2 ? cu : cu + 1; }

// Asynchronous 16-byte copies global -> shared (cp.async): no registers held while in flight;
// src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_prior() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// Starts copying rows x cols pixels (CU vectors each) from (r0, c0) of a plane into shared
// memory; pixels outside [0, rmax) x [0, cmax) become zeros. A thread keeps one channel unit
// and walks the pixels, so a warp reads CU consecutive vectors of consecutive pixels.
template <class T, int Threads>
__device__ __forceinline__ void tile_load(uint4* __restrict__ dst, const T* plane, const T* safe, int rows,
                                          int cols, int r0, int c0, int rmax, int cmax, int width, int64_t chans,
                                          int cu, int pitch) {
    const int u = threadIdx.x % cu, step = Threads / cu;
    int pix = threadIdx.x / cu;
    int r = pix / cols, c = pix % cols;
    for (const int total = rows * cols; pix < total; pix += step) {
        const int ir = r0 + r, ic = c0 + c;
        const bool ok = ir >= 0 && ir < rmax && ic >= 0 && ic < cmax;
        cp_async16(dst + pix * pitch + u, ok ? plane + ((int64_t)ir * width + ic) * chans + u * kUnit : safe, ok);
        for (c += step; c >= cols; c -= cols) ++r;
    }
}

// Eight 2-byte elements of one 16-byte vector as floats. Takes the vector by value and works
// on its 32-bit words: given a reference into shared memory, the compiler would read the
// elements with eight 2-byte loads instead of one 16-byte load.
__device__ __forceinline__ float2 unpack2(uint32_t v, const __nv_bfloat16*) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack2(uint32_t v, const __half*) {
    return __half22float2(__halves2half2(__ushort_as_half((unsigned short)(v & 0xffffu)),
                                         __ushort_as_half((unsigned short)(v >> 16))));
}

template <class T>
__device__ __forceinline__ void unpack8(const uint4 raw, float (&v)[kUnit]) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = unpack2(words[i], static_cast<const T*>(nullptr));
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

// ---------------------------------------------------------------- forward (and bwd_data)
// flip: bwd_data through the forward (g describes the forward over dy: in = dy's sizes,
// out = dx's, pad the flipped filter's); the weights are w[g][k][tap][c] read as
// w'[g][c][taps - 1 - tap][k].
template <class T, int CPG, int PH, int Threads>
__global__ void __launch_bounds__(Threads, CPG >= 8 ? 3 : 4)
    conv_fwd_tiled(DeviceGeometry g, TiledPlan pl, const T* __restrict__ x, const T* __restrict__ w,
                   T* __restrict__ y, bool flip) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int VC = kUnit;
    const int plane_slots = pl.rows_in * pl.cols_in * pl.pitch;
    uint4* tiles = reinterpret_cast<uint4*>(smem_raw);                // two buffers
    float* wsm = reinterpret_cast<float*>(tiles + 2 * plane_slots);   // [u][tap][j][c]
    const int tid = threadIdx.x;
    // channel blocks fastest: the blocks running together read whole pixels (all channels)
    const int cblocks = g.G * CPG / VC / pl.cu;
    const int groups_h = (pl.tiles_h + pl.bands - 1) / pl.bands;
    int bx = blockIdx.x;
    const int ub = (bx % cblocks) * pl.cu; bx /= cblocks;
    const int tw = bx % pl.tiles_w; bx /= pl.tiles_w;
    const int th0 = (bx % groups_h) * pl.bands; bx /= groups_h;
    const int od = bx % g.out[0];
    const int n = bx / g.out[0];
    const int ow0 = tw * pl.bw;
    const int64_t chans = (int64_t)g.G * CPG;
    const int taps = g.taps;
    // steps: (row tile, filter plane z); the copy of step i + 1 runs while step i computes
    const int steps = (min(pl.tiles_h, th0 + pl.bands) - th0) * g.fil[0];
    auto issue = [&](int step) {
        const int z = step % g.fil[0], oh0 = (th0 + step / g.fil[0]) * pl.bh;
        const int id = od * g.stride[0] - g.pad[0] + z * g.dil[0];
        const bool plane_ok = id >= 0 && id < g.in[0];
        const T* plane = x + ((int64_t)n * g.in[0] + (plane_ok ? id : 0)) * g.in[1] * g.in[2] * chans + (int64_t)ub * VC;
        tile_load<T, Threads>(tiles + (step & 1) * plane_slots, plane, x, pl.rows_in, pl.cols_in,
                              oh0 * g.stride[1] - g.pad[1], ow0 * g.stride[2] - g.pad[2], plane_ok ? g.in[1] : 0,
                              g.in[2], g.in[2], chans, pl.cu, pl.pitch);
        cp_async_commit();
    };
    issue(0);
    // the weights of the block's groups, contiguous in w[g][a][tap][b], read in order
    const T* wg = w + (int64_t)ub * VC * taps * CPG;
    for (int e = tid; e < pl.cu * VC * taps * CPG; e += Threads) {
        const int b = e % CPG;
        int r = e / CPG;
        const int t = r % taps; r /= taps;
        const int a = r % CPG, gl = r / CPG;
        const int ocl = gl * CPG + (flip ? b : a), c = flip ? a : b, tap = flip ? taps - 1 - t : t;
        wsm[(((ocl / VC) * taps + tap) * VC + ocl % VC) * CPG + c] = to_float(wg[e]);
    }
    const int u = tid / pl.sp, q = tid % pl.sp;
    const int s = q / pl.bw, col = q % pl.bw;
    const bool active = s * PH < pl.bh;
    float acc[PH][VC];
#pragma unroll
    for (int p = 0; p < PH; ++p)
#pragma unroll
        for (int v = 0; v < VC; ++v) acc[p][v] = 0.f;
    for (int step = 0; step < steps; ++step) {
        if (step + 1 < steps) {
            issue(step + 1);
            cp_async_wait_prior();
        } else {
            cp_async_wait_all();
        }
        __syncthreads();  // this step's tile (and the weights) are in
        const int z = step % g.fil[0];
        const uint4* tile = tiles + (step & 1) * plane_slots;
        if (active) {
            // addresses advanced per tap (weights) and per filter column / row (inputs)
            const float4* wp = reinterpret_cast<const float4*>(wsm + (u * taps + z * g.fil[1] * g.fil[2]) * VC * CPG);
            const int row_step = g.stride[1] * pl.cols_in * pl.pitch;
            const int col_step = g.dil[2] * pl.pitch;
            const uint4* row = tile + (s * PH * g.stride[1] * pl.cols_in + col * g.stride[2]) * pl.pitch + u;
            for (int fy = 0; fy < g.fil[1]; ++fy, row += g.dil[1] * pl.cols_in * pl.pitch) {
                const uint4* src = row;
                for (int fx = 0; fx < g.fil[2]; ++fx, src += col_step, wp += VC * CPG / 4) {
                    float wv[VC][CPG];
#pragma unroll
                    for (int i = 0; i < VC * CPG / 4; ++i) {
                        const float4 f = wp[i];
                        float* d = &wv[0][0] + 4 * i;
                        d[0] = f.x; d[1] = f.y; d[2] = f.z; d[3] = f.w;
                    }
#pragma unroll
                    for (int p = 0; p < PH; ++p) {
                        float xv[VC];
                        unpack8<T>(src[p * row_step], xv);
#pragma unroll
                        for (int j = 0; j < VC; ++j) {
                            float sum = acc[p][j];
#pragma unroll
                            for (int c = 0; c < CPG; ++c) sum = fmaf(xv[(j / CPG) * CPG + c], wv[j][c], sum);
                            acc[p][j] = sum;
                        }
                    }
                }
            }
        }
        if (z == g.fil[0] - 1) {  // the row tile is complete: store it
            const int oh = (th0 + step / g.fil[0]) * pl.bh + s * PH;
            if (active && ow0 + col < g.out[2]) {
                T* out = y + ((((int64_t)n * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow0 + col) * chans +
                         (int64_t)(ub + u) * VC;
#pragma unroll
                for (int p = 0; p < PH; ++p)
                    if (oh + p < g.out[1]) store_vec<VC>(out + (int64_t)p * g.out[2] * chans, acc[p]);
            }
#pragma unroll
            for (int p = 0; p < PH; ++p)
#pragma unroll
                for (int v = 0; v < VC; ++v) acc[p][v] = 0.f;
        }
        __syncthreads();  // every thread is done with this buffer before it is refilled
    }
}

// The forward plan: CU as large as the channel units allow with a warp per unit at least,
// output columns split evenly into tiles of at most threads / CU, PH-row strips below,
// the block walking `bands` row tiles.
inline bool fwd_tiled_plan(const DeviceGeometry& g, int cpg, int ph, int threads, int sms, TiledPlan* pl) {
    const int units = g.G * cpg / kUnit;
    if ((g.G * cpg) % kUnit) return false;
    int cu = 1;
    for (int c : {8, 4, 2})
        if (units % c == 0 && threads / c >= 32) { cu = c; break; }
    TiledPlan p{};
    p.cu = cu;
    p.sp = threads / cu;
    p.tiles_w = (g.out[2] + p.sp - 1) / p.sp;
    p.bw = (g.out[2] + p.tiles_w - 1) / p.tiles_w;
    const int strips = std::max(1, std::min(p.sp / p.bw, (g.out[1] + ph - 1) / ph));
    p.bh = strips * ph;
    p.tiles_h = (g.out[1] + p.bh - 1) / p.bh;
    p.rows_in = (p.bh - 1) * g.stride[1] + (g.fil[1] - 1) * g.dil[1] + 1;
    p.cols_in = (p.bw - 1) * g.stride[2] + (g.fil[2] - 1) * g.dil[2] + 1;
    p.pitch = odd_pitch(cu);
    // two tile buffers (the next step's copy overlaps this step's arithmetic) and the weights
    p.smem = 2 * (size_t)p.rows_in * p.cols_in * p.pitch * 16 + (size_t)cu * kUnit * g.taps * cpg * sizeof(float);
    // row tiles per block: as many as leave about 6 blocks per SM
    const int64_t tiles = (int64_t)(units / cu) * p.tiles_w * p.tiles_h * g.out[0] * g.N;
    const int64_t want = std::max<int64_t>(1, std::min<int64_t>(p.tiles_h, tiles / (6LL * sms)));
    const int64_t groups = (p.tiles_h + want - 1) / want;
    p.bands = (int)((p.tiles_h + groups - 1) / groups);
    const int64_t bx = (int64_t)p.tiles_w * groups * g.out[0] * g.N;
    if (bx * (units / cu) > INT32_MAX || p.smem > 160 * 1024) return false;
    p.blocks_x = (int)bx;
    *pl = p;
    return true;
}

// ---------------------------------------------------------------- backward weight
constexpr int kDwMaxX = 7;   // depthwise: filter width the per-thread window holds
constexpr int kDwChunk = 4;  // depthwise: output pixels along W per window step

// Accumulators per thread: depthwise X taps x 8 channels; else 8 / CPG groups x CPG x CPG.
template <int CPG>
constexpr int bwdw_acc() { return CPG == 1 ? kDwMaxX * kUnit : kUnit * CPG; }
inline int bwdw_acc_host(int cpg) { return cpg == 1 ? kDwMaxX * kUnit : kUnit * cpg; }

template <class T, int CPG, int Threads>
__global__ void __launch_bounds__(Threads)
    conv_bwd_weight_tiled(DeviceGeometry g, TiledPlan pl, const T* __restrict__ x, const T* __restrict__ dy,
                          float* __restrict__ partial) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int VC = kUnit, ACC = bwdw_acc<CPG>();
    const int bw4 = (pl.bw + kDwChunk - 1) / kDwChunk * kDwChunk;
    const int dy_cols = CPG == 1 ? bw4 : pl.bw;
    const int plane_slots = pl.rows_in * pl.cols_in * pl.pitch;
    // two buffers, each the dy tile then fil[0] input planes of rows_in x cols_in
    const int buf_slots = pl.bh * dy_cols * pl.pitch + g.fil[0] * plane_slots;
    uint4* bufs = reinterpret_cast<uint4*>(smem_raw);
    const int tid = threadIdx.x;
    const int cblocks = g.G * CPG / VC / pl.cu;
    int bx = blockIdx.x;
    const int ub = (bx % cblocks) * pl.cu; bx /= cblocks;
    const int tile = bx;  // this block's partial row
    const int tw = bx % pl.tiles_w; bx /= pl.tiles_w;
    const int band0 = (bx % ((pl.tiles_h + pl.bands - 1) / pl.bands)) * pl.bands;
    bx /= (pl.tiles_h + pl.bands - 1) / pl.bands;
    const int od = bx % g.out[0];
    const int n = bx / g.out[0];
    const int ow0 = tw * pl.bw;
    const int64_t chans = (int64_t)g.G * CPG;
    const int slot = tid % (pl.cu * pl.jobs), part = tid / (pl.cu * pl.jobs);
    const int u = slot % pl.cu, job = slot / pl.cu;
    const bool active = part < pl.split;
    // job -> filter plane z and row fy (depthwise), or the tap (z, fy, fx)
    const int fx = CPG == 1 ? 0 : job % g.fil[2];
    const int zy = CPG == 1 ? job : job / g.fil[2];
    const int fy = zy % g.fil[1], fz = zy / g.fil[1];
    const bool window = g.stride[2] == 1 && g.dil[2] == 1;
    float acc[ACC];
#pragma unroll
    for (int a = 0; a < ACC; ++a) acc[a] = 0.f;
    // the copy of band i + 1 runs while band i computes
    const int steps = min(pl.tiles_h, band0 + pl.bands) - band0;
    auto issue = [&](int step) {
        const int oh0 = (band0 + step) * pl.bh;
        uint4* dyt = bufs + (step & 1) * buf_slots;
        const T* dplane = dy + ((int64_t)n * g.out[0] + od) * g.out[1] * g.out[2] * chans + (int64_t)ub * VC;
        tile_load<T, Threads>(dyt, dplane, dy, pl.bh, dy_cols, oh0, ow0, min(g.out[1], oh0 + pl.bh),
                              min(g.out[2], ow0 + pl.bw), g.out[2], chans, pl.cu, pl.pitch);
        for (int z = 0; z < g.fil[0]; ++z) {
            const int id = od * g.stride[0] - g.pad[0] + z * g.dil[0];
            const bool plane_ok = id >= 0 && id < g.in[0];
            const T* xplane = x + ((int64_t)n * g.in[0] + (plane_ok ? id : 0)) * g.in[1] * g.in[2] * chans + (int64_t)ub * VC;
            tile_load<T, Threads>(dyt + pl.bh * dy_cols * pl.pitch + z * plane_slots, xplane, x, pl.rows_in,
                                  pl.cols_in, oh0 * g.stride[1] - g.pad[1], ow0 * g.stride[2] - g.pad[2],
                                  plane_ok ? g.in[1] : 0, g.in[2], g.in[2], chans, pl.cu, pl.pitch);
        }
        cp_async_commit();
    };
    issue(0);
    for (int step = 0; step < steps; ++step) {
        if (step + 1 < steps) {
            if (step > 0) __syncthreads();  // every thread is done with the buffer refilled now
            issue(step + 1);
            cp_async_wait_prior();
        } else {
            cp_async_wait_all();
        }
        __syncthreads();
        if (!active) continue;
        const uint4* dyt = bufs + (step & 1) * buf_slots;
        const uint4* xt = dyt + pl.bh * dy_cols * pl.pitch;
        const uint4* xz = xt + fz * plane_slots + u;
        if constexpr (CPG == 1) {
            const int chunks = bw4 / kDwChunk;
            // chunk i = (row r, chunk ch) with i = part, part + split, ...: stepped without dividing
            int r = part / chunks, ch = part % chunks;
            while (r < pl.bh) {
                const int c0 = ch * kDwChunk;
                float gv[kDwChunk][VC];
#pragma unroll
                for (int p = 0; p < kDwChunk; ++p) unpack8<T>(dyt[(r * dy_cols + c0 + p) * pl.pitch + u], gv[p]);
                const uint4* xrow = xz + ((r * g.stride[1] + fy * g.dil[1]) * pl.cols_in) * pl.pitch;
                if (window) {
#pragma unroll
                    for (int j = 0; j < kDwChunk + kDwMaxX - 1; ++j) {
                        if (j >= kDwChunk + g.fil[2] - 1) break;
                        float xv[VC];
                        unpack8<T>(xrow[(c0 + j) * pl.pitch], xv);
#pragma unroll
                        for (int p = 0; p < kDwChunk; ++p) {
                            const int t = j - p;
                            if (t < 0 || t >= kDwMaxX || t >= g.fil[2]) continue;
#pragma unroll
                            for (int v = 0; v < VC; ++v) acc[t * VC + v] = fmaf(gv[p][v], xv[v], acc[t * VC + v]);
                        }
                    }
                } else {
#pragma unroll
                    for (int t = 0; t < kDwMaxX; ++t) {
                        if (t >= g.fil[2]) break;
#pragma unroll
                        for (int p = 0; p < kDwChunk; ++p) {
                            float xv[VC];
                            unpack8<T>(xrow[((c0 + p) * g.stride[2] + t * g.dil[2]) * pl.pitch], xv);
#pragma unroll
                            for (int v = 0; v < VC; ++v) acc[t * VC + v] = fmaf(gv[p][v], xv[v], acc[t * VC + v]);
                        }
                    }
                }
                for (ch += pl.split; ch >= chunks; ch -= chunks) ++r;
            }
        } else {
            // pixel i = (row r, column c) with i = part, part + split, ...: the two shared-memory
            // addresses advance with it (no division or multiplication per pixel)
            int r = part / pl.bw, c = part % pl.bw;
            const int dstep = pl.split * pl.pitch;
            const int xstep = pl.split * g.stride[2] * pl.pitch;
            const int dwrap = (dy_cols - pl.bw) * pl.pitch;  // a row further, bw columns back
            const int xwrap = (g.stride[1] * pl.cols_in - pl.bw * g.stride[2]) * pl.pitch;
            const uint4* dp = dyt + (r * dy_cols + c) * pl.pitch + u;
            const uint4* xp = xz + ((r * g.stride[1] + fy * g.dil[1]) * pl.cols_in + c * g.stride[2] + fx * g.dil[2]) * pl.pitch;
            while (r < pl.bh) {
                float gv[VC], xv[VC];
                unpack8<T>(*dp, gv);
                unpack8<T>(*xp, xv);
#pragma unroll
                for (int jg = 0; jg < VC / CPG; ++jg)
#pragma unroll
                    for (int k = 0; k < CPG; ++k)
#pragma unroll
                        for (int c2 = 0; c2 < CPG; ++c2)
                            acc[(jg * CPG + k) * CPG + c2] = fmaf(gv[jg * CPG + k], xv[jg * CPG + c2], acc[(jg * CPG + k) * CPG + c2]);
                dp += dstep;
                xp += xstep;
                for (c += pl.split; c >= pl.bw; c -= pl.bw) {
                    ++r;
                    dp += dwrap;
                    xp += xwrap;
                }
            }
        }
    }
    // add the split threads of each job in a fixed order, through shared memory red[a][tid],
    // every thread adding some (job, accumulator) pairs
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem_raw);
    if (active) {
#pragma unroll
        for (int a = 0; a < ACC; ++a) red[a * Threads + tid] = acc[a];
    }
    __syncthreads();
    const int slots = pl.cu * pl.jobs;
    const int used = CPG == 1 ? g.fil[2] * VC : ACC;
    float* row = partial + (int64_t)tile * g.G * CPG * g.taps * CPG;
    for (int i = tid; i < slots * used; i += Threads) {
        const int sl = i % slots, a = i / slots;
        float sum = 0.f;
        for (int q = 0; q < pl.split; ++q) sum += red[a * Threads + q * slots + sl];
        const int uu = sl % pl.cu, jb = sl / pl.cu;
        if constexpr (CPG == 1) {
            const int t = a / VC, v = a % VC;  // job = filter row, a = (tap along W, channel)
            row[(int64_t)((ub + uu) * VC + v) * g.taps + jb * g.fil[2] + t] = sum;
        } else {
            const int c2 = a % CPG, k = (a / CPG) % CPG, jg = a / (CPG * CPG);  // job = tap
            const int grp = (ub + uu) * (VC / CPG) + jg;
            row[(((int64_t)grp * CPG + k) * g.taps + jb) * CPG + c2] = sum;
        }
    }
}

// The bwd_weight plan: jobs per unit (filter rows, or taps), CU as large as leaves at least
// two threads per job, output tiles of at most 64 columns and up to 8 rows within about
// 80 KB of shared memory (two buffers), and enough bands per block that the fp32 partial rows stay below
// a quarter of the bytes read while about 8 blocks per SM remain.
inline bool bwd_weight_tiled_plan(const DeviceGeometry& g, int cpg, int threads, int sms, TiledPlan* pl) {
    if ((g.G * cpg) % kUnit) return false;
    if (cpg == 1 && g.fil[2] > kDwMaxX) return false;
    const int units = g.G * cpg / kUnit;
    const int jobs = cpg == 1 ? g.fil[0] * g.fil[1] : g.taps;
    if (jobs * 2 > threads) return false;
    TiledPlan p{};
    p.jobs = jobs;
    p.cu = 1;
    for (int c : {8, 4, 2})
        if (units % c == 0 && c * jobs * 2 <= threads) { p.cu = c; break; }
    p.split = threads / (p.cu * jobs);
    p.pitch = odd_pitch(p.cu);
    p.tiles_w = (g.out[2] + 63) / 64;
    p.bw = (g.out[2] + p.tiles_w - 1) / p.tiles_w;
    const int bw4 = (p.bw + kDwChunk - 1) / kDwChunk * kDwChunk;
    const int dy_cols = cpg == 1 ? bw4 : p.bw;
    const int xw = cpg == 1 ? bw4 : p.bw;
    auto smem = [&](int bh) {
        const size_t rows_in = (size_t)(bh - 1) * g.stride[1] + (size_t)(g.fil[1] - 1) * g.dil[1] + 1;
        const size_t cols_in = (size_t)(xw - 1) * g.stride[2] + (size_t)(g.fil[2] - 1) * g.dil[2] + 1;
        const size_t tiles = 2 * ((size_t)bh * dy_cols + g.fil[0] * rows_in * cols_in) * p.pitch * 16;  // two buffers
        return std::max(tiles, (size_t)bwdw_acc_host(cpg) * threads * sizeof(float));
    };
    int bh = std::min(8, g.out[1]);
    while (bh > 1 && smem(bh) > 80 * 1024) --bh;
    p.bh = bh;
    p.rows_in = (bh - 1) * g.stride[1] + (g.fil[1] - 1) * g.dil[1] + 1;
    p.cols_in = (xw - 1) * g.stride[2] + (g.fil[2] - 1) * g.dil[2] + 1;
    p.smem = smem(bh);
    p.tiles_h = (g.out[1] + bh - 1) / bh;
    if (p.smem > 160 * 1024) return false;
    const int64_t cblocks = units / p.cu;
    const int64_t elems = (int64_t)g.G * cpg * g.taps * cpg;
    const int64_t read = 2 * ((int64_t)g.N * g.in[0] * g.in[1] * g.in[2] + (int64_t)g.N * g.out[0] * g.out[1] * g.out[2]) *
                         g.G * cpg;
    auto rows = [&](int64_t b) { return (int64_t)g.N * g.out[0] * p.tiles_w * ((p.tiles_h + b - 1) / b); };
    int64_t bands = 1;
    while (bands < p.tiles_h && rows(bands) * elems * 4 > read / 4 && rows(2 * bands) * cblocks >= 4LL * sms)
        bands *= 2;
    p.bands = (int)std::min<int64_t>(bands, p.tiles_h);
    const int64_t bx = (int64_t)g.N * g.out[0] * ((p.tiles_h + p.bands - 1) / p.bands) * p.tiles_w;
    if (bx * cblocks > INT32_MAX) return false;
    p.blocks_x = (int)bx;
    *pl = p;
    return true;
}

}  // namespace td::cuda
