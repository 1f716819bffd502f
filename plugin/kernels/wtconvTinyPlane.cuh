// wtconvTinyPlane.cuh — the whole layer for planes up to 8 x 8 (WTConvNeXt-T's last stage, 7 x 7), one plane per
// lane, everything in registers (docs/design.md §3.2, kernel 2a).
//
// A warp takes 32 consecutive channels of one batch item; lane j owns plane (b, c0 + j) from the input to the
// output. Every size is a template argument, so every loop is unrolled, every register array is indexed by
// constants, and taps that would read padding are not emitted: at 7 x 7 with k = 5 the base convolution issues
// the 841 FMAs that touch the plane (not 49 x 25 = 1,225), level 1 the 784 of 4 x 16 x 25. No halo, no block
// barrier after the weights are loaded, no index arithmetic per pixel. What a lane does (Eq. 1-4, with the 1/2
// factors folded: docs/design.md §2.4):
//   1. U_1 = the unscaled Haar sums of x (a + b + c + d, ...: 2x the bands of Eq. 1), U_l from U_{l-1}'s LL sums;
//   2. deepest level first, G_l = (4^-l W~l) * U_l (the folded 1/2 of analysis and synthesis, exact in fp32), and
//      D_{l-1} = D_l + the signed sum of the four G_l (Eq. 3' without its 1/2), with D_L = the bias; D_0 = R + b~b;
//   3. y = D_0 + W~b * x.
// I/O: channels-last, lane j reads and writes channel c0 + j of each pixel (32 consecutive channels: one coalesced
// access per pixel). NCHW: the warp's 32 planes are one contiguous chunk; it is copied through shared memory with
// 16-byte accesses. The weights are stored lane-interleaved in shared memory ([set][tap][lane]: each lane reads its
// own channel's tap, conflict-free), once per block; a block loops over batch items with the same channels.
#pragma once

#include "wtconvFixedPlane.h"
#include "wtconvKernelImpl.cuh"

namespace wtconv
{
namespace detail
{

template <int K_, int H_, int W_, int L_>
struct TinyGeometry
{
    static constexpr int K = K_, R = K_ / 2, KK = K_ * K_, H = H_, W = W_, L = L_, HW = H_ * W_;
    static constexpr int kSets = 1 + 4 * L_; // weight sets: base, then 4 bands per level
    static constexpr int kWeightFloats = kSets * KK * 32;
    static constexpr int kMaxCells = 4; // cells per side at level 1 (H, W <= 8)
    static_assert(H_ >= 1 && H_ <= 8 && W_ >= 1 && W_ <= 8, "tiny planes are at most 8 x 8");
    static_assert(K_ % 2 == 1 && K_ <= 7, "k odd, at most 7 (one accumulator per output, docs/design.md §2.5)");
    static_assert(L_ >= 1 && L_ <= kMaxLevels, "1..kMaxLevels levels");
    static constexpr int h(int l)
    {
        return l == 0 ? H : (h(l - 1) + 1) / 2;
    }
    static constexpr int w(int l)
    {
        return l == 0 ? W : (w(l - 1) + 1) / 2;
    }
};

constexpr int kTinyMaxWarps = 8;

using TinyGrid = float[4][4]; // one band (or carry) of a level >= 1: at most 4 x 4 cells (planes up to 8 x 8)

// G = (4^-l W~l_s) * U at every cell of level l (the scale is in the weights, which lie at wSet[tap * 32]). Taps
// that only read padding are not emitted (the conditions are constant after unrolling); each output sums its taps
// in one accumulator, row by row (docs/design.md §2.5).
template <class G, int l>
__device__ __forceinline__ void tinyConv(TinyGrid const& u, float const* wSet, TinyGrid& g)
{
    constexpr int K = G::K, R = G::R, hl = G::h(l), wl = G::w(l);
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            g[i][j] = 0.f;
        }
    }
#pragma unroll
    for (int dy = 0; dy < K; ++dy)
    {
#pragma unroll
        for (int dx = 0; dx < K; ++dx)
        {
            float const wv = wSet[(dy * K + dx) * 32];
#pragma unroll
            for (int i = 0; i < 4; ++i)
            {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                {
                    int const si = i + dy - R, sj = j + dx - R;
                    if (i < hl && j < wl && si >= 0 && si < hl && sj >= 0 && sj < wl)
                    {
                        g[i][j] = fmaf(wv, u[si][sj], g[i][j]);
                    }
                }
            }
        }
    }
}

