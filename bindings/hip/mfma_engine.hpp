// hip backend: the GEMM engine of our MFMA kernels (regular and stream-K), written once for
// two executors:
//   - the GPU (bindings/hip/kernels_hip.hpp): one thread per work-item, real MFMA builtins,
//     __syncthreads() between phases;
//   - the host emulator (tests/hip_emulator.cpp, compiled by the C++ compiler in CI): every
//     thread of a block run in turn per phase, MFMA computed from the 64 lanes' fragments.
// Everything else -- which block computes which tile, the stream-K ranges and fix-up, the
// global -> LDS loads with padding, the per-lane fragment indexing and the accumulator ->
// output mapping -- is this file, shared by both, so the emulator catches a wrong index
// before anyone runs it on an MI300.
//
// MFMA lane layouts assumed (CDNA2/CDNA3, one 64-lane wave, single-block instructions):
//   A fragment: lane holds A[lane % MM][KPL * (lane / MM) + i], i < KPL = MM * MK / 64
//   B fragment: lane holds B[KPL * (lane / MN) + i][lane % MN]
//   C fragment: lane holds C[(j / 4) * 4 * (64 / MN) + 4 * (lane / MN) + j % 4][lane % MN], j < MM * MN / 64
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__HIP__)
#define TD_HD __host__ __device__
#else
#define TD_HD
#endif
// Full unrolling of the per-lane accumulator loops, so the accumulators stay in registers
// on the GPU (a loop left rolled indexes them dynamically and moves them to scratch).
#if defined(__clang__)
#define TD_UNROLL _Pragma("unroll")
#else
#define TD_UNROLL
#endif

namespace td::hip {

// ---------------------------------------------------------------- element types
// Storage is raw bits; dtype codes are enum td_dtype.
template <int DT> struct Storage { using type = uint16_t; };
template <> struct Storage<3> { using type = uint8_t; };
template <> struct Storage<4> { using type = uint8_t; };
template <> struct Storage<5> { using type = uint8_t; };
template <> struct Storage<6> { using type = uint8_t; };

TD_HD inline float bits_to_float(uint32_t u) { return __builtin_bit_cast(float, u); }
TD_HD inline uint32_t float_to_bits(float f) { return __builtin_bit_cast(uint32_t, f); }

TD_HD inline uint16_t float_to_bf16(float f) {
    const uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 // round to nearest even
}
TD_HD inline float bf16_to_float(uint16_t b) { return bits_to_float((uint32_t)b << 16); }

TD_HD inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        const float v = (float)man * (1.0f / 16777216.0f);  // subnormal: man * 2^-24
        return sign ? -v : v;
    }
    return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}
