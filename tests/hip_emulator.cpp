// Host emulator of the hip backend's kernels (bindings/hip/mfma_engine.hpp, operands.hpp):
// the same engine code the gfx942 kernels are built from, every thread of a block run in
// turn per phase and each MFMA computed from the 64 lanes' fragments by the layouts the
// engine assumes. Compiled with the C++ compiler and run by tests/test_hip.py: a wrong
// tile, stream-K range, fix-up, LDS or fragment index shows up as a wrong number here.
// Prints one line per case and exits non-zero when any case is outside tolerance.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hip/epilogue.hpp"
#include "hip/operands.hpp"

using namespace td::hip;

static int failures = 0;

template <class E>
struct HostBlock {
    using S = typename E::S;
    std::vector<S> buf;  // the LDS buffers in one allocation, as on the GPU (the staged store spans them)
    std::vector<typename E::Acc> accs;
    HostBlock() : buf(E::kBuffers * E::kLds, S(0x5a)), accs(E::kThreads) {}  // garbage: read only after a load
    S* lds(int i) { return buf.data() + i * E::kLds; }  // operator new's alignment: fp32 staging is aligned
    typename E::Acc& acc(int tid) { return accs[tid]; }
    template <class F> void for_each_thread(F f) { for (int t = 0; t < E::kThreads; ++t) f(t); }
    void barrier() {}
    // One MFMA per (wave, k step, rm, rn), from the hardware's point of view.
    template <int DT, int MM, int MN, int MK>
    void mfma(const S (&a)[64][E::KPL], const S (&b)[64][E::KPL], int wave, int rm, int rn) {
        float A[MM][MK], B[MK][MN];
        constexpr int kpl = MM * MK / 64;
        for (int lane = 0; lane < 64; ++lane)
            for (int i = 0; i < kpl; ++i) {
                A[lane % MM][kpl * (lane / MM) + i] = decode<DT>(a[lane][i]);
                B[kpl * (lane / MN) + i][lane % MN] = decode<DT>(b[lane][i]);
            }
        for (int lane = 0; lane < 64; ++lane)
            for (int j = 0; j < MM * MN / 64; ++j) {
                const int row = (j / 4) * 4 * (64 / MN) + 4 * (lane / MN) + j % 4, col = lane % MN;
                float sum = 0.f;
                for (int k = 0; k < MK; ++k) sum += A[row][k] * B[k][col];
                accs[wave * 64 + lane].v[rm][rn][j] += sum;
            }
    }
    template <int DT, int MM, int MN, int MK>
    void mma_as(const S* l) {
        for (int wave = 0; wave < E::kThreads / 64; ++wave)
            for (int kk = 0; kk < E::kTK; kk += MK)
                for (int rm = 0; rm < E::RM; ++rm)
                    for (int rn = 0; rn < E::RN; ++rn) {
                        S a[64][E::KPL], b[64][E::KPL];
                        for (int lane = 0; lane < 64; ++lane) E::fragment(l, wave, lane, kk, rm, rn, a[lane], b[lane]);
                        mfma<E::kDType, E::kMM, E::kMN, E::kMK>(a, b, wave, rm, rn);
                    }
    }
    void mma(const S* l) { mma_as<E::kDType, E::kMM, E::kMN, E::kMK>(l); }
};

template <int DT> static typename Storage<DT>::type random_elem(std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    if constexpr (DT == 1) return float_to_half(u(rng));
    else if constexpr (DT == 2) return float_to_bf16(u(rng));
    else {
        for (;;) {  // a finite fp8 value of magnitude below 4
            const uint8_t v = (uint8_t)(rng() & 0xff);
            const float f = decode<DT>(v);
            if (std::isfinite(f) && std::fabs(f) < 4.f) return v;
        }
    }
}

template <int DT> static float out_to_float(uint16_t v) { return DT == 1 ? half_to_float(v) : bf16_to_float(v); }

