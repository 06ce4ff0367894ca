// The cpu backend's blocked GEMM engine, shared by GEMM and implicit-GEMM convolution.
//
// An operand policy `Op` describes one (batched) GEMM C[g] = A[g] * B[g] by packing:
//   int64_t batch(), m(), n(), k();
//   template <int MR> void pack_a(g, i0, k0, mc, kc, float* dst)  -> MR-row panels, zero padded
//   template <int NR> void pack_b(g, k0, j0, kc, nc, float* dst)  -> NR-column panels, zero padded
//   void store(g, i0, j0, mc, nc, const float* acc, int ld_acc)  -> converts and writes C
// The block tile TM x TN x TK sets the cache blocking: one output tile is a unit of work and
// its K loop runs in TK steps ("iterations"). MR x NR is the register micro-tile.
//
// Two schedules: data-parallel (whole tiles over threads) and stream-K (the iterations of
// all tiles split evenly over workers; split tiles fixed up atomically or deterministically).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "dispatcher.hpp"
#include "tiledispatch/checked.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace td::cpu {

// OpenMP's thread count; 1 in a process forked after the library was loaded (common.cpp).
inline int max_threads() { return host_threads(); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// acc[MR x NR] (row stride ldc) += a_panel(kc x MR) * b_panel(kc x NR). The accumulators
// are GCC/Clang vector-extension values (8 floats each) that the compiler keeps in vector
// registers and lowers to whatever the target has (AVX2/AVX-512 FMA, SSE, NEON).
typedef float vec8 __attribute__((vector_size(32)));
typedef float vec8u __attribute__((vector_size(32), aligned(4), may_alias));  // unaligned access

template <int MR, int NR>
inline void micro_kernel(int kc, const float* __restrict a, const float* __restrict b,
                         float* __restrict c, int ldc) {
    static_assert(NR % 4 == 0, "NR must be a multiple of 4");
    if constexpr (NR % 8 == 0) {
        constexpr int NV = NR / 8;
        vec8 acc[MR][NV];
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = vec8{};
        for (int p = 0; p < kc; ++p) {
            vec8 bv[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const vec8u*>(b + p * NR + v * 8);
#pragma GCC unroll 16
            for (int i = 0; i < MR; ++i) {
                const float ai = a[p * MR + i];
#pragma GCC unroll 4
                for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
            }
        }
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) {
                vec8u* cv = reinterpret_cast<vec8u*>(c + i * ldc + v * 8);
                *cv = *cv + acc[i][v];
            }
    } else {
        float acc[MR][NR];
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
        for (int p = 0; p < kc; ++p)
            for (int i = 0; i < MR; ++i)
                for (int j = 0; j < NR; ++j) acc[i][j] += a[p * MR + i] * b[p * NR + j];
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < NR; ++j) c[i * ldc + j] += acc[i][j];
    }
}

