// wtconvPluginHarness.cpp — drives the WTConv2d plugin libraries through the IPluginV3 interface the way
// TensorRT does, with TensorRT's headers and without its libraries (issue 4, "What must show").
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
#include "NvInferRuntime.h"
#include "NvInferVersion.h"
#include "wtconvKernel.h"
#include "wtconvPluginContract.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace nvinfer1;
namespace contract = wtconv::contract;

namespace
{

// ---------------------------------------------------------------------------------------------------
// Bookkeeping

int gPassed = 0;
int gFailed = 0;

bool check(bool ok, std::string const& what, std::string const& detail = "")
{
    if (ok)
    {
        ++gPassed;
        std::printf("PASS %s\n", what.c_str());
    }
    else
    {
        ++gFailed;
        std::printf("FAIL %s%s%s\n", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    }
    std::fflush(stdout);
    return ok;
}

bool contains(std::string const& haystack, std::string const& needle)
{
    return haystack.find(needle) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------------
// What TensorRT gives a plugin: a logger (through ILoggerFinder), an error recorder (through the
// IPluginResourceContext of attachToContext).

class CaptureLogger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kWARNING)
        {
            mMessages.emplace_back(msg != nullptr ? msg : "");
        }
    }
    std::string last() const
    {
        return mMessages.empty() ? std::string() : mMessages.back();
    }
    size_t count() const
    {
        return mMessages.size();
    }
    void clear()
    {
        mMessages.clear();
    }

private:
    std::vector<std::string> mMessages;
};

CaptureLogger gLogger;

class TestLoggerFinder : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &gLogger;
    }
};

TestLoggerFinder gLoggerFinder;

class TestErrorRecorder : public IErrorRecorder
{
public:
    int32_t getNbErrors() const noexcept override
    {
        return static_cast<int32_t>(mErrors.size());
    }
    ErrorCode getErrorCode(int32_t i) const noexcept override
    {
        return mErrors.at(static_cast<size_t>(i)).first;
    }
    ErrorDesc getErrorDesc(int32_t i) const noexcept override
    {
        return mErrors.at(static_cast<size_t>(i)).second.c_str();
    }
    bool hasOverflowed() const noexcept override
    {
        return false;
    }
    void clear() noexcept override
    {
        mErrors.clear();
    }
    bool reportError(ErrorCode code, ErrorDesc desc) noexcept override
    {
        mErrors.emplace_back(code, desc != nullptr ? desc : "");
        return false;
    }
    RefCount incRefCount() noexcept override
    {
        return ++mRefs;
    }
    RefCount decRefCount() noexcept override
    {
        return --mRefs;
    }

private:
    std::vector<std::pair<ErrorCode, std::string>> mErrors;
    RefCount mRefs{0};
};

class TestResourceContext : public IPluginResourceContext
{
public:
    explicit TestResourceContext(IErrorRecorder* recorder)
        : mRecorder(recorder)
    {
    }
    IGpuAllocator* getGpuAllocator() const noexcept override
    {
        return nullptr;
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mRecorder;
    }

private:
    IErrorRecorder* mRecorder;
};

// ---------------------------------------------------------------------------------------------------
// A test IExprBuilder: IDimensionExpr / IExprBuilder are thin handles over apiv::VDimensionExpr /
// apiv::VExprBuilder (NvInferImpl.h), so the builder is implemented at that level. Expressions are
// trees over constants and named symbols and can be evaluated for any binding of the symbols.

struct Node : public apiv::VDimensionExpr
{
    enum class Kind
    {
        kCONSTANT,
        kSYMBOL,
        kOPERATION
    };
    Kind kind{Kind::kCONSTANT};
    int64_t value{0};
    std::string symbol;
    DimensionOperation op{DimensionOperation::kSUM};
    Node const* lhs{nullptr};
    Node const* rhs{nullptr};

    bool isConstant() const override
    {
        return kind == Kind::kCONSTANT || (kind == Kind::kOPERATION && lhs->isConstant() && rhs->isConstant());
    }
    int64_t getConstantValue() const override
    {
        return isConstant() ? evaluate({}) : -1;
    }
    bool isSizeTensor() const override
    {
        return false;
    }
    int64_t evaluate(std::map<std::string, int64_t> const& env) const
    {
        switch (kind)
        {
        case Kind::kCONSTANT: return value;
        case Kind::kSYMBOL: return env.at(symbol);
        case Kind::kOPERATION: break;
        }
        int64_t const a = lhs->evaluate(env);
        int64_t const b = rhs->evaluate(env);
        switch (op)
        {
        case DimensionOperation::kSUM: return a + b;
        case DimensionOperation::kPROD: return a * b;
        case DimensionOperation::kMAX: return std::max(a, b);
        case DimensionOperation::kMIN: return std::min(a, b);
        case DimensionOperation::kSUB: return a - b;
        case DimensionOperation::kEQUAL: return a == b;
        case DimensionOperation::kLESS: return a < b;
        case DimensionOperation::kFLOOR_DIV: return a >= 0 ? a / b : -((-a + b - 1) / b);
        case DimensionOperation::kCEIL_DIV: return a >= 0 ? (a + b - 1) / b : -((-a) / b);
        }
        return -1;
    }
};

class DimExpr : public IDimensionExpr
{
public:
    explicit DimExpr(Node* node)
    {
        mImpl = node;
    }
    ~DimExpr() noexcept override = default;
    Node const& node() const
    {
        return *static_cast<Node const*>(mImpl);
    }
};

class TestExprBuilderImpl : public apiv::VExprBuilder
{
public:
    IDimensionExpr const* constant(int64_t value) override
    {
        Node* n = newNode();
        n->kind = Node::Kind::kCONSTANT;
        n->value = value;
        return wrap(n);
    }
    IDimensionExpr const* operation(
        DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second) override
    {
        Node* n = newNode();
        n->kind = Node::Kind::kOPERATION;
        n->op = op;
        n->lhs = &static_cast<DimExpr const&>(first).node();
        n->rhs = &static_cast<DimExpr const&>(second).node();
        ++mOperations;
        return wrap(n);
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override
    {
        return nullptr;
    }
    IDimensionExpr const* symbol(std::string const& name)
    {
        Node* n = newNode();
        n->kind = Node::Kind::kSYMBOL;
        n->symbol = name;
        return wrap(n);
    }
    int mOperations{0};

private:
    Node* newNode()
    {
        mNodes.emplace_back(std::make_unique<Node>());
        return mNodes.back().get();
    }
    IDimensionExpr const* wrap(Node* n)
    {
        mExprs.emplace_back(std::make_unique<DimExpr>(n));
        return mExprs.back().get();
    }
    std::deque<std::unique_ptr<Node>> mNodes;
    std::deque<std::unique_ptr<DimExpr>> mExprs;
};

class TestExprBuilder : public IExprBuilder
{
public:
    TestExprBuilder()
    {
        mImpl = &mBuilder;
    }
    ~TestExprBuilder() noexcept override = default;
    TestExprBuilderImpl mBuilder;
};

int64_t evaluate(IDimensionExpr const* e, std::map<std::string, int64_t> const& env)
{
    return static_cast<DimExpr const*>(e)->node().evaluate(env);
}

// ---------------------------------------------------------------------------------------------------
// A test plugin registry for static registration: this executable exports getPluginRegistry() and
// getLogger(), the two libnvinfer symbols REGISTER_TENSORRT_PLUGIN and the registering library use.

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
class TestPluginRegistry : public IPluginRegistry
{
public:
    std::vector<std::pair<IPluginCreatorInterface*, std::string>> mRegistered;

#if NV_TENSORRT_MAJOR < 11
    bool registerCreator(IPluginCreator&, AsciiChar const* const) noexcept override
    {
        return false;
    }
    IPluginCreator* const* getPluginCreatorList(int32_t* const n) const noexcept override
    {
        *n = 0;
        return nullptr;
    }
    IPluginCreator* getPluginCreator(
        AsciiChar const* const, AsciiChar const* const, AsciiChar const* const) noexcept override
    {
        return nullptr;
    }
    bool deregisterCreator(IPluginCreator const&) noexcept override
    {
        return false;
    }
#endif
    void setErrorRecorder(IErrorRecorder* const) noexcept override {}
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return nullptr;
    }
    bool isParentSearchEnabled() const override
    {
        return false;
    }
    void setParentSearchEnabled(bool const) override {}
    PluginLibraryHandle loadLibrary(AsciiChar const*) noexcept override
    {
        return nullptr;
    }
    void deregisterLibrary(PluginLibraryHandle) noexcept override {}
    bool registerCreator(IPluginCreatorInterface& creator, AsciiChar const* const ns) noexcept override
    {
        mRegistered.emplace_back(&creator, ns != nullptr ? ns : "");
        return true;
    }
    IPluginCreatorInterface* const* getAllCreators(int32_t* const n) const noexcept override
    {
        *n = 0;
        return nullptr;
    }
    IPluginCreatorInterface* getCreator(
        AsciiChar const* const, AsciiChar const* const, AsciiChar const* const) noexcept override
    {
        return nullptr;
    }
    bool deregisterCreator(IPluginCreatorInterface const&) noexcept override
    {
        return false;
    }
    IPluginResource* acquirePluginResource(AsciiChar const*, IPluginResource*) noexcept override
    {
        return nullptr;
    }
    int32_t releasePluginResource(AsciiChar const*) noexcept override
    {
        return 0;
    }
    IPluginCreatorInterface* const* getAllCreatorsRecursive(int32_t* const n) noexcept override
    {
        *n = 0;
        return nullptr;
    }
};
#pragma GCC diagnostic pop

