// wtconvPlugin.h — TensorRT IPluginV3 plugin "WTConv2d" on the fused WTConv kernels.
//
// The plugin only translates TensorRT descriptors into wtconv::WTConvParams (plugin/kernels/wtconvKernel.h)
// and calls wtconvForward; the operator itself is specified in docs/design.md §2.
//
//   input 0  x: (N, C, H, W) in kLINEAR (NCHW) or a channels-last format (kHWC / kHWC8 / kHWC16), or, with
//               channels_last = 1, (N, H, W, C) in kLINEAR (dense channels-last); fp32 / fp16 / bf16 (what the
//               kernels accept)
//   output 0 y: (N, C, ceil(H/stride), ceil(W/stride)) (channels_last = 1: (N, ceil(H/s), ceil(W/s), C)), the
//               input's dtype and format
//   fields   : wtconvPluginContract.h (kernel_size, wt_levels, stride, base_weight, base_bias, wavelet_weight,
//              channels_last)
//
// The folded weights: host copies in the plugin, a device copy shared by its clones (wtconvDeviceWeights.h).
#pragma once

#include "NvInferRuntime.h"
#include "wtconvDeviceWeights.h"
#include "wtconvPluginContract.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wtconv
{
namespace trt
{

// The logger of the library the plugin was built into: the dynamic library takes it from the
// ILoggerFinder given to setLoggerFinder; the statically registering library from libnvinfer's
// getLogger(). May return nullptr (then messages go to stderr).
nvinfer1::ILogger* getPluginLogger() noexcept;

// Reports an error through `recorder` (when given) and the library logger; never throws.
void reportError(nvinfer1::IErrorRecorder* recorder, char const* message) noexcept;
void reportWarning(char const* message) noexcept;

// The layer's configuration as the kernels take it besides the tensors.
struct KernelConfig
{
    int32_t k;
    int32_t levels;
    int32_t stride;
    bool channelsLast; // the tensors are (N, H, W, C) (the channels_last field)
};

class WTConvPlugin : public nvinfer1::IPluginV3,
                     public nvinfer1::IPluginV3OneCore,
                     public nvinfer1::IPluginV3OneBuild,
                     public nvinfer1::IPluginV3OneRuntime
{
public:
    // Takes validated values (WTConvPluginCreator::createPlugin checks them; the constructor re-checks
    // the invariants and throws std::invalid_argument, caught by the creator).
    WTConvPlugin(int32_t kernelSize, int32_t levels, int32_t stride, bool channelsLast, std::vector<float> baseWeight,
        std::vector<float> baseBias, std::vector<float> waveletWeight);
    WTConvPlugin(WTConvPlugin const& other);
    WTConvPlugin& operator=(WTConvPlugin const&) = delete;
    ~WTConvPlugin() override;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    nvinfer1::IPluginV3* clone() noexcept override;

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    // IPluginV3OneBuild
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const* inputTypes,
        int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
        int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    int32_t getNbOutputs() const noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    char const* getTimingCacheID() noexcept override;

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

    void setPluginNamespace(char const* pluginNamespace);
    int64_t channels() const noexcept
    {
        return static_cast<int64_t>(mBaseBias.size());
    }

private:
    void report(std::string const& message) const noexcept;
    void report(char const* message) const noexcept;
    void reportCaught(char const* where, char const* what) const noexcept;
    HostWeights hostWeights() const noexcept
    {
        return HostWeights{mBaseWeight, mBaseBias, mWaveletWeight};
    }
    KernelConfig kernelConfig() const noexcept;

    int32_t mKernelSize;
    int32_t mLevels;
    int32_t mStride;
    int32_t mChannelsLast;             // 0 or 1 (the channels_last field, serialized as kINT32)
    std::vector<float> mBaseWeight;    // (C, k, k)
    std::vector<float> mBaseBias;      // (C)
    std::vector<float> mWaveletWeight; // (L, 4C, k, k)
    int32_t mChecksum;                 // FNV-1a of the three weight arrays (serialization check)
    int32_t mSerializationVersion{contract::kSERIALIZATION_VERSION};

    std::string mNamespace;
    std::string mTimingCacheId;
    std::shared_ptr<DeviceWeights> mDevice;
    nvinfer1::IErrorRecorder* mErrorRecorder{nullptr}; // from attachToContext; not owned

    std::vector<nvinfer1::PluginField> mSerializedFields;
    nvinfer1::PluginFieldCollection mSerializedCollection{};
};

class WTConvPluginCreator : public nvinfer1::IPluginCreatorV3One
{
public:
    WTConvPluginCreator();
    ~WTConvPluginCreator() override = default;

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;

private:
    std::vector<nvinfer1::PluginField> mFieldNames;
    nvinfer1::PluginFieldCollection mFieldCollection{};
    std::string mNamespace;
};

} // namespace trt
} // namespace wtconv
