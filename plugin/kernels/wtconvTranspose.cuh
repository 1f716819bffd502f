// wtconvTranspose.cuh — copies between channels-last (NHWC, with a channel pitch) and planar (NCHW) tensors.
//
// The tiled path (wtconvKernel.cu, path B) works on planar planes, each block on one channel. Reading a
// channels-last tensor that way touches 2 or 4 bytes of every 32-byte sector, so for channels-last I/O the
// launch sequence converts instead: x -> planar copy in the workspace, the planar pipeline, planar y ->
// channels-last (see wtconvKernel.cu's banner). Each conversion is a batched 2-D transpose of one batch
// item's (pixels x channels) matrix, through a 64 x 64 shared-memory tile, so that both the reads and the
// writes of a warp cover consecutive addresses. Padding channels (c >= C of the pitch) are neither read nor
// written. The copy moves bits only, so fp16 and bf16 share the 16-bit kernel.
//
// Included by the per-dtype translation units (wtconvKernel_f32.cu, _f16.cu, _bf16.cu), which instantiate
// launchTranspose<T> with WTCONV_DEFINE_LAUNCH_TRANSPOSE, and by wtconvKernel.cu, which calls it.
#pragma once

#include "wtconvKernelImpl.cuh"

#include <cstdint>
#include <type_traits>