TestPluginRegistry* testRegistry()
{
    static TestPluginRegistry* registry = new TestPluginRegistry(); // destructor is protected in TensorRT 11
    return registry;
}

} // namespace

extern "C" TENSORRTAPI nvinfer1::IPluginRegistry* getPluginRegistry() noexcept
{
    return testRegistry();
}

extern "C" TENSORRTAPI nvinfer1::ILogger* getLogger() noexcept
{
    return &gLogger;
}

namespace
{

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

LayerConfig syntheticLayer(int32_t c, int32_t k, int32_t levels, int32_t stride)
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
FieldSet parserFields(LayerConfig const& l)
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
FieldSet copyFields(PluginFieldCollection const* fc)
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

bool sameFields(PluginFieldCollection const* a, PluginFieldCollection const* b, std::string& why)
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

PluginLibrary loadDynamicLibrary(std::string const& path)
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

PluginHandles capabilities(IPluginV3* plugin)
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

Dims dims4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    Dims d{};
    d.nbDims = 4;
    d.d[0] = n;
    d.d[1] = c;
    d.d[2] = h;
    d.d[3] = w;
    return d;
}

DynamicPluginTensorDesc dynDesc(DataType type, Dims dims, Dims min, Dims max)
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

PluginTensorDesc desc(DataType type, Dims dims)
{
    PluginTensorDesc d{};
    d.dims = dims;
    d.type = type;
    d.format = TensorFormat::kLINEAR;
    d.scale = 1.0F;
    return d;
}

int64_t ceilDiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

wtconv::WTConvParams kernelParams(DataType type, Dims const& d, LayerConfig const& l)
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

// Expects `plugin == nullptr` and a logged message containing every needle.
void expectRejected(IPluginV3* plugin, std::string const& what, std::vector<std::string> const& needles)
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

// ---------------------------------------------------------------------------------------------------
// Host part

