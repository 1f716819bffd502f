// wtconvOrtEntry.cpp — the library's one entry point: ONNX Runtime calls RegisterCustomOps when a session's options
// load the library (SessionOptions.register_custom_ops_library / RegisterCustomOpsLibrary_V2; docs/onnx_runtime.md).
// It adds the op WTConv2d in the domain wtconv (wtconvPluginContract.h) for the CPU execution provider and, in a build with CUDA, for the
// CUDA execution provider.
#include "wtconvOrtOps.h"
#include "wtconvOrtSupport.h"
#include "wtconvPluginContract.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef WTCONV_PACKAGE_VERSION
#define WTCONV_PACKAGE_VERSION "0.0.0+unknown"
#endif
#if defined(WTCONV_ORT_WITH_CUDA)
#define WTCONV_ORT_CUDA_WORD "yes"
#else
#define WTCONV_ORT_CUDA_WORD "no"
#endif
#define WTCONV_STRINGIFY2(x) #x
#define WTCONV_STRINGIFY(x) WTCONV_STRINGIFY2(x)

// One line of key=value words in its own section, read from the file without loading it
// (wtconv_libs.lookup.ort_library_info): what this build is, for `wtconv-trt doctor` and the tests.
extern "C" __attribute__((used, section(".wtconv_ort_info"))) char const wtconvOrtInfo[]
    = "wtconv_ort_info: package_version=" WTCONV_PACKAGE_VERSION
      " ort_api=" WTCONV_STRINGIFY(WTCONV_ORT_API_VERSION) " cuda=" WTCONV_ORT_CUDA_WORD "\n";

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(
    OrtSessionOptions* options, OrtApiBase const* apiBase)
{
    using namespace wtconv::ort;
    if (apiBase == nullptr)
    {
        return nullptr; // nothing to report through
    }
    OrtApi const* table = apiBase->GetApi(kORT_API_VERSION);
    if (table == nullptr)
    {
        OrtApi const* oldest = apiBase->GetApi(1);
        std::string const message = std::string("libwtconv_ort: needs ONNX Runtime 1.")
            + std::to_string(kORT_API_VERSION) + " or newer (C API version " + std::to_string(kORT_API_VERSION)
            + "); this is ONNX Runtime " + apiBase->GetVersionString();
        return oldest != nullptr ? oldest->CreateStatus(ORT_FAIL, message.c_str()) : nullptr;
    }
    setApi(table);
    // ONNX Runtime 1.N has C API version N; GetApi prints to stderr when asked for a version it lacks, so the newer
    // table is asked for only where the version string says it exists. WTCONV_ORT_MAX_API=17 withholds it, so
    // tests on a newer ONNX Runtime take the fallbacks of 1.17 (process-wide, from the next registration on).
    int major = 0;
    int minor = 0;
    char const* cap = std::getenv("WTCONV_ORT_MAX_API");
    bool const capped = cap != nullptr && cap[0] != '\0' && std::atoi(cap) < static_cast<int>(kORT_API_VERSION_SCRATCH);
    bool const offered = std::sscanf(apiBase->GetVersionString(), "%d.%d", &major, &minor) == 2
        && (major > 1 || (major == 1 && minor >= static_cast<int>(kORT_API_VERSION_SCRATCH)));
    setApi18(offered && !capped ? apiBase->GetApi(kORT_API_VERSION_SCRATCH) : nullptr);
    try
    {
        // The domain must outlive every session made from these options; ONNX Runtime does not take ownership and
        // has no hook to say when it is done, so each registration keeps its (small) domain object for the life of
        // the process, as ONNX Runtime's own custom-op examples do.
        OrtCustomOpDomain* domain = nullptr;
        check(
            table->CreateCustomOpDomain(wtconv::contract::kONNX_DOMAIN, &domain), "libwtconv_ort: creating the domain");
        check(table->CustomOpDomain_Add(domain, cpuOp()), "libwtconv_ort: adding the CPU op");
        if (OrtCustomOp const* cuda = cudaOp())
        {
            check(table->CustomOpDomain_Add(domain, cuda), "libwtconv_ort: adding the CUDA op");
        }
        check(table->AddCustomOpDomain(options, domain), "libwtconv_ort: registering the domain");
        return nullptr;
    }
    catch (...)
    {
        return statusFromCurrentException();
    }
}
