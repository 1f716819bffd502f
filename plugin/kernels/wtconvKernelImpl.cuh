// wtconvKernelImpl.cuh — device code of the fused WTConv inference kernels (the maths: docs/design.md §2.4; the
// kernels, their traffic and the launch sequence: §3.1). Included by the per-dtype translation units
// (wtconvKernel_f32.cu, _f16.cu, _bf16.cu, wtconvLevels.cu) which instantiate the launchers below, so the
// instantiations compile in parallel.
#pragma once

#include "wtconvKernel.h"
#include "wtconvSharedMemory.cuh"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

// Every launch plan uses up to 99 KB of shared memory per block (wtconvSharedMemory.cuh); GPUs before compute
// capability 8.0 give at most 64 KB. Refuse to build code they would fail to run.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error                                                                                                                 \
    "the wtconv kernels need compute capability 8.0 or newer (99 KB of shared memory per block): remove architectures below 80 from CMAKE_CUDA_ARCHITECTURES"
#endif

namespace wtconv
{
namespace detail
{

constexpr int kThreads = 256;     // threads per block of every kernel
constexpr int kMaxTile = 64;      // largest tile edge (in pixels of the source grid)
constexpr int kMicro = 4;         // each thread computes a 4 x 4 micro-tile of one convolution
constexpr int kPoolMaxLevels = 3; // a pooling launch produces up to 3 levels (a thread reads an 8 x 8 block)

// Element offsets of a 4-D tensor: (b, c, y, x) lies at b * batch + c * channel + (y * width + x) * pixel.
// NCHW: {C*H*W, H*W, 1}; NHWC with channel pitch Cp: {H*W*Cp, 1, Cp}; the fp32 workspace planes are NCHW.
struct IoStrides
{
    int64_t batch;
    int64_t channel;
    int64_t pixel;
};

inline int64_t gridFor(int64_t blocks)
{
    int64_t constexpr kMaxGrid = (int64_t{1} << 31) - 1;
    return blocks < kMaxGrid ? blocks : kMaxGrid;
}

__device__ __forceinline__ float toFloat(float v)
{
    return v;
}
__device__ __forceinline__ float toFloat(__half v)
{
    return __half2float(v);
}
__device__ __forceinline__ float toFloat(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v)
{
    return v;
}
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v)
{
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

// Stores 4 consecutive values; dst is aligned to 4 elements (checked by the caller).
__device__ __forceinline__ void store4(float* dst, float const (&v)[4])
{
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(__half* dst, float const (&v)[4])
{
    __half2 a = __floats2half2_rn(v[0], v[1]);
    __half2 b = __floats2half2_rn(v[2], v[3]);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&a);
    u.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(dst) = u;
}
__device__ __forceinline__ void store4(__nv_bfloat16* dst, float const (&v)[4])
{
    __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]);
    __nv_bfloat162 b = __floats2bfloat162_rn(v[2], v[3]);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&a);
    u.y = *reinterpret_cast<uint32_t*>(&b);
    *reinterpret_cast<uint2*>(dst) = u;
}