void hostBuildMethods(IPluginCreatorV3One* creator, LayerConfig const& l, std::string const& tag)
{
    FieldSet fields = parserFields(l);
    PluginFieldCollection fc = fields.collection();
    gLogger.clear();
    IPluginV3* plugin = creator->createPlugin("wtconv_layer", &fc, TensorRTPhase::kBUILD);
    if (!check(plugin != nullptr, tag + "createPlugin(kBUILD) from ONNX-parser fields", gLogger.last()))
    {
        return;
    }
    check(std::string(plugin->getInterfaceInfo().kind) == "PLUGIN" && plugin->getInterfaceInfo().major == 1,
        tag + "IPluginV3 interface info");
    PluginHandles h = capabilities(plugin);
    check(h.core != nullptr && h.build != nullptr && h.runtime != nullptr, tag + "core/build/runtime capabilities");
    if (h.core == nullptr || h.build == nullptr || h.runtime == nullptr)
    {
        delete plugin;
        return;
    }
    check(std::string(h.core->getInterfaceInfo().kind) == "PLUGIN_V3ONE_CORE"
            && std::string(h.build->getInterfaceInfo().kind) == "PLUGIN_V3ONE_BUILD"
            && std::string(h.runtime->getInterfaceInfo().kind) == "PLUGIN_V3ONE_RUNTIME",
        tag + "capability interface kinds");
    check(std::string(h.core->getPluginName()) == contract::kPLUGIN_NAME
            && std::string(h.core->getPluginVersion()) == contract::kPLUGIN_VERSION
            && std::string(h.core->getPluginNamespace()) == contract::kPLUGIN_NAMESPACE,
        tag + "plugin name/version/namespace");
    check(h.build->getNbOutputs() == 1, tag + "getNbOutputs == 1");

    // Output data types: y has x's dtype; non-float inputs are refused.
    for (DataType t : {DataType::kFLOAT, DataType::kHALF})
    {
        DataType out = DataType::kINT8;
        int32_t const rc = h.build->getOutputDataTypes(&out, 1, &t, 1);
        check(rc == 0 && out == t,
            tag + "getOutputDataTypes keeps the input dtype " + std::to_string(static_cast<int>(t)));
    }
    {
        DataType in = DataType::kINT32;
        DataType out = DataType::kFLOAT;
        check(h.build->getOutputDataTypes(&out, 1, &in, 1) != 0, tag + "getOutputDataTypes refuses int32");
    }

    // Output shapes through the test IExprBuilder, symbolic N, H, W and constant C.
    {
        TestExprBuilder eb;
        DimsExprs in{};
        in.nbDims = 4;
        in.d[0] = eb.mBuilder.symbol("N");
        in.d[1] = eb.mBuilder.constant(l.channels);
        in.d[2] = eb.mBuilder.symbol("H");
        in.d[3] = eb.mBuilder.symbol("W");
        DimsExprs out{};
        int32_t const rc = h.build->getOutputShapes(&in, 1, nullptr, 0, &out, 1, eb);
        bool ok = rc == 0 && out.nbDims == 4;
        std::string detail;
        for (int64_t n : {1, 3})
        {
            for (int64_t hh = 1; ok && hh <= 70; hh += 3)
            {
                for (int64_t ww : {1, 2, 5, 64, 97})
                {
                    std::map<std::string, int64_t> env{{"N", n}, {"H", hh}, {"W", ww}};
                    bool const good = evaluate(out.d[0], env) == n && evaluate(out.d[1], env) == l.channels
                        && evaluate(out.d[2], env) == ceilDiv(hh, l.stride)
                        && evaluate(out.d[3], env) == ceilDiv(ww, l.stride);
                    if (!good)
                    {
                        detail = "wrong at N=" + std::to_string(n) + " H=" + std::to_string(hh)
                            + " W=" + std::to_string(ww);
                        ok = false;
                        break;
                    }
                }
            }
        }
        check(ok,
            tag + "getOutputShapes = (N, C, ceil(H/s), ceil(W/s)) for symbolic N, H, W (s=" + std::to_string(l.stride)
                + ")",
            detail);
        check(l.stride == 1 || eb.mBuilder.mOperations >= 2, tag + "getOutputShapes uses IExprBuilder operations");

        gLogger.clear();
        DimsExprs bad = in;
        bad.d[1] = eb.mBuilder.constant(l.channels + 1);
        check(h.build->getOutputShapes(&bad, 1, nullptr, 0, &out, 1, eb) != 0 && contains(gLogger.last(), "channel")
                && contains(gLogger.last(), std::to_string(l.channels))
                && contains(gLogger.last(), std::to_string(l.channels + 1)),
            tag + "getOutputShapes rejects a constant channel count != C, naming both", gLogger.last());
        gLogger.clear();
        DimsExprs three = in;
        three.nbDims = 3;
        check(h.build->getOutputShapes(&three, 1, nullptr, 0, &out, 1, eb) != 0 && contains(gLogger.last(), "4-D")
                && contains(gLogger.last(), "3-D"),
            tag + "getOutputShapes rejects a 3-D input", gLogger.last());
        DimsExprs symbolicC = in;
        symbolicC.d[1] = eb.mBuilder.symbol("C");
        check(h.build->getOutputShapes(&symbolicC, 1, nullptr, 0, &out, 1, eb) == 0,
            tag + "getOutputShapes accepts a symbolic channel dim (checked at configurePlugin)");
    }

    // supportsFormatCombination over every DataType x TensorFormat, for the input and then the output.
    std::vector<DataType> accepted;
    {
        int32_t const nbTypes = EnumMax<DataType>();
        int32_t const nbFormats = EnumMax<TensorFormat>();
        bool onlyLinearFloat = true;
        std::string detail;
        for (int32_t t = 0; t < nbTypes; ++t)
        {
            for (int32_t f = 0; f < nbFormats; ++f)
            {
                DynamicPluginTensorDesc io[2] = {};
                io[0].desc.type = static_cast<DataType>(t);
                io[0].desc.format = static_cast<TensorFormat>(f);
                io[0].desc.dims = dims4(-1, l.channels, -1, -1);
                bool const yes = h.build->supportsFormatCombination(0, io, 1, 1);
                DataType const type = static_cast<DataType>(t);
                bool const floatType = type == DataType::kFLOAT || type == DataType::kHALF || type == DataType::kBF16;
                if (yes && (!floatType || static_cast<TensorFormat>(f) != TensorFormat::kLINEAR))
                {
                    onlyLinearFloat = false;
                    detail += " accepted type " + std::to_string(t) + " format " + std::to_string(f);
                }
                if (yes)
                {
                    accepted.push_back(type);
                }
            }
        }
        check(onlyLinearFloat,
            tag + "supportsFormatCombination(pos 0): only linear fp32/fp16/bf16 over " + std::to_string(nbTypes) + "x"
                + std::to_string(nbFormats) + " pairs",
            detail);
        bool const fp32 = std::count(accepted.begin(), accepted.end(), DataType::kFLOAT) == 1;
        bool const fp16 = std::count(accepted.begin(), accepted.end(), DataType::kHALF) == 1;
        bool const bf16 = std::count(accepted.begin(), accepted.end(), DataType::kBF16) == 1;
        check(fp32 && fp16, tag + "supportsFormatCombination(pos 0): linear fp32 and fp16 accepted");
        std::printf("INFO %sbf16 %s by the kernels\n", tag.c_str(), bf16 ? "supported" : "not supported");
        bool outputOk = true;
        for (DataType in : accepted)
        {
            for (int32_t t = 0; t < nbTypes; ++t)
            {
                for (int32_t f = 0; f < nbFormats; ++f)
                {
                    DynamicPluginTensorDesc io[2] = {};
                    io[0].desc.type = in;
                    io[0].desc.format = TensorFormat::kLINEAR;
                    io[1].desc.type = static_cast<DataType>(t);
                    io[1].desc.format = static_cast<TensorFormat>(f);
                    bool const yes = h.build->supportsFormatCombination(1, io, 1, 1);
                    bool const expected = static_cast<DataType>(t) == in
                        && static_cast<TensorFormat>(f) == TensorFormat::kLINEAR;
                    outputOk = outputOk && yes == expected;
                }
            }
        }
        check(outputOk, tag + "supportsFormatCombination(pos 1): exactly the input's dtype, linear");
        DynamicPluginTensorDesc io[2] = {};
        check(!h.build->supportsFormatCombination(2, io, 1, 1), tag + "supportsFormatCombination: pos 2 refused");
    }

    // configurePlugin + getWorkspaceSize with a dynamic profile.
    {
        Dims const any = dims4(-1, l.channels, -1, -1);
        Dims const min = dims4(1, l.channels, 1, 1);
        Dims const max = dims4(4, l.channels, 96, 80);
        DynamicPluginTensorDesc in = dynDesc(DataType::kHALF, any, min, max);
        DynamicPluginTensorDesc out = dynDesc(DataType::kHALF, dims4(-1, l.channels, -1, -1), min, max);
        gLogger.clear();
        check(
            h.build->configurePlugin(&in, 1, &out, 1) == 0, tag + "configurePlugin (dynamic N, H, W)", gLogger.last());
        size_t const ws = h.build->getWorkspaceSize(&in, 1, &out, 1);
        size_t const expected = wtconv::wtconvWorkspaceBytes(kernelParams(DataType::kHALF, max, l));
        check(ws == expected,
            tag + "getWorkspaceSize == wtconvWorkspaceBytes(profile max) = " + std::to_string(expected),
            "given " + std::to_string(ws));
        DynamicPluginTensorDesc in32 = dynDesc(DataType::kFLOAT, any, min, max);
        check(h.build->getWorkspaceSize(&in32, 1, &out, 1)
                == wtconv::wtconvWorkspaceBytes(kernelParams(DataType::kFLOAT, max, l)),
            tag + "getWorkspaceSize (fp32) == wtconvWorkspaceBytes");

        DynamicPluginTensorDesc badC = dynDesc(DataType::kHALF, dims4(-1, l.channels + 3, -1, -1), min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&badC, 1, &out, 1) != 0 && contains(gLogger.last(), "channel")
                && contains(gLogger.last(), std::to_string(l.channels + 3)),
            tag + "configurePlugin rejects channel mismatch, naming it", gLogger.last());
        DynamicPluginTensorDesc badProfile = dynDesc(DataType::kHALF, any, min, dims4(4, l.channels + 1, 96, 80));
        gLogger.clear();
        check(h.build->configurePlugin(&badProfile, 1, &out, 1) != 0 && contains(gLogger.last(), "profile"),
            tag + "configurePlugin rejects a profile whose channel range != C", gLogger.last());
        Dims three{};
        three.nbDims = 3;
        three.d[0] = l.channels;
        three.d[1] = 8;
        three.d[2] = 8;
        DynamicPluginTensorDesc bad3 = dynDesc(DataType::kHALF, three, three, three);
        gLogger.clear();
        check(h.build->configurePlugin(&bad3, 1, &out, 1) != 0 && contains(gLogger.last(), "4-D"),
            tag + "configurePlugin rejects a 3-D input", gLogger.last());
        DynamicPluginTensorDesc outF = dynDesc(DataType::kFLOAT, any, min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&in, 1, &outF, 1) != 0 && contains(gLogger.last(), "output 0"),
            tag + "configurePlugin rejects output dtype != input dtype", gLogger.last());
        DynamicPluginTensorDesc inInt = dynDesc(DataType::kINT8, any, min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&inInt, 1, &out, 1) != 0 && contains(gLogger.last(), "int8"),
            tag + "configurePlugin rejects int8 input", gLogger.last());
    }

    // Timing cache ID.
    char const* id = h.build->getTimingCacheID();
    check(id != nullptr && std::strlen(id) > 0, tag + "getTimingCacheID non-empty: " + std::string(id ? id : "(null)"));

    // clone keeps everything.
    IPluginV3* copy = plugin->clone();
    PluginHandles hc = capabilities(copy);
    std::string why;
    check(copy != nullptr && copy != plugin && hc.runtime != nullptr
            && sameFields(hc.runtime->getFieldsToSerialize(), h.runtime->getFieldsToSerialize(), why)
            && std::string(hc.build->getTimingCacheID()) == id,
        tag + "clone: a new object with the same fields and timing-cache ID", why);
    delete copy;

    // Serialize -> createPlugin(kRUNTIME) -> attachToContext.
    PluginFieldCollection const* serialized = h.runtime->getFieldsToSerialize();
    check(serialized != nullptr && serialized->nbFields == 8, tag + "getFieldsToSerialize: 8 fields");
    FieldSet engine = copyFields(serialized);
    delete plugin; // the engine bytes outlive the build-phase plugin
    PluginFieldCollection efc = engine.collection();
    gLogger.clear();
    IPluginV3* runtimePlugin = creator->createPlugin("wtconv_layer", &efc, TensorRTPhase::kRUNTIME);
    PluginHandles hr = capabilities(runtimePlugin);
    if (!check(runtimePlugin != nullptr && hr.runtime != nullptr, tag + "createPlugin(kRUNTIME) from serialized fields",
            gLogger.last()))
    {
        return;
    }
    check(sameFields(hr.runtime->getFieldsToSerialize(), &efc, why), tag + "serialize round trip is exact", why);

    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    IPluginV3* attached = hr.runtime->attachToContext(&context);
    PluginHandles ha = capabilities(attached);
    check(attached != nullptr && attached != runtimePlugin && ha.runtime != nullptr,
        tag + "attachToContext returns a new clone");
    if (ha.runtime != nullptr)
    {
        // Validation in onShapeChange happens before any CUDA call: errors go to the context's recorder.
        PluginTensorDesc in = desc(DataType::kFLOAT, dims4(2, l.channels + 1, 8, 8));
        PluginTensorDesc out = desc(DataType::kFLOAT, dims4(2, l.channels + 1, 8, 8));
        recorder.clear();
        check(ha.runtime->onShapeChange(&in, 1, &out, 1) != 0 && recorder.getNbErrors() == 1
                && contains(recorder.getErrorDesc(0), "channel"),
            tag + "onShapeChange rejects a channel mismatch through the context's IErrorRecorder");
        PluginTensorDesc in2 = desc(DataType::kFLOAT, dims4(2, l.channels, 9, 9));
        PluginTensorDesc out2 = desc(DataType::kFLOAT, dims4(2, l.channels, 9, 9));
        recorder.clear();
        check(l.stride == 1 || (ha.runtime->onShapeChange(&in2, 1, &out2, 1) != 0 && recorder.getNbErrors() == 1),
            tag + "onShapeChange rejects an output shape that ignores the stride");
        PluginTensorDesc in3 = desc(DataType::kHALF, dims4(2, l.channels, 9, 9));
        PluginTensorDesc out3 = desc(
            DataType::kFLOAT, dims4(2, l.channels, ceilDiv(9, l.stride), ceilDiv(9, l.stride)));
        recorder.clear();
        check(ha.runtime->onShapeChange(&in3, 1, &out3, 1) != 0 && recorder.getNbErrors() == 1,
            tag + "onShapeChange rejects output dtype != input dtype");
    }
    // enqueue refuses, with an error code and no launch, before any device work is possible.
    {
        PluginTensorDesc in = desc(DataType::kFLOAT, dims4(1, l.channels, 8, 8));
        PluginTensorDesc out = desc(DataType::kFLOAT, dims4(1, l.channels, ceilDiv(8, l.stride), ceilDiv(8, l.stride)));
        void const* inputs[] = {nullptr};
        void* outputs[] = {nullptr};
        gLogger.clear();
        check(hr.runtime->enqueue(nullptr, &out, inputs, outputs, nullptr, nullptr) == -1
                && contains(gLogger.last(), "null"),
            tag + "enqueue with null descriptors returns -1", gLogger.last());
        PluginTensorDesc badIn = desc(DataType::kFLOAT, dims4(1, l.channels + 2, 8, 8));
        gLogger.clear();
        check(hr.runtime->enqueue(&badIn, &out, inputs, outputs, nullptr, nullptr) == -1
                && contains(gLogger.last(), std::to_string(l.channels + 2)),
            tag + "enqueue with a channel mismatch returns -1", gLogger.last());
        gLogger.clear();
        check(hr.runtime->enqueue(&in, &out, inputs, outputs, nullptr, nullptr) == -1
                && contains(gLogger.last(), "not on the current device"),
            tag + "enqueue on a plugin whose weights were never uploaded returns -1 (enqueue never allocates)",
            gLogger.last());
        gLogger.clear();
        check(hr.plugin->getCapabilityInterface(static_cast<PluginCapabilityType>(7)) == nullptr
                && contains(gLogger.last(), "kCORE"),
            tag + "getCapabilityInterface of an unknown type returns null", gLogger.last());
    }
    delete attached;
    delete runtimePlugin;
}