// 64-byte aligned float buffers, allocated before any parallel region so that an
// allocation failure surfaces as std::bad_alloc in the calling thread.
struct Buffer {
    float* data = nullptr;
    explicit Buffer(size_t floats) {
        const size_t bytes = ((floats * sizeof(float) + 63) / 64) * 64;
        data = static_cast<float*>(std::aligned_alloc(64, bytes ? bytes : 64));
        if (!data) throw std::bad_alloc();
    }
    ~Buffer() { std::free(data); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

// This thread's slice of a per-thread scratch buffer.
inline float* thread_slice(const Buffer& buffer, size_t floats_per_thread) {
#ifdef _OPENMP
    return buffer.data + floats_per_thread * omp_get_thread_num();
#else
    (void)floats_per_thread;
    return buffer.data;
#endif
}

template <int TM, int TN, int TK, int MR, int NR>
struct Engine {
    static constexpr int TMP = ((TM + MR - 1) / MR) * MR;
    static constexpr int TNP = ((TN + NR - 1) / NR) * NR;
    static constexpr size_t acc_floats = (size_t)TMP * TNP;
    static constexpr size_t scratch_floats = acc_floats + (size_t)TMP * TK + (size_t)TNP * TK;

    struct Shape {
        int64_t batch, m, n, k, tiles_m, tiles_n, tiles, iters;  // iters: K iterations per tile
    };

    template <class Op>
    static Shape shape(const Op& op) {
        Shape s{op.batch(), op.m(), op.n(), op.k(), 0, 0, 0, 0};
        s.tiles_m = ceil_div(s.m, TM);
        s.tiles_n = ceil_div(s.n, TN);
        s.tiles = s.batch * s.tiles_m * s.tiles_n;
        s.iters = ceil_div(s.k, TK);
        return s;
    }

    // acc (TMP x TNP, ld TNP) = sum over K iterations [it0, it1) of tile t.
    template <class Op>
    static void tile_partial(const Op& op, const Shape& s, int64_t t, int64_t it0, int64_t it1,
                             float* scratch) {
        float* acc = scratch;
        float* pa = scratch + acc_floats;
        float* pb = pa + (size_t)TMP * TK;
        const int64_t g = t / (s.tiles_m * s.tiles_n);
        const int64_t rest = t % (s.tiles_m * s.tiles_n);
        const int64_t i0 = (rest / s.tiles_n) * TM, j0 = (rest % s.tiles_n) * TN;
        const int mc = (int)std::min<int64_t>(TM, s.m - i0), nc = (int)std::min<int64_t>(TN, s.n - j0);
        std::memset(acc, 0, acc_floats * sizeof(float));
        const int panels_m = (mc + MR - 1) / MR, panels_n = (nc + NR - 1) / NR;
        for (int64_t it = it0; it < it1; ++it) {
            const int64_t k0 = it * TK;
            const int kc = (int)std::min<int64_t>(TK, s.k - k0);
            op.template pack_a<MR>(g, i0, k0, mc, kc, pa);
            op.template pack_b<NR>(g, k0, j0, kc, nc, pb);
            for (int jp = 0; jp < panels_n; ++jp)
                for (int ip = 0; ip < panels_m; ++ip)
                    micro_kernel<MR, NR>(kc, pa + (size_t)ip * MR * kc, pb + (size_t)jp * NR * kc,
                                         acc + (size_t)ip * MR * TNP + jp * NR, TNP);
        }
    }

    template <class Op>
    static void store_tile(const Op& op, const Shape& s, int64_t t, const float* acc) {
        const int64_t g = t / (s.tiles_m * s.tiles_n);
        const int64_t rest = t % (s.tiles_m * s.tiles_n);
        const int64_t i0 = (rest / s.tiles_n) * TM, j0 = (rest % s.tiles_n) * TN;
        const int mc = (int)std::min<int64_t>(TM, s.m - i0), nc = (int)std::min<int64_t>(TN, s.n - j0);
        op.store(g, i0, j0, mc, nc, acc, TNP);
    }

    // ---- data-parallel: whole tiles over threads
    template <class Op>
    static void run_data_parallel(const Op& op) {
        const Shape s = shape(op);
        const int threads = (int)std::max<int64_t>(1, std::min<int64_t>(max_threads(), s.tiles));
        Buffer scratch(scratch_floats * threads);
#pragma omp parallel num_threads(threads)
        {
            float* mine = thread_slice(scratch, scratch_floats);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < s.tiles; ++t) {
                tile_partial(op, s, t, 0, s.iters, mine);
                store_tile(op, s, t, mine);
            }
        }
    }

    // Stream-K with a caller's workspace (checked against what the plan needs) or, when
    // there is none, one of its own. TD_OK or TD_REJECTED (with the message set).
    template <class Op>
    static int run_stream_k_checked(const Op& op, int64_t workers, bool atomic, void* ws, size_t ws_bytes) {
        const auto sk = plan(op, workers);
        const size_t need = workspace_bytes(sk, atomic);
        if (ws && ws_bytes < need)
            return fail(TD_REJECTED, "workspace of " + std::to_string(ws_bytes) + " bytes, the kernel needs " +
                                         std::to_string(need));
        if (ws) {
            run_stream_k(op, sk, atomic, ws);
        } else {
            Buffer own(need / sizeof(float) + 1);
            run_stream_k(op, sk, atomic, own.data);
        }
        return TD_OK;
    }

    // ---- stream-K
    struct StreamK {
        Shape s;
        int64_t workers, total;
        std::vector<int64_t> split_tiles;  // tiles cut by a worker boundary, ascending
        std::vector<int> contributors;     // workers that add into each split tile

        int64_t begin(int64_t w) const { return w * total / workers; }
        int64_t slot_of(int64_t t) const {
            auto it = std::lower_bound(split_tiles.begin(), split_tiles.end(), t);
            return (it != split_tiles.end() && *it == t) ? it - split_tiles.begin() : -1;
        }
    };

    template <class Op>
    static StreamK plan(const Op& op, int64_t workers) {
        StreamK sk;
        sk.s = shape(op);
        sk.total = sk.s.tiles * sk.s.iters;
        sk.workers = std::max<int64_t>(1, std::min<int64_t>({workers, sk.total, kMaxSplits}));
        for (int64_t w = 1; w < sk.workers; ++w) {
            const int64_t b = sk.begin(w);
            if (b % sk.s.iters != 0) {
                const int64_t t = b / sk.s.iters;
                if (sk.split_tiles.empty() || sk.split_tiles.back() != t) sk.split_tiles.push_back(t);
            }
        }
        for (int64_t t : sk.split_tiles) {
            int count = 0;
            for (int64_t w = 0; w < sk.workers; ++w)
                if (sk.begin(w) < (t + 1) * sk.s.iters && sk.begin(w + 1) > t * sk.s.iters) ++count;
            sk.contributors.push_back(count);
        }
        return sk;
    }

    // Workspace: deterministic keeps two partial tiles per worker (its first and its last
    // segment); atomic keeps one fp32 tile plus a counter per split tile.
    static size_t workspace_bytes(const StreamK& sk, bool atomic) {
        if (atomic) return sk.split_tiles.size() * (acc_floats * sizeof(float) + 64);
        return (size_t)sk.workers * 2 * acc_floats * sizeof(float);
    }

    template <class Op>
    static void run_stream_k(const Op& op, const StreamK& sk, bool atomic, void* workspace) {
        const Shape& s = sk.s;
        const int threads = (int)std::max<int64_t>(1, std::min<int64_t>(max_threads(), sk.workers));
        Buffer scratch(scratch_floats * threads);
        float* partials = static_cast<float*>(workspace);
        const size_t nsplit = sk.split_tiles.size();
        int* counters = atomic ? reinterpret_cast<int*>(partials + nsplit * acc_floats) : nullptr;
        if (atomic && nsplit) std::memset(workspace, 0, workspace_bytes(sk, true));
#pragma omp parallel num_threads(threads)
        {
            float* mine = thread_slice(scratch, scratch_floats);
#pragma omp for schedule(dynamic, 1)
            for (int64_t w = 0; w < sk.workers; ++w) {
                const int64_t b = sk.begin(w), e = sk.begin(w + 1);
                for (int64_t it = b; it < e;) {
                    const int64_t t = it / s.iters, tb = t * s.iters, te = tb + s.iters;
                    const int64_t seg_end = std::min(e, te);
                    tile_partial(op, s, t, it - tb, seg_end - tb, mine);
                    if (it == tb && seg_end == te) {
                        store_tile(op, s, t, mine);
                    } else if (atomic) {
                        const int64_t slot = sk.slot_of(t);
                        float* dst = partials + slot * acc_floats;
                        for (size_t x = 0; x < acc_floats; ++x)
                            std::atomic_ref<float>(dst[x]).fetch_add(mine[x], std::memory_order_relaxed);
                        const int done = std::atomic_ref<int>(counters[slot]).fetch_add(1, std::memory_order_acq_rel) + 1;
                        if (done == sk.contributors[slot]) store_tile(op, s, t, dst);
                    } else {
                        const int part = (it == b) ? 0 : 1;
                        std::memcpy(partials + ((size_t)w * 2 + part) * acc_floats, mine,
                                    acc_floats * sizeof(float));
                    }
                    it = seg_end;
                }
            }
            if (!atomic) {
                // Fix-up in worker order: the sum is the same on every run.
#pragma omp for schedule(dynamic, 1)
                for (int64_t slot = 0; slot < (int64_t)nsplit; ++slot) {
                    const int64_t t = sk.split_tiles[slot], tb = t * s.iters, te = tb + s.iters;
                    std::memset(mine, 0, acc_floats * sizeof(float));
                    for (int64_t w = 0; w < sk.workers; ++w) {
                        const int64_t b = sk.begin(w), e = sk.begin(w + 1);
                        if (b >= te || e <= tb || b == e) continue;
                        const int part = (b >= tb) ? 0 : 1;
                        const float* src = partials + ((size_t)w * 2 + part) * acc_floats;
                        for (size_t x = 0; x < acc_floats; ++x) mine[x] += src[x];
                    }
                    store_tile(op, s, t, mine);
                }
            }
        }
    }
};

}  // namespace td::cpu
