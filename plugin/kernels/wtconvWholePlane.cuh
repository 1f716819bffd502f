// wtconvWholePlane.cuh — device code of the whole-plane path on CUDA cores (planes up to 64 x 64, every
// WTConvNeXt stage; docs/design.md §3.1). Included by the per-dtype translation units after wtconvKernelImpl.cuh,
// whose helpers (IoStrides, toFloat, store4, ...) it uses.
#pragma once

#include "wtconvKernelImpl.cuh"

#include <utility>

namespace wtconv
{
namespace detail
{

// ---------------------------------------------------------------------------------------------------------
// Whole-plane kernel for small planes (H*W <= kSmallPlaneMax: the WTConvNeXt stages, 7x7 .. 56x56): one
// launch does everything for P planes per block in shared memory, so DRAM sees x once and y once (2N) and
// the deep levels cost no launches. Shared memory per plane: X with an r-pixel zero halo, every level's 4
// bands with an r-cell zero halo, LL_1..LL_{L-1} (compact), two D buffers (ping-pong); the channel's weights.
// Blocks take P planes of one channel (batch items), so weights are read once per block.
//
// Work per thread: a strip of cells, 2 wide and M tall (M = kStripRowsLevel1 at level 1, kStripRowsDeep
// below). The band convolutions slide a register window down the strip (one row of k + 1 band values,
// loaded as float2, feeds up to k cell rows), with the band's k^2 weights in registers; at level 1 the strip's
// 2M x 4 output pixels then take the base convolution the same way (rows of k + 3 values of X as float4).
// Shared-memory traffic at k = 5, M = 2, per level-1 strip (800 FMA): 4 bands x (6 window rows x 3 float2 +
// 7 float4 of weights) + the base convolution's 8 rows x 2 float4 + 7 float4 = 123 load instructions, ~0.15 per
// FMA (a kernel with 2 cells per thread and scalar loads issued ~0.8). Every window load is a vector load and
// consecutive threads take consecutive strips of a row. What bounds the kernel is how many warps an SM holds
// (shared memory per block, registers per thread): rows are not padded against bank conflicts, and registers
// are capped at 64 so that 4 blocks fit (docs/bench/README.md has the measurements).
constexpr int kSmallPlaneMax = 64 * 64;

#ifndef WTCONV_STRIP_ROWS
#define WTCONV_STRIP_ROWS 2
#endif
// Blocks per SM the kernel is compiled for: 4 caps registers at 64 per thread, so 4 blocks of 256 threads (more
// of fewer) fit; 56 x 56 planes (~52 KiB of shared memory each) then reach 4 blocks, where 80 registers allowed 3.
#ifndef WTCONV_PLANE_MIN_BLOCKS
#define WTCONV_PLANE_MIN_BLOCKS 4
#endif
// Threads per block of smallPlaneKernel: one per level-1 strip of the block's planes (rounded up to whole
// warps, within [kPlaneMinThreads, kPlaneMaxThreads]), so the output phase takes one round; the host sets
// SmallArgs::threads.
constexpr int kPlaneMaxThreads = 256;
constexpr int kPlaneMinThreads = 64;
#ifndef WTCONV_DEEP_STRIP_ROWS
#define WTCONV_DEEP_STRIP_ROWS 1
#endif
// Cell rows per thread strip at level 1, and at levels >= 2. The deep levels run one after another with few
// strips per plane, so their phases are as long as one strip's work: strips of one row halve that (measured up
// to 11% faster than two rows at the WTConvNeXt-T stage shapes, within 2% at 28 x 28; docs/bench/README.md).
constexpr int kStripRowsLevel1 = WTCONV_STRIP_ROWS;
constexpr int kStripRowsDeep = WTCONV_DEEP_STRIP_ROWS;

// Cell rows per strip at level l (host and device agree on the strip geometry through this).
__host__ __device__ constexpr int stripRows(int level)
{
    return level == 1 ? kStripRowsLevel1 : kStripRowsDeep;
}

// Floats per weight set in shared memory (k^2 rounded up to a float4 boundary, so sets load as float4).
__host__ __device__ constexpr int paddedTaps(int k)
{
    return (k * k + 3) / 4 * 4;
}

// Division by a divisor fixed for the launch as a multiply-high, an add and a shift (the round-up method of
// Granlund and Montgomery, as PyTorch's IntDivider): exact for 0 <= n < 2^31 and 1 <= d < 2^31. The phases below
// split flat indices into plane / row / column with these: a 32-bit division by a run-time value is ~15
// instructions, and the integer pipe was the kernel's busiest (docs/bench/README.md, the whole-plane kernel).
struct FastDivisor
{
    uint32_t mul, shift;