void hostBadInputs(IPluginCreatorV3One* creator)
{
    LayerConfig const l = syntheticLayer(4, 3, 2, 2);
    int32_t const c = l.channels;
    auto create = [&](FieldSet const& f, TensorRTPhase phase = TensorRTPhase::kBUILD)
    {
        PluginFieldCollection fc = f.collection();
        gLogger.clear();
        return creator->createPlugin("bad_layer", &fc, phase);
    };

    // Missing fields.
    for (char const* name : {contract::kFIELD_KERNEL_SIZE, contract::kFIELD_WT_LEVELS, contract::kFIELD_STRIDE,
             contract::kFIELD_BASE_WEIGHT, contract::kFIELD_BASE_BIAS, contract::kFIELD_WAVELET_WEIGHT})
    {
        FieldSet f = parserFields(l);
        f.remove(name);
        expectRejected(create(f), std::string("missing field ") + name, {"missing", name});
    }
    {
        FieldSet f = parserFields(l);
        f.addInt("kernel", 3);
        expectRejected(create(f), "an unknown field", {"unknown field 'kernel'"});
    }
    {
        FieldSet f = parserFields(l);
        f.addInt(contract::kFIELD_STRIDE, 1);
        expectRejected(create(f), "a field given twice", {"stride", "twice"});
    }
    {
        FieldSet f = parserFields(l);
        float const v = 3.0F;
        f.remove(contract::kFIELD_KERNEL_SIZE);
        f.add(contract::kFIELD_KERNEL_SIZE, &v, sizeof(v), PluginFieldType::kFLOAT32, 1);
        expectRejected(create(f), "kernel_size as kFLOAT32", {"kernel_size", "kINT32", "kFLOAT32"});
    }
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_WT_LEVELS);
        f.addString(contract::kFIELD_WT_LEVELS, "2");
        expectRejected(create(f), "wt_levels as kCHAR", {"wt_levels", "kINT32", "kCHAR"});
    }
    {
        FieldSet f = parserFields(l);
        std::vector<int32_t> ints(l.baseWeight.size(), 1);
        f.remove(contract::kFIELD_BASE_WEIGHT);
        f.add(contract::kFIELD_BASE_WEIGHT, ints.data(), ints.size() * 4, PluginFieldType::kINT32,
            static_cast<int32_t>(ints.size()));
        expectRejected(create(f), "base_weight as kINT32", {"base_weight", "kFLOAT32", "kINT32"});
    }
    {
        FieldSet f = parserFields(l);
        std::vector<double> d(l.waveletWeight.size(), 0.5);
        f.remove(contract::kFIELD_WAVELET_WEIGHT);
        f.add(contract::kFIELD_WAVELET_WEIGHT, d.data(), d.size() * 8, PluginFieldType::kFLOAT64,
            static_cast<int32_t>(d.size()));
        expectRejected(create(f), "wavelet_weight as kFLOAT64", {"wavelet_weight", "kFLOAT64"});
    }
    {
        FieldSet f = parserFields(l);
        int32_t two[2] = {3, 3};
        f.remove(contract::kFIELD_KERNEL_SIZE);
        f.add(contract::kFIELD_KERNEL_SIZE, two, sizeof(two), PluginFieldType::kINT32, 2);
        expectRejected(create(f), "kernel_size of length 2", {"kernel_size", "length 1", "given 2"});
    }
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_STRIDE);
        f.add(contract::kFIELD_STRIDE, nullptr, 0, PluginFieldType::kINT32, 0);
        expectRejected(create(f), "stride of length 0", {"stride", "length 1", "given 0"});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_WT_LEVELS)->data = nullptr;
        expectRejected(create(f), "wt_levels with null data", {"wt_levels", "null"});
    }
    // Values out of range.
    for (int32_t k : {4, 0, -1, 17, 16})
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_KERNEL_SIZE);
        f.addInt(contract::kFIELD_KERNEL_SIZE, k);
        expectRejected(create(f), "kernel_size " + std::to_string(k),
            {"kernel_size", "odd", "1..15", "given " + std::to_string(k)});
    }
    for (int32_t levels : {0, 9, -3})
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_WT_LEVELS);
        f.addInt(contract::kFIELD_WT_LEVELS, levels);
        expectRejected(
            create(f), "wt_levels " + std::to_string(levels), {"wt_levels", "1..8", "given " + std::to_string(levels)});
    }
    for (int32_t stride : {0, -2})
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_STRIDE);
        f.addInt(contract::kFIELD_STRIDE, stride);
        expectRejected(
            create(f), "stride " + std::to_string(stride), {"stride", ">= 1", "given " + std::to_string(stride)});
    }
    // Weights that do not fit the channel count (C = length of base_bias).
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_BASE_WEIGHT)->length -= 1;
        expectRejected(create(f), "base_weight one short of C*k*k",
            {"base_weight", "C*k*k", std::to_string(c * 9), "given " + std::to_string(c * 9 - 1)});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_WAVELET_WEIGHT)->length -= 9;
        expectRejected(create(f), "wavelet_weight not L*4C*k*k",
            {"wavelet_weight", "L*4C*k*k", std::to_string(2 * 4 * c * 9),
                "given " + std::to_string(2 * 4 * c * 9 - 9)});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_BASE_BIAS)->length = c + 1; // one more channel than the weights hold
        // (the storage has c floats; the weight checks fire before base_bias is read)
        f.storage.emplace_back((c + 1) * sizeof(float), 0);
        f.find(contract::kFIELD_BASE_BIAS)->data = f.storage.back().data();
        expectRejected(create(f), "base_bias implying C+1 channels", {"base_weight", "C=" + std::to_string(c + 1)});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_BASE_BIAS)->length = 0;
        expectRejected(create(f), "empty base_bias", {"base_bias", "C >= 1", "given 0"});
    }
    // Collections that are malformed as a whole.
    {
        gLogger.clear();
        expectRejected(creator->createPlugin("x", nullptr, TensorRTPhase::kBUILD), "a null field collection", {"null"});
        PluginFieldCollection fc{};
        fc.nbFields = 3;
        fc.fields = nullptr;
        gLogger.clear();
        expectRejected(
            creator->createPlugin("x", &fc, TensorRTPhase::kBUILD), "nbFields 3 with null fields", {"nbFields 3"});
        fc.nbFields = -1;
        gLogger.clear();
        expectRejected(creator->createPlugin("x", &fc, TensorRTPhase::kBUILD), "nbFields -1", {"nbFields -1"});
        FieldSet f = parserFields(l);
        f.fields[2].name = nullptr;
        expectRejected(create(f), "a field without a name", {"#2", "no name"});
    }
    // fp16 weight fields are accepted and converted exactly (values representable in fp16).
    {
        LayerConfig h = l;
        for (auto* v : {&h.baseWeight, &h.baseBias, &h.waveletWeight})
        {
            for (size_t i = 0; i < v->size(); ++i)
            {
                (*v)[i] = static_cast<float>(static_cast<int32_t>(i % 17) - 8) * 0.125F;
            }
        }
        auto toHalf = [](float x)
        {
            // exact for the multiples of 1/8 in [-1, 1] used here
            if (x == 0.0F)
            {
                return static_cast<uint16_t>(0);
            }
            uint32_t bits;
            std::memcpy(&bits, &x, 4);
            uint32_t const sign = (bits >> 16) & 0x8000U;
            int32_t const exp = static_cast<int32_t>((bits >> 23) & 0xFFU) - 127 + 15;
            uint32_t const mant = (bits >> 13) & 0x3FFU;
            return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | mant);
        };
        FieldSet f;
        for (auto const& nv : {std::make_pair(contract::kFIELD_BASE_WEIGHT, &h.baseWeight),
                 std::make_pair(contract::kFIELD_BASE_BIAS, &h.baseBias),
                 std::make_pair(contract::kFIELD_WAVELET_WEIGHT, &h.waveletWeight)})
        {
            std::vector<uint16_t> half(nv.second->size());
            std::transform(nv.second->begin(), nv.second->end(), half.begin(), toHalf);
            f.add(nv.first, half.data(), half.size() * 2, PluginFieldType::kFLOAT16, static_cast<int32_t>(half.size()));
        }
        f.addInt(contract::kFIELD_KERNEL_SIZE, h.k);
        f.addInt(contract::kFIELD_WT_LEVELS, h.levels);
        f.addInt(contract::kFIELD_STRIDE, h.stride);
        IPluginV3* p = create(f);
        PluginHandles hp = capabilities(p);
        bool ok = p != nullptr && hp.runtime != nullptr;
        if (ok)
        {
            FieldSet s = copyFields(hp.runtime->getFieldsToSerialize());
            PluginField* w = s.find(contract::kFIELD_WAVELET_WEIGHT);
            ok = w != nullptr && w->type == PluginFieldType::kFLOAT32
                && std::memcmp(w->data, h.waveletWeight.data(), h.waveletWeight.size() * 4) == 0;
        }
        check(ok, "accepts kFLOAT16 weight fields and stores them as exact fp32", gLogger.last());
        delete p;
    }

    // Corrupted serialized (engine) field sets, each field's bytes ending at a PROT_NONE page.
    FieldSet good = parserFields(l);
    good.remove(contract::kFIELD_PLUGIN_VERSION);
    good.remove(contract::kFIELD_PLUGIN_NAMESPACE);
    PluginFieldCollection gfc = good.collection();
    IPluginV3* builder = creator->createPlugin("layer", &gfc, TensorRTPhase::kBUILD);
    PluginHandles hb = capabilities(builder);
    if (!check(hb.runtime != nullptr, "serialized field set for corruption tests"))
    {
        delete builder;
        return;
    }
    FieldSet engine = copyFields(hb.runtime->getFieldsToSerialize());
    delete builder;
    auto guarded = [&](std::function<void(FieldSet&)> const& corrupt, std::string const& what,
                       std::vector<std::string> const& needles)
    {
        FieldSet f = engine;
        for (size_t i = 0; i < f.fields.size(); ++i)
        {
            f.fields[i].name = f.names[i].c_str();
            f.fields[i].data = f.storage[i].empty() ? nullptr : f.storage[i].data();
        }
        corrupt(f);
        std::vector<std::unique_ptr<GuardedBytes>> pages;
        for (auto& field : f.fields)
        {
            size_t const elem = field.type == PluginFieldType::kFLOAT16 ? 2 : 4;
            size_t const bytes = field.length > 0 ? elem * static_cast<size_t>(field.length) : 0;
            if (field.data != nullptr)
            {
                pages.emplace_back(std::make_unique<GuardedBytes>(field.data, bytes));
                field.data = pages.back()->data();
            }
        }
        IPluginV3* p = create(f, TensorRTPhase::kRUNTIME);
        if (needles.empty())
        {
            check(p != nullptr, "serialized: " + what, gLogger.last());
            delete p;
        }
        else
        {
            expectRejected(p, "serialized: " + what, needles);
        }
    };
    guarded([](FieldSet&) {}, "(control) the uncorrupted field set, guarded, is accepted", {});
    guarded([](FieldSet& f) { f.remove(contract::kFIELD_SERIALIZATION_VERSION); }, "missing serialization version",
        {contract::kFIELD_SERIALIZATION_VERSION});
    guarded([](FieldSet& f) { f.remove(contract::kFIELD_WEIGHTS_CHECKSUM); }, "missing checksum",
        {contract::kFIELD_WEIGHTS_CHECKSUM});
    guarded(
        [](FieldSet& f)
        {
            int32_t const v = 2;
            std::memcpy(const_cast<void*>(f.find(contract::kFIELD_SERIALIZATION_VERSION)->data), &v, 4);
        },
        "serialization version 2", {contract::kFIELD_SERIALIZATION_VERSION, "expected 1", "given 2"});
    guarded(
        [](FieldSet& f)
        {
            float* w = static_cast<float*>(const_cast<void*>(f.find(contract::kFIELD_WAVELET_WEIGHT)->data));
            w[5] = std::nextafter(w[5], 2.0F);
        },
        "one weight flipped by an ulp", {contract::kFIELD_WEIGHTS_CHECKSUM, "corrupted"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_WAVELET_WEIGHT)->length -= 1; },
        "wavelet_weight truncated by one", {"wavelet_weight", "given"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_BASE_BIAS)->length -= 1; }, "base_bias truncated by one",
        {"base_weight"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_KERNEL_SIZE)->length = 0; }, "kernel_size with length 0",
        {"kernel_size", "length 1"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_STRIDE)->type = PluginFieldType::kFLOAT32; }, "stride retyped",
        {"stride", "kINT32"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_BASE_WEIGHT)->type = PluginFieldType::kINT8; },
        "base_weight retyped", {"base_weight", "kINT8"});
    guarded(
        [](FieldSet& f)
        {
            f.fields.resize(3); // truncated field list
        },
        "field list truncated to 3 fields", {"missing"});
}

