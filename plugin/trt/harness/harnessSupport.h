// harnessSupport.h — shared by the host and GPU tests: plugin fields shaped as TensorRT's ONNX parser produces
// them, guarded memory for corrupted fields, loading the dynamic library as TensorRT's loadLibrary does, and
// tensor descriptors.
#pragma once

#include "fakeTensorRT.h"
#include "harnessCheck.h"
#include "wtconvKernel.h"
#include "wtconvPluginContract.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace wtconv_harness
{

namespace contract = wtconv::contract;

// ---------------------------------------------------------------------------------------------------
// Plugin fields shaped as TensorRT's ONNX parser produces them.

struct LayerConfig
{
    std::string name;
    int32_t channels{0};
    int32_t k{0};
    int32_t levels{0};
    int32_t stride{1};
    std::vector<float> baseWeight;
    std::vector<float> baseBias;
    std::vector<float> waveletWeight;
};

inline LayerConfig syntheticLayer(int32_t c, int32_t k, int32_t levels, int32_t stride)
{
    LayerConfig l;
    l.name = "synthetic";
    l.channels = c;
    l.k = k;
    l.levels = levels;
    l.stride = stride;
    uint32_t state = 12345U;
    auto next = [&state]()
    {
        state = state * 1664525U + 1013904223U;
        return static_cast<float>(static_cast<int32_t>(state >> 9) - (1 << 22)) / static_cast<float>(1 << 23);
    };
    l.baseWeight.resize(static_cast<size_t>(c) * k * k);
    l.baseBias.resize(static_cast<size_t>(c));
    l.waveletWeight.resize(static_cast<size_t>(levels) * 4 * c * k * k);
    for (auto* v : {&l.baseWeight, &l.baseBias, &l.waveletWeight})
    {
        for (float& x : *v)
        {
            x = next();
        }
    }
    return l;
}

// Owns a field list; fields can be edited before collection() is taken.
struct FieldSet
{
    std::deque<std::vector<char>> storage;
    std::vector<PluginField> fields;
    std::deque<std::string> names;

    void add(std::string const& name, void const* data, size_t bytes, PluginFieldType type, int32_t length)
    {
        names.push_back(name);
        storage.emplace_back(static_cast<char const*>(data), static_cast<char const*>(data) + bytes);
        fields.emplace_back(names.back().c_str(), bytes ? storage.back().data() : nullptr, type, length);
    }
    void addInt(std::string const& name, int32_t v)
    {
        add(name, &v, sizeof(v), PluginFieldType::kINT32, 1);
    }
    void addFloats(std::string const& name, std::vector<float> const& v)
    {
        add(name, v.data(), v.size() * sizeof(float), PluginFieldType::kFLOAT32, static_cast<int32_t>(v.size()));
    }
    void addString(std::string const& name, std::string const& s)
    {
        add(name, s.data(), s.size(), PluginFieldType::kCHAR, static_cast<int32_t>(s.size()));
    }
    PluginField* find(std::string const& name)
    {
        for (auto& f : fields)
        {
            if (name == f.name)
            {
                return &f;
            }
        }
        return nullptr;
    }
    void remove(std::string const& name)
    {
        fields.erase(std::remove_if(fields.begin(), fields.end(), [&](PluginField const& f) { return name == f.name; }),
            fields.end());
    }
    PluginFieldCollection collection() const
    {
        PluginFieldCollection fc;
        fc.nbFields = static_cast<int32_t>(fields.size());
        fc.fields = fields.data();
        return fc;
    }
};

// The ONNX parser's field list: plugin_version / plugin_namespace may be passed on as kCHAR.
inline FieldSet parserFields(LayerConfig const& l)
{
    FieldSet f;
    f.addFloats(contract::kFIELD_BASE_BIAS, l.baseBias);
    f.addFloats(contract::kFIELD_BASE_WEIGHT, l.baseWeight);
    f.addInt(contract::kFIELD_KERNEL_SIZE, l.k);
    f.addString(contract::kFIELD_PLUGIN_NAMESPACE, contract::kPLUGIN_NAMESPACE);
    f.addString(contract::kFIELD_PLUGIN_VERSION, contract::kPLUGIN_VERSION);
    f.addInt(contract::kFIELD_STRIDE, l.stride);
    f.addFloats(contract::kFIELD_WAVELET_WEIGHT, l.waveletWeight);
    f.addInt(contract::kFIELD_WT_LEVELS, l.levels);
    return f;
}

// Copies a serialized collection (what TensorRT writes into the engine) into owned storage.
inline FieldSet copyFields(PluginFieldCollection const* fc)
{
    FieldSet f;
    for (int32_t i = 0; i < fc->nbFields; ++i)
    {
        PluginField const& p = fc->fields[i];
        size_t elem = 1;
        switch (p.type)
        {
        case PluginFieldType::kINT32:
        case PluginFieldType::kFLOAT32: elem = 4; break;
        case PluginFieldType::kFLOAT16: elem = 2; break;
        case PluginFieldType::kINT64:
        case PluginFieldType::kFLOAT64: elem = 8; break;
        default: elem = 1; break;
        }
        f.add(p.name, p.data, elem * static_cast<size_t>(p.length), p.type, p.length);
    }
    return f;
}

inline bool sameFields(PluginFieldCollection const* a, PluginFieldCollection const* b, std::string& why)
{
    if (a == nullptr || b == nullptr || a->nbFields != b->nbFields)
    {
        why = "field counts differ";
        return false;
    }
    FieldSet fa = copyFields(a);
    FieldSet fb = copyFields(b);
    for (size_t i = 0; i < fa.fields.size(); ++i)
    {
        if (std::string(fa.fields[i].name) != fb.fields[i].name || fa.fields[i].type != fb.fields[i].type
            || fa.fields[i].length != fb.fields[i].length || fa.storage[i] != fb.storage[i])
        {
            why = std::string("field '") + fa.fields[i].name + "' differs";
            return false;
        }
    }
    return true;
}

// Places a field's bytes so that they end exactly at a PROT_NONE page: reading one byte past the end
// of the declared length faults.
class GuardedBytes
{
public:
    GuardedBytes(void const* data, size_t bytes)
    {
        long const page = sysconf(_SC_PAGESIZE);
        size_t const dataPages = (bytes + static_cast<size_t>(page) - 1) / static_cast<size_t>(page);
        mSize = (dataPages + 1) * static_cast<size_t>(page);
        mBase = mmap(nullptr, mSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char* guard = static_cast<char*>(mBase) + dataPages * static_cast<size_t>(page);
        mprotect(guard, static_cast<size_t>(page), PROT_NONE);
        mData = guard - bytes;
        if (bytes)
        {
            std::memcpy(mData, data, bytes);
        }
    }
    ~GuardedBytes()
    {
        munmap(mBase, mSize);
    }
    GuardedBytes(GuardedBytes const&) = delete;
    GuardedBytes& operator=(GuardedBytes const&) = delete;
    void const* data() const
    {
        return mData;
    }

private:
    void* mBase{nullptr};
    size_t mSize{0};
    char* mData{nullptr};
};

// ---------------------------------------------------------------------------------------------------
// Library access

using GetCreatorsFn = IPluginCreatorInterface* const* (*)(int32_t&);
using SetLoggerFinderFn = void (*)(ILoggerFinder*);

struct PluginLibrary
{
    void* handle{nullptr};
    IPluginCreatorV3One* creator{nullptr};
};

inline PluginLibrary loadDynamicLibrary(std::string const& path)
{
    PluginLibrary lib;
    size_t const registeredBefore = testRegistry()->mRegistered.size();
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!check(lib.handle != nullptr, "dynamic library: dlopen", lib.handle ? "" : dlerror()))
    {
        return lib;
    }
    check(testRegistry()->mRegistered.size() == registeredBefore,
        "dynamic library: registers nothing by itself when loaded (loadLibrary registers it once)");
    auto getCreators = reinterpret_cast<GetCreatorsFn>(dlsym(lib.handle, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinderFn>(dlsym(lib.handle, "setLoggerFinder"));
    check(getCreators != nullptr, "dynamic library: exports getCreators");
    check(setLoggerFinder != nullptr, "dynamic library: exports setLoggerFinder");
    for (char const* hidden : {"_ZN6wtconv12wtconvForwardERKNS_12WTConvParamsEP11CUstream_stPcm",
             "_ZN6wtconv3trt15getPluginLoggerEv", "getPluginRegistry", "getLogger"})
    {
        check(dlsym(lib.handle, hidden) == nullptr, std::string("dynamic library: does not export ") + hidden);
    }
    if (getCreators == nullptr || setLoggerFinder == nullptr)
    {
        return lib;
    }
    setLoggerFinder(&gLoggerFinder);
    int32_t n = -1;
    IPluginCreatorInterface* const* creators = getCreators(n);
    if (!check(n == 1 && creators != nullptr && creators[0] != nullptr, "getCreators: one creator",
            "nbCreators=" + std::to_string(n)))
    {
        return lib;
    }
    InterfaceInfo const info = creators[0]->getInterfaceInfo();
    if (check(std::string(info.kind) == "PLUGIN CREATOR_V3ONE" && info.major == 1,
            "getCreators: creator is an IPluginCreatorV3One",
            std::string(info.kind) + " " + std::to_string(info.major)))
    {
        lib.creator = static_cast<IPluginCreatorV3One*>(creators[0]);
    }
    return lib;
}

// ---------------------------------------------------------------------------------------------------
// Plugin access helpers

struct PluginHandles
{
    IPluginV3* plugin{nullptr};
    IPluginV3OneCore* core{nullptr};
    IPluginV3OneBuild* build{nullptr};
    IPluginV3OneRuntime* runtime{nullptr};
};

inline PluginHandles capabilities(IPluginV3* plugin)
{
    PluginHandles h;
    h.plugin = plugin;
    if (plugin == nullptr)
    {
        return h;
    }
    h.core = static_cast<IPluginV3OneCore*>(plugin->getCapabilityInterface(PluginCapabilityType::kCORE));
    h.build = static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
    h.runtime = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    return h;
}

inline Dims dims4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    Dims d{};
    d.nbDims = 4;
    d.d[0] = n;
    d.d[1] = c;
    d.d[2] = h;
    d.d[3] = w;
    return d;
}

inline DynamicPluginTensorDesc dynDesc(DataType type, Dims dims, Dims min, Dims max)
{
    DynamicPluginTensorDesc d{};
    d.desc.dims = dims;
    d.desc.type = type;
    d.desc.format = TensorFormat::kLINEAR;
    d.desc.scale = 1.0F;
    d.min = min;
    d.max = max;
    d.opt = max;
    return d;
}

inline PluginTensorDesc desc(DataType type, Dims dims)
{
    PluginTensorDesc d{};
    d.dims = dims;
    d.type = type;
    d.format = TensorFormat::kLINEAR;
    d.scale = 1.0F;
    return d;
}

inline int64_t ceilDiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

inline wtconv::WTConvParams kernelParams(DataType type, Dims const& d, LayerConfig const& l)
{
    wtconv::WTConvParams p;
    p.dtype = type == DataType::kFLOAT ? wtconv::DataType::kFLOAT32
        : type == DataType::kHALF      ? wtconv::DataType::kFLOAT16
                                       : wtconv::DataType::kBFLOAT16;
    p.batch = d.d[0];
    p.channels = d.d[1];
    p.height = d.d[2];
    p.width = d.d[3];
    p.kernelSize = l.k;
    p.levels = l.levels;
    p.stride = l.stride;
    return p;
}

// Elements per pixel of a channels-last TensorRT format for C channels, from TensorRT's definition of the
// formats (NvInferRuntime.h, TensorFormat): kHWC (fp32) C, kHWC8 (fp16, bf16) C rounded up to 8, kHWC16 (fp16)
// rounded up to 16; 0 for any other format or format/dtype pair.
inline int64_t channelsLastPitch(TensorFormat format, DataType type, int64_t c)
{
    switch (format)
    {
    case TensorFormat::kHWC: return type == DataType::kFLOAT ? c : 0;
    case TensorFormat::kHWC8: return type == DataType::kHALF || type == DataType::kBF16 ? (c + 7) / 8 * 8 : 0;
    case TensorFormat::kHWC16: return type == DataType::kHALF ? (c + 15) / 16 * 16 : 0;
    default: return 0;
    }
}

// Whether the kernels (asked directly, not through the plugin) accept `type` in NCHW, or channels-last I/O.
inline bool kernelsAccept(DataType type, LayerConfig const& l)
{
    return wtconv::checkShape(kernelParams(type, dims4(1, l.channels, 8, 8), l), nullptr, 0) == cudaSuccess;
}
inline bool kernelsAcceptChannelsLast(LayerConfig const& l)
{
    wtconv::WTConvParams p = kernelParams(DataType::kHALF, dims4(1, l.channels, 8, 8), l);
    p.layout = wtconv::Layout::kNHWC;
    p.channelPitch = (l.channels + 7) / 8 * 8;
    return wtconv::checkShape(p, nullptr, 0) == cudaSuccess;
}

// Expects `plugin == nullptr` and a logged message containing every needle.
inline void expectRejected(IPluginV3* plugin, std::string const& what, std::vector<std::string> const& needles)
{
    std::string const message = gLogger.last();
    bool ok = plugin == nullptr;
    for (auto const& n : needles)
    {
        ok = ok && contains(message, n);
    }
    check(ok, "rejects " + what, plugin != nullptr ? "plugin was created" : "message: " + message);
    if (std::getenv("WTCONV_HARNESS_VERBOSE") != nullptr)
    {
        std::printf("     message: %s\n", message.c_str());
    }
    delete plugin;
}

// Host -> device copy that is complete when it returns. cudaMemcpy from pageable memory returns once the data is
// staged; the DMA to the device is ordered on the legacy default stream, which the harness's non-blocking streams do
// not wait for, so a kernel enqueued right after could read the buffer's old contents (CUDA Runtime API, "API
// synchronization behavior").
inline cudaError_t uploadNow(void* dst, void const* src, size_t bytes)
{
    cudaError_t const e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

// The two modes (hostTests.cpp, gpuTests.cpp); each prints "<mode>: N passed, M failed" and returns the exit code.
int runHost(std::string const& dynamicLib, std::string const& staticLib);
int runGpu(std::string const& dynamicLib, std::string const& casesDir);
// The GPU part's checks around enqueue in a serving process (gpuRuntimeTests.cpp): concurrent first launches (run
// first by runGpu, while no kernel's shared-memory limit has been raised), then after the float64 cases a transient
// out-of-memory (which takes all free device memory for a moment) and the weight upload during another stream's
// capture.
void runConcurrencyTests(IPluginCreatorV3One* creator);
void runFailureTests(IPluginCreatorV3One* creator);

} // namespace wtconv_harness
