// wtconvCpuPlanes.cpp — the CPU kernel's per-plane computation (wtconvCpuKernel.h), compiled once per instruction
// set: CMake defines WTCONV_CPU_ISA_NS (baseline, avx2, avx512) and the matching -march flags, and
// wtconvCpuKernel.cpp dispatches to the namespace of that name.
//
// One plane (docs/design.md §2.4):
//   1. x -> fp32 into the zero-padded input buffer (the only read of x).
//   2. For l = 1..L: Haar analysis of LL_{l-1} (Eq. 1; an odd size reads the zero row/column below/right) into four
//      zero-padded subband buffers; F_l^s = W~l[4c+s] * subband s ('same' zero padding). LL_l is the unfiltered band.
//   3. Synthesis from the deepest level up: R_L = 0, R_{l-1}(y, x) = 1/2 [G + s_y F^LH + s_x F^HL + s_y s_x F^HH]
//      at (y >> 1, x >> 1) with G = F_l^LL + R_l, s_y = (-1)^(y & 1). Unrolled, this is Eq. 3's closed form
//      (R_0 = sum_l 2^-l [...] at (y >> l, x >> l) with s_y = (-1)^((y >> (l-1)) & 1)), and rows/columns a level
//      crops are never read (docs/design.md §2.4, step 3).
//   4. y = (W~b * x + b~b) + R_0 at the kept pixels (s*i, s*j), rounded once to the output type.
// All arithmetic is fp32. Each convolution output sums every kernel row separately and then adds the k row sums
// (for k >= 9 one accumulator over all taps loses accuracy: docs/design.md §2.5).
//
// Vectorisation: every inner loop runs over a row (x) with the taps unrolled inside, so the compiler turns it into
// SIMD code with unaligned loads; fp16 conversion uses F16C where the instruction set has it.
#include "wtconvCpuGeometry.h"
#include "wtconvCpuKernel.h"

#include <algorithm>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#ifndef WTCONV_CPU_ISA_NS
#error "WTCONV_CPU_ISA_NS (the instruction-set namespace) must be defined by the build"
#endif

#define WTCONV_UNROLL _Pragma("GCC unroll 16")