void hostStaticRegistration(std::string const& path)
{
    TestPluginRegistry* registry = testRegistry();
    size_t const before = registry->mRegistered.size();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!check(handle != nullptr, "static library: dlopen", handle ? "" : dlerror()))
    {
        return;
    }
    check(registry->mRegistered.size() == before + 1, "static library: registers exactly one creator when loaded");
    check(dlsym(handle, "getCreators") == nullptr && dlsym(handle, "setLoggerFinder") == nullptr,
        "static library: no loadLibrary entry points (cannot be registered twice through loadLibrary)");
    if (registry->mRegistered.size() != before + 1)
    {
        return;
    }
    auto const& entry = registry->mRegistered.back();
    check(entry.second == contract::kPLUGIN_NAMESPACE, "static library: registered in namespace \"\"");
    InterfaceInfo const info = entry.first->getInterfaceInfo();
    if (!check(std::string(info.kind) == "PLUGIN CREATOR_V3ONE", "static library: creator is an IPluginCreatorV3One"))
    {
        return;
    }
    auto* creator = static_cast<IPluginCreatorV3One*>(entry.first);
    check(std::string(creator->getPluginName()) == contract::kPLUGIN_NAME
            && std::string(creator->getPluginVersion()) == contract::kPLUGIN_VERSION,
        "static library: creator name/version");
    hostBuildMethods(creator, syntheticLayer(6, 5, 3, 2), "static library: ");
    // Its messages go to libnvinfer's getLogger() (here: this harness's logger).
    FieldSet f = parserFields(syntheticLayer(2, 3, 1, 1));
    f.remove(contract::kFIELD_STRIDE);
    PluginFieldCollection fc = f.collection();
    gLogger.clear();
    expectRejected(creator->createPlugin("x", &fc, TensorRTPhase::kBUILD),
        "(static library) missing stride, logged via getLogger()", {"missing field 'stride'"});
}

