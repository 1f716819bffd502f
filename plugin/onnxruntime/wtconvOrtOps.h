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

// The OrtCustomOp of a kernel class: `Kernel::kPROVIDER` (the execution provider's name), `static
// std::unique_ptr<Kernel> create(OrtKernelInfo const*)` (at session creation) and `void compute(OrtKernelContext*)`
// (each run; may be called from several threads at once). Both throw on failure; nothing crosses the C boundary
// but an OrtStatus.
template <class Kernel>
struct KernelOp : OrtCustomOp
{
    KernelOp()
        : OrtCustomOp()
    {
        describeOp(*this);
        GetExecutionProviderType = [](OrtCustomOp const*) -> char const* { return Kernel::kPROVIDER; };
        CreateKernelV2 = [](OrtCustomOp const*, OrtApi const*, OrtKernelInfo const* info, void** kernel) -> OrtStatus*
        {
            *kernel = nullptr;
            try
            {
                *kernel = Kernel::create(info).release();
                return nullptr;
            }
            catch (...)
            {
                return statusFromCurrentException();
            }
        };
        KernelComputeV2 = [](void* kernel, OrtKernelContext* context) -> OrtStatus*
        {
            try
            {
                static_cast<Kernel*>(kernel)->compute(context);
                return nullptr;
            }
            catch (...)
            {
                return statusFromCurrentException();
            }
        };
        KernelDestroy = [](void* kernel) { delete static_cast<Kernel*>(kernel); };
    }
};

} // namespace ort
} // namespace wtconv