namespace wtconv
{
namespace cpu
{
namespace WTCONV_CPU_ISA_NS
{

namespace
{

float bitsToFloat(uint32_t bits)
{
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

uint32_t floatToBits(float f)
{
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    return bits;
}

// IEEE binary16 -> binary32, exact for every input (subnormals, infinities; NaNs stay NaN).
float halfToFloat(uint16_t h)
{
    uint32_t const shiftedExponent = 0x7C00U << 13;
    uint32_t bits = (h & 0x7FFFU) << 13;
    uint32_t const exponent = bits & shiftedExponent;
    bits += (127U - 15U) << 23;
    if (exponent == shiftedExponent)
    {
        bits += (128U - 16U) << 23; // infinity / NaN
    }
    else if (exponent == 0)
    {
        bits += 1U << 23; // zero / subnormal: renormalise through one exact subtraction
        bits = floatToBits(bitsToFloat(bits) - bitsToFloat(113U << 23));
    }
    return bitsToFloat(bits | (static_cast<uint32_t>(h & 0x8000U) << 16));
}

// binary32 -> binary16, rounded to nearest even (as F16C's vcvtps2ph with _MM_FROUND_TO_NEAREST_INT); overflow
// gives infinity, NaN a quiet NaN.
uint16_t floatToHalf(float value)
{
    uint32_t bits = floatToBits(value);
    uint32_t const sign = bits & 0x80000000U;
    bits ^= sign;
    uint32_t out;
    if (bits >= (127U + 16U) << 23)
    {
        out = bits > 0x7F800000U ? 0x7E00U : 0x7C00U;
    }
    else if (bits < 113U << 23)
    {
        // Below the smallest normal half: let one fp32 addition do the rounding to a multiple of 2^-24.
        uint32_t const magic = ((127U - 15U) + (23U - 10U) + 1U) << 23;
        out = floatToBits(bitsToFloat(bits) + bitsToFloat(magic)) - magic;
    }
    else
    {
        uint32_t const mantissaOdd = (bits >> 13) & 1U;
        bits += ((15U - 127U) << 23) + 0xFFFU;
        bits += mantissaOdd;
        out = bits >> 13;
    }
    return static_cast<uint16_t>(out | (sign >> 16));
}

// dst[x] = src[offset + x * stride] as fp32, x < n (stride 1: a row of an NCHW plane; C: a channels-last row).
void loadRow(IoType io, void const* src, int64_t offset, int64_t stride, float* dst, int64_t n)
{
    if (io == IoType::kFLOAT32)
    {
        float const* s = static_cast<float const*>(src) + offset;
        if (stride == 1)
        {
            std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
            return;
        }
        for (int64_t x = 0; x < n; ++x)
        {
            dst[x] = s[x * stride];
        }
        return;
    }
    uint16_t const* s = static_cast<uint16_t const*>(src) + offset;
    int64_t x = 0;
#if defined(__F16C__)
    if (stride == 1)
    {
        for (; x + 8 <= n; x += 8)
        {
            __m128i const h = _mm_loadu_si128(reinterpret_cast<__m128i const*>(s + x));
            _mm256_storeu_ps(dst + x, _mm256_cvtph_ps(h));
        }
    }
#endif
    for (; x < n; ++x)
    {
        dst[x] = halfToFloat(s[x * stride]);
    }
}

// dst[offset + j * dstStride] = a[j * step] + b[j * step], j < n, converted to the output type: the one rounding of
// an fp16 output (dstStride 1: NCHW, C: channels-last).
void storeRow(
    IoType io, void* dst, int64_t offset, int64_t dstStride, float const* a, float const* b, int64_t step, int64_t n)
{
    if (io == IoType::kFLOAT32)
    {
        float* __restrict d = static_cast<float*>(dst) + offset;
        if (step == 1 && dstStride == 1)
        {
            for (int64_t j = 0; j < n; ++j)
            {
                d[j] = a[j] + b[j];
            }
            return;
        }
        for (int64_t j = 0; j < n; ++j)
        {
            d[j * dstStride] = a[j * step] + b[j * step];
        }
        return;
    }
    uint16_t* d = static_cast<uint16_t*>(dst) + offset;
    int64_t j = 0;
#if defined(__F16C__)
    if (step == 1 && dstStride == 1)
    {
        for (; j + 8 <= n; j += 8)
        {
            __m256 const v = _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        }
    }
#endif
    for (; j < n; ++j)
    {
        d[j * dstStride] = floatToHalf(a[j * step] + b[j * step]);
    }
}

// out[o] = sum_a (sum_b w[a][b] * in[o + a * pitch + b]) for o < count: a k x k convolution over a padded plane
// read as one long row of `count` outputs (count = rows * pitch for a whole plane, or one row's columns). Outputs
// at o % pitch >= the interior width are not wanted and cost (2 * pad + 1) / pitch extra; in exchange the loop has
// no per-row start-up, which dominates on planes of 7 to 56 columns.
template <int K>
void convFlatK(
    float const* __restrict in, int64_t pitch, float const* __restrict w, float* __restrict out, int64_t count)
{
    float taps[K * K];
    for (int i = 0; i < K * K; ++i)
    {
        taps[i] = w[i];
    }
    for (int64_t o = 0; o < count; ++o)
    {
        float acc = 0.0F;
        WTCONV_UNROLL
        for (int a = 0; a < K; ++a)
        {
            float const* r = in + a * pitch + o;
            float rowSum = taps[a * K] * r[0];
            WTCONV_UNROLL
            for (int b = 1; b < K; ++b)
            {
                rowSum += taps[a * K + b] * r[b];
            }
            acc += rowSum;
        }
        out[o] = acc;
    }
}

using ConvFlat = void (*)(float const*, int64_t, float const*, float*, int64_t);

ConvFlat convFlatFor(int32_t k)
{
    switch (k)
    {
    case 1: return convFlatK<1>;
    case 3: return convFlatK<3>;
    case 5: return convFlatK<5>;
    case 7: return convFlatK<7>;
    case 9: return convFlatK<9>;
    case 11: return convFlatK<11>;
    case 13: return convFlatK<13>;
    case 15: return convFlatK<15>;
    default: return nullptr; // the op refuses other k before any call (wtconvLayerFields.cpp)
    }
}

// Convolves a padded plane ('same' zero padding); the output has the input's pitch.
void convPlane(ConvFlat conv, float const* scratch, Padded const& in, float const* w, float* out)
{
    conv(scratch + in.offset, in.pitch, w, out, wholeVectors(in.rows * in.pitch));
}

// Vertical step of the Haar analysis for a pair of rows (a b / c d): sum = (a + c, b + d), diff = (a - c, b - d).
void verticalPairs(float const* __restrict top, float const* __restrict bottom, float* __restrict sum,
    float* __restrict diff, int64_t n)
{
    for (int64_t x = 0; x < n; ++x)
    {
        sum[x] = top[x] + bottom[x];
        diff[x] = top[x] - bottom[x];
    }
}

// Horizontal step over neighbouring columns: the four subbands of Eq. 1.
void horizontalPairs(float const* __restrict sum, float const* __restrict diff, float* __restrict ll,
    float* __restrict lh, float* __restrict hl, float* __restrict hh, int64_t cols)
{
    for (int64_t j = 0; j < cols; ++j)
    {
        float const s0 = sum[2 * j];
        float const s1 = sum[2 * j + 1];
        float const d0 = diff[2 * j];
        float const d1 = diff[2 * j + 1];
        ll[j] = 0.5F * (s0 + s1); // (a + b + c + d) / 2
        lh[j] = 0.5F * (d0 + d1); // (a + b - c - d) / 2
        hl[j] = 0.5F * (s0 - s1); // (a - b + c - d) / 2
        hh[j] = 0.5F * (d0 - d1); // (a - b - c + d) / 2
    }
}

// The four Haar subbands of a padded LL plane into four padded buffers (Eq. 1), in two vectorisable steps per pair
// of rows. An odd size reads the zero row / column of the padding.
void analyse(float* scratch, PlaneGeometry const& g, Padded const& ll, Padded const (&bands)[4])
{
    float const* src = scratch + ll.origin();
    float* sum = scratch + g.sums;
    float* diff = sum + g.sumsPitch;
    int64_t const cols = bands[0].cols;
    int64_t const pitch = bands[0].pitch;
    for (int64_t i = 0; i < bands[0].rows; ++i)
    {
        float const* top = src + 2 * i * ll.pitch;
        verticalPairs(top, top + ll.pitch, sum, diff, wholeVectors(2 * cols));
        horizontalPairs(sum, diff, scratch + bands[0].origin() + i * pitch, scratch + bands[1].origin() + i * pitch,
            scratch + bands[2].origin() + i * pitch, scratch + bands[3].origin() + i * pitch, cols);
    }
}

// R_{l-1} from level l's filtered subbands and R_l (null for the deepest level).
void synthesise(float* scratch, PlaneGeometry const& g, int32_t l, bool deepest)
{
    float const* fll = scratch + g.filt[l][0];
    float const* flh = scratch + g.filt[l][1];
    float const* fhl = scratch + g.filt[l][2];
    float const* fhh = scratch + g.filt[l][3];
    int64_t const filtPitch = g.band[l][0].pitch;
    float const* below = deepest ? nullptr : scratch + g.recon[l];
    int64_t const belowPitch = g.reconPitch[l];
    float* out = scratch + g.recon[l - 1];
    int64_t const outPitch = g.reconPitch[l - 1];
    // Whole vectors: the extra pairs land in the next row of R_{l-1} (rewritten when its turn comes) or in kSLACK.
    int64_t const cols = wholeVectors(g.cols[l]);
    for (int64_t y = 0; y < g.rows[l - 1]; ++y)
    {
        int64_t const i = y >> 1;
        float const sy = (y & 1) != 0 ? -1.0F : 1.0F;
        float const* __restrict ll = fll + i * filtPitch;
        float const* __restrict lh = flh + i * filtPitch;
        float const* __restrict hl = fhl + i * filtPitch;
        float const* __restrict hh = fhh + i * filtPitch;
        float const* __restrict r = below == nullptr ? nullptr : below + i * belowPitch;
        float* __restrict o = out + y * outPitch;
        if (r == nullptr)
        {
            for (int64_t j = 0; j < cols; ++j)
            {
                float const even = ll[j] + sy * lh[j];
                float const odd = hl[j] + sy * hh[j];
                o[2 * j] = 0.5F * (even + odd);
                o[2 * j + 1] = 0.5F * (even - odd);
            }
        }
        else
        {
            for (int64_t j = 0; j < cols; ++j)
            {
                float const even = (ll[j] + r[j]) + sy * lh[j];
                float const odd = hl[j] + sy * hh[j];
                o[2 * j] = 0.5F * (even + odd);
                o[2 * j + 1] = 0.5F * (even - odd);
            }
        }
    }
}

void forwardPlane(
    Layer const& layer, Tensors const& t, PlaneGeometry const& g, ConvFlat conv, int64_t plane, float* scratch)
{
    int64_t const c = plane % layer.channels;
    int64_t const batch = plane / layer.channels;
    int64_t const kk = static_cast<int64_t>(layer.kernelSize) * layer.kernelSize;
    int64_t const h = t.height;
    int64_t const w = t.width;
    int64_t const s = layer.stride;
    int64_t const outH = (h + s - 1) / s;
    int64_t const outW = (w + s - 1) / s;
    // Row y of a plane of rows x cols pixels starts at rowStart(y, rows, cols), its pixels pixelStride apart.
    int64_t const pixelStride = t.channelsLast ? layer.channels : 1;
    auto rowStart = [&](int64_t y, int64_t rows, int64_t cols)
    { return t.channelsLast ? ((batch * rows + y) * cols) * layer.channels + c : (plane * rows + y) * cols; };

    float* input = scratch + g.input.origin();
    for (int64_t y = 0; y < h; ++y)
    {
        loadRow(t.io, t.input, rowStart(y, h, w), pixelStride, input + y * g.input.pitch, w);
    }
    for (int32_t l = 1; l <= layer.levels; ++l)
    {
        analyse(scratch, g, l == 1 ? g.input : g.band[l - 1][0], g.band[l]);
        float const* weights = layer.waveletWeight + ((static_cast<int64_t>(l) - 1) * 4 * layer.channels + 4 * c) * kk;
        for (int sub = 0; sub < 4; ++sub)
        {
            convPlane(conv, scratch, g.band[l][sub], weights + sub * kk, scratch + g.filt[l][sub]);
        }
    }
    for (int32_t l = layer.levels; l >= 1; --l)
    {
        synthesise(scratch, g, l, l == layer.levels);
    }
    float const* recon = scratch + g.recon[0];
    float* base = scratch + g.base;
    float const* baseWeight = layer.baseWeight + c * kk;
    float const bias = layer.baseBias[c];
    int64_t const pitch = g.input.pitch;
    if (s == 1)
    {
        convPlane(conv, scratch, g.input, baseWeight, base);
    }
    for (int64_t i = 0; i < outH; ++i)
    {
        int64_t const y = i * s;
        float* row = base + (s == 1 ? y * pitch : 0);
        if (s != 1)
        {
            // Only the kept rows (all W columns: the stride subsamples them afterwards).
            conv(scratch + g.input.offset + y * pitch, pitch, baseWeight, row, wholeVectors(w));
        }
        for (int64_t x = 0; x < w; ++x)
        {
            row[x] += bias;
        }
        storeRow(t.io, t.output, rowStart(i, outH, outW), pixelStride, row, recon + y * g.reconPitch[0], s, outW);
    }
}

} // namespace

void forwardPlanes(Layer const& layer, Tensors const& t, int64_t begin, int64_t end, float* scratch)
{
    PlaneGeometry const g(layer, t.height, t.width);
    ConvFlat const conv = convFlatFor(layer.kernelSize);
    if (conv == nullptr || begin >= end)
    {
        return;
    }
    // The padding must read as zeros; interiors are rewritten for every plane.
    std::fill(scratch, scratch + g.total, 0.0F);
    for (int64_t plane = begin; plane < end; ++plane)
    {
        forwardPlane(layer, t, g, conv, plane, scratch);
    }
}

} // namespace WTCONV_CPU_ISA_NS
} // namespace cpu
} // namespace wtconv
