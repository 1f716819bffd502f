// The fixed-geometry whole-plane kernels for __nv_bfloat16 I/O (see wtconvFixedPlane.cu).
#include "wtconvFixedPlaneLaunch.cuh"

namespace wtconv
{
namespace detail
{
WTCONV_DEFINE_LAUNCH_FIXED(__nv_bfloat16)
} // namespace detail
} // namespace wtconv
