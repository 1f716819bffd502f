// wtconvFixedPlane.cu — which shapes run on a fixed-geometry whole-plane kernel, and how (docs/design.md §3.2).
// Host code only: the kernels are wtconvTinyPlane.cuh and wtconvGroupPlane.cuh, launched from the per-dtype
// translation units wtconvFixedPlane_{f32,f16,bf16}.cu.
#include "wtconvFixedPlane.h"
#include "wtconvFixedPlaneLaunch.cuh"

#include <algorithm>

// Which shapes the fixed-geometry kernels take (docs/design.md §3.2):
//   0  none (every shape on the run-time-geometry kernel 1);
//   1  every shape they were compiled for: the build the kernel tests and the A/B run them in;
//   2  (default) only where they measured faster than kernel 1 (measuredFaster below).
#ifndef WTCONV_FIXED_PLANES
#define WTCONV_FIXED_PLANES 2
#endif

namespace wtconv
{
namespace detail
{
namespace
{

// A block aims at this much shared memory at most (a plan must fit kPortableSharedBytes on every GPU we build
// for), and the grid at this many blocks (two per SM of a 132-SM GPU) before a block takes more planes.
constexpr size_t kFixedSharedTarget = 80 * 1024;
constexpr int64_t kFixedTargetBlocks = 264;
constexpr int kTinyMaxBlocks = 512;
// A group-kernel block takes up to kGroupMaxItems batch items in turn (its weights and halos set up once), as long
// as the grid keeps kGroupLoopBlocks blocks: about two waves of 4 blocks per SM on a 132-SM GPU, so that the last
// wave's idle SMs stay a small share. WTCONV_GROUP_ITEMS=1 builds the kernel of one item per block, for the A/B.
// 56 x 56 takes one item per block: its weights are a small share of a plane's work (0.6 of 4.9 warp instructions
// per pixel), and looping measured 1.00-1.07x the time of one item per block (docs/bench/ab_group_items.md).
#ifndef WTCONV_GROUP_ITEMS
#define WTCONV_GROUP_ITEMS 8
#endif
constexpr int64_t kGroupMaxItems = WTCONV_GROUP_ITEMS;
constexpr int64_t kGroupLoopBlocks = 1024;

size_t elementBytes(DataType t)
{
    return t == DataType::kFLOAT32 ? 4 : 2;
}

template <class G>
bool matches(WTConvParams const& p)
{
    return p.kernelSize == G::K && p.height == G::H && p.width == G::W && p.levels == G::L;
}

template <typename TIn, bool NHWC>
size_t tinyBytes(int warps)
{
    return tinySharedBytes<TIn, Tiny7, NHWC>(warps);
}

template <typename TIn, class G, bool NHWC>
size_t groupBytes(int ng)
{
    return groupSharedBytes<TIn, G, NHWC>(ng);
}

// Shared memory of a group-kernel block of ng planes for p's dtype and layout.
template <class G>
size_t groupBytesFor(WTConvParams const& p, int ng)
{
    bool const nhwc = p.layout == Layout::kNHWC;
    switch (p.dtype)
    {
    case DataType::kFLOAT32: return nhwc ? groupBytes<float, G, true>(ng) : groupBytes<float, G, false>(ng);
    case DataType::kFLOAT16: return nhwc ? groupBytes<__half, G, true>(ng) : groupBytes<__half, G, false>(ng);
    default: return nhwc ? groupBytes<__nv_bfloat16, G, true>(ng) : groupBytes<__nv_bfloat16, G, false>(ng);
    }
}

// The group kernel's plan for geometry G: the block's plane count ng (its consecutive channels of one batch item).
// ng must divide C, make whole warps, and allow the block's cooperative accesses: channels-last, ng channels of a
// pixel are 8 or 16 bytes (or a multiple of 16); NCHW, the chunk of ng planes is a multiple of 16 bytes and every
// chunk starts at a 16-byte boundary. Among the ng that qualify and fit kFixedSharedTarget, the largest that
// still gives kFixedTargetBlocks blocks, else the smallest. Then the rows of batch items the grid takes in turn.
// sharedLimit: kFixedSharedTarget, or for Group56Wide the running device's opt-in limit (groupPlanWide).
template <class G>
bool groupPlan(WTConvParams const& p, FixedPlaneArgs& a, size_t sharedLimit = kFixedSharedTarget)
{
    bool const nhwc = p.layout == Layout::kNHWC;
    int64_t const e = static_cast<int64_t>(elementBytes(p.dtype));
    int64_t const pitch = pixelPitch(p);
    int chosen = 0;
    for (int ng : {16, 8, 4, 2, 1})
    {
        bool ok = p.channels % ng == 0 && (ng * G::LP) % 32 == 0 && ng * G::LP <= G::kMaxThreads
            && (G::LP <= 32 || ng <= 15) && groupBytesFor<G>(p, ng) <= sharedLimit;
        if (nhwc)
        {
            int64_t const bytes = ng * e;
            int64_t const vec = bytes % 16 == 0 ? 16 : 8;
            ok = ok && bytes % 8 == 0 && (pitch * e) % vec == 0;
        }
        else
        {
            ok = ok && (ng * G::HW * e) % 16 == 0 && (p.channels * G::HW * e) % 16 == 0;
        }
        if (!ok)
        {
            continue;
        }
        chosen = ng;
        if (p.batch * (p.channels / ng) >= kFixedTargetBlocks)
        {
            break;
        }
    }
    if (chosen == 0)
    {
        return false;
    }
    int64_t const channelGroups = p.channels / chosen;
    int64_t const maxItems = G::HW >= 56 * 56 ? 1 : kGroupMaxItems;
    int64_t const items = std::clamp<int64_t>(p.batch * channelGroups / kGroupLoopBlocks, 1, maxItems);
    int64_t const rows = std::min<int64_t>((p.batch + items - 1) / items, 65535);
    a.planesPerBlock = chosen;
    a.threads = chosen * G::LP;
    a.sharedBytes = groupBytesFor<G>(p, chosen);
    a.grid = dim3(static_cast<unsigned>(channelGroups), static_cast<unsigned>(rows));
    return channelGroups < (int64_t{1} << 31);
}

// Channels-last 56 x 56 (Group56Wide): four 16-bit channels per block, 218 KB of shared memory, taken only where the
// running device's opt-in limit per block holds it (227 KB on sm_90; 99-163 KB on the other GPUs we build for, which
// keep kernel 1). Unlike the plans above this reads the device, as the tiny kernel's dispatch reads its SM count; it
// changes no workspace (every whole-plane launch has none), so an engine built on another GPU still runs.
bool groupPlanWide(WTConvParams const& p, FixedPlaneArgs& a)
{
    int device = 0;
    size_t limit = 0;
    if (p.dtype == DataType::kFLOAT32 || cudaGetDevice(&device) != cudaSuccess
        || optInSharedBytes(device, limit) != cudaSuccess)
    {
        return false;
    }
    return groupPlan<Group56Wide>(p, a, limit) && a.planesPerBlock == 4;
}

// The tiny kernel's plan: 32 channels per warp (C a multiple of 32), up to kTinyMaxWarps batch items per block.
bool tinyPlan(WTConvParams const& p, FixedPlaneArgs& a)
{
    int64_t const e = static_cast<int64_t>(elementBytes(p.dtype));
    if (p.channels % 32 != 0 || (p.layout == Layout::kNCHW && (p.channels * Tiny7::HW * e) % 16 != 0))
    {
        return false;
    }
    int const warps = static_cast<int>(std::min<int64_t>(kTinyMaxWarps, p.batch));
    int const channelGroups = static_cast<int>(p.channels / 32);
    int64_t const itemGroups = (p.batch + warps - 1) / warps;
    int64_t const rows = std::max<int64_t>(1, std::min<int64_t>(itemGroups, kTinyMaxBlocks / channelGroups));
    bool const nhwc = p.layout == Layout::kNHWC;
    switch (p.dtype)
    {
    case DataType::kFLOAT32:
        a.sharedBytes = nhwc ? tinyBytes<float, true>(warps) : tinyBytes<float, false>(warps);
        break;
    case DataType::kFLOAT16:
        a.sharedBytes = nhwc ? tinyBytes<__half, true>(warps) : tinyBytes<__half, false>(warps);
        break;
    default:
        a.sharedBytes = nhwc ? tinyBytes<__nv_bfloat16, true>(warps) : tinyBytes<__nv_bfloat16, false>(warps);
        break;
    }
    a.threads = warps * 32;
    a.planesPerBlock = warps * 32;
    a.grid = dim3(static_cast<unsigned>(channelGroups), static_cast<unsigned>(rows));
    return a.sharedBytes <= kPortableSharedBytes && rows < 65536;
}

// The current device's multiprocessors, 0 when it cannot be read (then no dispatch that needs it is taken).
int64_t smCount()
{
    int device = 0;
    int multiprocessors = 0;
    if (cudaGetDevice(&device) != cudaSuccess
        || cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    {
        return 0;
    }
    return multiprocessors;
}

// The measured dispatch (WTCONV_FIXED_PLANES 2), from A/Bs against kernel 1 in one process on an NVIDIA H100
// (fp32 / fp16 / bf16, both layouts; docs/bench/ab_fixed_planes.md, then ab_group_items.md for the group kernel
// that takes several batch items per block, ab_fixed_dispatch.md for every kernel compiled beside this dispatch):
//   - 7 x 7: 0.16-0.34x kernel 1's time at B = 64 and 256, but 3.7-5.0x at B = 1: a lane computes a whole plane,
//     and with one warp on a multiprocessor nothing hides its latency. It is taken once the launch holds a full
//     block of kTinyMaxWarps warps per multiprocessor (B x C / 32 warps in all);
//   - 56 x 56 NCHW: 0.79-0.98x at every batch and dtype measured;
//   - 56 x 56 channels-last (four 16-bit channels per 218 KB block, where the device holds it): 0.60x against
//     kernel 1 without its cluster mode (C = 100, B = 128), but 1.00-1.04x against the cluster mode at B = 32-256
//     and 1.09-1.63x at B = 8 and 1 (docs/bench/ab_fixed_dispatch.md);
//   - 28 x 28 and 14 x 14 channels-last: 0.67-0.93x once a block takes two or more batch items (every dtype), and
//     at 28 x 28 in fp16 / bf16 already with one (0.92-0.95x); with one item the 14 x 14 kernel and the fp32 28 x 28
//     one were 1.09-1.24x, their weights loaded per plane;
//   - 28 x 28 and 14 x 14 NCHW, where kernel 1 shares a channel's weights between its planes too: 0.77-0.96x in fp16
//     and bf16 once a block takes three or more items; with two, 1.00-1.06x, and in fp32 1.02-1.05x.
bool measuredFaster(WTConvParams const& p, FixedPlanePlan const& plan)
{
    if (plan.tiny)
    {
        int64_t const sms = smCount();
        return sms > 0 && p.batch * (p.channels / 32) >= kTinyMaxWarps * sms;
    }
    if (p.height == 56 && p.layout == Layout::kNCHW)
    {
        return true;
    }
    if (p.height == 56)
    {
        // channels-last: only where kernel 1 has no cluster mode (clusterLayout; it then reads and writes each
        // channel's plane with a pitch of C elements) and the blocks fill the GPU
        int64_t const sms = smCount();
        return !clusterLayout(p) && sms > 0 && plan.args.grid.x * int64_t{plan.args.grid.y} >= sms;
    }
    int64_t const rows = plan.args.grid.y;
    int64_t const items = (p.batch + rows - 1) / rows; // the items the first blocks take
    bool const halfWidth = p.dtype != DataType::kFLOAT32;
    if (p.layout == Layout::kNHWC)
    {
        return items >= 2 || (p.height == 28 && halfWidth);
    }
    return halfWidth && items >= 3;
}

} // namespace

bool fixedPlanePlan(WTConvParams const& p, FixedPlanePlan* plan)
{
    if (!WTCONV_FIXED_PLANES || p.stride != 1)
    {
        return false;
    }
    // 16-byte aligned tensors only (the cooperative accesses); other pointers run on the run-time-geometry kernel
    if (reinterpret_cast<uintptr_t>(p.input) % 16 != 0 || reinterpret_cast<uintptr_t>(p.output) % 16 != 0)
    {
        return false;
    }
    FixedPlanePlan q;
    FixedPlaneArgs& a = q.args;
    a.src = p.input;
    a.out = p.output;
    a.baseWeight = p.baseWeight;
    a.baseBias = p.baseBias;
    a.waveletWeight = p.waveletWeight;
    a.batch = p.batch;
    a.channels = static_cast<int32_t>(p.channels);
    a.pitch = pixelPitch(p);
    bool ok = false;
    if (matches<Tiny7>(p))
    {
        q.tiny = true;
        ok = tinyPlan(p, a);
    }
    else if (matches<Group14>(p))
    {
        ok = groupPlan<Group14>(p, a);
    }
    else if (matches<Group28>(p))
    {
        ok = groupPlan<Group28>(p, a);
    }
    else if (matches<Group56>(p))
    {
        ok = p.layout == Layout::kNCHW ? groupPlan<Group56>(p, a) : groupPlanWide(p, a);
    }
    ok = ok && (WTCONV_FIXED_PLANES == 1 || measuredFaster(p, q));
    if (ok && plan != nullptr)
    {
        *plan = q;
    }
    return ok;
}

} // namespace detail
} // namespace wtconv
