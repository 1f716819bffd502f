// wtconvCapi.cpp — a small extern "C" API over wtconvKernel.h for ctypes (tests, benchmarks, the PyTorch
// custom operator in wtconv_export/cuda_kernels.py). Return values are cudaError_t codes (0 = success);
// messages go into the caller's buffer. No exception crosses this boundary.
#include "wtconvKernel.h"

#include <cstdio>

namespace
{
wtconv::WTConvParams makeParams(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
                                int32_t kernelSize, int32_t levels, int32_t stride)
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
    return p;
}
} // namespace

extern "C"
{

// Workspace bytes for these sizes (0 when none is needed or the sizes are invalid; see wtconv_check_shape).
size_t wtconv_workspace_bytes(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
                              int32_t kernelSize, int32_t levels, int32_t stride)
{
    return wtconv::wtconvWorkspaceBytes(makeParams(dtype, batch, channels, height, width, kernelSize, levels, stride));
}

int wtconv_check_shape(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width,
                       int32_t kernelSize, int32_t levels, int32_t stride, char* message, size_t messageBytes)
{
    return static_cast<int>(wtconv::checkShape(
        makeParams(dtype, batch, channels, height, width, kernelSize, levels, stride), message, messageBytes));
}

// y = fused WTConv(x) on `stream` (a cudaStream_t; nullptr is the legacy default stream).
int wtconv_forward(int32_t dtype, int64_t batch, int64_t channels, int64_t height, int64_t width, int32_t kernelSize,
                   int32_t levels, int32_t stride, void const* input, void* output, float const* baseWeight,
                   float const* baseBias, float const* waveletWeight, void* workspace, size_t workspaceBytes,
                   void* stream, char* message, size_t messageBytes)
{
    wtconv::WTConvParams p = makeParams(dtype, batch, channels, height, width, kernelSize, levels, stride);
    p.input = input;
    p.output = output;
    p.baseWeight = baseWeight;
    p.baseBias = baseBias;
    p.waveletWeight = waveletWeight;
    p.workspace = workspace;
    p.workspaceBytes = workspaceBytes;
    return static_cast<int>(wtconv::wtconvForward(p, static_cast<cudaStream_t>(stream), message, messageBytes));
}

char const* wtconv_error_name(int code)
{
    return cudaGetErrorName(static_cast<cudaError_t>(code));
}

} // extern "C"
