// wtconvOrtCudaOp.cpp — wtconv::WTConv2d on ONNX Runtime's CUDA execution provider, on the fused kernels the
// TensorRT plugin runs (plugin/kernels/wtconvKernel.h). Built only where CMake finds nvcc.
//
// - Stream: every launch goes on the stream ONNX Runtime gives the kernel (KernelContext_GetGPUComputeStream), so
//   it is ordered with the operators around it; nothing touches the legacy default stream.
// - Weights: the node's folded fp32 weights are uploaded once per kernel instance, on the first Compute (the device
//   is the input tensor's), on a private non-blocking stream that is synchronised before the weights are used.
// - Workspace: one device buffer per kernel instance, grown (never per call) when a larger input needs more.
//   Compute may run concurrently on one instance (several threads running one session, each Run on its own
//   stream): a mutex guards the buffer, and an event recorded after each launch makes the next launch's stream
//   wait until the previous launch has finished with it. Different layers never share a buffer.
// - Errors (a shape the kernels refuse, a CUDA failure) come back as ONNX Runtime errors naming the node.
#include "wtconvKernel.h"
#include "wtconvOrtNode.h"
#include "wtconvOrtOps.h"

#include <cuda_runtime_api.h>

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

// Makes `device` current for a scope and restores the previous one.
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

size_t roundUp(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

struct CudaKernel
{
    static constexpr char const* kPROVIDER = "CUDAExecutionProvider";
    NodeConfig node;

    std::mutex mutex; // guards everything below
    int device{-1};
    void* weights{nullptr}; // base weight | bias | wavelet weight, each at a 256-byte boundary
    float const* baseWeight{nullptr};
    float const* baseBias{nullptr};
    float const* waveletWeight{nullptr};
    void* workspace{nullptr};
    size_t workspaceBytes{0};
    cudaEvent_t lastLaunch{nullptr}; // recorded after each launch that used the workspace

    ~CudaKernel()
    {
        if (device < 0)
        {
            return;
        }
        // At process exit the CUDA context may already be gone: errors are ignored.
        int previous = 0;
        bool const switched = cudaGetDevice(&previous) == cudaSuccess && previous != device
            && cudaSetDevice(device) == cudaSuccess;
        if (lastLaunch != nullptr)
        {
            cudaEventSynchronize(lastLaunch);
            cudaEventDestroy(lastLaunch);
        }
        cudaFree(workspace);
        cudaFree(weights);
        if (switched)
        {
            cudaSetDevice(previous);
        }
    }

    // First use on `dev`: the weights and the event. Called with the mutex held and `dev` current.
    void prepare(int dev, cudaStream_t stream)
    {
        if (device >= 0)
        {
            if (device != dev)
            {
                throw OrtError(ORT_RUNTIME_EXCEPTION,
                    node.who + ": input on CUDA device " + std::to_string(dev) + ", but this session's kernel runs on "
                        + std::to_string(device));
            }
            return;
        }
        // Allocating and copying would break a CUDA graph capture: the first run must be outside one.
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        checkCuda(cudaStreamIsCapturing(stream, &capture), node.who + ": cudaStreamIsCapturing");
        if (capture != cudaStreamCaptureStatusNone)
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION,
                node.who
                    + ": the first run is being captured into a CUDA graph, where uploading the weights would "
                      "break the capture; run the session once before capturing");
        }
        LayerFields const& f = node.fields;
        size_t const wBytes = roundUp(f.baseWeight.size() * sizeof(float));
        size_t const bBytes = roundUp(f.baseBias.size() * sizeof(float));
        size_t const vBytes = f.waveletWeight.size() * sizeof(float);
        void* memory = nullptr;
        cudaStream_t upload = nullptr;
        cudaEvent_t event = nullptr;
        cudaError_t status = cudaMalloc(&memory, wBytes + bBytes + vBytes);
        char* base = static_cast<char*>(memory);
        if (status == cudaSuccess)
        {
            status = cudaStreamCreateWithFlags(&upload, cudaStreamNonBlocking);
        }
        if (status == cudaSuccess)
        {
            status = cudaMemcpyAsync(
                base, f.baseWeight.data(), f.baseWeight.size() * sizeof(float), cudaMemcpyHostToDevice, upload);
        }
        if (status == cudaSuccess)
        {
            status = cudaMemcpyAsync(
                base + wBytes, f.baseBias.data(), f.baseBias.size() * sizeof(float), cudaMemcpyHostToDevice, upload);
        }
        if (status == cudaSuccess)
        {
            status = cudaMemcpyAsync(
                base + wBytes + bBytes, f.waveletWeight.data(), vBytes, cudaMemcpyHostToDevice, upload);
        }
        if (upload != nullptr)
        {
            cudaError_t const synced = cudaStreamSynchronize(upload);
            status = status != cudaSuccess ? status : synced;
            cudaStreamDestroy(upload);
        }
        if (status == cudaSuccess)
        {
            status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
        }
        if (status != cudaSuccess)
        {
            cudaFree(memory);
            checkCuda(status, node.who + ": uploading the weights to CUDA device " + std::to_string(dev));
        }
        weights = memory;
        baseWeight = reinterpret_cast<float const*>(base);
        baseBias = reinterpret_cast<float const*>(base + wBytes);
        waveletWeight = reinterpret_cast<float const*>(base + wBytes + bBytes);
        lastLaunch = event;
        device = dev;
    }

    static std::unique_ptr<CudaKernel> create(OrtKernelInfo const* info)
    {
        auto k = std::make_unique<CudaKernel>();
        k->node = readNode(info);
        return k;
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
        int dev = 0;
        check(a.MemoryInfoGetId(memory, &dev), node.who + ": reading the input's device");

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
        p.layout = Layout::kNCHW;
        p.input = run.input;
        p.output = run.output;
        char message[512] = {0};
        if (checkShape(p, message, sizeof(message)) != cudaSuccess)
        {
            throw OrtError(ORT_INVALID_ARGUMENT, node.who + ": " + message);
        }
        size_t const needed = wtconvWorkspaceBytes(p);

        std::lock_guard<std::mutex> const lock(mutex);
        DeviceScope const scope(dev, node.who);
        prepare(dev, stream);
        reserveWorkspace(needed);
        // The previous launch (maybe on another Run's stream) must be done with the workspace.
        checkCuda(cudaStreamWaitEvent(stream, lastLaunch, 0), node.who + ": cudaStreamWaitEvent");
        p.baseWeight = baseWeight;
        p.baseBias = baseBias;
        p.waveletWeight = waveletWeight;
        p.workspace = workspace;
        p.workspaceBytes = workspaceBytes;
        cudaError_t const launched = wtconvForward(p, stream, message, sizeof(message));
        if (launched != cudaSuccess)
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION,
                node.who + ": launch failed: " + cudaGetErrorName(launched) + (message[0] ? ": " : "") + message);
        }
        checkCuda(cudaEventRecord(lastLaunch, stream), node.who + ": cudaEventRecord");
    }

    // A workspace of at least `bytes`, free for `stream` to use once it waits for lastLaunch. Mutex held.
    void reserveWorkspace(size_t bytes)
    {
        if (bytes <= workspaceBytes)
        {
            return;
        }
        checkCuda(cudaEventSynchronize(lastLaunch), node.who + ": waiting for the previous launch");
        checkCuda(cudaFree(workspace), node.who + ": freeing the workspace");
        workspace = nullptr;
        workspaceBytes = 0;
        checkCuda(cudaMalloc(&workspace, bytes),
            node.who + ": cudaMalloc of " + std::to_string(bytes) + " bytes of workspace");
        workspaceBytes = bytes;
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
