// cuda backend: depthwise convolution on tensor cores (mma.sync m16n8k16, fp32 accumulation):
// 2D, stride 1, dilation 1, filters 3x3, 5x5 and 7x7, forward and backward-data (the forward
// over dy with the filter flipped, as in conv_depthwise.cuh).
//
// The CUDA-core kernels (conv_depthwise.cuh) spend one FMA per product: ConvNeXt's 7x7 over
// 32 x 28 x 28 x 384 is 472 M products, 14 us at the H200's FP32 peak against a 9 us memory
// floor. Here the products of one channel run as MMAs whose weight operand is a Toeplitz
// matrix: per channel c and filter row kh, 8 output columns of 16 output rows are one MMA
//   A[m][k] = x[oh0 + m + kh - ph][ow0 + 8j + k - pw]         16 rows x 16 input columns
//   B[k][n] = w[c][kh][k - n] where 0 <= k - n < KW, else 0   16 x 8 (KW <= 9)
//   D[m][n] = y[oh0 + m][ow0 + 8j + n]
// B is the same for every row and column tile of the channel, so it is built once per
// channel. The MMA needs the channel's pixels contiguous, the tensors keep channels
// contiguous, so a block transposes through shared memory both ways:
//   1. load its input tile (TH + KH - 1 rows x TW + 8 columns x CB channels) in 16-byte
//      vectors of 8 channels, 4 columns a thread, and store it as CB planes [row][column];
//   2. each warp takes channels: per filter row one ldmatrix of the left 8 columns, then per
//      8-column tile one ldmatrix of the next 8 (the right half of one tile is the left half
//      of the next) and one MMA; the sums go, as T, over the rows of the channel's plane the
//      warp has read;
//   3. write the output rows back as 16-byte vectors of 8 channels.
// Measured (Nsight Compute, MobileNetV2 3x3 at 16x32x16): the L1 is the limit, and the
// global accesses take much of it: a pixel's CB channels are CB x 2 contiguous bytes, so a
// warp's 16-byte accesses touch up to 16 lines at 16 channels, 4 at 64. The output over the
// input planes keeps the shared memory of a block to its input tile.
// The zeros of B multiply input columns the output does not read: a non-finite input value
// can therefore spread to outputs up to 15 columns away (the direct kernels keep it to its
// receptive field).
#pragma once

#include "cuda/conv_depthwise.cuh"
#include "cuda/conv_mma.cuh"
#include "cuda/conv_mma_tiled.cuh"

