// wtconvPluginAbi.h — the ABI record each plugin library carries, readable without loading the library.
//
// A plugin library is built against one TensorRT major's headers and must only be loaded by that ABI: the
// interfaces' layouts differ between majors (TensorRT 11 made ILogger / ILoggerFinder versioned interfaces,
// so a library built against 10.x headers calls the wrong vtable slot under TensorRT 11 or TensorRT-RTX).
// Each library therefore holds one line of ASCII text in its own ELF section `.wtconv_trt_abi`, e.g.
//
//   wtconv_trt_plugin format=1 library=dynamic abi=trt11 tensorrt=11.1.0 tensorrt_rtx_abi=yes plugin=WTConv2d
//   plugin_version=1 package_version=0.1.0
//
// (one line, NUL-terminated; `key=value` words separated by single spaces, values without spaces). Readers
// (trt_engine, `readelf -p .wtconv_trt_abi <lib>`) split on spaces and must ignore keys they do not know;
// `format` changes only when an existing key changes meaning. plugin/README.md documents each key.
#pragma once

#include "NvInferVersion.h"
#include "wtconvPluginContract.h"

#include <cstddef>

#ifndef WTCONV_PACKAGE_VERSION
#error "WTCONV_PACKAGE_VERSION must be defined by the build (plugin/CMakeLists.txt reads it from VERSION)"
#endif

#define WTCONV_ABI_STRINGIFY_(x) #x
#define WTCONV_ABI_STRINGIFY(x) WTCONV_ABI_STRINGIFY_(x)

// TensorRT-RTX 1.7 carries the versioned ILogger / ILoggerFinder of the TensorRT 11 ABI (checked by loading
// both builds into it: plugin/README.md, "Which headers for TensorRT-RTX").
#if NV_TENSORRT_MAJOR >= 11
#define WTCONV_ABI_TENSORRT_RTX "yes"
#else
#define WTCONV_ABI_TENSORRT_RTX "no"
#endif

namespace wtconv
{
namespace abi
{

// The record is joined at compile time from its parts, so the plugin's name and version come from the
// contract (defined once) and the text lands in the section as constant data.
template <size_t N>
struct Text
{
    char text[N];
};

template <size_t P>
constexpr size_t joinedSize(char const* const (&parts)[P])
{
    size_t n = 1; // the terminating NUL
    for (size_t i = 0; i < P; ++i)
    {
        for (char const* c = parts[i]; *c != '\0'; ++c)
        {
            ++n;
        }
    }
    return n;
}

template <size_t N, size_t P>
constexpr Text<N> join(char const* const (&parts)[P])
{
    Text<N> out{};
    size_t k = 0;
    for (size_t i = 0; i < P; ++i)
    {
        for (char const* c = parts[i]; *c != '\0'; ++c)
        {
            out.text[k++] = *c;
        }
    }
    out.text[k] = '\0';
    return out;
}

} // namespace abi
} // namespace wtconv

// `library` is "dynamic" (getCreators / setLoggerFinder, loadLibrary) or "static" (registers when loaded);
// `extra` is "" or further words, each with its leading space (the static library's " libnvinfer=linked|load").
#define WTCONV_PLUGIN_ABI_PARTS(library, extra)                                                                        \
    {"wtconv_trt_plugin format=1 library=", library, " abi=trt", WTCONV_ABI_STRINGIFY(NV_TENSORRT_MAJOR),              \
        " tensorrt=", WTCONV_ABI_STRINGIFY(NV_TENSORRT_MAJOR), ".", WTCONV_ABI_STRINGIFY(NV_TENSORRT_MINOR), ".",      \
        WTCONV_ABI_STRINGIFY(NV_TENSORRT_PATCH), " tensorrt_rtx_abi=", WTCONV_ABI_TENSORRT_RTX,                        \
        " plugin=", ::wtconv::contract::kPLUGIN_NAME, " plugin_version=", ::wtconv::contract::kPLUGIN_VERSION,         \
        " package_version=", WTCONV_PACKAGE_VERSION, extra}

// Defines the record in the section; use once per library, at global scope. Not exported (hidden visibility
// and the libraries' version scripts); `used` keeps it although nothing references it.
#define WTCONV_DEFINE_PLUGIN_ABI_RECORD(library, extra)                                                                \
    namespace                                                                                                          \
    {                                                                                                                  \
    constexpr char const* kWtconvTrtAbiParts[] = WTCONV_PLUGIN_ABI_PARTS(library, extra);                              \
    }                                                                                                                  \
    extern "C" __attribute__((section(".wtconv_trt_abi"),                                                              \
        used)) ::wtconv::abi::Text<::wtconv::abi::joinedSize(kWtconvTrtAbiParts)> const wtconvTrtAbiRecord             \
        = ::wtconv::abi::join<::wtconv::abi::joinedSize(kWtconvTrtAbiParts)>(kWtconvTrtAbiParts)
