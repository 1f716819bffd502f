// wtconvKernel.h — the fused WTConv inference kernels' interface (CUDA runtime types only).
//
// Operator (docs/design.md, "The operator", fused formulation), input x (B, C, H, W) in `layout`:
//   y = W~b * x + b~b + R,   R(y,x) = sum_{l=1..L} 2^-l [F_l^LL + s_y F_l^LH + s_x F_l^HL + s_y s_x F_l^HH](y>>l, x>>l)
// evaluated at the kept pixels (s*i, s*j) only; output (B, C, ceil(H/s), ceil(W/s)) in the same layout.
// Weights are the folded fp32 weights of wtconv_torch/folding.py (FoldedWTConv):
//   baseWeight (C, k, k), baseBias (C), waveletWeight (L, 4C, k, k) with channel 4c+s = subband s of c.
//
// Launches never allocate, synchronise or touch the default stream: they run inside TensorRT's
// enqueue and inside CUDA graph capture. Deep-level coefficients live in the caller's workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace wtconv
{

enum class DataType : int32_t
{
    kFLOAT32 = 0,
    kFLOAT16 = 1,
    kBFLOAT16 = 2,
};

// Memory layout of input and output (the same for both). kNHWC is channels-last: element (b, c, h, w) at
// ((b * H + h) * W + w) * channelPitch + c, where channelPitch >= C lets padded channels-last formats
// (TensorRT's kHWC8 / kHWC16 round C up to a multiple of 8 / 16) map directly; padding channels of the input are
// never read, those of the output are written as zeros.
enum class Layout : int32_t
{
    kNCHW = 0,
    kNHWC = 1,
};

constexpr int32_t kMaxKernelSize = 15; // odd k in 1..15
constexpr int32_t kMaxLevels = 8;      // wt_levels in 1..8

struct WTConvParams
{
    DataType dtype{DataType::kFLOAT32}; // dtype of input and output; accumulation is fp32
    int64_t batch{0};                   // B >= 1
    int64_t channels{0};                // C >= 1
    int64_t height{0};                  // H >= 1 (input)
    int64_t width{0};                   // W >= 1 (input)
    int32_t kernelSize{0};              // odd, 1..kMaxKernelSize
    int32_t levels{0};                  // 1..kMaxLevels
    int32_t stride{1};                  // >= 1
    Layout layout{Layout::kNCHW};       // layout of input and output
    int64_t channelPitch{0};            // kNHWC only: elements between neighbouring pixels, >= C; 0 means C

    void const* input{nullptr};          // (B, C, H, W), dtype
    void* output{nullptr};               // (B, C, ceil(H/stride), ceil(W/stride)), dtype
    float const* baseWeight{nullptr};    // (C, k, k)
    float const* baseBias{nullptr};      // (C)
    float const* waveletWeight{nullptr}; // (levels, 4C, k, k)
    void* workspace{nullptr};            // >= wtconvWorkspaceBytes(*this) bytes, 256-byte aligned
    size_t workspaceBytes{0};
};

// Channels-last: the elements from one pixel to the next, channelPitch or, where it is 0, C.
inline int64_t pixelPitch(WTConvParams const& p)
{
    return p.channelPitch != 0 ? p.channelPitch : p.channels;
}

inline int64_t outputSize(int64_t inputSize, int32_t stride)
{
    return (inputSize + stride - 1) / stride;
}

// Bytes of device workspace a launch with these sizes needs (only the size fields are read).
// Returns 0 when the sizes are invalid (checkShape explains why).
size_t wtconvWorkspaceBytes(WTConvParams const& params);

// Checks sizes, k, levels, stride, dtype, layout and channelPitch (not pointers). On failure returns cudaErrorInvalidValue
// and writes a message naming the parameter, what was expected and what was given into
// message[0..messageBytes) when message is not null.
cudaError_t checkShape(WTConvParams const& params, char* message, size_t messageBytes);

// Checks everything checkShape checks, plus non-null pointers and workspace size; then launches on
// `stream`. Returns cudaSuccess, the validation error (nothing launched) or the launch error.
cudaError_t wtconvForward(
    WTConvParams const& params, cudaStream_t stream, char* message = nullptr, size_t messageBytes = 0);

// How a launch with these sizes runs (only the size fields are read): for tests, benchmarks and reports.
struct LaunchInfo
{
    bool wholePlane{false};        // one workspace-free launch (planes up to 64 x 64), else the tiled path
    size_t sharedBytesPerBlock{0}; // the most dynamic shared memory one block uses: <= 99 KB, except a
                                   // fixed-geometry plan that the current device's limit holds (wtconvFixedPlane.cu)
    size_t workspaceBytes{0};      // wtconvWorkspaceBytes
};

// Fills *info; cudaErrorInvalidValue (nothing filled) when the sizes are invalid or info is null.
cudaError_t wtconvLaunchInfo(WTConvParams const& params, LaunchInfo* info);

// Test hook: launches behave as on a GPU whose opt-in shared memory per block is min(bytes, the device's own)
// (0: the device's own). With 101,376 an H200 fails every launch an RTX card (compute capability 8.6, 8.9,
// 12.x) would fail. Process-wide; not for production use.
void setSharedMemoryLimitForTesting(size_t bytes);

} // namespace wtconv
