// wtconvLayerFields.cpp — decoding and validating one WTConv2d node's fields (see wtconvLayerFields.h).
#include "wtconvLayerFields.h"

#include "wtconvPluginContract.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace wtconv
{

namespace
{

// IEEE half -> float (fp16 weight fields are rare; no compiler half type needed).
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

class Decoder
{
public:
    explicit Decoder(FieldVocabulary const& words)
        : mWords(words)
    {
    }

    [[noreturn]] void fail(std::string const& message) const
    {
        throw FieldError(mWords.who + ": " + message);
    }

    int32_t readInt(FieldView const& f) const
    {
        std::string const name = f.name;
        if (f.type != FieldType::kINT32 && f.type != FieldType::kINT64)
        {
            fail("field '" + name + "': expected type " + mWords.intType + ", given " + typeName(f));
        }
        if (f.length != 1)
        {
            fail("field '" + name + "': expected length 1, given " + std::to_string(f.length));
        }
        if (f.data == nullptr)
        {
            fail("field '" + name + "': expected one integer, given a null data pointer");
        }
        if (f.type == FieldType::kINT32)
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

    std::vector<float> readFloats(FieldView const& f, int64_t expectedLength, std::string const& expectation) const
    {
        std::string const name = f.name;
        if (f.type != FieldType::kFLOAT32 && f.type != FieldType::kFLOAT16)
        {
            fail("field '" + name + "': expected type " + mWords.floatType + ", given " + typeName(f));
        }
        // The length first, so a short (corrupted) field is never read past its end.
        if (f.length != expectedLength)
        {
            fail("field '" + name + "': expected length " + expectation + " = " + std::to_string(expectedLength)
                + ", given " + std::to_string(f.length));
        }
        if (f.data == nullptr)
        {
            fail("field '" + name + "': expected " + std::to_string(expectedLength)
                + " values, given a null data pointer");
        }
        std::vector<float> out(static_cast<size_t>(expectedLength));
        if (f.type == FieldType::kFLOAT32)
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

    std::string const& context() const
    {
        return mWords.context;
    }

private:
    static std::string typeName(FieldView const& f)
    {
        return f.typeName != nullptr && f.typeName[0] != '\0' ? f.typeName : "an unknown type";
    }

    FieldVocabulary const& mWords;
};

struct FoundFields
{
    FieldView const* kernelSize{nullptr};
    FieldView const* levels{nullptr};
    FieldView const* stride{nullptr};
    FieldView const* baseWeight{nullptr};
    FieldView const* baseBias{nullptr};
    FieldView const* waveletWeight{nullptr};
    FieldView const* channelsLast{nullptr};
    FieldView const* serializationVersion{nullptr};
    FieldView const* checksum{nullptr};
};

FoundFields collectFields(Decoder const& d, FieldView const* fields, int64_t count, bool deserializing)
{
    FoundFields found;
    for (int64_t i = 0; i < count; ++i)
    {
        FieldView const& f = fields[i];
        if (f.name == nullptr)
        {
            d.fail(d.context() + ": field #" + std::to_string(i) + " has no name");
        }
        std::string const name = f.name;
        FieldView const** slot = nullptr;
        if (name == contract::kFIELD_KERNEL_SIZE)
            slot = &found.kernelSize;
        else if (name == contract::kFIELD_WT_LEVELS)
            slot = &found.levels;
        else if (name == contract::kFIELD_STRIDE)
            slot = &found.stride;
        else if (name == contract::kFIELD_BASE_WEIGHT)
            slot = &found.baseWeight;
        else if (name == contract::kFIELD_BASE_BIAS)
            slot = &found.baseBias;
        else if (name == contract::kFIELD_WAVELET_WEIGHT)
            slot = &found.waveletWeight;
        else if (name == contract::kFIELD_CHANNELS_LAST)
            slot = &found.channelsLast;
        else if (name == contract::kFIELD_SERIALIZATION_VERSION)
            slot = &found.serializationVersion;
        else if (name == contract::kFIELD_WEIGHTS_CHECKSUM)
            slot = &found.checksum;
        else if (name == contract::kFIELD_PLUGIN_VERSION || name == contract::kFIELD_PLUGIN_NAMESPACE)
            continue; // consumed by the ONNX parser to find the creator; may be passed on
        else
        {
            d.fail(d.context() + ": unknown field '" + name + "' (#" + std::to_string(i) + "); expected one of "
                + contract::kFIELD_KERNEL_SIZE + ", " + contract::kFIELD_WT_LEVELS + ", " + contract::kFIELD_STRIDE
                + ", " + contract::kFIELD_BASE_WEIGHT + ", " + contract::kFIELD_BASE_BIAS + ", "
                + contract::kFIELD_WAVELET_WEIGHT + ", " + contract::kFIELD_CHANNELS_LAST);
        }
        if (*slot != nullptr)
        {
            d.fail(d.context() + ": field '" + name + "' given twice (#" + std::to_string(i) + ")");
        }
        *slot = &f;
    }
    std::pair<FieldView const*, char const*> const required[] = {{found.kernelSize, contract::kFIELD_KERNEL_SIZE},
        {found.levels, contract::kFIELD_WT_LEVELS}, {found.stride, contract::kFIELD_STRIDE},
        {found.baseWeight, contract::kFIELD_BASE_WEIGHT}, {found.baseBias, contract::kFIELD_BASE_BIAS},
        {found.waveletWeight, contract::kFIELD_WAVELET_WEIGHT}};
    for (auto const& r : required)
    {
        if (r.first == nullptr)
        {
            d.fail(d.context() + ": missing field '" + r.second + "' (the ONNX node attribute of that name)");
        }
    }
    if (deserializing && (found.serializationVersion == nullptr || found.checksum == nullptr))
    {
        d.fail(d.context() + " (deserializing an engine): missing field '"
            + (found.serializationVersion == nullptr ? contract::kFIELD_SERIALIZATION_VERSION
                                                     : contract::kFIELD_WEIGHTS_CHECKSUM)
            + "': the engine was not built by this plugin version or is corrupted; rebuild it");
    }
    return found;
}

} // namespace

LayerFields decodeLayerFields(FieldView const* fields, int64_t count, bool deserializing, FieldVocabulary const& words)
{
    Decoder const d(words);
    if (count < 0 || (count > 0 && fields == nullptr))
    {
        d.fail(words.context + ": expected a field count >= 0 and a fields array, given count " + std::to_string(count)
            + (fields == nullptr ? " and a null fields pointer" : ""));
    }
    FoundFields const f = collectFields(d, fields, count, deserializing);
    int32_t const k = d.readInt(*f.kernelSize);
    if (k < 1 || k > contract::kMAX_KERNEL_SIZE || k % 2 == 0)
    {
        d.fail(std::string("field '") + contract::kFIELD_KERNEL_SIZE + "': expected an odd integer in 1.."
            + std::to_string(contract::kMAX_KERNEL_SIZE) + ", given " + std::to_string(k));
    }
    int32_t const levels = d.readInt(*f.levels);
    if (levels < 1 || levels > contract::kMAX_WT_LEVELS)
    {
        d.fail(std::string("field '") + contract::kFIELD_WT_LEVELS + "': expected an integer in 1.."
            + std::to_string(contract::kMAX_WT_LEVELS) + ", given " + std::to_string(levels));
    }
    int32_t const stride = d.readInt(*f.stride);
    if (stride < 1)
    {
        d.fail(std::string("field '") + contract::kFIELD_STRIDE + "': expected an integer >= 1, given "
            + std::to_string(stride));
    }
    bool channelsLast = false;
    if (f.channelsLast != nullptr)
    {
        int32_t const layout = d.readInt(*f.channelsLast);
        if (layout != 0 && layout != 1)
        {
            d.fail(std::string("field '") + contract::kFIELD_CHANNELS_LAST
                + "': expected 0 (x and y are (N, C, H, W)) or 1 (channels-last: (N, H, W, C)), given "
                + std::to_string(layout));
        }
        channelsLast = layout == 1;
    }
    // base_bias defines C; the other weights must fit it.
    FieldView const& bias = *f.baseBias;
    if (bias.length < 1)
    {
        d.fail(std::string("field '") + contract::kFIELD_BASE_BIAS
            + "': expected length C >= 1 (one value per channel), given " + std::to_string(bias.length));
    }
    int64_t const c = bias.length;
    int64_t const kk = static_cast<int64_t>(k) * k;
    std::vector<float> baseBias = d.readFloats(bias, c, "C");
    std::vector<float> baseWeight = d.readFloats(
        *f.baseWeight, c * kk, "C*k*k with C=" + std::to_string(c) + " (length of base_bias), k=" + std::to_string(k));
    std::vector<float> waveletWeight = d.readFloats(*f.waveletWeight, levels * 4 * c * kk,
        "L*4C*k*k with L=" + std::to_string(levels) + ", C=" + std::to_string(c) + ", k=" + std::to_string(k));

    if (f.serializationVersion != nullptr)
    {
        int32_t const version = d.readInt(*f.serializationVersion);
        if (version != contract::kSERIALIZATION_VERSION)
        {
            d.fail(std::string("field '") + contract::kFIELD_SERIALIZATION_VERSION + "': expected "
                + std::to_string(contract::kSERIALIZATION_VERSION) + ", given " + std::to_string(version)
                + "; rebuild the engine with this plugin library");
        }
    }
    if (f.checksum != nullptr)
    {
        int32_t const stored = d.readInt(*f.checksum);
        int32_t const actual = weightsChecksum(baseWeight, baseBias, waveletWeight);
        if (stored != actual)
        {
            d.fail(std::string("field '") + contract::kFIELD_WEIGHTS_CHECKSUM + "': expected " + std::to_string(actual)
                + " (computed from the weight fields), given " + std::to_string(stored)
                + "; the serialized weights are corrupted");
        }
    }
    LayerFields out;
    out.kernelSize = k;
    out.levels = levels;
    out.stride = stride;
    out.channelsLast = channelsLast;
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

} // namespace wtconv
