// wtconvPluginFields.cpp — TensorRT plugin fields to the shared decoder (see wtconvPluginFields.h).
#include "wtconvPluginFields.h"

#include "wtconvPluginContract.h"

#include <string>

namespace wtconv
{
namespace trt
{

using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;

namespace
{

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

FieldType fieldType(PluginFieldType type) noexcept
{
    switch (type)
    {
    case PluginFieldType::kINT32: return FieldType::kINT32;
    case PluginFieldType::kINT64: return FieldType::kINT64;
    case PluginFieldType::kFLOAT32: return FieldType::kFLOAT32;
    case PluginFieldType::kFLOAT16: return FieldType::kFLOAT16;
    default: return FieldType::kOTHER;
    }
}

FieldVocabulary const& vocabulary()
{
    static FieldVocabulary const words{
        "WTConv2d plugin", "createPlugin", "kINT32 (one integer)", "kFLOAT32 (or kFLOAT16)"};
    return words;
}

} // namespace

LayerFields decodeFields(PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase)
{
    FieldVocabulary const& words = vocabulary();
    if (fc == nullptr)
    {
        throw FieldError(words.who + ": createPlugin: expected a PluginFieldCollection, given null");
    }
    if (fc->nbFields < 0 || (fc->nbFields > 0 && fc->fields == nullptr))
    {
        throw FieldError(words.who + ": createPlugin: expected nbFields >= 0 and a fields array, given nbFields "
            + std::to_string(fc->nbFields) + (fc->fields == nullptr ? " and a null fields pointer" : ""));
    }
    std::vector<FieldView> views;
    views.reserve(static_cast<size_t>(fc->nbFields));
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        views.push_back(FieldView{f.name, f.data, fieldType(f.type), f.length, fieldTypeName(f.type)});
    }
    return decodeLayerFields(
        views.data(), static_cast<int64_t>(views.size()), phase == nvinfer1::TensorRTPhase::kRUNTIME, words);
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
    names.emplace_back(contract::kFIELD_CHANNELS_LAST, nullptr, PluginFieldType::kINT32, 1);
    return names;
}

} // namespace trt
} // namespace wtconv
