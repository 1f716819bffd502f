// wtconvOrtCudaOp.cpp — wtconv::WTConv2d on ONNX Runtime's CUDA execution provider, on the fused kernels the
// TensorRT plugin runs (plugin/kernels/wtconvKernel.h). Built only where CMake finds nvcc.
//
// Compute may be captured into a CUDA graph (the CUDA EP's enable_cuda_graph: ONNX Runtime runs the model once,
// then captures a run on its compute stream and replays it) and may run on one kernel instance from several
// threads at once, each Run on its own stream. So a run (docs/onnx_runtime.md, "The CUDA kernel"):
// - launches on the stream ONNX Runtime gives the kernel (KernelContext_GetGPUComputeStream) and on no other: no
//   event, no wait on work recorded elsewhere, nothing on the legacy default stream, no host synchronisation;
// - reads weights uploaded before any run where the C API says the device (KernelInfoGetAllocator, ONNX Runtime
//   1.18 and newer: at kernel creation), else at the first run, which must not be captured;
// - takes its workspace from ONNX Runtime's allocator (KernelContext_GetScratchBuffer, 1.18 and newer), stream-
//   ordered as ONNX Runtime's own CUDA kernels take theirs, and gives it back after the launch; ONNX Runtime 1.17
//   has no such call, and there each stream gets a workspace of its own from the kernel, grown outside captures.
// Errors (a shape the kernels refuse, a CUDA failure, a capture that would need an upload) come back as ONNX
// Runtime errors naming the node.
#include "wtconvDeviceWeights.h"
#include "wtconvKernel.h"
#include "wtconvOrtNode.h"
#include "wtconvOrtOps.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace wtconv
{
namespace ort
{

namespace
{

void checkCuda(cudaError_t status, std::string const& what)
{
    if (status != cudaSuccess)
    {
        throw OrtError(
            ORT_RUNTIME_EXCEPTION, what + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
    }
}

// Makes `device` current for a scope and restores the previous one (neither call synchronises or breaks a
// capture).
class DeviceScope
{
public:
    DeviceScope(int device, std::string const& who)
    {
        checkCuda(cudaGetDevice(&mPrevious), who + ": cudaGetDevice");
        if (mPrevious != device)
        {
            checkCuda(cudaSetDevice(device), who + ": cudaSetDevice(" + std::to_string(device) + ")");
            mRestore = true;
        }
    }
    ~DeviceScope()
    {
        if (mRestore)
        {
            cudaSetDevice(mPrevious);
        }
    }
    DeviceScope(DeviceScope const&) = delete;
    DeviceScope& operator=(DeviceScope const&) = delete;

private:
    int mPrevious{0};
    bool mRestore{false};
};

bool capturing(cudaStream_t stream, std::string const& who)
{
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    checkCuda(cudaStreamIsCapturing(stream, &status), who + ": cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
}

// Copies the node's weights to `device` (plugin/common/wtconvDeviceWeights.h, as the TensorRT plugin does) and
// waits for the copy: never inside a run that may be captured (kernel creation, or the first run after checking it
// is not captured).
std::unique_ptr<DeviceWeights> uploadWeights(NodeConfig const& node, int device)
{
    DeviceScope const scope(device, node.who);
    LayerFields const& f = node.fields;
    std::string error;
    std::unique_ptr<DeviceWeights> weights = uploadDeviceWeights(
        HostWeights{f.baseWeight, f.baseBias, f.waveletWeight}, error);
    if (weights == nullptr)
    {
        throw OrtError(ORT_RUNTIME_EXCEPTION,
            node.who + ": uploading the weights to CUDA device " + std::to_string(device) + ": " + error);
    }
    return weights;
}

// The device of the CUDA EP's default memory, asked at kernel creation (version 18: KernelInfoGetAllocator); false
// where the running ONNX Runtime cannot say.
bool executionProviderDevice(OrtApi const* newer, OrtKernelInfo const* info, int& device)
{
    OrtAllocator* allocator = nullptr;
    if (newer == nullptr || !succeeded(newer->KernelInfoGetAllocator(info, OrtMemTypeDefault, &allocator))
        || allocator == nullptr)
    {
        return false;
    }
    OrtMemoryInfo const* memory = nullptr;
    bool const found = succeeded(api().AllocatorGetInfo(allocator, &memory)) && memory != nullptr
        && succeeded(api().MemoryInfoGetId(memory, &device));
    api().ReleaseAllocator(allocator);
    return found;
}

struct AllocatorDeleter
{
    void operator()(OrtAllocator* allocator) const noexcept
    {
        api().ReleaseAllocator(allocator);
    }
};

// One run's workspace from ONNX Runtime's allocator for the input's memory (version 18: the scratch buffer is
// allocated in the order of the run's stream, so memory another stream used last is handed over only after it is
// done), given back when the run has launched: later work on the same stream runs after the launch.
class ScratchWorkspace
{
public:
    ScratchWorkspace(OrtApi const& newer, OrtKernelContext* context, OrtMemoryInfo const* memory, size_t bytes,
        std::string const& who)
    {
        if (bytes == 0)
        {
            return;
        }
        OrtAllocator* allocator = nullptr;
        check(api().KernelContext_GetAllocator(context, memory, &allocator), who + ": ONNX Runtime's CUDA allocator");
        mAllocator.reset(allocator);
        std::string const what = who + ": a workspace of " + std::to_string(bytes) + " bytes";
        check(newer.KernelContext_GetScratchBuffer(context, memory, bytes, &mData), what);
        if (mData == nullptr)
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION, what + ": ONNX Runtime's allocator returned none");
        }
    }
    ~ScratchWorkspace()
    {
        if (mData != nullptr)
        {
            mAllocator->Free(mAllocator.get(), mData);
        }
    }
    ScratchWorkspace(ScratchWorkspace const&) = delete;
    ScratchWorkspace& operator=(ScratchWorkspace const&) = delete;

    void* data() const
    {
        return mData;
    }

private:
    std::unique_ptr<OrtAllocator, AllocatorDeleter> mAllocator;
    void* mData{nullptr};
};

// ONNX Runtime 1.17's fallback: a workspace per stream, kept by the kernel. Launches on one stream run in order, so
// a stream's workspace is free for its next launch without an event. It grows (the stream's earlier launches
// finished first) only outside a capture. Callers hold `mutex` from reserve() until their launch is enqueued, so
// that no other thread on the same stream frees the buffer in between.
class StreamWorkspaces
{
public:
    std::mutex mutex;

    ~StreamWorkspaces()
    {
        // At process exit the CUDA context may already be gone: errors are ignored.
        int previous = 0;
        bool const switched = !mBuffers.empty() && cudaGetDevice(&previous) == cudaSuccess && previous != mDevice
            && cudaSetDevice(mDevice) == cudaSuccess;
        for (auto& entry : mBuffers)
        {
            cudaFree(entry.second.data);
        }
        if (switched)
        {
            cudaSetDevice(previous);
        }
    }

    void* reserve(cudaStream_t stream, size_t bytes, std::string const& who)
    {
        if (bytes == 0)
        {
            return nullptr;
        }
        checkCuda(cudaGetDevice(&mDevice), who + ": cudaGetDevice"); // the run's device (one per kernel)
        Buffer& buffer = mBuffers[stream];
        if (buffer.bytes >= bytes)
        {
            return buffer.data;
        }
        if (capturing(stream, who))
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION,
                who + ": this run is being captured into a CUDA graph and needs a workspace of " + std::to_string(bytes)
                    + " bytes not yet allocated for this stream (ONNX Runtime 1.17 has no scratch buffer for custom "
                    + "ops); run the same shapes once on this stream before capturing");
        }
        if (buffer.data != nullptr)
        {
            checkCuda(cudaStreamSynchronize(stream), who + ": waiting for the stream before growing its workspace");
            checkCuda(cudaFree(buffer.data), who + ": freeing the workspace");
            buffer = Buffer{};
        }
        checkCuda(
            cudaMalloc(&buffer.data, bytes), who + ": cudaMalloc of " + std::to_string(bytes) + " bytes of workspace");
        buffer.bytes = bytes;
        return buffer.data;
    }

private:
    struct Buffer
    {
        void* data{nullptr};
        size_t bytes{0};
    };
    std::map<cudaStream_t, Buffer> mBuffers;
    int mDevice{0};
};

struct CudaKernel
{
    static constexpr char const* kPROVIDER = "CUDAExecutionProvider";
    NodeConfig node;
    OrtApi const* newer{nullptr}; // the version-18 table when the running ONNX Runtime has it (wtconvOrtSupport.h)

    std::atomic<DeviceWeights const*> weights{nullptr}; // set once, by create() or the first run
    std::mutex uploadMutex;                             // the first run's upload (ONNX Runtime 1.17)
    std::unique_ptr<DeviceWeights> ownedWeights;
    StreamWorkspaces streamWorkspaces; // ONNX Runtime 1.17 only

    static std::unique_ptr<CudaKernel> create(OrtKernelInfo const* info)
    {
        auto k = std::make_unique<CudaKernel>();
        k->node = readNode(info);
        k->newer = api18();
        int device = -1;
        if (k->newer != nullptr && executionProviderDevice(k->newer, info, device))
        {
            k->ownedWeights = uploadWeights(k->node, device);
            k->weights.store(k->ownedWeights.get(), std::memory_order_release);
        }
        return k;
    }

    // The weights on `device`, uploaded now if this is the first run of an ONNX Runtime that could not say the
    // device at kernel creation.
    DeviceWeights const& weightsOn(int device, cudaStream_t stream)
    {
        DeviceWeights const* ready = weights.load(std::memory_order_acquire);
        if (ready == nullptr)
        {
            std::lock_guard<std::mutex> const lock(uploadMutex);
            ready = weights.load(std::memory_order_acquire);
            if (ready == nullptr)
            {
                if (capturing(stream, node.who))
                {
                    throw OrtError(ORT_RUNTIME_EXCEPTION,
                        node.who
                            + ": the first run is being captured into a CUDA graph, where uploading the weights would "
                              "break the capture; run the session once before capturing");
                }
                ownedWeights = uploadWeights(node, device);
                ready = ownedWeights.get();
                weights.store(ready, std::memory_order_release);
            }
        }
        if (ready->device != device)
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION,
                node.who + ": input on CUDA device " + std::to_string(device) + ", but this session's kernel runs on "
                    + std::to_string(ready->device));
        }
        return *ready;
    }

    void compute(OrtKernelContext* context)
    {
        RunTensors const run = prepareRun(node, context);
        if (run.input == nullptr)
        {
            return; // an empty batch or plane: an empty output
        }
        OrtApi const& a = api();
        void* streamHandle = nullptr;
        check(a.KernelContext_GetGPUComputeStream(context, &streamHandle), node.who + ": getting the CUDA stream");
        if (streamHandle == nullptr)
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION, node.who + ": ONNX Runtime gave the CUDA op no compute stream");
        }
        cudaStream_t const stream = static_cast<cudaStream_t>(streamHandle);
        OrtMemoryInfo const* memory = nullptr;
        check(a.GetTensorMemoryInfo(run.inputValue, &memory), node.who + ": reading the input's device");
        int device = 0;
        check(a.MemoryInfoGetId(memory, &device), node.who + ": reading the input's device");

        LayerFields const& f = node.fields;
        WTConvParams p;
        p.dtype = run.shape.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 ? DataType::kFLOAT16 : DataType::kFLOAT32;
        p.batch = run.shape.batch;
        p.channels = static_cast<int64_t>(f.baseBias.size());
        p.height = run.shape.height;
        p.width = run.shape.width;
        p.kernelSize = f.kernelSize;
        p.levels = f.levels;
        p.stride = f.stride;
        p.layout = f.channelsLast ? Layout::kNHWC : Layout::kNCHW;
        p.channelPitch = f.channelsLast ? p.channels : 0;
        p.input = run.input;
        p.output = run.output;
        char message[512] = {0};
        if (checkShape(p, message, sizeof(message)) != cudaSuccess)
        {
            throw OrtError(ORT_INVALID_ARGUMENT, node.who + ": " + message);
        }
        p.workspaceBytes = wtconvWorkspaceBytes(p);

        DeviceScope const scope(device, node.who);
        DeviceWeights const& w = weightsOn(device, stream);
        p.baseWeight = w.baseWeight;
        p.baseBias = w.baseBias;
        p.waveletWeight = w.waveletWeight;
        if (newer != nullptr)
        {
            ScratchWorkspace const workspace(*newer, context, memory, p.workspaceBytes, node.who);
            p.workspace = workspace.data();
            launch(p, stream);
        }
        else
        {
            std::lock_guard<std::mutex> const lock(streamWorkspaces.mutex);
            p.workspace = streamWorkspaces.reserve(stream, p.workspaceBytes, node.who);
            launch(p, stream);
        }
    }

    void launch(WTConvParams const& p, cudaStream_t stream) const
    {
        char message[512] = {0};
        cudaError_t const launched = wtconvForward(p, stream, message, sizeof(message));
        if (launched != cudaSuccess)
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION,
                node.who + ": launch failed: " + cudaGetErrorName(launched) + (message[0] ? ": " : "") + message);
        }
    }
};

} // namespace

OrtCustomOp const* cudaOp()
{
    static KernelOp<CudaKernel> const op;
    return &op;
}

} // namespace ort
} // namespace wtconv
