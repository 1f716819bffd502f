// gpuTests.cpp — the harness's GPU part: enqueue with real device memory against the float64 cases of
// make_cases.py, shape changes, every layout (NCHW, the channels-last formats, a channels_last node), two contexts
// on two streams, CUDA-graph capture and replay against eager enqueues, error paths.
// Exit code 77 (CTest: skipped) when there is no CUDA device.
#include "harnessSupport.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/file.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

namespace wtconv_harness
{
namespace
{

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
    CUDA_OK(uploadNow(d.x, r.x.data(), d.xBytes));
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

// The profile range over a layer's runs: (N, C, H, W), or (N, H, W, C) for a channels_last node.
void profileRange(GpuLayer const& layer, bool channelsLast, Dims& min, Dims& max)
{
    int64_t const c = layer.cfg.channels;
    int const h = channelsLast ? 1 : 2;
    int const w = h + 1;
    min = channelsLast ? dims4(INT32_MAX, INT32_MAX, INT32_MAX, c) : dims4(INT32_MAX, c, INT32_MAX, INT32_MAX);
    max = channelsLast ? dims4(0, 0, 0, c) : dims4(0, c, 0, 0);
    for (auto const& r : layer.runs)
    {
        min.d[0] = std::min(min.d[0], r.n);
        min.d[h] = std::min(min.d[h], r.h);
        min.d[w] = std::min(min.d[w], r.w);
        max.d[0] = std::max(max.d[0], r.n);
        max.d[h] = std::max(max.d[h], r.h);
        max.d[w] = std::max(max.d[w], r.w);
    }
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
    Dims min{}, max{};
    profileRange(layer, false, min, max);
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

// NCHW <-> channels-last with `pitch` elements per pixel (channels c >= C are padding), on raw element bytes.
std::vector<char> toChannelsLast(std::vector<char> const& nchw, Dims const& d, int64_t pitch, size_t es, char padByte)
{
    int64_t const n = d.d[0], c = d.d[1], h = d.d[2], w = d.d[3];
    std::vector<char> out(static_cast<size_t>(n * h * w * pitch) * es, padByte);
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < h * w; ++i)
            {
                std::memcpy(out.data() + static_cast<size_t>((b * h * w + i) * pitch + ch) * es,
                    nchw.data() + static_cast<size_t>((b * c + ch) * h * w + i) * es, es);
            }
    return out;
}

std::vector<char> fromChannelsLast(std::vector<char> const& nhwc, Dims const& d, int64_t pitch, size_t es)
{
    int64_t const n = d.d[0], c = d.d[1], h = d.d[2], w = d.d[3];
    std::vector<char> out(static_cast<size_t>(n * c * h * w) * es);
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < h * w; ++i)
            {
                std::memcpy(out.data() + static_cast<size_t>((b * c + ch) * h * w + i) * es,
                    nhwc.data() + static_cast<size_t>((b * h * w + i) * pitch + ch) * es, es);
            }
    return out;
}

// Captures one enqueue into a CUDA graph (global capture mode: an allocation, a synchronisation or a wait on work
// recorded outside the capture would invalidate it) and replays the graph at two input values, x and -x: each
// replay must give, bit for bit, what an eager enqueue gave on that input (the output is poisoned before every
// run, so a replay that writes nothing or reads a stale input fails). `x` is laid out as `in` says.
bool captureMatchesEager(IPluginV3OneRuntime* runtime, PluginTensorDesc const& in, PluginTensorDesc const& out,
    std::vector<char> const& x, size_t yBytes, void* workspace, cudaStream_t stream, std::string const& what)
{
    size_t const es = elemSize(in.type);
    std::vector<char> negated = x;
    for (size_t i = 0; i < negated.size(); i += es)
    {
        negated[i + es - 1] = static_cast<char>(negated[i + es - 1] ^ 0x80); // the sign bit
    }
    std::vector<char> const* inputs[2] = {&x, &negated};
    void* dx = nullptr;
    void* dy = nullptr;
    CUDA_OK(cudaMalloc(&dx, x.size()));
    CUDA_OK(cudaMalloc(&dy, yBytes));
    void const* ins[] = {dx};
    void* outs[] = {dy};
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    // One run on `input`: the eager enqueue (exec null) or the graph's replay; false on any failure.
    auto runOnce = [&](std::vector<char> const& input, std::vector<char>& result) -> bool
    {
        if (uploadNow(dx, input.data(), input.size()) != cudaSuccess
            || cudaMemsetAsync(dy, 0xFF, yBytes, stream) != cudaSuccess)
        {
            return false;
        }
        bool const launched = exec != nullptr ? cudaGraphLaunch(exec, stream) == cudaSuccess
                                              : runtime->enqueue(&in, &out, ins, outs, workspace, stream) == 0;
        result.assign(yBytes, 0);
        return launched && cudaStreamSynchronize(stream) == cudaSuccess
            && cudaMemcpy(result.data(), dy, yBytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    };
    std::vector<char> eager[2];
    bool ok = check(runtime->onShapeChange(&in, 1, &out, 1) == 0, what + ": onShapeChange", gLogger.last());
    for (int i = 0; ok && i < 2; ++i)
    {
        ok = check(runOnce(*inputs[i], eager[i]), what + ": eager enqueue at " + (i == 0 ? "x" : "-x"), gLogger.last());
    }
    ok = ok
        && check(
            eager[0] != eager[1], what + ": the eager outputs at x and -x differ (the replays can tell them apart)");
    if (ok)
    {
        bool const began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess;
        gLogger.clear();
        int32_t const rc = began ? runtime->enqueue(&in, &out, ins, outs, workspace, stream) : -1;
        cudaError_t const end = began ? cudaStreamEndCapture(stream, &graph) : cudaErrorUnknown;
        ok = check(began && rc == 0 && end == cudaSuccess && graph != nullptr,
            what + ": enqueue captured into a CUDA graph (global capture mode)",
            std::string(cudaGetErrorString(end)) + " rc=" + std::to_string(rc) + " " + gLogger.last());
        ok = ok && check(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, what + ": graph instantiated");
    }
    for (int i = 0; ok && i < 2; ++i)
    {
        std::vector<char> replayed;
        check(runOnce(*inputs[i], replayed) && replayed == eager[i],
            what + ": graph replay at " + (i == 0 ? "x" : "-x") + " equals the eager enqueue bit for bit");
    }
    if (exec != nullptr)
    {
        cudaGraphExecDestroy(exec);
    }
    if (graph != nullptr)
    {
        cudaGraphDestroy(graph);
    }
    cudaFree(dx);
    cudaFree(dy);
    return check(cudaStreamSynchronize(stream) == cudaSuccess && cudaGetLastError() == cudaSuccess,
        what + ": the stream is healthy after the capture");
}

// Index of the run whose shape needs the most kernel workspace in the layout `p` describes (sizes filled in per run).
size_t mostWorkspace(GpuLayer const& layer, wtconv::WTConvParams p, size_t& bytes)
{
    size_t best = 0;
    bytes = 0;
    for (size_t i = 0; i < layer.runs.size(); ++i)
    {
        p.batch = layer.runs[i].n;
        p.height = layer.runs[i].h;
        p.width = layer.runs[i].w;
        size_t const need = wtconv::wtconvWorkspaceBytes(p);
        if (i == 0 || need > bytes)
        {
            best = i;
            bytes = need;
        }
    }
    return best;
}

// One run of `r` in a channels-last layout with `pitch` elements per pixel: the input transposed on the host (padding
// channels filled with `padByte`), onShapeChange + enqueue with the descriptors `in` / `out` (the format's, or a
// channels_last node's (N, H, W, C)), the output (poisoned with NaN bytes first) transposed back and compared with
// the float64 reference. `y` receives the output as the layout holds it (empty when the run failed).
bool channelsLastRun(IPluginV3OneRuntime* runtime, PluginTensorDesc const& in, PluginTensorDesc const& out,
    RunCase const& r, int64_t channels, int32_t stride, int64_t pitch, char padByte, void* workspace,
    cudaStream_t stream, std::string const& what, std::vector<char>& y)
{
    size_t const es = elemSize(in.type);
    Dims const logicalIn = dims4(r.n, channels, r.h, r.w);
    Dims const logicalOut = dims4(r.n, channels, ceilDiv(r.h, stride), ceilDiv(r.w, stride));
    std::vector<char> const x = toChannelsLast(r.x, logicalIn, pitch, es, padByte);
    size_t const yBytes = static_cast<size_t>(logicalOut.d[0] * logicalOut.d[2] * logicalOut.d[3] * pitch) * es;
    y.clear();
    void* dx = nullptr;
    void* dy = nullptr;
    CUDA_OK(cudaMalloc(&dx, x.size()));
    CUDA_OK(cudaMalloc(&dy, yBytes));
    CUDA_OK(uploadNow(dx, x.data(), x.size()));
    CUDA_OK(cudaMemsetAsync(dy, 0xFF, yBytes, stream));
    void const* inputs[] = {dx};
    void* outputs[] = {dy};
    bool const ok = check(runtime->onShapeChange(&in, 1, &out, 1) == 0, what + ": onShapeChange", gLogger.last())
        && check(
            runtime->enqueue(&in, &out, inputs, outputs, workspace, stream) == 0, what + ": enqueue", gLogger.last());
    if (ok && cudaStreamSynchronize(stream) == cudaSuccess)
    {
        y.resize(yBytes);
        CUDA_OK(cudaMemcpy(y.data(), dy, yBytes, cudaMemcpyDeviceToHost));
        double const err = relError(in.type, fromChannelsLast(y, logicalOut, pitch, es), r.yRef);
        char buf[160];
        std::snprintf(buf, sizeof(buf), "rel err %.3e <= bound %.3e", err, r.bound);
        check(err <= r.bound, what + ": " + buf, buf);
    }
    cudaFree(dx);
    cudaFree(dy);
    return !y.empty();
}

// Every channels-last format the plugin offers for `type`: each run through onShapeChange + enqueue with the
// input transposed on the host (padding channels filled with NaN bytes), the output compared with the same
// float64 reference after transposing back, and the output's padding channels (poisoned with NaN bytes before the
// launch) checked to be zeros: TensorRT does not say what they hold, and a consumer reading whole 8- or 16-channel
// vectors must not meet a stale NaN.
bool channelsLastRuns(
    PluginHandles const& hc, GpuLayer const& sub, DataType type, cudaStream_t stream, std::string const& tag)
{
    size_t const es = elemSize(type);
    for (TensorFormat const format : {TensorFormat::kHWC, TensorFormat::kHWC8, TensorFormat::kHWC16})
    {
        int64_t const pitch = channelsLastPitch(format, type, sub.cfg.channels);
        DynamicPluginTensorDesc io[2] = {};
        io[0].desc.type = type;
        io[0].desc.format = format;
        if (pitch == 0 || !hc.build->supportsFormatCombination(0, io, 1, 1))
        {
            continue;
        }
        std::string const fname = format == TensorFormat::kHWC ? "kHWC"
            : format == TensorFormat::kHWC8                    ? "kHWC8"
                                                               : "kHWC16";
        Dims min{}, max{};
        profileRange(sub, false, min, max);
        DynamicPluginTensorDesc in = dynDesc(type, dims4(-1, sub.cfg.channels, -1, -1), min, max);
        in.desc.format = format;
        DynamicPluginTensorDesc outDyn = in;
        size_t const workspaceBytes = hc.build->getWorkspaceSize(&in, 1, &outDyn, 1);
        void* workspace = nullptr;
        if (workspaceBytes > 0)
        {
            CUDA_OK(cudaMalloc(&workspace, workspaceBytes));
        }
        for (auto const& r : sub.runs)
        {
            std::string const what = tag + " " + fname + " N=" + std::to_string(r.n) + " H=" + std::to_string(r.h)
                + " W=" + std::to_string(r.w);
            PluginTensorDesc pin = desc(type, dims4(r.n, sub.cfg.channels, r.h, r.w));
            PluginTensorDesc pout = desc(
                type, dims4(r.n, sub.cfg.channels, ceilDiv(r.h, sub.cfg.stride), ceilDiv(r.w, sub.cfg.stride)));
            pin.format = format;
            pout.format = format;
            std::vector<char> y;
            if (channelsLastRun(hc.runtime, pin, pout, r, sub.cfg.channels, sub.cfg.stride, pitch,
                    static_cast<char>(0xFF), workspace, stream, what, y)
                && pitch > sub.cfg.channels)
            {
                bool paddingZero = true;
                for (size_t px = 0; paddingZero && px < y.size() / es / static_cast<size_t>(pitch); ++px)
                {
                    for (int64_t ch = sub.cfg.channels; paddingZero && ch < pitch; ++ch)
                    {
                        for (size_t b = 0; b < es; ++b)
                        {
                            paddingZero = paddingZero
                                && y[(px * static_cast<size_t>(pitch) + static_cast<size_t>(ch)) * es + b] == 0;
                        }
                    }
                }
                check(paddingZero, what + ": padding channels of the output are zeros");
            }
        }
        {
            wtconv::WTConvParams p = kernelParams(type, dims4(1, sub.cfg.channels, 1, 1), sub.cfg);
            p.layout = wtconv::Layout::kNHWC;
            p.channelPitch = pitch;
            size_t need = 0;
            RunCase const& r = sub.runs[mostWorkspace(sub, p, need)];
            Dims const dIn = dims4(r.n, sub.cfg.channels, r.h, r.w);
            Dims const dOut = dims4(r.n, sub.cfg.channels, ceilDiv(r.h, sub.cfg.stride), ceilDiv(r.w, sub.cfg.stride));
            PluginTensorDesc pin = desc(type, dIn);
            PluginTensorDesc pout = desc(type, dOut);
            pin.format = format;
            pout.format = format;
            captureMatchesEager(hc.runtime, pin, pout, toChannelsLast(r.x, dIn, pitch, es, static_cast<char>(0xFF)),
                static_cast<size_t>(dOut.d[0] * dOut.d[2] * dOut.d[3] * pitch) * es, workspace, stream,
                tag + " " + fname + " N=" + std::to_string(r.n) + " H=" + std::to_string(r.h)
                    + " W=" + std::to_string(r.w) + " (workspace " + std::to_string(need) + " bytes)");
        }
        cudaFree(workspace);
    }
    return true;
}

// The same runs through a node with channels_last = 1 (docs/design.md §4): the plugin's tensors are (N, H, W, C)
// in kLINEAR, the input transposed on the host, the output compared with the float64 reference after transposing
// back; then the run that needs the most workspace captured into a CUDA graph and replayed.
bool channelsLastNodeRuns(
    IPluginCreatorV3One* creator, GpuLayer const& sub, DataType type, cudaStream_t stream, std::string const& tag)
{
    int64_t const c = sub.cfg.channels;
    size_t const es = elemSize(type);
    FieldSet fields = parserFields(sub.cfg);
    fields.addInt(contract::kFIELD_CHANNELS_LAST, 1);
    PluginFieldCollection fc = fields.collection();
    std::unique_ptr<IPluginV3> built(creator->createPlugin(sub.cfg.name.c_str(), &fc, TensorRTPhase::kBUILD));
    PluginHandles hb = capabilities(built.get());
    if (!check(hb.build != nullptr, tag + " channels_last=1: createPlugin(kBUILD)", gLogger.last()))
    {
        return false;
    }
    DynamicPluginTensorDesc io[2] = {};
    io[0].desc.type = type;
    io[0].desc.format = TensorFormat::kLINEAR;
    if (!hb.build->supportsFormatCombination(0, io, 1, 1))
    {
        std::printf("SKIP %s channels_last=1: the kernels do not run this dtype channels-last\n", tag.c_str());
        return true;
    }
    Dims min{}, max{};
    profileRange(sub, true, min, max);
    DynamicPluginTensorDesc in = dynDesc(type, dims4(-1, -1, -1, c), min, max);
    DynamicPluginTensorDesc outDyn = in;
    if (!check(hb.build->configurePlugin(&in, 1, &outDyn, 1) == 0, tag + " channels_last=1: configurePlugin",
            gLogger.last()))
    {
        return false;
    }
    size_t const workspaceBytes = hb.build->getWorkspaceSize(&in, 1, &outDyn, 1);
    FieldSet engine = copyFields(hb.runtime->getFieldsToSerialize());
    PluginFieldCollection efc = engine.collection();
    std::unique_ptr<IPluginV3> runtime(creator->createPlugin(sub.cfg.name.c_str(), &efc, TensorRTPhase::kRUNTIME));
    PluginHandles hr = capabilities(runtime.get());
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    std::unique_ptr<IPluginV3> attached(hr.runtime != nullptr ? hr.runtime->attachToContext(&context) : nullptr);
    PluginHandles ha = capabilities(attached.get());
    if (!check(ha.runtime != nullptr, tag + " channels_last=1: deserialized and attached", gLogger.last()))
    {
        return false;
    }
    void* workspace = nullptr;
    if (workspaceBytes > 0)
    {
        CUDA_OK(cudaMalloc(&workspace, workspaceBytes));
    }
    for (auto const& r : sub.runs)
    {
        std::string const what = tag + " channels_last=1 N=" + std::to_string(r.n) + " H=" + std::to_string(r.h)
            + " W=" + std::to_string(r.w);
        std::vector<char> y;
        channelsLastRun(ha.runtime, desc(type, dims4(r.n, r.h, r.w, c)),
            desc(type, dims4(r.n, ceilDiv(r.h, sub.cfg.stride), ceilDiv(r.w, sub.cfg.stride), c)), r, c, sub.cfg.stride,
            c, 0, workspace, stream, what, y);
    }
    {
        wtconv::WTConvParams p = kernelParams(type, dims4(1, c, 1, 1), sub.cfg);
        p.layout = wtconv::Layout::kNHWC;
        p.channelPitch = c;
        size_t need = 0;
        RunCase const& r = sub.runs[mostWorkspace(sub, p, need)];
        Dims const logicalIn = dims4(r.n, c, r.h, r.w);
        int64_t const oh = ceilDiv(r.h, sub.cfg.stride);
        int64_t const ow = ceilDiv(r.w, sub.cfg.stride);
        captureMatchesEager(ha.runtime, desc(type, dims4(r.n, r.h, r.w, c)), desc(type, dims4(r.n, oh, ow, c)),
            toChannelsLast(r.x, logicalIn, c, es, 0), static_cast<size_t>(r.n * oh * ow * c) * es, workspace, stream,
            tag + " channels_last=1 N=" + std::to_string(r.n) + " H=" + std::to_string(r.h)
                + " W=" + std::to_string(r.w) + " (workspace " + std::to_string(need) + " bytes)");
    }
    cudaFree(workspace);
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

        // The same runs in every channels-last format the plugin offers for this dtype, and through a node with
        // channels_last = 1.
        channelsLastRuns(hc, sub, type, stream, tag);
        channelsLastNodeRuns(creator, sub, type, stream, tag);

        // Capture and replay at the run that needs the most workspace, against eager enqueues.
        {
            size_t need = 0;
            RunCase const& r
                = sub.runs[mostWorkspace(sub, kernelParams(type, dims4(1, sub.cfg.channels, 1, 1), sub.cfg), need)];
            DeviceRun d;
            if (prepare(r, sub.cfg, d))
            {
                captureMatchesEager(hc.runtime, desc(type, d.in), desc(type, d.out), r.x, d.yBytes, workspace, stream,
                    tag + " kLINEAR N=" + std::to_string(r.n) + " H=" + std::to_string(r.h)
                        + " W=" + std::to_string(r.w) + " (workspace " + std::to_string(need) + " bytes)");
                release(d);
            }
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
                    ok = uploadNow(d.x, neg.data(), neg.size()) == cudaSuccess && poison(d, stream)
                        && cudaGraphLaunch(exec, stream) == cudaSuccess && cudaStreamSynchronize(stream) == cudaSuccess;
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
                // A runtime-phase plugin never attached has no device weights. Inside a stream capture enqueue
                // refuses (no allocation or copy while capturing) and leaves the capture valid; outside a
                // capture it uploads them on its stream and computes.
                {
                    cudaGraph_t graph = nullptr;
                    bool const began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess;
                    gLogger.clear();
                    int32_t const rc = began ? hr.runtime->enqueue(&in, &out, inputs, outputs, workspace, stream) : 0;
                    std::string const message = gLogger.last();
                    cudaError_t const endStatus = cudaStreamEndCapture(stream, &graph);
                    check(began && rc != 0 && contains(message, "captur") && endStatus == cudaSuccess,
                        tag + ": enqueue without uploaded weights inside a capture refuses, capture stays valid",
                        message + " / end capture: " + cudaGetErrorString(endStatus));
                    if (graph != nullptr)
                        cudaGraphDestroy(graph);
                    bool ok = poison(d, stream)
                        && check(hr.runtime->enqueue(&in, &out, inputs, outputs, workspace, stream) == 0,
                            tag + ": enqueue without uploaded weights, not capturing, uploads them", gLogger.last())
                        && cudaStreamSynchronize(stream) == cudaSuccess;
                    ok = ok && fetchAndCompare(d, r, r.yRef, tag + ": result after the upload in enqueue");
                }
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

} // namespace

int runGpu(std::string const& dynamicLib, std::string const& casesDir)
{
    std::printf("INFO TensorRT headers %d.%d, harness mode gpu\n", NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    {
        std::printf("SKIP gpu: no CUDA device\n");
        return 77;
    }
    // One GPU part at a time on this machine (two header sets may be built and run at once): one check takes all
    // free device memory for a moment, which would fail the other run's allocations.
    std::string const lockPath = std::string(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp")
        + "/wtconv_plugin_harness_gpu.lock";
    int const lockFd = open(lockPath.c_str(), O_CREAT | O_RDWR, 0666);
    if (lockFd >= 0)
    {
        flock(lockFd, LOCK_EX);
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("INFO device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    PluginLibrary lib = loadDynamicLibrary(dynamicLib);
    std::vector<GpuLayer> layers;
    if (lib.creator != nullptr)
    {
        runConcurrencyTests(lib.creator); // first: no kernel's shared-memory limit has been raised yet
    }
    if (lib.creator != nullptr && loadCases(casesDir, layers))
    {
        for (auto const& layer : layers)
        {
            gpuLayer(lib.creator, layer);
        }
    }
    if (lib.creator != nullptr)
    {
        runFailureTests(lib.creator); // last: one takes all free device memory for a moment
    }
    std::printf("gpu: %d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 && gPassed > 0 ? 0 : 1;
}

} // namespace wtconv_harness
