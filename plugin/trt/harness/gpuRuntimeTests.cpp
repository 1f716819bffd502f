// gpuRuntimeTests.cpp — the harness's GPU checks of what happens around enqueue in a serving process: several
// execution contexts launching at once on their own threads and streams, a transient out-of-memory while a
// context is created, and the weight upload while another stream of the process is being captured into a CUDA
// graph. The oracle of each is the plugin's own result on the same input in a healthy state (the kernels'
// numbers are checked against the float64 spec by gpuTests.cpp); what is checked is that nothing fails or
// differs because of the circumstances.
#include "harnessSupport.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

namespace wtconv_harness
{
namespace
{

size_t elementBytes(DataType type)
{
    return type == DataType::kFLOAT ? 4 : 2;
}

char const* typeName(DataType type)
{
    return type == DataType::kFLOAT ? "float32" : type == DataType::kHALF ? "float16" : "bfloat16";
}

char const* formatName(TensorFormat format)
{
    return format == TensorFormat::kLINEAR ? "kLINEAR" : "kHWC8";
}

// Pseudo-random inputs in [-1, 1) in `type` (the bit patterns of small floats for the 16-bit types).
std::vector<char> randomInput(DataType type, size_t elements, uint32_t seed)
{
    std::vector<char> out(elements * elementBytes(type));
    uint32_t state = seed * 2654435761U + 1U;
    for (size_t i = 0; i < elements; ++i)
    {
        state = state * 1664525U + 1013904223U;
        float const v = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (type == DataType::kFLOAT)
        {
            std::memcpy(out.data() + 4 * i, &bits, 4);
        }
        else
        {
            // bf16: the top half of the fp32 bits; fp16: a value in the same range built from sign and mantissa.
            uint16_t h = type == DataType::kBF16
                ? static_cast<uint16_t>(bits >> 16)
                : static_cast<uint16_t>((bits >> 16 & 0x8000U) | 0x3800U | (bits >> 13 & 0x3FFU));
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

// A plugin through the build phase for `format` over the given shapes, serialized and deserialized in the
// runtime phase (what an engine holds). Returns nullptr (with a FAIL line) when any step fails.
std::unique_ptr<IPluginV3> runtimePlugin(IPluginCreatorV3One* creator, LayerConfig const& layer, DataType type,
    TensorFormat format, std::vector<Dims> const& shapes, size_t& workspaceBytes)
{
    FieldSet fields = parserFields(layer);
    PluginFieldCollection fc = fields.collection();
    std::unique_ptr<IPluginV3> built(creator->createPlugin(layer.name.c_str(), &fc, TensorRTPhase::kBUILD));
    PluginHandles h = capabilities(built.get());
    if (!check(h.build != nullptr, layer.name + ": createPlugin(kBUILD)", gLogger.last()))
    {
        return nullptr;
    }
    Dims min = shapes.front(), max = shapes.front();
    for (Dims const& s : shapes)
    {
        for (int i = 0; i < 4; ++i)
        {
            min.d[i] = std::min(min.d[i], s.d[i]);
            max.d[i] = std::max(max.d[i], s.d[i]);
        }
    }
    DynamicPluginTensorDesc in = dynDesc(type, dims4(-1, layer.channels, -1, -1), min, max);
    in.desc.format = format;
    DynamicPluginTensorDesc out = in;
    if (!check(h.build->configurePlugin(&in, 1, &out, 1) == 0, layer.name + ": configurePlugin", gLogger.last()))
    {
        return nullptr;
    }
    workspaceBytes = h.build->getWorkspaceSize(&in, 1, &out, 1);
    FieldSet engine = copyFields(h.runtime->getFieldsToSerialize());
    PluginFieldCollection efc = engine.collection();
    std::unique_ptr<IPluginV3> runtime(creator->createPlugin(layer.name.c_str(), &efc, TensorRTPhase::kRUNTIME));
    check(runtime != nullptr, layer.name + ": createPlugin(kRUNTIME)", gLogger.last());
    return runtime;
}

// One execution context's tensors for one shape (elements per pixel: `pitch`, = C for kLINEAR).
struct Tensors
{
    Dims in{}, out{};
    std::vector<char> x;
    void* dx{nullptr};
    void* dy{nullptr};
    void* workspace{nullptr};
    size_t yBytes{0};

    bool allocate(DataType type, Dims const& shape, int64_t pitch, size_t workspaceBytes, uint32_t seed)
    {
        in = shape;
        out = shape;
        size_t const inElements = static_cast<size_t>(shape.d[0] * pitch * shape.d[2] * shape.d[3]);
        x = randomInput(type, inElements, seed);
        yBytes = inElements * elementBytes(type);
        return cudaMalloc(&dx, x.size()) == cudaSuccess && cudaMalloc(&dy, yBytes) == cudaSuccess
            && uploadNow(dx, x.data(), x.size()) == cudaSuccess
            && (workspaceBytes == 0 || cudaMalloc(&workspace, workspaceBytes) == cudaSuccess);
    }
    std::vector<char> output() const
    {
        std::vector<char> y(yBytes);
        if (cudaMemcpy(y.data(), dy, yBytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        {
            y.clear();
        }
        return y;
    }
    ~Tensors()
    {
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(workspace);
    }
};

int32_t enqueueOnce(IPluginV3OneRuntime* runtime, DataType type, TensorFormat format, Tensors& t, cudaStream_t stream)
{
    PluginTensorDesc in = desc(type, t.in);
    PluginTensorDesc out = desc(type, t.out);
    in.format = format;
    out.format = format;
    void const* inputs[] = {t.dx};
    void* outputs[] = {t.dy};
    if (runtime->onShapeChange(&in, 1, &out, 1) != 0 || cudaMemsetAsync(t.dy, 0xFF, t.yBytes, stream) != cudaSuccess)
    {
        return -1;
    }
    return runtime->enqueue(&in, &out, inputs, outputs, t.workspace, stream);
}

// Several execution contexts of one engine launch the same kernel instantiation for the first time at once, each
// on its own thread and stream, with different plane sizes that need different amounts of dynamic shared memory
// above 48 KB (the kernel's attribute must be raised for each). Every launch must succeed, at once and later.
void concurrentFirstLaunches(IPluginCreatorV3One* creator)
{
    constexpr int kThreads = 8;
    constexpr int kChannels = 8; // channels-last kHWC8 without padding, so its cluster kernels run too
    constexpr int kLevels = 4;
    // Plane sizes on the whole-plane path; each (k, dtype, layout) keeps those of distinct shared memory > 48 KB.
    int64_t const candidates[][2] = {{64, 64}, {64, 56}, {56, 64}, {60, 60}, {64, 48}, {48, 64}, {56, 56}, {52, 52}};
    for (DataType const type : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16})
    {
        for (TensorFormat const format : {TensorFormat::kLINEAR, TensorFormat::kHWC8})
        {
            if (format == TensorFormat::kHWC8 && type == DataType::kFLOAT)
            {
                continue;
            }
            for (int32_t const k : {1, 3, 5, 7, 9})
            {
                LayerConfig layer = syntheticLayer(kChannels, k, kLevels, 1);
                layer.name = std::string("concurrent k=") + std::to_string(k) + " " + typeName(type) + " "
                    + formatName(format);
                std::vector<Dims> shapes;
                std::vector<size_t> sizes;
                for (auto const& hw : candidates)
                {
                    wtconv::WTConvParams p = kernelParams(type, dims4(1, kChannels, hw[0], hw[1]), layer);
                    p.layout = format == TensorFormat::kLINEAR ? wtconv::Layout::kNCHW : wtconv::Layout::kNHWC;
                    wtconv::LaunchInfo info;
                    if (wtconv::wtconvLaunchInfo(p, &info) == cudaSuccess && info.wholePlane
                        && info.sharedBytesPerBlock > 48 * 1024
                        && std::find(sizes.begin(), sizes.end(), info.sharedBytesPerBlock) == sizes.end())
                    {
                        sizes.push_back(info.sharedBytesPerBlock);
                        shapes.push_back(dims4(1, kChannels, hw[0], hw[1]));
                    }
                }
                if (shapes.size() < 2)
                {
                    std::printf("INFO %s: fewer than two plane sizes above 48 KB of shared memory, not run\n",
                        layer.name.c_str());
                    continue;
                }
                size_t workspaceBytes = 0;
                std::unique_ptr<IPluginV3> runtime = runtimePlugin(
                    creator, layer, type, format, shapes, workspaceBytes);
                PluginHandles hr = capabilities(runtime.get());
                if (hr.runtime == nullptr)
                {
                    continue;
                }
                TestErrorRecorder recorders[kThreads];
                std::unique_ptr<TestResourceContext> contexts[kThreads];
                std::unique_ptr<IPluginV3> attached[kThreads];
                Tensors tensors[kThreads];
                cudaStream_t streams[kThreads] = {};
                bool ready = true;
                for (int t = 0; t < kThreads; ++t)
                {
                    contexts[t] = std::make_unique<TestResourceContext>(&recorders[t]);
                    attached[t].reset(hr.runtime->attachToContext(contexts[t].get()));
                    ready = ready && capabilities(attached[t].get()).runtime != nullptr
                        && tensors[t].allocate(type, shapes[t % shapes.size()], kChannels, workspaceBytes, 17U + t)
                        && cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking) == cudaSuccess;
                }
                std::string sizeList;
                for (size_t s : sizes)
                {
                    sizeList += (sizeList.empty() ? "" : ", ") + std::to_string(s);
                }
                if (check(ready, layer.name + ": contexts, tensors and streams set up"))
                {
                    std::atomic<bool> go{false};
                    int32_t rc[kThreads] = {};
                    std::vector<std::thread> threads;
                    for (int t = 0; t < kThreads; ++t)
                    {
                        threads.emplace_back(
                            [&, t]
                            {
                                IPluginV3OneRuntime* r = capabilities(attached[t].get()).runtime;
                                while (!go.load(std::memory_order_acquire))
                                {
                                }
                                for (int i = 0; i < 3 && rc[t] == 0; ++i)
                                {
                                    rc[t] = enqueueOnce(r, type, format, tensors[t], streams[t]);
                                }
                                if (rc[t] == 0 && cudaStreamSynchronize(streams[t]) != cudaSuccess)
                                {
                                    rc[t] = -2;
                                }
                            });
                    }
                    go.store(true, std::memory_order_release);
                    for (auto& thread : threads)
                    {
                        thread.join();
                    }
                    bool all = true;
                    std::string detail;
                    for (int t = 0; t < kThreads; ++t)
                    {
                        all = all && rc[t] == 0;
                        if (rc[t] != 0 && detail.empty())
                        {
                            detail = "thread " + std::to_string(t) + " rc " + std::to_string(rc[t]) + ": "
                                + (recorders[t].getNbErrors() > 0 ? recorders[t].getErrorDesc(0) : gLogger.last());
                        }
                    }
                    check(all,
                        layer.name + ": " + std::to_string(kThreads) + " contexts launching at once on their own "
                            + "threads and streams, shared memory per block " + sizeList + " bytes",
                        detail);
                    // Afterwards every size must still launch, and give what it gave in the concurrent run (or
                    // what the same context gives alone, when that run failed).
                    bool same = true;
                    bool later = true;
                    for (int t = 0; t < kThreads; ++t)
                    {
                        std::vector<char> const first = tensors[t].output();
                        IPluginV3OneRuntime* r = capabilities(attached[t].get()).runtime;
                        later = later && enqueueOnce(r, type, format, tensors[t], streams[t]) == 0
                            && cudaStreamSynchronize(streams[t]) == cudaSuccess;
                        same = same && (rc[t] != 0 || tensors[t].output() == first);
                    }
                    check(later && same, layer.name + ": every size launches again afterwards, same results");
                }
                for (cudaStream_t s : streams)
                {
                    if (s != nullptr)
                    {
                        cudaStreamDestroy(s);
                    }
                }
            }
        }
    }
}

// Takes every byte of device memory it can (so the next cudaMalloc anywhere in the process fails); free() gives
// it back.
struct MemoryHog
{
    std::vector<void*> blocks;

    void take()
    {
        for (size_t bytes = size_t{1} << 36; bytes >= 256; bytes /= 2)
        {
            void* p = nullptr;
            while (cudaMalloc(&p, bytes) == cudaSuccess)
            {
                blocks.push_back(p);
            }
        }
        cudaGetLastError(); // our own failed attempts: not an error of the plugin under test
    }
    void free()
    {
        for (void* p : blocks)
        {
            cudaFree(p);
        }
        blocks.clear();
    }
    ~MemoryHog()
    {
        free();
    }
};

// attachToContext while the device has no free memory (a transient out-of-memory: another process, or a burst of
// this one): the weights cannot be uploaded, which attachToContext reports as a warning and enqueue retries. Once
// memory is free again, enqueue must upload them and compute, as a context created in good times does: the failed
// allocation must not be reported again by a later launch.
void transientOutOfMemory(IPluginCreatorV3One* creator)
{
    std::string const name = "transient out-of-memory";
    LayerConfig layer = syntheticLayer(8, 5, 3, 1);
    layer.name = name;
    Dims const shape = dims4(2, 8, 40, 40);
    size_t workspaceBytes = 0;
    std::unique_ptr<IPluginV3> runtime = runtimePlugin(
        creator, layer, DataType::kFLOAT, TensorFormat::kLINEAR, {shape}, workspaceBytes);
    PluginHandles hr = capabilities(runtime.get());
    if (hr.runtime == nullptr)
    {
        return;
    }
    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    Tensors t;
    cudaStream_t stream = nullptr;
    if (!check(t.allocate(DataType::kFLOAT, shape, 8, workspaceBytes, 5U)
                && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess,
            name + ": tensors set up"))
    {
        return;
    }
    // A healthy context first: its result is the oracle, and the kernels are loaded before memory runs out.
    std::unique_ptr<IPluginV3> healthy(hr.runtime->attachToContext(&context));
    std::vector<char> expected;
    if (check(capabilities(healthy.get()).runtime != nullptr
                && enqueueOnce(capabilities(healthy.get()).runtime, DataType::kFLOAT, TensorFormat::kLINEAR, t, stream)
                    == 0
                && cudaStreamSynchronize(stream) == cudaSuccess,
            name + ": a context created with memory free computes", gLogger.last()))
    {
        expected = t.output();
    }
    MemoryHog hog;
    hog.take();
    void* probe = nullptr;
    bool const exhausted = cudaMalloc(&probe, 256) != cudaSuccess;
    cudaGetLastError();
    cudaFree(probe);
    gLogger.clear();
    std::unique_ptr<IPluginV3> attached(hr.runtime->attachToContext(&context));
    std::string const warning = gLogger.last();
    hog.free();
    cudaDeviceSynchronize();
    if (!check(exhausted && attached != nullptr && contains(warning, "weights not uploaded"),
            name + ": attachToContext with no free device memory defers the upload (warning)", warning))
    {
        return;
    }
    recorder.clear();
    int32_t const rc = enqueueOnce(
        capabilities(attached.get()).runtime, DataType::kFLOAT, TensorFormat::kLINEAR, t, stream);
    bool const ran = rc == 0 && cudaStreamSynchronize(stream) == cudaSuccess;
    check(ran, name + ": with memory free again, enqueue uploads the weights and launches",
        "rc " + std::to_string(rc) + ": " + (recorder.getNbErrors() > 0 ? recorder.getErrorDesc(0) : gLogger.last()));
    check(ran && !expected.empty() && t.output() == expected, name + ": ... and gives the healthy context's result");
    cudaStreamDestroy(stream);
}

// The weight upload (configurePlugin at build time, attachToContext at run time) while this thread captures a
// blocking stream into a CUDA graph (relaxed mode, which allows allocations). A copy on the legacy default stream
// would wait for that stream, which invalidates the capture (cudaErrorStreamCaptureImplicit); the upload must use
// a stream of its own, leave the capture valid and still upload the weights.
void uploadDuringCapture(IPluginCreatorV3One* creator)
{
    std::string const name = "weight upload during another stream's capture";
    LayerConfig layer = syntheticLayer(8, 3, 2, 1);
    layer.name = name;
    Dims const shape = dims4(1, 8, 20, 24);
    cudaStream_t captured = nullptr;
    void* scratch = nullptr;
    if (!check(cudaStreamCreate(&captured) == cudaSuccess && cudaMalloc(&scratch, 256) == cudaSuccess,
            name + ": blocking stream set up"))
    {
        return;
    }
    auto duringCapture = [&](std::function<void()> const& work) -> std::string
    {
        cudaGraph_t graph = nullptr;
        if (cudaStreamBeginCapture(captured, cudaStreamCaptureModeRelaxed) != cudaSuccess)
        {
            return "cudaStreamBeginCapture failed";
        }
        cudaMemsetAsync(scratch, 0, 256, captured); // the graph's one node
        work();
        cudaError_t const end = cudaStreamEndCapture(captured, &graph);
        if (graph != nullptr)
        {
            cudaGraphDestroy(graph);
        }
        cudaGetLastError();
        return end == cudaSuccess ? std::string() : std::string(cudaGetErrorString(end));
    };

    // Build time: configurePlugin uploads the weights.
    {
        FieldSet fields = parserFields(layer);
        PluginFieldCollection fc = fields.collection();
        std::unique_ptr<IPluginV3> built(creator->createPlugin(name.c_str(), &fc, TensorRTPhase::kBUILD));
        PluginHandles h = capabilities(built.get());
        if (h.build != nullptr)
        {
            DynamicPluginTensorDesc in = dynDesc(DataType::kFLOAT, shape, shape, shape);
            DynamicPluginTensorDesc out = in;
            gLogger.clear();
            int32_t rc = -1;
            std::string const broken = duringCapture([&] { rc = h.build->configurePlugin(&in, 1, &out, 1); });
            check(rc == 0 && broken.empty() && gLogger.count() == 0,
                name + ": configurePlugin uploads the weights, the capture stays valid",
                "capture: " + broken + "; log: " + gLogger.last());
        }
    }
    // Run time: attachToContext uploads them; then enqueue inside a global-mode capture (which refuses to upload)
    // shows they are on the device.
    size_t workspaceBytes = 0;
    std::unique_ptr<IPluginV3> runtime = runtimePlugin(
        creator, layer, DataType::kFLOAT, TensorFormat::kLINEAR, {shape}, workspaceBytes);
    PluginHandles hr = capabilities(runtime.get());
    if (hr.runtime != nullptr)
    {
        TestErrorRecorder recorder;
        TestResourceContext context(&recorder);
        std::unique_ptr<IPluginV3> attached;
        gLogger.clear();
        std::string const broken = duringCapture([&] { attached.reset(hr.runtime->attachToContext(&context)); });
        check(attached != nullptr && broken.empty() && gLogger.count() == 0,
            name + ": attachToContext uploads the weights, the capture stays valid",
            "capture: " + broken + "; log: " + gLogger.last());
        Tensors t;
        cudaStream_t stream = nullptr;
        if (attached != nullptr && t.allocate(DataType::kFLOAT, shape, 8, workspaceBytes, 9U)
            && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess)
        {
            cudaGraph_t graph = nullptr;
            bool const began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess;
            int32_t const rc = began
                ? enqueueOnce(capabilities(attached.get()).runtime, DataType::kFLOAT, TensorFormat::kLINEAR, t, stream)
                : -1;
            cudaError_t const end = cudaStreamEndCapture(stream, &graph);
            check(began && rc == 0 && end == cudaSuccess,
                name + ": the attached context's weights are on the device (enqueue inside a capture runs)",
                gLogger.last());
            if (graph != nullptr)
            {
                cudaGraphDestroy(graph);
            }
            cudaStreamDestroy(stream);
        }
    }
    cudaFree(scratch);
    cudaStreamDestroy(captured);
}

} // namespace

void runConcurrencyTests(IPluginCreatorV3One* creator)
{
    concurrentFirstLaunches(creator);
}

void runFailureTests(IPluginCreatorV3One* creator)
{
    transientOutOfMemory(creator);
    uploadDuringCapture(creator);
}

} // namespace wtconv_harness
