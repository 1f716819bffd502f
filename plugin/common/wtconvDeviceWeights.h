// wtconvDeviceWeights.h — a layer's folded weights on a CUDA device, for every runtime that launches the kernels
// (the TensorRT plugin and the ONNX Runtime CUDA op): the upload, and the TensorRT plugin's retry of it in enqueue.
//
// The host copies live in the runtime's own object (the plugin's fields, the ONNX Runtime node's LayerFields). The
// device copy is made outside any run that may be captured into a CUDA graph (plugin/README.md, "Run time";
// docs/onnx_runtime.md, "The CUDA kernel") and shared by whoever launches on that device.
//
// The CUDA runtime's headers only: no TensorRT or ONNX Runtime types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wtconv
{

// Folded weights on one device, read-only after the upload: base weight | bias | wavelet weight in one allocation,
// each at a 256-byte boundary. Freed on its own device when the last owner lets go.
struct DeviceWeights
{
    int32_t device{-1};
    void* memory{nullptr};
    float const* baseWeight{nullptr};
    float const* baseBias{nullptr};
    float const* waveletWeight{nullptr};

    DeviceWeights() = default;
    DeviceWeights(DeviceWeights const&) = delete;
    DeviceWeights& operator=(DeviceWeights const&) = delete;
    ~DeviceWeights();
};

// The host arrays an upload copies from (owned by the caller).
struct HostWeights
{
    std::vector<float> const& baseWeight;    // (C, k, k)
    std::vector<float> const& baseBias;      // (C)
    std::vector<float> const& waveletWeight; // (L, 4C, k, k)
};

// A CUDA failure the caller has dealt with, taken off the runtime's last-error record so that a later launch
// check does not report it again. Returns "what: reason".
std::string handledCudaFailure(char const* what, cudaError_t status);

// Copies the weights to the current device and waits for the copy. The copies go on *copyStream when given, else
// on a private non-blocking stream (never the legacy default stream, which would break another thread's capture).
// nullptr with the reason in `error` when CUDA fails.
std::unique_ptr<DeviceWeights> uploadDeviceWeights(
    HostWeights const& host, std::string& error, cudaStream_t const* copyStream = nullptr) noexcept;

// Makes `slot` hold the weights on the current device; nothing to do when it already does. `noDevice` (optional)
// is set when the process has no usable CUDA device at all. False with the reason in `error` otherwise.
bool ensureDeviceWeights(std::shared_ptr<DeviceWeights>& slot, HostWeights const& host, std::string& error,
    cudaStream_t const* copyStream = nullptr, bool* noDevice = nullptr) noexcept;

// The TensorRT plugin's enqueue check: true when `slot` holds the weights on the current device, after uploading
// them on `stream` if it did not and the stream is not being captured; otherwise false with the reason in `why`.
// `uploaded` is set when this call made the upload (the plugin warns: attachToContext should have).
bool weightsReadyForEnqueue(std::shared_ptr<DeviceWeights>& slot, HostWeights const& host, cudaStream_t stream,
    std::string& why, bool& uploaded) noexcept;

} // namespace wtconv