static double tolerance(int dt, int64_t k) {
    return 8.0 * std::ldexp(1.0, -24) * std::sqrt((double)std::max<int64_t>(k, 1)) + std::ldexp(1.0, dt == 1 ? -11 : -8);
}

// Runs the grid of one problem through the engine: data-parallel or stream-K + fix-up.
template <class E, class Ops>
static void run_grid(const Ops& ops, int64_t batches, bool streamk, bool atomic, int64_t units, float alpha = 1.f) {
    const Grid g{batches, (ops.M + E::kTM - 1) / E::kTM, (ops.N + E::kTN - 1) / E::kTN, (ops.K + E::kTK - 1) / E::kTK};
    auto add = [](float* p, float v) { *p += v; };
    if (!streamk) {
        for (int64_t b = 0; b < g.tiles(); ++b) {
            HostBlock<E> blk;
            run_block<E>(blk, ops, g, false, StreamK{}, false, nullptr, b, alpha, add);
        }
        return;
    }
    const StreamK sk = StreamK::make(g, units);
    std::vector<float> ws(streamk_workspace_floats<E::kTM, E::kTN>(sk, atomic), atomic ? 0.f : NAN);
    for (int64_t u = 0; u < sk.units; ++u) {
        HostBlock<E> blk;
        run_block<E>(blk, ops, g, true, sk, atomic, ws.data(), u, alpha, add);
    }
    for (int64_t t = 0; t < g.tiles(); ++t) {
        HostBlock<E> blk;
        fixup_tile<E>(blk, ops, sk, atomic, ws.data(), t, alpha);
    }
}

template <class E>
static void report(const std::string& what, const std::vector<uint16_t>& got, const std::vector<double>& ref,
                   const std::vector<double>& mag, int64_t k) {
    int64_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(out_to_float<E::kDType>(got[i]) - ref[i]);
        worst = std::max(worst, err);
        if (!(err <= tolerance(E::kDType, k) * mag[i] + 1e-30)) ++bad;
    }
    std::printf("%s %s: %zu outputs, %lld outside tolerance, max error %.3g\n", bad ? "FAIL" : "ok  ", what.c_str(),
                got.size(), (long long)bad, worst);
    failures += bad != 0;
}

template <class E, int Layout>
static void gemm_case(const char* name, int64_t M, int64_t N, int64_t K, bool streamk, bool atomic, int64_t units) {
    constexpr int DT = E::kDType;
    using S = typename E::S;
    std::mt19937 rng(1234 + M + N + K);
    const bool a_row = Layout == 0 || Layout == 1, b_row = Layout == 1 || Layout == 2;
    const int64_t lda = (a_row ? K : M) + 3, ldb = (b_row ? N : K) + 5, ldc = N + 2;  // padded
    std::vector<S> A((a_row ? M : K) * lda), B((b_row ? K : N) * ldb);
    for (auto& v : A) v = random_elem<DT>(rng);
    for (auto& v : B) v = random_elem<DT>(rng);
    std::vector<uint16_t> C(M * ldc, 0xffff);
    GemmOps<DT, Layout> ops{A.data(), B.data(), C.data(), M, N, K, lda, ldb, ldc};
    run_grid<E>(ops, 1, streamk, atomic, units);
    std::vector<uint16_t> got;
    std::vector<double> ref, mag;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double x = decode<DT>(a_row ? A[m * lda + k] : A[k * lda + m]);
                const double y = decode<DT>(b_row ? B[k * ldb + n] : B[n * ldb + k]);
                s += x * y;
                a += std::fabs(x * y);
            }
            got.push_back(C[m * ldc + n]);
            ref.push_back(s);
            mag.push_back(a);
        }
    char what[256];
    std::snprintf(what, sizeof what, "gemm %s %lldx%lldx%lld %s", name, (long long)M, (long long)N, (long long)K,
                  streamk ? (atomic ? "stream-K atomic" : "stream-K deterministic") : "data-parallel");
    report<E>(what, got, ref, mag, K);
    // padding columns of C untouched
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = N; n < ldc; ++n)
            if (C[m * ldc + n] != 0xffff) { std::printf("FAIL %s wrote outside C\n", what); ++failures; return; }
}

