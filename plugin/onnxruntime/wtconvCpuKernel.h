// wtconvCpuKernel.h — the fused WTConv layer on the CPU (no ONNX Runtime types; the op glue is wtconvOrtCpuOp.cpp).
//
// Operator: docs/design.md §2.4 (the fused formulation), input x (B, C, H, W) NCHW, output
// (B, C, ceil(H/s), ceil(W/s)), or both channels-last (the node's channels_last = 1), weights folded fp32 (wtconv_torch/folding.py). Arithmetic is fp32 whatever the I/O
// type; an fp16 output is rounded once, on the way out (docs/design.md §2.5).
//
// Work is split by plane (one (b, c) pair): every level of one plane depends only on that plane, so planes run on
// any threads in any order, and a plane's result does not depend on which thread computed it. forwardPlanes does a
// range of planes with one caller-provided scratch buffer; the caller decides the threads (the op uses ONNX
// Runtime's intra-op thread pool, docs/onnx_runtime.md "Threads").
//
// The inner loops are plain C++ that the compiler vectorises; the same source is compiled once per instruction set
// (baseline x86-64 or the machine's default, AVX2 + FMA + F16C, AVX-512) and bestIsa() picks the widest this
// processor runs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wtconv
{
namespace cpu
{

enum class IoType : int32_t
{
    kFLOAT32 = 0,
    kFLOAT16 = 1, // IEEE binary16, converted exactly on load, rounded to nearest even on store
};

enum class Isa : int32_t
{
    kBASELINE = 0, // what the compiler targets by default
    kAVX2 = 1,     // x86-64-v3: AVX2, FMA, F16C
    kAVX512 = 2,   // x86-64-v4: AVX-512 F/BW/DQ/VL
};

struct Layer
{
    int32_t kernelSize{0};               // odd, 1..15
    int32_t levels{0};                   // 1..8
    int32_t stride{1};                   // >= 1
    int64_t channels{0};                 // C
    float const* baseWeight{nullptr};    // (C, k, k), folded
    float const* baseBias{nullptr};      // (C), folded
    float const* waveletWeight{nullptr}; // (levels, 4C, k, k), folded, channel 4c+s = subband s of c
};

struct Tensors
{
    IoType io{IoType::kFLOAT32};
    int64_t batch{0};
    int64_t height{0};
    int64_t width{0};
    void const* input{nullptr}; // (B, C, H, W), or (B, H, W, C) when channelsLast
    void* output{nullptr};      // (B, C, ceil(H/s), ceil(W/s)), or (B, ceil(H/s), ceil(W/s), C) when channelsLast
    bool channelsLast{false};   // dense channels-last: element (b, c, y, x) at ((b * H + y) * W + x) * C + c
};

// Floats of scratch forwardPlanes needs for planes of H x W (any number of planes).
size_t scratchFloats(Layer const& layer, int64_t height, int64_t width);

// Computes planes [begin, end) of the B*C planes (plane p = b*C + c). `scratch` holds scratchFloats() floats and
// belongs to this call alone; disjoint ranges may run concurrently. Sizes are the caller's to check.
void forwardPlanes(Isa isa, Layer const& layer, Tensors const& t, int64_t begin, int64_t end, float* scratch);

// The widest instruction set this build has and this processor runs.
Isa bestIsa();

// Whether this build has and this processor runs `isa`.
bool isaAvailable(Isa isa);

char const* isaName(Isa isa);

} // namespace cpu
} // namespace wtconv