// Level l's four bands (unscaled Haar sums, 2x Eq. 1) from the LL sums of level l-1 (at most 4 x 4 cells).
// Entries beyond an odd size are the zero padding: their conditions are constant, so no zero is added.
template <class G, int l>
__device__ __forceinline__ void tinyDeepBands(TinyGrid const& src, TinyGrid (&u)[4])
{
    constexpr int hs = G::h(l - 1), ws = G::w(l - 1);
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            if (i < G::h(l) && j < G::w(l))
            {
                bool const hasB = 2 * j + 1 < ws, hasC = 2 * i + 1 < hs;
                float const a = src[2 * i][2 * j];
                float const b = hasB ? src[2 * i][2 * j + 1] : 0.f;
                float const c = hasC ? src[2 * i + 1][2 * j] : 0.f;
                float const d = hasB && hasC ? src[2 * i + 1][2 * j + 1] : 0.f;
                float const s0 = hasB ? a + b : a, d0 = hasB ? a - b : a;
                float const s1 = hasB ? c + d : c, d1 = hasB ? c - d : c;
                u[0][i][j] = hasC ? s0 + s1 : s0;
                u[1][i][j] = hasC ? s0 - s1 : s0;
                u[2][i][j] = hasC ? d0 + d1 : d0;
                u[3][i][j] = hasC ? d0 - d1 : d0;
            }
        }
    }
}

// The carry of level l (D_l of Eq. 3', on level l's grid; the bias at the deepest level) into D_{l-1} on level
// l-1's grid: D_{l-1}(p, q) = D_l + G_LL +- G_LH +- G_HL +- G_HH at (p >> 1, q >> 1), signs by p & 1 and q & 1.
// Level l's bands come from `ll` (the LL sums of level l-1), levels l+1 .. L recursively.
template <class G, int l>
__device__ __forceinline__ void tinyDeepCarry(TinyGrid const& ll, float const* wLane, float bias, TinyGrid& out)
{
    constexpr int hl = G::h(l), wl = G::w(l), hn = G::h(l - 1), wn = G::w(l - 1);
    TinyGrid u[4];
    tinyDeepBands<G, l>(ll, u);
    TinyGrid d;
    if constexpr (l < G::L)
    {
        tinyDeepCarry<G, l + 1>(u[0], wLane, bias, d);
    }
    else
    {
#pragma unroll
        for (int i = 0; i < 4; ++i)
        {
#pragma unroll
            for (int j = 0; j < 4; ++j)
            {
                d[i][j] = bias; // D_L: the bias reaches every output once
            }
        }
    }
    TinyGrid g[4];
#pragma unroll
    for (int s = 0; s < 4; ++s)
    {
        tinyConv<G, l>(u[s], wLane + (1 + 4 * (l - 1) + s) * G::KK * 32, g[s]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            if (i < hl && j < wl)
            {
                float const t = d[i][j] + g[0][i][j];
                float const a = t + g[1][i][j], b = t - g[1][i][j];
                float const c = g[2][i][j] + g[3][i][j], e = g[2][i][j] - g[3][i][j];
                out[2 * i][2 * j] = a + c;
                if (2 * j + 1 < wn)
                {
                    out[2 * i][2 * j + 1] = a - c;
                }
                if (2 * i + 1 < hn)
                {
                    out[2 * i + 1][2 * j] = b + e;
                    if (2 * j + 1 < wn)
                    {
                        out[2 * i + 1][2 * j + 1] = b - e;
                    }
                }
            }
        }
    }
}

// Two of level 1's bands from x: the pair (LL, LH) (first = a+b+c+d, second = a+b-c-d) or (HL, HH)
// (a-b+c-d, a-b-c+d), with x read through xAt(p) (its staging in shared memory).
template <class G, bool LOW, typename XAt>
__device__ __forceinline__ void tinyLevel1Bands(XAt const& xAt, TinyGrid& first, TinyGrid& second)
{
    constexpr int H = G::H, W = G::W;
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            if (i < G::h(1) && j < G::w(1))
            {
                bool const hasB = 2 * j + 1 < W, hasC = 2 * i + 1 < H;
                float const a = xAt((2 * i) * W + 2 * j);
                float const b = hasB ? xAt((2 * i) * W + 2 * j + 1) : 0.f;
                float const c = hasC ? xAt((2 * i + 1) * W + 2 * j) : 0.f;
                float const d = hasB && hasC ? xAt((2 * i + 1) * W + 2 * j + 1) : 0.f;
                float const top = hasB ? (LOW ? a + b : a - b) : a;
                float const bottom = hasB ? (LOW ? c + d : c - d) : c;
                first[i][j] = hasC ? top + bottom : top;
                second[i][j] = hasC ? top - bottom : top;
            }
        }
    }
}

