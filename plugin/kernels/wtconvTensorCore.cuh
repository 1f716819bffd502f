// wtconvTensorCore.cuh — the whole-plane path with its convolutions on tensor cores (fp16 / bf16 I/O, k = 3, 5, 7,
// stride 1): the formulation and the dispatch (built only with -DWTCONV_TENSOR_CORES=1: it measured slower) are
// docs/design.md §3.1, the precision split §2.5. Included by the fp16 and bf16 translation units after
// wtconvWholePlane.cuh, whose helpers (FastDivisor, kCluster, launchPlaneKernel) it uses.
#pragma once

#include "wtconvWholePlane.cuh"

#include <type_traits>
#include <utility>

namespace wtconv
{
namespace detail
{

constexpr int kTcMaxThreads = 256;
// Blocks per SM the kernel is compiled for (3: at most 85 registers per thread).
#ifndef WTCONV_TC_MIN_BLOCKS
#define WTCONV_TC_MIN_BLOCKS 3
#endif
constexpr int kTcMinThreads = 64;
constexpr int kTcSets = 5; // level-1 B-fragment table: the base kernel, then the 4 bands of level 1

// Planes in shared memory are "atlases": the block's P planes stacked vertically with `gutter` zero rows above,
// between and below them, columns shifted right by the kernel radius r (zero columns left and right). A tile is
// 16 consecutive rows of the concatenated planes (plane p, row y) x 8 consecutive cells (columns), so its
// ldmatrix rows are plain addresses and planes smaller than a tile share one (docs/design.md §3.1).
struct TcArgs
{
    void const* src;            // x (planes, H, W), TIn
    void* out;                  // y (planes, H, W), TIn (stride 1)
    float const* baseWeight;    // (C, k, k)
    float const* baseBias;      // (C)
    float const* waveletWeight; // (L, 4C, k, k)
    int64_t planes;
    int32_t channels;
    int32_t h[kMaxLevels + 1], w[kMaxLevels + 1];
    int32_t k, levels;
    int32_t planesPerBlock;          // P planes of one channel (batch items b0 .. b0+P-1)
    int64_t batch, batchGroups;      // B, ceil(B / P)
    int64_t blocks;                  // C * batchGroups
    IoStrides inStrides, outStrides; // x and y element offsets (their layout)
    bool channelFastest;             // neighbouring blocks take neighbouring channels (channels-last)
    bool pairStore;                  // NCHW, W even, y 4-byte aligned: 2 neighbouring pixels per store
    bool clusterOk;                  // channels-last and aligned for cluster mode
    int32_t threads;
    // shared memory, byte offsets from the start (each 16-byte aligned)
    int32_t xOff, xPart, xPitch;       // X: 2 row-parity atlases (even, odd pixel rows) of x in TIn, xPart bytes
                                       // each, gutter (r + 1) / 2 rows, xPitch elements (xPitch % 16 == 8)
    int32_t bandOff[kMaxLevels + 1];   // level l: 4 bands x parts atlases of bf16 (hi, then lo for fp16 I/O)
    int32_t bandPart[kMaxLevels + 1];  // bytes of one atlas
    int32_t bandPitch[kMaxLevels + 1]; // elements (8 * ceil(w_l / 8) + 8, or + 16: an odd multiple of 8)
    int32_t zeroBytes;                 // X and every band atlas: [0, zeroBytes), zeroed per block
    int32_t llOff[kMaxLevels + 1];     // LL_l (l = 1..L-1), fp32, compact P x h_l x w_l
    int32_t fOff[kMaxLevels + 1];      // F_l (l = 2..L), the filtered bands, fp32, 4 x P x h_l x w_l
    int32_t d1Off;                     // D_1 (Eq. 3'), fp32, P x h_1 x w_1
    int32_t tableOff;                  // level-1 B fragments: kTcSets x k x 32 lanes x uint4, then 2 floats
    int32_t wOff;                      // the channel's weights, k^2 words per set: the base kernel in fp32, then
                                       // level-major bands as bf16 pairs (hi in the low half, lo in the high)
    int32_t stageOff;                  // cluster mode: y staged in TIn, P x H x W (in dead regions if they fit)
    int32_t totalBytes;
    FastDivisor cellsPerPlane[kMaxLevels + 1], cellsPerRow[kMaxLevels + 1]; // h_l * w_l, w_l (level 0: x)
    FastDivisor rowsPerPlane[kMaxLevels + 1];                               // h_l: tile row -> (plane, row)
    FastDivisor chunksPerRow[kMaxLevels + 1];                               // ceil(w_l / 8): tile -> (rows, chunk)
};

// How many bf16 parts (hi, lo) hold each band value: fp16 I/O needs both (hi alone measured up to 5.2x the
// reference's error); bf16 I/O measured within 1.0x with hi alone on the cases emulated (0.85x worst, against
// 0.73x with both), a margin too thin for the tests' fresh random cases, so both by default (docs/design.md §3.1).
#ifndef WTCONV_TC_BF16_BAND_PARTS
#define WTCONV_TC_BF16_BAND_PARTS 2
#endif
template <typename TIn>
struct TcTraits;
template <>
struct TcTraits<__half>
{
    static constexpr int kBandParts = 2;
};
template <>
struct TcTraits<__nv_bfloat16>
{
    static constexpr int kBandParts = WTCONV_TC_BF16_BAND_PARTS;
};

__host__ __device__ constexpr int tcGutter(int r)
{
    return (r + 1) / 2;
}

// Column of tile output n (0..7) inside its chunk of 8 cells: the bands' columns are permuted so that the lane
// holding cells (.., t) and (.., t + 4) of a band tile also holds the base convolution's pixels above them
// (docs/design.md §3.1); the base convolution's columns are not.
__host__ __device__ constexpr int tcBandColumn(int n)
{
    return (n >> 1) + 4 * (n & 1);
}

__device__ __forceinline__ uint32_t sharedAddress(void const* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// a[0..3] = the m16n8k16 A fragment of the 16 x 16 bf16/fp16 tile whose row (lane & 15), columns
// 8 * (lane >> 4) .. + 7 start at `address` (16-byte aligned).
__device__ __forceinline__ void loadA(uint32_t address, uint32_t (&a)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
        : "r"(address));
}

// d += A B (m16n8k16, fp32 accumulation), operands in TIn's format (__half: fp16, __nv_bfloat16: bf16).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t const (&a)[4], uint32_t b0, uint32_t b1)
{
    if constexpr (std::is_same<T, __half>::value)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    else
    {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats rounded to T (nearest even) and packed, the first in the low half (the lower matrix index).
template <typename T>
__device__ __forceinline__ uint32_t packPair(float x, float y)
{
    uint32_t u;
    if constexpr (std::is_same<T, __half>::value)
    {
        __half2 const h = __floats2half2_rn(x, y);
        __builtin_memcpy(&u, &h, 4);
    }
    else
    {
        __nv_bfloat162 const h = __floats2bfloat162_rn(x, y);
        __builtin_memcpy(&u, &h, 4);
    }
    return u;
}
template <typename T>
__device__ __forceinline__ float2 unpackPair(uint32_t u)
{
    if constexpr (std::is_same<T, __half>::value)
    {
        __half2 h;
        __builtin_memcpy(&h, &u, 4);
        return __half22float2(h);
    }
    else
    {
        __nv_bfloat162 h;
        __builtin_memcpy(&h, &u, 4);
        return __bfloat1622float2(h);
    }
}

// (x, y) = hi + lo with hi, lo pairs of T: hi rounds (x, y), lo rounds the remainder (2 x 8 or 2 x 11 bits).
template <typename T>
__device__ __forceinline__ void splitPair(float x, float y, uint32_t& hi, uint32_t& lo)
{
    hi = packPair<T>(x, y);
    float2 const f = unpackPair<T>(hi);
    lo = packPair<T>(x - f.x, y - f.y);
}

// The 4 values lane holds of the banded (Toeplitz) matrix B of one kernel row w[0..K) (shared memory): B[i][n] = scale *
// w[i - col(n)] for 0 <= i - col(n) < K, else 0; col(n) = tcBandColumn(n) when PERMUTED, else n. Lane holds
// rows i = 2t, 2t + 1, 2t + 8, 2t + 9 of column n = lane >> 2, t = lane & 3 (the m16n8k16 B fragment).
template <int K, bool PERMUTED>
__device__ __forceinline__ void toeplitzValues(float const* __restrict__ w, int lane, float scale, float (&v)[4])
{
    int const n = lane >> 2, t = lane & 3;
    int const col = PERMUTED ? tcBandColumn(n) : n;
#pragma unroll
    for (int q = 0; q < 4; ++q)
    {
        int const i = 2 * t + (q & 1) + 8 * (q >> 1);
        int const d = i - col;
        v[q] = (d >= 0 && d < K) ? w[d] * scale : 0.f;
    }
}

// The fragment pair of one kernel row as {hi(b0, b1), hi(b2, b3), lo(b0, b1), lo(b2, b3)} in T.
template <typename T, int K, bool PERMUTED>
__device__ __forceinline__ uint4 toeplitzFragment(float const* __restrict__ w, int lane, float scale)
{
    float v[4];
    toeplitzValues<K, PERMUTED>(w, lane, scale, v);
    uint4 f;
    splitPair<T>(v[0], v[1], f.x, f.z);
    splitPair<T>(v[2], v[3], f.y, f.w);
    return f;
}

// A band weight as its two bf16 parts in one word: hi in the low half, lo = the remainder in the high half.
__device__ __forceinline__ uint32_t packedBandWeight(float w)
{
    __nv_bfloat16 const hi = __float2bfloat16_rn(w);
    __nv_bfloat16 const lo = __float2bfloat16_rn(w - __bfloat162float(hi));
    uint16_t h, l;
    __builtin_memcpy(&h, &hi, 2);
    __builtin_memcpy(&l, &lo, 2);
    return static_cast<uint32_t>(h) | (static_cast<uint32_t>(l) << 16);
}

// The permuted band Toeplitz fragment of one kernel row of packed weights (packedBandWeight, shared memory), as
// toeplitzFragment<__nv_bfloat16, K, true> builds it from floats: 4 loads and 4 byte permutes.
template <int K>
__device__ __forceinline__ uint4 bandFragment(uint32_t const* __restrict__ w, int lane)
{
    int const col = tcBandColumn(lane >> 2), t = lane & 3;
    uint32_t v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
    {
        int const d = 2 * t + (q & 1) + 8 * (q >> 1) - col;
        v[q] = (d >= 0 && d < K) ? w[d] : 0u;
    }
    return make_uint4(__byte_perm(v[0], v[1], 0x5410), __byte_perm(v[2], v[3], 0x5410), __byte_perm(v[0], v[1], 0x7632),
        __byte_perm(v[2], v[3], 0x7632));
}

// A power of two s with max |w| * s in [1, 2) over the warp's values m (1 when all are zero): the base weights
// are split into two fp16 parts after scaling by s, so the low part stays a normal number at any magnitude.
__device__ __forceinline__ float warpScale(float m)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
    {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    }
    if (m == 0.f)
    {
        return 1.f;
    }
    int e = 0;
    frexpf(m, &e); // m = f * 2^e, f in [0.5, 1)
    return ldexpf(1.f, 1 - e);
}

// One band value as bf16 parts at `at` (hi) and `at + part` bytes (lo, when PARTS == 2).
template <int PARTS>
__device__ __forceinline__ void storeBand(unsigned char* at, int part, float v)
{
    __nv_bfloat16 const hi = __float2bfloat16_rn(v);
    *reinterpret_cast<__nv_bfloat16*>(at) = hi;
    if constexpr (PARTS == 2)
    {
        *reinterpret_cast<__nv_bfloat16*>(at + part) = __float2bfloat16_rn(v - __bfloat162float(hi));
    }
}

// The Haar bands of one cell (docs/design.md Eq. 1) into level l's atlases at element `e` of each; returns LL.
template <int PARTS>
__device__ __forceinline__ float storeCellBands(
    unsigned char* bands, int part, int e, float v00, float v01, float v10, float v11)
{
    float const ll = 0.5f * (v00 + v01 + v10 + v11);
    storeBand<PARTS>(bands + 2 * e, part, ll);
    storeBand<PARTS>(bands + PARTS * part + 2 * e, part, 0.5f * (v00 + v01 - v10 - v11));
    storeBand<PARTS>(bands + 2 * PARTS * part + 2 * e, part, 0.5f * (v00 - v01 + v10 - v11));
    storeBand<PARTS>(bands + 3 * PARTS * part + 2 * e, part, 0.5f * (v00 - v01 - v10 + v11));
    return ll;
}

// Element offset of level-l cell (p, y, x) in its band atlas.
__device__ __forceinline__ int bandElement(TcArgs const& a, int l, int r, int p, int y, int x)
{
    return (r + p * (a.h[l] + r) + y) * a.bandPitch[l] + r + x;
}

// X element of pixel (p, Y, X) within its parity atlas (Y & 1).
__device__ __forceinline__ int xElement(TcArgs const& a, int r, int p, int Y, int X)
{
    int const g = tcGutter(r);
    return (g + p * (a.h[1] + g) + (Y >> 1)) * a.xPitch + r + X;
}

// acc[s] += the k x k convolution of band s (of 4; its atlas `s * PARTS * part` bytes after aBase, a lane's
// ldmatrix row address, the low part `part` bytes after the high one) on one tile: K kernel rows, the 4 bands
// interleaved (4 independent accumulation chains); fragment(s, dy) is band s's B fragment of kernel row dy.
template <int K, int PARTS, typename Fragment>
__device__ __forceinline__ void bandConvolutions(
    float (&acc)[4][4], uint32_t aBase, int part, int pitch, Fragment const& fragment)
{
#pragma unroll 1
    for (int dy = 0; dy < K; ++dy)
    {
#pragma unroll
        for (int s = 0; s < 4; ++s)
        {
            uint4 const b = fragment(s, dy);
            uint32_t fa[4];
            uint32_t const at = aBase + s * PARTS * part + 2 * dy * pitch;
            loadA(at, fa);
            mma16816<__nv_bfloat16>(acc[s], fa, b.x, b.y);
            mma16816<__nv_bfloat16>(acc[s], fa, b.z, b.w);
            if constexpr (PARTS == 2)
            {
                loadA(at + part, fa);
                mma16816<__nv_bfloat16>(acc[s], fa, b.x, b.y);
            }
        }
    }
}

template <typename TIn, int K, bool CLUSTER>
__global__ void __launch_bounds__(kTcMaxThreads, WTCONV_TC_MIN_BLOCKS) tcPlaneKernel(TcArgs const a)
{
    extern __shared__ __align__(16) float smemFloats[]; // one declaration per namespace: float, as the other kernels
    unsigned char* const smem = reinterpret_cast<unsigned char*>(smemFloats);
    constexpr int r = K / 2;
    constexpr int kParts = TcTraits<TIn>::kBandParts;
    TIn const* __restrict__ src = static_cast<TIn const*>(a.src);
    TIn* __restrict__ out = static_cast<TIn*>(a.out);
    int const P = a.planesPerBlock;
    int const H = a.h[0], W = a.w[0];
    int const L = a.levels;
    int const nt = static_cast<int>(blockDim.x);
    int const lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
    int const warps = nt >> 5;
    int const g = lane >> 2, t = lane & 3;
    uint4* const table = reinterpret_cast<uint4*>(smem + a.tableOff);
    float* const scaleSlot = reinterpret_cast<float*>(smem + a.tableOff + kTcSets * K * 32 * 16); // s, 1 / s

    for (int64_t blk = blockIdx.x; blk < a.blocks; blk += gridDim.x)
    {
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
        __syncthreads();

        // ---- 0. zero X and the band atlases (gutters stay zero); the channel's weights ---------------------------
        for (int i = threadIdx.x; i < a.zeroBytes / 16; i += nt)
        {
            reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
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
        float* const wBase = reinterpret_cast<float*>(smem + a.wOff);
        uint32_t* const wBands = reinterpret_cast<uint32_t*>(smem + a.wOff) + K * K;
        for (int i = threadIdx.x; i < (1 + 4 * L) * K * K; i += nt)
        {
            int const set = i / (K * K), t = i - set * (K * K);
            if (set == 0)
            {
                wBase[t] = __ldg(a.baseWeight + static_cast<int64_t>(c) * K * K + t);
            }
            else
            {
                int64_t const band = (static_cast<int64_t>((set - 1) >> 2) * a.channels + c) * 4 + ((set - 1) & 3);
                wBands[i - K * K] = packedBandWeight(__ldg(a.waveletWeight + band * K * K + t));
            }
        }
        if (warp == 0)
        {
            float m = 0.f;
            for (int t = lane; t < K * K; t += 32)
            {
                m = fmaxf(m, fabsf(__ldg(a.baseWeight + static_cast<int64_t>(c) * K * K + t)));
            }
            float const sb = warpScale(m);
            if (lane == 0)
            {
                scaleSlot[0] = sb;
                scaleSlot[1] = 1.f / sb;
            }
        }
        __syncthreads();

        // level-1 B-fragment table (read in phase 4): built while the cells below load
        for (int i = threadIdx.x; i < kTcSets * K * 32; i += nt)
        {
            int const set = i / (K * 32);
            int const rem = i - set * K * 32;
            int const dy = rem >> 5, ln = rem & 31;
            table[i] = set == 0 ? toeplitzFragment<TIn, K, false>(wBase + dy * K, ln, scaleSlot[0])
                                : bandFragment<K>(wBands + ((set - 1) * K + dy) * K, ln);
        }

        // ---- 1. level-1 cells: X (exact, by row parity), the level-1 bands and LL_1 ------------------------
        unsigned char* const bands1 = smem + a.bandOff[1];
        int const part1 = a.bandPart[1];
        if constexpr (CLUSTER)
        {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            namespace cg = cooperative_groups;
            cg::cluster_group cluster = cg::this_cluster();
            cluster.barrier_wait(std::move(xZeroed));
            int const rank = static_cast<int>(cluster.block_rank());
            int const hw = H * W;
            TIn const* s0 = src + b0 * a.inStrides.batch + (c - rank);
            for (int i = rank * nt + threadIdx.x; i < np * hw; i += kCluster * nt)
            {
                int const p = a.cellsPerPlane[0].div(i);
                int const j = i - p * hw;
                int const y = a.cellsPerRow[0].div(j), x = j - y * W;
                uint4 const v = __ldg(reinterpret_cast<uint4 const*>(
                    s0 + p * a.inStrides.batch + static_cast<int64_t>(j) * a.inStrides.pixel));
                TIn vals[kCluster];
                __builtin_memcpy(vals, &v, sizeof(v));
                int const off = a.xOff + (y & 1) * a.xPart + 2 * xElement(a, r, p, y, x);
#pragma unroll
                for (int m = 0; m < kCluster; ++m)
                {
                    *reinterpret_cast<TIn*>(cluster.map_shared_rank(smem, m) + off) = vals[m];
                }
            }
            cluster.sync(); // X complete in every block
            int const h1 = a.h[1], w1 = a.w[1], hw1 = h1 * w1;
            TIn const* xs = reinterpret_cast<TIn const*>(smem + a.xOff);
            int const xHalf = a.xPart / 2; // elements between the parity atlases
            for (int i = threadIdx.x; i < np * hw1; i += nt)
            {
                int const p = a.cellsPerPlane[1].div(i);
                int const j = i - p * hw1;
                int const y = a.cellsPerRow[1].div(j), x = j - y * w1;
                int const e = xElement(a, r, p, 2 * y, 2 * x); // beyond the plane: X's zero padding
                float const v00 = toFloat(xs[e]), v01 = toFloat(xs[e + 1]);
                float const v10 = toFloat(xs[xHalf + e]), v11 = toFloat(xs[xHalf + e + 1]);
                float const ll = storeCellBands<kParts>(
                    bands1, part1, bandElement(a, 1, r, p, y, x), v00, v01, v10, v11);
                if (L > 1)
                {
                    reinterpret_cast<float*>(smem + a.llOff[1])[p * hw1 + j] = ll;
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
            int64_t const px = a.inStrides.pixel;
            TIn const* s0 = src + b0 * a.inStrides.batch + c * a.inStrides.channel;
            for (int i0 = threadIdx.x; i0 < n; i0 += kInFlight * nt)
            {
                TIn v[kInFlight][4];
#pragma unroll
                for (int u = 0; u < kInFlight; ++u)
                {
                    int const i = i0 + u * nt;
                    v[u][0] = v[u][1] = v[u][2] = v[u][3] = fromFloat<TIn>(0.f);
                    if (i < n)
                    {
                        int const p = a.cellsPerPlane[1].div(i);
                        int const j = i - p * hw1;
                        int const y = a.cellsPerRow[1].div(j), x = j - y * w1;
                        TIn const* sp = s0 + p * a.inStrides.batch + (static_cast<int64_t>(2 * y) * W + 2 * x) * px;
                        bool const x1 = 2 * x + 1 < W, y1 = 2 * y + 1 < H;
                        int64_t const down = W * px;
                        v[u][0] = sp[0];
                        if (x1)
                        {
                            v[u][1] = sp[px];
                        }
                        if (y1)
                        {
                            v[u][2] = sp[down];
                        }
                        if (x1 && y1)
                        {
                            v[u][3] = sp[down + px];
                        }
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
                        TIn* xs = reinterpret_cast<TIn*>(smem + a.xOff);
                        int const e = xElement(a, r, p, 2 * y, 2 * x);
                        int const xHalf = a.xPart / 2;
                        xs[e] = v[u][0];
                        xs[e + 1] = v[u][1];
                        xs[xHalf + e] = v[u][2];
                        xs[xHalf + e + 1] = v[u][3];
                        float const ll = storeCellBands<kParts>(bands1, part1, bandElement(a, 1, r, p, y, x),
                            toFloat(v[u][0]), toFloat(v[u][1]), toFloat(v[u][2]), toFloat(v[u][3]));
                        if (L > 1)
                        {
                            reinterpret_cast<float*>(smem + a.llOff[1])[p * hw1 + j] = ll;
                        }
                    }
                }
            }
        }
        __syncthreads();

        // ---- 2. levels 2..L: bands of LL_{l-1} and LL_l ----------------------------------------------------
        for (int l = 2; l <= L; ++l)
        {
            int const hs = a.h[l - 1], ws = a.w[l - 1], hl = a.h[l], wl = a.w[l], hwl = hl * wl;
            float const* lls = reinterpret_cast<float const*>(smem + a.llOff[l - 1]);
            for (int i = threadIdx.x; i < np * hwl; i += nt)
            {
                int const p = a.cellsPerPlane[l].div(i);
                int const j = i - p * hwl;
                int const y = a.cellsPerRow[l].div(j), x = j - y * wl;
                int const sy = 2 * y, sx = 2 * x;
                float const* ls = lls + p * hs * ws + sy * ws + sx;
                float const v00 = ls[0];
                float const v01 = sx + 1 < ws ? ls[1] : 0.f;
                float const v10 = sy + 1 < hs ? ls[ws] : 0.f;
                float const v11 = (sx + 1 < ws && sy + 1 < hs) ? ls[ws + 1] : 0.f;
                float const ll = storeCellBands<kParts>(
                    smem + a.bandOff[l], a.bandPart[l], bandElement(a, l, r, p, y, x), v00, v01, v10, v11);
                if (l < L)
                {
                    reinterpret_cast<float*>(smem + a.llOff[l])[p * hwl + j] = ll;
                }
            }
            __syncthreads();
        }

        // ---- 3. levels 2..L at once: a warp per tile of 16 cell rows x 8 cells of any level, the 4 band
        //         convolutions on tensor cores, F_l to shared memory; then D_1 in closed form -------------------
        if (L >= 2)
        {
            int tiles = 0;
            for (int l = 2; l <= L; ++l)
            {
                tiles += ((np * a.h[l] + 15) >> 4) * ((a.w[l] + 7) >> 3);
            }
            for (int tile = warp; tile < tiles; tile += warps)
            {
                int l = 2, first = 0; // the tile's level and the index of that level's first tile
                for (;;)
                {
                    int const n = ((np * a.h[l] + 15) >> 4) * ((a.w[l] + 7) >> 3);
                    if (tile < first + n)
                    {
                        break;
                    }
                    first += n;
                    ++l;
                }
                int const hl = a.h[l], wl = a.w[l];
                int const rows = np * hl;
                int const chunks = (wl + 7) >> 3;
                int const pitch = a.bandPitch[l];
                int const part = a.bandPart[l];
                int const mt = a.chunksPerRow[l].div(tile - first);
                int const ch = tile - first - mt * chunks;
                int const arow = min(mt * 16 + (lane & 15), rows - 1);
                int const ap = a.rowsPerPlane[l].div(arow);
                int const ay = arow - ap * hl;
                uint32_t const aBase = sharedAddress(smem + a.bandOff[l])
                    + 2 * ((ap * (hl + r) + ay) * pitch + ch * 8 + (lane >> 4) * 8);
                uint32_t const* wLevel = wBands + 4 * (l - 1) * K * K;
                float acc[4][4] = {};
                bandConvolutions<K, kParts>(acc, aBase, part, pitch,
                    [&](int s, int dy) { return bandFragment<K>(wLevel + (s * K + dy) * K, lane); });
                // lane holds cells (row g + 8i, column ch * 8 + t + 4e) in acc[s][2i + e]
                float* const f = reinterpret_cast<float*>(smem + a.fOff[l]);
                int const bandStride = P * hl * wl;
#pragma unroll
                for (int i = 0; i < 2; ++i)
                {
                    int const row = mt * 16 + g + 8 * i;
                    if (row >= rows)
                    {
                        continue;
                    }
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                    {
                        int const x = ch * 8 + t + 4 * e;
                        if (x < wl)
                        {
#pragma unroll
                            for (int s = 0; s < 4; ++s)
                            {
                                f[s * bandStride + row * wl + x] = acc[s][2 * i + e];
                            }
                        }
                    }
                }
            }
            __syncthreads();

            // D_1(y, x) = sum_{l >= 2} 2^-(l-1) [F^LL + s_y F^LH + s_x F^HL + s_y s_x F^HH]_l (y >> (l-1), x >> (l-1)),
            // s_y = (-1)^((y >> (l-2)) & 1): the recursion of Eq. 3' unrolled down to level 1's grid
            int const h1 = a.h[1], w1 = a.w[1], hw1 = h1 * w1;
            float* const d1 = reinterpret_cast<float*>(smem + a.d1Off);
            for (int i = threadIdx.x; i < np * hw1; i += nt)
            {
                int const p = a.cellsPerPlane[1].div(i);
                int const j = i - p * hw1;
                int const y = a.cellsPerRow[1].div(j), x = j - y * w1;
                float d = 0.f, weight = 0.5f;
                for (int l = 2; l <= L; ++l, weight *= 0.5f)
                {
                    int const hl = a.h[l], wl = a.w[l];
                    int const bandStride = P * hl * wl;
                    float const* f = reinterpret_cast<float const*>(smem + a.fOff[l]) + (p * hl + (y >> (l - 1))) * wl
                        + (x >> (l - 1));
                    float const sy = ((y >> (l - 2)) & 1) ? -1.f : 1.f, sx = ((x >> (l - 2)) & 1) ? -1.f : 1.f;
                    float const lh = f[bandStride], hl_ = f[2 * bandStride], hh = f[3 * bandStride];
                    d = fmaf(weight, f[0] + sy * lh + sx * hl_ + sy * sx * hh, d);
                }
                d1[i] = d;
            }
            __syncthreads();
        }

        // ---- 4. level 1 and the output: per tile, the base convolution of the 32 x 16 pixels above the tile's
        //         cells (4 sub-tiles of 16 x 8 pixels: row parity x column half), the 4 band convolutions, their
        //         synthesis (+ D_1) and the bias; y written once ---------------------------------------------
        {
            int const h1 = a.h[1], w1 = a.w[1];
            int const rows = np * h1;
            int const chunks = (w1 + 7) >> 3;
            int const tiles = ((rows + 15) >> 4) * chunks;
            int const pitch = a.bandPitch[1];
            int const part = a.bandPart[1];
            int const gx = tcGutter(r);
            float const* d1 = reinterpret_cast<float const*>(smem + a.d1Off);
            float const invScale = scaleSlot[1];
            float const bias = __ldg(a.baseBias + c);
            TIn* stage = reinterpret_cast<TIn*>(smem + a.stageOff);
            for (int tile = warp; tile < tiles; tile += warps)
            {
                int const mt = a.chunksPerRow[1].div(tile);
                int const ch = tile - mt * chunks;
                int const arow = min(mt * 16 + (lane & 15), rows - 1);
                int const ap = a.rowsPerPlane[1].div(arow);
                int const ay = arow - ap * h1;
                uint32_t const bandBase = sharedAddress(smem + a.bandOff[1])
                    + 2 * ((ap * (h1 + r) + ay) * pitch + ch * 8 + (lane >> 4) * 8);
                uint32_t const xBase = sharedAddress(smem + a.xOff)
                    + 2 * ((gx + ap * (h1 + gx) + ay) * a.xPitch + ch * 16 + (lane >> 4) * 8);
                // px[rp][e][2i + b]: pixel (2 y_i + rp, 2 x_e + b) of cell (row g + 8i, column ch * 8 + t + 4e)
                float px[2][2][4] = {};
#pragma unroll
                for (int dy = 0; dy < K; ++dy)
                {
                    uint4 const b = table[dy * 32 + lane];
#pragma unroll
                    for (int rp = 0; rp < 2; ++rp)
                    {
                        // input pixel row 2y + rp + dy - r: parity (rp + dy - r) & 1, parity row y + ((rp + dy - r) >> 1)
                        int const o = rp + dy - r;
                        uint32_t const rowAt = xBase + (o & 1) * a.xPart + 2 * (o >> 1) * a.xPitch;
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                        {
                            uint32_t fa[4];
                            loadA(rowAt + 2 * 8 * e, fa);
                            mma16816<TIn>(px[rp][e], fa, b.x, b.y);
                            mma16816<TIn>(px[rp][e], fa, b.z, b.w);
                        }
                    }
                }
#pragma unroll
                for (int rp = 0; rp < 2; ++rp)
                {
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                    {
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                        {
                            px[rp][e][q] = fmaf(px[rp][e][q], invScale, bias);
                        }
                    }
                }
                float acc[4][4] = {};
                bandConvolutions<K, kParts>(
                    acc, bandBase, part, pitch, [&](int s, int dy) { return table[((1 + s) * K + dy) * 32 + lane]; });
                // band s adds 1/2 s_y^(s & 1) s_x^(s >> 1) of its cell to each of the cell's 4 pixels
#pragma unroll
                for (int s = 0; s < 4; ++s)
                {
#pragma unroll
                    for (int rp = 0; rp < 2; ++rp)
                    {
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                        {
#pragma unroll
                            for (int i = 0; i < 2; ++i)
                            {
#pragma unroll
                                for (int bx = 0; bx < 2; ++bx)
                                {
                                    bool const negative = ((s & 1) && rp) != ((s & 2) && bx);
                                    px[rp][e][2 * i + bx] = fmaf(
                                        negative ? -0.5f : 0.5f, acc[s][2 * i + e], px[rp][e][2 * i + bx]);
                                }
                            }
                        }
                    }
                }
#pragma unroll
                for (int i = 0; i < 2; ++i)
                {
                    int const row = mt * 16 + g + 8 * i;
                    if (row >= rows)
                    {
                        continue;
                    }
                    int const p = a.rowsPerPlane[1].div(row);
                    int const y = row - p * h1;
                    TIn* o = out + (b0 + p) * a.outStrides.batch + c * a.outStrides.channel;
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                    {
                        int const x = ch * 8 + t + 4 * e;
                        if (x >= w1)
                        {
                            continue;
                        }
                        float const dv = L > 1 ? 0.5f * d1[(p * h1 + y) * w1 + x] : 0.f;
#pragma unroll
                        for (int rp = 0; rp < 2; ++rp)
                        {
                            int const Y = 2 * y + rp;
                            if (Y >= H)
                            {
                                continue;
                            }
                            int const X = 2 * x;
                            float const v0 = px[rp][e][2 * i] + dv, v1 = px[rp][e][2 * i + 1] + dv;
                            if constexpr (CLUSTER)
                            {
                                TIn* st = stage + (p * H + Y) * W + X;
                                st[0] = fromFloat<TIn>(v0);
                                if (X + 1 < W)
                                {
                                    st[1] = fromFloat<TIn>(v1);
                                }
                            }
                            else if (a.pairStore && X + 1 < W)
                            {
                                *reinterpret_cast<uint32_t*>(o + static_cast<int64_t>(Y) * W + X) = packPair<TIn>(
                                    v0, v1);
                            }
                            else
                            {
                                int64_t const at = (static_cast<int64_t>(Y) * W + X) * a.outStrides.pixel;
                                o[at] = fromFloat<TIn>(v0);
                                if (X + 1 < W)
                                {
                                    o[at + a.outStrides.pixel] = fromFloat<TIn>(v1);
                                }
                            }
                        }
                    }
                }
            }
            __syncthreads();
        }

        // ---- 5. cluster mode: each pixel's kCluster channels from the blocks' staging, one 16-byte store --------
        if constexpr (CLUSTER)
        {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            namespace cg = cooperative_groups;
            cg::cluster_group cluster = cg::this_cluster();
            cluster.sync(); // every block has staged its output
            int const rank = static_cast<int>(cluster.block_rank());
            int const hw = H * W;
            TIn* o0 = out + b0 * a.outStrides.batch + (c - rank);
            for (int i = rank * nt + threadIdx.x; i < np * hw; i += kCluster * nt)
            {
                int const p = a.cellsPerPlane[0].div(i);
                int const j = i - p * hw;
                TIn vals[kCluster];
#pragma unroll
                for (int m = 0; m < kCluster; ++m)
                {
                    vals[m] = reinterpret_cast<TIn const*>(cluster.map_shared_rank(smem, m) + a.stageOff)[i];
                }
                uint4 v;
                __builtin_memcpy(&v, vals, sizeof(v));
                *reinterpret_cast<uint4*>(
                    o0 + p * a.outStrides.batch + static_cast<int64_t>(j) * a.outStrides.pixel) = v;
            }
            cluster.sync(); // no block reads another's shared memory any more
#endif
        }
    }
}

template <typename TIn>
cudaError_t launchTensorCore(TcArgs const& a, cudaStream_t stream);

template <typename TIn, int K>
cudaError_t launchTcKernel(TcArgs const& a, cudaStream_t stream)
{
    static PlaneKernelState state;
    return launchPlaneKernel(state, tcPlaneKernel<TIn, K, false>, tcPlaneKernel<TIn, K, true>, a, a.blocks, a.threads,
        static_cast<size_t>(a.totalBytes), a.clusterOk, stream);
}

#define WTCONV_DEFINE_LAUNCH_TENSOR_CORE(TIN)                                                                          \
    template <>                                                                                                        \
    cudaError_t launchTensorCore<TIN>(TcArgs const& a, cudaStream_t stream)                                            \
    {                                                                                                                  \
        switch (a.k)                                                                                                   \
        {                                                                                                              \
        case 3: return launchTcKernel<TIN, 3>(a, stream);                                                              \
        case 5: return launchTcKernel<TIN, 5>(a, stream);                                                              \
        case 7: return launchTcKernel<TIN, 7>(a, stream);                                                              \
        default: return cudaErrorInvalidValue;                                                                         \
        }                                                                                                              \
    }

} // namespace detail
} // namespace wtconv
