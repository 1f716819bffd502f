// wtconvPluginFieldsCapi.cpp — the field decoder (wtconvPluginFields.h) behind an extern "C" function, so tests
// can drive it with generated field sets (ctypes) without TensorRT or a plugin library: libwtconv_plugin_fields.so.
//
//   int32_t wtconvDecodePluginFields(int32_t nbFields, char const* const* names, int32_t const* types,
//       int32_t const* lengths, void const* const* data, int32_t runtimePhase, int32_t* kernelSize,
//       int32_t* levels, int32_t* stride, int64_t* channels, int32_t* channelsLast, char* message,
//       size_t messageBytes);
//
// Field i is {names[i], data[i], (PluginFieldType) types[i], lengths[i]}, exactly as a PluginFieldCollection
// would carry it; runtimePhase != 0 decodes as TensorRTPhase::kRUNTIME (an engine being deserialized). Returns 0
// and writes the decoded configuration (any out pointer may be null), or 1 and writes createPlugin's message
// into message[0..messageBytes) when message is not null. Never throws.
#include "wtconvPluginFields.h"

#include <cstdio>
#include <exception>
#include <vector>

extern "C" __attribute__((visibility("default"))) int32_t wtconvDecodePluginFields(int32_t nbFields,
    char const* const* names, int32_t const* types, int32_t const* lengths, void const* const* data,
    int32_t runtimePhase, int32_t* kernelSize, int32_t* levels, int32_t* stride, int64_t* channels,
    int32_t* channelsLast, char* message, size_t messageBytes)
{
    auto write = [message, messageBytes](char const* text)
    {
        if (message != nullptr && messageBytes > 0)
        {
            std::snprintf(message, messageBytes, "%s", text);
        }
    };
    try
    {
        std::vector<nvinfer1::PluginField> fields;
        for (int32_t i = 0;
            i < nbFields && names != nullptr && types != nullptr && lengths != nullptr && data != nullptr; ++i)
        {
            fields.emplace_back(names[i], data[i], static_cast<nvinfer1::PluginFieldType>(types[i]), lengths[i]);
        }
        nvinfer1::PluginFieldCollection fc{};
        fc.nbFields = nbFields;
        fc.fields = fields.empty() ? nullptr : fields.data();
        wtconv::trt::LayerFields const f = wtconv::trt::decodeFields(
            &fc, runtimePhase != 0 ? nvinfer1::TensorRTPhase::kRUNTIME : nvinfer1::TensorRTPhase::kBUILD);
        if (kernelSize != nullptr)
            *kernelSize = f.kernelSize;
        if (levels != nullptr)
            *levels = f.levels;
        if (stride != nullptr)
            *stride = f.stride;
        if (channels != nullptr)
            *channels = static_cast<int64_t>(f.baseBias.size());
        if (channelsLast != nullptr)
            *channelsLast = f.channelsLast ? 1 : 0;
        write("");
        return 0;
    }
    catch (std::exception const& e)
    {
        write(e.what());
    }
    catch (...)
    {
        write("WTConv2d plugin: unknown exception while decoding the fields");
    }
    return 1;
}

// FNV-1a checksum of fp32 weights as the plugin serializes it (wtconv_weights_checksum), for building valid
// runtime-phase field sets in tests.
extern "C" __attribute__((visibility("default"))) int32_t wtconvPluginWeightsChecksum(float const* baseWeight,
    int64_t baseWeightCount, float const* baseBias, int64_t baseBiasCount, float const* waveletWeight,
    int64_t waveletWeightCount)
{
    try
    {
        std::vector<float> const w(baseWeight, baseWeight + baseWeightCount);
        std::vector<float> const b(baseBias, baseBias + baseBiasCount);
        std::vector<float> const v(waveletWeight, waveletWeight + waveletWeightCount);
        return wtconv::trt::weightsChecksum(w, b, v);
    }
    catch (...)
    {
        return 0;
    }
}
