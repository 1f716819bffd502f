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

#ifndef WTCONV_PACKAGE_VERSION
#error "WTCONV_PACKAGE_VERSION must be defined by the build (plugin/CMakeLists.txt reads it from pyproject.toml)"
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

// The plugin's name and version as literals (the record is built by string-literal concatenation); checked
// against the contract below.
#define WTCONV_ABI_PLUGIN_NAME "WTConv2d"
#define WTCONV_ABI_PLUGIN_VERSION "1"

// `library` is "dynamic" (getCreators / setLoggerFinder, loadLibrary) or "static" (REGISTER_TENSORRT_PLUGIN).
#define WTCONV_PLUGIN_ABI_RECORD(library)                                                                                             \
    "wtconv_trt_plugin format=1 library=" library                                                                                     \
    " abi=trt" WTCONV_ABI_STRINGIFY(NV_TENSORRT_MAJOR) " tensorrt=" WTCONV_ABI_STRINGIFY(NV_TENSORRT_MAJOR) "." WTCONV_ABI_STRINGIFY( \
        NV_TENSORRT_MINOR) "." WTCONV_ABI_STRINGIFY(NV_TENSORRT_PATCH) " tensorrt_rtx_abi=" WTCONV_ABI_TENSORRT_RTX                   \
                                                                       " plugin=" WTCONV_ABI_PLUGIN_NAME                              \
                                                                       " plugin_version=" WTCONV_ABI_PLUGIN_VERSION                   \
                                                                       " package_version=" WTCONV_PACKAGE_VERSION

// Defines the record in the section; use once per library, at namespace scope.
#define WTCONV_DEFINE_PLUGIN_ABI_RECORD(library)                                                                       \
    extern "C" __attribute__((                                                                                         \
        section(".wtconv_trt_abi"), used)) char const wtconvTrtAbiRecord[] = WTCONV_PLUGIN_ABI_RECORD(library)

namespace wtconv
{
namespace abi
{

constexpr bool sameString(char const* a, char const* b)
{
    return *a == *b && (*a == '\0' || sameString(a + 1, b + 1));
}

static_assert(sameString(WTCONV_ABI_PLUGIN_NAME, contract::kPLUGIN_NAME), "ABI record and contract disagree");
static_assert(sameString(WTCONV_ABI_PLUGIN_VERSION, contract::kPLUGIN_VERSION), "ABI record and contract disagree");

} // namespace abi
} // namespace wtconv
