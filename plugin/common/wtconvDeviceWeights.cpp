// wtconvDeviceWeights.cpp — see wtconvDeviceWeights.h.
#include "wtconvDeviceWeights.h"

#include <exception>

namespace wtconv
{

DeviceWeights::~DeviceWeights()
{
    if (memory == nullptr)
    {
        return;
    }
    // Freed on its own device. At process exit the CUDA context may already be gone: errors are only taken off
    // the last-error record, so that a later launch check does not report them.
    int32_t previous = 0;
    bool const switched = cudaGetDevice(&previous) == cudaSuccess && previous != device
        && cudaSetDevice(device) == cudaSuccess;
    if (cudaFree(memory) != cudaSuccess)
    {
        cudaGetLastError();
    }
    if (switched)
    {
        cudaSetDevice(previous);
    }
    cudaGetLastError();
}

std::string handledCudaFailure(char const* what, cudaError_t status)
{
    cudaGetLastError();
    return std::string(what) + ": " + cudaGetErrorString(status);
}

std::unique_ptr<DeviceWeights> uploadDeviceWeights(
    HostWeights const& host, std::string& error, cudaStream_t const* copyStream) noexcept
{
    try
    {
        int32_t device = -1;
        cudaError_t status = cudaGetDevice(&device);
        if (status != cudaSuccess)
        {
            error = handledCudaFailure("cudaGetDevice failed", status);
            return nullptr;
        }
        // One allocation, each array starting at a 256-byte boundary.
        auto roundUp = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
        size_t const baseWeightBytes = roundUp(host.baseWeight.size() * sizeof(float));
        size_t const baseBiasBytes = roundUp(host.baseBias.size() * sizeof(float));
        size_t const waveletBytes = host.waveletWeight.size() * sizeof(float);
        auto weights = std::make_unique<DeviceWeights>();
        status = cudaMalloc(&weights->memory, baseWeightBytes + baseBiasBytes + waveletBytes);
        if (status != cudaSuccess)
        {
            weights->memory = nullptr;
            error = handledCudaFailure("cudaMalloc of the weights failed", status);
            return nullptr;
        }
        weights->device = device;
        char* base = static_cast<char*>(weights->memory);
        weights->baseWeight = reinterpret_cast<float const*>(base);
        weights->baseBias = reinterpret_cast<float const*>(base + baseWeightBytes);
        weights->waveletWeight = reinterpret_cast<float const*>(base + baseWeightBytes + baseBiasBytes);
        cudaStream_t ownStream = nullptr;
        if (copyStream == nullptr)
        {
            status = cudaStreamCreateWithFlags(&ownStream, cudaStreamNonBlocking);
            if (status != cudaSuccess)
            {
                error = handledCudaFailure("creating the stream for the weight upload failed", status);
                return nullptr;
            }
        }
        cudaStream_t const stream = copyStream != nullptr ? *copyStream : ownStream;
        auto copy = [stream](void* dst, void const* src, size_t bytes)
        { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream); };
        status = copy(base, host.baseWeight.data(), host.baseWeight.size() * sizeof(float));
        if (status == cudaSuccess)
        {
            status = copy(base + baseWeightBytes, host.baseBias.data(), host.baseBias.size() * sizeof(float));
        }
        if (status == cudaSuccess)
        {
            status = copy(base + baseWeightBytes + baseBiasBytes, host.waveletWeight.data(), waveletBytes);
        }
        if (status == cudaSuccess)
        {
            // Complete before the weights are shared: another owner may launch on another stream.
            status = cudaStreamSynchronize(stream);
        }
        if (ownStream != nullptr)
        {
            cudaStreamDestroy(ownStream);
        }
        if (status != cudaSuccess)
        {
            error = handledCudaFailure("copying the weights to the device failed", status);
            return nullptr;
        }
        return weights;
    }
    catch (std::exception const& e)
    {
        error = e.what();
    }
    return nullptr;
}

bool ensureDeviceWeights(std::shared_ptr<DeviceWeights>& slot, HostWeights const& host, std::string& error,
    cudaStream_t const* copyStream, bool* noDevice) noexcept
{
    int32_t device = -1;
    cudaError_t const status = cudaGetDevice(&device);
    if (status != cudaSuccess)
    {
        error = handledCudaFailure("cudaGetDevice failed", status);
        if (noDevice != nullptr)
        {
            *noDevice = true;
        }
        return false;
    }
    if (slot != nullptr && slot->device == device)
    {
        return true;
    }
    std::unique_ptr<DeviceWeights> weights = uploadDeviceWeights(host, error, copyStream);
    if (weights == nullptr)
    {
        return false;
    }
    try
    {
        slot = std::move(weights);
        return true;
    }
    catch (std::exception const& e)
    {
        error = e.what();
    }
    return false;
}

bool weightsReadyForEnqueue(std::shared_ptr<DeviceWeights>& slot, HostWeights const& host, cudaStream_t stream,
    std::string& why, bool& uploaded) noexcept
{
    uploaded = false;
    try
    {
        int32_t device = -1;
        cudaError_t status = cudaGetDevice(&device);
        if (status != cudaSuccess)
        {
            why = handledCudaFailure("cudaGetDevice failed", status);
            return false;
        }
        if (slot != nullptr && slot->device == device)
        {
            return true;
        }
        // The fallback upload allocates and copies: never while the stream is being captured (the graph would
        // record it, or, in global capture mode, the capture would be invalidated).
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        status = cudaStreamIsCapturing(stream, &capture);
        if (status != cudaSuccess)
        {
            why = handledCudaFailure("cudaStreamIsCapturing failed", status);
            return false;
        }
        if (capture != cudaStreamCaptureStatusNone)
        {
            why = "the stream is being captured into a CUDA graph, where allocating and copying would break the "
                  "capture; run the execution context once outside the capture first";
            return false;
        }
        uploaded = ensureDeviceWeights(slot, host, why, &stream);
        return uploaded;
    }
    catch (std::exception const& e)
    {
        why = e.what();
    }
    return false;
}

} // namespace wtconv
