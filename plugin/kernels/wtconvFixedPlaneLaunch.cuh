// wtconvFixedPlaneLaunch.cuh — the launchers of the fixed-geometry whole-plane kernels (wtconvTinyPlane.cuh,
// wtconvGroupPlane.cuh) and the list of geometries compiled in. Included by the per-dtype translation units
// wtconvFixedPlane_{f32,f16,bf16}.cu (they compile in parallel) and, for the list alone, by wtconvFixedPlane.cu.
#pragma once

#include "wtconvFixedPlane.h"
#include "wtconvGroupPlane.cuh"
#include "wtconvSharedMemory.cuh"
#include "wtconvTinyPlane.cuh"

namespace wtconv
{
namespace detail
{

// The geometries compiled in: WTConvNeXt's stage shapes (k = 5; the plane sizes of a 224 x 224 input and their
// levels). Lanes per plane and level-1 strip rows per shape: one level-1 strip per lane where that fills the
// group's warps (56 x 56: 196 strips on 224 lanes; 14 x 14: 16 on 16), 28 x 28 with 49 strips on 64 lanes. The
// last two arguments are the launch bounds (block size, blocks per SM at the planned shared memory).
using Tiny7 = TinyGeometry<5, 7, 7, 2>;
using Group14 = GroupGeometry<5, 14, 14, 3, 16, 2, 256, 4>;
using Group28 = GroupGeometry<5, 28, 28, 4, 64, 2, 256, 3>;
using Group56 = GroupGeometry<5, 56, 56, 5, 224, 2, 224, 4>;
// Channels-last 56 x 56: four channels' planes in one block (8-byte fp16 / bf16 vectors per pixel, no cluster
// exchange), 218 KB of shared memory: one block of 28 warps per SM, on GPUs whose opt-in limit holds it (sm_90).
using Group56Wide = GroupGeometry<5, 56, 56, 5, 224, 2, 896, 1>;

template <typename TIn, class G, bool NHWC>
cudaError_t launchTinyKernel(FixedPlaneArgs const& a, cudaStream_t stream)
{
    static SharedMemoryLimit limit;
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess)
    {
        e = limit.allow(tinyPlaneKernel<TIn, G, NHWC>, device, a.sharedBytes);
    }
    if (e != cudaSuccess)
    {
        return e;
    }
    tinyPlaneKernel<TIn, G, NHWC><<<a.grid, a.threads, a.sharedBytes, stream>>>(a);
    return cudaGetLastError();
}

template <typename TIn, class G, bool NHWC>
cudaError_t launchGroupKernel(FixedPlaneArgs const& a, cudaStream_t stream)
{
    static SharedMemoryLimit limit;
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess)
    {
        e = limit.allow(groupPlaneKernel<TIn, G, NHWC>, device, a.sharedBytes);
    }
    if (e != cudaSuccess)
    {
        return e;
    }
    groupPlaneKernel<TIn, G, NHWC><<<a.grid, a.threads, a.sharedBytes, stream>>>(a);
    return cudaGetLastError();
}

template <typename TIn, bool NHWC>
cudaError_t launchFixedLayout(WTConvParams const& p, FixedPlanePlan const& plan, cudaStream_t stream)
{
    FixedPlaneArgs const& a = plan.args;
    if (plan.tiny)
    {
        return launchTinyKernel<TIn, Tiny7, NHWC>(a, stream);
    }
    switch (p.height)
    {
    case 14: return launchGroupKernel<TIn, Group14, NHWC>(a, stream);
    case 28: return launchGroupKernel<TIn, Group28, NHWC>(a, stream);
    case 56:
        if constexpr (NHWC)
        {
            return launchGroupKernel<TIn, Group56Wide, NHWC>(a, stream);
        }
        else
        {
            return launchGroupKernel<TIn, Group56, NHWC>(a, stream);
        }
    default: return cudaErrorInvalidValue; // fixedPlanePlan takes no other size
    }
}

#define WTCONV_DEFINE_LAUNCH_FIXED(TIN)                                                                                \
    template <>                                                                                                        \
    cudaError_t launchFixedPlane<TIN>(WTConvParams const& p, FixedPlanePlan const& plan, cudaStream_t stream)          \
    {                                                                                                                  \
        return p.layout == Layout::kNHWC ? launchFixedLayout<TIN, true>(p, plan, stream)                               \
                                         : launchFixedLayout<TIN, false>(p, plan, stream);                             \
    }

} // namespace detail
} // namespace wtconv