// The weights of channels c0 .. c0+31 into shared memory as w[set][tap][lane] (sets: base, then level-major bands),
// the level-l band weights scaled by 4^-l (the folded 1/2 factors: exact in fp32). The block reads them in their
// global order (coalesced).
template <class G>
__device__ __forceinline__ void tinyLoadWeights(FixedPlaneArgs const& a, int c0, float* wsm)
{
    constexpr int KK = G::KK;
    for (int i = threadIdx.x; i < 32 * KK; i += blockDim.x)
    {
        int const j = i / KK, tap = i - j * KK;
        wsm[tap * 32 + j] = __ldg(a.baseWeight + static_cast<int64_t>(c0) * KK + i);
    }
#pragma unroll 1
    for (int l = 0; l < G::L; ++l)
    {
        float const scale = 1.f / static_cast<float>(1 << (2 * (l + 1)));
        float const* src = a.waveletWeight + (static_cast<int64_t>(l) * a.channels + c0) * 4 * KK;
        for (int i = threadIdx.x; i < 32 * 4 * KK; i += blockDim.x)
        {
            int const js = i / KK, tap = i - js * KK; // js = 4 j + s
            int const j = js >> 2, s = js & 3;
            wsm[((1 + 4 * l + s) * KK + tap) * 32 + j] = __ldg(src + i) * scale;
        }
    }
}