namespace td::cuda {

// Shared memory of a block: the input planes [CB][IR][IW] (a warp writes its channel's output
// rows over the plane once it has read it: [TH][IW] at the plane's start), then the block's
// filters as stored, [CB][KH][KW]. IW / 8 odd: the 16 rows of an ldmatrix fall on distinct
// banks.
//
// Channel c = 8 o + i (octet o) has plane i x CB / 8 + o, and a plane is padded to 32 bytes
// past a multiple of 128: the transposing stores and loads, whose lanes take the octets of
// one pixel (its CB x 2 bytes contiguous in global memory), then fall on distinct banks
// (without it, at 64 channels, 8 lanes shared a bank).
template <int TH, int TW, int CB, int KH, int KW>
struct DwMmaSmem {
    static constexpr int IR = TH + KH - 1;
    static constexpr int IW = TW + 8;
    static constexpr int PLANE = IR * IW + (16 - IR * IW % 64 + 64) % 64;  // elements, 16 mod 64
    static constexpr int in_bytes = CB * PLANE * 2;
    static constexpr int w_bytes = CB * KH * KW * 2;  // a multiple of 16: CB is
    static constexpr int bytes = in_bytes + w_bytes;
    static_assert((IW / 8) % 2 == 1, "TW / 8 must be even");
};

// 4 warps a block, 8 from 32 channels (a block's shared memory then allows 1-2 a SM).
constexpr int dw_mma_threads(int cb) { return cb >= 32 ? 256 : 128; }
constexpr int kDwMmaSmemMost = 227 * 1024;

__device__ __forceinline__ unsigned dw_word(const uint4& v, int m) {
    return m == 0 ? v.x : m == 1 ? v.y : m == 2 ? v.z : v.w;
}
__device__ __forceinline__ unsigned dw_word(const uint2& v, int m) { return m == 0 ? v.x : v.y; }

template <class T, int KH, int KW, int TH, int TW, int CB, bool Flip>
__global__ void __launch_bounds__(dw_mma_threads(CB)) conv_dw_mma(DwGeometry g, const unsigned short* __restrict__ x,
                                                             const unsigned short* __restrict__ w,
                                                             unsigned short* __restrict__ y) {
    using S = DwMmaSmem<TH, TW, CB, KH, KW>;
    constexpr int kDwMmaThreads = dw_mma_threads(CB);
    constexpr int NT = TW / 8, MT = TH / 16;
    constexpr int PLANE = S::PLANE, OCT = CB / 8;
    extern __shared__ __align__(16) unsigned char dw_mma_smem[];
    unsigned short* sin = reinterpret_cast<unsigned short*>(dw_mma_smem);
    unsigned short* sw = reinterpret_cast<unsigned short*>(dw_mma_smem + S::in_bytes);

    // block = (channel chunk fastest, column tile, row tile, image); the last chunk may hold
    // fewer than CB channels (a multiple of 8)
    const int chunks = (g.C + CB - 1) / CB;
    const int wbs = (g.wo + TW - 1) / TW, hbs = (g.ho + TH - 1) / TH;
    unsigned b = blockIdx.x;
    const int chunk = (int)(b % (unsigned)chunks); b /= (unsigned)chunks;
    const int wb = (int)(b % (unsigned)wbs); b /= (unsigned)wbs;
    const int hb = (int)(b % (unsigned)hbs);
    const int n = (int)(b / (unsigned)hbs);
    const int c0 = chunk * CB, oh0 = hb * TH, ow0 = wb * TW;
    const int cn = min(CB, g.C - c0), oct_n = cn / 8;
    const int tid = threadIdx.x;

    // the block's filters: cn x KH x KW contiguous values, 16-byte aligned (c0 and cn are
    // multiples of 8), loaded with the input tile and stored after it
    constexpr int WV = CB * KH * KW / 8, WIT = (WV + kDwMmaThreads - 1) / kDwMmaThreads;
    const int wv_n = cn * KH * KW / 8;
    uint4 wv[WIT];
    const uint4* wsrc = reinterpret_cast<const uint4*>(w + (int64_t)c0 * KH * KW);
#pragma unroll
    for (int i = 0; i < WIT; ++i) {
        const int e = i * kDwMmaThreads + tid;
        wv[i] = e < wv_n ? __ldg(wsrc + e) : make_uint4(0, 0, 0, 0);
    }

    // 1. the input tile, transposed: item = (octet fastest, 4 columns, row); zeros outside
    // the image and beyond the TW + KW - 1 columns the outputs read
    constexpr int QROW = S::IW / 4, BATCH = 4;
    constexpr int items = OCT * S::IR * QROW;  // octets from oct_n on: the last chunk's missing channels
    const int ih0 = oh0 - g.ph, iw0 = ow0 - g.pw;
    const unsigned short* xn = x + (int64_t)n * g.hi * g.wi * g.C + c0;
    for (int base = 0; base < items; base += BATCH * kDwMmaThreads) {
        uint4 v[BATCH][4];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int it = base + i * kDwMmaThreads + tid;
            const int oct = it % OCT, rest = it / OCT, q = rest % QROW, rr = rest / QROW;
            const int ih = ih0 + rr;
            const bool row_in = it < items && oct < oct_n && ih >= 0 && ih < g.hi;
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int s = 4 * q + p, iw = iw0 + s;
                const bool inside = row_in && s < TW + KW - 1 && iw >= 0 && iw < g.wi;
                v[i][p] = inside ? __ldg(reinterpret_cast<const uint4*>(xn + ((int64_t)ih * g.wi + iw) * g.C + oct * 8))
                                 : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int it = base + i * kDwMmaThreads + tid;
            if (it < items && it % OCT < oct_n) {
                const int oct = it % OCT, rest = it / OCT, q = rest % QROW, rr = rest / QROW;
                unsigned short* dst = sin + oct * PLANE + rr * S::IW + 4 * q;  // channel 8 oct + j: plane j OCT + oct
#pragma unroll
                for (int m = 0; m < 4; ++m) {  // word m of a vector: channels 2m (low half), 2m + 1
                    const unsigned a0 = dw_word(v[i][0], m), a1 = dw_word(v[i][1], m);
                    const unsigned a2 = dw_word(v[i][2], m), a3 = dw_word(v[i][3], m);
                    *reinterpret_cast<uint2*>(dst + (2 * m) * OCT * PLANE) =
                        make_uint2(__byte_perm(a0, a1, 0x5410), __byte_perm(a2, a3, 0x5410));
                    *reinterpret_cast<uint2*>(dst + (2 * m + 1) * OCT * PLANE) =
                        make_uint2(__byte_perm(a0, a1, 0x7632), __byte_perm(a2, a3, 0x7632));
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < WIT; ++i) {
        const int e = i * kDwMmaThreads + tid;
        if (e < wv_n) reinterpret_cast<uint4*>(sw)[e] = wv[i];
    }
    __syncthreads();

    // 2. the MMAs, a warp per channel. Fragments (mma.m16n8k16 .row.col): r = lane / 4,
    // q = lane % 4; B: b0 = (k 2q, 2q+1; n r), b1 = (k 2q+8, 2q+9; n r); D: (r, 2q..) and
    // (r + 8, 2q..). A warp writes its channel's output rows over the plane's first rows once
    // it has read the rows under them: output rows [16 mt, 16 mt + 16) after M tile mt, whose
    // input rows reach 16 mt + 15 + KH - 1; the next tile reads from row 16 (mt + 1) on.
    const int warp = tid / 32, lane = tid % 32;
    const int r = lane / 4, q = lane % 4;
    const unsigned in_base = (unsigned)__cvta_generic_to_shared(sin) + (unsigned)(lane % 16) * S::IW * 2;
    for (int c = warp; c < cn; c += kDwMmaThreads / 32) {
        // B[k][n] = w[kh][k - n]: lane (r, q) holds k - n = 2q - r + {0, 1, 8, 9}
        uint32_t bf[KH][2];
        const unsigned short* wc = sw + c * KH * KW;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
            const int row = (Flip ? KH - 1 - kh : kh) * KW;
            auto tap = [&](int kw) -> uint32_t {
                return kw >= 0 && kw < KW ? wc[row + (Flip ? KW - 1 - kw : kw)] : 0u;
            };
            const int k0 = 2 * q - r;
            bf[kh][0] = tap(k0) | tap(k0 + 1) << 16;
            bf[kh][1] = tap(k0 + 8) | tap(k0 + 9) << 16;
        }
        const int pc = c % 8 * OCT + c / 8;  // the channel's plane
        const unsigned plane = in_base + (unsigned)(pc * PLANE * 2);
        unsigned short* oc = sin + pc * PLANE + 2 * q;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float acc[NT][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
            for (int kh = 0; kh < KH; ++kh) {
                const unsigned row = plane + (unsigned)((mt * 16 + kh) * S::IW * 2);
                uint32_t lo[2];
                ldsm_x2(lo, row);
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    uint32_t hi[2];
                    ldsm_x2(hi, row + (unsigned)((8 * j + 8) * 2));
                    const uint32_t a[4] = {lo[0], lo[1], hi[0], hi[1]};
                    mma16816<T>(acc[j], a, bf[kh]);
                    lo[0] = hi[0];
                    lo[1] = hi[1];
                }
            }
            __syncwarp();  // every lane's reads of these rows are done
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                *reinterpret_cast<uint32_t*>(oc + (mt * 16 + r) * S::IW + 8 * j) = pack_pair<T>(acc[j][0], acc[j][1]);
                *reinterpret_cast<uint32_t*>(oc + (mt * 16 + r + 8) * S::IW + 8 * j) = pack_pair<T>(acc[j][2], acc[j][3]);
            }
        }
    }
    __syncthreads();

