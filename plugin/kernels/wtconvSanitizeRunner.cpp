// wtconvSanitizeRunner.cpp — a standalone runner of representative launches (no PyTorch), for
// compute-sanitizer memcheck / racecheck:
//   compute-sanitizer --tool memcheck build/plugin/wtconv_sanitize_runner [B]x[C]x[H]x[W]
// (an optional argument runs only the cases whose sizes read so, e.g. 2048x8x14x14).
// Every case runs NCHW, NHWC and NHWC with a padded channel pitch (a multiple of 8 above C). Outputs are
// poisoned with NaN (0xFF bytes) and must come back finite, the padding channels as zeros; exit status 0 = all
// cases ran.
#include "wtconvKernel.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(call)                                                                                                    \
    do                                                                                                                 \
    {                                                                                                                  \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                           \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

namespace
{
size_t elementBytes(wtconv::DataType t)
{
    return t == wtconv::DataType::kFLOAT32 ? 4 : 2;
}

// Element i (of a pitch-strided channel dimension; pitch = channels for dense layouts) is checked when its
// channel is below `channels`; padding channels must hold zeros.
bool finite(std::vector<unsigned char> const& bytes, wtconv::DataType t, size_t channels = 1, size_t pitch = 1)
{
    size_t const eb = elementBytes(t);
    for (size_t i = 0; i < bytes.size(); i += eb)
    {
        if ((i / eb) % pitch >= channels)
        {
            for (size_t j = 0; j < eb; ++j)
                if (bytes[i + j] != 0)
                    return false;
            continue;
        }
        uint32_t bits = 0;
        if (eb == 4)
        {
            std::memcpy(&bits, &bytes[i], 4);
            if ((bits & 0x7f800000u) == 0x7f800000u)
                return false;
        }
        else
        {
            uint16_t h = 0;
            std::memcpy(&h, &bytes[i], 2);
            bool const nonFinite = t == wtconv::DataType::kFLOAT16 ? (h & 0x7c00u) == 0x7c00u
                                                                   : (h & 0x7f80u) == 0x7f80u;
            if (nonFinite)
                return false;
        }
    }
    return true;
}
} // namespace

int main(int argc, char** argv)
{
    char const* only = argc > 1 ? argv[1] : nullptr;
    struct Case
    {
        int b, c, h, w, k, levels, stride;
    };
    Case const cases[] = {{1, 1, 1, 1, 3, 1, 1}, {2, 3, 37, 70, 5, 3, 1}, {1, 2, 130, 67, 7, 2, 1},
        {2, 5, 7, 7, 5, 2, 1}, {2, 4, 56, 56, 5, 5, 1}, {1, 2, 70, 129, 3, 8, 2}, {1, 2, 33, 20, 9, 4, 3},
        {1, 1, 64, 64, 15, 2, 1}, {1, 3, 9, 200, 1, 3, 1}, {1, 2, 100, 90, 11, 3, 1}, {1, 2, 150, 70, 5, 4, 2},
        // C a multiple of 8: the channels-last cluster mode of the whole-plane kernel
        {2, 8, 56, 56, 5, 5, 1}, {3, 16, 7, 7, 5, 2, 1}, {1, 8, 33, 20, 3, 3, 2}, {1, 8, 37, 70, 9, 1, 1},
        // the fixed-geometry kernels' shapes (wtconvFixedPlane.cu; a build with -DWTCONV_FIXED_PLANES=1 runs them
        // all, the default build those it takes, see measuredFaster): a plane per lane, planes in groups of lanes
        {2, 32, 7, 7, 5, 2, 1}, {3, 8, 14, 14, 5, 3, 1}, {2, 4, 28, 28, 5, 4, 1}, {1, 2, 56, 56, 5, 5, 1},
        // a grid large enough that each 14 x 14 group-kernel block takes two batch items in turn (last: the largest)
        {2048, 8, 14, 14, 5, 3, 1}};
    wtconv::DataType const types[] = {
        wtconv::DataType::kFLOAT32, wtconv::DataType::kFLOAT16, wtconv::DataType::kBFLOAT16};
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int> byte(0, 255);
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int failures = 0;
    for (auto t : types)
    {
        for (auto const& cs : cases)
        {
            char sizes[64];
            std::snprintf(sizes, sizeof(sizes), "%dx%dx%dx%d", cs.b, cs.c, cs.h, cs.w);
            if (only != nullptr && std::strcmp(only, sizes) != 0)
            {
                continue;
            }
            for (int variant = 0; variant < 3; ++variant)
            {
                // 0: NCHW, 1: NHWC dense, 2: NHWC with the channel pitch rounded up to a multiple of 8 (+8 if C is one)
                int64_t const pitch = variant == 0 ? cs.c : variant == 1 ? cs.c : (cs.c + 8) / 8 * 8;
                wtconv::WTConvParams p;
                p.dtype = t;
                p.batch = cs.b;
                p.channels = cs.c;
                p.height = cs.h;
                p.width = cs.w;
                p.kernelSize = cs.k;
                p.levels = cs.levels;
                p.stride = cs.stride;
                p.layout = variant == 0 ? wtconv::Layout::kNCHW : wtconv::Layout::kNHWC;
                p.channelPitch = variant == 2 ? pitch : 0;
                size_t const eb = elementBytes(t);
                size_t const inBytes = size_t(cs.b) * pitch * cs.h * cs.w * eb;
                size_t const outBytes = size_t(cs.b) * pitch * wtconv::outputSize(cs.h, cs.stride)
                    * wtconv::outputSize(cs.w, cs.stride) * eb;
                size_t const nw = size_t(cs.c) * cs.k * cs.k, nww = size_t(cs.levels) * 4 * nw;
                std::vector<float> hw(nw + cs.c + nww);
                std::normal_distribution<float> nd(0.f, 0.3f);
                for (auto& v : hw)
                    v = nd(rng);
                std::vector<unsigned char> hin(inBytes);
                for (size_t i = 0; i < inBytes; i += eb)
                {
                    // small finite values in every dtype: a random fp32 / fp16 / bf16 bit pattern with a tame exponent
                    if (eb == 4)
                    {
                        float v = nd(rng);
                        std::memcpy(&hin[i], &v, 4);
                    }
                    else
                    {
                        uint16_t h = t == wtconv::DataType::kFLOAT16
                            ? uint16_t(0x3800 | (byte(rng) & 0x3ff) | (byte(rng) & 1) << 15)
                            : uint16_t(0x3f00 | (byte(rng) & 0x7f) | (byte(rng) & 1) << 15);
                        std::memcpy(&hin[i], &h, 2);
                    }
                }
                void *in, *out, *ws = nullptr;
                float* w;
                size_t const wsBytes = wtconv::wtconvWorkspaceBytes(p);
                CHECK(cudaMalloc(&in, inBytes));
                CHECK(cudaMalloc(&out, outBytes));
                CHECK(cudaMalloc(&w, hw.size() * sizeof(float)));
                if (wsBytes)
                    CHECK(cudaMalloc(&ws, wsBytes));
                CHECK(cudaMemcpy(in, hin.data(), inBytes, cudaMemcpyHostToDevice));
                CHECK(cudaMemcpy(w, hw.data(), hw.size() * sizeof(float), cudaMemcpyHostToDevice));
                CHECK(cudaMemset(out, 0xff, outBytes));
                // The copies and the memset run on the legacy default stream, which `stream` (non-blocking) does not
                // wait for, and a copy from pageable host memory may return before its DMA lands (CUDA Runtime API,
                // "API synchronization behavior"): without this the launch could read x before it arrives and the
                // poison could land on y after the kernel (large cases under racecheck's timing did).
                CHECK(cudaDeviceSynchronize());
                p.input = in;
                p.output = out;
                p.baseWeight = w;
                p.baseBias = w + nw;
                p.waveletWeight = w + nw + cs.c;
                p.workspace = ws;
                p.workspaceBytes = wsBytes;
                char message[256] = "";
                cudaError_t const e = wtconv::wtconvForward(p, stream, message, sizeof(message));
                CHECK(cudaStreamSynchronize(stream));
                std::vector<unsigned char> hout(outBytes);
                CHECK(cudaMemcpy(hout.data(), out, outBytes, cudaMemcpyDeviceToHost));
                bool const ok = e == cudaSuccess
                    && (variant == 0 ? finite(hout, t) : finite(hout, t, size_t(cs.c), size_t(pitch)));
                std::printf("%s dtype=%d %dx%dx%dx%d k=%d L=%d s=%d %s pitch=%lld %s\n", ok ? "ok  " : "FAIL", int(t),
                    cs.b, cs.c, cs.h, cs.w, cs.k, cs.levels, cs.stride, variant == 0 ? "NCHW" : "NHWC",
                    static_cast<long long>(pitch), message);
                failures += ok ? 0 : 1;
                cudaFree(in);
                cudaFree(out);
                cudaFree(w);
                cudaFree(ws);
            }
        }
    }
    CHECK(cudaStreamDestroy(stream));
    std::printf("%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