namespace wtconv
{
namespace detail
{

constexpr int kTransposeTile = 64;            // tile edge (pixels and channels)
constexpr int kTransposeRows = kThreads / 32; // warps per block: each takes every 8th tile row
constexpr int kTransposeRowsPerThread = kTransposeTile / kTransposeRows; // 8
constexpr int kTransposeColsPerThread = kTransposeTile / 32;             // 2

enum class TransposeDirection : int32_t
{
    kToPlanar = 0,       // channels-last src -> planar dst
    kToChannelsLast = 1, // planar src -> channels-last dst
};

// `items` batch items; per item a (pixels x channels) matrix. Channels-last element (b, pixel, c) at
// (b * pixels + pixel) * pitch + c; planar element (b, c, pixel) at (b * channels + c) * pixels + pixel.
struct TransposeArgs
{
    void const* src;
    void* dst;
    int64_t channels; // C
    int64_t pixels;   // H * W of this tensor
    int64_t pitch;    // channels-last elements between neighbouring pixels, >= C
    int64_t tilesC;   // ceil(C / 64)
    int64_t tilesP;   // ceil(pixels / 64)
    int64_t tiles;    // items * tilesC * tilesP
};

inline TransposeArgs transposeGeometry(int64_t items, int64_t channels, int64_t pixels, int64_t pitch)
{
    TransposeArgs a{};
    a.channels = channels;
    a.pixels = pixels;
    a.pitch = pitch;
    a.tilesC = (channels + kTransposeTile - 1) / kTransposeTile;
    a.tilesP = (pixels + kTransposeTile - 1) / kTransposeTile;
    a.tiles = items * a.tilesC * a.tilesP;
    return a;
}

// The raw bits of one element: the copy never converts.
template <typename T>
using TransposeBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;

// One 64 x 64 tile per block iteration (grid-stride over tiles; pixel tiles fastest, so neighbouring blocks
// read and write neighbouring addresses). A thread moves 16 elements; the tile rows are padded to an odd
// number of 32-bit words, so the column-wise shared-memory reads are free of bank conflicts.
template <typename Bits, TransposeDirection DIR>
__global__ void __launch_bounds__(kThreads) transposeKernel(TransposeArgs const a)
{
    static_assert(sizeof(Bits) == 2 || sizeof(Bits) == 4, "16- or 32-bit elements");
    constexpr int kPitch = kTransposeTile + 4 / static_cast<int>(sizeof(Bits)); // 65 or 66 (33 words)
    __shared__ Bits tile[kTransposeTile * kPitch];
    Bits const* __restrict__ src = static_cast<Bits const*>(a.src);
    Bits* __restrict__ dst = static_cast<Bits*>(a.dst);
    int const lane = threadIdx.x & 31;
    int const warp = threadIdx.x >> 5;
    int64_t const tilesPerItem = a.tilesC * a.tilesP;

    for (int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x)
    {
        int64_t const b = t / tilesPerItem;
        int64_t const rest = t - b * tilesPerItem;
        int64_t const tc = rest / a.tilesP;
        int64_t const c0 = tc * kTransposeTile;
        int64_t const p0 = (rest - tc * a.tilesP) * kTransposeTile;
        int const nc = static_cast<int>(a.channels - c0 < kTransposeTile ? a.channels - c0 : kTransposeTile);
        int const np = static_cast<int>(a.pixels - p0 < kTransposeTile ? a.pixels - p0 : kTransposeTile);
        // Tile origin in each layout; rows below are pixels (channels-last) or channels (planar).
        int64_t const channelsLastOrigin = (b * a.pixels + p0) * a.pitch + c0;
        int64_t const planarOrigin = (b * a.channels + c0) * a.pixels + p0;
        bool constexpr toPlanar = DIR == TransposeDirection::kToPlanar;
        Bits const* s = src + (toPlanar ? channelsLastOrigin : planarOrigin);
        Bits* d = dst + (toPlanar ? planarOrigin : channelsLastOrigin);
        int64_t const sRow = toPlanar ? a.pitch : a.pixels; // elements between source rows
        int64_t const dRow = toPlanar ? a.pixels : a.pitch;
        int const sRows = toPlanar ? np : nc, sCols = toPlanar ? nc : np;

        __syncthreads(); // the previous tile's shared-memory reads are done

        // All 16 loads in flight before the shared-memory stores.
        Bits v[kTransposeRowsPerThread][kTransposeColsPerThread];
#pragma unroll
        for (int u = 0; u < kTransposeRowsPerThread; ++u)
        {
            int const i = warp + u * kTransposeRows;
#pragma unroll
            for (int h = 0; h < kTransposeColsPerThread; ++h)
            {
                int const j = lane + 32 * h;
                v[u][h] = (i < sRows && j < sCols) ? s[i * sRow + j] : Bits{0};
            }
        }
#pragma unroll
        for (int u = 0; u < kTransposeRowsPerThread; ++u)
        {
#pragma unroll
            for (int h = 0; h < kTransposeColsPerThread; ++h)
            {
                tile[(warp + u * kTransposeRows) * kPitch + lane + 32 * h] = v[u][h];
            }
        }
        __syncthreads();
        // Destination row i is source column i.
#pragma unroll
        for (int u = 0; u < kTransposeRowsPerThread; ++u)
        {
            int const i = warp + u * kTransposeRows;
#pragma unroll
            for (int h = 0; h < kTransposeColsPerThread; ++h)
            {
                int const j = lane + 32 * h;
                if (i < sCols && j < sRows)
                {
                    d[i * dRow + j] = tile[j * kPitch + i];
                }
            }
        }
    }
}

// Launcher (explicitly specialised in the per-dtype translation units).
template <typename T>
cudaError_t launchTranspose(TransposeArgs const& a, TransposeDirection direction, cudaStream_t stream);

template <>
cudaError_t launchTranspose<float>(TransposeArgs const&, TransposeDirection, cudaStream_t);
template <>
cudaError_t launchTranspose<__half>(TransposeArgs const&, TransposeDirection, cudaStream_t);
template <>
cudaError_t launchTranspose<__nv_bfloat16>(TransposeArgs const&, TransposeDirection, cudaStream_t);

template <typename Bits>
cudaError_t launchTransposeKernel(TransposeArgs const& a, TransposeDirection direction, cudaStream_t stream)
{
    unsigned const grid = static_cast<unsigned>(gridFor(a.tiles));
    if (direction == TransposeDirection::kToPlanar)
    {
        transposeKernel<Bits, TransposeDirection::kToPlanar><<<grid, kThreads, 0, stream>>>(a);
    }
    else
    {
        transposeKernel<Bits, TransposeDirection::kToChannelsLast><<<grid, kThreads, 0, stream>>>(a);
    }
    return cudaGetLastError();
}

#define WTCONV_DEFINE_LAUNCH_TRANSPOSE(T)                                                                              \
    template <>                                                                                                        \
    cudaError_t launchTranspose<T>(TransposeArgs const& a, TransposeDirection direction, cudaStream_t stream)          \
    {                                                                                                                  \
        return launchTransposeKernel<TransposeBits<T>>(a, direction, stream);                                          \
    }

} // namespace detail
} // namespace wtconv
