"""Independent float64 oracle of the published WTConv2d algorithm, by explicit loops over pixels (NumPy).

Written from the published algorithm (Finder et al., ECCV 2024; BGU-CS-VIL/WTConv ``wtconv/wtconv2d.py``
and ``wtconv/util/wavelet.py``), sharing no code with ``wtconv_torch``:

    LL_0 = x
    for level l = 1..L:
        pad LL_{l-1} with one zero row (bottom) / column (right) if its height / width is odd
        coefficients[s] = 2x2 stride-2 correlation of LL_{l-1} with the analysis filter of subband s
                          (s = LL, LH, HL, HH; filters = outer products of the reversed db1 decomposition
                          filters, as the published create_wavelet_filter builds them)
        filtered_l = scale_l * depthwise_conv_same(coefficients, W_l)   (channel 4c+s)
        LL_l = coefficients[LL]  (unfiltered)
    next = 0
    for l = L..1:  next = crop(inverse_haar(filtered_l with LL band + next), size of LL_{l-1})
                   (inverse: stride-2 transposed convolution with the synthesis filters)
    y = base_scale * (depthwise_conv_same(x, W_b) + b_b) + next,   then y[..., ::stride, ::stride]

Loops are slow: keep sizes tiny.
"""

import math

import numpy as np

# PyWavelets' db1 (Haar) filter bank, written out: pywt.Wavelet('db1').{dec_lo, dec_hi, rec_lo, rec_hi}.
_R = 1.0 / math.sqrt(2.0)
DB1_DEC_LO = (_R, _R)
DB1_DEC_HI = (-_R, _R)
DB1_REC_LO = (_R, _R)
DB1_REC_HI = (_R, -_R)


def _bank(lo, hi):
    """(4, 2, 2): [LL, LH, HL, HH]; tap [p][q] is row p, column q. LH varies along rows, HL along columns."""
    bank = np.zeros((4, 2, 2))
    for p in range(2):
        for q in range(2):
            bank[0, p, q] = lo[p] * lo[q]
            bank[1, p, q] = hi[p] * lo[q]
            bank[2, p, q] = lo[p] * hi[q]
            bank[3, p, q] = hi[p] * hi[q]
    return bank


def db1_filter_banks():
    """(analysis, synthesis) banks, each (4, 2, 2) float64; the analysis filters use the reversed
    decomposition filters (the published code correlates, PyWavelets convolves)."""
    return _bank(DB1_DEC_LO[::-1], DB1_DEC_HI[::-1]), _bank(DB1_REC_LO, DB1_REC_HI)


def haar_analysis(image, analysis):
    """(H, W) -> (4, ceil(H/2), ceil(W/2)), zero-padding bottom/right to even size."""
    h, w = image.shape
    hp, wp = h + h % 2, w + w % 2
    padded = np.zeros((hp, wp))
    padded[:h, :w] = image
    out = np.zeros((4, hp // 2, wp // 2))
    for s in range(4):
        for i in range(hp // 2):
            for j in range(wp // 2):
                acc = 0.0
                for p in range(2):
                    for q in range(2):
                        acc += analysis[s, p, q] * padded[2 * i + p, 2 * j + q]
                out[s, i, j] = acc
    return out


def haar_synthesis(coefficients, synthesis):
    """(4, h, w) -> (2h, 2w): each coefficient spreads over its 2x2 patch with the synthesis taps."""
    _, h, w = coefficients.shape
    out = np.zeros((2 * h, 2 * w))
    for i in range(h):
        for j in range(w):
            for p in range(2):
                for q in range(2):
                    acc = 0.0
                    for s in range(4):
                        acc += synthesis[s, p, q] * coefficients[s, i, j]
                    out[2 * i + p, 2 * j + q] = acc
    return out


def conv_same(image, kernel):
    """2-D cross-correlation of (H, W) with an odd (k, k) kernel, zero 'same' padding (PyTorch's conv2d)."""
    h, w = image.shape
    k = kernel.shape[0]
    r = k // 2
    out = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            acc = 0.0
            for dy in range(k):
                for dx in range(k):
                    yy, xx = y + dy - r, x + dx - r
                    if 0 <= yy < h and 0 <= xx < w:
                        acc += kernel[dy, dx] * image[yy, xx]
            out[y, x] = acc
    return out


def wtconv2d_oracle(
    x, base_weight, base_bias, base_scale, wavelet_weights, wavelet_scales, stride=1, analysis=None, synthesis=None
):
    """The published WTConv2d forward in float64.

    x: (B, C, H, W); base_weight (C, 1, k, k); base_bias (C,) or None; base_scale (1, C, 1, 1);
    wavelet_weights: list of L arrays (4C, 1, k, k); wavelet_scales: list of L arrays (1, 4C, 1, 1);
    analysis / synthesis: (4, 2, 2) filter banks (default: db1 in float64).
    """
    if analysis is None or synthesis is None:
        analysis, synthesis = db1_filter_banks()
    x = np.asarray(x, dtype=np.float64)
    b, c, h, w = x.shape
    levels = len(wavelet_weights)
    out = np.zeros((b, c, h, w))
    for n in range(b):
        for ch in range(c):
            # Analysis: keep every level's filtered coefficients and the size of its input.
            ll = x[n, ch]
            filtered, sizes = [], []
            for lv in range(levels):
                sizes.append(ll.shape)
                coeff = haar_analysis(ll, analysis)
                f = np.zeros_like(coeff)
                for s in range(4):
                    f[s] = float(np.ravel(wavelet_scales[lv])[4 * ch + s]) * conv_same(
                        coeff[s], np.asarray(wavelet_weights[lv])[4 * ch + s, 0]
                    )
                filtered.append(f)
                ll = coeff[0]
            # Synthesis from the deepest level up.
            nxt = None
            for lv in range(levels - 1, -1, -1):
                f = filtered[lv].copy()
                if nxt is not None:
                    f[0] += nxt
                rec = haar_synthesis(f, synthesis)
                nxt = rec[: sizes[lv][0], : sizes[lv][1]]
            base = conv_same(x[n, ch], np.asarray(base_weight)[ch, 0])
            if base_bias is not None:
                base = base + float(np.asarray(base_bias)[ch])
            out[n, ch] = float(np.ravel(base_scale)[ch]) * base + nxt
    return out[:, :, ::stride, ::stride]


def oracle_from_module(module, x, analysis=None, synthesis=None):
    """Run the oracle with a WTConv2d-like module's parameters (read by their published names)."""
    sd = {k: v.detach().double().cpu().numpy() for k, v in module.state_dict().items()}
    levels = len([k for k in sd if k.startswith("wavelet_convs.")])
    return wtconv2d_oracle(
        x.detach().double().cpu().numpy(),
        sd["base_conv.weight"],
        sd.get("base_conv.bias"),
        sd["base_scale.weight"],
        [sd[f"wavelet_convs.{i}.weight"] for i in range(levels)],
        [sd[f"wavelet_scale.{i}.weight"] for i in range(levels)],
        stride=module.stride,
        analysis=analysis,
        synthesis=synthesis,
    )
