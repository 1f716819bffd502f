// wtconvPluginHarness.cpp — drives the WTConv2d plugin libraries through the IPluginV3 interface the way
// TensorRT does, with TensorRT's headers and without its libraries.
//
//   wtconv_plugin_harness host --dynamic-lib <libwtconv_trt_plugin_dynamic.so> --static-lib <libwtconv_trt_plugin.so>
//       Needs no CUDA device (the plugin's attempts to upload weights fail and are deferred): dlopen + getCreators/setLoggerFinder, creation from fields shaped as TensorRT's ONNX
//       parser makes them (kINT32 ints, kFLOAT32 weights, plugin_version/plugin_namespace as kCHAR),
//       every build-time method (a test IExprBuilder evaluates the output-shape expressions),
//       supportsFormatCombination over all DataType x TensorFormat pairs, configurePlugin,
//       getWorkspaceSize, getFieldsToSerialize -> createPlugin(kRUNTIME) round trip, attachToContext,
//       every bad-input case, corrupted serialized fields placed against a PROT_NONE guard page, and
//       static registration through a test IPluginRegistry (this executable exports getPluginRegistry and
//       getLogger, which the statically registering library takes from libnvinfer in production).
//   wtconv_plugin_harness gpu --dynamic-lib ... --static-lib ... --cases <dir from make_cases.py>
//       enqueue on the GPU with real device memory against the float64 spec: fp32 (max err / max |ref|
//       <= 1e-5), fp16/bf16 (<= 2x the PyTorch error in that dtype, computed by make_cases.py), shape
//       changes through onShapeChange, two contexts on two streams at once, CUDA-graph capture + replay,
//       enqueue error paths. Exit code 77 (CTest: skipped) when there is no CUDA device.
// Prints one PASS/FAIL line per check and "<mode>: N passed, M failed"; exits non-zero on any failure.
//
// Files: fakeTensorRT.{h,cpp} (what TensorRT provides a plugin), harnessCheck.h (PASS/FAIL bookkeeping),
// harnessSupport.h (fields, library loading, descriptors), hostTests.cpp, gpuTests.cpp, and this entry point.
#include "harnessSupport.h"

#include <cstdio>
#include <string>

int main(int argc, char** argv)
{
    std::string mode = argc > 1 ? argv[1] : "";
    std::string dynamicLib, staticLib, cases;
    for (int i = 2; i + 1 < argc; i += 2)
    {
        std::string const key = argv[i];
        if (key == "--dynamic-lib")
            dynamicLib = argv[i + 1];
        else if (key == "--static-lib")
            staticLib = argv[i + 1];
        else if (key == "--cases")
            cases = argv[i + 1];
    }
    if (mode == "host" && !dynamicLib.empty() && !staticLib.empty())
    {
        return wtconv_harness::runHost(dynamicLib, staticLib);
    }
    if (mode == "gpu" && !dynamicLib.empty() && !cases.empty())
    {
        return wtconv_harness::runGpu(dynamicLib, cases);
    }
    std::fprintf(stderr,
        "usage: %s host --dynamic-lib <lib> --static-lib <lib>\n"
        "       %s gpu --dynamic-lib <lib> --static-lib <lib> --cases <dir>\n",
        argv[0], argv[0]);
    return 2;
}
