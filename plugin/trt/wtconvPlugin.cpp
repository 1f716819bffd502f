// wtconvPlugin.cpp — TensorRT glue of the WTConv2d plugin (see wtconvPlugin.h).
//
// Error policy (STYLE.md, TensorRT plugin/common): every noexcept method runs its body inside
// try/catch; a failure is reported through the execution context's IErrorRecorder (once
// attachToContext gave us one) and the library logger, and the method returns -1 / false / nullptr /
// 0 as its contract says. Nothing throws out of the library and nothing aborts. Checks throw
// std::invalid_argument with a message naming the field or dimension, what was expected and what was
// given; only the try blocks catch them.
#include "wtconvPlugin.h"

#include "wtconvKernel.h"

#include <cuda_runtime_api.h>

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

char const* fieldTypeName(PluginFieldType type) noexcept
{
    switch (type)
    {
    case PluginFieldType::kFLOAT16: return "kFLOAT16";
    case PluginFieldType::kFLOAT32: return "kFLOAT32";
    case PluginFieldType::kFLOAT64: return "kFLOAT64";
    case PluginFieldType::kINT8: return "kINT8";
    case PluginFieldType::kINT16: return "kINT16";
    case PluginFieldType::kINT32: return "kINT32";
    case PluginFieldType::kCHAR: return "kCHAR";
    case PluginFieldType::kDIMS: return "kDIMS";
    case PluginFieldType::kUNKNOWN: return "kUNKNOWN";
    case PluginFieldType::kBF16: return "kBF16";
    case PluginFieldType::kINT64: return "kINT64";
    case PluginFieldType::kFP8: return "kFP8";
    case PluginFieldType::kINT4: return "kINT4";
    case PluginFieldType::kFP4: return "kFP4";
    }
    return "an unknown PluginFieldType";
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

// IEEE half -> float on the host (no cuda_fp16.h in the glue; fp16 weight fields are rare).
float halfToFloat(uint16_t h) noexcept
{
    uint32_t const sign = static_cast<uint32_t>(h & 0x8000U) << 16;
    uint32_t exponent = (h >> 10) & 0x1FU;
    uint32_t mantissa = h & 0x3FFU;
    uint32_t bits = 0;
    if (exponent == 0x1FU)
    {
        bits = sign | 0x7F800000U | (mantissa << 13); // inf / nan
    }
    else if (exponent != 0)
    {
        bits = sign | ((exponent + 112U) << 23) | (mantissa << 13);
    }
    else if (mantissa != 0)
    {
        exponent = 113U; // subnormal: normalise
        while ((mantissa & 0x400U) == 0)
        {
            mantissa <<= 1;
            --exponent;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3FFU) << 13);
    }
    else
    {
        bits = sign;
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

WTConvParams makeParams(DataType type, nvinfer1::Dims const& dims, int32_t k, int32_t levels, int32_t stride)
{
    WTConvParams p;
    wtconv::DataType kernelType{};
    if (!toKernelType(type, kernelType))
    {
        fail(std::string("input 0: expected float32, float16 or bfloat16, given ") + dataTypeName(type));
    }
    p.dtype = kernelType;
    p.batch = dims.d[0];
    p.channels = dims.d[1];
    p.height = dims.d[2];
    p.width = dims.d[3];
    p.kernelSize = k;
    p.levels = levels;
    p.stride = stride;
    return p;
}

// Asks the kernels whether they have an instantiation for `type` (checkShape reads no pointers and
// launches nothing, so this is safe at build time and without a GPU).
bool kernelsSupport(DataType type, int64_t channels, int32_t k, int32_t levels, int32_t stride) noexcept
{
    WTConvParams p;
    if (!toKernelType(type, p.dtype))
    {
        return false;
    }
    p.batch = 1;
    p.channels = channels;
    p.height = 1;
    p.width = 1;
    p.kernelSize = k;
    p.levels = levels;
    p.stride = stride;
    return checkShape(p, nullptr, 0) == cudaSuccess;
}

void checkInputDims(nvinfer1::Dims const& dims, int64_t channels, char const* what)
{
    if (dims.nbDims != 4)
    {
        fail(std::string(what) + ": expected a 4-D tensor (N, C, H, W), given " + std::to_string(dims.nbDims) + "-D "
            + dimsString(dims));
    }
    if (dims.d[1] != -1 && dims.d[1] != channels)
    {
        fail(std::string(what) + ": channel dimension (dim 1) expected " + std::to_string(channels)
            + " (the length of base_bias), given " + std::to_string(dims.d[1]) + " in " + dimsString(dims));
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

int32_t weightsChecksum(std::vector<float> const& baseWeight, std::vector<float> const& baseBias,
    std::vector<float> const& waveletWeight) noexcept
{
    uint32_t hash = 2166136261U; // FNV-1a, 32 bit
    for (std::vector<float> const* v : {&baseWeight, &baseBias, &waveletWeight})
    {
        unsigned char const* bytes = reinterpret_cast<unsigned char const*>(v->data());
        for (size_t i = 0; i < v->size() * sizeof(float); ++i)
        {
            hash = (hash ^ bytes[i]) * 16777619U;
        }
    }
    int32_t out;
    std::memcpy(&out, &hash, sizeof(out));
    return out;
}

// ---------------------------------------------------------------------------------------------------
// Device weights

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
    ~DeviceWeights()
    {
        if (memory != nullptr)
        {
            static_cast<void>(cudaFree(memory)); // nothing useful to do with an error in a destructor
        }
    }
};

// ---------------------------------------------------------------------------------------------------
// Plugin

WTConvPlugin::WTConvPlugin(int32_t kernelSize, int32_t levels, int32_t stride, std::vector<float> baseWeight,
    std::vector<float> baseBias, std::vector<float> waveletWeight)
    : mKernelSize(kernelSize)
    , mLevels(levels)
    , mStride(stride)
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
       << mStride << "_C" << c;
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
        if (!kernelsSupport(inputTypes[0], channels(), mKernelSize, mLevels, mStride))
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
        if (x.nbDims != 4)
        {
            fail("input 0: expected a 4-D tensor (N, C, H, W), given " + std::to_string(x.nbDims) + "-D");
        }
        for (int32_t i = 0; i < 4; ++i)
        {
            if (x.d[i] == nullptr)
            {
                fail("getOutputShapes: input 0 dimension " + std::to_string(i) + " is null");
            }
        }
        if (x.d[1]->isConstant() && x.d[1]->getConstantValue() != channels())
        {
            fail("input 0: channel dimension (dim 1) expected " + std::to_string(channels())
                + " (the length of base_bias), given " + std::to_string(x.d[1]->getConstantValue()));
        }
        DimsExprs& y = outputs[0];
        y.nbDims = 4;
        y.d[0] = x.d[0];
        y.d[1] = x.d[1];
        if (mStride == 1)
        {
            y.d[2] = x.d[2];
            y.d[3] = x.d[3];
        }
        else
        {
            // (H, W) -> (ceil(H / s), ceil(W / s)): the kept pixels s*i, s*j (DESIGN.md §2).
            nvinfer1::IDimensionExpr const* s = exprBuilder.constant(mStride);
            if (s == nullptr)
            {
                fail("getOutputShapes: IExprBuilder::constant returned null");
            }
            y.d[2] = exprBuilder.operation(nvinfer1::DimensionOperation::kCEIL_DIV, *x.d[2], *s);
            y.d[3] = exprBuilder.operation(nvinfer1::DimensionOperation::kCEIL_DIV, *x.d[3], *s);
            if (y.d[2] == nullptr || y.d[3] == nullptr)
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
        PluginTensorDesc const& desc = inOut[pos].desc;
        if (desc.format != TensorFormat::kLINEAR)
        {
            return false;
        }
        if (pos == 0)
        {
            return kernelsSupport(desc.type, channels(), mKernelSize, mLevels, mStride);
        }
        // The output's dtype is decided by the input's, which TensorRT fixed before asking about pos 1.
        return desc.type == inOut[0].desc.type;
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
        checkInputDims(in[0].desc.dims, channels(), "configurePlugin: input 0");
        // The profile's range of the channel dimension must be exactly C too.
        if (in[0].min.nbDims == 4 && in[0].max.nbDims == 4
            && (in[0].min.d[1] != channels() || in[0].max.d[1] != channels()))
        {
            fail("configurePlugin: input 0: channel dimension (dim 1) expected " + std::to_string(channels())
                + " in every optimization profile, given min " + dimsString(in[0].min) + ", max "
                + dimsString(in[0].max));
        }
        if (!kernelsSupport(in[0].desc.type, channels(), mKernelSize, mLevels, mStride))
        {
            fail(std::string("configurePlugin: input 0: expected float32, float16 or bfloat16, given ")
                + dataTypeName(in[0].desc.type));
        }
        if (out[0].desc.type != in[0].desc.type)
        {
            fail(std::string("configurePlugin: output 0: expected the input's dtype ") + dataTypeName(in[0].desc.type)
                + ", given " + dataTypeName(out[0].desc.type));
        }
        if (in[0].max.nbDims == 4)
        {
            char message[512] = {};
            WTConvParams p = makeParams(in[0].desc.type, in[0].max, mKernelSize, mLevels, mStride);
            if (checkShape(p, message, sizeof(message)) != cudaSuccess)
            {
                fail(std::string("configurePlugin: input 0 at the profile's max ") + dimsString(in[0].max) + ": "
                    + message);
            }
        }
        // Upload the weights now, at build time and outside any stream capture, so the clones TensorRT
        // times (onShapeChange + enqueue, possibly captured) already share them. Not fatal here:
        // onShapeChange retries and fails loudly.
        std::string error;
        if (!ensureDeviceWeights(error))
        {
            reportWarning((std::string(kWHO) + ": configurePlugin: weights not uploaded yet (" + error
                + "); onShapeChange will retry")
                    .c_str());
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
        WTConvParams const p = makeParams(inputs[0].desc.type, inputs[0].max, mKernelSize, mLevels, mStride);
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

bool WTConvPlugin::ensureDeviceWeights(std::string& error) noexcept
{
    try
    {
        int32_t device = -1;
        cudaError_t status = cudaGetDevice(&device);
        if (status != cudaSuccess)
        {
            error = std::string("cudaGetDevice failed: ") + cudaGetErrorString(status);
            return false;
        }
        if (mDevice != nullptr && mDevice->device == device)
        {
            return true;
        }
        // One allocation, each array starting at a 256-byte boundary.
        auto roundUp = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
        size_t const baseWeightBytes = roundUp(mBaseWeight.size() * sizeof(float));
        size_t const baseBiasBytes = roundUp(mBaseBias.size() * sizeof(float));
        size_t const waveletBytes = mWaveletWeight.size() * sizeof(float);
        auto weights = std::make_shared<DeviceWeights>();
        status = cudaMalloc(&weights->memory, baseWeightBytes + baseBiasBytes + waveletBytes);
        if (status != cudaSuccess)
        {
            weights->memory = nullptr;
            error = std::string("cudaMalloc of the weights failed: ") + cudaGetErrorString(status);
            return false;
        }
        weights->device = device;
        char* base = static_cast<char*>(weights->memory);
        weights->baseWeight = reinterpret_cast<float const*>(base);
        weights->baseBias = reinterpret_cast<float const*>(base + baseWeightBytes);
        weights->waveletWeight = reinterpret_cast<float const*>(base + baseWeightBytes + baseBiasBytes);
        status = cudaMemcpy(base, mBaseWeight.data(), mBaseWeight.size() * sizeof(float), cudaMemcpyHostToDevice);
        if (status == cudaSuccess)
        {
            status = cudaMemcpy(
                base + baseWeightBytes, mBaseBias.data(), mBaseBias.size() * sizeof(float), cudaMemcpyHostToDevice);
        }
        if (status == cudaSuccess)
        {
            status = cudaMemcpy(
                base + baseWeightBytes + baseBiasBytes, mWaveletWeight.data(), waveletBytes, cudaMemcpyHostToDevice);
        }
        if (status != cudaSuccess)
        {
            error = std::string("copying the weights to the device failed: ") + cudaGetErrorString(status);
            return false;
        }
        mDevice = std::move(weights);
        return true;
    }
    catch (std::exception const& e)
    {
        error = e.what();
    }
    return false;
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
        checkInputDims(in[0].dims, channels(), "onShapeChange: input 0");
        if (!kernelsSupport(in[0].type, channels(), mKernelSize, mLevels, mStride))
        {
            fail(std::string("onShapeChange: input 0: expected float32, float16 or bfloat16, given ")
                + dataTypeName(in[0].type));
        }
        if (out[0].type != in[0].type)
        {
            fail(std::string("onShapeChange: output 0: expected the input's dtype ") + dataTypeName(in[0].type)
                + ", given " + dataTypeName(out[0].type));
        }
        nvinfer1::Dims expected = in[0].dims;
        expected.d[2] = outputSize(in[0].dims.d[2], mStride);
        expected.d[3] = outputSize(in[0].dims.d[3], mStride);
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
        // Weights normally reached the device in attachToContext; this is the fallback, still outside enqueue.
        std::string error;
        if (!ensureDeviceWeights(error))
        {
            fail("onShapeChange: " + error);
        }
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
        if (dims.nbDims != 4 || dims.d[1] != channels())
        {
            report(std::string(kWHO) + ": enqueue: input 0: expected (N, " + std::to_string(channels())
                + ", H, W), given " + dimsString(dims));
            return -1;
        }
        if (dims.d[0] == 0 || dims.d[2] == 0 || dims.d[3] == 0)
        {
            return 0; // empty tensor: nothing to compute
        }
        int32_t device = -1;
        if (mDevice == nullptr || cudaGetDevice(&device) != cudaSuccess || device != mDevice->device)
        {
            report(std::string(kWHO)
                + ": enqueue: the weights are not on the current device (attachToContext / "
                  "onShapeChange did not run or failed); nothing launched");
            return -1;
        }
        WTConvParams p;
        if (!toKernelType(inputDesc[0].type, p.dtype) || outputDesc[0].type != inputDesc[0].type)
        {
            report(std::string(kWHO) + ": enqueue: unsupported dtypes " + dataTypeName(inputDesc[0].type) + " -> "
                + dataTypeName(outputDesc[0].type));
            return -1;
        }
        p.batch = dims.d[0];
        p.channels = dims.d[1];
        p.height = dims.d[2];
        p.width = dims.d[3];
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
        if (!plugin->ensureDeviceWeights(error))
        {
            // Not fatal here (a context may be created before its device is usable); onShapeChange retries
            // and fails loudly, enqueue refuses to launch.
            reportWarning((std::string(kWHO) + ": attachToContext: weights not uploaded yet (" + error
                + "); onShapeChange will retry")
                    .c_str());
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

namespace
{

struct ParsedFields
{
    PluginField const* kernelSize{nullptr};
    PluginField const* levels{nullptr};
    PluginField const* stride{nullptr};
    PluginField const* baseWeight{nullptr};
    PluginField const* baseBias{nullptr};
    PluginField const* waveletWeight{nullptr};
    PluginField const* serializationVersion{nullptr};
    PluginField const* checksum{nullptr};
};

int32_t readInt(PluginField const& f)
{
    std::string const name = f.name;
    if (f.type != PluginFieldType::kINT32 && f.type != PluginFieldType::kINT64)
    {
        fail("field '" + name + "': expected type kINT32 (one integer), given " + fieldTypeName(f.type));
    }
    if (f.length != 1)
    {
        fail("field '" + name + "': expected length 1, given " + std::to_string(f.length));
    }
    if (f.data == nullptr)
    {
        fail("field '" + name + "': expected one integer, given a null data pointer");
    }
    if (f.type == PluginFieldType::kINT32)
    {
        int32_t v;
        std::memcpy(&v, f.data, sizeof(v));
        return v;
    }
    int64_t v;
    std::memcpy(&v, f.data, sizeof(v));
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    {
        fail("field '" + name + "': expected a value that fits int32, given " + std::to_string(v));
    }
    return static_cast<int32_t>(v);
}

std::vector<float> readFloats(PluginField const& f, int64_t expectedLength, std::string const& expectation)
{
    std::string const name = f.name;
    if (f.type != PluginFieldType::kFLOAT32 && f.type != PluginFieldType::kFLOAT16)
    {
        fail("field '" + name + "': expected type kFLOAT32 (or kFLOAT16), given " + fieldTypeName(f.type));
    }
    // Check the length before reading a single element, so a short (corrupted) field is never read
    // past its end.
    if (static_cast<int64_t>(f.length) != expectedLength)
    {
        fail("field '" + name + "': expected length " + expectation + " = " + std::to_string(expectedLength)
            + ", given " + std::to_string(f.length));
    }
    if (f.data == nullptr)
    {
        fail("field '" + name + "': expected " + std::to_string(expectedLength) + " values, given a null data pointer");
    }
    std::vector<float> out(static_cast<size_t>(expectedLength));
    if (f.type == PluginFieldType::kFLOAT32)
    {
        std::memcpy(out.data(), f.data, out.size() * sizeof(float));
    }
    else
    {
        unsigned char const* bytes = static_cast<unsigned char const*>(f.data);
        for (size_t i = 0; i < out.size(); ++i)
        {
            uint16_t h;
            std::memcpy(&h, bytes + i * sizeof(uint16_t), sizeof(h));
            out[i] = halfToFloat(h);
        }
    }
    return out;
}

ParsedFields collectFields(PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase)
{
    if (fc == nullptr)
    {
        fail("createPlugin: expected a PluginFieldCollection, given null");
    }
    if (fc->nbFields < 0 || (fc->nbFields > 0 && fc->fields == nullptr))
    {
        fail("createPlugin: expected nbFields >= 0 and a fields array, given nbFields " + std::to_string(fc->nbFields)
            + (fc->fields == nullptr ? " and a null fields pointer" : ""));
    }
    ParsedFields parsed;
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        if (f.name == nullptr)
        {
            fail("createPlugin: field #" + std::to_string(i) + " has no name");
        }
        std::string const name = f.name;
        PluginField const** slot = nullptr;
        if (name == contract::kFIELD_KERNEL_SIZE)
            slot = &parsed.kernelSize;
        else if (name == contract::kFIELD_WT_LEVELS)
            slot = &parsed.levels;
        else if (name == contract::kFIELD_STRIDE)
            slot = &parsed.stride;
        else if (name == contract::kFIELD_BASE_WEIGHT)
            slot = &parsed.baseWeight;
        else if (name == contract::kFIELD_BASE_BIAS)
            slot = &parsed.baseBias;
        else if (name == contract::kFIELD_WAVELET_WEIGHT)
            slot = &parsed.waveletWeight;
        else if (name == contract::kFIELD_SERIALIZATION_VERSION)
            slot = &parsed.serializationVersion;
        else if (name == contract::kFIELD_WEIGHTS_CHECKSUM)
            slot = &parsed.checksum;
        else if (name == contract::kFIELD_PLUGIN_VERSION || name == contract::kFIELD_PLUGIN_NAMESPACE)
            continue; // consumed by the ONNX parser to find this creator; may be passed on (kCHAR)
        else
        {
            fail("createPlugin: unknown field '" + name + "' (#" + std::to_string(i) + "); expected one of "
                + contract::kFIELD_KERNEL_SIZE + ", " + contract::kFIELD_WT_LEVELS + ", " + contract::kFIELD_STRIDE
                + ", " + contract::kFIELD_BASE_WEIGHT + ", " + contract::kFIELD_BASE_BIAS + ", "
                + contract::kFIELD_WAVELET_WEIGHT);
        }
        if (*slot != nullptr)
        {
            fail("createPlugin: field '" + name + "' given twice (#" + std::to_string(i) + ")");
        }
        *slot = &f;
    }
    std::pair<PluginField const*, char const*> const required[] = {{parsed.kernelSize, contract::kFIELD_KERNEL_SIZE},
        {parsed.levels, contract::kFIELD_WT_LEVELS}, {parsed.stride, contract::kFIELD_STRIDE},
        {parsed.baseWeight, contract::kFIELD_BASE_WEIGHT}, {parsed.baseBias, contract::kFIELD_BASE_BIAS},
        {parsed.waveletWeight, contract::kFIELD_WAVELET_WEIGHT}};
    for (auto const& r : required)
    {
        if (r.first == nullptr)
        {
            fail(std::string("createPlugin: missing field '") + r.second + "' (the ONNX node attribute of that name)");
        }
    }
    if (phase == nvinfer1::TensorRTPhase::kRUNTIME)
    {
        if (parsed.serializationVersion == nullptr || parsed.checksum == nullptr)
        {
            fail(std::string("createPlugin (deserializing an engine): missing field '")
                + (parsed.serializationVersion == nullptr ? contract::kFIELD_SERIALIZATION_VERSION
                                                          : contract::kFIELD_WEIGHTS_CHECKSUM)
                + "': the engine was not built by this plugin version or is corrupted; rebuild it");
        }
    }
    return parsed;
}

} // namespace

WTConvPluginCreator::WTConvPluginCreator()
    : mNamespace(contract::kPLUGIN_NAMESPACE)
{
    // What the ONNX parser should collect from the node (length 0: any length, checked in createPlugin).
    mFieldNames.emplace_back(contract::kFIELD_KERNEL_SIZE, nullptr, PluginFieldType::kINT32, 1);
    mFieldNames.emplace_back(contract::kFIELD_WT_LEVELS, nullptr, PluginFieldType::kINT32, 1);
    mFieldNames.emplace_back(contract::kFIELD_STRIDE, nullptr, PluginFieldType::kINT32, 1);
    mFieldNames.emplace_back(contract::kFIELD_BASE_WEIGHT, nullptr, PluginFieldType::kFLOAT32, 0);
    mFieldNames.emplace_back(contract::kFIELD_BASE_BIAS, nullptr, PluginFieldType::kFLOAT32, 0);
    mFieldNames.emplace_back(contract::kFIELD_WAVELET_WEIGHT, nullptr, PluginFieldType::kFLOAT32, 0);
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
        ParsedFields const f = collectFields(fc, phase);
        int32_t const k = readInt(*f.kernelSize);
        if (k < 1 || k > contract::kMAX_KERNEL_SIZE || k % 2 == 0)
        {
            fail(std::string("field '") + contract::kFIELD_KERNEL_SIZE + "': expected an odd integer in 1.."
                + std::to_string(contract::kMAX_KERNEL_SIZE) + ", given " + std::to_string(k));
        }
        int32_t const levels = readInt(*f.levels);
        if (levels < 1 || levels > contract::kMAX_WT_LEVELS)
        {
            fail(std::string("field '") + contract::kFIELD_WT_LEVELS + "': expected an integer in 1.."
                + std::to_string(contract::kMAX_WT_LEVELS) + ", given " + std::to_string(levels));
        }
        int32_t const stride = readInt(*f.stride);
        if (stride < 1)
        {
            fail(std::string("field '") + contract::kFIELD_STRIDE + "': expected an integer >= 1, given "
                + std::to_string(stride));
        }
        // base_bias defines C; the other weights must fit it.
        PluginField const& bias = *f.baseBias;
        if (bias.length < 1)
        {
            fail(std::string("field '") + contract::kFIELD_BASE_BIAS
                + "': expected length C >= 1 (one value per channel), given " + std::to_string(bias.length));
        }
        int64_t const c = bias.length;
        int64_t const kk = static_cast<int64_t>(k) * k;
        std::vector<float> baseBias = readFloats(bias, c, "C");
        std::vector<float> baseWeight = readFloats(*f.baseWeight, c * kk,
            "C*k*k with C=" + std::to_string(c) + " (length of base_bias), k=" + std::to_string(k));
        std::vector<float> waveletWeight = readFloats(*f.waveletWeight, levels * 4 * c * kk,
            "L*4C*k*k with L=" + std::to_string(levels) + ", C=" + std::to_string(c) + ", k=" + std::to_string(k));

        if (f.serializationVersion != nullptr)
        {
            int32_t const version = readInt(*f.serializationVersion);
            if (version != contract::kSERIALIZATION_VERSION)
            {
                fail(std::string("field '") + contract::kFIELD_SERIALIZATION_VERSION + "': expected "
                    + std::to_string(contract::kSERIALIZATION_VERSION) + ", given " + std::to_string(version)
                    + "; rebuild the engine with this plugin library");
            }
        }
        if (f.checksum != nullptr)
        {
            int32_t const stored = readInt(*f.checksum);
            int32_t const actual = weightsChecksum(baseWeight, baseBias, waveletWeight);
            if (stored != actual)
            {
                fail(std::string("field '") + contract::kFIELD_WEIGHTS_CHECKSUM + "': expected "
                    + std::to_string(actual) + " (computed from the weight fields), given " + std::to_string(stored)
                    + "; the serialized weights are corrupted");
            }
        }
        auto plugin = std::make_unique<WTConvPlugin>(
            k, levels, stride, std::move(baseWeight), std::move(baseBias), std::move(waveletWeight));
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
    return nullptr;
}

} // namespace trt
} // namespace wtconv
