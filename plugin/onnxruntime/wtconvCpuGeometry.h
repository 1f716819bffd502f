// wtconvCpuGeometry.h — where each buffer of one plane lives in the CPU kernel's scratch (wtconvCpuKernel.h).
//
// Per plane, for levels l = 1..L with sizes h_l = ceil(h_{l-1} / 2), w_l = ceil(w_{l-1} / 2), h_0 = H, w_0 = W:
//   input      x as fp32, zero-padded: k/2 rows/columns above and left, k/2 + 1 below and right (the extra one is
//              the zero row/column Haar analysis pads an odd size with, docs/design.md §2.3)
//   band[l][s] subband s of level l (LL, LH, HL, HH), padded the same way; band[l][0] is LL_l, the next level's input
//   filt[l][s] the filtered subbands F_l^s (h_l rows, the pitch of band[l])
//   recon[l]   R_l for l = 0..L-1, the reconstruction at level l's resolution (h_l rows, pitch 2 w_{l+1} >= w_l)
//   base       the base convolution (H rows, the pitch of input; one row when the output is strided)
//   sums       two rows for Haar analysis: the vertical sums and differences of a pair of input rows
// A convolution runs over a padded plane as over one long row (wtconvCpuPlanes.cpp), so its output has the input's
// pitch and the columns past the interior hold values no one reads; every buffer ends in kSLACK spare floats for
// the reads and writes of that row's last vector. The zero padding is set once when the scratch is prepared and
// never written afterwards; everything else is rewritten for each plane.
#pragma once

#include "wtconvCpuKernel.h"

#include <cstddef>
#include <cstdint>

namespace wtconv
{
namespace cpu
{

constexpr int32_t kMaxLevels = 8;
constexpr int64_t kSLACK = 64; // floats after each buffer: more than one vector plus a kernel row

// Loops over scratch buffers run a multiple of kVECTOR iterations (16: one AVX-512 vector of floats, two of AVX2),
// so the compiler's scalar remainder never runs: on rows of 2 to 14 pixels it would cost more than the vector part.
// The extra iterations read and write only columns no one reads, within the next row or kSLACK.
constexpr int64_t kVECTOR = 16;
inline int64_t wholeVectors(int64_t n)
{
    return (n + kVECTOR - 1) / kVECTOR * kVECTOR;
}

struct Padded
{
    size_t offset{0}; // of the top-left padding element
    int64_t rows{0};  // interior
    int64_t cols{0};
    int64_t pitch{0};
    int64_t pad{0}; // above and left; pad + 1 below and right

    size_t floats() const
    {
        return static_cast<size_t>((rows + 2 * pad + 1) * pitch + kSLACK);
    }
    // The interior element (0, 0).
    size_t origin() const
    {
        return offset + static_cast<size_t>(pad * pitch + pad);
    }
};

struct PlaneGeometry
{
    int64_t pad{0};
    Padded input;
    Padded band[kMaxLevels + 1][4]; // [1..L]
    size_t filt[kMaxLevels + 1][4]{};
    size_t recon[kMaxLevels + 1]{}; // [0..L-1]
    int64_t reconPitch[kMaxLevels + 1]{};
    int64_t rows[kMaxLevels + 1]{}; // h_l
    int64_t cols[kMaxLevels + 1]{}; // w_l
    size_t base{0};
    size_t sums{0};
    int64_t sumsPitch{0};
    size_t total{0};

    PlaneGeometry(Layer const& layer, int64_t height, int64_t width)
    {
        pad = layer.kernelSize / 2;
        size_t next = 0;
        auto padded = [&](int64_t r, int64_t c)
        {
            Padded p;
            p.offset = next;
            p.rows = r;
            p.cols = c;
            p.pad = pad;
            p.pitch = c + 2 * pad + 1;
            next += p.floats();
            return p;
        };
        rows[0] = height;
        cols[0] = width;
        input = padded(height, width);
        for (int32_t l = 1; l <= layer.levels; ++l)
        {
            rows[l] = (rows[l - 1] + 1) / 2;
            cols[l] = (cols[l - 1] + 1) / 2;
            for (int s = 0; s < 4; ++s)
            {
                band[l][s] = padded(rows[l], cols[l]);
            }
            for (int s = 0; s < 4; ++s)
            {
                filt[l][s] = next;
                next += static_cast<size_t>(rows[l] * band[l][s].pitch + kSLACK);
            }
            recon[l - 1] = next;
            reconPitch[l - 1] = 2 * cols[l];
            next += static_cast<size_t>(rows[l - 1] * reconPitch[l - 1] + kSLACK);
        }
        base = next;
        next += static_cast<size_t>((layer.stride == 1 ? height : 1) * input.pitch + kSLACK);
        sums = next;
        sumsPitch = 2 * cols[1] + kSLACK;
        next += static_cast<size_t>(2 * sumsPitch);
        total = next;
    }
};

} // namespace cpu
} // namespace wtconv
