// wtconvSharedMemory.cuh — dynamic shared memory above 48 KB per block: how much the kernels plan for, and the
// per-kernel limit raise every launcher goes through (host code only).
//
// A kernel may use more than 48 KB of dynamic shared memory per block only after
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), up to the device's opt-in
// limit (cudaDevAttrMaxSharedMemoryPerBlockOptin; CUDA C++ Programming Guide, "Shared Memory"). The limits of the
// GPUs we build for (compute capability: opt-in bytes per block):
//   8.0: 163 KB (166,912)   8.6, 8.9, 12.x: 99 KB (101,376)   9.0: 227 KB (232,448)
// A launch above the attribute, or an attribute above the device's limit, fails with cudaErrorInvalidValue. The
// launch plan (whole-plane or tiled path, planes per block) must not depend on the device: getWorkspaceSize is
// asked at engine build time, maybe on another GPU than the one that runs the engine, and the plan decides
// whether a workspace is needed. So every plan fits kPortableSharedBytes, the smallest opt-in limit above. The one
// exception needs no workspace whichever kernel runs: the channels-last 56 x 56 fixed-geometry kernel
// (wtconvFixedPlane.cu, groupPlanWide) is chosen at launch only where the running device's limit holds it.
//
// Raising the attribute is a host-side call (not a stream operation: legal inside graph capture), made once per
// kernel, device and size; later launches only read an atomic. Several threads may launch one kernel at once
// (two execution contexts of an engine, two Triton instances): the raise is checked, made and recorded under a
// lock and only ever grows, so no thread can lower the attribute below a size another thread has recorded.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace wtconv
{
namespace detail
{

// The most dynamic shared memory one block of any launch plan uses: the opt-in limit of compute capability 8.6,
// 8.9 and 12.x, the smallest of the architectures the kernels are built for (plugin/CMakeLists.txt).
constexpr size_t kPortableSharedBytes = 99 * 1024;
// What every kernel may use without raising its attribute.
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// Test hook (wtconvKernel.h, setSharedMemoryLimitForTesting): 0, or the opt-in limit to behave as if the device
// had (a smaller GPU's, e.g. 101,376 B on an H200 to emulate an RTX card).
inline std::atomic<size_t>& sharedLimitForTesting()
{
    static std::atomic<size_t> bytes{0};
    return bytes;
}

// The opt-in limit of `device`, or the test hook's when that is smaller.
inline cudaError_t optInSharedBytes(int device, size_t& bytes)
{
    int optIn = 0;
    cudaError_t const e = cudaDeviceGetAttribute(&optIn, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e != cudaSuccess)
    {
        return e;
    }
    size_t const forced = sharedLimitForTesting().load(std::memory_order_relaxed);
    bytes = forced != 0 && forced < static_cast<size_t>(optIn) ? forced : static_cast<size_t>(optIn);
    return cudaSuccess;
}

// The dynamic shared-memory limit of one kernel instantiation on each device (one static instance per
// instantiation, in its launcher).
class SharedMemoryLimit
{
public:
    // Makes launches of `kernel` with `bytes` of dynamic shared memory legal on `device` (the current device).
    // Returns cudaErrorInvalidValue, as a launch would, when `bytes` exceeds the device's opt-in limit.
    template <typename Kernel>
    cudaError_t allow(Kernel kernel, int device, size_t bytes)
    {
        size_t const forced = sharedLimitForTesting().load(std::memory_order_relaxed);
        if (forced != 0 && bytes > forced)
        {
            return cudaErrorInvalidValue;
        }
        if (bytes <= kDefaultSharedBytes)
        {
            return cudaSuccess;
        }
        bool const tracked = device >= 0 && device < kMaxDevices;
        if (tracked && mRaised[device].load(std::memory_order_acquire) >= bytes)
        {
            return cudaSuccess;
        }
        size_t limit = 0;
        cudaError_t e = optInSharedBytes(device, limit);
        if (e != cudaSuccess)
        {
            return e;
        }
        if (bytes > limit)
        {
            return cudaErrorInvalidValue;
        }
        std::lock_guard<std::mutex> lock(mMutex);
        if (tracked && mRaised[device].load(std::memory_order_relaxed) >= bytes)
        {
            return cudaSuccess; // another thread raised it meanwhile
        }
        // A device beyond the table is not recorded: its attribute is raised to the device's limit every time, a
        // value no launch can lower.
        size_t const target = tracked ? bytes : limit;
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(target));
        if (e == cudaSuccess && tracked)
        {
            mRaised[device].store(target, std::memory_order_release);
        }
        return e;
    }

private:
    static constexpr int kMaxDevices = 64;
    std::mutex mMutex;
    std::atomic<size_t> mRaised[kMaxDevices]{};
};

} // namespace detail
} // namespace wtconv
