// wtconvFixedPlane.h — the whole-plane kernels whose geometry (k, L, plane size) is known at compile time
// (docs/design.md §3.2): their launch arguments and the dispatch entry points the launch plan calls. Host code
// only; the device code is wtconvTinyPlane.cuh (planes up to 8 x 8, a plane per lane) and wtconvGroupPlane.cuh
// (larger planes, a group of lanes per plane).
#pragma once

#include "wtconvKernel.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace wtconv
{
namespace detail
{

// What a fixed-geometry kernel needs at run time: pointers, the batch, the channels and the layout's pixel pitch.
// Every size of the plane and of the convolutions is a template argument of the kernel.
struct FixedPlaneArgs
{
    void const* src;            // x: (B, C, H, W) NCHW, or (B, H, W, pitch) channels-last, TIn
    void* out;                  // y: the same layout and sizes (stride 1), TIn
    float const* baseWeight;    // (C, k, k)
    float const* baseBias;      // (C)
    float const* waveletWeight; // (L, 4C, k, k)
    int64_t batch;              // B
    int32_t channels;           // C
    int64_t pitch;              // channels-last: elements between neighbouring pixels (>= C); NCHW: unused
    int32_t planesPerBlock;     // planes one block holds at once (its channels x its batch items)
    int32_t threads;            // block size
    size_t sharedBytes;         // dynamic shared memory per block
    dim3 grid;
};

// How a shape runs on a fixed-geometry kernel: filled by fixedPlanePlan when one takes the shape.
struct FixedPlanePlan
{
    bool tiny{false}; // wtconvTinyPlane.cuh, else wtconvGroupPlane.cuh
    FixedPlaneArgs args{};
};

// Whether a fixed-geometry kernel takes p (stride 1, a compiled (k, L, H, W), channel count, alignment and
// layout it supports; see the .cu file for the list); if so and plan is not null, its launch plan goes there.
// Depends on the sizes, the layout and the pointers' alignment only.
bool fixedPlanePlan(WTConvParams const& p, FixedPlanePlan* plan);

// Launches a plan of fixedPlanePlan (per-dtype specialisations in wtconvFixedPlane.cu).
template <typename TIn>
cudaError_t launchFixedPlane(WTConvParams const& p, FixedPlanePlan const& plan, cudaStream_t stream);

} // namespace detail
} // namespace wtconv
