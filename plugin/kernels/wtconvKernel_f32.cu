// Output pass, pooling and channels-last transposes for fp32 I/O (see wtconvKernel.cu).
#include "wtconvKernelImpl.cuh"
#include "wtconvTranspose.cuh"
#include "wtconvWholePlane.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_LEVEL(float, float, true)
WTCONV_DEFINE_LAUNCH_POOL(float)
WTCONV_DEFINE_LAUNCH_SMALL(float)
WTCONV_DEFINE_LAUNCH_TRANSPOSE(float)
} // namespace detail
} // namespace wtconv
