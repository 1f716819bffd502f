// Output pass and pooling for fp32 I/O (see wtconvKernel.cu).
#include "wtconvKernelImpl.cuh"
#include "wtconvWholePlane.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_LEVEL(float, float, true)
WTCONV_DEFINE_LAUNCH_POOL(float)
WTCONV_DEFINE_LAUNCH_SMALL(float)
} // namespace detail
} // namespace wtconv
