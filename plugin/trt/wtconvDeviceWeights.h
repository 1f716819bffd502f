// wtconvDeviceWeights.h — the plugin's folded weights on the device: the upload and enqueue's retry of it.
//
// The host copies live in the plugin (they are what is serialized). The device copy is made outside enqueue
// (configurePlugin, attachToContext) and shared by the clones on that device; enqueue uploads only when that
// failed, and never while its stream is being captured (plugin/README.md, "Run time").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wtconv
{
namespace trt
{

// Folded weights on one device, read-only after the upload; freed with the last plugin clone holding them.
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

// The host arrays an upload copies from (owned by the plugin).
struct HostWeights
{
    std::vector<float> const& baseWeight;    // (C, k, k)
    std::vector<float> const& baseBias;      // (C)
    std::vector<float> const& waveletWeight; // (L, 4C, k, k)
};

// A CUDA failure the caller has dealt with, taken off the runtime's last-error record so that a later launch
// check does not report it again. Returns "what: reason".
std::string handledCudaFailure(char const* what, cudaError_t status);

// Makes `slot` hold the weights on the current device; nothing to do when it already does. The copies go on
// *copyStream when given, else on a private non-blocking stream that is then synchronised (never the legacy
// default stream, which would break another thread's capture). `noDevice` (optional) is set when the process
// has no usable CUDA device at all. False with the reason in `error` otherwise.
bool ensureDeviceWeights(std::shared_ptr<DeviceWeights>& slot, HostWeights const& host, std::string& error,
    cudaStream_t const* copyStream = nullptr, bool* noDevice = nullptr) noexcept;

// enqueue's check: true when `slot` holds the weights on the current device, after uploading them on `stream`
// if it did not and the stream is not being captured; otherwise false with the reason in `why`. `uploaded` is set
// when this call made the upload (the plugin warns: attachToContext should have).
bool weightsReadyForEnqueue(std::shared_ptr<DeviceWeights>& slot, HostWeights const& host, cudaStream_t stream,
    std::string& why, bool& uploaded) noexcept;

} // namespace trt
} // namespace wtconv
