// wtconvPluginFields.cpp — decoding and validating the plugin fields (see wtconvPluginFields.h).
#include "wtconvPluginFields.h"

#include "wtconvPluginContract.h"

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace wtconv
{
namespace trt
{

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;

namespace
{

[[noreturn]] void fail(std::string const& message)
{
    throw std::invalid_argument("WTConv2d plugin: " + message);
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

LayerFields decodeFields(PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase)
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
    std::vector<float> baseWeight = readFloats(
        *f.baseWeight, c * kk, "C*k*k with C=" + std::to_string(c) + " (length of base_bias), k=" + std::to_string(k));
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
            fail(std::string("field '") + contract::kFIELD_WEIGHTS_CHECKSUM + "': expected " + std::to_string(actual)
                + " (computed from the weight fields), given " + std::to_string(stored)
                + "; the serialized weights are corrupted");
        }
    }
    LayerFields out;
    out.kernelSize = k;
    out.levels = levels;
    out.stride = stride;
    out.baseWeight = std::move(baseWeight);
    out.baseBias = std::move(baseBias);
    out.waveletWeight = std::move(waveletWeight);
    return out;
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

std::vector<PluginField> parserFieldNames()
{
    std::vector<PluginField> names;
    names.emplace_back(contract::kFIELD_KERNEL_SIZE, nullptr, PluginFieldType::kINT32, 1);
    names.emplace_back(contract::kFIELD_WT_LEVELS, nullptr, PluginFieldType::kINT32, 1);
    names.emplace_back(contract::kFIELD_STRIDE, nullptr, PluginFieldType::kINT32, 1);
    names.emplace_back(contract::kFIELD_BASE_WEIGHT, nullptr, PluginFieldType::kFLOAT32, 0);
    names.emplace_back(contract::kFIELD_BASE_BIAS, nullptr, PluginFieldType::kFLOAT32, 0);
    names.emplace_back(contract::kFIELD_WAVELET_WEIGHT, nullptr, PluginFieldType::kFLOAT32, 0);
    return names;
}

} // namespace trt
} // namespace wtconv