// Grid: x = channel groups of 32 (C / 32), y = groups of batch items; a block of `warps` warps takes items
// warp, warp + warps, ... of its item groups y, y + gridDim.y, ... (one item per warp at a time).
template <typename TIn, class G, bool NHWC>
__global__ void __launch_bounds__(kTinyMaxWarps * 32, 2) tinyPlaneKernel(FixedPlaneArgs const a)
{
    extern __shared__ __align__(16) float smem[];
    constexpr int K = G::K, R = G::R, H = G::H, W = G::W, HW = G::HW;
    int const lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    int const warps = static_cast<int>(blockDim.x) >> 5;
    int const c0 = static_cast<int>(blockIdx.x) * 32;
    tinyLoadWeights<G>(a, c0, smem);
    __syncthreads();
    float const* const wLane = smem + lane;
    float const bias = __ldg(a.baseBias + c0 + lane);
    // the warp's 32 planes of x, and for NCHW of y, pass through shared memory (its staging)
    constexpr int kStageBytes = (32 * HW * static_cast<int>(sizeof(TIn)) + 15) / 16 * 16;
    TIn* const stage = reinterpret_cast<TIn*>(reinterpret_cast<char*>(smem + G::kWeightFloats) + warp * kStageBytes);
    TIn const* const src = static_cast<TIn const*>(a.src);
    TIn* const dst = static_cast<TIn*>(a.out);

    for (int64_t b = static_cast<int64_t>(blockIdx.y) * warps + warp; b < a.batch;
        b += static_cast<int64_t>(gridDim.y) * warps)
    {
        // x of the warp's 32 planes into its staging: channels-last [pixel][lane] (one coalesced 64- or 128-byte
        // access per pixel), NCHW [lane][pixel] (the chunk as it lies in memory, 16-byte accesses)
        __syncwarp(); // the previous item's store has read the staging
        if constexpr (NHWC)
        {
            TIn const* xs = src + (b * HW) * a.pitch + c0 + lane;
#pragma unroll
            for (int p = 0; p < HW; ++p)
            {
                stage[p * 32 + lane] = xs[p * a.pitch];
            }
        }
        else
        {
            constexpr int kVectors = 32 * HW * static_cast<int>(sizeof(TIn)) / 16;
            uint4 const* chunk = reinterpret_cast<uint4 const*>(src + (b * a.channels + c0) * HW);
            for (int v = lane; v < kVectors; v += 32)
            {
                reinterpret_cast<uint4*>(stage)[v] = __ldg(chunk + v);
            }
        }
        __syncwarp();
        auto xAt = [&](int p) -> float { return toFloat(NHWC ? stage[p * 32 + lane] : stage[lane * HW + p]); };
        constexpr int h1 = G::h(1), w1 = G::w(1);
        // level 1's LL and LH bands; levels 2 .. L give the carry D_1 (the bias alone when L = 1)
        TinyGrid u0, u1, d;
        tinyLevel1Bands<G, true>(xAt, u0, u1);
        if constexpr (G::L >= 2)
        {
            tinyDeepCarry<G, 2>(u0, wLane, bias, d);
        }
        else
        {
#pragma unroll
            for (int i = 0; i < 4; ++i)
            {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                {
                    d[i][j] = bias;
                }
            }
        }
        // level 1, two bands at a time (Eq. 3' as a butterfly): A = D + G_LL + G_LH and B = D + G_LL - G_LH feed
        // the even and odd rows, C = G_HL + G_HH and E = G_HL - G_HH are added to the even and subtracted from
        // the odd columns
        TinyGrid g0, g1;
        tinyConv<G, 1>(u0, wLane + 1 * G::KK * 32, g0);
        tinyConv<G, 1>(u1, wLane + 2 * G::KK * 32, g1);
#pragma unroll
        for (int i = 0; i < 4; ++i)
        {
#pragma unroll
            for (int j = 0; j < 4; ++j)
            {
                float const t = d[i][j] + g0[i][j];
                u0[i][j] = t + g1[i][j]; // A
                u1[i][j] = t - g1[i][j]; // B
            }
        }
        TinyGrid v0, v1;
        tinyLevel1Bands<G, false>(xAt, v0, v1);
        tinyConv<G, 1>(v0, wLane + 3 * G::KK * 32, g0);
        tinyConv<G, 1>(v1, wLane + 4 * G::KK * 32, g1);
        float out[H][W];
#pragma unroll
        for (int i = 0; i < 4; ++i)
        {
#pragma unroll
            for (int j = 0; j < 4; ++j)
            {
                if (i < h1 && j < w1)
                {
                    float const c = g0[i][j] + g1[i][j], e = g0[i][j] - g1[i][j];
                    out[2 * i][2 * j] = u0[i][j] + c;
                    if (2 * j + 1 < W)
                    {
                        out[2 * i][2 * j + 1] = u0[i][j] - c;
                    }
                    if (2 * i + 1 < H)
                    {
                        out[2 * i + 1][2 * j] = u1[i][j] + e;
                        if (2 * j + 1 < W)
                        {
                            out[2 * i + 1][2 * j + 1] = u1[i][j] - e;
                        }
                    }
                }
            }
        }
        // y = D_0 + W~b * x, x row by row (each read once), the base weights in registers
        float wb[K * K];
#pragma unroll
        for (int tap = 0; tap < K * K; ++tap)
        {
            wb[tap] = wLane[tap * 32];
        }
#pragma unroll
        for (int sy = 0; sy < H; ++sy)
        {
            float row[W];
#pragma unroll
            for (int sx = 0; sx < W; ++sx)
            {
                row[sx] = xAt(sy * W + sx);
            }
#pragma unroll
            for (int y = 0; y < H; ++y)
            {
                int const dy = sy - y + R;
                if (dy >= 0 && dy < K)
                {
#pragma unroll
                    for (int dx = 0; dx < K; ++dx)
                    {
#pragma unroll
                        for (int xx = 0; xx < W; ++xx)
                        {
                            int const sx = xx + dx - R;
                            if (sx >= 0 && sx < W)
                            {
                                out[y][xx] = fmaf(wb[dy * K + dx], row[sx], out[y][xx]);
                            }
                        }
                    }
                }
            }
        }
        if constexpr (NHWC)
        {
            TIn* ys = dst + (b * HW) * a.pitch + c0 + lane;
#pragma unroll
            for (int p = 0; p < HW; ++p)
            {
                ys[p * a.pitch] = fromFloat<TIn>(out[p / W][p % W]);
            }
        }
        else
        {
            TIn* ys = stage + lane * HW;
#pragma unroll
            for (int p = 0; p < HW; ++p)
            {
                ys[p] = fromFloat<TIn>(out[p / W][p % W]);
            }
            __syncwarp();
            constexpr int kVectors = 32 * HW * static_cast<int>(sizeof(TIn)) / 16;
            uint4* chunk = reinterpret_cast<uint4*>(dst + (b * a.channels + c0) * HW);
            for (int v = lane; v < kVectors; v += 32)
            {
                chunk[v] = reinterpret_cast<uint4 const*>(stage)[v];
            }
        }
    }
}

// Shared memory of a tinyPlaneKernel block of `warps` warps.
template <typename TIn, class G, bool NHWC>
constexpr size_t tinySharedBytes(int warps)
{
    return G::kWeightFloats * sizeof(float) + static_cast<size_t>(warps) * ((32 * G::HW * sizeof(TIn) + 15) / 16 * 16);
}

} // namespace detail
} // namespace wtconv
