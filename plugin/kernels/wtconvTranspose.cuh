// wtconvTranspose.cuh — copies between channels-last (NHWC, with a channel pitch) and planar (NCHW) tensors.
//
// The tiled path (docs/design.md §3.1) works on planar planes, each block on one channel. Reading a
// channels-last tensor that way touches 2 or 4 bytes of every 32-byte sector, so for channels-last I/O the
// launch sequence converts instead: x -> planar copy in the workspace, the planar pipeline, planar y ->
// channels-last (docs/design.md §3.1). Each conversion is a batched 2-D transpose of one batch
// item's (pixels x channels) matrix through a shared-memory tile (64 x 64, or 32 channels x 128 pixels), so
// that both the reads and the writes of a warp cover consecutive addresses. Padding channels (c >= C of the
// pitch) are neither read nor written. The copy moves bits only, so fp16 and bf16 share the 16-bit kernel.
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

constexpr int kTransposeTileElements = 64 * 64; // elements per tile: 64 x 64, or 32 channels x 128 pixels
constexpr int kTransposeWarps = kThreads / 32;  // each warp takes every 8th tile row, 32 columns per access

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
    int32_t tileC;    // channels per tile: 64 or 32 (then 128 pixels)
    int64_t tilesC;   // ceil(C / tileC)
    int64_t tilesP;   // ceil(pixels / (4096 / tileC))
    int64_t tiles;    // items * tilesC * tilesP
};

// Tiles of 64 channels, or of 32 where that leaves fewer channels of the last channel tile idle (C = 32, 96,
// 130, ...): the channels-last side of a tile reads or writes only its valid channels.
inline TransposeArgs transposeGeometry(int64_t items, int64_t channels, int64_t pixels, int64_t pitch)
{
    TransposeArgs a{};
    a.channels = channels;
    a.pixels = pixels;
    a.pitch = pitch;
    int64_t const idle64 = (channels + 63) / 64 * 64 - channels;
    int64_t const idle32 = (channels + 31) / 32 * 32 - channels;
    a.tileC = idle32 < idle64 ? 32 : 64;
    int64_t const tileP = kTransposeTileElements / a.tileC;
    a.tilesC = (channels + a.tileC - 1) / a.tileC;
    a.tilesP = (pixels + tileP - 1) / tileP;
    a.tiles = items * a.tilesC * a.tilesP;
    return a;
}

// The raw bits of one element: the copy never converts.
template <typename T>
using TransposeBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;

