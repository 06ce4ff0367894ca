// The cublaslt family's cost-model entry (cuda/gemm_cublaslt.cuh): cuBLASLt modelled as the
// best of the CUTLASS sm90 tiles our manifest builds (the GPU wave model, models.hpp) times a
// prior by the problem's short side (min(M, N): the token count of an LLM layer), taken from
// what our pick measured against cuBLAS on the H200 (bench/RESULTS.md):
//   - up to 16 (decode): our skinny kernel 1.05-1.15x in bf16 and fp16, so the vendor is
//     modelled 8% slower; in fp8 the skinny pick fell to 0.81x: the vendor 8% faster;
//   - 17 to 256: our pick 0.91-0.92x (every LLM layer at 32 tokens below 1x): the vendor 8%
//     faster, so it takes these problems unless a table that measured it says otherwise;
//   - above: our pick 0.98-1.05x: the vendor 2% slower, taking the problem where the table's
//     pick models more than 2% worse than the best tile.
// A table that never measured cuBLASLt weighs it through this entry (tuning.hpp); the
// autotuner (TILEDISPATCH_AUTOTUNE=1) measures it.
//
// A feature problem (gemm_features): the same for its batch, plus the bytes its fused
// epilogue moves besides A, B and D (C read, aux written, D's wider type, the bias and scale
// vectors, the block-wise scales) at the DRAM floor's rate; not yet measured.
#include <algorithm>

#include "cost/models.hpp"

namespace td {

// The vendor's time relative to the best modelled tile (see above).
double cublaslt_prior(const TdGemmProblem& p) {
    const int64_t short_side = std::min(p.M, p.N);
    const bool fp8 = p.dtype == TD_FP8_E4M3 || p.dtype == TD_FP8_E5M2;
    if (short_side <= 16) return fp8 ? 0.92 : 1.08;
    if (short_side <= 256) return 0.92;
    return 1.02;
}

namespace {

// The bytes a feature problem's epilogue moves beyond the plain product's A, B and D.
double epilogue_bytes(const TdGemmProblem& p) {
    const double batch = p.batch > 1 ? (double)p.batch : 1.0;
    const double mn = (double)p.M * p.N;
    const int out = p.out_dtype == TD_OUT_FP32 ? 4 : p.out_dtype == TD_OUT_DEFAULT ? (int)out_bytes(p.dtype) : 2;
    double bytes = batch * mn * (out - out_bytes(p.dtype));  // a wider (or narrower) D
    if (p.beta != 0.0f) bytes += batch * mn * out;           // C read
    if (p.aux) bytes += batch * mn * out;                    // aux written
    if (p.bias != TD_BIAS_NONE) bytes += (double)(p.bias == TD_BIAS_N ? p.N : p.M) * out;
    if (p.row_scale) bytes += 4.0 * p.M;
    if (p.col_scale) bytes += 4.0 * p.N;
    if (p.block_scale) {  // read, transposed into the workspace, read again
        const double kb = (double)((p.K + 127) / 128);
        bytes += 3.0 * 4.0 * kb * ((double)p.M + (double)((p.N + 127) / 128));
    }
    return bytes;
}

}  // namespace

double cublaslt_gemm_cost(const KernelInfo& k, const TdGemmProblem& p, const CostContext& ctx) {
    const GemmShape s{p.batch > 1 ? p.batch : 1, p.M, p.N, p.K};
    // every tile shape the manifest builds for sm90 (kernels.yaml), so that the prior weighs the
    // vendor against the best of ours whichever of them a build holds
    static const Sm90Tile tiles[] = {
        {128, 256, 64, 2, 1, false, false}, {256, 128, 64, 1, 2, false, false}, {128, 128, 64, 1, 1, false, false},
        {64, 128, 64, 1, 1, true, false},   {128, 192, 64, 2, 1, true, false},  {64, 256, 64, 2, 1, true, false},
        {64, 64, 64, 2, 1, true, false},    {128, 64, 64, 1, 1, false, false},  {128, 64, 64, 1, 2, true, false},
        {64, 128, 64, 1, 2, true, false},   {128, 128, 64, 2, 1, true, false},  {128, 128, 64, 1, 2, true, false},
        {128, 176, 64, 2, 1, true, false},
    };
    double best = 1e300;
    for (const Sm90Tile& t : tiles) best = std::min(best, sm90_gemm_model(t, s, false, ctx.workers));
    const double plain = std::max(best, gpu_dram_floor(s, k.dtype)) * cublaslt_prior(p);
    if (!gemm_features(p)) return plain;
    // bytes at the DRAM floor's 3.3 TB/s in the model's units (gpu_kernel_start() is 3 us)
    return plain + epilogue_bytes(p) / 3.3e12 * (gpu_kernel_start() / 3e-6);
}

}  // namespace td
