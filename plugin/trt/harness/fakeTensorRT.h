// fakeTensorRT.h — what TensorRT gives a plugin, implemented from TensorRT's public headers alone: a logger
// (through ILoggerFinder), an error recorder and resource context (attachToContext), an IExprBuilder whose
// expressions can be evaluated, and a plugin registry for static registration (fakeTensorRT.cpp exports
// getPluginRegistry and getLogger, the libnvinfer symbols the statically registering library uses).
#pragma once

#include "NvInferRuntime.h"
#include "NvInferVersion.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace wtconv_harness
{

using namespace nvinfer1;

// ---------------------------------------------------------------------------------------------------
// What TensorRT gives a plugin: a logger (through ILoggerFinder), an error recorder (through the
// IPluginResourceContext of attachToContext).

// Keeps warnings and errors. TensorRT's loggers may be called from several threads (execution contexts on
// several threads), so the messages are guarded.
class CaptureLogger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kWARNING)
        {
            std::lock_guard<std::mutex> lock(mMutex);
            mMessages.emplace_back(msg != nullptr ? msg : "");
        }
    }
    std::string last() const
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return mMessages.empty() ? std::string() : mMessages.back();
    }
    size_t count() const
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return mMessages.size();
    }
    std::vector<std::string> messages() const
    {
        std::lock_guard<std::mutex> lock(mMutex);
        return mMessages;
    }
    void clear()
    {
        std::lock_guard<std::mutex> lock(mMutex);
        mMessages.clear();
    }

private:
    mutable std::mutex mMutex;
    std::vector<std::string> mMessages;
};

inline CaptureLogger gLogger;

class TestLoggerFinder : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &gLogger;
    }
};

inline TestLoggerFinder gLoggerFinder;

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

inline int64_t evaluate(IDimensionExpr const* e, std::map<std::string, int64_t> const& env)
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

inline TestPluginRegistry* testRegistry()
{
    static TestPluginRegistry* registry = new TestPluginRegistry(); // destructor is protected in TensorRT 11
    return registry;
}

} // namespace wtconv_harness
