// Output pass, pooling, transposes and the whole-plane kernels for fp16 I/O (see wtconvKernel.cu).
#include "wtconvKernelImpl.cuh"
#include "wtconvTranspose.cuh"
#include "wtconvWholePlane.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_LEVEL(__half, __half, true)
WTCONV_DEFINE_LAUNCH_POOL(__half)
WTCONV_DEFINE_LAUNCH_SMALL(__half)
WTCONV_DEFINE_LAUNCH_TRANSPOSE(__half)
} // namespace detail
} // namespace wtconv
