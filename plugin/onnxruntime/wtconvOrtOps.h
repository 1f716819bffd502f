// wtconvOrtOps.h — the OrtCustomOp definitions of wtconv::WTConv2d: one per execution provider, the same name and
// domain (ONNX Runtime places the node on the provider that has the op; docs/onnx_runtime.md).
#pragma once

#include "wtconvOrtSupport.h"

namespace wtconv
{
namespace ort
{

// The CPU op (always built).
OrtCustomOp const* cpuOp();

// The CUDA op, or nullptr when the library was built without CUDA.
OrtCustomOp const* cudaOp();

// Fills the members both ops share: version, name, one input and one output of the same type (float32 or float16,
// checked by the kernels: declaring "any type" lets the op name the wrong type instead of ONNX Runtime's "no
// kernel found"), required, in the provider's default memory.
void describeOp(OrtCustomOp& op);

} // namespace ort
} // namespace wtconv