    static FastDivisor of(uint32_t d)
    {
        uint32_t s = 0;
        while (s < 31 && (uint32_t{1} << s) < d)
        {
            ++s;
        }
        uint64_t const m = ((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1;
        return FastDivisor{static_cast<uint32_t>(m), s};
    }
    __device__ __forceinline__ int div(int n) const
    {
        uint32_t const u = static_cast<uint32_t>(n);
        return static_cast<int>((__umulhi(u, mul) + u) >> shift);
    }
};

struct SmallArgs
{
    void const* src;            // x (planes, H, W), TIn
    void* out;                  // y (planes, ho, wo), TIn
    float const* baseWeight;    // (C, k, k)
    float const* baseBias;      // (C)
    float const* waveletWeight; // (L, 4C, k, k)
    int64_t planes;
    int32_t channels;
    int32_t h[kMaxLevels + 1], w[kMaxLevels + 1];
    int32_t k, r, levels, stride, ho, wo;
    int32_t planesPerBlock;          // P planes of one channel (batch items b0 .. b0+P-1)
    int64_t batch, batchGroups;      // B, ceil(B / P)
    int64_t blocks;                  // C * batchGroups
    IoStrides inStrides, outStrides; // x and y element offsets (their layout)
    bool channelFastest;             // neighbouring blocks take neighbouring channels (channels-last: they share
                                     // the DRAM sectors of their pixels in L2); else neighbouring batch groups
    int32_t threads;                 // block size (see kPlaneMaxThreads)
    bool vecStore;                   // y rows are stored 4 pixels at a time (NCHW, stride 1, W % 4 == 0, aligned)
    // shared-memory regions (floats from the start), each sized for P planes. Strips may run past the grid
    // (the last strip of a column, the second cell of an odd width): every region is padded so their reads
    // stay inside it; what they compute there is never stored.
    int32_t xOff, xPitch, xPlane;      // X: x with an r-pixel zero halo, xRows x xPitch (xPitch % 4 == 0)
    int32_t llOff[kMaxLevels + 1];     // LL_l, l = 1..L-1, compact h_l x w_l
    int32_t bandOff[kMaxLevels + 1];   // level l: 4 bands x P planes, each bandRows x bandPitch, zero halo
    int32_t bandPitch[kMaxLevels + 1]; // 2 * ceil(w_l / 2) + 2r (even: float2 windows)
    int32_t bandPlane[kMaxLevels + 1]; // bandPitch * (stripRows(l) * ceil(h_l / stripRows(l)) + 2r)
    int32_t zeroFloats;                // X and all band regions: [0, zeroFloats), a multiple of 4
    int32_t dOff[2], dPlane;           // D ping-pong; D_l (l = 1..L-1) is dPitch[l] wide, dPlane per plane
    int32_t dPitch[kMaxLevels + 1];    // 4 * ceil(w_{l+1} / 2): level l+1's strips store 4 pixels at once
    int32_t wOff, wPer;                // weights of the block's channel: 1 + 4L sets of paddedTaps(k) floats
    int32_t stageOff;                  // channels-last cluster mode: the output staged as fp32, P x ho x wo,
                                       // in a region dead during the output phase (deep bands, LL)
    int32_t totalFloats;
    // the phases' index splits, per level l = 0..L (level 0: x itself): cells of a plane (h_l * w_l) and of a
    // row (w_l), strips of a plane and of a row; and the output's pixels per plane
    FastDivisor cellsPerPlane[kMaxLevels + 1], cellsPerRow[kMaxLevels + 1];
    FastDivisor stripsPerPlane[kMaxLevels + 1], stripsPerRow[kMaxLevels + 1];
    FastDivisor outPerPlane;
    bool clusterOk; // channels-last and aligned for cluster mode (launchSmallKernel
                    // also needs a device and binary with thread-block clusters)
};

// Channels-last cluster mode of smallPlaneKernel: a cluster of kCluster blocks takes kCluster consecutive
// channels (same batch items). A block alone would read one channel, 2 bytes of every 32-byte sector of a
// channels-last pixel row; the cluster instead loads each pixel's kCluster channels with one 16- or
// 32-byte load and scatters them into the blocks' X planes through distributed shared memory, and writes the
// output the same way from the blocks' staging regions.
constexpr int kCluster = 8;

// wr[0..N) = w[0..N) from shared memory, w 16-byte aligned and readable up to a multiple of 4.
template <int N>
__device__ __forceinline__ void loadTaps(float const* w, float (&wr)[N])
{
#pragma unroll
    for (int v = 0; v < (N + 3) / 4; ++v)
    {
        float4 const t = reinterpret_cast<float4 const*>(w)[v];
        float const q[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int u = 0; u < 4; ++u)
        {
            if (4 * v + u < N)
            {
                wr[4 * v + u] = q[u];
            }
        }
    }
}

// g[m][e] += sum_{dy, dx < k} w[dy*k + dx] * band[(m + dy) * pitch + e + dx], m < M, e < 2: one band's
// k x k convolution (W~l of Eq. 2) at 2 horizontally adjacent cells and M rows; band points at the strip's
// top-left window corner (8-byte aligned, pitch even). K > 0: compile-time k, weights in registers, a window
// row of k + 1 values loaded as float2 serves every cell row it touches. K == 0: runtime k, plain loops.
template <int K, int M>
__device__ __forceinline__ void bandStrip(
    float const* __restrict__ band, int pitch, float const* __restrict__ w, int k, float (&g)[M][2])
{
    if constexpr (K > 0)
    {
        float wr[K * K];
        loadTaps(w, wr);
#pragma unroll
        for (int iy = 0; iy < M + K - 1; ++iy)
        {
            float win[K + 1];
            float2 const* row = reinterpret_cast<float2 const*>(band + iy * pitch);
#pragma unroll
            for (int v = 0; v < (K + 1) / 2; ++v)
            {
                float2 const t = row[v];
                win[2 * v] = t.x;
                win[2 * v + 1] = t.y;
            }
#pragma unroll
            for (int m = 0; m < M; ++m)
            {
                int const dy = iy - m;
                if (dy >= 0 && dy < K)
                {
#pragma unroll
                    for (int dx = 0; dx < K; ++dx)
                    {
                        g[m][0] = fmaf(wr[dy * K + dx], win[dx], g[m][0]);
                        g[m][1] = fmaf(wr[dy * K + dx], win[dx + 1], g[m][1]);
                    }
                }
            }
        }
    }
    else
    {
        // k >= 9: one partial sum per kernel row (docs/design.md §2.5)
        for (int dy = 0; dy < k; ++dy)
        {
            float row[M][2] = {};
            for (int dx = 0; dx < k; ++dx)
            {
                float const wv = w[dy * k + dx];
#pragma unroll
                for (int m = 0; m < M; ++m)
                {
                    row[m][0] = fmaf(wv, band[(m + dy) * pitch + dx], row[m][0]);
                    row[m][1] = fmaf(wv, band[(m + dy) * pitch + dx + 1], row[m][1]);
                }
            }
#pragma unroll
            for (int m = 0; m < M; ++m)
            {
                g[m][0] += row[m][0];
                g[m][1] += row[m][1];
            }
        }
    }
}

// acc[oy][ox] += sum_{dy, dx < k} w[dy*k + dx] * X[(oy + dy) * pitch + ox + dx], oy < R, ox < 4: the base
// convolution of an R x 4 pixel block; X points at the block's top-left window corner in the padded plane
// (16-byte aligned, pitch % 4 == 0, readable for 4 * ceil((k + 3) / 4) columns).
template <int K, int R>
__device__ __forceinline__ void baseStrip(
    float const* __restrict__ x, int pitch, float const* __restrict__ w, int k, float (&acc)[R][4])
{
    if constexpr (K > 0)
    {
        constexpr int kVec = (K + 3 + 3) / 4;
        float wr[K * K];
        loadTaps(w, wr);
#pragma unroll
        for (int iy = 0; iy < R + K - 1; ++iy)
        {
            float win[4 * kVec];
            float4 const* row = reinterpret_cast<float4 const*>(x + iy * pitch);
#pragma unroll
            for (int v = 0; v < kVec; ++v)
            {
                float4 const t = row[v];
                win[4 * v] = t.x;
                win[4 * v + 1] = t.y;
                win[4 * v + 2] = t.z;
                win[4 * v + 3] = t.w;
            }
#pragma unroll
            for (int oy = 0; oy < R; ++oy)
            {
                int const dy = iy - oy;
                if (dy >= 0 && dy < K)
                {
#pragma unroll
                    for (int dx = 0; dx < K; ++dx)
                    {
#pragma unroll
                        for (int ox = 0; ox < 4; ++ox)
                        {
                            acc[oy][ox] = fmaf(wr[dy * K + dx], win[ox + dx], acc[oy][ox]);
                        }
                    }
                }
            }
        }
    }
    else
    {
        // k >= 9: one partial sum per kernel row (docs/design.md §2.5)
        for (int dy = 0; dy < k; ++dy)
        {
            float row[R][4] = {};
            for (int dx = 0; dx < k; ++dx)
            {
                float const wv = w[dy * k + dx];
#pragma unroll
                for (int oy = 0; oy < R; ++oy)
                {
#pragma unroll
                    for (int ox = 0; ox < 4; ++ox)
                    {
                        row[oy][ox] = fmaf(wv, x[(oy + dy) * pitch + ox + dx], row[oy][ox]);
                    }
                }
            }
#pragma unroll
            for (int oy = 0; oy < R; ++oy)
            {
#pragma unroll
                for (int ox = 0; ox < 4; ++ox)
                {
                    acc[oy][ox] += row[oy][ox];
                }
            }
        }
    }
}

// Closed-form synthesis (docs/design.md Eq. 3, one level), one band at a time: pixel (dy, dx) of the 2 x 2
// block above a cell receives 1/2 [LL + s_y LH + s_x HL + s_y s_x HH], s = +1 for offset 0 and -1 for offset 1.
// Band S's filtered values g (M rows x 2 cells) are added into the 2M x 4 pixels above them, so only one
// band's values are live at a time.
template <int S, int M>
__device__ __forceinline__ void synthesizeBand(float const (&g)[M][2], float (&px)[2 * M][4])
{
#pragma unroll
    for (int m = 0; m < M; ++m)
    {
#pragma unroll
        for (int e = 0; e < 2; ++e)
        {
#pragma unroll
            for (int dy = 0; dy < 2; ++dy)
            {
#pragma unroll
                for (int dx = 0; dx < 2; ++dx)
                {
                    bool const negative = ((S & 1) && dy) != ((S & 2) && dx);
                    px[2 * m + dy][2 * e + dx] = fmaf(negative ? -0.5f : 0.5f, g[m][e], px[2 * m + dy][2 * e + dx]);
                }
            }
        }
    }
}

// The 4 bands of a strip of M x 2 cells at one level, filtered and synthesised into px (which holds what the
// caller started it with: the bias, or nothing); D, if not null, is D_l at the strip (dPitch wide), which the
// recursion adds to the LL band (docs/design.md §2.4), i.e. 1/2 D to each of a cell's 4 pixels.
template <int K, int M>
__device__ __forceinline__ void levelStrip(float const* band, int bandStride, int pitch, float const* w, int taps,
    int k, float const* d, int dPitch, float (&px)[2 * M][4])
{
    if (d != nullptr)
    {
        float dv[M][2];
#pragma unroll
        for (int m = 0; m < M; ++m)
        {
            float2 const t = *reinterpret_cast<float2 const*>(d + m * dPitch);
            dv[m][0] = t.x;
            dv[m][1] = t.y;
        }
        synthesizeBand<0, M>(dv, px);
    }
#pragma unroll
    for (int s = 0; s < 4; ++s)
    {
        float g[M][2] = {};
        bandStrip<K, M>(band + s * bandStride, pitch, w + s * taps, k, g);
        switch (s)
        {
        case 0: synthesizeBand<0, M>(g, px); break;
        case 1: synthesizeBand<1, M>(g, px); break;
        case 2: synthesizeBand<2, M>(g, px); break;
        default: synthesizeBand<3, M>(g, px); break;
        }
    }
}

// v[0..7] = 8 consecutive elements at p (16-byte aligned).
__device__ __forceinline__ void load8(float const* p, float (&v)[8])
{
    float4 const a = __ldg(reinterpret_cast<float4 const*>(p));
    float4 const b = __ldg(reinterpret_cast<float4 const*>(p) + 1);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
}
template <typename T2, typename T>
__device__ __forceinline__ void load8Half(T const* p, float (&v)[8])
{
    uint4 const u = __ldg(reinterpret_cast<uint4 const*>(p));
    uint32_t const w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
    {
        T2 h;
        __builtin_memcpy(&h, &w[i], 4);
        v[2 * i] = toFloat(h.x);
        v[2 * i + 1] = toFloat(h.y);
    }
}
__device__ __forceinline__ void load8(__half const* p, float (&v)[8])
{
    load8Half<__half2>(p, v);
}
__device__ __forceinline__ void load8(__nv_bfloat16 const* p, float (&v)[8])
{
    load8Half<__nv_bfloat162>(p, v);
}

__device__ __forceinline__ void store8(float* p, float const (&v)[8])
{
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <typename T>
__device__ __forceinline__ void store8Half(T* p, float const (&v)[8])
{
    float const(&lo)[4] = *reinterpret_cast<float const(*)[4]>(&v[0]);
    float const(&hi)[4] = *reinterpret_cast<float const(*)[4]>(&v[4]);
    store4(p, lo);
    store4(p + 4, hi);
}
__device__ __forceinline__ void store8(__half* p, float const (&v)[8])
{
    store8Half(p, v);
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, float const (&v)[8])
{
    store8Half(p, v);
}

template <typename TIn, int K, bool CLUSTER>
__global__ void __launch_bounds__(kPlaneMaxThreads, WTCONV_PLANE_MIN_BLOCKS) smallPlaneKernel(SmallArgs const a)
{
    extern __shared__ __align__(16) float smem[];
    TIn const* __restrict__ src = static_cast<TIn const*>(a.src);
    TIn* __restrict__ out = static_cast<TIn*>(a.out);
    int const k = K > 0 ? K : a.k;
    int const r = K > 0 ? K / 2 : a.r;
    int const kk = k * k;
    int const taps = paddedTaps(k);
    int const P = a.planesPerBlock;
    int const H = a.h[0], W = a.w[0];
    int const L = a.levels;
    int const nt = static_cast<int>(blockDim.x); // a.threads: sized to the block's level-1 strips

    for (int64_t blk = blockIdx.x; blk < a.blocks; blk += gridDim.x)
    {
        // P planes of ONE channel (batch-major grouping): its weights are loaded once per block
        int64_t cl, bg;
        if (a.channelFastest)
        {
            bg = blk / a.channels;
            cl = blk - bg * a.channels;
        }
        else
        {
            cl = blk / a.batchGroups;
            bg = blk - cl * a.batchGroups;
        }
        int const c = static_cast<int>(cl);
        int64_t const b0 = bg * P;
        int const np = static_cast<int>(min(static_cast<int64_t>(P), a.batch - b0));
        int64_t const planeStride = a.inStrides.batch; // between batch items
        int64_t const px = a.inStrides.pixel;
        __syncthreads();

        // ---- 0. zero X and every level's band planes (their halos stay zero), load the weights --------
        //         (1 + 4L sets of `taps` floats: base, then level-major bands; the padding taps are zero)
        for (int i = threadIdx.x; i < a.zeroFloats / 4; i += nt)
        {
            reinterpret_cast<float4*>(smem)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        // cluster mode: this thread's part of X is zero; the others may write into it once the whole cluster is
        // here (phase 1 waits), while this block loads its weights
        [[maybe_unused]] auto xZeroed = [&]
        {
            if constexpr (CLUSTER)
            {
                return cooperative_groups::this_cluster().barrier_arrive();
            }
            else
            {
                return 0;
            }
        }();
#endif
        {
            int const nw = a.wPer;
            for (int i0 = threadIdx.x; i0 < nw; i0 += 8 * nt)
            {
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u)
                {
                    int const j = i0 + u * nt;
                    v[u] = 0.f;
                    int const set = j / taps, t = j - (j / taps) * taps;
                    if (j < nw && t < kk)
                    {
                        if (set == 0)
                        {
                            v[u] = __ldg(a.baseWeight + static_cast<int64_t>(c) * kk + t);
                        }
                        else
                        {
                            int const l = (set - 1) / 4, s = (set - 1) - 4 * ((set - 1) / 4);
                            v[u] = __ldg(
                                a.waveletWeight + ((static_cast<int64_t>(l) * a.channels + c) * 4 + s) * kk + t);
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < 8; ++u)
                {
                    int const j = i0 + u * nt;
                    if (j < nw)
                    {
                        smem[a.wOff + j] = v[u];
                    }
                }
            }
        }
        __syncthreads();

        // ---- 1. level-1 cells: each thread loads 2x2 source patches (4 cells in flight) straight from
        //         DRAM into X (for the base convolution), the level-1 bands and LL_1 -------------------
        //         (cluster mode: the cluster fills every block's X, then each block builds its bands from X)
        if constexpr (CLUSTER)
        {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            namespace cg = cooperative_groups;
            cg::cluster_group cluster = cg::this_cluster();
            cluster.barrier_wait(std::move(xZeroed)); // every block of the cluster has zeroed its X
            int const rank = static_cast<int>(cluster.block_rank());
            int const hw = H * W;
            int const n = np * hw;
            TIn const* s0 = src + b0 * a.inStrides.batch + (c - rank); // channel stride 1 (channels-last)
            for (int i = rank * nt + threadIdx.x; i < n; i += kCluster * nt)
            {
                int const p = a.cellsPerPlane[0].div(i);
                int const j = i - p * hw;
                int const y = a.cellsPerRow[0].div(j), x = j - y * W;
                float v[kCluster];
                load8(s0 + p * planeStride + static_cast<int64_t>(j) * px, v);
                int const off = a.xOff + p * a.xPlane + (y + r) * a.xPitch + x + r;
#pragma unroll
                for (int m = 0; m < kCluster; ++m)
                {
                    cluster.map_shared_rank(smem, m)[off] = v[m];
                }
            }
            cluster.sync(); // X complete in every block
            int const h1 = a.h[1], w1 = a.w[1], hw1 = h1 * w1;
            int const bp = a.bandPitch[1];
            int const bs = P * a.bandPlane[1];
            for (int i = threadIdx.x; i < np * hw1; i += nt)
            {
                int const p = a.cellsPerPlane[1].div(i);
                int const j = i - p * hw1;
                int const y = a.cellsPerRow[1].div(j), x = j - y * w1;
                // beyond the plane (odd H or W) X holds its zero halo
                float const* xs = smem + a.xOff + p * a.xPlane + (2 * y + r) * a.xPitch + 2 * x + r;
                float const v00 = xs[0], v01 = xs[1], v10 = xs[a.xPitch], v11 = xs[a.xPitch + 1];
                float* bnd = smem + a.bandOff[1] + p * a.bandPlane[1] + (y + r) * bp + x + r;
                float const ll = 0.5f * (v00 + v01 + v10 + v11);
                bnd[0] = ll;
                bnd[bs] = 0.5f * (v00 + v01 - v10 - v11);
                bnd[2 * bs] = 0.5f * (v00 - v01 + v10 - v11);
                bnd[3 * bs] = 0.5f * (v00 - v01 - v10 + v11);
                if (L > 1)
                {
                    smem[a.llOff[1] + p * hw1 + j] = ll;
                }
            }
#else
            __trap(); // never launched: the host checks the binary's architecture first
#endif
        }
        else
        {
            constexpr int kInFlight = 4;
            int const h1 = a.h[1], w1 = a.w[1], hw1 = h1 * w1;
            int const n = np * hw1;
            int const bp = a.bandPitch[1];
            int const bs = P * a.bandPlane[1];
            TIn const* s0 = src + b0 * a.inStrides.batch + c * a.inStrides.channel;
            for (int i0 = threadIdx.x; i0 < n; i0 += kInFlight * nt)
            {
                float v[kInFlight][4];
#pragma unroll
                for (int u = 0; u < kInFlight; ++u)
                {
                    int const i = i0 + u * nt;
                    v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0.f;
                    if (i < n)
                    {
                        int const p = a.cellsPerPlane[1].div(i);
                        int const j = i - p * hw1;
                        int const y = a.cellsPerRow[1].div(j), x = j - y * w1;
                        TIn const* sp = s0 + p * planeStride + (static_cast<int64_t>(2 * y) * W + 2 * x) * px;
                        bool const x1 = 2 * x + 1 < W, y1 = 2 * y + 1 < H;
                        int64_t const down = W * px;
                        v[u][0] = toFloat(sp[0]);
                        v[u][1] = x1 ? toFloat(sp[px]) : 0.f;
                        v[u][2] = y1 ? toFloat(sp[down]) : 0.f;
                        v[u][3] = (x1 && y1) ? toFloat(sp[down + px]) : 0.f;
                    }
                }
#pragma unroll
                for (int u = 0; u < kInFlight; ++u)
                {
                    int const i = i0 + u * nt;
                    if (i < n)
                    {
                        int const p = a.cellsPerPlane[1].div(i);
                        int const j = i - p * hw1;
                        int const y = a.cellsPerRow[1].div(j), x = j - y * w1;
                        float const v00 = v[u][0], v01 = v[u][1], v10 = v[u][2], v11 = v[u][3];
                        // out-of-plane patch entries are 0 and land in X's zero halo: harmless
                        float* xs = smem + a.xOff + p * a.xPlane + (2 * y + r) * a.xPitch + 2 * x + r;
                        xs[0] = v00;
                        xs[1] = v01;
                        xs[a.xPitch] = v10;
                        xs[a.xPitch + 1] = v11;
                        float* bnd = smem + a.bandOff[1] + p * a.bandPlane[1] + (y + r) * bp + x + r;
                        float const ll = 0.5f * (v00 + v01 + v10 + v11);
                        bnd[0] = ll;
                        bnd[bs] = 0.5f * (v00 + v01 - v10 - v11);
                        bnd[2 * bs] = 0.5f * (v00 - v01 + v10 - v11);
                        bnd[3 * bs] = 0.5f * (v00 - v01 - v10 + v11);
                        if (L > 1)
                        {
                            smem[a.llOff[1] + p * hw1 + j] = ll; // LL_1 = the unfiltered LL band
                        }
                    }
                }
            }
        }
        __syncthreads();

        // ---- 2. levels 2..L: bands of LL_{l-1} (interior only) and LL_l -------------------------------
        for (int l = 2; l <= L; ++l)
        {
            int const hs = a.h[l - 1], ws = a.w[l - 1], hl = a.h[l], wl = a.w[l], hwl = hl * wl;
            int const n = np * hwl;
            int const bp = a.bandPitch[l];
            int const bs = P * a.bandPlane[l];
            for (int i = threadIdx.x; i < n; i += nt)
            {
                int const p = a.cellsPerPlane[l].div(i);
                int const j = i - p * hwl;
                int const y = a.cellsPerRow[l].div(j), x = j - y * wl;
                int const sy = 2 * y, sx = 2 * x;
                float const* ls = smem + a.llOff[l - 1] + p * hs * ws + sy * ws + sx;
                float const v00 = ls[0];
                float const v01 = sx + 1 < ws ? ls[1] : 0.f;
                float const v10 = sy + 1 < hs ? ls[ws] : 0.f;
                float const v11 = (sx + 1 < ws && sy + 1 < hs) ? ls[ws + 1] : 0.f;
                float* bnd = smem + a.bandOff[l] + p * a.bandPlane[l] + (y + r) * bp + x + r;
                float const ll = 0.5f * (v00 + v01 + v10 + v11);
                bnd[0] = ll;
                bnd[bs] = 0.5f * (v00 + v01 - v10 - v11);
                bnd[2 * bs] = 0.5f * (v00 - v01 + v10 - v11);
                bnd[3 * bs] = 0.5f * (v00 - v01 - v10 + v11);
                if (l < L)
                {
                    smem[a.llOff[l] + p * hwl + j] = ll;
                }
            }
            __syncthreads();
        }

        // ---- 3. levels L..2, deepest first: per strip of cells, the 4 band convolutions (+ D_l into LL),
        //         synthesised into D_{l-1}, 4 pixels per float4 store -----------------------------------
        int cur = 0; // D_l lives in dOff[cur] (absent at l = L)
        for (int l = L; l >= 2; --l)
        {
            constexpr int M = kStripRowsDeep;
            int const hl = a.h[l], wl = a.w[l];
            int const pairs = (wl + 1) / 2, strips = (hl + M - 1) / M;
            int const perPlane = pairs * strips;
            int const n = np * perPlane;
            int const bp = a.bandPitch[l];
            int const bs = P * a.bandPlane[l];
            float const* wl4 = smem + a.wOff + (1 + 4 * (l - 1)) * taps;
            for (int i = threadIdx.x; i < n; i += nt)
            {
                int const p = a.stripsPerPlane[l].div(i);
                int const j = i - p * perPlane;
                int const sr = a.stripsPerRow[l].div(j);
                int const cy0 = sr * M, cx = (j - sr * pairs) * 2;
                float q[2 * M][4] = {};
                levelStrip<K, M>(smem + a.bandOff[l] + p * a.bandPlane[l] + cy0 * bp + cx, bs, bp, wl4, taps, k,
                    l < L ? smem + a.dOff[cur] + p * a.dPlane + cy0 * a.dPitch[l] + cx : nullptr, a.dPitch[l], q);
                float* dn = smem + a.dOff[cur ^ 1] + p * a.dPlane + (2 * cy0) * a.dPitch[l - 1] + 2 * cx;
#pragma unroll
                for (int row = 0; row < 2 * M; ++row)
                {
                    *reinterpret_cast<float4*>(dn + row * a.dPitch[l - 1]) = make_float4(
                        q[row][0], q[row][1], q[row][2], q[row][3]);
                }
            }
            __syncthreads();
            cur ^= 1;
        }

        // ---- 4. level 1 and the output: per strip of M x 2 cells, the 4 band convolutions (+ D_1), their
        //         synthesis into the 2M x 4 pixels above, + bias + base convolution (Eq. 4); y written once --
        {
            constexpr int M = kStripRowsLevel1;
            int const h1 = a.h[1], w1 = a.w[1];
            int const pairs = (w1 + 1) / 2, strips = (h1 + M - 1) / M;
            int const perPlane = pairs * strips;
            int const n = np * perPlane;
            int const bp = a.bandPitch[1];
            int const bs = P * a.bandPlane[1];
            float const* w14 = smem + a.wOff + taps;
            float const bias = __ldg(a.baseBias + c);
            for (int i = threadIdx.x; i < n; i += nt)
            {
                int const p = a.stripsPerPlane[1].div(i);
                int const j = i - p * perPlane;
                int const sr = a.stripsPerRow[1].div(j);
                int const cy0 = sr * M, cx = (j - sr * pairs) * 2;
                float acc[2 * M][4];
#pragma unroll
                for (int row = 0; row < 2 * M; ++row)
                {
                    acc[row][0] = acc[row][1] = acc[row][2] = acc[row][3] = bias;
                }
                levelStrip<K, M>(smem + a.bandOff[1] + p * a.bandPlane[1] + cy0 * bp + cx, bs, bp, w14, taps, k,
                    L > 1 ? smem + a.dOff[cur] + p * a.dPlane + cy0 * a.dPitch[1] + cx : nullptr, a.dPitch[1], acc);
                int const y0 = 2 * cy0, x0 = 2 * cx;
                float const* xs = smem + a.xOff + p * a.xPlane + y0 * a.xPitch + x0; // window corner (padded X)
                if (a.stride == 1)
                {
                    baseStrip<K, 2 * M>(xs, a.xPitch, smem + a.wOff, k, acc);
                }
                else
                {
                    // a strided layer: the base convolution at the kept pixels only
                    float const* wb = smem + a.wOff;
#pragma unroll
                    for (int oy = 0; oy < 2 * M; ++oy)
                    {
#pragma unroll
                        for (int ox = 0; ox < 4; ++ox)
                        {
                            if ((y0 + oy) % a.stride == 0 && (x0 + ox) % a.stride == 0)
                            {
                                float t = 0.f;
                                for (int dy = 0; dy < k; ++dy)
                                {
                                    float row = 0.f;               // k >= 9 (K == 0): a partial sum per kernel row
                                    float& sum = K == 0 ? row : t; // (docs/design.md §2.5)
                                    for (int dx = 0; dx < k; ++dx)
                                    {
                                        sum = fmaf(wb[dy * k + dx], xs[(oy + dy) * a.xPitch + ox + dx], sum);
                                    }
                                    if constexpr (K == 0)
                                    {
                                        t += row;
                                    }
                                }
                                acc[oy][ox] += t;
                            }
                        }
                    }
                }
                TIn* o = out + (b0 + p) * a.outStrides.batch + c * a.outStrides.channel;
#pragma unroll
                for (int oy = 0; oy < 2 * M; ++oy)
                {
                    int const y = y0 + oy;
                    if (y >= H || (a.stride != 1 && y % a.stride != 0))
                    {
                        continue;
                    }
                    if (!CLUSTER && a.vecStore && x0 + 3 < W)
                    {
                        store4(o + static_cast<int64_t>(y) * a.wo + x0, acc[oy]);
                        continue;
                    }
#pragma unroll
                    for (int ox = 0; ox < 4; ++ox)
                    {
                        int const x = x0 + ox;
                        if (x >= W || (a.stride != 1 && x % a.stride != 0))
                        {
                            continue;
                        }
                        // stride 1 (every WTConvNeXt layer): no division per pixel
                        int const oj = a.stride == 1 ? y * a.wo + x : (y / a.stride) * a.wo + x / a.stride;
                        if constexpr (CLUSTER)
                        {
                            smem[a.stageOff + p * a.ho * a.wo + oj] = acc[oy][ox];
                        }
                        else
                        {
                            o[static_cast<int64_t>(oj) * a.outStrides.pixel] = fromFloat<TIn>(acc[oy][ox]);
                        }
                    }
                }
            }
            __syncthreads();
        }

        // ---- 5. cluster mode: each pixel's kCluster channels from the blocks' staging, one vector store ---
        if constexpr (CLUSTER)
        {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            namespace cg = cooperative_groups;
            cg::cluster_group cluster = cg::this_cluster();
            cluster.sync(); // every block has staged its output
            int const rank = static_cast<int>(cluster.block_rank());
            int const hwo = a.ho * a.wo;
            TIn* o0 = out + b0 * a.outStrides.batch + (c - rank);
            for (int i = rank * nt + threadIdx.x; i < np * hwo; i += kCluster * nt)
            {
                int const p = a.outPerPlane.div(i);
                int const j = i - p * hwo;
                float v[kCluster];
#pragma unroll
                for (int m = 0; m < kCluster; ++m)
                {
                    v[m] = cluster.map_shared_rank(smem, m)[a.stageOff + i];
                }
                store8(o0 + p * a.outStrides.batch + static_cast<int64_t>(j) * a.outStrides.pixel, v);
            }
            cluster.sync(); // no block reads another's shared memory any more (it may be reused or freed)
#endif
        }
    }
}

template <typename TIn>
cudaError_t launchSmall(SmallArgs const& a, cudaStream_t stream);

// Per-instantiation launch state of a whole-plane kernel: its two instantiations' shared-memory limits
// (wtconvSharedMemory.cuh: raised once per device and size, safely from several threads) and, per device, whether
// the cluster instantiation can run there (0 unknown, 1 yes, -1 no).
struct PlaneKernelState
{
    static constexpr int kMaxDevices = 64;
    SharedMemoryLimit plainLimit, clusterLimit;
    std::atomic<signed char> clusterRuns[kMaxDevices]{};
};

// Whether p's channels-last I/O allows the cluster mode: C and the channel pitch multiples of kCluster, 16-byte
// aligned tensors (launchSmallKernel also needs a device and binary with thread-block clusters). Host code.
inline bool clusterLayout(WTConvParams const& p)
{
    int64_t const pitch = pixelPitch(p);
    return p.layout == Layout::kNHWC && p.channels % kCluster == 0 && pitch % kCluster == 0
        && reinterpret_cast<uintptr_t>(p.input) % 16 == 0 && reinterpret_cast<uintptr_t>(p.output) % 16 == 0;
}

// Whether `clustered` can run on `device`: compute capability >= 9.0 and the kernel compiled from sm_90+ code (a
// build for older architectures only, JIT-compiled from their PTX, has no cluster code). Decided once per device
// (every thread computes the same answer).
template <typename Args>
bool clusterSupported(PlaneKernelState& state, void (*clustered)(Args), int device)
{
    bool const tracked = device < PlaneKernelState::kMaxDevices;
    if (tracked && state.clusterRuns[device].load(std::memory_order_relaxed) != 0)
    {
        return state.clusterRuns[device].load(std::memory_order_relaxed) > 0;
    }
    int major = 0;
    cudaFuncAttributes fa{};
    bool const ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess
        && major >= 9 && cudaFuncGetAttributes(&fa, clustered) == cudaSuccess && fa.ptxVersion >= 90;
    if (tracked)
    {
        state.clusterRuns[device].store(ok ? 1 : -1, std::memory_order_relaxed);
    }
    return ok;
}

// One launch of a whole-plane kernel: `clustered` in clusters of kCluster blocks when `cluster` asks for it and the
// device and binary run it, else `plain`.
template <typename Args>
cudaError_t launchPlaneKernel(PlaneKernelState& state, void (*plain)(Args), void (*clustered)(Args), Args const& a,
    int64_t blocks, int threads, size_t smemBytes, bool cluster, cudaStream_t stream)
{
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess)
    {
        return e;
    }
    bool const useCluster = cluster && blocks % kCluster == 0 && blocks < (int64_t{1} << 31)
        && clusterSupported(state, clustered, device);
    e = useCluster ? state.clusterLimit.allow(clustered, device, smemBytes)
                   : state.plainLimit.allow(plain, device, smemBytes);
    if (e != cudaSuccess)
    {
        return e;
    }
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(useCluster ? blocks : gridFor(blocks)));
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smemBytes;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = kCluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = useCluster ? 1 : 0;
    e = cudaLaunchKernelEx(&config, useCluster ? clustered : plain, a);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename TIn, int K>
cudaError_t launchSmallKernel(SmallArgs const& a, cudaStream_t stream)
{
    static PlaneKernelState state;
    return launchPlaneKernel(state, smallPlaneKernel<TIn, K, false>, smallPlaneKernel<TIn, K, true>, a, a.blocks,
        a.threads, static_cast<size_t>(a.totalFloats) * sizeof(float), a.clusterOk, stream);
}

#define WTCONV_DEFINE_LAUNCH_SMALL(TIN)                                                                                \
    template <>                                                                                                        \
    cudaError_t launchSmall<TIN>(SmallArgs const& a, cudaStream_t stream)                                              \
    {                                                                                                                  \
        switch (a.k)                                                                                                   \
        {                                                                                                              \
        case 1: return launchSmallKernel<TIN, 1>(a, stream);                                                           \
        case 3: return launchSmallKernel<TIN, 3>(a, stream);                                                           \
        case 5: return launchSmallKernel<TIN, 5>(a, stream);                                                           \
        case 7: return launchSmallKernel<TIN, 7>(a, stream);                                                           \
        default: return launchSmallKernel<TIN, 0>(a, stream);                                                          \
        }                                                                                                              \
    }

} // namespace detail
} // namespace wtconv
