// fakeTensorRT.cpp — the two libnvinfer entry points the statically registering plugin library calls,
// provided by the harness executable (ENABLE_EXPORTS) so that library can be tested without TensorRT.
#include "fakeTensorRT.h"

extern "C" TENSORRTAPI nvinfer1::IPluginRegistry* getPluginRegistry() noexcept
{
    return wtconv_harness::testRegistry();
}

extern "C" TENSORRTAPI nvinfer1::ILogger* getLogger() noexcept
{
    return &wtconv_harness::gLogger;
}