TD_HD inline uint16_t float_to_half(float f) {
    const uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to infinity
    if (a < 0x38800000u) {                                    // subnormal or zero
        const float v = bits_to_float(a) * 16777216.0f;      // in units of 2^-24
        const uint32_t q = (uint32_t)v;
        const float r = v - (float)q;
        const uint32_t n = q + ((r > 0.5f || (r == 0.5f && (q & 1u))) ? 1u : 0u);
        return (uint16_t)(sign | n);
    }
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

// fp8 decoding (the emulator's MFMA; the GPU's MFMA reads the bits itself).
// OCP e4m3fn (bias 7, NaN 0x7f/0xff), OCP e5m2 (bias 15, IEEE-like), FNUZ e4m3 (bias 8) and
// e5m2 (bias 16): no negative zero, 0x80 is NaN, no infinities.
TD_HD inline float fp8_to_float(uint8_t v, int man_bits, int bias, bool fnuz) {
    if (fnuz && v == 0x80) return bits_to_float(0x7fc00000u);
    const int sign = v >> 7, exp_bits = 7 - man_bits;
    const int e = (v >> man_bits) & ((1 << exp_bits) - 1), m = v & ((1 << man_bits) - 1);
    if (!fnuz && man_bits == 3 && e == 15 && m == 7) return bits_to_float(0x7fc00000u);
    if (!fnuz && man_bits == 2 && e == 31) return bits_to_float(m ? 0x7fc00000u : 0x7f800000u) * (sign ? -1.f : 1.f);
    float mag;
    if (e == 0) {
        mag = (float)m;
        for (int i = 0; i < bias - 1 + man_bits; ++i) mag *= 0.5f;
    } else {
        mag = 1.0f + (float)m / (float)(1 << man_bits);
        for (int i = 0; i < e - bias; ++i) mag *= 2.0f;
        for (int i = 0; i < bias - e; ++i) mag *= 0.5f;
    }
    return sign ? -mag : mag;
}

template <int DT> TD_HD inline float decode(typename Storage<DT>::type v) {
    if constexpr (DT == 1) return half_to_float(v);
    else if constexpr (DT == 2) return bf16_to_float(v);
    else if constexpr (DT == 3) return fp8_to_float(v, 3, 7, false);
    else if constexpr (DT == 4) return fp8_to_float(v, 2, 15, false);
    else if constexpr (DT == 5) return fp8_to_float(v, 3, 8, true);
    else return fp8_to_float(v, 2, 16, true);
}

// Output: fp16 in fp16, bf16 in bf16, every fp8 in bf16.
template <int DT> TD_HD inline uint16_t encode_out(float v) {
#if defined(__HIP_DEVICE_COMPILE__)
    // the hardware conversion (round to nearest even, as float_to_half): the hand-written
    // one is large enough to keep the epilogue loops rolled and the accumulators in scratch
    if constexpr (DT == 1) return __builtin_bit_cast(uint16_t, (_Float16)v);
#else
    if constexpr (DT == 1) return float_to_half(v);
#endif
    else return float_to_bf16(v);
}

// Operands whose store() the engine runs through LDS (Engine::store_staged): those that
// declare `static constexpr bool kStagedStore = true`.
template <class Ops, class = void>
struct StagedStore : std::false_type {};
template <class Ops>
struct StagedStore<Ops, std::void_t<decltype(Ops::kStagedStore)>> : std::bool_constant<Ops::kStagedStore> {};

// ---------------------------------------------------------------- the engine
template <int DT, int TM, int TN, int TK, int WM, int WN, int MM, int MN, int MK, bool Pad, bool DoubleBuf>
struct Engine {
    using S = typename Storage<DT>::type;
    static constexpr int kThreads = WM * WN * 64;
    static constexpr int KPL = MM * MK / 64;  // k values per lane per MFMA
    static constexpr int CPL = MM * MN / 64;  // accumulators per lane per MFMA
    static constexpr int RM = TM / (WM * MM), RN = TN / (WN * MN);
    static constexpr int kLdsA = TM * TK, kLdsB = TN * TK;  // A as [m][k], B as [n][k]
    static constexpr int kLds = kLdsA + kLdsB;
    static constexpr int kBuffers = DoubleBuf ? 2 : 1;
    static constexpr int kTM = TM, kTN = TN, kTK = TK;
    static_assert(TM % (WM * MM) == 0 && TN % (WN * MN) == 0 && TK % MK == 0, "tile vs waves x MFMA");
    static_assert(MM == MN, "square MFMA shapes");

    struct Acc {
        float v[RM][RN][CPL];
    };

    TD_HD static void zero(Acc& acc) {
        TD_UNROLL
        for (int rm = 0; rm < RM; ++rm)
            TD_UNROLL
            for (int rn = 0; rn < RN; ++rn)
                TD_UNROLL
                for (int j = 0; j < CPL; ++j) acc.v[rm][rn][j] = 0.f;
    }

    // Global -> LDS: thread tid's share of the A (TM x TK) and B (TK x TN) tiles at k0.
    template <class Ops>
    TD_HD static void load(const Ops& ops, int batch, int64_t m0, int64_t n0, int64_t k0, int tid, S* lds) {
        S* la = lds;
        S* lb = lds + kLdsA;
        for (int e = tid; e < kLdsA; e += kThreads) la[e] = ops.a(batch, m0 + e / TK, k0 + e % TK);
        for (int e = tid; e < kLdsB; e += kThreads) lb[e] = ops.b(batch, k0 + e % TK, n0 + e / TK);
    }

    // The fragments lane `lane` of wave `wave` feeds to the MFMA at (kk, rm, rn).
    TD_HD static void fragment(const S* lds, int wave, int lane, int kk, int rm, int rn, S (&a)[KPL], S (&b)[KPL]) {
        const int wm = wave % WM, wn = wave / WM;
        const int row = wm * (TM / WM) + rm * MM + lane % MM;
        const int col = wn * (TN / WN) + rn * MN + lane % MN;
        const int ka = kk + KPL * (lane / MM), kb = kk + KPL * (lane / MN);
        TD_UNROLL
        for (int i = 0; i < KPL; ++i) {
            a[i] = lds[row * TK + ka + i];
            b[i] = lds[kLdsA + col * TK + kb + i];
        }
    }

    // Tile coordinates of accumulator j of (rm, rn) in lane `lane` of wave `wave`.
    TD_HD static void c_coord(int wave, int lane, int rm, int rn, int j, int* row, int* col) {
        const int wm = wave % WM, wn = wave / WM;
        *row = wm * (TM / WM) + rm * MM + (j / 4) * 4 * (64 / MN) + 4 * (lane / MN) + j % 4;
        *col = wn * (TN / WN) + rn * MN + lane % MN;
    }

    // The K loop of one tile over K tiles [kt_begin, kt_end). Block is the executor.
    template <class Block, class Ops>
    TD_HD static void mainloop(Block& blk, const Ops& ops, int batch, int64_t m0, int64_t n0, int kt_begin,
                               int kt_end) {
        blk.for_each_thread([&](int tid) { zero(blk.acc(tid)); });
        if (DoubleBuf) {
            blk.for_each_thread([&](int tid) { load(ops, batch, m0, n0, (int64_t)kt_begin * TK, tid, blk.lds(0)); });
            blk.barrier();
            for (int kt = kt_begin; kt < kt_end; ++kt) {
                const int cur = (kt - kt_begin) & 1;
                if (kt + 1 < kt_end)
                    blk.for_each_thread(
                        [&](int tid) { load(ops, batch, m0, n0, (int64_t)(kt + 1) * TK, tid, blk.lds(cur ^ 1)); });
                blk.mma(blk.lds(cur));
                blk.barrier();
            }
        } else {
            for (int kt = kt_begin; kt < kt_end; ++kt) {
                blk.for_each_thread([&](int tid) { load(ops, batch, m0, n0, (int64_t)kt * TK, tid, blk.lds(0)); });
                blk.barrier();
                blk.mma(blk.lds(0));
                blk.barrier();
            }
        }
    }

    // f(row, col, value) for every accumulator of thread tid, in tile coordinates.
    template <class F>
    TD_HD static void for_each_acc(int tid, const Acc& acc, F f) {
        const int wave = tid / 64, lane = tid % 64;
        TD_UNROLL
        for (int rm = 0; rm < RM; ++rm)
            TD_UNROLL
            for (int rn = 0; rn < RN; ++rn)
                TD_UNROLL
                for (int j = 0; j < CPL; ++j) {
                    int row, col;
                    c_coord(wave, lane, rm, rn, j, &row, &col);
                    f(row, col, acc.v[rm][rn][j]);
                }
    }

    // Output of a whole tile: alpha * acc, inside the problem only.
    template <class Ops>
    TD_HD static void store(const Ops& ops, int batch, int64_t m0, int64_t n0, int tid, const Acc& acc, float alpha) {
        for_each_acc(tid, acc, [&](int row, int col, float v) {
            if (m0 + row < ops.M && n0 + col < ops.N) ops.store(batch, m0 + row, n0 + col, alpha * v);
        });
    }

    // Output of a whole tile through LDS, for operands whose store() is too large to unroll
    // once per accumulator (the generic epilogue): in passes of kStageRows rows, each thread
    // writes its accumulators of the pass to LDS as fp32, then every thread stores elements
    // tid, tid + kThreads, ... of the pass (a rolled loop, as the stream-K fix-up). Called
    // after the mainloop's last barrier; ends with a barrier (LDS is free again).
    static constexpr int kLdsBytes = kBuffers * kLds * (int)sizeof(S);
    static constexpr int kStageRows = kLdsBytes / (TN * 4) < TM ? kLdsBytes / (TN * 4) : TM;
    static_assert(kStageRows >= 1, "LDS holds one fp32 row of the tile");
    template <class Block, class Ops>
    TD_HD static void store_staged(Block& blk, const Ops& ops, int batch, int64_t m0, int64_t n0, float alpha) {
        float* stage = reinterpret_cast<float*>(blk.lds(0));
        for (int r0 = 0; r0 < TM; r0 += kStageRows) {
            blk.for_each_thread([&](int tid) {
                for_each_acc(tid, blk.acc(tid), [&](int row, int col, float v) {
                    if (row >= r0 && row < r0 + kStageRows) stage[(row - r0) * TN + col] = v;
                });
            });
            blk.barrier();
            blk.for_each_thread([&](int tid) {
                for (int e = tid; e < kStageRows * TN; e += kThreads) {
                    const int row = r0 + e / TN, col = e % TN;
                    if (row < TM && m0 + row < ops.M && n0 + col < ops.N)
                        ops.store(batch, m0 + row, n0 + col, alpha * stage[e]);
                }
            });
            blk.barrier();
        }
    }

    // Output of a whole tile by the block: store() per thread, or store_staged() where the
    // operands ask for it (Ops::kStagedStore).
    template <class Block, class Ops>
    TD_HD static void store_tile(Block& blk, const Ops& ops, int batch, int64_t m0, int64_t n0, float alpha) {
        if constexpr (StagedStore<Ops>::value)
            store_staged(blk, ops, batch, m0, n0, alpha);
        else
            blk.for_each_thread([&](int tid) { store(ops, batch, m0, n0, tid, blk.acc(tid), alpha); });
    }

    // A partial tile as fp32 [TM][TN] (deterministic: written; atomic: added with add(p, v)).
    template <class Add>
    TD_HD static void store_partial(float* part, int tid, const Acc& acc, bool atomic, Add add) {
        for_each_acc(tid, acc, [&](int row, int col, float v) {
            if (atomic) add(part + row * TN + col, v);
            else part[row * TN + col] = v;
        });
    }
};

// ---------------------------------------------------------------- tiles and stream-K
struct Grid {
    int64_t batches, tiles_m, tiles_n, iters;  // iters: K tiles per output tile
    TD_HD int64_t tiles() const { return batches * tiles_m * tiles_n; }
    TD_HD void tile(int64_t t, int* batch, int64_t* tm, int64_t* tn) const {
        *tn = t % tiles_n;
        *tm = (t / tiles_n) % tiles_m;
        *batch = (int)(t / (tiles_n * tiles_m));
    }
};

// Stream-K: `units` blocks share tiles() * iters K iterations, `per` each (the last fewer).
struct StreamK {
    Grid grid;
    int64_t units, per;
    TD_HD static StreamK make(const Grid& g, int64_t units) {
        const int64_t total = g.tiles() * g.iters;
        if (units > total) units = total;
        if (units < 1) units = 1;
        StreamK s{g, units, (total + units - 1) / units};
        s.units = (total + s.per - 1) / s.per;  // no empty unit
        return s;
    }
    TD_HD int64_t first_unit(int64_t tile) const { return tile * grid.iters / per; }
    TD_HD int64_t last_unit(int64_t tile) const { return ((tile + 1) * grid.iters - 1) / per; }
    TD_HD bool split(int64_t tile) const { return first_unit(tile) != last_unit(tile); }
    TD_HD int64_t first_tile(int64_t unit) const { return unit * per / grid.iters; }
    TD_HD int64_t max_segments() const { return per / grid.iters + 2; }
};

// Workspace of a stream-K run in floats: deterministic, one partial tile per (unit,
// segment); atomic, one per output tile.
template <int TM, int TN>
TD_HD inline int64_t streamk_workspace_floats(const StreamK& s, bool atomic) {
    return (atomic ? s.grid.tiles() : s.units * s.max_segments()) * (int64_t)TM * TN;
}

// The work of one block: data-parallel (tile `block`) or stream-K unit `block`. A split
// tile's partial goes to the workspace: atomic mode adds it (add(p, v)) into the tile's
// fp32 slot, deterministic mode writes it to the (unit, segment) slot.
template <class E, class Block, class Ops, class Add>
TD_HD void run_block(Block& blk, const Ops& ops, const Grid& g, bool streamk, const StreamK& sk, bool atomic,
                     float* ws, int64_t block, float alpha, Add add) {
    int batch;
    int64_t tm, tn;
    if (!streamk) {
        g.tile(block, &batch, &tm, &tn);
        E::mainloop(blk, ops, batch, tm * E::kTM, tn * E::kTN, 0, (int)g.iters);
        E::store_tile(blk, ops, batch, tm * E::kTM, tn * E::kTN, alpha);
        return;
    }
    const int64_t total = g.tiles() * g.iters;
    int64_t it = block * sk.per;
    const int64_t end = it + sk.per < total ? it + sk.per : total;
    const int64_t first = sk.first_tile(block);
    while (it < end) {
        const int64_t tile = it / g.iters;
        const int kb = (int)(it % g.iters);
        const int ke = (int)(kb + (end - it) < g.iters ? kb + (end - it) : g.iters);
        g.tile(tile, &batch, &tm, &tn);
        E::mainloop(blk, ops, batch, tm * E::kTM, tn * E::kTN, kb, ke);
        if (kb == 0 && ke == g.iters) {
            E::store_tile(blk, ops, batch, tm * E::kTM, tn * E::kTN, alpha);
        } else {
            float* part = ws + (atomic ? tile : block * sk.max_segments() + (tile - first)) * (int64_t)E::kTM * E::kTN;
            blk.for_each_thread([&](int tid) { E::store_partial(part, tid, blk.acc(tid), atomic, add); });
        }
        it += ke - kb;
    }
}

// Stream-K fix-up of one output tile (a second launch, one block per tile): split tiles
// sum their partials in unit order (deterministic) or read their atomic sum.
template <class E, class Block, class Ops>
TD_HD void fixup_tile(Block& blk, const Ops& ops, const StreamK& sk, bool atomic, const float* ws, int64_t tile,
                      float alpha) {
    if (!sk.split(tile)) return;
    int batch;
    int64_t tm, tn;
    sk.grid.tile(tile, &batch, &tm, &tn);
    const int64_t m0 = tm * E::kTM, n0 = tn * E::kTN, area = (int64_t)E::kTM * E::kTN;
    blk.for_each_thread([&](int tid) {
        for (int e = tid; e < E::kTM * E::kTN; e += E::kThreads) {
            const int row = e / E::kTN, col = e % E::kTN;
            if (m0 + row >= ops.M || n0 + col >= ops.N) continue;
            float s = 0.f;
            if (atomic) {
                s = ws[tile * area + e];
            } else {
                for (int64_t u = sk.first_unit(tile); u <= sk.last_unit(tile); ++u)
                    s += ws[(u * sk.max_segments() + (tile - sk.first_tile(u))) * area + e];
            }
            ops.store(batch, m0 + row, n0 + col, alpha * s);
        }
    });
}

}  // namespace td::hip
