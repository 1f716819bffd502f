// wtconvPluginEntry.cpp — entry points of the dynamically loaded plugin library (libwtconv_trt_plugin_dynamic.so),
// for `trtexec --dynamicPlugins=...` and IPluginRegistry::loadLibrary (docs/design.md §5).
//
// TensorRT dlopen()s the library and calls exactly two exported functions (the pattern of TensorRT's
// plugin/vc/vfcCommon.cpp): setLoggerFinder, to hand over its logger, and getCreators, to register the
// creators itself. Everything else is hidden by exports/wtconv_trt_plugin_dynamic.map, and the library
// does not link libnvinfer (no static registration here, so loadLibrary registers the creator once).
#include "wtconvPlugin.h"
#include "wtconvPluginAbi.h"

#include <exception>
#include <mutex>

// TENSORRTAPI is empty unless TENSORRT_BUILD_LIB is defined (it is TensorRT's own export macro); the
// library is compiled with hidden visibility, so the two entry points are exported explicitly.
#define WTCONV_PLUGIN_EXPORT __attribute__((visibility("default")))

// What this library is, for readers that must not load it (wtconvPluginAbi.h).
WTCONV_DEFINE_PLUGIN_ABI_RECORD("dynamic", "");

namespace
{

std::mutex gLoggerMutex;
nvinfer1::ILoggerFinder* gLoggerFinder{nullptr};

} // namespace

namespace wtconv
{
namespace trt
{

nvinfer1::ILogger* getPluginLogger() noexcept
{
    try
    {
        std::lock_guard<std::mutex> lock(gLoggerMutex);
        return gLoggerFinder != nullptr ? gLoggerFinder->findLogger() : nullptr;
    }
    catch (...)
    {
        return nullptr;
    }
}

} // namespace trt
} // namespace wtconv

// Neither entry point lets an exception reach TensorRT.
extern "C" WTCONV_PLUGIN_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    try
    {
        // Keep the first non-null finder, as TensorRT's own plugin libraries do (plugin/vc/vfcCommon.cpp): a
        // later call, or one with nullptr, must not take away the logger of the TensorRT that loaded us.
        std::lock_guard<std::mutex> lock(gLoggerMutex);
        if (gLoggerFinder == nullptr && finder != nullptr)
        {
            gLoggerFinder = finder;
        }
    }
    catch (...)
    {
    }
}

extern "C" WTCONV_PLUGIN_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    nbCreators = 0;
    try
    {
        static wtconv::trt::WTConvPluginCreator sCreator;
        static nvinfer1::IPluginCreatorInterface* const kCreators[] = {&sCreator};
        nbCreators = static_cast<int32_t>(sizeof(kCreators) / sizeof(kCreators[0]));
        return kCreators;
    }
    catch (std::exception const& e)
    {
        wtconv::trt::reportError(nullptr, e.what());
    }
    return nullptr;
}
