// The conv library's C ABI: the reference system's conv_dispatcher_* functions and td_conv_*.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tiledispatch/conv_geometry.hpp"
#include "dispatcher.hpp"
#include "tiledispatch/device.hpp"

namespace td {
namespace {

int check_problem(const TdConvProblem* p, ConvGeometry* g) {
    if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
    if (p->dtype < TD_FP32 || p->dtype > TD_FP8_E5M2_FNUZ)
        return fail(TD_ERROR, "unknown dtype code " + std::to_string(p->dtype));
    if (p->base.direction < TD_CONV_FWD || p->base.direction > TD_CONV_BWD_WEIGHT)
        return fail(TD_ERROR, "unknown direction code " + std::to_string(p->base.direction));
    if (p->base.split_k < 0) return fail(TD_ERROR, "split_k must not be negative");
    const std::string why = conv_geometry(*p, g);
    if (!why.empty()) return fail(TD_ERROR, "bad convolution problem: " + why);
    return TD_OK;
}

// The reference system's struct carries no rank: 3D when a depth is set, else 2D.
TdConvProblem legacy_problem(const ConvProblemC* p) {
    TdConvProblem e{};
    if (p) e.base = *p;
    e.ndim = (p && (p->input_d > 1 || p->filter_z > 1)) ? 3 : 2;
    e.dtype = TD_FP32;
    return e;
}

GemmShape gemm_shape(const ConvGeometry& g, int direction) {
    const int64_t taps = g.taps();
    if (direction == TD_CONV_FWD) return {g.G, g.N * g.out_pixels(), g.K, taps * g.C};
    if (direction == TD_CONV_BWD_DATA) return {g.G, g.N * g.in_pixels(), g.C, taps * g.K};
    return {g.G, g.K, taps * g.C, g.N * g.out_pixels()};
}

// cuda direct kernels (KernelInfo.schedule 2): the kernel specialised for the problem's
// channels per group first, then by how well its threads fill the GPU (2048 per SM); the
// generic kernel (micro_m 0: any channel count) last.
double direct_cost(const KernelInfo& k, const ConvGeometry& g, int direction, int sms) {
    if (k.micro_m == 0) return 1e9;
    const int64_t pixels_w = direction == TD_CONV_BWD_DATA ? g.in[2] : g.out[2];
    const int64_t rows = g.N * (direction == TD_CONV_BWD_DATA ? g.in[0] * g.in[1] : g.out[0] * g.out[1]);
    const int64_t items = direction == TD_CONV_BWD_WEIGHT
        ? INT64_MAX
        : rows * ((pixels_w + k.tile_m - 1) / k.tile_m) * (g.G * k.micro_m / std::max(1, k.tile_n));
    const double fill = (double)sms * 2048.0;
    // among equals, 4 output pixels per thread (measured on the H200, bench/RESULTS.md)
    const double pixels = k.tile_m == 4 ? 0.0 : 0.01;
    return 1.0 + pixels + (items < fill ? (fill / (double)items - 1.0) * 0.05 : 0.0);
}

// Dense problems (G = 1) on CUTLASS: the implicit-GEMM convolution (schedule 5) or a GEMM
// over an im2col buffer (schedule 4), always ahead of the direct kernels (cost < 0.5).
// Measured on the H200 (bench/RESULTS.md), three bands:
//  [0.0, 0.1) im2col where the problem is a plain GEMM forward (1x1, stride 1, no padding):
//             its clustered GEMM beat the implicit kernel (35.6 vs 40.4 us, ResNet 1x1
//             512->2048), though not backward (49 vs 35 us bwd_data);
//  [0.1, 0.2) the implicit kernels; forward and bwd_data by the GEMM wave model, each extra
//             tile along GEMM N (the weights' side) costing 2% (64x256 beat 128x128 at 3x3
//             256->256: 49.6 vs 52.7 us); bwd_weight (a short M x N, a long K) by a
//             one-wave model (below);
//  [0.2, 0.3) im2col elsewhere (2-3x behind: the buffer's write and read).
double cutlass_conv_cost(const TdConvProblem& p, const ConvGeometry& g, const KernelInfo& k, int workers) {
    const GemmShape s = gemm_shape(g, p.base.direction);
    const auto band = [](double lo, double x) { return lo + 0.1 * x / (x + 1.0); };  // x >= 0, monotone
    const int64_t tiles_n = (s.n + k.tile_n - 1) / k.tile_n;
    if (k.schedule == 4) {
        const bool plain_gemm = g.taps() == 1 && g.stride[0] * g.stride[1] * g.stride[2] == 1 &&
                                g.pad[0] + g.pad[1] + g.pad[2] == 0;
        const double x = predicted_cost(k, s, false, workers, workers) * 1e-9;
        return band(plain_gemm && p.base.direction == TD_CONV_FWD ? 0.0 : 0.2, x);
    }
    if (p.base.direction == TD_CONV_BWD_WEIGHT) {
        // one CTA per SM: fill = the CTAs (times the batch slices) over the SM slots of the
        // waves they take; a tile's speed from its size. H200, 1x1 512->2048 (bench/RESULTS.md):
        // 128x128 36 us on 64 SMs, 64x128 26.2 and 128x64 32.5 on 128, 64x64 40.5 in two
        // waves: speeds 1, 0.69, 0.55, 0.44 ~ (area / 128^2)^0.55, x 0.8 where tile N < tile M.
        // Each slice beyond the first costs 0.1 (its fp32 partial, the reduce): 3x3 256->256
        // 128x128 in 3 slices 55.5 us against 119 unsplit. A split variant at one slice
        // ranks just behind the unsplit kernel of its tile.
        const int split = implicit_wgrad_slices(g, k.tile_m, k.tile_n, k.micro_m, k.micro_n, k.reduction,
                                                p.base.split_k, workers);
        const int64_t ctas = implicit_wgrad_ctas(g, k.tile_m, k.tile_n, k.micro_m, k.micro_n) * split;
        const int64_t waves = (ctas + workers - 1) / workers;
        const double fill = (double)ctas / (double)(waves * workers);
        const double speed = std::pow((double)k.tile_m * k.tile_n / 16384.0, 0.55) * (k.tile_n < k.tile_m ? 0.8 : 1.0);
        return band(0.1, 1.0 / (fill * speed) + 0.1 * (split - 1) + (k.reduction > 1 ? 0.01 : 0.0));
    }
    const double x = predicted_cost(k, s, false, workers, workers) * 1e-9 * (1.0 + 0.02 * (double)(tiles_n - 1));
    return band(0.1, x);
}

// The cost model's prediction for one kernel (arbitrary units; lower is faster).
double cost_of(const TdConvProblem& p, const ConvGeometry& g, const KernelInfo& k, int workers) {
    if (k.schedule == 2) return direct_cost(k, g, p.base.direction, workers);
    // tensor cores (bench/RESULTS.md, H200): 14x faster than the direct kernels at 16
    // channels per group, slower at 4 and 8: first from 16 up, else behind the direct ones
    if (k.schedule == 3) return k.micro_m >= 16 ? 0.5 : 1e6;
    if (k.schedule == 4 || k.schedule == 5) return cutlass_conv_cost(p, g, k, workers);
    // tensor cores from shared-memory tiles (conv_mma_tiled.cuh): ahead of the direct and
    // the global-memory mma kernels (H200, bench/conv.py: ResNeXt-50 fwd 65 -> 42 us,
    // ResNeXt-101 196 -> 72, 3D 16 per group 284 -> 102); pixels per block nearest 256 (the
    // fastest in every direction in the last run: bwd_weight ResNeXt-50 66.8 us against
    // 71.4 at 512, ResNeXt-101 97.7 against 112), then 32 channels per block before 16.
    // Below 4 channels per group (1/8 of the MMA's work useful) they lost to the direct
    // kernels on every depthwise problem there: behind them (ahead of the generic one only).
    if (k.schedule == 6)
        return (k.micro_m >= 4 ? 0.4 : 1e6) + 0.0005 * (k.tile_n < 32) +
               0.001 * std::fabs(std::log2((double)k.tile_m / 256.0));
    // depthwise on tensor cores (conv_depthwise_mma.cuh; fwd and bwd_data, 2D). Measured on
    // the H200 against the CUDA-core depthwise kernels (bench/conv.py --every, bf16 fwd):
    // ahead from 5x5 up (7x7 at 14 / 28 / 56 pixels 20.4 / 30.2 / 54.6 us against 35.2 / 57.5
    // / 107.8, 5x5 at 28 26.9 against 33.9), behind at 3x3 (MobileNetV2 57.1 against 47.5;
    // the planes' transposition costs more than 9 FMAs a pixel). Among its tiles, the least
    // padded area (rows in tiles, columns in tiles), then 16 rows, 32 columns (tiles by TMA,
    // filter pairs: 7x7 at 28 x 28 16x32x16 23.9-24.3 us, 32x32x16 25.3; at 56 x 56 41.6-41.9
    // against 42.0; at 14 x 14 16x16x16 17.4-17.8 against 22.9-23.0 at 16x32); on small images
    // (a 7x7 image fills a fifth of a 16 x 16 tile) the waste puts it behind the CUDA-core
    // kernels.
    if (k.schedule == 8) {
        const int64_t h = p.base.direction == TD_CONV_BWD_DATA ? g.in[1] : g.out[1];
        const int64_t w = p.base.direction == TD_CONV_BWD_DATA ? g.in[2] : g.out[2];
        const int64_t ph = (h + k.tile_m - 1) / k.tile_m * k.tile_m, pw = (w + k.tile_n - 1) / k.tile_n * k.tile_n;
        const double waste = (double)(ph * pw) / (double)(h * w) - 1.0;
        const double tiles = 0.0001 * std::abs(k.tile_m - 16) + 0.0001 * std::abs(k.tile_n - 32) +
                             0.0001 * std::abs(k.tile_k - 16);
        // grouped (toeplitz_mma, opt-in): level with tiled_mma on ResNeXt-50 (fwd 38.2 against
        // 37.7 us, bwd_data 38.5 against 37.9): behind it
        if (k.micro_m > 1) return 0.45 + 0.1 * waste + tiles;
        // bwd_weight (rows streamed through TMA rings, Hankel MMAs): ahead of the sliding
        // CUDA-core kernel from 5x5 up (H200, bench/conv.py --every: 7x7 at 14 / 28 / 56 pixels
        // 19.2 / 27.4 / 41.4 us against 35.5 / 49.6 / 82.6, 5x5 at 28 27.0 against 35.0), behind
        // it at 3x3 (MobileNetV2 85.9 against 49.9), ahead of the direct kernels. Among its
        // tiles (input rows a step x columns x channels) the fewest padded columns, then 32
        // columns (28 x 28: 4x32x32 27.4 us, 8x16x32 28.7; 14 x 14: 8x16x32 19.2, 4x32x32 28.0).
        if (p.base.direction == TD_CONV_BWD_WEIGHT) {
            const int64_t wo = g.out[2], cols = (wo + k.tile_n - 1) / k.tile_n * k.tile_n;
            return (g.fil[1] >= 5 ? 0.3 : 0.4) + 0.1 * ((double)cols / (double)wo - 1.0) +
                   0.0001 * std::abs(k.tile_n - 32) + 0.0001 * std::abs(k.tile_m - 4) + 0.0001 * std::abs(k.tile_k - 32);
        }
        return (g.fil[1] <= 3 ? 0.36 : 0.3) + 0.1 * waste + tiles;
    }
    // depthwise kernels compiled per filter size (conv_depthwise.cuh): ahead of the direct
    // kernels wherever they take the problem (H200, bench/conv.py: MobileNetV2 3x3 fwd 78 ->
    // 50 us, ConvNeXt 7x7 fwd 87 -> 60, Mamba conv1d fwd 115 -> 72, bwd_weight 122 -> 91,
    // 150 -> 96, 117 -> 97). Rows per thread nearest 3 for filters up to 3 rows, else 4 (the
    // fastest of 1-4 rows there: 3x3 50.5 us at 3 rows, 53.9 at 4; 7x7 59.7 at 4, 65.5 at 3).
    // bwd_weight: the sliding kernel (rows > 1) ahead of the row kernel, 8 columns x 2
    // channels for 3x3, 4 x 1 for larger filters (the fastest in the eighth session's sweep:
    // 3x3 53.6 us against 62.3 at 8x1 and 77.2 for the row kernel; 7x7 52.9 against 68.7 at
    // 2x1 and 90.4); segments of at least 4, 8 or 16 rows measured alike, 8 kept.
    if (k.schedule == 7) {
        const bool wgrad = p.base.direction == TD_CONV_BWD_WEIGHT;
        const int rows = wgrad ? 8 : g.fil[1] <= 3 ? 3 : 4;
        const int cols = wgrad && g.fil[1] <= 3 ? 8 : 4;
        const int chans = !wgrad ? 4 : g.fil[1] <= 3 ? 2 : 1;
        return 0.35 + 0.001 * std::abs(k.tile_m - rows) + 0.0001 * std::abs(k.tile_n - cols) +
               0.0001 * std::abs(k.tile_k - chans);
    }
    return predicted_cost(k, gemm_shape(g, p.base.direction), k.reduction >= 0,
                          p.base.split_k > 0 ? p.base.split_k : workers, workers);
}

int ranked(const TdConvProblem* p, const char* name, std::vector<const ConvKernel*>* out) {
    ConvGeometry g{};
    if (int s = check_problem(p, &g)) return s;
    const int workers = device::multiprocessors();
    auto cost = [&](const KernelInfo& k) { return cost_of(*p, g, k, workers); };
    return rank(conv_table, conv_table_size, *p, name, cost, out);
}

int pick(const TdConvProblem* p, const char* name, const ConvKernel** out) {
    std::vector<const ConvKernel*> list;
    *out = nullptr;
    if (int s = ranked(p, name, &list)) return s;
    *out = list.front();
    return TD_OK;
}

int run(const TdConvProblem* p, const char* name, const void* in, const void* wei, void* out, void* ws,
        size_t ws_bytes, void* stream, float* time_ms) {
    std::vector<const ConvKernel*> list;
    if (int s = ranked(p, name, &list)) return s;
    if (!in || !wei || !out) return fail(TD_ERROR, "input, weight and output must not be NULL");
    return run_first_accepting(list, stream, time_ms,
                               [&](const ConvKernel* k) { return k->run(*p, in, wei, out, ws, ws_bytes, stream); });
}

struct DeviceBuffer {
    void* ptr = nullptr;
    ~DeviceBuffer() { device::release(ptr); }
};

// Host pointers: copy the tensors in, run, copy the written one back.
int run_host(const TdConvProblem* p, const char* name, const void* in, const void* wei, void* out,
             float* time_ms) {
    ConvGeometry g{};
    if (int s = check_problem(p, &g)) return s;
    if (!in || !wei || !out) return fail(TD_ERROR, "input, weight and output must not be NULL");
    if (device::host_is_device()) return run(p, name, in, wei, out, nullptr, 0, nullptr, time_ms);
    const int64_t elem = p->dtype == TD_FP32 ? 4 : (p->dtype == TD_FP16 || p->dtype == TD_BF16) ? 2 : 1;
    const int64_t out_elem = p->dtype == TD_FP32 ? 4 : 2;
    const int dir = p->base.direction;
    const size_t sizes[3] = {
        (size_t)(g.N * g.in_pixels() * g.G * g.C * (dir == TD_CONV_BWD_DATA ? out_elem : elem)),
        (size_t)(g.G * g.K * g.taps() * g.C * (dir == TD_CONV_BWD_WEIGHT ? out_elem : elem)),
        (size_t)(g.N * g.out_pixels() * g.G * g.K * (dir == TD_CONV_FWD ? out_elem : elem))};
    const void* host[3] = {in, wei, out};
    const int written = dir == TD_CONV_FWD ? 2 : dir == TD_CONV_BWD_DATA ? 0 : 1;
    DeviceBuffer dev[3];
    for (int i = 0; i < 3; ++i) {
        if (int s = device::allocate(&dev[i].ptr, sizes[i])) return s;
        if (i != written)
            if (int s = device::copy_to_device(dev[i].ptr, host[i], sizes[i], nullptr)) return s;
    }
    if (int s = run(p, name, dev[0].ptr, dev[1].ptr, dev[2].ptr, nullptr, 0, nullptr, time_ms)) return s;
    return device::copy_to_host(const_cast<void*>(host[written]), dev[written].ptr, sizes[written], nullptr);
}

}  // namespace
}  // namespace td

