// The shared time models (models.hpp). GPU constants fitted to bench/gemm.py on the H200.
#include "cost/models.hpp"

#include <algorithm>
#include <cstdlib>

namespace td {

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t in_bytes(int dtype) { return dtype == TD_FP32 ? 4 : (dtype == TD_FP16 || dtype == TD_BF16) ? 2 : 1; }
int64_t out_bytes(int dtype) { return dtype == TD_FP32 ? 4 : 2; }

double cpu_gemm_model(int tile_m, int tile_n, int tile_k, int micro_m, int micro_n, const GemmShape& s,
                      bool streamk, int64_t workers, int threads) {
    const double tm = tile_m, tn = tile_n, tk = tile_k, mr = micro_m, nr = micro_n;
    const int64_t tiles = s.batch * cdiv(s.m, tile_m) * cdiv(s.n, tile_n);
    const int64_t iters = cdiv(s.k, tile_k);
    // One K iteration of one tile: FMAs, slowed where the micro tile reuses loads poorly,
    // plus packing (a conversion per element of both panels) and the fixed tile cost.
    const double fma = tm * tn * tk * (1.0 + 2.0 * (mr + nr) / (mr * nr));
    const double pack = 4.0 * (tm + tn) * tk;
    const double iter_cost = fma + pack;
    const double tile_cost = 2.0 * tm * tn;  // zeroing and storing the accumulators
    const int64_t p = std::max(1, threads);
    if (!streamk) {
        const double waves = (double)cdiv(tiles, p);
        return waves * (iters * iter_cost + tile_cost);
    }
    const int64_t w = std::max<int64_t>(1, std::min<int64_t>(workers, tiles * iters));
    const double per_worker = (double)cdiv(tiles * iters, w) * iter_cost;
    const double rounds = (double)cdiv(w, p);
    const double fixup = (double)std::min<int64_t>(w, tiles) * 3.0 * tile_cost;
    return rounds * per_worker + cdiv(tiles, p) * tile_cost + fixup + 1e4;
}

// The GPU model's scale: 2.9e12 units a second on the H200 (the model below: 4096^3 at 753
// TFLOP/s, 16 x 6144 x 4096 ping-pong at 35).
static constexpr double kGpuUnitsPerSecond = 2.9e12;

double gpu_kernel_start() { return 3e-6 * kGpuUnitsPerSecond; }

double gpu_dram_floor(const GemmShape& s, int dtype) {
    const double bytes = (double)s.batch * (((double)s.m * s.k + (double)s.n * s.k) * in_bytes(dtype) +
                                            (double)s.m * s.n * out_bytes(dtype));
    return bytes / 3.3e12 * kGpuUnitsPerSecond;
}

double gpu_dram_time(double bytes) { return bytes / 3.3e12 * kGpuUnitsPerSecond; }

double gemm_epilogue_bytes(const TdGemmProblem& p) {
    const double batch = p.batch > 1 ? (double)p.batch : 1.0;
    const int out = p.out_dtype != TD_OUT_DEFAULT ? p.out_dtype
                    : p.dtype == TD_FP32              ? TD_OUT_FP32
                    : p.dtype == TD_FP16              ? TD_OUT_FP16
                                                      : TD_OUT_BF16;
    const double ob = out == TD_OUT_FP32 ? 4.0 : 2.0;
    const double mn = batch * (double)p.M * (double)p.N;
    double bytes = mn * (ob - (double)out_bytes(p.dtype));  // a wider D than the plain one
    if (p.beta != 0.0f) bytes += mn * ob;
    if (p.aux) bytes += mn * ob;
    if (p.bias == TD_BIAS_N) bytes += (double)p.N * ob;
    if (p.bias == TD_BIAS_M) bytes += (double)p.M * ob;
    if (p.row_scale) bytes += 4.0 * (double)p.M;
    if (p.col_scale) bytes += 4.0 * (double)p.N;
    return bytes;
}

// B's bytes once per block row of A at 3.8 TB/s plus 3 us of start and tail, or mma.sync at
// half the wgmma rate where that is longer. Measured on the H200 (bench/gemm.py, L2 flushed
// by a write): 16 x 6144 x 4096 bf16 20.9 us (CUTLASS's best 25, cuBLAS 22.7), fp8 14.9;
// 32 x 8192 x 8192 with its 16-row blocks 76 (CUTLASS 44). The constants put it first for M
// up to 16 where it won every measured shape, and behind CUTLASS from two block rows on.
double skinny_model(const KernelInfo& k, const GemmShape& s, int64_t sms) {
    const double units_per_s = kGpuUnitsPerSecond;
    const double elem = (double)in_bytes(k.dtype);
    const double row_blocks = (double)s.batch * cdiv(s.m, k.tile_m);
    const double bytes_s = row_blocks * (double)s.n * (double)s.k * elem / 3.8e12;
    const double mma_s = row_blocks * k.tile_m * (double)cdiv(s.n, k.tile_n) * k.tile_n * (double)s.k /
                         (0.5 * units_per_s * (double)sms);
    return (std::max(bytes_s, mma_s) + 3e-6) * units_per_s;
}

Sm90Tile sm90_tile(const KernelInfo& k) {
    return Sm90Tile{k.tile_m, k.tile_n, k.tile_k, k.cluster_m, k.cluster_n, k.pingpong != 0, k.pad != 0};
}

// Relative throughput of one K step: cooperative 128x256 = 1, 128x128 = 0.8; ping-pong 64x128
// = 0.55 per SM, 128x128 0.9 (below), but its epilogue hides behind the next tile's mainloop
// (0.5 K steps per tile against 3 for cooperative).
double sm90_gemm_model(const Sm90Tile& t, const GemmShape& s, bool streamk, int64_t sms) {
    const double tm = t.tile_m, tn = t.tile_n, tk = t.tile_k;
    const int64_t cm = std::max(1, t.cluster_m), cn = std::max(1, t.cluster_n);
    const int64_t tiles_m = cdiv(s.m, t.tile_m), tiles_n = cdiv(s.n, t.tile_n);
    const int64_t tiles = s.batch * tiles_m * tiles_n;
    const int64_t iters = cdiv(s.k, t.tile_k);
    const double area = tm * tn;
    const bool pingpong = t.pingpong;
    // A ping-pong warp group holds its whole tile. With 128 rows it runs a K step as fast as
    // the cooperative 128x256 on large problems (H200, 8192^3: 128x128 c2x1 699 TFLOP/s,
    // 128x192 714, cooperative 128x256 689). Fitted on the shipped table's 1287 problems x 22
    // kernels (the model alone within 5% of the best on 848 of them).
    double eff;
    if (pingpong && t.tile_m >= 128) eff = std::min(0.95, 0.5 + 0.4 * tn / 128.0);
    else if (pingpong) eff = std::min(0.9, 0.35 + 0.2 * area / 8192.0);
    else eff = std::min(1.0, 0.6 + 0.4 * area / 32768.0);
    const double iter_time = tm * tn * tk / eff;  // one K step of one tile
    // A tile's epilogue costs about three K steps (cooperative). Ping-pong hides it under the
    // other warp group's mainloop, but no more of it than that mainloop's length (fp8
    // 8192x8192x256, K = 2 steps: 128x256 cooperative ran 1.05x cuBLASLt, 64x128 ping-pong 0.93x).
    double tile_overhead = 3.0 * iter_time;
    if (pingpong) tile_overhead = 0.5 * iter_time + std::max(0.0, tile_overhead - (double)iters * iter_time);
    const int64_t cluster_slots = std::max<int64_t>(1, sms / (cm * cn));
    const int64_t cluster_tiles = s.batch * cdiv(tiles_m, cm) * cdiv(tiles_n, cn);
    double cost;
    if (!streamk) {
        cost = (double)cdiv(cluster_tiles, cluster_slots) * (iters * iter_time + tile_overhead);
    } else {
        const int64_t units = std::max<int64_t>(1, std::min<int64_t>(sms, tiles * iters));
        const bool split = (tiles * iters) % units != 0 || tiles < units;
        // The fix-up grows with the number of units that share one tile (measured: stream-K
        // loses to ping-pong at 16x6144x4096, where 132 units share 48 tiles).
        const double sharing = std::max(1.0, (double)units / (double)tiles);
        cost = (double)cdiv(tiles * iters, units) * iter_time + cdiv(tiles, units) * tile_overhead +
               2.0 * tile_overhead + (split ? 3.0 * tile_overhead * sharing : 0.0);
        // The stream-K kernel's K steps run about 5% slower than the data-parallel kernel's
        // of the same tile (H200, bench/gemm.py: measured over predicted 0.93-0.99, median
        // 0.957, on the large shapes of both dtypes).
        cost *= 1.05;
    }
    if (t.pad) cost *= 1.01;  // the same kernel plus the checks; its copies only when misaligned
    return cost;
}

static bool split_k_fits(int64_t K, int splits, int align) {
    if (splits < 1 || splits > 64 || K % splits) return false;
    return splits == 1 || (K / splits) % align == 0;
}

// The batch of `splits` K parts as the data-parallel model prices it (5% slower, as
// stream-K), but no faster than A, B and the partials at 2.5 TB/s, the rate the split
// kernel streamed them at on the H200 (512x512x65536 2.3 TB/s, 128x4096x14336 2.8); then the
// sum: every partial read once and C written at 3 TB/s, plus 2 us for the second kernel.
double split_k_cost(const Sm90Tile& t, int dtype, int64_t M, int64_t N, int64_t K, int splits, int64_t sms) {
    const GemmShape batch{splits, M, N, K / splits};
    const double partial_bytes = 4.0 * splits * (double)M * N;
    const double stream_bytes = ((double)M * K + (double)N * K) * in_bytes(dtype) + partial_bytes;
    const double gemm =
        std::max(1.05 * sm90_gemm_model(t, batch, false, sms), stream_bytes / 2.5e12 * kGpuUnitsPerSecond);
    const double sum_bytes = partial_bytes + (double)M * N * out_bytes(dtype);
    return gemm + (sum_bytes / 3e12 + 2e-6) * kGpuUnitsPerSecond;
}

int split_k_count(const Sm90Tile& t, int dtype, const TdGemmProblem& p, int64_t sms) {
    const int align = (int)(16 / in_bytes(dtype));
    if (p.splits > 0) return split_k_fits(p.K, p.splits, align) ? p.splits : 0;
    int best = 1;
    double best_cost = split_k_cost(t, dtype, p.M, p.N, p.K, 1, sms);
    for (int splits = 2; splits <= 32; ++splits) {
        if (!split_k_fits(p.K, splits, align) || p.K / splits < t.tile_k) continue;
        const double cost = split_k_cost(t, dtype, p.M, p.N, p.K, splits, sms);
        if (cost < best_cost) best = splits, best_cost = cost;
    }
    return best;
}

double toeplitz_waste(const KernelInfo& k, const TdConvProblem& p, const ConvGeometry& g) {
    const int64_t h = p.base.direction == TD_CONV_BWD_DATA ? g.in[1] : g.out[1];
    const int64_t w = p.base.direction == TD_CONV_BWD_DATA ? g.in[2] : g.out[2];
    const int64_t ph = (h + k.tile_m - 1) / k.tile_m * k.tile_m, pw = (w + k.tile_n - 1) / k.tile_n * k.tile_n;
    return (double)(ph * pw) / (double)(h * w) - 1.0;
}

double toeplitz_tile_preference(const KernelInfo& k) {
    return 0.0001 * std::abs(k.tile_m - 16) + 0.0001 * std::abs(k.tile_n - 32) + 0.0001 * std::abs(k.tile_k - 16);
}

}  // namespace td
