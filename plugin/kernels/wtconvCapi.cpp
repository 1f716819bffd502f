// wtconvCapi.cpp — a small extern "C" API over wtconvKernel.h for ctypes (tests, benchmarks, the PyTorch
// custom operator in wtconv_torch/cuda_kernels.py). Return values are cudaError_t codes (0 = success);
// messages go into the caller's buffer. No exception crosses this boundary.
//
// Two ways to launch: wtconv_forward takes every argument on each call; a plan (wtconv_plan_create) holds
// the sizes, layout and weight pointers, validated once, so that a call from Python passes only the
// tensors and the stream (ctypes converts each argument on every call: fewer arguments, less overhead).
#include "wtconvKernel.h"

#include <cstdio>
#include <new>

namespace
{
wtconv::WTConvParams makeParams(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
    int32_t kernelSize, int32_t levels, int32_t stride, int32_t layout, int64_t channelPitch)
{
    wtconv::WTConvParams p;
    p.dtype = static_cast<wtconv::DataType>(dtype);
    p.batch = batch;
    p.channels = channels;
    p.height = height;
    p.width = width;
    p.kernelSize = kernelSize;
    p.levels = levels;
    p.stride = stride;
    p.layout = static_cast<wtconv::Layout>(layout);
    p.channelPitch = channelPitch;
    return p;
}
} // namespace

extern "C"
{
    // Workspace bytes for these sizes (0 when none is needed or the sizes are invalid; see wtconv_check_shape).
    // layout: 0 = NCHW, 1 = NHWC (channels-last); channelPitch: NHWC elements between pixels (0 = channels).
    size_t wtconv_workspace_bytes(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
        int32_t kernelSize, int32_t levels, int32_t stride, int32_t layout, int64_t channelPitch)
    {
        return wtconv::wtconvWorkspaceBytes(
            makeParams(dtype, batch, channels, height, width, kernelSize, levels, stride, layout, channelPitch));
    }

    int wtconv_check_shape(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
        int32_t kernelSize, int32_t levels, int32_t stride, int32_t layout, int64_t channelPitch, char* message,
        size_t messageBytes)
    {
        return static_cast<int>(wtconv::checkShape(
            makeParams(dtype, batch, channels, height, width, kernelSize, levels, stride, layout, channelPitch),
            message, messageBytes));
    }

    // y = fused WTConv(x) on `stream` (a cudaStream_t; nullptr is the legacy default stream).
    int wtconv_forward(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
        int32_t kernelSize, int32_t levels, int32_t stride, int32_t layout, int64_t channelPitch, void const* input,
        void* output, float const* baseWeight, float const* baseBias, float const* waveletWeight, void* workspace,
        size_t workspaceBytes, void* stream, char* message, size_t messageBytes)
    {
        wtconv::WTConvParams p = makeParams(
            dtype, batch, channels, height, width, kernelSize, levels, stride, layout, channelPitch);
        p.input = input;
        p.output = output;
        p.baseWeight = baseWeight;
        p.baseBias = baseBias;
        p.waveletWeight = waveletWeight;
        p.workspace = workspace;
        p.workspaceBytes = workspaceBytes;
        return static_cast<int>(wtconv::wtconvForward(p, static_cast<cudaStream_t>(stream), message, messageBytes));
    }

    // A plan: sizes, layout and weights checked now; nullptr (and the reason in message) when they are invalid.
    // Free it with wtconv_plan_destroy.
    void* wtconv_plan_create(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
        int32_t kernelSize, int32_t levels, int32_t stride, int32_t layout, int64_t channelPitch,
        float const* baseWeight, float const* baseBias, float const* waveletWeight, char* message, size_t messageBytes)
    {
        wtconv::WTConvParams p = makeParams(
            dtype, batch, channels, height, width, kernelSize, levels, stride, layout, channelPitch);
        if (wtconv::checkShape(p, message, messageBytes) != cudaSuccess)
        {
            return nullptr;
        }
        p.baseWeight = baseWeight;
        p.baseBias = baseBias;
        p.waveletWeight = waveletWeight;
        return new (std::nothrow) wtconv::WTConvParams(p);
    }

    size_t wtconv_plan_workspace_bytes(void const* plan)
    {
        return plan == nullptr ? 0 : wtconv::wtconvWorkspaceBytes(*static_cast<wtconv::WTConvParams const*>(plan));
    }

    int wtconv_plan_forward(void const* plan, void const* input, void* output, void* workspace, size_t workspaceBytes,
        void* stream, char* message, size_t messageBytes)
    {
        if (plan == nullptr)
        {
            if (message != nullptr && messageBytes > 0)
            {
                std::snprintf(message, messageBytes, "wtconv: plan must not be null");
            }
            return static_cast<int>(cudaErrorInvalidValue);
        }
        wtconv::WTConvParams p = *static_cast<wtconv::WTConvParams const*>(plan);
        p.input = input;
        p.output = output;
        p.workspace = workspace;
        p.workspaceBytes = workspaceBytes;
        return static_cast<int>(wtconv::wtconvForward(p, static_cast<cudaStream_t>(stream), message, messageBytes));
    }

    void wtconv_plan_destroy(void* plan)
    {
        delete static_cast<wtconv::WTConvParams*>(plan);
    }

    // How a launch with these sizes runs: *wholePlane 1 (one workspace-free launch) or 0 (tiled path), and the
    // most dynamic shared memory one of its blocks uses. Returns 0, or cudaErrorInvalidValue for invalid sizes.
    int wtconv_launch_info(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
        int32_t kernelSize, int32_t levels, int32_t stride, int32_t layout, int64_t channelPitch, int32_t* wholePlane,
        size_t* sharedBytesPerBlock)
    {
        wtconv::LaunchInfo info;
        cudaError_t const e = wtconv::wtconvLaunchInfo(
            makeParams(dtype, batch, channels, height, width, kernelSize, levels, stride, layout, channelPitch), &info);
        if (e == cudaSuccess && wholePlane != nullptr && sharedBytesPerBlock != nullptr)
        {
            *wholePlane = info.wholePlane ? 1 : 0;
            *sharedBytesPerBlock = info.sharedBytesPerBlock;
        }
        return static_cast<int>(e);
    }

    // Test hook (wtconvKernel.h): launches behave as on a GPU with this opt-in shared memory per block (0: off).
    void wtconv_set_shared_memory_limit_for_testing(size_t bytes)
    {
        wtconv::setSharedMemoryLimitForTesting(bytes);
    }

    char const* wtconv_error_name(int code)
    {
        return cudaGetErrorName(static_cast<cudaError_t>(code));
    }

} // extern "C"
