// wtconvPluginFields.h — decoding and validating the WTConv2d plugin fields (the ONNX node's attributes, or the
// fields an engine serialized), independent of the plugin object so it can be tested on its own.
//
// The field set is the ONNX <-> plugin contract (wtconvPluginContract.h; docs/design.md §4). TensorRT's ONNX
// parser hands INT attributes over as one-element kINT32 fields and FLOATS attributes as kFLOAT32 fields; kINT64
// and kFLOAT16 are accepted too.
#pragma once

#include "NvInferRuntime.h"

#include <cstdint>
#include <vector>

namespace wtconv
{
namespace trt
{

// One layer's configuration and folded fp32 weights, validated: k odd in 1..kMAX_KERNEL_SIZE, levels in
// 1..kMAX_WT_LEVELS, stride >= 1, C = baseBias.size() >= 1, baseWeight C*k*k, waveletWeight L*4C*k*k.
struct LayerFields
{
    int32_t kernelSize{0};
    int32_t levels{0};
    int32_t stride{0};
    std::vector<float> baseWeight;    // (C, k, k)
    std::vector<float> baseBias;      // (C)
    std::vector<float> waveletWeight; // (L, 4C, k, k)
};

// Decodes `fc` as createPlugin receives it in `phase`. In TensorRTPhase::kRUNTIME (an engine being
// deserialized) the serialization version and the weights checksum are required and checked. Throws
// std::invalid_argument with one line naming the field, what was expected and what was given (prefixed
// "WTConv2d plugin: "). Every length is checked before a single element is read, so a short field is never
// read past its end.
LayerFields decodeFields(nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase);

// The fields the creator asks the ONNX parser to collect (getFieldNames): the six contract fields, with null
// data (length 0 for the weights: any length, checked by decodeFields).
std::vector<nvinfer1::PluginField> parserFieldNames();

// FNV-1a over the bytes of the weights, as int32 (the serialized checksum field).
int32_t weightsChecksum(std::vector<float> const& baseWeight, std::vector<float> const& baseBias,
    std::vector<float> const& waveletWeight) noexcept;

} // namespace trt
} // namespace wtconv
