// wtconvLayerFields.h — decoding and validating the fields of one WTConv2d node, for every runtime that reads it.
//
// The fields are the ONNX node's attributes (docs/design.md §4; names and limits in wtconvPluginContract.h). Each
// runtime describes what it was given as FieldViews — the TensorRT plugin from its PluginFieldCollection
// (wtconvPluginFields.h), the ONNX Runtime op from the node's attributes (plugin/onnxruntime) — and calls
// decodeLayerFields, so a malformed node is refused by the same checks with the same message everywhere. Only the
// words that name the runtime's own types and the message prefix differ (FieldVocabulary).
//
// No runtime headers here: the C++ standard library only.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace wtconv
{

// One layer's configuration and folded fp32 weights, validated: k odd in 1..kMAX_KERNEL_SIZE, levels in
// 1..kMAX_WT_LEVELS, stride >= 1, C = baseBias.size() >= 1, baseWeight C*k*k, waveletWeight L*4C*k*k.
struct LayerFields
{
    int32_t kernelSize{0};
    int32_t levels{0};
    int32_t stride{0};
    bool channelsLast{false};         // the optional field channels_last: x (N, H, W, C) and y (N, H', W', C)
    std::vector<float> baseWeight;    // (C, k, k)
    std::vector<float> baseBias;      // (C)
    std::vector<float> waveletWeight; // (L, 4C, k, k)
};

// The element types the decoder can read; anything else is kOTHER (refused, named by FieldView::typeName).
enum class FieldType : int32_t
{
    kINT32,
    kINT64,
    kFLOAT32,
    kFLOAT16, // IEEE binary16, converted to fp32 on reading
    kOTHER,
};

// One field as a runtime holds it. `data` points at `length` elements of `type` (host memory, any alignment);
// `typeName` is the runtime's own name for the type ("kINT32", "FLOATS", ...), quoted when the type is wrong.
struct FieldView
{
    char const* name{nullptr};
    void const* data{nullptr};
    FieldType type{FieldType::kOTHER};
    int64_t length{0};
    char const* typeName{""};
};

// The words a runtime's messages use: "<who>: field 'k': expected type <intType>, given <typeName>".
struct FieldVocabulary
{
    std::string who;       // message prefix, e.g. "WTConv2d plugin"
    std::string context;   // what receives the whole set, e.g. "createPlugin"
    std::string intType;   // how an integer field should be given, e.g. "kINT32 (one integer)"
    std::string floatType; // how a weight field should be given, e.g. "kFLOAT32 (or kFLOAT16)"
};

// A malformed field set: what() is one line starting with the vocabulary's `who`, naming the field, what was
// expected and what was given.
class FieldError : public std::invalid_argument
{
public:
    using std::invalid_argument::invalid_argument;
};

// Decodes `count` fields. Every length is checked before a single element is read, so a short field is never read
// past its end. channels_last is optional (absent: 0). `deserializing` (a TensorRT engine being loaded) requires the serialization version and weights
// checksum fields and checks them; they may be present otherwise and are then checked too. The parser's lookup
// fields plugin_version / plugin_namespace are skipped. Throws FieldError.
LayerFields decodeLayerFields(FieldView const* fields, int64_t count, bool deserializing, FieldVocabulary const& words);

// FNV-1a over the bytes of the weights, as int32 (the serialized checksum field).
int32_t weightsChecksum(std::vector<float> const& baseWeight, std::vector<float> const& baseBias,
    std::vector<float> const& waveletWeight) noexcept;

} // namespace wtconv