// One tile (TC channels x 4096 / TC pixels) per block iteration (grid-stride over tiles; pixel tiles fastest, so
// neighbouring blocks read and write neighbouring addresses). A thread moves 16 elements; each warp access
// covers 32 consecutive elements of a row. The tile rows are padded to an odd number of 32-bit words, so the
// column-wise shared-memory reads are free of bank conflicts. 8 blocks per SM (32 registers): up to 32768 loads
// in flight per SM, the latency hiding a memory-bound copy needs.
template <typename Bits, TransposeDirection DIR, int TC>
__global__ void __launch_bounds__(kThreads, 8) transposeKernel(TransposeArgs const a)
{
    static_assert(sizeof(Bits) == 2 || sizeof(Bits) == 4, "16- or 32-bit elements");
    constexpr int kTP = kTransposeTileElements / TC; // pixels per tile
    constexpr bool kToPlanar = DIR == TransposeDirection::kToPlanar;
    // Source rows are pixels (channels-last source) or channels (planar source); destination rows the other.
    constexpr int kSrcCols = kToPlanar ? TC : kTP;
    constexpr int kSrcRows = kTransposeTileElements / kSrcCols;
    constexpr int kDstCols = kToPlanar ? kTP : TC;
    constexpr int kDstRows = kTransposeTileElements / kDstCols;
    static_assert(
        kSrcCols % 32 == 0 && kDstCols % 32 == 0 && kSrcRows % kTransposeWarps == 0 && kDstRows % kTransposeWarps == 0,
        "whole warp accesses");
    constexpr int kPitch = kSrcCols + 4 / static_cast<int>(sizeof(Bits)); // odd in 32-bit words
    __shared__ Bits tile[kSrcRows * kPitch];
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
        int64_t const c0 = tc * TC;
        int64_t const p0 = (rest - tc * a.tilesP) * kTP;
        int const nc = static_cast<int>(a.channels - c0 < TC ? a.channels - c0 : TC);
        int const np = static_cast<int>(a.pixels - p0 < kTP ? a.pixels - p0 : kTP);
        int64_t const channelsLastOrigin = (b * a.pixels + p0) * a.pitch + c0;
        int64_t const planarOrigin = (b * a.channels + c0) * a.pixels + p0;
        Bits const* s = src + (kToPlanar ? channelsLastOrigin : planarOrigin);
        Bits* d = dst + (kToPlanar ? planarOrigin : channelsLastOrigin);
        int64_t const sRow = kToPlanar ? a.pitch : a.pixels; // elements between source rows
        int64_t const dRow = kToPlanar ? a.pixels : a.pitch;
        int const sRows = kToPlanar ? np : nc, sCols = kToPlanar ? nc : np; // valid part of the tile

        __syncthreads(); // the previous tile's shared-memory reads are done

        // All 16 loads in flight before the shared-memory stores.
        Bits v[kSrcRows / kTransposeWarps][kSrcCols / 32];
#pragma unroll
        for (int u = 0; u < kSrcRows / kTransposeWarps; ++u)
        {
            int const i = warp + u * kTransposeWarps;
#pragma unroll
            for (int h = 0; h < kSrcCols / 32; ++h)
            {
                int const j = lane + 32 * h;
                v[u][h] = (i < sRows && j < sCols) ? __ldg(s + i * sRow + j) : Bits{0};
            }
        }
#pragma unroll
        for (int u = 0; u < kSrcRows / kTransposeWarps; ++u)
        {
#pragma unroll
            for (int h = 0; h < kSrcCols / 32; ++h)
            {
                tile[(warp + u * kTransposeWarps) * kPitch + lane + 32 * h] = v[u][h];
            }
        }
        __syncthreads();
        // Destination row i is source column i.
#pragma unroll
        for (int u = 0; u < kDstRows / kTransposeWarps; ++u)
        {
            int const i = warp + u * kTransposeWarps;
#pragma unroll
            for (int h = 0; h < kDstCols / 32; ++h)
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

template <typename Bits, TransposeDirection DIR>
cudaError_t launchTransposeKernel(TransposeArgs const& a, cudaStream_t stream)
{
    unsigned const grid = static_cast<unsigned>(gridFor(a.tiles));
    if (a.tileC == 32)
    {
        transposeKernel<Bits, DIR, 32><<<grid, kThreads, 0, stream>>>(a);
    }
    else
    {
        transposeKernel<Bits, DIR, 64><<<grid, kThreads, 0, stream>>>(a);
    }
    return cudaGetLastError();
}

template <typename Bits>
cudaError_t launchTransposeKernel(TransposeArgs const& a, TransposeDirection direction, cudaStream_t stream)
{
    return direction == TransposeDirection::kToPlanar
        ? launchTransposeKernel<Bits, TransposeDirection::kToPlanar>(a, stream)
        : launchTransposeKernel<Bits, TransposeDirection::kToChannelsLast>(a, stream);
}

#define WTCONV_DEFINE_LAUNCH_TRANSPOSE(T)                                                                              \
    template <>                                                                                                        \
    cudaError_t launchTranspose<T>(TransposeArgs const& a, TransposeDirection direction, cudaStream_t stream)          \
    {                                                                                                                  \
        return launchTransposeKernel<TransposeBits<T>>(a, direction, stream);                                          \
    }

} // namespace detail
} // namespace wtconv
