// wtconvGroupPlane.cuh — the whole layer for planes above 8 x 8 whose geometry is compiled in (WTConvNeXt-T's
// 56 x 56, 28 x 28 and 14 x 14 stages; docs/design.md §3.2, kernel 2b). A group of LP lanes owns one plane.
//
// The phases are those of the run-time-geometry kernel (wtconvWholePlane.cuh): x with an r-pixel zero halo in
// shared memory, every level's four bands with an r-cell zero halo, the synthesis carry D (Eq. 3') in two
// ping-pong buffers, strips of 2 cells x M rows per lane. What changes:
//   - every size is a template argument (GroupGeometry): no index division at run time, no bounds check inside a
//     plane, loop trip counts known to the compiler;
//   - a block holds NG planes (NG consecutive channels of one batch item), and each plane's group of lanes
//     synchronises alone (__syncwarp when LP <= 32, else a named barrier of LP threads): a block barrier only
//     after the cooperative load and before the cooperative store; small planes pack several groups per warp;
//   - a block takes its NG channels for several batch items in turn (rows of the grid, as the tiny kernel does):
//     the channels' weights are loaded and scaled, and the zero halos written, once per block, not once per plane
//     (they were 42 % and 55 % of the stall samples at 28 x 28 and 14 x 14; docs/bench/README.md);
//   - the load and the store are cooperative over the block's NG planes: NCHW, one contiguous chunk of
//     NG x H x W elements; channels-last, NG consecutive channels of each pixel (8- or 16-byte accesses), so no
//     cluster exchange is needed;
//   - the 1/2 factors are folded (docs/design.md §2.4): bands are unscaled Haar sums, level l's weights are
//     scaled by 4^-l once per block, the synthesis is additions only, and D_L starts as the bias;
//   - the halo of X is zeroed as a frame (the elements outside its interior, which the load writes), the band
//     regions whole before the analysis writes their interiors.
#pragma once

#include "wtconvFixedPlane.h"
#include "wtconvKernelImpl.cuh"
#include "wtconvWholePlane.cuh"

namespace wtconv
{
namespace detail
{

__host__ __device__ constexpr int ceilDivC(int a, int b)
{
    return (a + b - 1) / b;
}
__host__ __device__ constexpr int roundUpC(int a, int b)
{
    return ceilDivC(a, b) * b;
}
__host__ __device__ constexpr int maxC(int a, int b)
{
    return a > b ? a : b;
}

// Compile-time geometry of one plane (floats of shared memory, halo coordinates: interior element (i, j) of a
// region with halo R lies at (i + R) * pitch + j + R).
template <int K_, int H_, int W_, int L_, int LP_, int M1_, int MAX_THREADS_, int MIN_BLOCKS_>
struct GroupGeometry
{
    // the launch bounds: the largest block the plan makes, and the blocks per SM its shared memory allows (so that
    // registers are capped where they would otherwise lower the occupancy below what shared memory sets)
    static constexpr int kMaxThreads = MAX_THREADS_, kMinBlocks = MIN_BLOCKS_;
    static constexpr int K = K_, R = K_ / 2, KK = K_ * K_, H = H_, W = W_, L = L_, HW = H_ * W_;
    static constexpr int LP = LP_; // lanes per plane
    static constexpr int M1 = M1_; // cell rows of a level-1 strip (deeper strips: 1 row)
    static constexpr int TP = (KK + 3) / 4 * 4;
    static_assert(K_ % 2 == 1 && K_ <= 7, "k odd, at most 7 (one accumulator per output, docs/design.md §2.5)");
    static_assert(L_ >= 1 && L_ <= kMaxLevels, "1..kMaxLevels levels");
    static_assert(LP_ == 8 || LP_ == 16 || LP_ % 32 == 0, "a group is a part of a warp or whole warps");