template <class E, int Dir>
static void conv_case(const char* name, ConvShape s) {
    constexpr int DT = E::kDType;
    using S = typename E::S;
    std::mt19937 rng(99 + Dir);
    for (int d = 0; d < 3; ++d)
        s.out[d] = (s.in[d] + 2 * s.pad[d] - s.dil[d] * (s.fil[d] - 1) - 1) / s.stride[d] + 1;
    std::vector<S> x(s.n * s.in_pixels() * s.g * s.c), w(s.g * s.k * s.taps() * s.c), dy(s.n * s.out_pixels() * s.g * s.k);
    for (auto& v : x) v = random_elem<DT>(rng);
    for (auto& v : w) v = random_elem<DT>(rng);
    for (auto& v : dy) v = random_elem<DT>(rng);
    const size_t out_size = Dir == 0 ? dy.size() : Dir == 1 ? x.size() : w.size();
    std::vector<uint16_t> out(out_size, 0xffff);
    std::vector<double> ref(out_size, 0.0), mag(out_size, 0.0);
    // direct loops over every (n, output pixel, group, k, tap, c)
    for (int64_t n = 0; n < s.n; ++n)
        for (int64_t o = 0; o < s.out_pixels(); ++o)
            for (int64_t tap = 0; tap < s.taps(); ++tap) {
                int64_t oc[3], f[3], pos[3];
                ConvOps<DT, 0>::decode3(o, s.out, oc);
                ConvOps<DT, 0>::decode3(tap, s.fil, f);
                bool inside = true;
                for (int d = 0; d < 3; ++d) {
                    pos[d] = oc[d] * s.stride[d] - s.pad[d] + f[d] * s.dil[d];
                    inside = inside && pos[d] >= 0 && pos[d] < s.in[d];
                }
                if (!inside) continue;
                const int64_t ip = ((n * s.in[0] + pos[0]) * s.in[1] + pos[1]) * s.in[2] + pos[2];
                for (int64_t g = 0; g < s.g; ++g)
                    for (int64_t k = 0; k < s.k; ++k)
                        for (int64_t c = 0; c < s.c; ++c) {
                            const int64_t xi = (ip * s.g + g) * s.c + c, wi = ((g * s.k + k) * s.taps() + tap) * s.c + c;
                            const int64_t yi = ((n * s.out_pixels() + o) * s.g + g) * s.k + k;
                            const double xv = decode<DT>(x[xi]), wv = decode<DT>(w[wi]), gv = decode<DT>(dy[yi]);
                            const int64_t at = Dir == 0 ? yi : Dir == 1 ? xi : wi;
                            const double term = Dir == 0 ? xv * wv : Dir == 1 ? gv * wv : gv * xv;
                            ref[at] += term;
                            mag[at] += std::fabs(term);
                        }
            }
    auto ops = ConvOps<DT, Dir>::make(s, x.data(), w.data(), dy.data(), out.data());
    run_grid<E>(ops, s.g, false, false, 0);
    char what[128];
    std::snprintf(what, sizeof what, "conv %s %s", Dir == 0 ? "fwd" : Dir == 1 ? "bwd_data" : "bwd_weight", name);
    report<E>(what, out, ref, mag, ops.K);
}

// ---------------------------------------------------------------- the generic epilogue
// Element of the output type (enum td_out_dtype) <-> double, for the reference.
static double out_value(const std::vector<uint8_t>& buf, int64_t at, int out) {
    return load_elem(buf.data(), at, out);
}

static double act_ref(int act, double x) {
    switch (act) {
        case TD_ACT_RELU: return x < 0 ? 0 : x;
        case TD_ACT_GELU: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));  // = x / 2 * (1 + erf(x / sqrt 2))
        case TD_ACT_GELU_TANH:  // x / 2 * (1 + tanh u) without the cancellation for negative x
            return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        case TD_ACT_SILU: return x / (1.0 + std::exp(-x));
        default: return x;
    }
}

