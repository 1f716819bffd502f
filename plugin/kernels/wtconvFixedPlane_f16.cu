// The fixed-geometry whole-plane kernels for __half I/O (see wtconvFixedPlane.cu).
#include "wtconvFixedPlaneLaunch.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_FIXED(__half)
} // namespace detail
} // namespace wtconv
