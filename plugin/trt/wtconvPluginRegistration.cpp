// wtconvPluginRegistration.cpp — static registration for libwtconv_trt_plugin.so, the library that
// registers itself when loaded: `polygraphy run --plugins`, Triton's LD_PRELOAD or
// `--backend-config=tensorrt,plugins=...`, ctypes.CDLL before building or deserializing.
//
// REGISTER_TENSORRT_PLUGIN runs getPluginRegistry()->registerCreator(creator, "") from a static
// initializer, and messages go to libnvinfer's getLogger(): both symbols come from libnvinfer, which this
// library links (DT_NEEDED) when CMake found it. Do not load this library with loadLibrary /
// --dynamicPlugins as well: the creator would be registered twice (use the _dynamic library there).
#include "wtconvPlugin.h"
#include "wtconvPluginAbi.h"

// What this library is, for readers that must not load it (wtconvPluginAbi.h).
WTCONV_DEFINE_PLUGIN_ABI_RECORD("static");

namespace wtconv
{
namespace trt
{

nvinfer1::ILogger* getPluginLogger() noexcept
{
    return ::getLogger();
}

REGISTER_TENSORRT_PLUGIN(WTConvPluginCreator);

} // namespace trt
} // namespace wtconv