template <int Act> static float act_f32(float x) { return activate<Act>(x); }
static float act_dev(int act, float x) {
    switch (act) {
        case TD_ACT_RELU: return act_f32<TD_ACT_RELU>(x);
        case TD_ACT_GELU: return act_f32<TD_ACT_GELU>(x);
        case TD_ACT_GELU_TANH: return act_f32<TD_ACT_GELU_TANH>(x);
        case TD_ACT_SILU: return act_f32<TD_ACT_SILU>(x);
        default: return x;
    }
}

// The fp32 activations (no device library) against the double ones, x in [-30, 30]:
// relative error below 2e-6 plus 4 ulp of the exponential's argument (its rounding in fp32
// scales the result: x^2 / 2 for gelu, 2u for gelu_tanh, x for silu); 1e-37 absolute where
// the result underflows.
static void activation_case() {
    for (int act = TD_ACT_RELU; act <= TD_ACT_SILU; ++act) {
        double worst = 0;
        int64_t bad = 0, n = 0;
        for (double x = -30.0; x <= 30.0; x += 0.0137, ++n) {
            const double got = act_dev(act, (float)x), ref = act_ref(act, (double)(float)x);
            const double err = std::fabs(got - ref), rel = err / std::max(std::fabs(ref), 1e-30);
            const double arg = act == TD_ACT_GELU ? x * x / 2
                               : act == TD_ACT_GELU_TANH ? std::fabs(1.5957691 * (x + 0.044715 * x * x * x))
                                                         : std::fabs(x);
            if (!(err <= (2e-6 + 2.4e-7 * arg) * std::fabs(ref) + 1e-37)) ++bad;
            if (std::fabs(ref) > 1e-30) worst = std::max(worst, rel);
        }
        const bool nan_ok = std::isnan(act_dev(act, NAN));
        std::printf("%s activation %d (fp32 math): %lld points, %lld outside tolerance, max relative error %.3g%s\n",
                    bad || !nan_ok ? "FAIL" : "ok  ", act, (long long)n, (long long)bad, worst,
                    nan_ok ? "" : ", NaN not kept");
        failures += bad != 0 || !nan_ok;
    }
}

struct EpilogueCase {
    int64_t M, N, K, batch;
    bool broadcast_a, broadcast_b;  // stride 0 over the batch
    float alpha, beta;              // beta != 0: C is read
    bool c_is_d;                    // C aliases D
    int bias, act;                  // enum td_bias, td_activation
    bool aux, row_scale, col_scale;
    int out;                        // enum td_out_dtype (resolved)
    bool streamk, atomic;
    int64_t units;
};

