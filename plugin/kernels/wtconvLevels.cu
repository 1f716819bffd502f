// Level passes l >= 2 (fp32 workspace in and out, every I/O dtype shares them; see wtconvKernel.cu).
#include "wtconvKernelImpl.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_LEVEL(float, float, false)
} // namespace detail
} // namespace wtconv
