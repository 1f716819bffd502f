// wtconvOrtCpuOp.cpp — wtconv::WTConv2d on ONNX Runtime's CPU execution provider, on the CPU kernel
// (wtconvCpuKernel.h).
//
// Threads: the planes of one call are split into chunks that run on ONNX Runtime's intra-op thread pool through
// KernelContext_ParallelFor: the pool the session already sized (SessionOptions.intra_op_num_threads, by default
// one thread per physical core) and whose threads the other operators of the model use, so the op neither
// oversubscribes the cores nor adds threads of its own; the calling thread takes part, and with a pool of one
// thread everything runs on it. Several Run calls at once share that pool. A plane's result does not depend on the
// thread or the chunking, so outputs are the same however the work is split (docs/onnx_runtime.md, "Threads").
// Scratch: one allocation per call, shared out among the chunks running at once (ScratchSlots).
#include "wtconvCpuKernel.h"
#include "wtconvOrtNode.h"
#include "wtconvOrtOps.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wtconv
{
namespace ort
{

namespace
{

// Environment variable that forces the instruction set (baseline, avx2, avx512) — for tests and benchmarks.
constexpr char const* kISA_ENV = "WTCONV_ORT_CPU_ISA";

// Work of one chunk of planes, in multiply-adds: enough to outweigh the cost of handing it to a thread (a few µs).
constexpr double kCHUNK_WORK = 1.5e5;

cpu::Isa chooseIsa(std::string const& who)
{
    char const* forced = std::getenv(kISA_ENV);
    if (forced == nullptr || forced[0] == '\0')
    {
        return cpu::bestIsa();
    }
    for (cpu::Isa isa : {cpu::Isa::kBASELINE, cpu::Isa::kAVX2, cpu::Isa::kAVX512})
    {
        if (std::strcmp(forced, cpu::isaName(isa)) == 0)
        {
            if (!cpu::isaAvailable(isa))
            {
                throw OrtError(ORT_INVALID_ARGUMENT,
                    who + ": " + kISA_ENV + "=" + forced
                        + ": this library or this processor lacks that instruction set; "
                        + "unset it to use the best available (" + cpu::isaName(cpu::bestIsa()) + ")");
            }
            return isa;
        }
    }
    throw OrtError(ORT_INVALID_ARGUMENT,
        who + ": " + kISA_ENV + "=" + forced + ": expected baseline, avx2 or avx512 (or unset: the best available)");
}

// The scratch of one call: one allocation holding `slots` buffers of `floats` each. A chunk borrows a free buffer
// while it runs; at most as many chunks run at once as the pool has threads plus the calling thread, which
// `slots` = min(chunks, hardware threads + 1) covers unless the session's pool is larger than the machine, and then
// a chunk that finds none free allocates its own. Pages of buffers no chunk borrows are never touched, so the
// operating system gives them no memory.
class ScratchSlots
{
public:
    ScratchSlots(size_t slots, size_t floats)
        : mFloats(floats)
        , mMemory(new float[slots * floats])
    {
        mFree.reserve(slots);
        for (size_t i = slots; i > 0; --i)
        {
            mFree.push_back(i - 1);
        }
    }

    // A buffer of `floats` floats, or nullptr when all are borrowed.
    float* borrow()
    {
        std::lock_guard<std::mutex> const lock(mMutex);
        if (mFree.empty())
        {
            return nullptr;
        }
        size_t const slot = mFree.back();
        mFree.pop_back();
        return mMemory.get() + slot * mFloats;
    }

    void giveBack(float* buffer)
    {
        std::lock_guard<std::mutex> const lock(mMutex);
        mFree.push_back(static_cast<size_t>(buffer - mMemory.get()) / mFloats);
    }

private:
    size_t mFloats;
    std::unique_ptr<float[]> mMemory;
    std::mutex mMutex;
    std::vector<size_t> mFree;
};

// One call's planes, split into chunks for the thread pool.
struct Job
{
    cpu::Isa isa;
    cpu::Layer layer;
    cpu::Tensors tensors;
    int64_t planes{0};
    int64_t planesPerChunk{1};
    size_t scratchFloats{0};
    ScratchSlots* scratch{nullptr};
    std::mutex mutex;
    std::string error; // the first failure of a chunk (allocation), reported after the pool returns

    void runChunk(size_t chunk) noexcept
    {
        try
        {
            int64_t const begin = static_cast<int64_t>(chunk) * planesPerChunk;
            int64_t const end = std::min(planes, begin + planesPerChunk);
            float* buffer = scratch->borrow();
            std::unique_ptr<float[]> own; // only when the pool runs more chunks at once than there are slots
            if (buffer == nullptr)
            {
                own.reset(new float[scratchFloats]);
            }
            cpu::forwardPlanes(isa, layer, tensors, begin, end, own ? own.get() : buffer); // zeroes the buffer
            if (!own)
            {
                scratch->giveBack(buffer);
            }
        }
        catch (std::exception const& e)
        {
            std::lock_guard<std::mutex> const lock(mutex);
            if (error.empty())
            {
                error = e.what();
            }
        }
    }
};

void runChunk(void* job, size_t chunk)
{
    static_cast<Job*>(job)->runChunk(chunk);
}

struct CpuKernel
{
    static constexpr char const* kPROVIDER = "CPUExecutionProvider";
    NodeConfig node;
    cpu::Isa isa{cpu::Isa::kBASELINE};

    static std::unique_ptr<CpuKernel> create(OrtKernelInfo const* info)
    {
        auto k = std::make_unique<CpuKernel>();
        k->node = readNode(info);
        k->isa = chooseIsa(k->node.who);
        return k;
    }

    void compute(OrtKernelContext* context) const
    {
        RunTensors const run = prepareRun(node, context);
        if (run.input == nullptr)
        {
            return; // an empty batch or plane: an empty output
        }
        RunShape const& shape = run.shape;
        LayerFields const& f = node.fields;
        int64_t const channels = static_cast<int64_t>(f.baseBias.size());
        Job job;
        job.isa = isa;
        job.layer = cpu::Layer{
            f.kernelSize, f.levels, f.stride, channels, f.baseWeight.data(), f.baseBias.data(), f.waveletWeight.data()};
        job.tensors = cpu::Tensors{
            shape.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 ? cpu::IoType::kFLOAT16 : cpu::IoType::kFLOAT32,
            shape.batch, shape.height, shape.width, run.input, run.output, f.channelsLast};
        job.planes = shape.batch * channels;
        job.scratchFloats = cpu::scratchFloats(job.layer, shape.height, shape.width);
        // Multiply-adds of one plane: the base convolution plus the four subbands of every level (docs/design.md §3).
        double const planeWork = static_cast<double>(shape.height) * static_cast<double>(shape.width) * f.kernelSize
            * f.kernelSize * (1.0 + 4.0 / 3.0);
        int64_t const chunks = std::max<int64_t>(
            1, std::min<int64_t>(job.planes, static_cast<int64_t>(planeWork * job.planes / kCHUNK_WORK)));
        job.planesPerChunk = (job.planes + chunks - 1) / chunks;
        size_t const total = static_cast<size_t>((job.planes + job.planesPerChunk - 1) / job.planesPerChunk);
        size_t const threads = static_cast<size_t>(std::thread::hardware_concurrency()) + 1;
        ScratchSlots scratch(std::min(total, threads), job.scratchFloats);
        job.scratch = &scratch;
        if (total == 1 || !succeeded(api().KernelContext_ParallelFor(context, runChunk, total, 0, &job)))
        {
            // One chunk, or no thread pool offered to this kernel: the calling thread does it all.
            for (size_t chunk = 0; chunk < total; ++chunk)
            {
                job.runChunk(chunk);
            }
        }
        if (!job.error.empty())
        {
            throw OrtError(ORT_RUNTIME_EXCEPTION, node.who + ": " + job.error);
        }
    }
};

} // namespace

OrtCustomOp const* cpuOp()
{
    static KernelOp<CpuKernel> const op;
    return &op;
}

} // namespace ort
} // namespace wtconv
