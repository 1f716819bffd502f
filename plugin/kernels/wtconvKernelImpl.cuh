// wtconvKernelImpl.cuh — device code of the fused WTConv inference kernels (see wtconvKernel.cu's banner
// for the maths, the traffic model and the launch sequence). Included by the per-dtype translation units
// (wtconvKernel_f32.cu, _f16.cu, _bf16.cu, wtconvLevels.cu) which instantiate the launchers below, so the
// instantiations compile in parallel.
#pragma once

#include "wtconvKernel.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

// Offset of plane (batch b0, channel c0 + p) with c0 + p possibly past the last channel (it wraps into the
// following batch items): 32-bit arithmetic after one 64-bit division per block.
__device__ __forceinline__ int64_t planeOffset(IoStrides const& s, int64_t b0, int c0, int p, int channels)
{
    int const c = c0 + p;
    int const q = c / channels;
    return (b0 + q) * s.batch + static_cast<int64_t>(c - q * channels) * s.channel;
}

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
// src must be 16-byte aligned and pitch a multiple of 4. K == 0: runtime k (9..15), plain loops.
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
        for (int dy = 0; dy < k; ++dy)
        {
            for (int dx = 0; dx < k; ++dx)
            {
                float const wv = w[dy * k + dx];
#pragma unroll
                for (int oy = 0; oy < kMicro; ++oy)
                {
#pragma unroll
                    for (int ox = 0; ox < kMicro; ++ox)
                    {
                        acc[oy][ox] = fmaf(wv, src[(oy + dy) * pitch + ox + dx], acc[oy][ox]);
                    }
                }
            }
        }
    }
}

// Geometry of one level pass (host-computed, passed by value).
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
    int32_t sOff;         // leading pad columns of the source tile, so the base-conv windows are 16-byte aligned
    int32_t sh, sp;       // source tile rows, pitch
    int32_t bh, bp;       // band tile rows, pitch (4 bands)
    int32_t tch, tcw;     // cells per tile (th / 2, tw / 2)
    int32_t perPlane;     // floats per plane: source + 4 bands + 4 G + weights
    bool vecStore;        // output rows allow aligned 4-wide stores
    IoStrides srcStrides; // src element offsets (x: its layout; LL_{l-1}: planar)
    IoStrides outStrides; // out element offsets (BASE: y's layout; else planar)
    bool planeFastest;    // P == 1: neighbouring blocks take the same tile of neighbouring planes
                          // (channels-last: they share the DRAM sectors of their pixels in L2)
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
            int t;
            if (a.planeFastest)
            {
                int64_t const tile = blk / a.planes;
                plane0 = blk - tile * a.planes;
                t = static_cast<int>(tile);
            }
            else
            {
                plane0 = blk / tilesPerPlane;
                t = static_cast<int>(blk - plane0 * tilesPerPlane);
            }
            ty = t / a.tilesX;
            tx = t - ty * a.tilesX;
        }
        int const np = static_cast<int>(min(static_cast<int64_t>(P), a.planes - plane0));
        int64_t const b0 = plane0 / a.channels; // one 64-bit division per group; int32 after
        int const c0 = static_cast<int>(plane0 - b0 * a.channels);
        int const y0 = ty * a.th; // even
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
                    TIn const* plane = src + planeOffset(a.srcStrides, b0, c0, p, a.channels);
                    int64_t const px = a.srcStrides.pixel;