template <class E, int Layout, int Act>
static void epilogue_case_as(const char* name, const EpilogueCase& t) {
    constexpr int DT = E::kDType;
    using S = typename E::S;
    std::mt19937 rng(77 + t.M + t.N + t.K + Act);
    std::uniform_real_distribution<float> u(-1.f, 1.f), pos(0.5f, 2.f);
    const bool a_row = Layout == 0 || Layout == 1, b_row = Layout == 1 || Layout == 2;
    const int64_t M = t.M, N = t.N, K = t.K, G = t.batch;
    const int64_t lda = (a_row ? K : M) + 3, ldb = (b_row ? N : K) + 5, ldc = N + 2;
    const int64_t span_a = (a_row ? M : K) * lda, span_b = (b_row ? K : N) * ldb, span_c = M * ldc + 7;
    const int64_t stride_a = t.broadcast_a ? 0 : span_a, stride_b = t.broadcast_b ? 0 : span_b;
    std::vector<S> A(t.broadcast_a ? span_a : G * span_a), B(t.broadcast_b ? span_b : G * span_b);
    for (auto& v : A) v = random_elem<DT>(rng);
    for (auto& v : B) v = random_elem<DT>(rng);
    const int ob = t.out == TD_OUT_FP32 ? 4 : 2;
    auto fill = [&](std::vector<uint8_t>& buf, int64_t count) {
        buf.assign(count * ob, 0);
        for (int64_t i = 0; i < count; ++i) store_elem(buf.data(), i, t.out, 2.f * u(rng));
    };
    std::vector<uint8_t> D(G * span_c * ob, 0xff), C, bias, aux(G * span_c * ob, 0xff);
    fill(C, G * span_c);
    if (t.c_is_d) D = C;
    fill(bias, t.bias == TD_BIAS_M ? M : N);
    std::vector<float> rs(M), cs(N);
    for (auto& v : rs) v = pos(rng);
    for (auto& v : cs) v = pos(rng);
    const std::vector<uint8_t> C0 = C;  // C as it was (D overwrites it when they alias)
    EpilogueGemmOps<DT, Layout, Act> ops{A.data(), B.data(), D.data(),
                                         t.beta != 0.f ? (t.c_is_d ? (const void*)D.data() : C.data()) : nullptr,
                                         t.bias ? bias.data() : nullptr, t.aux ? aux.data() : nullptr,
                                         t.row_scale ? rs.data() : nullptr, t.col_scale ? cs.data() : nullptr,
                                         M, N, K, lda, ldb, ldc, stride_a, stride_b, span_c, t.beta, t.bias, t.out};
    run_grid<E>(ops, G, t.streamk, t.atomic, t.units, t.alpha);
    // reference in double; tolerance relative to the magnitude of every term
    const double eps_out = std::ldexp(1.0, t.out == TD_OUT_FP32 ? -23 : t.out == TD_OUT_FP16 ? -10 : -7);
    const double tol = 8.0 * std::ldexp(1.0, -24) * std::sqrt((double)K) + eps_out;
    int64_t bad = 0, bad_aux = 0, outside = 0;
    double worst = 0;
    for (int64_t g = 0; g < G; ++g) {
        const S* a = A.data() + g * stride_a;
        const S* b = B.data() + g * stride_b;
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                double sum = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const double x = decode<DT>(a_row ? a[m * lda + k] : a[k * lda + m]);
                    const double y = decode<DT>(b_row ? b[k * ldb + n] : b[n * ldb + k]);
                    sum += x * y;
                    mag += std::fabs(x * y);
                }
                double scale = t.alpha;
                if (t.row_scale) scale *= rs[m];
                if (t.col_scale) scale *= cs[n];
                const int64_t at = g * span_c + m * ldc + n;
                double pre = scale * sum;
                mag *= std::fabs(scale);
                if (t.beta != 0.f) {
                    const double c = out_value(C0, at, t.out);
                    pre += (double)t.beta * c;
                    mag += std::fabs((double)t.beta * c);
                }
                if (t.bias) {
                    const double bv = out_value(bias, t.bias == TD_BIAS_M ? m : n, t.out);
                    pre += bv;
                    mag += std::fabs(bv);
                }
                const double ref = act_ref(Act, pre);
                const double got = load_elem(D.data(), at, t.out);
                const double err = std::fabs(got - ref);
                worst = std::max(worst, err);
                // the activation's slope is at most 1.13 (gelu); its own rounding adds eps_out
                if (!(err <= 1.2 * tol * mag + eps_out * std::fabs(ref) + 1e-30)) ++bad;
                if (t.aux && !(std::fabs(load_elem(aux.data(), at, t.out) - pre) <= tol * mag + 1e-30)) ++bad_aux;
            }
        // nothing written outside the matrices: the padding columns of D (and aux) keep their bytes
        const std::vector<uint8_t> untouched(G * span_c * ob, 0xff);
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = N; n < ldc; ++n) {
                const int64_t at = (g * span_c + m * ldc + n) * ob;
                const auto& before = t.c_is_d ? C0 : untouched;
                if (std::memcmp(&D[at], &before[at], ob)) ++outside;
                if (t.aux && std::memcmp(&aux[at], &untouched[at], ob)) ++outside;
            }
    }
    char what[320];
    std::snprintf(what, sizeof what,
                  "epilogue %s %lldx%lldx%lld batch %lld%s%s alpha %g beta %g%s bias %d act %d%s%s%s out %d %s", name,
                  (long long)M, (long long)N, (long long)K, (long long)G, t.broadcast_a ? " A broadcast" : "",
                  t.broadcast_b ? " B broadcast" : "", t.alpha, t.beta, t.c_is_d ? " (C is D)" : "", t.bias, Act,
                  t.aux ? " aux" : "", t.row_scale ? " row_scale" : "", t.col_scale ? " col_scale" : "", t.out,
                  t.streamk ? (t.atomic ? "stream-K atomic" : "stream-K deterministic") : "data-parallel");
    const bool fail = bad || bad_aux || outside;
    std::printf("%s %s: %lld outputs, %lld outside tolerance, %lld aux outside, %lld written outside, max error %.3g\n",
                fail ? "FAIL" : "ok  ", what, (long long)(G * M * N), (long long)bad, (long long)bad_aux,
                (long long)outside, worst);
    failures += fail;
}

