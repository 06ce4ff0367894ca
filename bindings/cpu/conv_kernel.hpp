// cpu grouped convolution as implicit GEMM (no im2col buffer: the packing gathers).
// Tensors are channels-last with groups (sizes per group: C input, K output channels):
//   input  x[N][Di][Hi][Wi][G][C]   weight w[G][K][Z][Y][X][C]   output y[N][Do][Ho][Wo][G][K]
// Lower ranks use the same code with the leading spatial sizes 1.
//   fwd        y[g]  (M=N*Do*Ho*Wo, N=K, K=Z*Y*X*C)  = gather(x) * w[g]^T
//   bwd_data   dx[g] (M=N*Di*Hi*Wi, N=C, K=Z*Y*X*K)  = gather(dy) * w[g]
//   bwd_weight dw[g] (M=K, N=Z*Y*X*C, K=N*Do*Ho*Wo)  = dy[g]^T * gather(x), run as stream-K
#pragma once

#include <string>

#include "blocked_gemm.hpp"
#include "dtypes.hpp"
#include "tiledispatch/conv_geometry.hpp"
#include "dispatcher.hpp"
#include "tiledispatch/kernel.hpp"

namespace td::cpu {

using td::ConvGeometry;
using td::conv_geometry;
using td::decode3;

template <class In, int Direction>
struct ConvOperands {
    using T = typename In::storage;
    using Out = typename In::out;
    ConvGeometry g;
    const T* x;   // input (read in fwd and bwd_weight)
    const T* w;   // weight (read in fwd and bwd_data)
    const T* dy;  // output gradient (read in bwd_data and bwd_weight)
    typename Out::storage* dst;

    int64_t batch() const { return g.G; }
    int64_t m() const { return Direction == TD_CONV_FWD ? g.N * g.out_pixels()
                              : Direction == TD_CONV_BWD_DATA ? g.N * g.in_pixels() : g.K; }
    int64_t n() const { return Direction == TD_CONV_FWD ? g.K
                              : Direction == TD_CONV_BWD_DATA ? g.C : g.taps() * g.C; }
    int64_t k() const { return Direction == TD_CONV_FWD ? g.taps() * g.C
                              : Direction == TD_CONV_BWD_DATA ? g.taps() * g.K : g.N * g.out_pixels(); }

    // count values of x for output pixel `opix` (flat n*out_pixels + o), reduction index
    // kk0.. over (z, y, x, c), written to dst[t * stride].
    void gather_x(int64_t grp, int64_t opix, int64_t kk0, int count, float* out, int stride) const {
        const int64_t n = opix / g.out_pixels();
        int64_t o[3];
        decode3(opix % g.out_pixels(), g.out, o);
        int64_t c = kk0 % g.C, tap = kk0 / g.C, f[3];
        decode3(tap, g.fil, f);
        for (int t = 0; t < count; ++t) {
            int64_t pos[3];
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
                pos[d] = o[d] * g.stride[d] - g.pad[d] + f[d] * g.dil[d];
                inside = inside && pos[d] >= 0 && pos[d] < g.in[d];
            }
            out[(size_t)t * stride] = inside
                ? In::load(x[((((n * g.in[0] + pos[0]) * g.in[1] + pos[1]) * g.in[2] + pos[2]) * g.G + grp) * g.C + c])
                : 0.0f;
            if (++c == g.C) {
                c = 0;
                if (++f[2] == g.fil[2]) { f[2] = 0; if (++f[1] == g.fil[1]) { f[1] = 0; ++f[0]; } }
            }
        }
    }

    // count values of dy for input pixel `ipix`, reduction index kk0.. over (z, y, x, k).
    void gather_dy(int64_t grp, int64_t ipix, int64_t kk0, int count, float* out, int stride) const {
        const int64_t n = ipix / g.in_pixels();
        int64_t i[3];
        decode3(ipix % g.in_pixels(), g.in, i);
        int64_t k = kk0 % g.K, tap = kk0 / g.K, f[3];
        decode3(tap, g.fil, f);
        for (int t = 0; t < count; ++t) {
            int64_t o[3];
            bool inside = true;
            for (int d = 0; d < 3; ++d) {
                const int64_t num = i[d] + g.pad[d] - f[d] * g.dil[d];
                o[d] = num >= 0 ? num / g.stride[d] : -1;
                inside = inside && num >= 0 && num % g.stride[d] == 0 && o[d] < g.out[d];
            }
            out[(size_t)t * stride] = inside
                ? In::load(dy[((((n * g.out[0] + o[0]) * g.out[1] + o[1]) * g.out[2] + o[2]) * g.G + grp) * g.K + k])
                : 0.0f;
            if (++k == g.K) {
                k = 0;
                if (++f[2] == g.fil[2]) { f[2] = 0; if (++f[1] == g.fil[1]) { f[1] = 0; ++f[0]; } }
            }
        }
    }