#pragma unroll
                    for (int cc = 0; cc < kColChunks; ++cc)
                    {
                        int const bj = lane + 32 * cc;
                        int const gx = x0 - 2 * r + 2 * bj;
                        bool const colOk = bj < cellsW;
                        bool const x0ok = colOk && gx >= 0 && gx < a.ws;
                        bool const x1ok = colOk && gx + 1 >= 0 && gx + 1 < a.ws;
                        int64_t const o0 = (static_cast<int64_t>(gy) * a.ws + gx) * px;
                        int64_t const down = static_cast<int64_t>(a.ws) * px;
                        v[u][cc][0] = (y0ok && x0ok) ? toFloat(plane[o0]) : 0.f;
                        v[u][cc][1] = (y0ok && x1ok) ? toFloat(plane[o0 + px]) : 0.f;
                        v[u][cc][2] = (y1ok && x0ok) ? toFloat(plane[o0 + down]) : 0.f;
                        v[u][cc][3] = (y1ok && x1ok) ? toFloat(plane[o0 + down + px]) : 0.f;
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
                    TOut* o = out + planeOffset(a.outStrides, b0, c0, p, a.channels);
                    int64_t const opx = a.outStrides.pixel;
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
                            TOut* orow = o + (static_cast<int64_t>(gy) * a.wo + gx) * opx;
                            if (a.vecStore && gx + kMicro <= a.wo)
                            {
                                store4(orow, v); // vecStore implies pixel stride 1
                            }
                            else
                            {
#pragma unroll
                                for (int ox = 0; ox < kMicro; ++ox)
                                {
                                    if (gx + ox < a.wo)
                                    {
                                        orow[ox * opx] = fromFloat<TOut>(v[ox]);
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
                        for (int dx = 0; dx < k; ++dx)
                        {
                            acc = fmaf(wsm[dy * k + dx], sv[dy * a.sp + dx], acc);
                        }
                    }
                    float const* g = base + sPlane + 4 * bPlane;
                    float const sy = (ly & 1) ? -1.f : 1.f, sx = (lx & 1) ? -1.f : 1.f;
                    int const gi = (ly >> 1) * a.tcw + (lx >> 1);
                    float const t = g[gi] + sy * g[gi + gPlane] + sx * (g[gi + 2 * gPlane] + sy * g[gi + 3 * gPlane]);
                    out[planeOffset(a.outStrides, b0, c0, p, a.channels)
                        + (static_cast<int64_t>(oyI) * a.wo + oxI) * a.outStrides.pixel] = fromFloat<TOut>(acc
                        + 0.5f * t);
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

// ---------------------------------------------------------------------------------------------------------
// Whole-plane kernel for small planes (H*W <= kSmallPlaneMax: the WTConvNeXt stages, 7x7 .. 56x56): one
// launch does everything for P planes per block in shared memory, so DRAM sees x once and y once (2N) and
// the deep levels cost no launches. Shared memory per plane: X with an r-pixel zero halo, every level's 4
// bands with an r-cell zero halo, LL_1..LL_{L-1} (compact), two D buffers (ping-pong); the channel's weights.
// Blocks take P planes of one channel (batch items), so weights are read once per block.
// Each thread handles 2 horizontally adjacent cells of a level (register window of k x (k+1) band values,
// and for level 1 the 2 x 4 output pixels above them with a (k+1) x (k+3) window of X).
constexpr int kSmallPlaneMax = 64 * 64;

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
    // shared-memory regions (floats from the start), each sized for P planes
    int32_t xOff, xPitch, xPlane;      // X padded: (H + 2r) x xPitch
    int32_t llOff[kMaxLevels + 1];     // LL_l, l = 1..L-1, compact h_l x w_l
    int32_t bandOff[kMaxLevels + 1];   // level l: 4 bands x P planes of (h_l + 2r) x (w_l + 2r) (zero halo)
    int32_t bandPlane[kMaxLevels + 1]; // (h_l + 2r) * (w_l + 2r)
    int32_t zeroFloats;                // X and all band regions: [0, zeroFloats), a multiple of 4
    int32_t dOff[2], dPlane;           // D ping-pong, compact h_l x w_l (<= h_1 x w_1 = dPlane)
    int32_t wOff, wPer;                // weights of the block's channel: k^2 base then L x 4 x k^2
    int32_t stageOff;                  // channels-last cluster mode: the output staged as fp32, P x ho x wo,
                                       // in a region dead during the output phase (deep bands, LL)
    int32_t totalFloats;
    bool clusterOk; // channels-last and aligned for cluster mode (launchSmallKernel
                    // also needs a device and binary with thread-block clusters)
};

// Channels-last cluster mode of smallPlaneKernel: a cluster of kCluster blocks takes kCluster consecutive
// channels (same batch items). A block alone would read one channel, 2 bytes of every 32-byte sector of a
// channels-last pixel row; the cluster instead loads each pixel's kCluster channels with one 16- or
// 32-byte load and scatters them into the blocks' X planes through distributed shared memory, and writes the
// output the same way from the blocks' staging regions.
constexpr int kCluster = 8;

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
__global__ void __launch_bounds__(kThreads) smallPlaneKernel(SmallArgs const a)
{
    extern __shared__ __align__(16) float smem[];
    TIn const* __restrict__ src = static_cast<TIn const*>(a.src);
    TIn* __restrict__ out = static_cast<TIn*>(a.out);
    int const k = K > 0 ? K : a.k;
    int const r = K > 0 ? K / 2 : a.r;
    int const kk = k * k;
    int const P = a.planesPerBlock;
    int const H = a.h[0], W = a.w[0];
    int const L = a.levels;

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
        {
            float4* z = reinterpret_cast<float4*>(smem);
            float4 const zero = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int i = threadIdx.x; i < a.zeroFloats / 4; i += kThreads)
            {
                z[i] = zero;
            }
            int const nw = a.wPer;
            for (int i0 = threadIdx.x; i0 < nw; i0 += 8 * kThreads)
            {
                float v[8];
#pragma unroll
                for (int u = 0; u < 8; ++u)
                {
                    int const j = i0 + u * kThreads;
                    v[u] = 0.f;
                    if (j < nw)
                    {
                        if (j < kk)
                        {
                            v[u] = __ldg(a.baseWeight + static_cast<int64_t>(c) * kk + j);
                        }
                        else
                        {
                            int const lj = j - kk;
                            int const l = lj / (4 * kk);
                            v[u] = __ldg(a.waveletWeight + (static_cast<int64_t>(l) * a.channels + c) * 4 * kk
                                + (lj - l * 4 * kk));
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < 8; ++u)
                {
                    int const j = i0 + u * kThreads;
                    if (j < nw)
                    {
                        smem[a.wOff + j] = v[u];
                    }
                }
            }
        }
        __syncthreads();

        // ---- 1. level-1 cells: each thread loads 2x2 source patches (2 cells in flight) straight from
        //         DRAM into X (for the base convolution), the level-1 bands and LL_1 -------------------
        //         (cluster mode: the cluster fills every block's X, then each block builds its bands from X)
        if constexpr (CLUSTER)
        {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            namespace cg = cooperative_groups;
            cg::cluster_group cluster = cg::this_cluster();
            cluster.sync(); // every block of the cluster has zeroed its X
            int const rank = static_cast<int>(cluster.block_rank());
            int const hw = H * W;
            int const n = np * hw;
            TIn const* s0 = src + b0 * a.inStrides.batch + (c - rank); // channel stride 1 (channels-last)
            for (int i = rank * kThreads + threadIdx.x; i < n; i += kCluster * kThreads)
            {
                int const p = i / hw;
                int const j = i - p * hw;
                int const y = j / W, x = j - (j / W) * W;
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
            int const bp = w1 + 2 * r;
            int const bs = P * a.bandPlane[1];
            for (int i = threadIdx.x; i < np * hw1; i += kThreads)
            {
                int const p = i / hw1;
                int const j = i - p * hw1;
                int const y = j / w1, x = j - (j / w1) * w1;
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
            int const h1 = a.h[1], w1 = a.w[1], hw1 = h1 * w1;
            int const n = np * hw1;
            int const bp = w1 + 2 * r;
            int const bs = P * a.bandPlane[1];
            TIn const* s0 = src + b0 * a.inStrides.batch + c * a.inStrides.channel;
            for (int i0 = threadIdx.x; i0 < n; i0 += 2 * kThreads)
            {
                float v[2][4];
#pragma unroll
                for (int u = 0; u < 2; ++u)
                {
                    int const i = i0 + u * kThreads;
                    v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0.f;
                    if (i < n)
                    {
                        int const p = i / hw1;
                        int const j = i - p * hw1;
                        int const y = j / w1, x = j - (j / w1) * w1;
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
                for (int u = 0; u < 2; ++u)
                {
                    int const i = i0 + u * kThreads;
                    if (i < n)
                    {
                        int const p = i / hw1;
                        int const j = i - p * hw1;
                        int const y = j / w1, x = j - (j / w1) * w1;
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
            int const bp = wl + 2 * r;
            int const bs = P * a.bandPlane[l];
            for (int i = threadIdx.x; i < n; i += kThreads)
            {
                int const p = i / hwl;
                int const j = i - p * hwl;
                int const y = j / wl, x = j - (j / wl) * wl;
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

        // ---- 3. levels, deepest first: 4 band convolutions, synthesis into D_{l-1} or the output -------
        int cur = 0; // D_l lives in dOff[cur] (absent at l = L)
        for (int l = L; l >= 1; --l)
        {
            int const hs = a.h[l - 1], ws = a.w[l - 1], hl = a.h[l], wl = a.w[l];
            int const bp = wl + 2 * r;
            // b. 4 band convolutions per cell (2 cells per thread), + D_l, then D_{l-1} or the output
            {
                int const wpairs = (wl + 1) / 2;
                int const n = np * hl * wpairs;
                int const bs = P * a.bandPlane[l];
                for (int i = threadIdx.x; i < n; i += kThreads)
                {
                    int const p = i / (hl * wpairs);
                    int const j = i - p * hl * wpairs;
                    int const cy = j / wpairs, cx = (j - (j / wpairs) * wpairs) * 2;
                    float const* wl4 = smem + a.wOff + kk + (l - 1) * 4 * kk;
                    float g[4][2];
#pragma unroll
                    for (int s = 0; s < 4; ++s)
                    {
                        float const* bsrc = smem + a.bandOff[l] + s * bs + p * a.bandPlane[l] + cy * bp + cx;
                        float const* wsrc = wl4 + s * kk;
                        float a0 = 0.f, a1 = 0.f;
                        if constexpr (K > 0)
                        {
#pragma unroll
                            for (int dy = 0; dy < K; ++dy)
                            {
                                float win[K + 1];
#pragma unroll
                                for (int t = 0; t < K + 1; ++t)
                                {
                                    win[t] = bsrc[dy * bp
                                        + t]; // t = K reads the halo or the next row: finite, used only by the 2nd cell
                                }
#pragma unroll
                                for (int dx = 0; dx < K; ++dx)
                                {
                                    float const wv = wsrc[dy * K + dx];
                                    a0 = fmaf(wv, win[dx], a0);
                                    a1 = fmaf(wv, win[dx + 1], a1);
                                }
                            }
                        }
                        else
                        {
                            for (int dy = 0; dy < k; ++dy)
                            {
                                for (int dx = 0; dx < k; ++dx)
                                {
                                    float const wv = wsrc[dy * k + dx];
                                    a0 = fmaf(wv, bsrc[dy * bp + dx], a0);
                                    a1 = fmaf(wv, bsrc[dy * bp + dx + 1], a1);
                                }
                            }
                        }
                        g[s][0] = a0;
                        g[s][1] = a1;
                    }
                    if (l < L)
                    {
                        float const* d = smem + a.dOff[cur] + p * hl * wl + cy * wl + cx;
                        g[0][0] += d[0];
                        if (cx + 1 < wl)
                        {
                            g[0][1] += d[1];
                        }
                    }
                    if (l >= 2)
                    {
                        float* dn = smem + a.dOff[cur ^ 1] + p * hs * ws;
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                        {
                            if (cx + e >= wl)
                            {
                                continue;
                            }
#pragma unroll
                            for (int dy = 0; dy < 2; ++dy)
                            {
#pragma unroll
                                for (int dx = 0; dx < 2; ++dx)
                                {
                                    int const y = 2 * cy + dy, x = 2 * (cx + e) + dx;
                                    if (y < hs && x < ws)
                                    {
                                        float const sy = dy ? -1.f : 1.f, sx = dx ? -1.f : 1.f;
                                        dn[y * ws + x] = 0.5f
                                            * (g[0][e] + sy * g[1][e] + sx * (g[2][e] + sy * g[3][e]));
                                    }
                                }
                            }
                        }
                    }
                    else
                    {
                        // level 1: the 2 x 4 output pixels of these 2 cells, base conv from X (padded)
                        float const* wb = smem + a.wOff;
                        float const bias = __ldg(a.baseBias + c);
                        float acc[2][4] = {};
                        float const* xs = smem + a.xOff + p * a.xPlane + (2 * cy) * a.xPitch + 2 * cx;
                        if constexpr (K > 0)
                        {
#pragma unroll
                            for (int iy = 0; iy < K + 1; ++iy)
                            {
                                float win[K + 3];
#pragma unroll
                                for (int t = 0; t < K + 3; ++t)
                                {
                                    // columns beyond the padded row are read only for x >= W (never stored)
                                    win[t] = (2 * cx + t < a.xPitch) ? xs[iy * a.xPitch + t] : 0.f;
                                }
#pragma unroll
                                for (int oy = 0; oy < 2; ++oy)
                                {
                                    int const dy = iy - oy;
                                    if (dy >= 0 && dy < K)
                                    {
#pragma unroll
                                        for (int dx = 0; dx < K; ++dx)
                                        {
                                            float const wv = wb[dy * K + dx];
#pragma unroll
                                            for (int ox = 0; ox < 4; ++ox)
                                            {
                                                acc[oy][ox] = fmaf(wv, win[ox + dx], acc[oy][ox]);
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        else
                        {
                            for (int dy = 0; dy < k; ++dy)
                            {
                                for (int dx = 0; dx < k; ++dx)
                                {
                                    float const wv = wb[dy * k + dx];
#pragma unroll
                                    for (int oy = 0; oy < 2; ++oy)
                                    {
#pragma unroll
                                        for (int ox = 0; ox < 4; ++ox)
                                        {
                                            int const col = 2 * cx + ox + dx;
                                            acc[oy][ox] = fmaf(wv,
                                                col < a.xPitch ? xs[(oy + dy) * a.xPitch + ox + dx] : 0.f, acc[oy][ox]);
                                        }
                                    }
                                }
                            }
                        }
                        TIn* o = out + (b0 + p) * a.outStrides.batch + c * a.outStrides.channel;
#pragma unroll
                        for (int oy = 0; oy < 2; ++oy)
                        {
                            int const y = 2 * cy + oy;
                            if (y >= H || y % a.stride != 0)
                            {
                                continue;
                            }
                            float const sy = oy ? -1.f : 1.f;
#pragma unroll
                            for (int ox = 0; ox < 4; ++ox)
                            {
                                int const x = 2 * cx + ox;
                                if (x >= W || x % a.stride != 0)
                                {
                                    continue;
                                }
                                int const e = ox >> 1;
                                float const sx = (ox & 1) ? -1.f : 1.f;
                                float const t = g[0][e] + sy * g[1][e] + sx * (g[2][e] + sy * g[3][e]);
                                float const value = acc[oy][ox] + bias + 0.5f * t;
                                int const oj = (y / a.stride) * a.wo + x / a.stride;
                                if constexpr (CLUSTER)
                                {
                                    smem[a.stageOff + p * a.ho * a.wo + oj] = value;
                                }
                                else
                                {
                                    o[static_cast<int64_t>(oj) * a.outStrides.pixel] = fromFloat<TIn>(value);
                                }
                            }
                        }
                    }
                }
            }
            __syncthreads();
            cur ^= 1;
        }

        // ---- 4. cluster mode: each pixel's kCluster channels from the blocks' staging, one vector store ---
        if constexpr (CLUSTER)
        {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            namespace cg = cooperative_groups;
            cg::cluster_group cluster = cg::this_cluster();
            cluster.sync(); // every block has staged its output
            int const rank = static_cast<int>(cluster.block_rank());
            int const hwo = a.ho * a.wo;
            TIn* o0 = out + b0 * a.outStrides.batch + (c - rank);
            for (int i = rank * kThreads + threadIdx.x; i < np * hwo; i += kCluster * kThreads)
            {
                int const p = i / hwo;
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

// Raises the instantiation's dynamic shared-memory limit once per device (a host-side attribute, not a stream
// operation: safe inside graph capture, and skipped on later launches so TensorRT's enqueue stays cheap).
template <typename TIn, int K, bool CLUSTER>
cudaError_t prepareSmallKernel(int device, size_t smemBytes)
{
    constexpr int kMaxDevices = 64;
    static int raisedTo[kMaxDevices] = {};
    if (smemBytes > 48 * 1024 && (device >= kMaxDevices || raisedTo[device] < static_cast<int>(smemBytes)))
    {
        cudaError_t const e = cudaFuncSetAttribute(smallPlaneKernel<TIn, K, CLUSTER>,
            cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smemBytes));
        if (e != cudaSuccess)
        {
            return e;
        }
        if (device < kMaxDevices)
        {
            raisedTo[device] = static_cast<int>(smemBytes); // benign race: a repeat call is harmless
        }
    }
    return cudaSuccess;
}

// Whether the cluster instantiation can run on `device`: compute capability >= 9.0 and the kernel compiled
// from sm_90+ code (a build for older architectures only, JIT-compiled from their PTX, has no cluster code).
// Decided once per device.
template <typename TIn, int K>
bool clusterSupported(int device)
{
    constexpr int kMaxDevices = 64;
    static signed char known[kMaxDevices] = {}; // 0 unknown, 1 yes, -1 no
    if (device < kMaxDevices && known[device] != 0)
    {
        return known[device] > 0;
    }
    int major = 0;
    cudaFuncAttributes fa{};
    bool const ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess
        && major >= 9 && cudaFuncGetAttributes(&fa, smallPlaneKernel<TIn, K, true>) == cudaSuccess
        && fa.ptxVersion >= 90;
    if (device < kMaxDevices)
    {
        known[device] = ok ? 1 : -1;
    }
    return ok;
}

template <typename TIn, int K>
cudaError_t launchSmallKernel(SmallArgs const& a, cudaStream_t stream)
{
    size_t const smemBytes = static_cast<size_t>(a.totalFloats) * sizeof(float);
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess)
    {
        return e;
    }
    if (a.clusterOk && a.blocks % kCluster == 0 && a.blocks < (int64_t{1} << 31) && clusterSupported<TIn, K>(device))
    {
        e = prepareSmallKernel<TIn, K, true>(device, smemBytes);
        if (e != cudaSuccess)
        {
            return e;
        }
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(static_cast<unsigned>(a.blocks));
        config.blockDim = dim3(kThreads);
        config.dynamicSmemBytes = smemBytes;
        config.stream = stream;
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = kCluster;
        attribute.val.clusterDim.y = 1;
        attribute.val.clusterDim.z = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        e = cudaLaunchKernelEx(&config, smallPlaneKernel<TIn, K, true>, a);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    e = prepareSmallKernel<TIn, K, false>(device, smemBytes);
    if (e != cudaSuccess)
    {
        return e;
    }
    smallPlaneKernel<TIn, K, false><<<static_cast<unsigned>(gridFor(a.blocks)), kThreads, smemBytes, stream>>>(a);
    return cudaGetLastError();
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

// Pooling chain: LL_j = 1/2 (a + b + c + d) of each 2 x 2 patch of LL_{j-1} (zero-padded to even), for
// M levels at once. One thread per cell of the deepest of the M levels reads its 2^M x 2^M block once and
// writes every level's cells inside it.
struct PoolArgs
{
    void const* src;                                      // (planes, hs, ws), TIn
    float* dst[kPoolMaxLevels];                           // (planes, h_j, w_j), fp32, j = 1..M
    int32_t h[kPoolMaxLevels + 1], w[kPoolMaxLevels + 1]; // h[0] = hs
    int64_t planes;
    int64_t total;        // planes * h[M] * w[M]
    int32_t channels;     // C (planes = B * C)
    IoStrides srcStrides; // src element offsets (x: its layout; LL: planar)
    bool planeFastest;    // consecutive threads take the same cell of consecutive planes (channels-last)
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
        int64_t plane;
        int cell;
        if (a.planeFastest)
        {
            int64_t const q = idx / a.planes;
            plane = idx - q * a.planes;
            cell = static_cast<int>(q);
        }
        else
        {
            plane = idx / hw;
            cell = static_cast<int>(idx - plane * hw);
        }
        int const ci = cell / a.w[M], cj = cell - (cell / a.w[M]) * a.w[M];
        float v[E][E];
        int64_t const b = plane / a.channels;
        TIn const* s = src + b * a.srcStrides.batch + (plane - b * a.channels) * a.srcStrides.channel;
        int64_t const px = a.srcStrides.pixel;
#pragma unroll
        for (int y = 0; y < E; ++y)
        {
            int const gy = ci * E + y;
#pragma unroll
            for (int x = 0; x < E; ++x)
            {
                int const gx = cj * E + x;
                v[y][x] = (gy < a.h[0] && gx < a.w[0]) ? toFloat(s[(static_cast<int64_t>(gy) * a.w[0] + gx) * px])
                                                       : 0.f;
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

// Launches one level-pass instantiation. The dynamic shared-memory limit is raised once per device and
// instantiation (a host-side attribute, not a stream operation: safe inside graph capture, and skipped
// on later launches so TensorRT's enqueue stays cheap).
template <typename TIn, typename TOut, int K, bool BASE>
cudaError_t launchLevelKernel(LevelArgs const& a, cudaStream_t stream)
{
    constexpr int kMaxDevices = 64;
    static int raisedTo[kMaxDevices] = {};
    size_t const smemBytes = static_cast<size_t>(a.planesPerBlock) * a.perPlane * sizeof(float);
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess)
    {
        return e;
    }
    if (smemBytes > 48 * 1024 && (device >= kMaxDevices || raisedTo[device] < static_cast<int>(smemBytes)))
    {
        e = cudaFuncSetAttribute(
            levelKernel<TIn, TOut, K, BASE>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smemBytes));
        if (e != cudaSuccess)
        {
            return e;
        }
        if (device < kMaxDevices)
        {
            raisedTo[device] = static_cast<int>(smemBytes); // benign race: a repeat call is harmless
        }
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
