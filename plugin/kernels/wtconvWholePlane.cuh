// wtconvWholePlane.cuh — device code of the whole-plane path (small planes, every WTConvNeXt stage; see
// wtconvKernel.cu's banner, path A). Included by the per-dtype translation units after wtconvKernelImpl.cuh,
// whose helpers (IoStrides, toFloat, store4, ...) it uses.
#pragma once

#include "wtconvKernelImpl.cuh"

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


} // namespace detail
} // namespace wtconv