    template <int MR>
    void pack_a(int64_t grp, int64_t i0, int64_t k0, int mc, int kc, float* out) const {
        for (int ip = 0; ip < mc; ip += MR, out += (size_t)MR * kc) {
            for (int ii = 0; ii < MR; ++ii) {
                const int64_t row = i0 + ip + ii;
                if (ip + ii >= mc) {
                    for (int p = 0; p < kc; ++p) out[p * MR + ii] = 0.0f;
                } else if (Direction == TD_CONV_FWD) {
                    gather_x(grp, row, k0, kc, out + ii, MR);
                } else if (Direction == TD_CONV_BWD_DATA) {
                    gather_dy(grp, row, k0, kc, out + ii, MR);
                } else {  // A(k, r) = dy[r][grp][k]
                    for (int p = 0; p < kc; ++p)
                        out[p * MR + ii] = In::load(dy[((k0 + p) * g.G + grp) * g.K + row]);
                }
            }
        }
    }

    template <int NR>
    void pack_b(int64_t grp, int64_t k0, int64_t j0, int kc, int nc, float* out) const {
        for (int jp = 0; jp < nc; jp += NR, out += (size_t)NR * kc) {
            const int cols = std::min(NR, nc - jp);
            for (int p = 0; p < kc; ++p) {
                float* row = out + (size_t)p * NR;
                const int64_t kk = k0 + p;
                if (Direction == TD_CONV_FWD) {  // B(kk, j) = w[grp][j][kk]
                    const int64_t ld = g.taps() * g.C;
                    for (int jj = 0; jj < cols; ++jj)
                        row[jj] = In::load(w[(grp * g.K + j0 + jp + jj) * ld + kk]);
                } else if (Direction == TD_CONV_BWD_DATA) {  // B((tap, k), c) = w[grp][k][tap][c]
                    const int64_t kout = kk % g.K, tap = kk / g.K;
                    const T* src = w + ((grp * g.K + kout) * g.taps() + tap) * g.C + j0 + jp;
                    for (int jj = 0; jj < cols; ++jj) row[jj] = In::load(src[jj]);
                } else {  // B(r, (tap, c)) = x gathered at output pixel r
                    gather_x(grp, kk, j0 + jp, cols, row, 1);
                }
                for (int jj = cols; jj < NR; ++jj) row[jj] = 0.0f;
            }
        }
    }

    void store(int64_t grp, int64_t i0, int64_t j0, int mc, int nc, const float* acc, int ld) const {
        int64_t row_stride, base;
        if (Direction == TD_CONV_FWD) { row_stride = g.G * g.K; base = grp * g.K; }
        else if (Direction == TD_CONV_BWD_DATA) { row_stride = g.G * g.C; base = grp * g.C; }
        else { row_stride = g.taps() * g.C; base = grp * g.K * row_stride; }
        for (int i = 0; i < mc; ++i)
            for (int j = 0; j < nc; ++j)
                dst[base + (i0 + i) * row_stride + j0 + j] = Out::store(acc[i * ld + j]);
    }
};

template <class In, int DType, int Ndim, int Direction, int TM, int TN, int TK, int MR, int NR>
struct ConvKernelImpl {
    using Eng = Engine<TM, TN, TK, MR, NR>;
    using Operands = ConvOperands<In, Direction>;
    // bwd_weight reduces over every output pixel into a small output: stream-K spreads
    // that long K loop over the workers (deterministic fix-up).
    static constexpr bool streamk = Direction == TD_CONV_BWD_WEIGHT;

    static int64_t workers(const TdConvProblem& p) {
        return p.base.split_k > 0 ? p.base.split_k : max_threads();
    }

    static int supports(const TdConvProblem& p, std::string* why) {
        if (p.dtype != DType) { *why = "dtype differs"; return TD_UNSUPPORTED; }
        if (p.ndim != Ndim) { *why = "spatial rank differs"; return TD_UNSUPPORTED; }
        if (p.base.direction != Direction) { *why = "direction differs"; return TD_UNSUPPORTED; }
        return TD_OK;
    }

    static Operands operands(const TdConvProblem& p, const void* in, const void* wei, void* out) {
        Operands ops{};
        conv_geometry(p, &ops.g);
        using T = typename In::storage;
        using O = typename In::out::storage;
        ops.x = static_cast<const T*>(in);
        ops.w = static_cast<const T*>(wei);
        ops.dy = static_cast<const T*>(out);
        ops.dst = Direction == TD_CONV_FWD ? static_cast<O*>(out)
                : Direction == TD_CONV_BWD_DATA ? static_cast<O*>(const_cast<void*>(in))
                : static_cast<O*>(const_cast<void*>(wei));
        return ops;
    }

    static size_t workspace_size(const TdConvProblem& p) {
        if (!streamk) return 0;
        Operands ops = operands(p, nullptr, nullptr, nullptr);
        return Eng::workspace_bytes(Eng::plan(ops, workers(p)), false);
    }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void* ws,
                   size_t ws_bytes, void*) {
        Operands ops = operands(p, in, wei, out);
        if (!streamk) {
            Eng::run_data_parallel(ops);
            return TD_OK;
        }
        return Eng::run_stream_k_checked(ops, workers(p), false, ws, ws_bytes);
    }
};

}  // namespace td::cpu