using namespace td;

extern "C" {

TD_API int conv_dispatcher_init(void) { return TD_OK; }

TD_API int conv_dispatcher_is_supported(const ConvProblemC* p) {
    return guarded([&]() -> int {
        if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
        const TdConvProblem e = legacy_problem(p);
        const ConvKernel* k = nullptr;
        const int s = pick(&e, nullptr, &k);
        return s == TD_OK ? 1 : s == (int)TD_UNSUPPORTED ? 0 : s;
    });
}

TD_API int conv_dispatcher_select_kernel(const ConvProblemC* p, char* name, int size) {
    return guarded([&]() -> int {
        if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
        const TdConvProblem e = legacy_problem(p);
        const ConvKernel* k = nullptr;
        if (int s = pick(&e, nullptr, &k)) return s;
        return copy_name(k->info.name, name, size < 0 ? 0 : (size_t)size);
    });
}

TD_API int conv_dispatcher_run(const void* input, const void* weight, void* output, const ConvProblemC* p,
                               float* time_ms) {
    return guarded([&]() -> int {
        if (!p) return fail(TD_ERROR, "the problem pointer is NULL");
        const TdConvProblem e = legacy_problem(p);
        return run_host(&e, nullptr, input, weight, output, time_ms);
    });
}

TD_API int conv_dispatcher_get_kernel_count(void) { return (int)conv_table_size; }
TD_API const char* conv_dispatcher_export_registry_json(void) { return table_registry_json; }
TD_API void conv_dispatcher_cleanup(void) {}

TD_API int td_conv_is_supported(const TdConvProblem* p, const char* kernel) {
    return guarded([&]() -> int {
        const ConvKernel* k = nullptr;
        const int s = pick(p, kernel, &k);
        return s == TD_OK ? 1 : (s == (int)TD_UNSUPPORTED || s == (int)TD_REJECTED) ? 0 : s;
    });
}

TD_API int td_conv_select(const TdConvProblem* p, char* name, size_t size) {
    return guarded([&]() -> int {
        const ConvKernel* k = nullptr;
        if (int s = pick(p, nullptr, &k)) return s;
        return copy_name(k->info.name, name, size);
    });
}

TD_API int td_conv_cost(const TdConvProblem* p, const char* kernel, double* cost) {
    return guarded([&]() -> int {
        if (!cost) return fail(TD_ERROR, "cost must not be NULL");
        if (!kernel || !*kernel) return fail(TD_ERROR, "td_conv_cost needs a kernel name");
        const ConvKernel* k = nullptr;
        if (int s = pick(p, kernel, &k)) return s;
        ConvGeometry g{};
        if (int s = check_problem(p, &g)) return s;
        *cost = cost_of(*p, g, k->info, device::multiprocessors());
        return TD_OK;
    });
}

TD_API int td_conv_workspace_size(const TdConvProblem* p, const char* kernel, size_t* bytes) {
    return guarded([&]() -> int {
        if (!bytes) return fail(TD_ERROR, "bytes must not be NULL");
        const ConvKernel* k = nullptr;
        if (int s = pick(p, kernel, &k)) return s;
        *bytes = k->workspace_size(*p);
        return TD_OK;
    });
}

TD_API int td_conv_run(const TdConvProblem* p, const char* kernel, const void* input, const void* weight,
                       void* output, void* workspace, size_t workspace_bytes, void* stream,
                       float* time_ms) {
    return guarded([&]() -> int { return run(p, kernel, input, weight, output, workspace, workspace_bytes, stream, time_ms); });
}

TD_API int td_conv_run_host(const TdConvProblem* p, const char* kernel, const void* input, const void* weight,
                            void* output, float* time_ms) {
    return guarded([&]() -> int { return run_host(p, kernel, input, weight, output, time_ms); });
}

}  // extern "C"
