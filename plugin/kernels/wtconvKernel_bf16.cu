// Output pass, pooling, transposes and the whole-plane kernels for bf16 I/O (see wtconvKernel.cu).
#include "wtconvKernelImpl.cuh"
#include "wtconvTranspose.cuh"
#include "wtconvWholePlane.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_LEVEL(__nv_bfloat16, __nv_bfloat16, true)
WTCONV_DEFINE_LAUNCH_POOL(__nv_bfloat16)
WTCONV_DEFINE_LAUNCH_SMALL(__nv_bfloat16)
WTCONV_DEFINE_LAUNCH_TRANSPOSE(__nv_bfloat16)
} // namespace detail
} // namespace wtconv
