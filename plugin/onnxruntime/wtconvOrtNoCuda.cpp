// wtconvOrtNoCuda.cpp — a build without nvcc has no CUDA op (wtconvOrtOps.h).
#include "wtconvOrtOps.h"

namespace wtconv
{
namespace ort
{

OrtCustomOp const* cudaOp()
{
    return nullptr;
}

} // namespace ort
} // namespace wtconv
