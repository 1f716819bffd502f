// wtconvOrtOps.cpp — the OrtCustomOp members the CPU and CUDA ops share (see wtconvOrtOps.h).
#include "wtconvOrtOps.h"

#include "wtconvOrtShape.h"
#include "wtconvPluginContract.h"

#include <cstring>

namespace wtconv
{
namespace ort
{

void describeOp(OrtCustomOp& op)
{
    std::memset(&op, 0, sizeof(op)); // members after kORT_API_VERSION's stay null; ONNX Runtime does not read them
    op.version = kORT_API_VERSION;
    op.GetName = [](OrtCustomOp const*) -> char const* { return contract::kPLUGIN_NAME; };
    op.GetInputTypeCount = [](OrtCustomOp const*) -> size_t { return 1; };
    op.GetOutputTypeCount = [](OrtCustomOp const*) -> size_t { return 1; };
    op.GetInputType = [](OrtCustomOp const*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; };
    op.GetOutputType = [](OrtCustomOp const*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; };
    op.GetInputCharacteristic = [](OrtCustomOp const*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    op.GetOutputCharacteristic = [](OrtCustomOp const*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    op.GetInputMemoryType = [](OrtCustomOp const*, size_t) { return OrtMemTypeDefault; };
    op.GetVariadicInputMinArity = [](OrtCustomOp const*) { return 1; };
    op.GetVariadicInputHomogeneity = [](OrtCustomOp const*) { return 1; };
    op.GetVariadicOutputMinArity = [](OrtCustomOp const*) { return 1; };
    op.GetVariadicOutputHomogeneity = [](OrtCustomOp const*) { return 1; };
    // Version 17 has the shape-inference member; ONNX Runtime builds the op's schema from the first op registered
    // under the name, so both ops carry it.
    op.InferOutputShapeFn = inferOutputShape;
}

} // namespace ort
} // namespace wtconv
