// wtconvKernel.cu — fused WTConv inference: validation, the launch plan (which kernel, its geometry, its workspace)
// and the launch sequence. The maths is docs/design.md §2.4 (the recursion D_{l-1} = 1/2 [F_l + D_l ...] the
// kernels evaluate, Eq. 3); the kernels, their traffic and the measured dispatch between them are §3.1.
// The plan depends on the sizes (and, for the fixed-geometry kernels, the GPU's SM count: wtconvFixedPlane.cu), so
// wtconvWorkspaceBytes and a later launch (maybe on another GPU, wtconvSharedMemory.cuh) always agree: the
// whole-plane kernels, whichever takes a shape, need no workspace, and every plan fits the portable shared memory.

#include "wtconvFixedPlane.h"
#include "wtconvKernel.h"
#include "wtconvKernelImpl.cuh"
#include "wtconvTranspose.cuh"
#include "wtconvWholePlane.cuh"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace wtconv
{
namespace detail
{
// Specialisations defined in the per-dtype translation units (they compile in parallel).
template <>
cudaError_t launchLevel<float, float, false>(LevelArgs const&, cudaStream_t);
template <>
cudaError_t launchLevel<float, float, true>(LevelArgs const&, cudaStream_t);
template <>
cudaError_t launchLevel<__half, __half, true>(LevelArgs const&, cudaStream_t);
template <>
cudaError_t launchLevel<__nv_bfloat16, __nv_bfloat16, true>(LevelArgs const&, cudaStream_t);
template <>
cudaError_t launchPool<float>(PoolArgs const&, int, cudaStream_t);
template <>
cudaError_t launchSmall<float>(SmallArgs const&, cudaStream_t);
template <>
cudaError_t launchSmall<__half>(SmallArgs const&, cudaStream_t);
template <>
cudaError_t launchSmall<__nv_bfloat16>(SmallArgs const&, cudaStream_t);
template <>
cudaError_t launchPool<__half>(PoolArgs const&, int, cudaStream_t);
template <>
cudaError_t launchFixedPlane<float>(WTConvParams const&, FixedPlanePlan const&, cudaStream_t);
template <>
cudaError_t launchFixedPlane<__half>(WTConvParams const&, FixedPlanePlan const&, cudaStream_t);
template <>
cudaError_t launchFixedPlane<__nv_bfloat16>(WTConvParams const&, FixedPlanePlan const&, cudaStream_t);
template <>
cudaError_t launchPool<__nv_bfloat16>(PoolArgs const&, int, cudaStream_t);

namespace
{

constexpr size_t kAlign = 256;
constexpr int64_t kMaxDim = (int64_t{1} << 31) - 64; // per-dimension limit (int32 tile arithmetic)
constexpr size_t kBlockSharedTarget = 64 * 1024;

IoStrides planarStrides(int64_t channels, int64_t h, int64_t w)
{
    return IoStrides{channels * h * w, h * w, 1};
}

size_t alignUp(size_t v)
{
    return (v + kAlign - 1) / kAlign * kAlign;
}
int roundUp(int v, int m)
{
    return (v + m - 1) / m * m;
}

void writeMessage(char* message, size_t bytes, char const* fmt, ...)
{
    if (message == nullptr || bytes == 0)
    {
        return;
    }
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(message, bytes, fmt, args);
    va_end(args);
}

// Element offsets of the I/O tensor x (or y) with spatial size h x w in p's layout.
IoStrides ioStrides(WTConvParams const& p, int64_t h, int64_t w)
{
    if (p.layout == Layout::kNHWC)
    {
        int64_t const pitch = pixelPitch(p);
        return IoStrides{h * w * pitch, 1, pitch};
    }
    return planarStrides(p.channels, h, w);
}

struct Grids
{
    int64_t h[kMaxLevels + 1];
    int64_t w[kMaxLevels + 1];
};

Grids levelGrids(WTConvParams const& p)
{
    Grids g{};
    g.h[0] = p.height;
    g.w[0] = p.width;
    for (int l = 1; l <= kMaxLevels; ++l)
    {
        g.h[l] = (g.h[l - 1] + 1) / 2;
        g.w[l] = (g.w[l - 1] + 1) / 2;
    }
    return g;
}

// Whole-plane path geometry (smallPlaneKernel, wtconvWholePlane.cuh). Regions in this order: X, bands (zeroed
// together), LL_1..LL_{L-1}, D, D, weights. Thread strips may run past a level's grid (the last strip of a
// column, the second cell of an odd width); X, the bands and D are padded so that their reads stay inside
// the region they read (nothing computed there is stored).
// A plane runs on this path only when its block fits kPortableSharedBytes (99 KB, wtconvSharedMemory.cuh), the
// shared memory every GPU we build for gives a block: the choice, and with it getWorkspaceSize (0 here), must not
// depend on the GPU an engine was built on.
constexpr size_t kSmallMaxSharedBytes = kPortableSharedBytes;
#ifndef WTCONV_SMALL_TARGET_FLOATS
#define WTCONV_SMALL_TARGET_FLOATS (12 * 1024)
#endif
// Shared memory a block aims at (it takes as many planes P as fit): ~48 KiB, so 4 blocks share an SM; planes
// under 12 x 12 pixels aim at ~32 KiB (more, smaller blocks per SM measured faster at 7 x 7: docs/bench).
constexpr int kSmallTargetFloats = WTCONV_SMALL_TARGET_FLOATS;
constexpr int kSmallTargetFloatsTiny = 8 * 1024;
constexpr int kTinyPlane = 12 * 12;

int ceilDiv(int v, int m)
{
    return (v + m - 1) / m;
}

// The whole-plane geometry of p's shape (cheap: a few integer operations per level, so it is simply recomputed
// where needed). Row pitches are the smallest the strips' vector loads allow: padding them further to spread the
// banks (a searched pitch) cost shared memory, and at 56 x 56 a block per SM, which measured slower than the
// bank conflicts it removed (docs/bench/README.md).
SmallArgs smallGeometry(WTConvParams const& p)
{
    Grids const g = levelGrids(p);
    SmallArgs a{};
    int const k = p.kernelSize, r = k / 2, L = p.levels;
    a.k = k;
    a.r = r;
    a.levels = L;
    a.stride = p.stride;
    a.planes = p.batch * p.channels;
    a.channels = static_cast<int32_t>(p.channels);
    for (int l = 0; l <= kMaxLevels; ++l)
    {
        a.h[l] = static_cast<int32_t>(g.h[l]);
        a.w[l] = static_cast<int32_t>(g.w[l]);
    }
    a.ho = static_cast<int32_t>(outputSize(p.height, p.stride));
    a.wo = static_cast<int32_t>(outputSize(p.width, p.stride));
    // X: a level-1 strip's base window starts at column 4 * (cell pair) and row 2 * (first cell row) and
    // reads 4 * ceil((k + 3) / 4) columns and 2 * stripRows(1) + 2r rows.
    int const pairs1 = ceilDiv(a.w[1], 2);
    int const rows1 = stripRows(1) * ceilDiv(a.h[1], stripRows(1));
    int const m1 = stripRows(1);
    a.xPitch = roundUp(std::max(a.w[0] + 2 * r + 1, 4 * (pairs1 - 1) + 4 * ceilDiv(k + 3, 4)), 4);
    a.xPlane = std::max(a.h[0] + 2 * r + 1, 2 * rows1 + 2 * r) * a.xPitch;
    int llPer = 0, bandPer = 0;
    for (int l = 1; l <= L; ++l)
    {
        // a band strip's window: columns [2 * pair, 2 * pair + k], rows [first row, first row + M + k - 1)
        int const m = stripRows(l);
        int const pairs = ceilDiv(a.w[l], 2);
        a.bandPitch[l] = 2 * pairs + 2 * r;
        a.bandPlane[l] = a.bandPitch[l] * (m * ceilDiv(a.h[l], m) + 2 * r);
        bandPer += 4 * a.bandPlane[l];
        if (l < L)
        {
            llPer += a.h[l] * a.w[l];
        }
    }
    // D_l (l = 1..L-1) is written by level l+1's strips (2 x 2 pixels per cell, 4 columns per float4
    // store) and read by level l's strips (float2 per cell pair).
    a.dPlane = 0;
    for (int l = 1; l < L; ++l)
    {
        int const mw = stripRows(l + 1), mr = stripRows(l);
        a.dPitch[l] = 4 * ceilDiv(a.w[l + 1], 2);
        int const rows = std::max(2 * mw * ceilDiv(a.h[l + 1], mw), mr * ceilDiv(a.h[l], mr));
        a.dPlane = std::max(a.dPlane, roundUp(rows * a.dPitch[l], 4));
    }
    a.wPer = paddedTaps(k) * (1 + 4 * L);
    int const perPlane = a.xPlane + bandPer + llPer + 2 * a.dPlane;
    int const target = p.height * p.width < kTinyPlane ? kSmallTargetFloatsTiny : kSmallTargetFloats;
    int const P = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({64, target / perPlane, p.batch})));
    a.planesPerBlock = P;
    int const strips1 = P * pairs1 * ceilDiv(a.h[1], m1);
    a.threads = std::min(kPlaneMaxThreads, std::max(kPlaneMinThreads, roundUp(strips1, 32)));
    a.batch = p.batch;
    a.batchGroups = (p.batch + P - 1) / P;
    a.blocks = p.channels * a.batchGroups;
    int off = 0;
    a.xOff = off;
    off += P * a.xPlane;
    for (int l = 1; l <= L; ++l)
    {
        a.bandOff[l] = off;
        off += 4 * P * a.bandPlane[l];
    }
    off = roundUp(off, 4);
    a.zeroFloats = off;
    for (int l = 1; l < L; ++l)
    {
        a.llOff[l] = off;
        off += P * a.h[l] * a.w[l];
    }
    off = roundUp(off, 4);
    a.dOff[0] = off;
    off += P * a.dPlane;
    a.dOff[1] = off;
    off += P * a.dPlane;
    a.wOff = off;
    off += a.wPer;
    // Channels-last: the output staging of cluster mode. The deep levels' bands and LL_1..LL_{L-1} (from
    // bandOff[2] to dOff[0]) are dead during the output phase; when they are too small, a region of its own.
    a.stageOff = 0;
    if (p.layout == Layout::kNHWC)
    {
        int const stage = P * a.ho * a.wo;
        if (L >= 2 && a.dOff[0] - a.bandOff[2] >= stage)
        {
            a.stageOff = a.bandOff[2];
        }
        else
        {
            a.stageOff = off;
            off += stage;
        }
    }
    a.totalFloats = off;
    for (int l = 0; l <= L; ++l)
    {
        int const m = stripRows(std::max(l, 1));
        int const pairs = ceilDiv(a.w[l], 2);
        a.cellsPerPlane[l] = FastDivisor::of(static_cast<uint32_t>(a.h[l] * a.w[l]));
        a.cellsPerRow[l] = FastDivisor::of(static_cast<uint32_t>(a.w[l]));
        a.stripsPerPlane[l] = FastDivisor::of(static_cast<uint32_t>(pairs * ceilDiv(a.h[l], m)));
        a.stripsPerRow[l] = FastDivisor::of(static_cast<uint32_t>(pairs));
    }
    a.outPerPlane = FastDivisor::of(static_cast<uint32_t>(a.ho * a.wo));
    return a;
}

// Whether p runs on the whole-plane path; if so and `geometry` is not null, its geometry goes there.
bool useSmallPath(WTConvParams const& p, SmallArgs* geometry = nullptr)
{
    if (p.height * p.width > kSmallPlaneMax)
    {
        return false;
    }
    SmallArgs const a = smallGeometry(p);
    if (static_cast<size_t>(a.totalFloats) * sizeof(float) > kSmallMaxSharedBytes)
    {
        return false;
    }
    if (geometry != nullptr)
    {
        *geometry = a;
    }
    return true;
}

// Channels-last on the tiled path runs the planar pipeline on chunks of the batch: each chunk's planar copies
// of x and y and its LL / D planes must fit this many workspace bytes (at least one batch item per chunk, however
// large), so the workspace does not grow with B beyond it.
constexpr size_t kChannelsLastChunkBytes = size_t{64} << 20;

// Where the tiled path's buffers lie in the workspace, and how many batch items one pass of the planar
// pipeline takes (B for NCHW; a chunk for channels-last).
struct TiledBuffers
{
    float* ll[kMaxLevels + 1]; // LL_l, l = 1 .. L-1: (items * C, h_l, w_l) fp32
    float* d[kMaxLevels + 1];  // D_l,  l = 1 .. L-1: (items * C, h_l, w_l) fp32
    void* xPlanar;             // channels-last only: x of one chunk, (items, C, H, W) in the I/O dtype
    void* yPlanar;             // channels-last only: y of one chunk, (items, C, Ho, Wo) in the I/O dtype
    int64_t chunkItems;        // batch items per pass of the planar pipeline
};

size_t dtypeBytes(DataType t)
{
    return t == DataType::kFLOAT32 ? 4 : 2;
}

// Workspace of the tiled path (the whole-plane path needs none), regions at 256-byte boundaries:
//   NCHW: for l = 1 .. L-1, LL_l then D_l, each (B*C, h_l, w_l) fp32.
//   NHWC: x and y of one chunk in planar layout (I/O dtype), then LL_l, D_l for the chunk's items. With
//         per = C*(H*W + Ho*Wo)*e + sum_l 2*C*h_l*w_l*4 bytes per batch item and cap = kChannelsLastChunkBytes:
//         items = min(B, max(1, floor(cap / per))), and the size reported is
//         alignUp(min(B * per, max(cap, per))) + 2L * 256 (the regions' alignment), which holds the layout.
//         That bound, rather than the layout's exact end, is reported because it never decreases when B, H or
//         W grow: TensorRT sizes the workspace for a profile's largest shape and every smaller shape of the
//         profile must fit in it (the chunk's item count alone can drop as H or W grow).
// `buffers` (may be null) receives the pointers into p.workspace; returns the bytes.
size_t workspaceLayout(WTConvParams const& p, TiledBuffers* buffers)
{
    if (useSmallPath(p))
    {
        return 0; // everything stays in shared memory
    }
    Grids const g = levelGrids(p);
    bool const channelsLast = p.layout == Layout::kNHWC;
    size_t const e = dtypeBytes(p.dtype);
    size_t const inItem = static_cast<size_t>(p.channels) * g.h[0] * g.w[0] * e;
    size_t const outItem = static_cast<size_t>(p.channels) * outputSize(p.height, p.stride)
        * outputSize(p.width, p.stride) * e;
    size_t levelItem = 0; // one LL_l or D_l plane set per batch item, summed over l
    for (int l = 1; l < p.levels; ++l)
    {
        levelItem += static_cast<size_t>(p.channels) * g.h[l] * g.w[l] * sizeof(float);
    }
    int64_t items = p.batch;
    size_t bound = 0;
    if (channelsLast)
    {
        size_t const per = inItem + outItem + 2 * levelItem;
        size_t used = 0; // min(B * per, max(cap, per)) without overflow
        if (per >= kChannelsLastChunkBytes)
        {
            items = 1;
            used = per;
        }
        else if (static_cast<size_t>(p.batch) <= kChannelsLastChunkBytes / per)
        {
            used = static_cast<size_t>(p.batch) * per;
        }
        else
        {
            items = static_cast<int64_t>(kChannelsLastChunkBytes / per);
            used = kChannelsLastChunkBytes;
        }
        bound = alignUp(used) + 2 * static_cast<size_t>(p.levels) * kAlign;
    }

    // Region offsets; pointers only when asked for (p.workspace may be null for a size query).
    size_t offset = 0;
    auto region = [&offset](size_t bytes)
    {
        size_t const at = offset;
        offset = alignUp(offset + bytes);
        return at;
    };
    size_t xOff = 0, yOff = 0;
    if (channelsLast)
    {
        xOff = region(static_cast<size_t>(items) * inItem);
        yOff = region(static_cast<size_t>(items) * outItem);
    }
    size_t llOff[kMaxLevels + 1] = {}, dOff[kMaxLevels + 1] = {};
    for (int l = 1; l < p.levels; ++l)
    {
        size_t const bytes = static_cast<size_t>(items) * p.channels * g.h[l] * g.w[l] * sizeof(float);
        llOff[l] = region(bytes);
        dOff[l] = region(bytes);
    }
    if (buffers != nullptr)
    {
        char* const base = static_cast<char*>(p.workspace);
        *buffers = TiledBuffers{};
        for (int l = 1; l < p.levels; ++l)
        {
            buffers->ll[l] = reinterpret_cast<float*>(base + llOff[l]);
            buffers->d[l] = reinterpret_cast<float*>(base + dOff[l]);
        }
        buffers->xPlanar = channelsLast ? base + xOff : nullptr;
        buffers->yPlanar = channelsLast ? base + yOff : nullptr;
        buffers->chunkItems = items;
    }
    return channelsLast ? bound : offset;
}

// Tile geometry and shared-memory layout of one level pass.
LevelArgs levelGeometry(int64_t planes, int channels, int64_t hs, int64_t ws, int k, int stride)
{
    LevelArgs a{};
    a.planes = planes;
    a.channels = channels;
    a.hs = static_cast<int32_t>(hs);
    a.ws = static_cast<int32_t>(ws);
    a.hc = static_cast<int32_t>((hs + 1) / 2);
    a.wc = static_cast<int32_t>((ws + 1) / 2);
    a.k = k;
    a.r = k / 2;
    a.stride = stride;
    a.ho = static_cast<int32_t>(outputSize(hs, stride));
    a.wo = static_cast<int32_t>(outputSize(ws, stride));
    a.th = static_cast<int32_t>(std::min<int64_t>(kMaxTile, (hs + 7) / 8 * 8));
    a.tw = static_cast<int32_t>(std::min<int64_t>(kMaxTile, (ws + 7) / 8 * 8));
    a.tilesY = static_cast<int32_t>((hs + a.th - 1) / a.th);
    a.tilesX = static_cast<int32_t>((ws + a.tw - 1) / a.tw);
    int const r = a.r;
    a.sOff = (4 - r % 4) % 4;
    a.sh = a.th + 4 * r;
    a.sp = roundUp(a.tw + 4 * r + a.sOff + 4, 4);
    a.tch = a.th / 2;
    a.tcw = a.tw / 2;
    a.bh = a.tch + 2 * r;
    a.bp = roundUp(a.tcw + 2 * r + 4, 4);
    a.perPlane = a.sh * a.sp + 4 * a.bh * a.bp + 4 * a.tch * a.tcw + roundUp(5 * k * k, 4);
    int p = 1;
    if (a.tilesX == 1 && a.tilesY == 1)
    {
        // Several small planes per block: aim at ~4096 source pixels per block.
        p = std::max(1, std::min(32, (kMaxTile * kMaxTile) / (a.th * a.tw)));
        // <= 64 KiB per block so that 3 blocks share an SM (latency hiding across the load phase)
        while (p > 1 && static_cast<size_t>(p) * a.perPlane * sizeof(float) > kBlockSharedTarget)
        {
            --p;
        }
        p = static_cast<int>(std::min<int64_t>(p, planes));
    }
    a.planesPerBlock = p;
    a.blocks = p > 1 ? (planes + p - 1) / p : planes * a.tilesX * a.tilesY;
    return a;
}

template <typename T>
cudaError_t tiledPipeline(WTConvParams const& p, TiledBuffers const& buf, cudaStream_t stream);
template <typename T>
cudaError_t tiledChannelsLast(WTConvParams const& p, TiledBuffers const& buf, cudaStream_t stream);

// The I/O fields of the whole-plane kernel's arguments: pointers, layout strides, and whether channels-last I/O
// allows the cluster mode (clusterLayout).
void setPlaneIo(SmallArgs& a, WTConvParams const& p, int64_t ho, int64_t wo)
{
    a.src = p.input;
    a.out = p.output;
    a.baseWeight = p.baseWeight;
    a.baseBias = p.baseBias;
    a.waveletWeight = p.waveletWeight;
    a.inStrides = ioStrides(p, p.height, p.width);
    a.outStrides = ioStrides(p, ho, wo);
    a.channelFastest = p.layout == Layout::kNHWC;
    a.clusterOk = clusterLayout(p);
}

template <typename T>
cudaError_t forwardImpl(WTConvParams const& p, cudaStream_t stream)
{
    SmallArgs sa;
    if (useSmallPath(p, &sa))
    {
        FixedPlanePlan fixed;
        if (fixedPlanePlan(p, &fixed))
        {
            return launchFixedPlane<T>(p, fixed, stream);
        }
        setPlaneIo(sa, p, sa.ho, sa.wo);
        sa.vecStore = p.layout == Layout::kNCHW && p.stride == 1 && p.width % 4 == 0
            && reinterpret_cast<uintptr_t>(p.output) % (4 * sizeof(T)) == 0;
        return launchSmall<T>(sa, stream);
    }
    TiledBuffers buf{};
    workspaceLayout(p, &buf);
    return p.layout == Layout::kNHWC ? tiledChannelsLast<T>(p, buf, stream) : tiledPipeline<T>(p, buf, stream);
}

// Steps 1-3 of the tiled path on p's planar tensors (x and y themselves for NCHW I/O; the workspace copies of one
// chunk for channels-last) for p.batch items, with the LL / D planes of `buf`.
template <typename T>
cudaError_t tiledPipeline(WTConvParams const& p, TiledBuffers const& buf, cudaStream_t stream)
{
    Grids const g = levelGrids(p);
    int64_t const planes = p.batch * p.channels;
    int const channels = static_cast<int>(p.channels);
    int const L = p.levels;
    float* const* ll = buf.ll;
    float* const* d = buf.d;

    // 1. pooling chain LL_1 .. LL_{L-1}
    for (int s = 0; s < L - 1;)
    {
        int const m = std::min(kPoolMaxLevels, L - 1 - s);
        PoolArgs pa{};
        pa.src = s == 0 ? p.input : static_cast<void const*>(ll[s]);
        for (int j = 0; j <= m; ++j)
        {
            pa.h[j] = static_cast<int32_t>(g.h[s + j]);
            pa.w[j] = static_cast<int32_t>(g.w[s + j]);
            if (j > 0)
            {
                pa.dst[j - 1] = ll[s + j];
            }
        }
        pa.planes = planes;
        pa.total = planes * g.h[s + m] * g.w[s + m];
        cudaError_t const e = s == 0 ? launchPool<T>(pa, m, stream) : launchPool<float>(pa, m, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
        s += m;
    }

    // 2. level passes, deepest first: D_{l-1} from LL_{l-1} and D_l
    for (int l = L; l >= 2; --l)
    {
        LevelArgs a = levelGeometry(planes, channels, g.h[l - 1], g.w[l - 1], p.kernelSize, 1);
        a.src = ll[l - 1];
        a.dIn = l < L ? d[l] : nullptr;
        a.out = d[l - 1];
        a.levelWeight = p.waveletWeight + static_cast<int64_t>(l - 1) * 4 * p.channels * p.kernelSize * p.kernelSize;
        a.vecStore = false;
        cudaError_t const e = launchLevel<float, float, false>(a, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
    }

    // 3. output pass
    LevelArgs a = levelGeometry(planes, channels, p.height, p.width, p.kernelSize, p.stride);
    a.src = p.input;
    a.dIn = L >= 2 ? d[1] : nullptr;
    a.out = p.output;
    a.baseWeight = p.baseWeight;
    a.baseBias = p.baseBias;
    a.levelWeight = p.waveletWeight;
    a.vecStore = p.layout == Layout::kNCHW && p.stride == 1 && a.wo % 4 == 0
        && reinterpret_cast<uintptr_t>(p.output) % (4 * sizeof(T)) == 0;
    return launchLevel<T, T, true>(a, stream);
}

// Channels-last I/O on the tiled path, chunk by chunk (buf.chunkItems batch items at a time): x -> planar copy
// (transpose), the planar pipeline from that copy into a planar y, planar y -> channels-last y (transpose).
// The copies are coalesced in both layouts; reading and writing channels-last directly, a block that owns one
// channel would use 2 or 4 bytes of each 32-byte sector it touches.
template <typename T>
cudaError_t tiledChannelsLast(WTConvParams const& p, TiledBuffers const& buf, cudaStream_t stream)
{
    int64_t const pitch = pixelPitch(p);
    int64_t const inPixels = p.height * p.width;
    int64_t const outPixels = outputSize(p.height, p.stride) * outputSize(p.width, p.stride);
    for (int64_t b0 = 0; b0 < p.batch; b0 += buf.chunkItems)
    {
        int64_t const items = std::min(buf.chunkItems, p.batch - b0);
        TransposeArgs in = transposeGeometry(items, p.channels, inPixels, pitch);
        in.src = static_cast<T const*>(p.input) + b0 * inPixels * pitch;
        in.dst = buf.xPlanar;
        cudaError_t e = launchTranspose<T>(in, TransposeDirection::kToPlanar, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
        WTConvParams q = p;
        q.batch = items;
        q.layout = Layout::kNCHW;
        q.channelPitch = 0;
        q.input = buf.xPlanar;
        q.output = buf.yPlanar;
        e = tiledPipeline<T>(q, buf, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
        TransposeArgs out = transposeGeometry(items, p.channels, outPixels, pitch);
        out.src = buf.yPlanar;
        out.dst = static_cast<T*>(p.output) + b0 * outPixels * pitch;
        e = launchTranspose<T>(out, TransposeDirection::kToChannelsLast, stream);
        if (e != cudaSuccess)
        {
            return e;
        }
    }
    return cudaSuccess;
}

// Padded channels-last output (TensorRT's kHWC8 / kHWC16 with C not a multiple of 8 / 16): its padding channels
// are written as zeros. TensorRT documents the layout but not the padding's value, and a consumer reading whole
// 8- or 16-channel vectors would otherwise multiply whatever the buffer held (0 x a stale NaN is NaN). One
// stream-ordered 2-D memset: rows are the output pixels, (pitch - C) elements wide, pitch elements apart.
cudaError_t zeroOutputPadding(WTConvParams const& p, cudaStream_t stream)
{
    int64_t const pitch = pixelPitch(p);
    if (p.layout != Layout::kNHWC || pitch == p.channels)
    {
        return cudaSuccess;
    }
    size_t const e = dtypeBytes(p.dtype);
    size_t const rowBytes = static_cast<size_t>(pitch) * e;
    size_t const padBytes = static_cast<size_t>(pitch - p.channels) * e;
    int64_t const pixels = p.batch * outputSize(p.height, p.stride) * outputSize(p.width, p.stride);
    constexpr int64_t kRowsPerCall = int64_t{1} << 30;
    char* const first = static_cast<char*>(p.output) + static_cast<size_t>(p.channels) * e;
    for (int64_t row = 0; row < pixels; row += kRowsPerCall)
    {
        size_t const rows = static_cast<size_t>(std::min(kRowsPerCall, pixels - row));
        cudaError_t const e2 = cudaMemset2DAsync(
            first + static_cast<size_t>(row) * rowBytes, rowBytes, 0, padBytes, rows, stream);
        if (e2 != cudaSuccess)
        {
            return e2;
        }
    }
    return cudaSuccess;
}

// The largest dynamic shared memory one block of p's launches uses (the whole-plane launch, or the tiled path's
// level and output passes; the transposes and the pooling use static shared memory).
size_t sharedBytesPerBlock(WTConvParams const& p)
{
    SmallArgs sa;
    if (useSmallPath(p, &sa))
    {
        FixedPlanePlan fixed;
        if (fixedPlanePlan(p, &fixed))
        {
            return fixed.args.sharedBytes;
        }
        return static_cast<size_t>(sa.totalFloats) * sizeof(float);
    }
    // Channels-last runs the planar passes on chunks of the batch; a smaller batch never needs more per block.
    Grids const g = levelGrids(p);
    int64_t const planes = p.batch * p.channels;
    int const channels = static_cast<int>(p.channels);
    LevelArgs const out = levelGeometry(planes, channels, p.height, p.width, p.kernelSize, p.stride);
    size_t most = static_cast<size_t>(out.planesPerBlock) * out.perPlane * sizeof(float);
    for (int l = p.levels; l >= 2; --l)
    {
        LevelArgs const a = levelGeometry(planes, channels, g.h[l - 1], g.w[l - 1], p.kernelSize, 1);
        most = std::max(most, static_cast<size_t>(a.planesPerBlock) * a.perPlane * sizeof(float));
    }
    return most;
}

} // namespace
} // namespace detail

void setSharedMemoryLimitForTesting(size_t bytes)
{
    detail::sharedLimitForTesting().store(bytes, std::memory_order_relaxed);
}

cudaError_t wtconvLaunchInfo(WTConvParams const& params, LaunchInfo* info)
{
    cudaError_t const e = checkShape(params, nullptr, 0);
    if (e != cudaSuccess || info == nullptr)
    {
        return e != cudaSuccess ? e : cudaErrorInvalidValue;
    }
    info->wholePlane = detail::useSmallPath(params);
    info->sharedBytesPerBlock = detail::sharedBytesPerBlock(params);
    info->workspaceBytes = wtconvWorkspaceBytes(params);
    return cudaSuccess;
}

cudaError_t checkShape(WTConvParams const& p, char* message, size_t messageBytes)
{
    using detail::writeMessage;
    if (p.dtype != DataType::kFLOAT32 && p.dtype != DataType::kFLOAT16 && p.dtype != DataType::kBFLOAT16)
    {
        writeMessage(message, messageBytes, "wtconv: dtype must be kFLOAT32 (0), kFLOAT16 (1) or kBFLOAT16 (2), got %d",
            static_cast<int>(p.dtype));
        return cudaErrorInvalidValue;
    }
    struct
    {
        char const* name;
        int64_t value;
    } const sizes[] = {{"batch", p.batch}, {"channels", p.channels}, {"height", p.height}, {"width", p.width}};
    for (auto const& s : sizes)
    {
        if (s.value < 1 || s.value > detail::kMaxDim)
        {
            writeMessage(message, messageBytes, "wtconv: %s must be in 1..%lld, got %lld", s.name,
                static_cast<long long>(detail::kMaxDim), static_cast<long long>(s.value));
            return cudaErrorInvalidValue;
        }
    }
    if (p.channels > INT32_MAX / (4 * kMaxKernelSize * kMaxKernelSize))
    {
        writeMessage(message, messageBytes, "wtconv: channels must be <= %d, got %lld",
            INT32_MAX / (4 * kMaxKernelSize * kMaxKernelSize), static_cast<long long>(p.channels));
        return cudaErrorInvalidValue;
    }
    if (p.kernelSize < 1 || p.kernelSize > kMaxKernelSize || p.kernelSize % 2 == 0)
    {
        writeMessage(
            message, messageBytes, "wtconv: kernelSize must be odd and in 1..%d, got %d", kMaxKernelSize, p.kernelSize);
        return cudaErrorInvalidValue;
    }
    if (p.levels < 1 || p.levels > kMaxLevels)
    {
        writeMessage(message, messageBytes, "wtconv: levels must be in 1..%d, got %d", kMaxLevels, p.levels);
        return cudaErrorInvalidValue;
    }
    if (p.stride < 1)
    {
        writeMessage(message, messageBytes, "wtconv: stride must be >= 1, got %d", p.stride);
        return cudaErrorInvalidValue;
    }
    if (p.layout != Layout::kNCHW && p.layout != Layout::kNHWC)
    {
        writeMessage(
            message, messageBytes, "wtconv: layout must be kNCHW (0) or kNHWC (1), got %d", static_cast<int>(p.layout));
        return cudaErrorInvalidValue;
    }
    if (p.layout == Layout::kNCHW && p.channelPitch != 0 && p.channelPitch != p.channels)
    {
        writeMessage(message, messageBytes,
            "wtconv: channelPitch applies to kNHWC only; for kNCHW it must be 0 (or channels = %lld), got %lld",
            static_cast<long long>(p.channels), static_cast<long long>(p.channelPitch));
        return cudaErrorInvalidValue;
    }
    if (p.layout == Layout::kNHWC && p.channelPitch != 0
        && (p.channelPitch < p.channels || p.channelPitch > detail::kMaxDim))
    {
        writeMessage(message, messageBytes,
            "wtconv: channelPitch must be 0 (meaning channels) or in %lld..%lld (channels..limit) for kNHWC, got %lld",
            static_cast<long long>(p.channels), static_cast<long long>(detail::kMaxDim),
            static_cast<long long>(p.channelPitch));
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

size_t wtconvWorkspaceBytes(WTConvParams const& params)
{
    if (checkShape(params, nullptr, 0) != cudaSuccess)
    {
        return 0;
    }
    WTConvParams p = params;
    p.workspace = nullptr;
    return detail::workspaceLayout(p, nullptr);
}

cudaError_t wtconvForward(WTConvParams const& p, cudaStream_t stream, char* message, size_t messageBytes)
{
    using detail::writeMessage;
    cudaError_t const e = checkShape(p, message, messageBytes);
    if (e != cudaSuccess)
    {
        return e;
    }
    struct
    {
        char const* name;
        void const* ptr;
    } const pointers[] = {{"input", p.input}, {"output", p.output}, {"baseWeight", p.baseWeight},
        {"baseBias", p.baseBias}, {"waveletWeight", p.waveletWeight}};
    for (auto const& q : pointers)
    {
        if (q.ptr == nullptr)
        {
            writeMessage(message, messageBytes, "wtconv: %s must be a device pointer, got nullptr", q.name);
            return cudaErrorInvalidValue;
        }
    }
    size_t const need = wtconvWorkspaceBytes(p);
    if (need > 0 && p.workspace == nullptr)
    {
        writeMessage(
            message, messageBytes, "wtconv: workspace must be a device pointer to %zu bytes, got nullptr", need);
        return cudaErrorInvalidValue;
    }
    if (p.workspaceBytes < need)
    {
        writeMessage(message, messageBytes,
            "wtconv: workspaceBytes must be >= wtconvWorkspaceBytes(params) = %zu, got %zu", need, p.workspaceBytes);
        return cudaErrorInvalidValue;
    }
    if (need > 0 && reinterpret_cast<uintptr_t>(p.workspace) % detail::kAlign != 0)
    {
        writeMessage(message, messageBytes, "wtconv: workspace must be %zu-byte aligned", detail::kAlign);
        return cudaErrorInvalidValue;
    }
    cudaError_t launch = cudaSuccess;
    switch (p.dtype)
    {
    case DataType::kFLOAT32: launch = detail::forwardImpl<float>(p, stream); break;
    case DataType::kFLOAT16: launch = detail::forwardImpl<__half>(p, stream); break;
    case DataType::kBFLOAT16: launch = detail::forwardImpl<__nv_bfloat16>(p, stream); break;
    }
    if (launch == cudaSuccess)
    {
        launch = detail::zeroOutputPadding(p, stream);
    }
    if (launch != cudaSuccess)
    {
        writeMessage(message, messageBytes, "wtconv: kernel launch failed: %s", cudaGetErrorString(launch));
    }
    return launch;
}

} // namespace wtconv