    // 3. the output rows back to channels-last: item = (octet fastest, 4 columns, row)
    constexpr int OQ = TW / 4, oitems = OCT * TH * OQ;
    unsigned short* yn = y + (int64_t)n * g.ho * g.wo * g.C + c0;
    for (int it = tid; it < oitems; it += kDwMmaThreads) {
        const int oct = it % OCT, rest = it / OCT, q4 = rest % OQ, row = rest / OQ;
        const int oh = oh0 + row, ow = ow0 + 4 * q4;
        if (oct >= oct_n || oh >= g.ho || ow >= g.wo) continue;
        uint2 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            v[i] = *reinterpret_cast<const uint2*>(sin + (i * OCT + oct) * PLANE + row * S::IW + 4 * q4);
        unsigned short* dst = yn + ((int64_t)oh * g.wo + ow) * g.C + oct * 8;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            if (ow + p >= g.wo) break;
            const unsigned sel = p % 2 ? 0x7632 : 0x5410;
            const int m = p / 2;
            *reinterpret_cast<uint4*>(dst + (int64_t)p * g.C) =
                make_uint4(__byte_perm(dw_word(v[0], m), dw_word(v[1], m), sel),
                           __byte_perm(dw_word(v[2], m), dw_word(v[3], m), sel),
                           __byte_perm(dw_word(v[4], m), dw_word(v[5], m), sel),
                           __byte_perm(dw_word(v[6], m), dw_word(v[7], m), sel));
        }
    }
}