// acc[oy][ox] += sum_{dy,dx < k} w[dy*k+dx] * src[(oy+dy)*pitch + ox+dx]: a 4 x 4 micro-tile of a k x k
// correlation over a zero-padded shared-memory plane. K > 0: compile-time k, a register window along each
// input row (K+3 values loaded once as float4, reused by up to 4 output rows and K taps: ~0.1 loads per FMA);
// src must be 16-byte aligned and pitch a multiple of 4. K == 0: runtime k (9..15), plain loops, a partial
// sum per kernel row.
template <int K>
__device__ __forceinline__ void convMicro(
    float const* __restrict__ src, int pitch, float const* __restrict__ w, int k, float (&acc)[kMicro][kMicro])
{
    if constexpr (K > 0)
    {
        constexpr int kWin = K + kMicro - 1;
        constexpr int kVec = (kWin + 3) / 4;
        float wr[K * K];
#pragma unroll
        for (int i = 0; i < K * K; ++i)
        {
            wr[i] = w[i];
        }
#pragma unroll
        for (int iy = 0; iy < K + kMicro - 1; ++iy)
        {
            float win[4 * kVec];
            float4 const* row = reinterpret_cast<float4 const*>(src + iy * pitch);
#pragma unroll
            for (int v = 0; v < kVec; ++v)
            {
                float4 t = row[v];
                win[4 * v + 0] = t.x;
                win[4 * v + 1] = t.y;
                win[4 * v + 2] = t.z;
                win[4 * v + 3] = t.w;
            }
#pragma unroll
            for (int oy = 0; oy < kMicro; ++oy)
            {
                int const dy = iy - oy;
                if (dy >= 0 && dy < K)
                {
#pragma unroll
                    for (int dx = 0; dx < K; ++dx)
                    {
#pragma unroll
                        for (int ox = 0; ox < kMicro; ++ox)
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
        // k >= 9: one partial sum per kernel row (docs/design.md §2.5: k^2 taps in a single fp32 accumulator
        // can exceed the fp32 accuracy contract at k = 15)
        for (int dy = 0; dy < k; ++dy)
        {
            float row[kMicro][kMicro] = {};
            for (int dx = 0; dx < k; ++dx)
            {
                float const wv = w[dy * k + dx];
#pragma unroll
                for (int oy = 0; oy < kMicro; ++oy)
                {
#pragma unroll
                    for (int ox = 0; ox < kMicro; ++ox)
                    {
                        row[oy][ox] = fmaf(wv, src[(oy + dy) * pitch + ox + dx], row[oy][ox]);
                    }
                }
            }
#pragma unroll
            for (int oy = 0; oy < kMicro; ++oy)
            {
#pragma unroll
                for (int ox = 0; ox < kMicro; ++ox)
                {
                    acc[oy][ox] += row[oy][ox];
                }
            }
        }
    }
}

// Geometry of one level pass (host-computed, passed by value). The tiled path reads and writes planar (NCHW)
// tensors only: channels-last input reaches it transposed (wtconvTranspose.cuh). Run-time layout strides here
// cost every tile load its own 64-bit address arithmetic (+64 % instructions in the load loop) and made the
// path 12-19 % slower (docs/bench/README.md, "The tiled path").
struct LevelArgs
{
    void const* src;          // (planes, hs, ws): x (level 1, I/O dtype) or LL_{l-1} (fp32 workspace)
    float const* dIn;         // (planes, hc, wc) D_l, fp32; nullptr at the deepest level
    void* out;                // BASE: y (planes, ho, wo), I/O dtype; else D_{l-1} (planes, hs, ws) fp32
    float const* baseWeight;  // (C, k, k) (BASE only)
    float const* baseBias;    // (C)       (BASE only)
    float const* levelWeight; // (4C, k, k) W~l of this level
    int64_t planes;           // B * C
    int32_t channels;         // C
    int32_t hs, ws;           // source grid (level l-1)
    int32_t hc, wc;           // cell grid (level l) = ceil(hs / 2), ceil(ws / 2)
    int32_t k, r;             // kernel size, radius
    int32_t stride;           // output subsampling (BASE only; 1 for level passes)
    int32_t ho, wo;           // output size (BASE: ceil(hs/stride), ...; else hs, ws)
    int32_t th, tw;           // tile (multiples of 8, <= kMaxTile)
    int32_t tilesX, tilesY;   // tiles per plane
    int32_t planesPerBlock;   // P (> 1 only when one tile covers a plane)
    int64_t blocks;           // total work groups (grid-stride loop over them)
    // shared-memory layout (floats), per plane
    int32_t sOff;     // leading pad columns of the source tile, so the base-conv windows are 16-byte aligned
    int32_t sh, sp;   // source tile rows, pitch
    int32_t bh, bp;   // band tile rows, pitch (4 bands)
    int32_t tch, tcw; // cells per tile (th / 2, tw / 2)
    int32_t perPlane; // floats per plane: source + 4 bands + 4 G + weights
    bool vecStore;    // output rows allow aligned 4-wide stores
};

// One level pass over a tile of the source grid (level l-1), for P planes at once.
//   1. S = source tile with a 2r halo (zeros outside the grid), fp32 in shared memory.
//   2. Haar bands of the cells [c0 - r, c0 + tc + r) of level l from S (zero outside the cell grid falls out
//      of the zero source halo, since a cell i >= hc has 2i >= hs).
//   3. G_s = W~l_s * band_s for the tile's cells (4 x 4 micro-tiles), G_LL += D_l.
//   4. BASE (output pass): y(p,q) = W~b*x + b~b + 1/2[G_LL + s_p G_LH + s_q G_HL + s_p s_q G_HH](p>>1, q>>1);
//      else D_{l-1}(p,q) = 1/2[...] (same combination, no base convolution).
template <typename TIn, typename TOut, int K, bool BASE>
__global__ void __launch_bounds__(kThreads, 3) levelKernel(LevelArgs const a)
{
    extern __shared__ __align__(16) float smem[];
    TIn const* __restrict__ src = static_cast<TIn const*>(a.src);
    int const k = K > 0 ? K : a.k;
    int const r = K > 0 ? K / 2 : a.r;
    int const kk = k * k;
    int const P = a.planesPerBlock;
    int const sPlane = a.sh * a.sp;
    int const bPlane = a.bh * a.bp;
    int const gPlane = a.tch * a.tcw;
    int const tilesPerPlane = a.tilesX * a.tilesY;

    for (int64_t blk = blockIdx.x; blk < a.blocks; blk += gridDim.x)
    {
        int64_t plane0;
        int ty, tx;
        if (P > 1)
        {
            plane0 = blk * P;
            ty = 0;
            tx = 0;
        }
        else
        {
            plane0 = blk / tilesPerPlane;
            int const t = static_cast<int>(blk - plane0 * tilesPerPlane);
            ty = t / a.tilesX;
            tx = t - ty * a.tilesX;
        }
        int const np = static_cast<int>(min(static_cast<int64_t>(P), a.planes - plane0));
        int const c0 = static_cast<int>(plane0 % a.channels); // one 64-bit division per group; int32 after
        int const y0 = ty * a.th;                             // even
        int const x0 = tx * a.tw;

        __syncthreads(); // the previous group's reads of shared memory are done

        // ---- 1. weights and source tile -------------------------------------------------------------
        // Loads are issued in batches (16 per thread in flight) before their shared-memory stores: a
        // load-store loop would wait one DRAM latency per element and dominate the kernel.
        {
            int const wPer = BASE ? 5 * kk : 4 * kk;
            int const nW = np * wPer;
            for (int i0 = threadIdx.x; i0 < nW; i0 += 8 * kThreads)
            {
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u)
                {
                    int const i = i0 + u * kThreads;
                    v[u] = 0.f;
                    if (i < nW)
                    {
                        int const p = i / wPer;
                        int const j = i - p * wPer;
                        int64_t const c = (c0 + p) % a.channels;
                        v[u] = j < 4 * kk ? __ldg(a.levelWeight + c * 4 * kk + j)
                                          : __ldg(a.baseWeight + c * kk + (j - 4 * kk));
                    }
                }
#pragma unroll
                for (int u = 0; u < 8; ++u)
                {
                    int const i = i0 + u * kThreads;
                    if (i < nW)
                    {
                        int const p = i / wPer;
                        smem[p * a.perPlane + sPlane + 4 * bPlane + 4 * gPlane + (i - p * wPer)] = v[u];
                    }
                }
            }
            // Source tile and Haar bands in one pass: a thread per band cell (bi, bj) of the tile's cells with
            // their r-cell halo loads its 2 x 2 source patch, stores it into S (for the base convolution) and
            // its 4 Haar coefficients into the band planes. Warps over cell rows, lanes over cell columns
            // (tcw + 2r <= 64 cells: 2 chunks), 16 loads in flight per thread.
            int const warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
            int const cellsW = a.tcw + 2 * r, cellsH = a.tch + 2 * r;
            int const rows = np * cellsH;
            constexpr int kRowsInFlight = 2;
            constexpr int kColChunks = 2;
            for (int row0 = warp; row0 < rows; row0 += (kThreads / 32) * kRowsInFlight)
            {
                float v[kRowsInFlight][kColChunks][4];
#pragma unroll
                for (int u = 0; u < kRowsInFlight; ++u)
                {
                    int const row = row0 + u * (kThreads / 32);
                    int const p = row / cellsH;
                    int const gy = y0 - 2 * r + 2 * (row - p * cellsH);
                    bool const rowOk = row < rows;
                    bool const y0ok = rowOk && gy >= 0 && gy < a.hs;
                    bool const y1ok = rowOk && gy + 1 >= 0 && gy + 1 < a.hs;
                    TIn const* plane = src + (plane0 + p) * static_cast<int64_t>(a.hs) * a.ws;
#pragma unroll
                    for (int cc = 0; cc < kColChunks; ++cc)
                    {
                        int const bj = lane + 32 * cc;
                        int const gx = x0 - 2 * r + 2 * bj;
                        bool const colOk = bj < cellsW;
                        bool const x0ok = colOk && gx >= 0 && gx < a.ws;
                        bool const x1ok = colOk && gx + 1 >= 0 && gx + 1 < a.ws;
                        int64_t const o0 = static_cast<int64_t>(gy) * a.ws + gx;
                        v[u][cc][0] = (y0ok && x0ok) ? toFloat(plane[o0]) : 0.f;
                        v[u][cc][1] = (y0ok && x1ok) ? toFloat(plane[o0 + 1]) : 0.f;
                        v[u][cc][2] = (y1ok && x0ok) ? toFloat(plane[o0 + a.ws]) : 0.f;
                        v[u][cc][3] = (y1ok && x1ok) ? toFloat(plane[o0 + a.ws + 1]) : 0.f;
                    }
                }
#pragma unroll
                for (int u = 0; u < kRowsInFlight; ++u)
                {
                    int const row = row0 + u * (kThreads / 32);
                    int const p = row / cellsH;
                    int const bi = row - p * cellsH;
#pragma unroll
                    for (int cc = 0; cc < kColChunks; ++cc)
                    {
                        int const bj = lane + 32 * cc;
                        if (row < rows && bj < cellsW)
                        {
                            float* sRow = smem + p * a.perPlane + (2 * bi) * a.sp + 2 * bj + a.sOff;
                            float const v00 = v[u][cc][0], v01 = v[u][cc][1], v10 = v[u][cc][2], v11 = v[u][cc][3];
                            sRow[0] = v00;
                            sRow[1] = v01;
                            sRow[a.sp] = v10;
                            sRow[a.sp + 1] = v11;
                            float* bnd = smem + p * a.perPlane + sPlane + bi * a.bp + bj;
                            bnd[0] = 0.5f * (v00 + v01 + v10 + v11);
                            bnd[bPlane] = 0.5f * (v00 + v01 - v10 - v11);
                            bnd[2 * bPlane] = 0.5f * (v00 - v01 + v10 - v11);
                            bnd[3 * bPlane] = 0.5f * (v00 - v01 - v10 + v11);
                        }
                    }
                }
            }
        }
        __syncthreads();

        // ---- 3. G = W~l * bands (+ D_l on the LL band) -------------------------------------------
        {
            int const mx = a.tcw / kMicro;
            int const my = a.tch / kMicro;
            int const perBand = mx * my;
            int const c0y = y0 / 2, c0x = x0 / 2;
            for (int i = threadIdx.x; i < np * 4 * perBand; i += kThreads)
            {
                int const pb = i / perBand;
                int const j = i - pb * perBand;
                int const p = pb >> 2;
                int const band = pb & 3;
                int const cy = (j / mx) * kMicro;
                int const cx = (j - (j / mx) * mx) * kMicro;
                float* base = smem + p * a.perPlane;
                float const* w = base + sPlane + 4 * bPlane + 4 * gPlane + band * kk;
                float acc[kMicro][kMicro] = {};
                convMicro<K>(base + sPlane + band * bPlane + cy * a.bp + cx, a.bp, w, k, acc);
                if (band == 0 && a.dIn != nullptr)
                {
                    float const* d = a.dIn + (plane0 + p) * static_cast<int64_t>(a.hc) * a.wc;
#pragma unroll
                    for (int oy = 0; oy < kMicro; ++oy)
                    {
#pragma unroll
                        for (int ox = 0; ox < kMicro; ++ox)
                        {
                            int const gy = c0y + cy + oy, gx = c0x + cx + ox;
                            if (gy < a.hc && gx < a.wc)
                            {
                                acc[oy][ox] += __ldg(d + static_cast<int64_t>(gy) * a.wc + gx);
                            }
                        }
                    }
                }
                float* g = base + sPlane + 4 * bPlane + band * gPlane + cy * a.tcw + cx;
#pragma unroll
                for (int oy = 0; oy < kMicro; ++oy)
                {
                    store4(g + oy * a.tcw, acc[oy]);
                }
            }
        }
        __syncthreads();

        // ---- 4. synthesis (+ base convolution) and the single write ------------------------------
        if constexpr (BASE)
        {
            TOut* __restrict__ out = static_cast<TOut*>(a.out);
            if (a.stride == 1)
            {
                int const mx = a.tw / kMicro;
                int const perPlane = mx * (a.th / kMicro);
                for (int i = threadIdx.x; i < np * perPlane; i += kThreads)
                {
                    int const p = i / perPlane;
                    int const j = i - p * perPlane;
                    int const py = (j / mx) * kMicro;
                    int const px = (j - (j / mx) * mx) * kMicro;
                    float const* base = smem + p * a.perPlane;
                    float const* wsm = base + sPlane + 4 * bPlane + 4 * gPlane;
                    int const c = (c0 + p) % a.channels;
                    float const bias = __ldg(a.baseBias + c);
                    float acc[kMicro][kMicro] = {};
                    convMicro<K>(base + (py + r) * a.sp + px + r + a.sOff, a.sp, wsm + 4 * kk, k, acc);
                    float const* g = base + sPlane + 4 * bPlane;
                    TOut* o = out + (plane0 + p) * static_cast<int64_t>(a.ho) * a.wo;
#pragma unroll
                    for (int oy = 0; oy < kMicro; ++oy)
                    {
                        int const ly = py + oy;
                        float const sy = (ly & 1) ? -1.f : 1.f;
                        float v[kMicro];
#pragma unroll
                        for (int ox = 0; ox < kMicro; ++ox)
                        {
                            int const lx = px + ox;
                            float const sx = (lx & 1) ? -1.f : 1.f;
                            int const gi = (ly >> 1) * a.tcw + (lx >> 1);
                            float const t = g[gi] + sy * g[gi + gPlane]
                                + sx * (g[gi + 2 * gPlane] + sy * g[gi + 3 * gPlane]);
                            v[ox] = acc[oy][ox] + bias + 0.5f * t;
                        }
                        int const gy = y0 + ly;
                        int const gx = x0 + px;
                        if (gy < a.ho)
                        {
                            TOut* orow = o + static_cast<int64_t>(gy) * a.wo + gx;
                            if (a.vecStore && gx + kMicro <= a.wo)
                            {
                                store4(orow, v);
                            }
                            else
                            {
#pragma unroll
                                for (int ox = 0; ox < kMicro; ++ox)
                                {
                                    if (gx + ox < a.wo)
                                    {
                                        orow[ox] = fromFloat<TOut>(v[ox]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            else
            {
                // Strided output: only the kept pixels (s*i, s*j) of this tile, one per thread, direct k x k.
                int const s = a.stride;
                int const iy0 = (y0 + s - 1) / s, ix0 = (x0 + s - 1) / s;
                int const iy1 = min((y0 + a.th + s - 1) / s, a.ho), ix1 = min((x0 + a.tw + s - 1) / s, a.wo);
                int const ny = max(iy1 - iy0, 0), nx = max(ix1 - ix0, 0);
                for (int i = threadIdx.x; i < np * ny * nx; i += kThreads)
                {
                    int const p = i / (ny * nx);
                    int const j = i - p * (ny * nx);
                    int const oyI = iy0 + j / nx, oxI = ix0 + j % nx;
                    int const ly = oyI * s - y0, lx = oxI * s - x0;
                    float const* base = smem + p * a.perPlane;
                    float const* wsm = base + sPlane + 4 * bPlane + 4 * gPlane + 4 * kk;
                    int const c = (c0 + p) % a.channels;
                    float acc = __ldg(a.baseBias + c);
                    float const* sv = base + (ly + r) * a.sp + lx + r + a.sOff;
                    for (int dy = 0; dy < k; ++dy)
                    {
                        float row = 0.f;                 // k >= 9 (K == 0): a partial sum per kernel row
                        float& sum = K == 0 ? row : acc; // (docs/design.md §2.5)
                        for (int dx = 0; dx < k; ++dx)
                        {
                            sum = fmaf(wsm[dy * k + dx], sv[dy * a.sp + dx], sum);
                        }
                        if constexpr (K == 0)
                        {
                            acc += row;
                        }
                    }
                    float const* g = base + sPlane + 4 * bPlane;
                    float const sy = (ly & 1) ? -1.f : 1.f, sx = (lx & 1) ? -1.f : 1.f;
                    int const gi = (ly >> 1) * a.tcw + (lx >> 1);
                    float const t = g[gi] + sy * g[gi + gPlane] + sx * (g[gi + 2 * gPlane] + sy * g[gi + 3 * gPlane]);
                    out[(plane0 + p) * static_cast<int64_t>(a.ho) * a.wo + static_cast<int64_t>(oyI) * a.wo + oxI]
                        = fromFloat<TOut>(acc + 0.5f * t);
                }
            }
        }
        else
        {
            float* __restrict__ out = static_cast<float*>(a.out);
            int const n = gPlane; // one thread per cell: its 2 x 2 D_{l-1} values
            for (int i = threadIdx.x; i < np * n; i += kThreads)
            {
                int const p = i / n;
                int const j = i - p * n;
                int const ci = j / a.tcw, cj = j - (j / a.tcw) * a.tcw;
                float const* g = smem + p * a.perPlane + sPlane + 4 * bPlane + j;
                float const ll = g[0], lh = g[gPlane], hl = g[2 * gPlane], hh = g[3 * gPlane];
                float* o = out + (plane0 + p) * static_cast<int64_t>(a.hs) * a.ws;
#pragma unroll
                for (int dy = 0; dy < 2; ++dy)
                {
                    int const gy = y0 + 2 * ci + dy;
                    float const sy = dy ? -1.f : 1.f;
#pragma unroll
                    for (int dx = 0; dx < 2; ++dx)
                    {
                        int const gx = x0 + 2 * cj + dx;
                        float const sx = dx ? -1.f : 1.f;
                        if (gy < a.hs && gx < a.ws)
                        {
                            o[static_cast<int64_t>(gy) * a.ws + gx] = 0.5f * (ll + sy * lh + sx * (hl + sy * hh));
                        }
                    }
                }
            }
        }
    }
}

// Pooling chain: LL_j = 1/2 (a + b + c + d) of each 2 x 2 patch of LL_{j-1} (zero-padded to even), for
// M levels at once. One thread per cell of the deepest of the M levels reads its 2^M x 2^M block once and
// writes every level's cells inside it.
struct PoolArgs
{
    void const* src;                                      // (planes, hs, ws), TIn
    float* dst[kPoolMaxLevels];                           // (planes, h_j, w_j), fp32, j = 1..M
    int32_t h[kPoolMaxLevels + 1], w[kPoolMaxLevels + 1]; // h[0] = hs
    int64_t planes;
    int64_t total; // planes * h[M] * w[M]
};

template <typename TIn, int M>
__global__ void __launch_bounds__(kThreads) poolKernel(PoolArgs const a)
{
    constexpr int E = 1 << M;
    TIn const* __restrict__ src = static_cast<TIn const*>(a.src);
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < a.total;
        idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    {
        int64_t const hw = static_cast<int64_t>(a.h[M]) * a.w[M];
        int64_t const plane = idx / hw;
        int const cell = static_cast<int>(idx - plane * hw);
        int const ci = cell / a.w[M], cj = cell - (cell / a.w[M]) * a.w[M];
        float v[E][E];
        TIn const* s = src + plane * static_cast<int64_t>(a.h[0]) * a.w[0];
#pragma unroll
        for (int y = 0; y < E; ++y)
        {
            int const gy = ci * E + y;
#pragma unroll
            for (int x = 0; x < E; ++x)
            {
                int const gx = cj * E + x;
                v[y][x] = (gy < a.h[0] && gx < a.w[0]) ? toFloat(s[static_cast<int64_t>(gy) * a.w[0] + gx]) : 0.f;
            }
        }
#pragma unroll
        for (int j = 1; j <= M; ++j)
        {
            int const e = E >> j; // cells of level j in this block, per edge
            float* d = a.dst[j - 1] + plane * static_cast<int64_t>(a.h[j]) * a.w[j];
#pragma unroll
            for (int y = 0; y < e; ++y)
            {
#pragma unroll
                for (int x = 0; x < e; ++x)
                {
                    float const t = 0.5f
                        * (v[2 * y][2 * x] + v[2 * y][2 * x + 1] + v[2 * y + 1][2 * x] + v[2 * y + 1][2 * x + 1]);
                    v[y][x] = t; // in place: (y, x) <= (2y, 2x), read before written
                    int const gy = ci * e + y, gx = cj * e + x;
                    if (gy < a.h[j] && gx < a.w[j])
                    {
                        d[static_cast<int64_t>(gy) * a.w[j] + gx] = t;
                    }
                }
            }
        }
    }
}

// Launchers (explicitly instantiated in the per-dtype translation units).
template <typename TIn, typename TOut, bool BASE>
cudaError_t launchLevel(LevelArgs const& a, cudaStream_t stream);

template <typename TIn>
cudaError_t launchPool(PoolArgs const& a, int levels, cudaStream_t stream);

// Launches one level-pass instantiation; its dynamic shared-memory limit is raised as wtconvSharedMemory.cuh
// describes (once per device and size, safely from several threads).
template <typename TIn, typename TOut, int K, bool BASE>
cudaError_t launchLevelKernel(LevelArgs const& a, cudaStream_t stream)
{
    static SharedMemoryLimit limit;
    size_t const smemBytes = static_cast<size_t>(a.planesPerBlock) * a.perPlane * sizeof(float);
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess)
    {
        return e;
    }
    e = limit.allow(levelKernel<TIn, TOut, K, BASE>, device, smemBytes);
    if (e != cudaSuccess)
    {
        return e;
    }
    levelKernel<TIn, TOut, K, BASE><<<static_cast<unsigned>(gridFor(a.blocks)), kThreads, smemBytes, stream>>>(a);
    return cudaGetLastError();
}

#define WTCONV_DEFINE_LAUNCH_LEVEL(TIN, TOUT, BASE)                                                                    \
    template <>                                                                                                        \
    cudaError_t launchLevel<TIN, TOUT, BASE>(LevelArgs const& a, cudaStream_t stream)                                  \
    {                                                                                                                  \
        switch (a.k)                                                                                                   \
        {                                                                                                              \
        case 1: return launchLevelKernel<TIN, TOUT, 1, BASE>(a, stream);                                               \
        case 3: return launchLevelKernel<TIN, TOUT, 3, BASE>(a, stream);                                               \
        case 5: return launchLevelKernel<TIN, TOUT, 5, BASE>(a, stream);                                               \
        case 7: return launchLevelKernel<TIN, TOUT, 7, BASE>(a, stream);                                               \
        default: return launchLevelKernel<TIN, TOUT, 0, BASE>(a, stream);                                              \
        }                                                                                                              \
    }

#define WTCONV_DEFINE_LAUNCH_POOL(TIN)                                                                                 \
    template <>                                                                                                        \
    cudaError_t launchPool<TIN>(PoolArgs const& a, int levels, cudaStream_t stream)                                    \
    {                                                                                                                  \
        unsigned const grid = static_cast<unsigned>(gridFor((a.total + kThreads - 1) / kThreads));                     \
        switch (levels)                                                                                                \
        {                                                                                                              \
        case 1: poolKernel<TIN, 1><<<grid, kThreads, 0, stream>>>(a); break;                                           \
        case 2: poolKernel<TIN, 2><<<grid, kThreads, 0, stream>>>(a); break;                                           \
        case 3: poolKernel<TIN, 3><<<grid, kThreads, 0, stream>>>(a); break;                                           \
        default: return cudaErrorInvalidValue;                                                                         \
        }                                                                                                              \
        return cudaGetLastError();                                                                                     \
    }

} // namespace detail
} // namespace wtconv
