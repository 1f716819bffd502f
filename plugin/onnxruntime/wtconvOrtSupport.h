// wtconvOrtSupport.h — what every part of the ONNX Runtime op shares: the C API table, errors, and the parts of a
// kernel context each op reads (docs/onnx_runtime.md).
//
// The library asks ONNX Runtime for C API version kORT_API_VERSION, the lowest with every function it needs:
// KernelContext_ParallelFor and the shape-inference functions (OrtCustomOp::InferOutputShapeFn, ShapeInferContext_*,
// ReadOpAttr, SetSymbolicDimensions) arrived in 17; the newest others are KernelComputeV2/CreateKernelV2 in
// OrtCustomOp (16), KernelInfo_GetNodeName and KernelContext_GetAllocator (15), KernelInfo_GetInputTypeInfo and
// KernelInfoGetAttribute_tensor (14), KernelContext_GetGPUComputeStream and GetTensorMemoryInfo (10), the
// attribute-list readers (8); the rest are of version 1 (docs/onnx_runtime.md, "Versions"). The OrtApi table only
// grows, so the library loads in every ONNX Runtime from 1.17 on; each OrtCustomOp says the same version, and ONNX
// Runtime reads only the OrtCustomOp members that version has.
#pragma once

#include "onnxruntime_c_api.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

static_assert(ORT_API_VERSION >= 17, "wtconv_ort needs the ONNX Runtime C API headers of 1.17 or newer");

namespace wtconv
{
namespace ort
{

#define WTCONV_ORT_API_VERSION 17 // also spelled out in the library's info record (wtconvOrtEntry.cpp)
constexpr uint32_t kORT_API_VERSION = WTCONV_ORT_API_VERSION;

// The table of the ONNX Runtime that loaded the library (set once by RegisterCustomOps).
OrtApi const& api();
void setApi(OrtApi const* table);

// Functions of a later version than kORT_API_VERSION are used only where the running ONNX Runtime has them, through
// this table: version 18's (ONNX Runtime 1.18 and newer; KernelInfoGetAllocator, KernelContext_GetScratchBuffer),
// else null, and the caller takes its fallback (docs/onnx_runtime.md, "Versions").
constexpr uint32_t kORT_API_VERSION_SCRATCH = 18;
OrtApi const* api18();
void setApi18(OrtApi const* table);

// An error to hand back to ONNX Runtime as an OrtStatus (never thrown across the C boundary).
class OrtError : public std::runtime_error
{
public:
    OrtError(OrtErrorCode code, std::string const& message)
        : std::runtime_error(message)
        , mCode(code)
    {
    }
    OrtErrorCode code() const noexcept
    {
        return mCode;
    }

private:
    OrtErrorCode mCode;
};

// Throws OrtError with ONNX Runtime's message (prefixed by `what`) when `status` is an error; releases it.
void check(OrtStatus* status, std::string const& what);

// True when `status` is success; releases it either way (for probing calls whose failure is an answer).
bool succeeded(OrtStatus* status) noexcept;

// The status for the exception being handled (inside a catch block): OrtError keeps its code, anything else is
// ORT_RUNTIME_EXCEPTION. Never throws.
OrtStatus* statusFromCurrentException() noexcept;

// "float32", "float16", ... for messages.
char const* elementTypeName(ONNXTensorElementDataType type) noexcept;

struct TensorDescription
{
    ONNXTensorElementDataType type{ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED};
    std::vector<int64_t> dims;
};

// Element type and dims of a tensor value.
TensorDescription describe(OrtValue const* value);

// The node name ONNX Runtime holds for this kernel ("" when it has none).
std::string nodeName(OrtKernelInfo const* info);

} // namespace ort
} // namespace wtconv