int runHost(std::string const& dynamicLib, std::string const& staticLib)
{
    std::printf("INFO TensorRT headers %d.%d, harness mode host (no CUDA device needed)\n", NV_TENSORRT_MAJOR,
        NV_TENSORRT_MINOR);
    PluginLibrary lib = loadDynamicLibrary(dynamicLib);
    if (lib.creator != nullptr)
    {
        IPluginCreatorV3One* creator = lib.creator;
        check(std::string(creator->getPluginName()) == contract::kPLUGIN_NAME
                && std::string(creator->getPluginVersion()) == contract::kPLUGIN_VERSION
                && std::string(creator->getPluginNamespace()) == contract::kPLUGIN_NAMESPACE,
            "creator name/version/namespace match the contract");
        PluginFieldCollection const* names = creator->getFieldNames();
        bool ok = names != nullptr && names->nbFields == 6;
        std::map<std::string, PluginFieldType> expected{{contract::kFIELD_KERNEL_SIZE, PluginFieldType::kINT32},
            {contract::kFIELD_WT_LEVELS, PluginFieldType::kINT32}, {contract::kFIELD_STRIDE, PluginFieldType::kINT32},
            {contract::kFIELD_BASE_WEIGHT, PluginFieldType::kFLOAT32},
            {contract::kFIELD_BASE_BIAS, PluginFieldType::kFLOAT32},
            {contract::kFIELD_WAVELET_WEIGHT, PluginFieldType::kFLOAT32}};
        for (int32_t i = 0; ok && i < names->nbFields; ++i)
        {
            auto it = expected.find(names->fields[i].name);
            ok = it != expected.end() && it->second == names->fields[i].type;
        }
        check(ok, "getFieldNames lists the six contract fields with their types");
        // Several configurations: stride 1/2/3, k 1..15, levels 1..8.
        hostBuildMethods(creator, syntheticLayer(4, 3, 2, 2), "");
        hostBuildMethods(creator, syntheticLayer(8, 5, 3, 1), "[k5 L3 s1] ");
        hostBuildMethods(creator, syntheticLayer(3, 15, 8, 3), "[k15 L8 s3] ");
        hostBuildMethods(creator, syntheticLayer(5, 1, 1, 1), "[k1 L1 s1] ");
        // Distinct configurations get distinct timing-cache IDs.
        {
            std::vector<std::string> ids;
            for (auto const& cfg : {syntheticLayer(4, 3, 2, 2), syntheticLayer(4, 5, 2, 2), syntheticLayer(4, 3, 3, 2),
                     syntheticLayer(4, 3, 2, 1), syntheticLayer(5, 3, 2, 2)})
            {
                FieldSet f = parserFields(cfg);
                PluginFieldCollection fc = f.collection();
                IPluginV3* p = creator->createPlugin("id", &fc, TensorRTPhase::kBUILD);
                PluginHandles hp = capabilities(p);
                ids.push_back(hp.build != nullptr ? hp.build->getTimingCacheID() : "");
                delete p;
            }
            std::vector<std::string> sorted = ids;
            std::sort(sorted.begin(), sorted.end());
            check(std::unique(sorted.begin(), sorted.end()) == sorted.end() && !ids[0].empty(),
                "getTimingCacheID differs across (k, L, stride, C)");
        }
        hostBadInputs(creator);
    }
    hostStaticRegistration(staticLib);
    std::printf("host: %d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------
// GPU part

#define CUDA_OK(call)                                                                                                  \
    do                                                                                                                 \
    {                                                                                                                  \
        cudaError_t const e_ = (call);                                                                                 \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            std::printf("FAIL CUDA %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_));             \
            ++gFailed;                                                                                                 \
            return false;                                                                                              \
        }                                                                                                              \
    } while (0)

template <typename T>
bool readFile(std::string const& path, std::vector<T>& out)
{
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f)
    {
        return false;
    }
    std::streamsize const bytes = f.tellg();
    f.seekg(0);
    out.resize(static_cast<size_t>(bytes) / sizeof(T));
    return static_cast<bool>(f.read(reinterpret_cast<char*>(out.data()), bytes));
}

struct RunCase
{
    std::string layer;
    std::string dtype; // float32 | float16 | bfloat16
    int64_t n{0}, h{0}, w{0};
    double bound{0};
    std::vector<char> x;      // input bytes in dtype
    std::vector<double> yRef; // float64 spec output
};

DataType dataTypeOf(std::string const& s)
{
    return s == "float32" ? DataType::kFLOAT : s == "float16" ? DataType::kHALF : DataType::kBF16;
}

size_t elemSize(DataType t)
{
    return t == DataType::kFLOAT ? 4 : 2;
}

double toDouble(DataType t, char const* p)
{
    if (t == DataType::kFLOAT)
    {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    uint32_t bits;
    if (t == DataType::kBF16)
    {
        bits = static_cast<uint32_t>(h) << 16;
    }
    else
    {
        uint32_t const sign = static_cast<uint32_t>(h & 0x8000U) << 16;
        uint32_t e = (h >> 10) & 0x1FU;
        uint32_t m = h & 0x3FFU;
        if (e == 0x1FU)
            bits = sign | 0x7F800000U | (m << 13);
        else if (e != 0)
            bits = sign | ((e + 112U) << 23) | (m << 13);
        else if (m != 0)
        {
            e = 113U;
            while ((m & 0x400U) == 0)
            {
                m <<= 1;
                --e;
            }
            bits = sign | (e << 23) | ((m & 0x3FFU) << 13);
        }
        else
            bits = sign;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// max |y - ref| / max |ref|; NaN anywhere (the poison) -> infinity.
double relError(DataType t, std::vector<char> const& y, std::vector<double> const& ref)
{
    double maxErr = 0;
    double maxRef = 0;
    size_t const es = elemSize(t);
    for (size_t i = 0; i < ref.size(); ++i)
    {
        double const v = toDouble(t, y.data() + i * es);
        if (!std::isfinite(v))
        {
            return INFINITY;
        }
        maxErr = std::max(maxErr, std::fabs(v - ref[i]));
        maxRef = std::max(maxRef, std::fabs(ref[i]));
    }
    return maxRef > 0 ? maxErr / maxRef : maxErr;
}

struct GpuLayer
{
    LayerConfig cfg;
    std::vector<RunCase> runs;
};

struct DeviceRun
{
    DataType type{};
    Dims in{}, out{};
    void* x{nullptr};
    void* y{nullptr};
    size_t xBytes{0}, yBytes{0};
};

bool prepare(RunCase const& r, LayerConfig const& l, DeviceRun& d)
{
    d.type = dataTypeOf(r.dtype);
    d.in = dims4(r.n, l.channels, r.h, r.w);
    d.out = dims4(r.n, l.channels, ceilDiv(r.h, l.stride), ceilDiv(r.w, l.stride));
    d.xBytes = r.x.size();
    d.yBytes = r.yRef.size() * elemSize(d.type);
    CUDA_OK(cudaMalloc(&d.x, d.xBytes));
    CUDA_OK(cudaMalloc(&d.y, d.yBytes));
    CUDA_OK(cudaMemcpy(d.x, r.x.data(), d.xBytes, cudaMemcpyHostToDevice));
    return true;
}

void release(DeviceRun& d)
{
    cudaFree(d.x);
    cudaFree(d.y);
    d.x = d.y = nullptr;
}

bool fetchAndCompare(DeviceRun const& d, RunCase const& r, std::vector<double> const& ref, std::string const& what)
{
    std::vector<char> y(d.yBytes);
    CUDA_OK(cudaMemcpy(y.data(), d.y, d.yBytes, cudaMemcpyDeviceToHost));
    double const err = relError(d.type, y, ref);
    char buf[160];
    std::snprintf(buf, sizeof(buf), "rel err %.3e <= bound %.3e", err, r.bound);
    return check(err <= r.bound, what + ": " + buf, buf);
}

// Builds the layer's plugin through the build phase (configure over the runs' range), serializes it and
// deserializes it in the runtime phase. Returns the runtime-phase plugin (caller deletes) and the workspace size.
IPluginV3* buildAndDeserialize(IPluginCreatorV3One* creator, GpuLayer const& layer, DataType type, size_t& workspace)
{
    FieldSet fields = parserFields(layer.cfg);
    PluginFieldCollection fc = fields.collection();
    IPluginV3* plugin = creator->createPlugin(layer.cfg.name.c_str(), &fc, TensorRTPhase::kBUILD);
    PluginHandles h = capabilities(plugin);
    if (!check(h.build != nullptr, layer.cfg.name + ": createPlugin(kBUILD)", gLogger.last()))
    {
        delete plugin;
        return nullptr;
    }
    Dims min = dims4(INT32_MAX, layer.cfg.channels, INT32_MAX, INT32_MAX);
    Dims max = dims4(0, layer.cfg.channels, 0, 0);
    for (auto const& r : layer.runs)
    {
        min.d[0] = std::min(min.d[0], r.n);
        min.d[2] = std::min(min.d[2], r.h);
        min.d[3] = std::min(min.d[3], r.w);
        max.d[0] = std::max(max.d[0], r.n);
        max.d[2] = std::max(max.d[2], r.h);
        max.d[3] = std::max(max.d[3], r.w);
    }
    DynamicPluginTensorDesc in = dynDesc(type, dims4(-1, layer.cfg.channels, -1, -1), min, max);
    DynamicPluginTensorDesc out = dynDesc(type, dims4(-1, layer.cfg.channels, -1, -1), min, max);
    check(h.build->configurePlugin(&in, 1, &out, 1) == 0, layer.cfg.name + ": configurePlugin", gLogger.last());
    workspace = h.build->getWorkspaceSize(&in, 1, &out, 1);
    FieldSet engine = copyFields(h.runtime->getFieldsToSerialize());
    delete plugin;
    PluginFieldCollection efc = engine.collection();
    IPluginV3* runtimePlugin = creator->createPlugin(layer.cfg.name.c_str(), &efc, TensorRTPhase::kRUNTIME);
    check(runtimePlugin != nullptr, layer.cfg.name + ": createPlugin(kRUNTIME)", gLogger.last());
    return runtimePlugin;
}

bool poison(DeviceRun const& d, cudaStream_t stream)
{
    CUDA_OK(cudaMemsetAsync(d.y, 0xFF, d.yBytes, stream)); // NaN in fp32/fp16/bf16
    return true;
}

bool gpuLayer(IPluginCreatorV3One* creator, GpuLayer const& layer)
{
    std::map<std::string, std::vector<RunCase const*>> byType;
    for (auto const& r : layer.runs)
    {
        byType[r.dtype].push_back(&r);
    }
    for (auto const& entry : byType)
    {
        DataType const type = dataTypeOf(entry.first);
        std::string const tag = layer.cfg.name + " " + entry.first;
        // Skip dtypes the kernels do not have (bf16 is optional).
        {
            FieldSet f = parserFields(layer.cfg);
            PluginFieldCollection fc = f.collection();
            IPluginV3* p = creator->createPlugin("probe", &fc, TensorRTPhase::kBUILD);
            PluginHandles h = capabilities(p);
            DynamicPluginTensorDesc io[2] = {};
            io[0].desc.type = type;
            io[0].desc.format = TensorFormat::kLINEAR;
            bool const supported = h.build != nullptr && h.build->supportsFormatCombination(0, io, 1, 1);
            delete p;
            if (!supported)
            {
                std::printf("SKIP %s: dtype not supported by the kernels\n", tag.c_str());
                continue;
            }
        }
        GpuLayer sub;
        sub.cfg = layer.cfg;
        for (auto const* r : entry.second)
        {
            sub.runs.push_back(*r);
        }
        size_t workspaceBytes = 0;
        IPluginV3* runtimePlugin = buildAndDeserialize(creator, sub, type, workspaceBytes);
        PluginHandles hr = capabilities(runtimePlugin);
        if (hr.runtime == nullptr)
        {
            delete runtimePlugin;
            continue;
        }
        TestErrorRecorder recorder;
        TestResourceContext context(&recorder);
        IPluginV3* ctxPlugin = hr.runtime->attachToContext(&context);
        PluginHandles hc = capabilities(ctxPlugin);
        if (!check(hc.runtime != nullptr, tag + ": attachToContext"))
        {
            delete runtimePlugin;
            delete ctxPlugin;
            continue;
        }
        void* workspace = nullptr;
        if (workspaceBytes > 0)
        {
            CUDA_OK(cudaMalloc(&workspace, workspaceBytes));
        }
        cudaStream_t stream;
        CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

        // Shape changes through onShapeChange + enqueue, in manifest order (several N, H, W).
        for (auto const& r : sub.runs)
        {
            DeviceRun d;
            if (!prepare(r, sub.cfg, d))
            {
                continue;
            }
            std::string const what = tag + " N=" + std::to_string(r.n) + " H=" + std::to_string(r.h)
                + " W=" + std::to_string(r.w);
            PluginTensorDesc in = desc(type, d.in);
            PluginTensorDesc out = desc(type, d.out);
            bool ok = check(hc.runtime->onShapeChange(&in, 1, &out, 1) == 0, what + ": onShapeChange", gLogger.last());
            ok = ok && poison(d, stream);
            void const* inputs[] = {d.x};
            void* outputs[] = {d.y};
            ok = ok
                && check(hc.runtime->enqueue(&in, &out, inputs, outputs, workspace, stream) == 0, what + ": enqueue",
                    gLogger.last());
            if (ok && cudaStreamSynchronize(stream) == cudaSuccess)
            {
                fetchAndCompare(d, r, r.yRef, what);
            }
            release(d);
        }

        // Two contexts on two streams at once (each with its own workspace, as TensorRT gives them).
        if (sub.runs.size() >= 2)
        {
            RunCase const& ra = sub.runs[0];
            RunCase const& rb = sub.runs[1];
            IPluginV3* pa = hr.runtime->attachToContext(&context);
            IPluginV3* pb = hr.runtime->attachToContext(&context);
            PluginHandles ha = capabilities(pa), hb = capabilities(pb);
            DeviceRun da, db;
            void* wa = nullptr;
            void* wb = nullptr;
            cudaStream_t sa, sb;
            bool ok = ha.runtime != nullptr && hb.runtime != nullptr && prepare(ra, sub.cfg, da)
                && prepare(rb, sub.cfg, db);
            if (ok && workspaceBytes > 0)
            {
                ok = cudaMalloc(&wa, workspaceBytes) == cudaSuccess && cudaMalloc(&wb, workspaceBytes) == cudaSuccess;
            }
            ok = ok && cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking) == cudaSuccess
                && cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking) == cudaSuccess;
            if (ok)
            {
                PluginTensorDesc ia = desc(type, da.in), oa = desc(type, da.out);
                PluginTensorDesc ib = desc(type, db.in), ob = desc(type, db.out);
                ok = ha.runtime->onShapeChange(&ia, 1, &oa, 1) == 0 && hb.runtime->onShapeChange(&ib, 1, &ob, 1) == 0;
                void const* xa[] = {da.x};
                void* ya[] = {da.y};
                void const* xb[] = {db.x};
                void* yb[] = {db.y};
                ok = ok && poison(da, sa) && poison(db, sb);
                for (int i = 0; ok && i < 4; ++i) // interleaved, no synchronisation in between
                {
                    ok = ha.runtime->enqueue(&ia, &oa, xa, ya, wa, sa) == 0
                        && hb.runtime->enqueue(&ib, &ob, xb, yb, wb, sb) == 0;
                }
                ok = ok && cudaStreamSynchronize(sa) == cudaSuccess && cudaStreamSynchronize(sb) == cudaSuccess;
                if (check(ok, tag + ": two contexts enqueued on two streams"))
                {
                    fetchAndCompare(da, ra, ra.yRef, tag + ": context A (stream A)");
                    fetchAndCompare(db, rb, rb.yRef, tag + ": context B (stream B)");
                }
                cudaStreamDestroy(sa);
                cudaStreamDestroy(sb);
            }
            else
            {
                check(false, tag + ": two contexts set up");
            }
            release(da);
            release(db);
            cudaFree(wa);
            cudaFree(wb);
            delete pa;
            delete pb;
        }

        // CUDA graph: capture one enqueue (global capture mode: an allocation or synchronisation inside
        // enqueue would invalidate the capture), replay it, then replay on new input data in place.
        {
            RunCase const& r = sub.runs.back();
            DeviceRun d;
            if (prepare(r, sub.cfg, d))
            {
                PluginTensorDesc in = desc(type, d.in), out = desc(type, d.out);
                void const* inputs[] = {d.x};
                void* outputs[] = {d.y};
                bool ok = hc.runtime->onShapeChange(&in, 1, &out, 1) == 0;
                cudaGraph_t graph = nullptr;
                cudaGraphExec_t exec = nullptr;
                ok = ok && cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess;
                int32_t const rc = ok ? hc.runtime->enqueue(&in, &out, inputs, outputs, workspace, stream) : -1;
                cudaError_t const endStatus = cudaStreamEndCapture(stream, &graph);
                ok = check(ok && rc == 0 && endStatus == cudaSuccess && graph != nullptr,
                    tag + ": enqueue captured into a CUDA graph (global capture mode)",
                    std::string(cudaGetErrorString(endStatus)) + " rc=" + std::to_string(rc));
                ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
                for (int replay = 0; ok && replay < 2; ++replay)
                {
                    ok = poison(d, stream) && cudaGraphLaunch(exec, stream) == cudaSuccess
                        && cudaStreamSynchronize(stream) == cudaSuccess;
                    ok = ok && fetchAndCompare(d, r, r.yRef, tag + ": graph replay " + std::to_string(replay + 1));
                }
                if (ok)
                {
                    // y(-x) = 2 b_c - y(x): the operator is affine with per-channel bias b.
                    std::vector<char> neg = r.x;
                    size_t const es = elemSize(type);
                    for (size_t i = 0; i < neg.size(); i += es)
                    {
                        neg[i + es - 1] = static_cast<char>(neg[i + es - 1] ^ 0x80); // flip the sign bit
                    }
                    std::vector<double> ref(r.yRef.size());
                    size_t const plane = static_cast<size_t>(d.out.d[2] * d.out.d[3]);
                    for (size_t i = 0; i < ref.size(); ++i)
                    {
                        size_t const c = (i / plane) % static_cast<size_t>(sub.cfg.channels);
                        ref[i] = 2.0 * static_cast<double>(sub.cfg.baseBias[c]) - r.yRef[i];
                    }
                    ok = cudaMemcpy(d.x, neg.data(), neg.size(), cudaMemcpyHostToDevice) == cudaSuccess
                        && poison(d, stream) && cudaGraphLaunch(exec, stream) == cudaSuccess
                        && cudaStreamSynchronize(stream) == cudaSuccess;
                    ok = ok && fetchAndCompare(d, r, ref, tag + ": graph replay on new input (-x)");
                }
                if (exec != nullptr)
                    cudaGraphExecDestroy(exec);
                if (graph != nullptr)
                    cudaGraphDestroy(graph);
                release(d);
            }
        }

        // Enqueue error paths: return an error code, never throw or crash.
        {
            RunCase const& r = sub.runs.front();
            DeviceRun d;
            if (prepare(r, sub.cfg, d))
            {
                PluginTensorDesc in = desc(type, d.in), out = desc(type, d.out);
                void const* inputs[] = {d.x};
                void* outputs[] = {d.y};
                hc.runtime->onShapeChange(&in, 1, &out, 1);
                recorder.clear();
                // The profile's workspace (workspaceBytes) is sized for its largest shape; this shape may need
                // none (planes up to 64x64 run in one workspace-free launch), so decide from this shape.
                if (wtconv::wtconvWorkspaceBytes(kernelParams(type, d.in, sub.cfg)) > 0)
                {
                    check(hc.runtime->enqueue(&in, &out, inputs, outputs, nullptr, stream) != 0
                            && recorder.getNbErrors() > 0,
                        tag + ": enqueue without its workspace returns an error (recorded)", gLogger.last());
                }
                else
                {
                    check(hc.runtime->enqueue(&in, &out, inputs, outputs, nullptr, stream) == 0,
                        tag + ": enqueue of a shape that needs no workspace runs without one", gLogger.last());
                }
                PluginTensorDesc badIn = desc(type, dims4(r.n, sub.cfg.channels + 1, r.h, r.w));
                check(hc.runtime->enqueue(&badIn, &out, inputs, outputs, workspace, stream) != 0,
                    tag + ": enqueue with a channel mismatch returns an error");
                check(hc.runtime->enqueue(&in, &out, nullptr, outputs, workspace, stream) != 0,
                    tag + ": enqueue with null inputs returns an error");
                // A runtime-phase plugin never attached nor shape-changed has no device weights: refuses.
                check(hr.runtime->enqueue(&in, &out, inputs, outputs, workspace, stream) != 0,
                    tag + ": enqueue before attachToContext/onShapeChange refuses (no allocation in enqueue)");
                check(cudaStreamSynchronize(stream) == cudaSuccess && cudaGetLastError() == cudaSuccess,
                    tag + ": the stream is healthy after the error paths");
                release(d);
            }
        }
        cudaStreamDestroy(stream);
        cudaFree(workspace);
        delete ctxPlugin;
        delete runtimePlugin;
    }
    return true;
}

bool loadCases(std::string const& dir, std::vector<GpuLayer>& layers)
{
    std::ifstream manifest(dir + "/manifest.txt");
    if (!check(static_cast<bool>(manifest), "read " + dir + "/manifest.txt"))
    {
        return false;
    }
    std::string line;
    while (std::getline(manifest, line))
    {
        std::istringstream s(line);
        std::string kind;
        s >> kind;
        if (kind == "layer")
        {
            GpuLayer g;
            s >> g.cfg.name >> g.cfg.channels >> g.cfg.k >> g.cfg.levels >> g.cfg.stride;
            bool ok = readFile(dir + "/" + g.cfg.name + ".base_weight.f32", g.cfg.baseWeight)
                && readFile(dir + "/" + g.cfg.name + ".base_bias.f32", g.cfg.baseBias)
                && readFile(dir + "/" + g.cfg.name + ".wavelet_weight.f32", g.cfg.waveletWeight);
            if (!check(ok, "read weights of " + g.cfg.name))
            {
                return false;
            }
            layers.push_back(std::move(g));
        }
        else if (kind == "run")
        {
            RunCase r;
            std::string prefix;
            s >> r.layer >> r.dtype >> r.n >> r.h >> r.w >> r.bound >> prefix;
            bool ok = readFile(dir + "/" + prefix + ".x.bin", r.x) && readFile(dir + "/" + prefix + ".y.f64", r.yRef);
            if (!check(ok && !layers.empty() && layers.back().cfg.name == r.layer, "read run " + prefix))
            {
                return false;
            }
            layers.back().runs.push_back(std::move(r));
        }
    }
    return !layers.empty();
}

int runGpu(std::string const& dynamicLib, std::string const& casesDir)
{
    std::printf("INFO TensorRT headers %d.%d, harness mode gpu\n", NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    {
        std::printf("SKIP gpu: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("INFO device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    PluginLibrary lib = loadDynamicLibrary(dynamicLib);
    std::vector<GpuLayer> layers;
    if (lib.creator != nullptr && loadCases(casesDir, layers))
    {
        for (auto const& layer : layers)
        {
            gpuLayer(lib.creator, layer);
        }
    }
    std::printf("gpu: %d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 && gPassed > 0 ? 0 : 1;
}

} // namespace

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
        return runHost(dynamicLib, staticLib);
    }
    if (mode == "gpu" && !dynamicLib.empty() && !cases.empty())
    {
        return runGpu(dynamicLib, cases);
    }
    std::fprintf(stderr,
        "usage: %s host --dynamic-lib <lib> --static-lib <lib>\n"
        "       %s gpu --dynamic-lib <lib> --static-lib <lib> --cases <dir>\n",
        argv[0], argv[0]);
    return 2;
}