    __host__ __device__ static constexpr int h(int l)
    {
        return l == 0 ? H : (h(l - 1) + 1) / 2;
    }
    __host__ __device__ static constexpr int w(int l)
    {
        return l == 0 ? W : (w(l - 1) + 1) / 2;
    }
    __host__ __device__ static constexpr int rows(int l)
    {
        return l == 1 ? M1 : 1;
    }
    __host__ __device__ static constexpr int pairs(int l)
    {
        return ceilDivC(w(l), 2);
    }
    __host__ __device__ static constexpr int stripRows(int l)
    {
        return ceilDivC(h(l), rows(l));
    }
    __host__ __device__ static constexpr int strips(int l)
    {
        return pairs(l) * stripRows(l);
    }
    __host__ __device__ static constexpr int covH(int l)
    {
        return rows(l) * stripRows(l);
    }
    __host__ __device__ static constexpr int covW(int l)
    {
        return 2 * pairs(l);
    }
    // level l's band regions: covH + 2R rows of covW + 2R (even: float2 windows)
    __host__ __device__ static constexpr int bandPitch(int l)
    {
        return covW(l) + 2 * R;
    }
    __host__ __device__ static constexpr int bandRows(int l)
    {
        return covH(l) + 2 * R;
    }
    __host__ __device__ static constexpr int bandPlane(int l)
    {
        return roundUpC(bandPitch(l) * bandRows(l), 4);
    }
    // X: base windows of 4 * ceil((K + 3) / 4) floats from column 4 * pair, rows 2 * cy0 .. 2 * cy0 + 2 M1 + 2R
    static constexpr int kBaseVec = (K_ + 3 + 3) / 4;
    static constexpr int xPitch = roundUpC(maxC(W_ + 2 * R, 4 * (ceilDivC(ceilDivC(W_, 2), 2) - 1) + 4 * kBaseVec), 4);
    static constexpr int xRows = maxC(H_ + 2 * R, 2 * M1_ * ceilDivC(ceilDivC(H_, 2), M1_) + 2 * R);
    static constexpr int xFloats = roundUpC(xPitch * xRows, 4);
    // D_l (l = 1 .. L-1), written by level l+1's strips (float4 per 2 x 2 cells), read by level l's (float2)
    __host__ __device__ static constexpr int dPitch(int l)
    {
        return 2 * covW(l + 1);
    }
    __host__ __device__ static constexpr int dRows(int l)
    {
        return maxC(2 * covH(l + 1), covH(l));
    }
    __host__ __device__ static constexpr int dFloatsUpTo(int l)
    {
        return l < 1 ? 0 : maxC(dFloatsUpTo(l - 1), roundUpC(dPitch(l) * dRows(l), 4));
    }
    static constexpr int dFloats = dFloatsUpTo(L_ - 1);
    __host__ __device__ static constexpr int bandOff(int l) // from the plane's start; level 1 right after X
    {
        return l <= 1 ? xFloats : bandOff(l - 1) + 4 * bandPlane(l - 1);
    }
    static constexpr int dOff = bandOff(L_ + 1);
    static constexpr int wOff = dOff + 2 * dFloats;
    static constexpr int wFloats = (1 + 4 * L_) * TP;
    static constexpr int planeFloats = wOff + wFloats; // a multiple of 4
};

// Zeroes the elements of a ROWS x PITCH region outside rows [R0, R1) x columns [C0, C1) (a frame), LP lanes.
template <int ROWS, int PITCH, int R0, int R1, int C0, int C1, int LP>
__device__ __forceinline__ void zeroFrame(float* base, int t)
{
    constexpr int top = R0 * PITCH, bottom = (ROWS - R1) * PITCH, side = PITCH - (C1 - C0);
    constexpr int sides = (R1 - R0) * side;
    // a few iterations per lane: not unrolled (unrolled, the frames of 1 + 4L regions were over half the kernel's
    // machine code at 56 x 56, for a few stores per lane)
#pragma unroll 1
    for (int i = t; i < top; i += LP)
    {
        base[i] = 0.f;
    }
#pragma unroll 1
    for (int i = t; i < bottom; i += LP)
    {
        base[R1 * PITCH + i] = 0.f;
    }
#pragma unroll 1
    for (int i = t; i < sides; i += LP)
    {
        int const r = i / side, c = i - r * side;
        base[(R0 + r) * PITCH + (c < C0 ? c : c - C0 + C1)] = 0.f;
    }
}

// Every level's band regions, [bandOff(1), dOff): zeroed whole, with 16-byte stores (the analysis writes the
// interiors after the block barrier; one loop costs fewer instructions than a frame loop per region).
template <class G>
__device__ __forceinline__ void zeroBands(float* plane, int t)
{
    constexpr int first = G::bandOff(1) / 4, last = G::dOff / 4;
    float4* v = reinterpret_cast<float4*>(plane);
#pragma unroll 1
    for (int i = first + t; i < last; i += G::LP)
    {
        v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// Synchronises the LP lanes of one plane group (group g of the block).
template <int LP>
__device__ __forceinline__ void groupSync(int g)
{
    if constexpr (LP <= 32)
    {
        __syncwarp();
    }
    else
    {
        asm volatile("bar.sync %0, %1;" ::"r"(g + 1), "r"(LP) : "memory");
    }
}

// Level l's bands (unscaled Haar sums) from level l-1: X for l = 1, else the LL band of level l-1. The source
// regions' zero frames are the odd sizes' padding, so no cell needs a bounds check.
template <class G, int l>
__device__ __forceinline__ void groupAnalysis(float* plane, int t, int g)
{
    constexpr int R = G::R, hl = G::h(l), wl = G::w(l);
    constexpr int sp = l == 1 ? G::xPitch : G::bandPitch(l - 1);
    float const* s = plane + (l == 1 ? 0 : G::bandOff(l - 1)) + R * sp + R;
    float* band = plane + G::bandOff(l) + R * G::bandPitch(l) + R;
    for (int i = t; i < hl * wl; i += G::LP)
    {
        int const y = i / wl, x = i - y * wl;
        float const* q = s + 2 * y * sp + 2 * x;
        float const a = q[0], b = q[1], c = q[sp], d = q[sp + 1];
        float const s0 = a + b, s1 = c + d, d0 = a - b, d1 = c - d;
        float* o = band + y * G::bandPitch(l) + x;
        o[0] = s0 + s1;
        o[G::bandPlane(l)] = s0 - s1;
        o[2 * G::bandPlane(l)] = d0 + d1;
        o[3 * G::bandPlane(l)] = d0 - d1;
    }
    groupSync<G::LP>(g);
    if constexpr (l < G::L)
    {
        groupAnalysis<G, l + 1>(plane, t, g);
    }
}

// The four band convolutions of a strip of M rows x 2 cells at level l (weights from shared memory, scaled by
// 4^-l), combined with the carry: px[2m + a][2e + b] = D + G_LL +- G_LH +- G_HL +- G_HH (signs by a, b; Eq. 3'),
// where D is dIn (a float2 per row, dPitch apart) or, at the deepest level, the bias.
template <class G, int M>
__device__ __forceinline__ void groupLevelStrip(float const* band, int bandPlane, int bandPitch, float const* w,
    float const* dIn, int dPitch, float bias, float (&px)[2 * M][4])
{
    float g[4][M][2];
#pragma unroll
    for (int s = 0; s < 4; ++s)
    {
#pragma unroll
        for (int m = 0; m < M; ++m)
        {
            g[s][m][0] = g[s][m][1] = 0.f;
        }
        bandStrip<G::K, M>(band + s * bandPlane, bandPitch, w + s * G::TP, G::K, g[s]);
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
    {
        float d0 = bias, d1 = bias;
        if (dIn != nullptr)
        {
            float2 const dv = *reinterpret_cast<float2 const*>(dIn + m * dPitch);
            d0 = dv.x;
            d1 = dv.y;
        }
        float const dd[2] = {d0, d1};
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
            float const t = dd[e] + g[0][m][e];
            float const a = t + g[1][m][e], b = t - g[1][m][e];
            float const c = g[2][m][e] + g[3][m][e], f = g[2][m][e] - g[3][m][e];
            px[2 * m][2 * e] = a + c;
            px[2 * m][2 * e + 1] = a - c;
            px[2 * m + 1][2 * e] = b + f;
            px[2 * m + 1][2 * e + 1] = b - f;
        }
    }
}

// Levels L .. 2, deepest first: D_{l-1} from level l's bands and D_l, 2 x 4 values per strip (two float4 stores).
template <class G, int l>
__device__ __forceinline__ void groupDeepLevels(float* plane, int t, int g, float bias)
{
    if constexpr (l >= 2)
    {
        constexpr int pairs = G::pairs(l), n = G::strips(l);
        float const* wl = plane + G::wOff + (1 + 4 * (l - 1)) * G::TP;
        float* dOut = plane + G::dOff + ((l - 1) & 1) * G::dFloats;
        float const* dIn = plane + G::dOff + (l & 1) * G::dFloats;
#pragma unroll 1
        for (int round = 0; round < ceilDivC(n, G::LP); ++round) // one round at the compiled shapes (no loop)
        {
            int const i = t + round * G::LP;
            if (i >= n)
            {
                break;
            }
            int const cy = i / pairs, cx = 2 * (i - cy * pairs);
            float q[2][4];
            groupLevelStrip<G, 1>(plane + G::bandOff(l) + cy * G::bandPitch(l) + cx, G::bandPlane(l), G::bandPitch(l),
                wl, l < G::L ? dIn + cy * G::dPitch(l) + cx : nullptr, 0, bias, q);
            float* dn = dOut + 2 * cy * G::dPitch(l - 1) + 2 * cx;
            *reinterpret_cast<float4*>(dn) = make_float4(q[0][0], q[0][1], q[0][2], q[0][3]);
            *reinterpret_cast<float4*>(dn + G::dPitch(l - 1)) = make_float4(q[1][0], q[1][1], q[1][2], q[1][3]);
        }
        groupSync<G::LP>(g);
        groupDeepLevels<G, l - 1>(plane, t, g, bias);
    }
}

// Block-cooperative copy of x into the NG planes' X interiors. NCHW: the block's planes are one contiguous chunk
// of NG x HW elements (16-byte accesses); channels-last: each pixel's NG channels (VB-byte accesses).
template <typename TIn, class G, bool NHWC>
__device__ __forceinline__ void groupLoad(FixedPlaneArgs const& a, int64_t b, int c0, int ng, float* smem)
{
    constexpr int HW = G::HW, W = G::W, R = G::R;
    constexpr int V = 16 / static_cast<int>(sizeof(TIn));
    TIn const* src = static_cast<TIn const*>(a.src);
    auto put = [&](int gi, int p, float v)
    {
        int const y = p / W, x = p - y * W;
        smem[gi * G::planeFloats + (y + R) * G::xPitch + x + R] = v;
    };
    if constexpr (!NHWC)
    {
        uint4 const* chunk = reinterpret_cast<uint4 const*>(src + (b * a.channels + c0) * HW);
        int const vectors = ng * HW / V;
        for (int v = threadIdx.x; v < vectors; v += blockDim.x)
        {
            uint4 const raw = __ldg(chunk + v);
            TIn vals[V];
            __builtin_memcpy(vals, &raw, 16);
#pragma unroll
            for (int u = 0; u < V; ++u)
            {
                int const e = v * V + u;
                int const gi = e / HW;
                put(gi, e - gi * HW, toFloat(vals[u]));
            }
        }
    }
    else
    {
        // VB = 16 bytes when the block's channels of a pixel are a multiple of 16 bytes, else 8
        bool const wide = (ng * static_cast<int>(sizeof(TIn))) % 16 == 0;
        int const perVec = (wide ? 16 : 8) / static_cast<int>(sizeof(TIn));
        int const nv = ng / perVec;
        TIn const* base = src + b * HW * a.pitch + c0;
        for (int i = threadIdx.x; i < HW * nv; i += blockDim.x)
        {
            int const p = i / nv, k = i - p * nv;
            TIn const* at = base + p * a.pitch + k * perVec;
            TIn vals[8];
            if (wide)
            {
                uint4 const raw = __ldg(reinterpret_cast<uint4 const*>(at));
                __builtin_memcpy(vals, &raw, 16);
            }
            else
            {
                uint2 const raw = __ldg(reinterpret_cast<uint2 const*>(at));
                __builtin_memcpy(vals, &raw, 8);
            }
#pragma unroll
            for (int u = 0; u < 8; ++u)
            {
                if (u < perVec)
                {
                    put(k * perVec + u, p, toFloat(vals[u]));
                }
            }
        }
    }
}

// Block-cooperative store of the staged output (TIn, NCHW order [plane][pixel] or channels-last [pixel][plane]).
template <typename TIn, class G, bool NHWC>
__device__ __forceinline__ void groupStore(FixedPlaneArgs const& a, int64_t b, int c0, int ng, TIn const* stage)
{
    constexpr int HW = G::HW;
    TIn* dst = static_cast<TIn*>(a.out);
    if constexpr (!NHWC)
    {
        uint4* chunk = reinterpret_cast<uint4*>(dst + (b * a.channels + c0) * HW);
        int const vectors = ng * HW * static_cast<int>(sizeof(TIn)) / 16;
        for (int v = threadIdx.x; v < vectors; v += blockDim.x)
        {
            chunk[v] = reinterpret_cast<uint4 const*>(stage)[v];
        }
    }
    else
    {
        bool const wide = (ng * static_cast<int>(sizeof(TIn))) % 16 == 0;
        int const perVec = (wide ? 16 : 8) / static_cast<int>(sizeof(TIn));
        int const nv = ng / perVec;
        TIn* base = dst + b * HW * a.pitch + c0;
        for (int i = threadIdx.x; i < HW * nv; i += blockDim.x)
        {
            int const p = i / nv, k = i - p * nv;
            TIn* at = base + p * a.pitch + k * perVec;
            TIn const* from = stage + p * ng + k * perVec;
            if (wide)
            {
                *reinterpret_cast<uint4*>(at) = *reinterpret_cast<uint4 const*>(from);
            }
            else
            {
                *reinterpret_cast<uint2*>(at) = *reinterpret_cast<uint2 const*>(from);
            }
        }
    }
}

// Output rows can be stored straight from registers (NCHW, rows of 4 pixels aligned) or go through the staging.
template <class G, bool NHWC>
__host__ __device__ constexpr bool groupDirectStore()
{
    return !NHWC && G::W % 4 == 0;
}

// threadIdx.x, read anew where it is called (asm volatile: never merged with another read or hoisted out of a loop).
__device__ __forceinline__ int opaqueThreadIndex()
{
    int v;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v));
    return v;
}

// Once per block, each group for its plane: the halos (the frame of X, the band regions whole; no later phase
// writes them) and the weights of the plane's channel, scaled by the folded 1/2 factors.
template <class G>
__device__ __forceinline__ void groupSetUp(FixedPlaneArgs const& a, int c0, float* smem)
{
    constexpr int R = G::R, KK = G::KK, LP = G::LP;
    int const g = static_cast<int>(threadIdx.x) / LP, t = static_cast<int>(threadIdx.x) - g * LP;
    int const c = c0 + g;
    float* const plane = smem + g * G::planeFloats;
    zeroFrame<G::xRows, G::xPitch, R, R + G::H, R, R + G::W, LP>(plane, t);
    zeroBands<G>(plane, t);
    float* wsm = plane + G::wOff;
    for (int i = t; i < G::wFloats; i += LP)
    {
        int const set = i / G::TP, tap = i - set * G::TP;
        float v = 0.f;
        if (tap < KK)
        {
            if (set == 0)
            {
                v = __ldg(a.baseWeight + static_cast<int64_t>(c) * KK + tap);
            }
            else
            {
                int const l = (set - 1) >> 2, s = (set - 1) & 3;
                float const scale = 1.f / static_cast<float>(1 << (2 * (l + 1))); // the folded 1/2 factors
                v = __ldg(a.waveletWeight + ((static_cast<int64_t>(l) * a.channels + c) * 4 + s) * KK + tap) * scale;
            }
        }
        wsm[i] = v;
    }
}

// Grid: x, the channel groups (NG consecutive channels each); y, rows of batch items: block (x, y) takes items y,
// y + gridDim.y, ... in turn. Block: NG groups of LP lanes.
template <typename TIn, class G, bool NHWC>
__global__ void __launch_bounds__(G::kMaxThreads, G::kMinBlocks) groupPlaneKernel(FixedPlaneArgs const a)
{
    extern __shared__ __align__(16) float smem[];
    constexpr int K = G::K, L = G::L, LP = G::LP, M1 = G::M1, HW = G::HW, W = G::W;
    int const ng = a.planesPerBlock;
    int const c0 = static_cast<int>(blockIdx.x) * ng;
    constexpr int pairs = G::pairs(1), n = G::strips(1);
    groupSetUp<G>(a, c0, smem);

#pragma unroll 1
    for (int64_t b = blockIdx.y; b < a.batch; b += gridDim.y)
    {
        if (b != blockIdx.y)
        {
            __syncthreads(); // the last item's reads of X (base convolution) and of the staging are done
        }
        // The lane's indices and addresses again, from a read the compiler cannot move out of the loop: hoisted,
        // the strips' addresses stayed live across it and spilled under the launch bounds' register cap.
        int const tid = opaqueThreadIndex();
        int const g = tid / LP, t = tid - g * LP;
        int const c = c0 + g;
        float* const plane = smem + g * G::planeFloats;
        float const* w1 = plane + G::wOff + G::TP;
        float const* d1 = plane + G::dOff + G::dFloats; // D_1 lives in buffer 1 & 1
        TIn* const stage = reinterpret_cast<TIn*>(smem + ng * G::planeFloats);
        float const bias = __ldg(a.baseBias + c);
        // ---- 1. x into the X interiors (block-cooperative), then each group alone ---------------------------
        groupLoad<TIn, G, NHWC>(a, b, c0, ng, smem);
        __syncthreads();
        groupAnalysis<G, 1>(plane, t, g);
        groupDeepLevels<G, L>(plane, t, g, bias);

        // ---- 2. level 1 and the output: per strip of M1 x 2 cells, the four band convolutions with D_1, their
        //         synthesis into the 2 M1 x 4 pixels above, the base convolution (Eq. 4); y written once ----------
        TIn* const outPlane = static_cast<TIn*>(a.out) + (b * a.channels + c) * HW; // NCHW direct stores
        // rounds of LP strips (one at every compiled shape: then there is no loop, and the compiler keeps no band's
        // weights live across strips, which with 5 x 25 weights in registers spilled)
        constexpr int rounds = ceilDivC(n, LP);
#pragma unroll 1
        for (int round = 0; round < rounds; ++round)
        {
            int const i = t + round * LP;
            if (i >= n)
            {
                break;
            }
            int const sr = i / pairs, cx = 2 * (i - sr * pairs), cy0 = sr * M1;
            float px[2 * M1][4];
            groupLevelStrip<G, M1>(plane + G::bandOff(1) + cy0 * G::bandPitch(1) + cx, G::bandPlane(1), G::bandPitch(1),
                w1, L > 1 ? d1 + cy0 * G::dPitch(1) + cx : nullptr, G::dPitch(1), bias, px);
            int const y0 = 2 * cy0, x0 = 2 * cx;
            baseStrip<K, 2 * M1>(plane + y0 * G::xPitch + x0, G::xPitch, plane + G::wOff, K, px);
#pragma unroll
            for (int oy = 0; oy < 2 * M1; ++oy)
            {
                int const y = y0 + oy;
                if (y >= G::H)
                {
                    continue;
                }
                if constexpr (groupDirectStore<G, NHWC>())
                {
                    store4(outPlane + y * W + x0, px[oy]);
                }
                else
                {
#pragma unroll
                    for (int ox = 0; ox < 4; ++ox)
                    {
                        int const x = x0 + ox;
                        if (x < W)
                        {
                            int const p = y * W + x;
                            stage[NHWC ? p * ng + g : g * HW + p] = fromFloat<TIn>(px[oy][ox]);
                        }
                    }
                }
            }
        }
        if constexpr (!groupDirectStore<G, NHWC>())
        {
            __syncthreads();
            groupStore<TIn, G, NHWC>(a, b, c0, ng, stage);
        }
    }
}

// Shared memory of a groupPlaneKernel block of ng planes.
template <typename TIn, class G, bool NHWC>
constexpr size_t groupSharedBytes(int ng)
{
    size_t const planes = static_cast<size_t>(ng) * G::planeFloats * sizeof(float);
    size_t const stage = groupDirectStore<G, NHWC>() ? 0
                                                     : (static_cast<size_t>(ng) * G::HW * sizeof(TIn) + 15) / 16 * 16;
    return planes + stage;
}

} // namespace detail
} // namespace wtconv
