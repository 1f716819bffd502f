// The fixed-geometry whole-plane kernels for float I/O (see wtconvFixedPlane.cu).
#include "wtconvFixedPlaneLaunch.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_FIXED(float)
} // namespace detail
} // namespace wtconv