// TH x TW x CB: output rows (16 or 32: the MMA's M) x output columns (16, 32 or 64) x
// channels per block (8, 16, 32 or 64; the last block of a row may hold fewer).
template <int DType, int Ndim, int Direction, int TH, int TW, int CB>
struct Sm90DwMmaConv {
    using T = typename ConvElement<DType>::T;
    static_assert(Ndim == 2, "the tensor-core depthwise kernel is 2D");
    static_assert(Direction != TD_CONV_BWD_WEIGHT, "the tensor-core depthwise kernel computes fwd and bwd_data");
    static_assert(TH == 16 || TH == 32, "16 or 32 output rows");
    static_assert(TW == 16 || TW == 32 || TW == 64, "16, 32 or 64 output columns");
    static_assert(CB == 8 || CB == 16 || CB == 32 || CB == 64, "8, 16, 32 or 64 channels per block");
    // the filter sizes and the view of the problem (bwd_data: the forward over dy)
    using Dw = Sm90DwConv<DType, 2, Direction, 1, 8, 4>;

    template <int KH>
    static constexpr bool fits() { return DwMmaSmem<TH, TW, CB, KH, KH>::bytes <= kDwMmaSmemMost; }

    static int supports(const TdConvProblem& p, std::string* why) {
        ConvGeometry g{};
        if (int st = conv_variant_matches(p, DType, Ndim, Direction, &g, why)) return st;
        if (int st = conv_channels_are(g, 1, why)) return st;
        if (g.G % 8) {
            *why = "G = " + std::to_string(g.G) + " is not a multiple of 8 (16-byte channel vectors)";
            return TD_UNSUPPORTED;
        }
        for (int i = 0; i < 3; ++i)
            if (g.stride[i] != 1 || g.dil[i] != 1) {
                *why = "stride and dilation must be 1 (the direct kernels take the others)";
                return TD_UNSUPPORTED;
            }
        bool fit = false;
        if (!Dw::with_filter((int)g.fil[1], (int)g.fil[2], [&](auto kh, auto) { fit = fits<decltype(kh)::value>(); })) {
            *why = "filter not one of 3x3, 5x5, 7x7";
            return TD_UNSUPPORTED;
        }
        if (!fit) {
            *why = "this tile's shared memory for a " + std::to_string(g.fil[1]) + "x" + std::to_string(g.fil[2]) +
                   " filter exceeds 227 KB";
            return TD_UNSUPPORTED;
        }
        return conv_tensors_fit_int32(g, why);
    }

    static size_t workspace_size(const TdConvProblem&) { return 0; }

    static int run(const TdConvProblem& p, const void* in, const void* wei, void* out, void*, size_t, void* stream_ptr) {
        const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
        if ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(wei)) & 15)
            return fail(TD_REJECTED, "a tensor's address is not aligned to the kernel's 16-byte vectors; the generic "
                                     "kernel takes it");
        ConvGeometry geo{};
        conv_geometry(p, &geo);
        const DwGeometry d = Dw::view(geo);
        constexpr bool flip = Direction == TD_CONV_BWD_DATA;
        // fwd: x -> y; bwd_data: dy (the `out` argument) -> dx (the `in` argument)
        const auto* src = static_cast<const unsigned short*>(flip ? out : in);
        auto* dst = static_cast<unsigned short*>(const_cast<void*>(flip ? in : out));
        const auto* w = static_cast<const unsigned short*>(wei);
        const int64_t blocks = (int64_t)d.N * ((d.ho + TH - 1) / TH) * ((d.wo + TW - 1) / TW) * ((d.C + CB - 1) / CB);
        if (blocks > INT32_MAX) return fail(TD_REJECTED, "too many blocks for one launch");
        Dw::with_filter((int)geo.fil[1], (int)geo.fil[2], [&](auto kh, auto kw) {
            constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
            if constexpr (fits<KH>()) {
                constexpr int bytes = DwMmaSmem<TH, TW, CB, KH, KW>::bytes;
                auto kernel = conv_dw_mma<T, KH, KW, TH, TW, CB, flip>;
                if (bytes > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
                kernel<<<(unsigned)blocks, dw_mma_threads(CB), bytes, stream>>>(d, src, w, dst);
            }
        });
        return launch_status();
    }

    // KernelInfo: tile = (TH, TW, CB), schedule 8 = tensor-core depthwise.
    static constexpr ConvKernel entry(const char* name) {
        return ConvKernel{{name, DType, Ndim, Direction, -1, TH, TW, CB, 1, 0, 8, 0, 0}, &supports, &workspace_size, &run};
    }
};

}  // namespace td::cuda
