// wtconvPlugin.cpp — TensorRT glue of the WTConv2d plugin (see wtconvPlugin.h).
//
// Error policy (as in NVIDIA's TensorRT plugins): every noexcept method runs its body inside
// try/catch; a failure is reported through the execution context's IErrorRecorder (once
// attachToContext gave us one) and the library logger, and the method returns -1 / false / nullptr /
// 0 as its contract says. Nothing throws out of the library and nothing aborts. Checks throw
// std::invalid_argument with a message naming the field or dimension, what was expected and what was
// given; only the try blocks catch them.
#include "wtconvPlugin.h"
#include "wtconvDeviceWeights.h"
#include "wtconvPluginFields.h"

#include "wtconvKernel.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace wtconv
{
namespace trt
{

static_assert(contract::kMAX_KERNEL_SIZE == kMaxKernelSize, "contract and kernels disagree on the largest k");
static_assert(contract::kMAX_WT_LEVELS == kMaxLevels, "contract and kernels disagree on the most levels");

using nvinfer1::DataType;
using nvinfer1::DimsExprs;
using nvinfer1::DynamicPluginTensorDesc;
using nvinfer1::IPluginV3;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using nvinfer1::PluginTensorDesc;
using nvinfer1::TensorFormat;

namespace
{

constexpr char const* kWHO = "WTConv2d plugin";

void logMessage(nvinfer1::ILogger::Severity severity, char const* message) noexcept
{
    nvinfer1::ILogger* logger = getPluginLogger();
    if (logger != nullptr)
    {
        logger->log(severity, message);
    }
    else
    {
        std::fprintf(stderr, "%s\n", message);
    }
}

[[noreturn]] void fail(std::string const& message)
{
    throw std::invalid_argument(std::string(kWHO) + ": " + message);
}

// configurePlugin and attachToContext upload the weights early; when that cannot happen yet, enqueue retries.
// With no usable CUDA device in the process at all (an engine built without a GPU, as TensorRT-RTX's builder
// can: docs/engines.md, "Backends", the CUDA runtime paragraph) every layer of every build reaches this, so that case is said
// once per process as what it is, and later repeats go to the verbose log.
void reportDeferredUpload(char const* where, std::string const& error, bool noDevice)
{
    static std::atomic<bool> saidNoDevice{false};
    if (noDevice)
    {
        bool const first = !saidNoDevice.exchange(true);
        std::string const message = std::string(kWHO) + ": " + where + ": no usable CUDA device in this process ("
            + error + "): expected when building an engine without a GPU; the weights are uploaded when the engine "
            + "runs on one";
        logMessage(
            first ? nvinfer1::ILogger::Severity::kWARNING : nvinfer1::ILogger::Severity::kVERBOSE, message.c_str());
        return;
    }
    reportWarning((std::string(kWHO) + ": " + where + ": weights not uploaded yet (" + error
        + "); enqueue will retry outside stream capture")
            .c_str());
}

char const* dataTypeName(DataType type) noexcept
{
    switch (type)
    {
    case DataType::kFLOAT: return "float32";
    case DataType::kHALF: return "float16";
    case DataType::kBF16: return "bfloat16";
    case DataType::kINT8: return "int8";
    case DataType::kINT32: return "int32";
    case DataType::kINT64: return "int64";
    case DataType::kBOOL: return "bool";
    case DataType::kUINT8: return "uint8";
    case DataType::kFP8: return "fp8";
    case DataType::kINT4: return "int4";
    case DataType::kFP4: return "fp4";
    case DataType::kE8M0: return "e8m0";
    }
    return "unknown";
}

// nvinfer1::DataType -> the kernels' dtype; false for types the kernels have no instantiation for.
bool toKernelType(DataType type, wtconv::DataType& out) noexcept
{
    switch (type)
    {
    case DataType::kFLOAT: out = wtconv::DataType::kFLOAT32; return true;
    case DataType::kHALF: out = wtconv::DataType::kFLOAT16; return true;
    case DataType::kBF16: out = wtconv::DataType::kBFLOAT16; return true;
    default: return false;
    }
}

std::string dimsString(nvinfer1::Dims const& dims)
{
    std::ostringstream s;
    s << "(";
    for (int32_t i = 0; i < dims.nbDims && i < nvinfer1::Dims::MAX_DIMS; ++i)
    {
        s << (i ? ", " : "") << dims.d[i];
    }
    s << ")";
    return s.str();
}

char const* formatName(TensorFormat format) noexcept
{
    switch (format)
    {
    case TensorFormat::kLINEAR: return "kLINEAR";
    case TensorFormat::kHWC: return "kHWC";
    case TensorFormat::kHWC8: return "kHWC8";
    case TensorFormat::kHWC16: return "kHWC16";
    default: return "a format the kernels cannot address";
    }
}

// Where a tensor's dimensions are: (N, C, H, W), or (N, H, W, C) for a node with channels_last = 1
// (docs/design.md §4).
struct Axes
{
    int32_t c;
    int32_t h;
    int32_t w;
    char const* shape; // for messages
};

Axes axesOf(bool channelsLast) noexcept
{
    return channelsLast ? Axes{3, 1, 2, "(N, H, W, C)"} : Axes{1, 2, 3, "(N, C, H, W)"};
}

// TensorRT tensor format -> the kernels' layout and channel pitch (TensorFormat in NvInferRuntime.h). A node of
// logical shape (N, C, H, W): kLINEAR is NCHW; kHWC (fp32), kHWC8 (fp16, bf16) and kHWC16 (fp16) are
// channels-last with C rounded up to 1, 8 or 16 elements per pixel. A channels_last node's tensor is already
// (N, H, W, C): kLINEAR is dense channels-last (pitch C), and the vectorised formats, which would vectorise its W,
// are refused. Other formats (vector-major kCHW*, DLA, 5-D) and other format/dtype pairs: false.
bool toKernelLayout(
    TensorFormat format, DataType type, int64_t channels, bool channelsLast, Layout& layout, int64_t& pitch) noexcept
{
    auto roundUp = [channels](int64_t multiple) { return (channels + multiple - 1) / multiple * multiple; };
    if (channelsLast)
    {
        layout = Layout::kNHWC;
        pitch = channels;
        return format == TensorFormat::kLINEAR;
    }
    switch (format)
    {
    case TensorFormat::kLINEAR:
        layout = Layout::kNCHW;
        pitch = 0;
        return true;
    case TensorFormat::kHWC:
        layout = Layout::kNHWC;
        pitch = channels;
        return type == DataType::kFLOAT;
    case TensorFormat::kHWC8:
        layout = Layout::kNHWC;
        pitch = roundUp(8);
        return type == DataType::kHALF || type == DataType::kBF16;
    case TensorFormat::kHWC16:
        layout = Layout::kNHWC;
        pitch = roundUp(16);
        return type == DataType::kHALF;
    default: return false;
    }
}

WTConvParams makeParams(DataType type, TensorFormat format, nvinfer1::Dims const& dims, KernelConfig const& layer)
{
    WTConvParams p;
    wtconv::DataType kernelType{};
    if (!toKernelType(type, kernelType))
    {
        fail(std::string("input 0: expected float32, float16 or bfloat16, given ") + dataTypeName(type));
    }
    Axes const axes = axesOf(layer.channelsLast);
    if (!toKernelLayout(format, type, dims.d[axes.c], layer.channelsLast, p.layout, p.channelPitch))
    {
        fail(layer.channelsLast
                ? std::string("input 0: expected format kLINEAR (channels_last = 1: the tensor is (N, H, W, C)), "
                              "given format ")
                    + std::to_string(static_cast<int32_t>(format))
                : std::string("input 0: expected format kLINEAR, kHWC (float32), kHWC8 (float16, bfloat16) or "
                              "kHWC16 (float16), given format ")
                    + std::to_string(static_cast<int32_t>(format)) + " with " + dataTypeName(type));
    }
    p.dtype = kernelType;
    p.batch = dims.d[0];
    p.channels = dims.d[axes.c];
    p.height = dims.d[axes.h];
    p.width = dims.d[axes.w];
    p.kernelSize = layer.k;
    p.levels = layer.levels;
    p.stride = layer.stride;
    return p;
}

// Asks the kernels whether they have an instantiation for `type` in `format` (checkShape reads no pointers and
// launches nothing, so this is safe at build time and without a GPU). Channels-last formats are offered only
// once the kernels' checkShape accepts Layout::kNHWC, so TensorRT can never pick a layout they cannot run.
bool kernelsSupport(DataType type, TensorFormat format, int64_t channels, KernelConfig const& layer) noexcept
{
    WTConvParams p;
    if (!toKernelType(type, p.dtype)
        || !toKernelLayout(format, type, channels, layer.channelsLast, p.layout, p.channelPitch))
    {
        return false;
    }
    p.batch = 1;
    p.channels = channels;
    p.height = 1;
    p.width = 1;
    p.kernelSize = layer.k;
    p.levels = layer.levels;
    p.stride = layer.stride;
    return checkShape(p, nullptr, 0) == cudaSuccess;
}

void checkInputDims(nvinfer1::Dims const& dims, int64_t channels, bool channelsLast, char const* what)
{
    Axes const axes = axesOf(channelsLast);
    if (dims.nbDims != 4)
    {
        fail(std::string(what) + ": expected a 4-D tensor " + axes.shape + ", given " + std::to_string(dims.nbDims)
            + "-D " + dimsString(dims));
    }
    if (dims.d[axes.c] != -1 && dims.d[axes.c] != channels)
    {
        fail(std::string(what) + ": channel dimension (dim " + std::to_string(axes.c) + ") expected "
            + std::to_string(channels) + " (the length of base_bias), given " + std::to_string(dims.d[axes.c]) + " in "
            + dimsString(dims));
    }
}

} // namespace

// ---------------------------------------------------------------------------------------------------
// Reporting

void reportError(nvinfer1::IErrorRecorder* recorder, char const* message) noexcept
{
    if (recorder != nullptr)
    {
        recorder->reportError(nvinfer1::ErrorCode::kINVALID_ARGUMENT, message);
    }
    logMessage(nvinfer1::ILogger::Severity::kERROR, message);
}

void reportWarning(char const* message) noexcept
{
    logMessage(nvinfer1::ILogger::Severity::kWARNING, message);
}

// ---------------------------------------------------------------------------------------------------
// Plugin

WTConvPlugin::WTConvPlugin(int32_t kernelSize, int32_t levels, int32_t stride, bool channelsLast,
    std::vector<float> baseWeight, std::vector<float> baseBias, std::vector<float> waveletWeight)
    : mKernelSize(kernelSize)
    , mLevels(levels)
    , mStride(stride)
    , mChannelsLast(channelsLast ? 1 : 0)
    , mBaseWeight(std::move(baseWeight))
    , mBaseBias(std::move(baseBias))
    , mWaveletWeight(std::move(waveletWeight))
    , mNamespace(contract::kPLUGIN_NAMESPACE)
{
    int64_t const c = static_cast<int64_t>(mBaseBias.size());
    int64_t const kk = static_cast<int64_t>(mKernelSize) * mKernelSize;
    if (mKernelSize < 1 || mKernelSize > contract::kMAX_KERNEL_SIZE || mKernelSize % 2 == 0 || mLevels < 1
        || mLevels > contract::kMAX_WT_LEVELS || mStride < 1 || c < 1
        || static_cast<int64_t>(mBaseWeight.size()) != c * kk
        || static_cast<int64_t>(mWaveletWeight.size()) != mLevels * 4 * c * kk)
    {
        fail("internal: inconsistent configuration reached the plugin constructor");
    }
    mChecksum = weightsChecksum(mBaseWeight, mBaseBias, mWaveletWeight);
    std::ostringstream id;
    id << contract::kPLUGIN_NAME << "_v" << contract::kPLUGIN_VERSION << "_k" << mKernelSize << "_L" << mLevels << "_s"
       << mStride << "_C" << c << (mChannelsLast != 0 ? "_nhwc" : "");
    mTimingCacheId = id.str();
}

WTConvPlugin::WTConvPlugin(WTConvPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mKernelSize(other.mKernelSize)
    , mLevels(other.mLevels)
    , mStride(other.mStride)
    , mChannelsLast(other.mChannelsLast)
    , mBaseWeight(other.mBaseWeight)
    , mBaseBias(other.mBaseBias)
    , mWaveletWeight(other.mWaveletWeight)
    , mChecksum(other.mChecksum)
    , mNamespace(other.mNamespace)
    , mTimingCacheId(other.mTimingCacheId)
    , mDevice(other.mDevice)
    , mErrorRecorder(other.mErrorRecorder)
{
    // mSerializedFields point into the object that built them: never copied.
}

WTConvPlugin::~WTConvPlugin() = default;

KernelConfig WTConvPlugin::kernelConfig() const noexcept
{
    return KernelConfig{mKernelSize, mLevels, mStride, mChannelsLast != 0};
}

void WTConvPlugin::report(std::string const& message) const noexcept
{
    reportError(mErrorRecorder, message.c_str());
}

void WTConvPlugin::report(char const* message) const noexcept
{
    reportError(mErrorRecorder, message);
}

void WTConvPlugin::reportCaught(char const* where, char const* what) const noexcept
{
    // No allocation here: this runs inside catch handlers, where a second exception would terminate.
    char message[1024];
    std::snprintf(message, sizeof(message), "%s: %s: %s", kWHO, where, what != nullptr ? what : "unknown error");
    reportError(mErrorRecorder, message);
}

nvinfer1::IPluginCapability* WTConvPlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    try
    {
        switch (type)
        {
        case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
        case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
        case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
        }
        fail("getCapabilityInterface: expected kCORE, kBUILD or kRUNTIME, given "
            + std::to_string(static_cast<int32_t>(type)));
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return nullptr;
}

IPluginV3* WTConvPlugin::clone() noexcept
{
    try
    {
        return new WTConvPlugin(*this);
    }
    catch (std::exception const& e)
    {
        reportCaught("clone failed", e.what());
    }
    return nullptr;
}

char const* WTConvPlugin::getPluginName() const noexcept
{
    return contract::kPLUGIN_NAME;
}

char const* WTConvPlugin::getPluginVersion() const noexcept
{
    return contract::kPLUGIN_VERSION;
}

char const* WTConvPlugin::getPluginNamespace() const noexcept
{
    return mNamespace.c_str();
}

void WTConvPlugin::setPluginNamespace(char const* pluginNamespace)
{
    mNamespace = pluginNamespace != nullptr ? pluginNamespace : "";
}

int32_t WTConvPlugin::getNbOutputs() const noexcept
{
    return 1;
}

int32_t WTConvPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    try
    {
        if (nbInputs != 1 || nbOutputs != 1 || inputTypes == nullptr || outputTypes == nullptr)
        {
            fail("getOutputDataTypes: expected 1 input and 1 output, given " + std::to_string(nbInputs) + " inputs and "
                + std::to_string(nbOutputs) + " outputs");
        }
        if (!kernelsSupport(inputTypes[0], TensorFormat::kLINEAR, channels(), kernelConfig()))
        {
            fail(std::string("getOutputDataTypes: input 0: expected float32, float16 or bfloat16 (as the kernels "
                             "support), given ")
                + dataTypeName(inputTypes[0]));
        }
        outputTypes[0] = inputTypes[0]; // y has x's dtype
        return 0;
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return -1;
}

int32_t WTConvPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t nbShapeInputs, DimsExprs* outputs, int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    try
    {
        if (nbInputs != 1 || nbOutputs != 1 || nbShapeInputs != 0 || inputs == nullptr || outputs == nullptr)
        {
            fail("getOutputShapes: expected 1 input, 0 shape inputs and 1 output, given " + std::to_string(nbInputs)
                + ", " + std::to_string(nbShapeInputs) + " and " + std::to_string(nbOutputs));
        }
        DimsExprs const& x = inputs[0];
        Axes const axes = axesOf(mChannelsLast != 0);
        if (x.nbDims != 4)
        {
            fail(std::string("input 0: expected a 4-D tensor ") + axes.shape + ", given " + std::to_string(x.nbDims)
                + "-D");
        }
        for (int32_t i = 0; i < 4; ++i)
        {
            if (x.d[i] == nullptr)
            {
                fail("getOutputShapes: input 0 dimension " + std::to_string(i) + " is null");
            }
        }
        if (x.d[axes.c]->isConstant() && x.d[axes.c]->getConstantValue() != channels())
        {
            fail("input 0: channel dimension (dim " + std::to_string(axes.c) + ") expected "
                + std::to_string(channels()) + " (the length of base_bias), given "
                + std::to_string(x.d[axes.c]->getConstantValue()));
        }
        DimsExprs& y = outputs[0];
        y = x;
        if (mStride != 1)
        {
            // (H, W) -> (ceil(H / s), ceil(W / s)): the kept pixels s*i, s*j (docs/design.md §2.4).
            nvinfer1::IDimensionExpr const* s = exprBuilder.constant(mStride);
            if (s == nullptr)
            {
                fail("getOutputShapes: IExprBuilder::constant returned null");
            }
            y.d[axes.h] = exprBuilder.operation(nvinfer1::DimensionOperation::kCEIL_DIV, *x.d[axes.h], *s);
            y.d[axes.w] = exprBuilder.operation(nvinfer1::DimensionOperation::kCEIL_DIV, *x.d[axes.w], *s);
            if (y.d[axes.h] == nullptr || y.d[axes.w] == nullptr)
            {
                fail("getOutputShapes: IExprBuilder::operation returned null");
            }
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return -1;
}

bool WTConvPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    try
    {
        if (inOut == nullptr || nbInputs != 1 || nbOutputs != 1 || pos < 0 || pos > 1)
        {
            fail("supportsFormatCombination: expected pos in 0..1 with 1 input and 1 output, given pos "
                + std::to_string(pos) + ", " + std::to_string(nbInputs) + " inputs, " + std::to_string(nbOutputs)
                + " outputs");
        }
        // TensorRT fixes positions in order: when asked about pos, inOut[0..pos-1] are decided, so pos 1 only
        // compares with pos 0. Input and output share one dtype and one layout (the kernels take one for both).
        PluginTensorDesc const& desc = inOut[pos].desc;
        if (pos == 0)
        {
            return kernelsSupport(desc.type, desc.format, channels(), kernelConfig());
        }
        return desc.type == inOut[0].desc.type && desc.format == inOut[0].desc.format;
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return false;
}

int32_t WTConvPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        if (in == nullptr || out == nullptr || nbInputs != 1 || nbOutputs != 1)
        {
            fail("configurePlugin: expected 1 input and 1 output, given " + std::to_string(nbInputs) + " and "
                + std::to_string(nbOutputs));
        }
        checkInputDims(in[0].desc.dims, channels(), mChannelsLast != 0, "configurePlugin: input 0");
        // The profile's range of the channel dimension must be exactly C too.
        int32_t const c = axesOf(mChannelsLast != 0).c;
        if (in[0].min.nbDims == 4 && in[0].max.nbDims == 4
            && (in[0].min.d[c] != channels() || in[0].max.d[c] != channels()))
        {
            fail("configurePlugin: input 0: channel dimension (dim " + std::to_string(c) + ") expected "
                + std::to_string(channels()) + " in every optimization profile, given min " + dimsString(in[0].min)
                + ", max " + dimsString(in[0].max));
        }
        if (!kernelsSupport(in[0].desc.type, in[0].desc.format, channels(), kernelConfig()))
        {
            fail(std::string("configurePlugin: input 0: expected float32, float16 or bfloat16 in a format "
                             "supportsFormatCombination accepted, given ")
                + dataTypeName(in[0].desc.type) + " in " + formatName(in[0].desc.format));
        }
        if (out[0].desc.format != in[0].desc.format)
        {
            fail(std::string("configurePlugin: output 0: expected the input's format ") + formatName(in[0].desc.format)
                + ", given " + formatName(out[0].desc.format));
        }
        if (out[0].desc.type != in[0].desc.type)
        {
            fail(std::string("configurePlugin: output 0: expected the input's dtype ") + dataTypeName(in[0].desc.type)
                + ", given " + dataTypeName(out[0].desc.type));
        }
        if (in[0].max.nbDims == 4)
        {
            char message[512] = {};
            WTConvParams p = makeParams(in[0].desc.type, in[0].desc.format, in[0].max, kernelConfig());
            if (checkShape(p, message, sizeof(message)) != cudaSuccess)
            {
                fail(std::string("configurePlugin: input 0 at the profile's max ") + dimsString(in[0].max) + ": "
                    + message);
            }
        }
        logMessage(nvinfer1::ILogger::Severity::kVERBOSE,
            (std::string(kWHO) + ": configurePlugin: " + dataTypeName(in[0].desc.type) + " "
                + formatName(in[0].desc.format) + ", input " + dimsString(in[0].desc.dims) + " in "
                + dimsString(in[0].min) + ".." + dimsString(in[0].max))
                .c_str());
        // Upload the weights now, at build time and outside any stream capture, so the clones TensorRT
        // times (onShapeChange + enqueue, possibly captured) already share them. Not fatal here:
        // enqueue uploads them if still missing, outside any capture, and fails loudly otherwise.
        std::string error;
        bool noDevice = false;
        if (!ensureDeviceWeights(mDevice, hostWeights(), error, nullptr, &noDevice))
        {
            reportDeferredUpload("configurePlugin", error, noDevice);
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return -1;
}

size_t WTConvPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    try
    {
        if (inputs == nullptr || nbInputs != 1 || inputs[0].max.nbDims != 4)
        {
            fail("getWorkspaceSize: expected 1 input with 4-D max dimensions");
        }
        // Sized for the profile's largest shape; enqueue uses what the actual shape needs of it.
        WTConvParams const p = makeParams(inputs[0].desc.type, inputs[0].desc.format, inputs[0].max, kernelConfig());
        return wtconvWorkspaceBytes(p);
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return 0;
}

char const* WTConvPlugin::getTimingCacheID() noexcept
{
    // Timing depends on (k, L, stride, C) besides the shapes and dtypes TensorRT keys on itself;
    // the weight values do not change the timing.
    return mTimingCacheId.c_str();
}

int32_t WTConvPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* out, int32_t nbOutputs) noexcept
{
    try
    {
        if (in == nullptr || out == nullptr || nbInputs != 1 || nbOutputs != 1)
        {
            fail("onShapeChange: expected 1 input and 1 output, given " + std::to_string(nbInputs) + " and "
                + std::to_string(nbOutputs));
        }
        checkInputDims(in[0].dims, channels(), mChannelsLast != 0, "onShapeChange: input 0");
        if (!kernelsSupport(in[0].type, in[0].format, channels(), kernelConfig()))
        {
            fail(std::string("onShapeChange: input 0: expected float32, float16 or bfloat16 in kLINEAR or a "
                             "channels-last format the kernels accept, given ")
                + dataTypeName(in[0].type) + " in " + formatName(in[0].format));
        }
        if (out[0].format != in[0].format)
        {
            fail(std::string("onShapeChange: output 0: expected the input's format ") + formatName(in[0].format)
                + ", given " + formatName(out[0].format));
        }
        if (out[0].type != in[0].type)
        {
            fail(std::string("onShapeChange: output 0: expected the input's dtype ") + dataTypeName(in[0].type)
                + ", given " + dataTypeName(out[0].type));
        }
        Axes const axes = axesOf(mChannelsLast != 0);
        nvinfer1::Dims expected = in[0].dims;
        expected.d[axes.h] = outputSize(in[0].dims.d[axes.h], mStride);
        expected.d[axes.w] = outputSize(in[0].dims.d[axes.w], mStride);
        bool same = out[0].dims.nbDims == 4;
        for (int32_t i = 0; same && i < 4; ++i)
        {
            same = out[0].dims.d[i] == expected.d[i];
        }
        if (!same)
        {
            fail("onShapeChange: output 0: expected dims " + dimsString(expected) + " for input "
                + dimsString(in[0].dims) + " and stride " + std::to_string(mStride) + ", given "
                + dimsString(out[0].dims));
        }
        // No CUDA call here: TensorRT calls onShapeChange from enqueueV3 without telling us the stream, which a
        // user may be capturing into a CUDA graph. Weights missing on this device are handled by enqueue.
        return 0;
    }
    catch (std::exception const& e)
    {
        report(e.what());
    }
    return -1;
}

int32_t WTConvPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    // Only the given stream and workspace are used: no allocation, copy or synchronisation, so this is
    // safe inside stream capture (TensorRT may capture while timing tactics, users capture CUDA graphs).
    try
    {
        if (inputDesc == nullptr || outputDesc == nullptr || inputs == nullptr || outputs == nullptr)
        {
            report(std::string(kWHO) + ": enqueue: null tensor descriptors or pointers");
            return -1;
        }
        nvinfer1::Dims const& dims = inputDesc[0].dims;
        Axes const axes = axesOf(mChannelsLast != 0);
        if (dims.nbDims != 4 || dims.d[axes.c] != channels())
        {
            report(std::string(kWHO) + ": enqueue: input 0: expected " + axes.shape
                + " with C = " + std::to_string(channels()) + ", given " + dimsString(dims));
            return -1;
        }
        if (dims.d[0] == 0 || dims.d[axes.h] == 0 || dims.d[axes.w] == 0)
        {
            return 0; // empty tensor: nothing to compute
        }
        std::string whyNoWeights;
        bool uploaded = false;
        if (!weightsReadyForEnqueue(mDevice, hostWeights(), stream, whyNoWeights, uploaded))
        {
            report(std::string(kWHO)
                + ": enqueue: the weights are not on the current device (attachToContext did "
                  "not run or could not upload them) and cannot be uploaded here: "
                + whyNoWeights + "; nothing launched");
            return -1;
        }
        if (uploaded)
        {
            reportWarning((std::string(kWHO) + ": enqueue: uploaded the weights to device "
                + std::to_string(mDevice->device) + " (attachToContext had not); later launches reuse them")
                    .c_str());
        }
        WTConvParams p;
        if (!toKernelType(inputDesc[0].type, p.dtype) || outputDesc[0].type != inputDesc[0].type
            || outputDesc[0].format != inputDesc[0].format
            || !toKernelLayout(
                inputDesc[0].format, inputDesc[0].type, channels(), mChannelsLast != 0, p.layout, p.channelPitch))
        {
            report(std::string(kWHO) + ": enqueue: unsupported dtypes/formats " + dataTypeName(inputDesc[0].type) + " "
                + formatName(inputDesc[0].format) + " -> " + dataTypeName(outputDesc[0].type) + " "
                + formatName(outputDesc[0].format));
            return -1;
        }
        p.batch = dims.d[0];
        p.channels = dims.d[axes.c];
        p.height = dims.d[axes.h];
        p.width = dims.d[axes.w];
        p.kernelSize = mKernelSize;
        p.levels = mLevels;
        p.stride = mStride;
        p.input = inputs[0];
        p.output = outputs[0];
        p.baseWeight = mDevice->baseWeight;
        p.baseBias = mDevice->baseBias;
        p.waveletWeight = mDevice->waveletWeight;
        p.workspace = workspace;
        // TensorRT allocated getWorkspaceSize(profile max) >= what this shape needs.
        p.workspaceBytes = wtconvWorkspaceBytes(p);
        char message[512] = {};
        cudaError_t const status = wtconvForward(p, stream, message, sizeof(message));
        if (status != cudaSuccess)
        {
            handledCudaFailure("", status);
            report(std::string(kWHO) + ": enqueue: " + cudaGetErrorName(status) + ": " + message);
            return -1;
        }
        return 0;
    }
    catch (std::exception const& e)
    {
        reportCaught("enqueue", e.what());
    }
    catch (...)
    {
        reportCaught("enqueue", "unknown exception");
    }
    return -1;
}

IPluginV3* WTConvPlugin::attachToContext(nvinfer1::IPluginResourceContext* context) noexcept
{
    try
    {
        std::unique_ptr<WTConvPlugin> plugin(new WTConvPlugin(*this));
        plugin->mErrorRecorder = context != nullptr ? context->getErrorRecorder() : nullptr;
        std::string error;
        bool noDevice = false;
        if (!ensureDeviceWeights(plugin->mDevice, plugin->hostWeights(), error, nullptr, &noDevice))
        {
            // Not fatal here (a context may be created before its device is usable); enqueue retries
            // and fails loudly, enqueue refuses to launch.
            reportDeferredUpload("attachToContext", error, noDevice);
        }
        return plugin.release();
    }
    catch (std::exception const& e)
    {
        reportCaught("attachToContext", e.what());
    }
    return nullptr;
}

PluginFieldCollection const* WTConvPlugin::getFieldsToSerialize() noexcept
{
    try
    {
        mSerializedFields.clear();
        mSerializedFields.emplace_back(
            contract::kFIELD_SERIALIZATION_VERSION, &mSerializationVersion, PluginFieldType::kINT32, 1);
        mSerializedFields.emplace_back(contract::kFIELD_KERNEL_SIZE, &mKernelSize, PluginFieldType::kINT32, 1);
        mSerializedFields.emplace_back(contract::kFIELD_WT_LEVELS, &mLevels, PluginFieldType::kINT32, 1);
        mSerializedFields.emplace_back(contract::kFIELD_STRIDE, &mStride, PluginFieldType::kINT32, 1);
        mSerializedFields.emplace_back(contract::kFIELD_CHANNELS_LAST, &mChannelsLast, PluginFieldType::kINT32, 1);
        mSerializedFields.emplace_back(contract::kFIELD_BASE_WEIGHT, mBaseWeight.data(), PluginFieldType::kFLOAT32,
            static_cast<int32_t>(mBaseWeight.size()));
        mSerializedFields.emplace_back(contract::kFIELD_BASE_BIAS, mBaseBias.data(), PluginFieldType::kFLOAT32,
            static_cast<int32_t>(mBaseBias.size()));
        mSerializedFields.emplace_back(contract::kFIELD_WAVELET_WEIGHT, mWaveletWeight.data(),
            PluginFieldType::kFLOAT32, static_cast<int32_t>(mWaveletWeight.size()));
        mSerializedFields.emplace_back(contract::kFIELD_WEIGHTS_CHECKSUM, &mChecksum, PluginFieldType::kINT32, 1);
        mSerializedCollection.nbFields = static_cast<int32_t>(mSerializedFields.size());
        mSerializedCollection.fields = mSerializedFields.data();
        return &mSerializedCollection;
    }
    catch (std::exception const& e)
    {
        reportCaught("getFieldsToSerialize", e.what());
    }
    return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// Creator

WTConvPluginCreator::WTConvPluginCreator()
    : mNamespace(contract::kPLUGIN_NAMESPACE)
{
    // What the ONNX parser should collect from the node.
    mFieldNames = parserFieldNames();
    mFieldCollection.nbFields = static_cast<int32_t>(mFieldNames.size());
    mFieldCollection.fields = mFieldNames.data();
}

char const* WTConvPluginCreator::getPluginName() const noexcept
{
    return contract::kPLUGIN_NAME;
}

char const* WTConvPluginCreator::getPluginVersion() const noexcept
{
    return contract::kPLUGIN_VERSION;
}

char const* WTConvPluginCreator::getPluginNamespace() const noexcept
{
    return mNamespace.c_str();
}

PluginFieldCollection const* WTConvPluginCreator::getFieldNames() noexcept
{
    return &mFieldCollection;
}

IPluginV3* WTConvPluginCreator::createPlugin(
    char const* name, PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept
{
    try
    {
        LayerFields fields = decodeFields(fc, phase);
        auto plugin = std::make_unique<WTConvPlugin>(fields.kernelSize, fields.levels, fields.stride,
            fields.channelsLast, std::move(fields.baseWeight), std::move(fields.baseBias),
            std::move(fields.waveletWeight));
        plugin->setPluginNamespace(mNamespace.c_str());
        return plugin.release();
    }
    catch (std::exception const& e)
    {
        char message[1024];
        bool const named = name != nullptr && name[0] != '\0';
        std::snprintf(message, sizeof(message), "%s%s%s%s", e.what(), named ? " [layer '" : "", named ? name : "",
            named ? "']" : "");
        reportError(nullptr, message);
    }
    catch (...)
    {
        reportError(nullptr, "WTConv2d plugin: createPlugin: unknown exception");
    }
    return nullptr;
}

} // namespace trt
} // namespace wtconv
