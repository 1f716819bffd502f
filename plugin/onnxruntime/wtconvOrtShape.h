// wtconvOrtShape.h — output type and shape inference of wtconv::WTConv2d (OrtCustomOp::InferOutputShapeFn), so that
// ONNX Runtime knows the shape of every tensor after our nodes when it optimises the graph (docs/onnx_runtime.md,
// "Shape inference").
#pragma once

#include "wtconvOrtSupport.h"

namespace wtconv
{
namespace ort
{

// y = (N, C, ceil(H/s), ceil(W/s)) for x = (N, C, H, W), or (N, ceil(H/s), ceil(W/s), C) for channels_last = 1, in
// x's element type. Known sizes stay numbers, named (symbolic) ones stay names; an input that does not fit the node
// leaves y's shape unknown (kernel creation then refuses the node with its message). Never throws.
OrtStatus* ORT_API_CALL inferOutputShape(OrtCustomOp const* op, OrtShapeInferContext* context) noexcept;

} // namespace ort
} // namespace wtconv