template <class E, int Layout>
static void epilogue_case(const char* name, const EpilogueCase& t) {
    switch (t.act) {
        case TD_ACT_NONE: return epilogue_case_as<E, Layout, TD_ACT_NONE>(name, t);
        case TD_ACT_RELU: return epilogue_case_as<E, Layout, TD_ACT_RELU>(name, t);
        case TD_ACT_GELU: return epilogue_case_as<E, Layout, TD_ACT_GELU>(name, t);
        case TD_ACT_GELU_TANH: return epilogue_case_as<E, Layout, TD_ACT_GELU_TANH>(name, t);
        default: return epilogue_case_as<E, Layout, TD_ACT_SILU>(name, t);
    }
}

// Engine with its MFMA shape and dtype visible to the emulator.
template <int DT, int TM, int TN, int TK, int WM, int WN, int MM, int MN, int MK, bool Pad, bool DB>
struct E : Engine<DT, TM, TN, TK, WM, WN, MM, MN, MK, Pad, DB> {
    static constexpr int kDType = DT, kMM = MM, kMN = MN, kMK = MK;
};

int main() {
    using F16 = E<1, 64, 64, 32, 2, 2, 32, 32, 8, true, true>;
    using BF16 = E<2, 64, 128, 32, 1, 4, 16, 16, 16, true, false>;
    using FP8 = E<5, 128, 64, 64, 4, 1, 32, 32, 16, true, true>;
    using BF8 = E<6, 64, 64, 64, 2, 2, 16, 16, 32, true, false>;
    using OCP8 = E<3, 64, 64, 64, 4, 1, 16, 16, 32, true, true>;
    gemm_case<F16, 0>("fp16 rcr w2x2 m32x32x8 compv3", 100, 70, 50, false, false, 0);
    gemm_case<F16, 0>("fp16 rcr w2x2 m32x32x8 compv3", 130, 90, 300, true, false, 7);
    gemm_case<F16, 0>("fp16 rcr w2x2 m32x32x8 compv3", 130, 90, 300, true, true, 7);
    gemm_case<F16, 3>("fp16 ccr w2x2 m32x32x8 compv3", 64, 128, 96, true, false, 5);
    gemm_case<BF16, 2>("bf16 crr w1x4 m16x16x16 mem", 77, 150, 64, false, false, 0);
    gemm_case<BF16, 1>("bf16 rrr w1x4 m16x16x16 mem", 200, 260, 33, true, true, 3);
    gemm_case<FP8, 0>("fp8 e4m3 fnuz rcr w4x1 m32x32x16 compv3", 130, 70, 200, false, false, 0);
    gemm_case<FP8, 0>("fp8 e4m3 fnuz rcr w4x1 m32x32x16 compv3", 256, 64, 640, true, false, 11);
    gemm_case<BF8, 0>("fp8 e5m2 fnuz rcr w2x2 m16x16x32 mem", 65, 65, 130, false, false, 0);
    gemm_case<OCP8, 0>("fp8 e4m3 ocp rcr w4x1 m16x16x32 compv3", 70, 40, 200, true, true, 4);
    ConvShape s2{2, 3, 5, 4, {1, 11, 9}, {1, 3, 2}, {}, {1, 2, 1}, {0, 1, 1}, {1, 1, 2}};
    conv_case<F16, 0>("2D fp16 stride 2x1 dilation 1x2", s2);
    conv_case<F16, 1>("2D fp16 stride 2x1 dilation 1x2", s2);
    conv_case<F16, 2>("2D fp16 stride 2x1 dilation 1x2", s2);
    ConvShape s3{2, 2, 8, 8, {4, 5, 6}, {3, 3, 3}, {}, {1, 1, 2}, {1, 1, 1}, {1, 1, 1}};
    conv_case<BF16, 0>("3D bf16 stride 1x1x2", s3);
    conv_case<BF16, 2>("3D bf16 stride 1x1x2", s3);
    ConvShape s1{3, 4, 1, 1, {1, 1, 40}, {1, 1, 4}, {}, {1, 1, 1}, {0, 0, 3}, {1, 1, 1}};
    conv_case<F16, 1>("1D depthwise fp16 causal width 4", s1);
    // the generic epilogue (fusion: generic): every activation, bias along N and M, beta with C
    // apart and C aliasing D, aux, row and column scales, fp32 / fp16 / bf16 outputs, batches
    // with A or B broadcast, data-parallel and both stream-K reductions
    activation_case();
    using BF16Big = E<2, 128, 128, 32, 2, 2, 32, 32, 8, true, true>;  // the manifest's generic tile
    //                                      M    N   K  batch bcA    bcB    alpha  beta  C=D    bias       act
    epilogue_case<F16, 0>("fp16 rcr w2x2 m32x32x8 compv3",
                          {100, 70, 50, 1, false, false, 1.f, 0.5f, false, TD_BIAS_N, TD_ACT_RELU, true, false, false,
                           TD_OUT_FP16, false, false, 0});
    epilogue_case<BF16Big, 0>("bf16 rcr w2x2 m32x32x8 compv3 128x128x32",
                              {200, 150, 70, 1, false, false, 0.75f, -1.25f, true, TD_BIAS_M, TD_ACT_GELU, true, true,
                               true, TD_OUT_BF16, false, false, 0});
    epilogue_case<F16, 0>("fp16 rcr w2x2 m32x32x8 compv3",
                          {130, 90, 300, 3, false, true, 1.f, 0.f, false, TD_BIAS_N, TD_ACT_GELU_TANH, true, false, true,
                           TD_OUT_FP32, true, true, 7});
    epilogue_case<BF16, 2>("bf16 crr w1x4 m16x16x16 mem",
                           {77, 150, 64, 2, true, false, 1.f, 1.f, false, TD_BIAS_N, TD_ACT_SILU, false, true, false,
                            TD_OUT_FP16, false, false, 0});
    epilogue_case<BF16, 1>("bf16 rrr w1x4 m16x16x16 mem",
                           {200, 260, 33, 1, false, false, 2.f, 0.25f, true, TD_BIAS_NONE, TD_ACT_NONE, false, false,
                            false, TD_OUT_BF16, true, false, 3});
    epilogue_case<FP8, 0>("fp8 e4m3 fnuz rcr w4x1 m32x32x16 compv3",
                          {130, 70, 200, 1, false, false, 0.5f, 0.f, false, TD_BIAS_N, TD_ACT_GELU, true, true, true,
                           TD_OUT_BF16, false, false, 0});
    std::printf("%s\n", failures ? "FAILED" : "all cases within tolerance");
    return failures ? 1 : 0;
}
