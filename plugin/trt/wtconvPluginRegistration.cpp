// wtconvPluginRegistration.cpp — static registration for libwtconv_trt_plugin.so, the library that
// registers itself when loaded: `polygraphy run --plugins`, Triton's LD_PRELOAD or
// `--backend-config=tensorrt,plugins=...`, ctypes.CDLL before building or deserializing.
//
// Registering needs two libnvinfer functions: getPluginRegistry() (the registry to add the creator to) and
// getLogger() (where messages go). Built against a TensorRT install, the library links libnvinfer (DT_NEEDED) and
// registers through REGISTER_TENSORRT_PLUGIN. Built from TensorRT's headers alone (the binary wheel, the interface
// harness), it finds both when it is loaded (WTCONV_NVINFER_AT_LOAD): from the process first (a TensorRT already
// loaded with global scope, TensorRT-RTX's library preloaded, the harness's stand-ins), else by loading
// libnvinfer.so.<major> from the library path, which is what a DT_NEEDED entry would do, and which the loader
// answers with the copy already in the process when TensorRT's Python module loaded it privately. So one library
// serves every TensorRT of its major without naming a library the binary wheel cannot carry (docs/engines.md,
// "What each library needs at run time"). Without any libnvinfer it registers nothing and says so on stderr.
//
// Do not load this library with loadLibrary / --dynamicPlugins as well: the creator would be registered twice
// (use the _dynamic library there).
#include "wtconvPlugin.h"
#include "wtconvPluginAbi.h"

#if WTCONV_NVINFER_AT_LOAD
#include <dlfcn.h>

#include <cstdio>
#endif

// What this library is, for readers that must not load it (wtconvPluginAbi.h).
#if WTCONV_NVINFER_AT_LOAD
WTCONV_DEFINE_PLUGIN_ABI_RECORD("static", " libnvinfer=load");
#else
WTCONV_DEFINE_PLUGIN_ABI_RECORD("static", " libnvinfer=linked");
#endif

namespace wtconv
{
namespace trt
{

#if WTCONV_NVINFER_AT_LOAD

namespace
{

constexpr char kNvinferLibrary[] = "libnvinfer.so." WTCONV_ABI_STRINGIFY(NV_TENSORRT_MAJOR);

// A libnvinfer function by name: the process's global scope first, else libnvinfer.so.<major> (RTLD_LOCAL, as
// a DT_NEEDED entry of a library loaded privately). nullptr when neither has it; *why says what failed.
void* nvinferFunction(char const* name, char const** why) noexcept
{
    if (void* function = dlsym(RTLD_DEFAULT, name))
    {
        return function;
    }
    void* library = dlopen(kNvinferLibrary, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr)
    {
        *why = dlerror();
        return nullptr;
    }
    void* function = dlsym(library, name);
    if (function == nullptr)
    {
        *why = dlerror();
    }
    return function;
}

using GetPluginRegistry = nvinfer1::IPluginRegistry* (*)() noexcept;
using GetLogger = nvinfer1::ILogger* (*)() noexcept;

// What REGISTER_TENSORRT_PLUGIN does (NvInferRuntime.h, PluginRegistrar), with the registry found at load.
struct Registration
{
    Registration() noexcept
    {
        char const* why = "getPluginRegistry() returned no registry";
        auto const getRegistry = reinterpret_cast<GetPluginRegistry>(nvinferFunction("getPluginRegistry", &why));
        nvinfer1::IPluginRegistry* registry = getRegistry != nullptr ? getRegistry() : nullptr;
        if (registry == nullptr)
        {
            std::fprintf(stderr,
                "WTConv2d plugin (libwtconv_trt_plugin.so, TensorRT %d ABI): not registered: no TensorRT in this "
                "process and %s could not be used (%s). Load it into a process running TensorRT %d, put TensorRT's "
                "lib/ on LD_LIBRARY_PATH, or load libwtconv_trt_plugin_dynamic.so with IPluginRegistry::loadLibrary "
                "instead.\n",
                NV_TENSORRT_MAJOR, kNvinferLibrary, why, NV_TENSORRT_MAJOR);
            return;
        }
        static WTConvPluginCreator creator;
        registry->registerCreator(creator, "");
    }
};

Registration const registration;

} // namespace

nvinfer1::ILogger* getPluginLogger() noexcept
{
    static GetLogger const getLogger = []
    {
        char const* why = nullptr;
        return reinterpret_cast<GetLogger>(nvinferFunction("getLogger", &why));
    }();
    return getLogger != nullptr ? getLogger() : nullptr;
}

#else

nvinfer1::ILogger* getPluginLogger() noexcept
{
    return ::getLogger();
}

REGISTER_TENSORRT_PLUGIN(WTConvPluginCreator);

#endif

} // namespace trt
} // namespace wtconv
