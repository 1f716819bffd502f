// wtconvPluginFields.h — the TensorRT side of the WTConv2d field decoding: a PluginFieldCollection (the ONNX node's
// attributes as TensorRT's parser hands them over, or the fields an engine serialized) decoded by the shared
// decoder (wtconvLayerFields.h), independent of the plugin object so it can be tested on its own.
//
// The field set is the ONNX <-> plugin contract (wtconvPluginContract.h; docs/design.md §4). TensorRT's ONNX
// parser hands INT attributes over as one-element kINT32 fields and FLOATS attributes as kFLOAT32 fields; kINT64
// and kFLOAT16 are accepted too.
#pragma once

#include "NvInferRuntime.h"
#include "wtconvLayerFields.h"

#include <cstdint>
#include <vector>

namespace wtconv
{
namespace trt
{

using ::wtconv::LayerFields;
using ::wtconv::weightsChecksum;

// Decodes `fc` as createPlugin receives it in `phase`. In TensorRTPhase::kRUNTIME (an engine being
// deserialized) the serialization version and the weights checksum are required and checked. Throws
// std::invalid_argument (FieldError) with one line naming the field, what was expected and what was given
// (prefixed "WTConv2d plugin: "). Every length is checked before a single element is read, so a short field is
// never read past its end.
LayerFields decodeFields(nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase);

// The fields the creator asks the ONNX parser to collect (getFieldNames): the six required contract fields and the
// optional channels_last, with null data (length 0 for the weights: any length, checked by decodeFields).
std::vector<nvinfer1::PluginField> parserFieldNames();

} // namespace trt
} // namespace wtconv
