// wtconvOrtNode.h — one wtconv::WTConv2d node as the ONNX Runtime op sees it: its attributes decoded by the shared
// field decoder (plugin/common/wtconvLayerFields.h, the TensorRT plugin's), its input type, and the run-time checks
// of the tensor it is given. Shared by the CPU and CUDA ops.
#pragma once

#include "wtconvLayerFields.h"
#include "wtconvOrtSupport.h"

#include <cstdint>
#include <string>

namespace wtconv
{
namespace ort
{

struct NodeConfig
{
    std::string who; // "WTConv2d node '<name>'": the prefix of every message about this node
    LayerFields fields;
    // The input's element type when the model declares it (float32 or float16), else UNDEFINED (checked per run).
    ONNXTensorElementDataType type{ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED};
};

// Reads and validates the node behind `info` (at session creation). Throws OrtError(ORT_INVALID_GRAPH) with one
// line naming the node and the field (attribute) at fault, what was expected and what was given.
NodeConfig readNode(OrtKernelInfo const* info);

struct RunShape
{
    ONNXTensorElementDataType type{ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED};
    int64_t batch{0};
    int64_t height{0};
    int64_t width{0};
    int64_t outHeight{0};
    int64_t outWidth{0};

    int64_t elements() const
    {
        return batch * height * width; // times C
    }
};

// Checks the input tensor of one run against the node (rank 4, C in dim 1, or dim 3 for channels_last = 1, element
// type). Throws OrtError(ORT_INVALID_ARGUMENT) naming the node and what does not fit.
RunShape checkInput(NodeConfig const& node, TensorDescription const& input);

// One run's tensors: input 0 read and checked, output 0 allocated as (B, C, ceil(H/s), ceil(W/s)), or
// (B, ceil(H/s), ceil(W/s), C) for channels_last = 1.
struct RunTensors
{
    RunShape shape;
    OrtValue const* inputValue{nullptr};
    void const* input{nullptr}; // both null when the output is empty (B, H or W is 0): nothing to compute
    void* output{nullptr};
};
RunTensors prepareRun(NodeConfig const& node, OrtKernelContext* context);

} // namespace ort
} // namespace wtconv
