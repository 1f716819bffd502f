"""GPU tests of the fused WTConv CUDA kernels (plugin/kernels) through their C API (ctypes).

Oracle: the executable spec (wtconv_torch/fused_spec.py) in float64 on the folded float64 weights.
Outputs are poisoned with NaN before each launch; every case draws fresh random inputs and weights.
fp32: every output within max(1e-6 max |spec|, 4 u M) of the spec, where M is the magnitude of the terms summed
for that output and u = 2^-24 (fp32_violation: only outputs whose terms cancel get more than the relative bound).
fp16 / bf16: error <= 1.0x the error of the
PyTorch reference module (wtconv_torch.WTConv2d) run in the same dtype on the GPU. Every case runs in both
layouts the kernels read and write: NCHW and channels-last (NHWC), plus padded channel pitches.
Skipped (with the reason) without a CUDA GPU or without the built library (see cuda_kernels.BUILD_HINT).
"""

import ctypes
import itertools

import pytest
import torch
import torch.nn.functional as F

from wtconv_torch import cuda_kernels
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.wtconv2d import random_wtconv2d

INVALID_VALUE = 1  # cudaErrorInvalidValue
DTYPE_NAMES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# unit roundoff: the floor of the fp16/bf16 bound when the reference happens to be exact (tiny cases)
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@pytest.fixture(scope="module")
def kernels(require_cuda):
    """The C API library on a CUDA GPU (tests/conftest.py's require_cuda decides the skip)."""
    return cuda_kernels.load_library()


def run_kernels(x, folded, poison=True):
    """Our kernels on x (CUDA, NCHW or channels-last), output (same layout) poisoned with NaN first."""
    bw, bb, ww = folded.tensors(device=x.device, dtype=torch.float32)
    b, c, h, w = x.shape
    s = folded.stride
    out = torch.empty(
        (b, c, (h + s - 1) // s, (w + s - 1) // s),
        dtype=x.dtype,
        device=x.device,
        memory_format=cuda_kernels.memory_format(cuda_kernels.layout_of(x)),
    )
    if poison:
        out.fill_(float("nan"))
    cuda_kernels.forward_into(out, x, bw, bb, ww, folded.kernel_size, folded.wt_levels, s)
    return out


def rel_error(value, expected):
    scale = expected.abs().max().item() or 1.0
    return (value.double() - expected).abs().max().item() / scale


FP32_RELATIVE = 1e-6
FP32_TERMS = 4 * 2.0**-24  # 4 unit roundoffs of the magnitude of an output's terms


def terms_magnitude(x, base_weight, base_bias, wavelet_weight, k, levels, stride):
    """Per output, in float64, the sum of the magnitudes of the terms the operator adds up for it: the fused
    operator (docs/design.md §2.4) on |x| with |weights| and |bias|, every Haar and synthesis sign taken as +.
    A float32 evaluation's error at an output is a few unit roundoffs of this, however much its terms cancel."""
    xa = x.double().abs()
    c = xa.shape[1]
    pad = k // 2
    ys = torch.arange(0, xa.shape[-2], stride, device=x.device)
    xs = torch.arange(0, xa.shape[-1], stride, device=x.device)
    bw = base_weight.double().abs().reshape(c, 1, k, k)
    out = F.conv2d(xa, bw, base_bias.double().abs(), stride=stride, padding=pad, groups=c)
    ll = xa
    for level in range(1, levels + 1):
        h, w = ll.shape[-2:]
        ll = F.pad(ll, (0, w % 2, 0, h % 2))
        ll = 0.5 * (ll[..., 0::2, 0::2] + ll[..., 0::2, 1::2] + ll[..., 1::2, 0::2] + ll[..., 1::2, 1::2])
        bands = wavelet_weight[level - 1].double().abs().reshape(c, 4, k, k).sum(1)  # each band's magnitude is ll
        g = F.conv2d(ll, bands.reshape(c, 1, k, k), padding=pad, groups=c)
        out = out + g[..., ys >> level, :][..., xs >> level] * 0.5**level
    return out


def fp32_violation(value, expected, magnitude):
    """The largest |value - expected| over its bound max(FP32_RELATIVE max |expected|, FP32_TERMS magnitude),
    output by output: <= 1 passes. Where an output's terms cancel (a near-zero output of large terms), float32
    itself cannot meet a bound relative to the output's size, so there the bound follows the terms' magnitude;
    elsewhere it is the relative bound (4 u M stays below it unless M > 4.2 max |expected|)."""
    err = (value.double() - expected).abs()
    bound = torch.clamp(FP32_TERMS * magnitude, min=FP32_RELATIVE * expected.abs().max().item())
    return (err / bound).max().item()


def check_case(b, c, h, w, k, levels, stride, dtype, seed, report=None, layouts=("nchw", "nhwc")):
    dev = torch.device("cuda")
    layer = random_wtconv2d(c, k, levels, stride, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn((b, c, h, w), generator=gen).to(dev)
    f64 = fold_wtconv(layer, dtype=torch.float64)
    folded = fold_wtconv(layer)
    xd = x.to(dtype)
    expected_d = fused_wtconv2d_spec(xd.double(), *f64.tensors(device=dev), k, levels, stride)
    errors, outs = [], []
    for layout in layouts:
        xl = xd.contiguous(memory_format=torch.channels_last) if layout == "nhwc" else xd
        out = run_kernels(xl, folded)
        assert not torch.isnan(out).any(), f"{layout}, seed {seed}: output has unwritten (NaN-poisoned) elements"
        if layout == "nhwc" and c > 1 and h * w > 1:
            assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
        errors.append(rel_error(out, expected_d))
        outs.append(out)
    err = max(errors)
    if dtype == torch.float32:
        if report is not None:
            report.add("kernels fp32 relative error", err, f"{b}x{c}x{h}x{w} k={k} L={levels} s={stride}")
        magnitude = terms_magnitude(xd, *f64.tensors(device=dev), k, levels, stride)
        worst = max(fp32_violation(out, expected_d, magnitude) for out in outs)
        assert worst <= 1.0, (
            f"seed {seed}: fp32 error {worst:.2f}x its bound max({FP32_RELATIVE:.0e} max|spec|, 4u terms) "
            f"(relative errors nchw, nhwc: {errors})"
        )
        return err, None
    with torch.no_grad():
        ref = layer.to(dev, dtype)(xd)
    ref_err = rel_error(ref, expected_d)
    bound = max(ref_err, UNIT_ROUNDOFF[dtype])
    if report is not None:
        where = f"{b}x{c}x{h}x{w} k={k} L={levels} s={stride}"
        report.add(f"kernels {dtype} relative error", err, where)
        report.add(f"kernels {dtype} error / reference error", err / max(ref_err, UNIT_ROUNDOFF[dtype]), where)
    assert err <= bound, (
        f"seed {seed}: {dtype} error {err:.3e} (nchw, nhwc: {errors}) > 1.0x reference error {ref_err:.3e}"
    )
    return err, ref_err


SIZES = [
    (1, 1, 1, 1),
    (1, 2, 1, 7),
    (2, 3, 5, 3),
    (1, 2, 8, 8),
    (2, 3, 37, 70),
    (1, 2, 64, 64),
    (1, 1, 129, 65),
    (2, 2, 200, 9),
    (1, 3, 70, 200),
]
MATRIX = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in itertools.chain(
        # every k, every level count, on an odd non-square size
        ((2, 3, 37, 70, k, lv, 1) for k in (1, 3, 5, 7, 9, 11, 13, 15) for lv in (1, 2, 3, 5, 8)),
        # planes above the whole-plane limit (64x64): the tiled path, every k class, strides
        ((1, 2, 67, 130, k, lv, s) for k in (1, 9, 15) for lv in (2, 8) for s in (1, 2)),
        ((2, 2, 130, 67, k, lv, 3) for k in (3, 5, 7) for lv in (1, 4)),
        # awkward sizes (1x1, smaller than 2^L, non-square, several tiles) x levels x stride
        (
            (*size, k, lv, s)
            for size in SIZES
            for k in (3, 5, 7)
            for lv in (1, 3, 8)
            for s in (1, 2, 3)
            if (k + lv + s + size[2]) % 3 == 0 or s == 1
        ),
    )
]


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", MATRIX)
def test_matches_spec(kernels, error_report, dtype_name, b, c, h, w, k, levels, stride):
    seed = torch.randint(0, 2**31 - 1, ()).item()  # fresh inputs every run; failure messages name the seed
    check_case(b, c, h, w, k, levels, stride, DTYPE_NAMES[dtype_name], seed, error_report)


@pytest.mark.parametrize("b,c,h,w,k,levels,stride,seed", [(1, 1, 1, 1, 5, 3, 3, 870387034), (2, 3, 37, 70, 5, 3, 1, 5)])
def test_fp32_bound_follows_cancellation_and_catches_wrong_outputs(b, c, h, w, k, levels, stride, seed):
    """The fp32 bound on the CPU (no GPU needed): a float32 evaluation passes, also on the case where a kernel
    output once failed the old bound (seed 870387034: a 1 x 1 plane whose output is 72x smaller than its terms,
    kernel error 3.7e-6 relative = 0.86 u of the terms' magnitude); wrong outputs fail: a level's weights off by
    1e-3, and the largest output off by 3e-6 of max(max |spec|, its terms' magnitude) (50 u of it at the 1 x 1
    plane)."""
    layer = random_wtconv2d(c, k, levels, stride, seed)
    x = torch.randn((b, c, h, w), generator=torch.Generator().manual_seed(seed + 1))
    w64, w32 = fold_wtconv(layer, dtype=torch.float64).tensors(), fold_wtconv(layer).tensors()
    expected = fused_wtconv2d_spec(x.double(), *w64, k, levels, stride)
    magnitude = terms_magnitude(x, *w64, k, levels, stride)
    assert fp32_violation(fused_wtconv2d_spec(x, *w32, k, levels, stride), expected, magnitude) <= 1.0
    scale = expected.abs().max().item()
    observed = expected + 3.68e-6 * scale  # the failing run's error, on every output
    if h * w == 1:
        assert rel_error(observed, expected) > FP32_RELATIVE  # the old bound failed it ...
        assert fp32_violation(observed, expected, magnitude) <= 1.0  # ... this one does not
    bw, bb, ww = w32
    wrong_level = ww.clone()
    wrong_level[levels - 1] *= 1 + 1e-3
    assert fp32_violation(fused_wtconv2d_spec(x, bw, bb, wrong_level, k, levels, stride), expected, magnitude) > 1
    shifted = expected.clone().flatten()
    i = shifted.abs().argmax()
    shifted[i] += 3e-6 * max(scale, magnitude.flatten()[i].item())
    assert fp32_violation(shifted.reshape(expected.shape), expected, magnitude) > 1


CLUSTER_CASES = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in (
        # C a multiple of 8 on the whole-plane path: channels-last runs the cluster mode (8 channels per cluster)
        [(2, 8, 37, 70, k, lv, s) for k in (3, 5, 7, 9) for lv in (1, 3, 5) for s in (1, 2)]
        + [(1, 24, 1, 1, 3, 2, 1), (3, 16, 7, 9, 5, 4, 1), (1, 8, 64, 64, 5, 6, 1), (2, 8, 5, 64, 1, 8, 3)]
    )
]


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", CLUSTER_CASES)
def test_channels_last_cluster_mode(kernels, error_report, dtype_name, b, c, h, w, k, levels, stride):
    seed = torch.randint(0, 2**31 - 1, ()).item()
    check_case(b, c, h, w, k, levels, stride, DTYPE_NAMES[dtype_name], seed, error_report, layouts=("nhwc",))


# The shapes of the fixed-geometry kernels (plugin/kernels/wtconvFixedPlane.cu: k = 5 at 7 x 7 L2, 14 x 14 L3,
# 28 x 28 L4 and 56 x 56 L5, stride 1; they run them in a build with -DWTCONV_FIXED_PLANES=1, else kernel 1 does):
# channel counts that make every block size their plan picks (whole warps of 32 channels at 7 x 7, 1 to 16 planes
# per block above, and counts their accesses cannot take, which fall back; four 16-bit channels per block for
# channels-last 56 x 56 where the device's shared memory holds them), batch sizes that leave a block's last items
# or warps idle, and a batch whose 7 x 7 blocks loop over several groups of items.
FIXED_CASES = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in (
        [(1, 32, 7, 7, 5, 2, 1), (3, 64, 7, 7, 5, 2, 1), (9, 32, 7, 7, 5, 2, 1)]
        + [(1, 8, 14, 14, 5, 3, 1), (3, 24, 14, 14, 5, 3, 1), (2, 16, 14, 14, 5, 3, 1), (5, 2, 14, 14, 5, 3, 1)]
        + [(1, 4, 28, 28, 5, 4, 1), (2, 12, 28, 28, 5, 4, 1), (3, 8, 28, 28, 5, 4, 1), (2, 2, 28, 28, 5, 4, 1)]
        + [(1, 1, 56, 56, 5, 5, 1), (2, 3, 56, 56, 5, 5, 1), (1, 4, 56, 56, 5, 5, 1), (3, 12, 56, 56, 5, 5, 1)]
    )
]


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", FIXED_CASES)
def test_fixed_geometry_kernels(kernels, error_report, dtype_name, b, c, h, w, k, levels, stride):
    seed = torch.randint(0, 2**31 - 1, ()).item()
    check_case(b, c, h, w, k, levels, stride, DTYPE_NAMES[dtype_name], seed, error_report)


@pytest.mark.parametrize("dtype_name", ["fp32", "fp16"])
def test_fixed_geometry_tiny_planes_loop_over_items(kernels, error_report, dtype_name):
    """7 x 7 with 768 channels and 176 items: the grid holds fewer item groups than the batch, so blocks loop."""
    seed = torch.randint(0, 2**31 - 1, ()).item()
    check_case(176, 768, 7, 7, 5, 2, 1, DTYPE_NAMES[dtype_name], seed, error_report)


@pytest.mark.parametrize("dtype_name", ["fp32", "fp16"])
@pytest.mark.parametrize(
    "b,c,hw,levels", [(67, 384, 14, 3), (45, 192, 28, 4), (23, 96, 56, 5)], ids=["14x14", "28x28", "56x56"]
)
def test_fixed_geometry_group_blocks_loop_over_items(kernels, error_report, dtype_name, b, c, hw, levels):
    """Batches whose grid is large enough that a group-kernel block takes 2-3 batch items in turn, the last rows
    of blocks one item fewer (wtconvFixedPlane.cu, groupPlan): the weights and halos set up once serve them all."""
    seed = torch.randint(0, 2**31 - 1, ()).item()
    check_case(b, c, hw, hw, 5, levels, 1, DTYPE_NAMES[dtype_name], seed, error_report)


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
def test_wtconvnext_stage_shapes(kernels, error_report, dtype_name):
    """The WTConvNeXt-T stage configurations (k = 5), small batch."""
    for i, (c, hw, lv) in enumerate([(96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2)]):
        check_case(2, c, hw, hw, 5, lv, 1, DTYPE_NAMES[dtype_name], 1000 + i, error_report)


def test_custom_op_and_cuda_graph(kernels):
    """fused_wtconv2d on CUDA runs our kernels (matches the spec) and replays correctly in a CUDA graph."""
    from wtconv_torch.ops import fused_wtconv2d

    cuda_kernels.register()
    dev = torch.device("cuda")
    layer = random_wtconv2d(16, 5, 3, 1, 7)
    folded = fold_wtconv(layer)
    w = folded.tensors(device=dev)
    static_x = torch.randn(2, 16, 67, 45, device=dev)
    expected = fused_wtconv2d_spec(static_x.double(), *fold_wtconv(layer, torch.float64).tensors(device=dev), 5, 3, 1)
    eager = fused_wtconv2d(static_x, *w, 5, 3, 1)
    assert rel_error(eager, expected) <= 1e-5
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fused_wtconv2d(static_x, *w, 5, 3, 1)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = fused_wtconv2d(static_x, *w, 5, 3, 1)
    for _ in range(2):
        static_x.copy_(torch.randn_like(static_x))
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = fused_wtconv2d_spec(
            static_x.double(), *fold_wtconv(layer, torch.float64).tensors(device=dev), 5, 3, 1
        )
        assert rel_error(static_y, expected) <= 1e-5


def test_large_tensor_64bit_indexing(kernels):
    """fp16 (1, 3, 32768, 32768): 3 * 2^30 elements; plane 2 lies beyond 2^31 (int32 offsets would wrap)."""
    free, _ = torch.cuda.mem_get_info()
    if free < 60 * 2**30:
        pytest.skip(f"needs ~60 GiB of free GPU memory, {free / 2**30:.0f} GiB free")
    dev = torch.device("cuda")
    k, levels, hw = 3, 2, 32768
    layer = random_wtconv2d(3, k, levels, 1, 11)
    folded = fold_wtconv(layer)
    x = torch.empty((1, 3, hw, hw), dtype=torch.float16, device=dev)
    x.normal_()
    assert x.numel() >= 2**31
    out = run_kernels(x, folded)
    assert not torch.isnan(out[:, 2]).any().item(), "plane 2 has unwritten elements"
    # spec of plane 2 alone (channel 2's weights), float32 on the GPU; fp16 output rounding ~2^-11
    bw, bb, ww = fold_wtconv(layer, torch.float64).tensors(device=dev, dtype=torch.float32)
    expected = fused_wtconv2d_spec(x[:, 2:3].float(), bw[2:3], bb[2:3], ww[:, 8:12], k, levels, 1)
    scale = expected.abs().max().item()
    err = (out[:, 2:3].float() - expected).abs().max().item() / scale
    assert err <= 2**-9, f"fp16 relative error {err:.3e} on plane 2 (beyond 2^31 elements)"


def _forward_raw(lib, message, **overrides):
    # 100 x 100 planes take the tiled path, which needs a workspace (the whole-plane path needs none)
    args = dict(
        dtype=0,
        b=1,
        c=2,
        h=100,
        w=100,
        k=3,
        levels=2,
        stride=1,
        layout=0,
        pitch=0,
        x=1,
        y=1,
        bw=1,
        bb=1,
        ww=1,
        ws=256,
        ws_bytes=1 << 20,
    )
    args.update(overrides)
    return lib.wtconv_forward(
        args["dtype"],
        args["b"],
        args["c"],
        args["h"],
        args["w"],
        args["k"],
        args["levels"],
        args["stride"],
        args["layout"],
        args["pitch"],
        args["x"],
        args["y"],
        args["bw"],
        args["bb"],
        args["ww"],
        args["ws"],
        args["ws_bytes"],
        None,
        message,
        len(message),
    )


@pytest.mark.parametrize(
    "overrides,words",
    [
        (dict(dtype=7), "dtype"),
        (dict(b=0), "batch"),
        (dict(c=-1), "channels"),
        (dict(h=0), "height"),
        (dict(w=0), "width"),
        (dict(k=4), "kernelSize"),
        (dict(k=17), "kernelSize"),
        (dict(k=0), "kernelSize"),
        (dict(levels=0), "levels"),
        (dict(levels=9), "levels"),
        (dict(stride=0), "stride"),
        (dict(layout=2), "layout"),
        (dict(layout=-1), "layout"),
        (dict(layout=1, pitch=1), "channelPitch"),
        (dict(layout=0, pitch=8), "channelPitch"),
        (dict(layout=1, pitch=-3), "channelPitch"),
        (dict(x=None), "input"),
        (dict(y=None), "output"),
        (dict(bw=None), "baseWeight"),
        (dict(bb=None), "baseBias"),
        (dict(ww=None), "waveletWeight"),
        (dict(ws=None), "workspace"),
        (dict(ws_bytes=16), "workspaceBytes"),
    ],
)
def test_bad_input_is_rejected_without_launch(kernels, overrides, words):
    """Each invalid argument: cudaErrorInvalidValue and a message naming it (pointers are never touched:
    the dummy non-null pointers above would fault if anything were launched)."""
    message = ctypes.create_string_buffer(256)
    code = _forward_raw(kernels, message, **overrides)
    assert code == INVALID_VALUE
    assert words in message.value.decode(), message.value.decode()
    assert cuda_kernels.load_library().wtconv_error_name(code) == b"cudaErrorInvalidValue"


def test_workspace_bytes(kernels):
    lib = kernels
    assert lib.wtconv_workspace_bytes(0, 1, 2, 100, 100, 3, 1, 1, 0, 0) == 0  # L = 1 needs none
    assert lib.wtconv_workspace_bytes(0, 1, 2, 8, 8, 3, 3, 1, 0, 0) == 0  # whole-plane path needs none
    assert lib.wtconv_workspace_bytes(0, 1, 2, 100, 100, 4, 2, 1, 0, 0) == 0  # invalid -> 0
    assert lib.wtconv_workspace_bytes(0, 1, 2, 100, 100, 3, 2, 1, 1, 1) == 0  # pitch < C -> 0
    small = lib.wtconv_workspace_bytes(1, 2, 3, 74, 140, 5, 3, 1, 0, 0)
    big = lib.wtconv_workspace_bytes(1, 2, 3, 148, 280, 5, 3, 1, 0, 0)
    assert 0 < small < big and small % 256 == 0
    # channels-last on the tiled path adds planar copies of x and y; the channel pitch does not change it
    assert lib.wtconv_workspace_bytes(1, 2, 3, 74, 140, 5, 3, 1, 1, 16) == lib.wtconv_workspace_bytes(
        1, 2, 3, 74, 140, 5, 3, 1, 1, 0
    )
    assert lib.wtconv_workspace_bytes(1, 2, 3, 74, 140, 5, 3, 1, 1, 0) > small


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
@pytest.mark.parametrize(
    "b,c,pitch,h,w,k,levels,stride",
    [
        (2, 3, 8, 37, 70, 5, 3, 1),  # whole-plane path, kHWC8-style padding
        (1, 5, 16, 67, 130, 3, 4, 1),  # tiled path, kHWC16-style padding
        (2, 6, 8, 130, 67, 7, 2, 2),  # tiled path, strided
        (3, 8, 8, 20, 21, 5, 2, 3),  # whole-plane path, pitch = C, strided (channels-last cluster mode)
        (2, 16, 24, 37, 70, 5, 3, 1),  # whole-plane path, cluster mode with a padded pitch
        (2, 32, 40, 7, 7, 5, 2, 1),  # fixed geometry, a plane per lane
        (2, 8, 16, 14, 14, 5, 3, 1),  # fixed geometry, planes in groups of lanes
        (1, 4, 12, 28, 28, 5, 4, 1),  # fixed geometry, 8-byte channel vectors (fp16, bf16)
    ],
)
def test_padded_channel_pitch(kernels, dtype_name, b, c, pitch, h, w, k, levels, stride):
    """NHWC with channelPitch > C (TensorRT's padded channels-last formats): padding channels of the input
    hold NaN (never read: the result would be NaN) and those of the output a sentinel that must come back as zeros
    (a consumer reading whole 8- or 16-channel vectors must not meet stale values); nothing is written past the
    workspace asked for (_run_channels_last_padded checks all three)."""
    dtype = DTYPE_NAMES[dtype_name]
    out, expected, _ = _run_channels_last_padded(kernels, dtype, b, c, pitch, h, w, k, levels, stride, 31 + c)
    err = rel_error(out, expected)
    bound = 1e-6 if dtype == torch.float32 else 8 * UNIT_ROUNDOFF[dtype]
    assert err <= bound, f"{dtype_name} pitch {pitch}: relative error {err:.3e} > {bound:.1e}"


@pytest.mark.parametrize("shape,k,levels,stride", [((2, 16, 56, 56), 5, 5, 1), ((1, 8, 100, 90), 3, 3, 2)])
def test_channels_last_custom_op_and_module(kernels, shape, k, levels, stride):
    """The custom op and FusedWTConv2d read a channels-last input in place and return channels-last; the
    module's eager fast path and the custom op give bit-identical results (the same kernels); both match the
    spec; a channels-last input is not copied (the call allocates the output and, on the tiled path, the
    workspace: nothing else, per PyTorch's allocator statistics)."""
    from wtconv_torch.fused_module import FusedWTConv2d
    from wtconv_torch.ops import fused_wtconv2d

    cuda_kernels.register()
    dev = torch.device("cuda")
    layer = random_wtconv2d(shape[1], k, levels, stride, 5)
    module = FusedWTConv2d.from_wtconv(layer).to(dev)
    w = module.base_weight, module.base_bias, module.wavelet_weight
    x = torch.randn(shape, device=dev).contiguous(memory_format=torch.channels_last)
    expected = fused_wtconv2d_spec(
        x.double(), *fold_wtconv(layer, torch.float64).tensors(device=dev), k, levels, stride
    )
    with torch.no_grad():
        by_module = module(x)
        by_op = fused_wtconv2d(x, *w, k, levels, stride)
    for y in (by_module, by_op):
        assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
        assert rel_error(y, expected) <= 1e-6
    assert torch.equal(by_module, by_op)
    # NCHW may run on another kernel than channels-last (the fixed-geometry kernels' dispatch depends on the
    # layout, docs/design.md §3.2), which sums in another order: the same function, not the same bits.
    nchw = module(x.contiguous())
    assert nchw.is_contiguous() and rel_error(nchw, expected) <= 1e-6
    expected_allocations = 1 + (cuda_kernels.workspace_bytes(x, k, levels, stride) > 0)
    for call in (lambda: module(x), lambda: fused_wtconv2d(x, *w, k, levels, stride)):
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        with torch.no_grad():
            call()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == expected_allocations


def test_module_fast_path_and_cuda_graph(kernels):
    """FusedWTConv2d's eager path (launches without the dispatcher) captures and replays in a CUDA graph."""
    from wtconv_torch.fused_module import FusedWTConv2d

    cuda_kernels.register()
    dev = torch.device("cuda")
    layer = random_wtconv2d(96, 5, 5, 1, 9)
    module = FusedWTConv2d.from_wtconv(layer).to(dev)
    static_x = torch.randn(1, 96, 56, 56, device=dev).contiguous(memory_format=torch.channels_last)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        module(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = module(static_x)
    f64 = fold_wtconv(layer, torch.float64).tensors(device=dev)
    for _ in range(2):
        static_x.copy_(torch.randn_like(static_x))
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(static_y, fused_wtconv2d_spec(static_x.double(), *f64, 5, 5, 1)) <= 1e-6


# ---- channels-last on the tiled path (planes above 64x64): transposes around the planar pipeline, in chunks ----

NCHW, NHWC = 0, 1
ALIGN = 256
# The documented cap of one channels-last chunk (plugin/kernels/wtconvKernel.cu, kChannelsLastChunkBytes): the
# planar copies of x and y of the chunk's batch items and their LL / D planes; at least one item per chunk.
CHANNELS_LAST_CHUNK_BYTES = 64 << 20
ELEMENT_BYTES = {0: 4, 1: 2, 2: 2}


def _align(v):
    return (v + ALIGN - 1) // ALIGN * ALIGN


def _level_grids(h, w, levels):
    """(h_l, w_l) for l = 1 .. levels - 1 (the deep levels whose LL and D planes live in the workspace)."""
    grids = []
    for _ in range(1, levels):
        h, w = (h + 1) // 2, (w + 1) // 2
        grids.append((h, w))
    return grids


def _nchw_workspace(b, c, h, w, levels):
    """The planar workspace: LL_l and D_l, (B*C, h_l, w_l) fp32 each, at 256-byte boundaries."""
    return sum(2 * _align(b * c * hl * wl * 4) for hl, wl in _level_grids(h, w, levels))


def _channels_last_item_bytes(dtype, c, h, w, levels, stride):
    """Workspace bytes one batch item needs on the channels-last tiled path: planar x and y, LL and D planes."""
    ho, wo = (h + stride - 1) // stride, (w + stride - 1) // stride
    io = c * (h * w + ho * wo) * ELEMENT_BYTES[dtype]
    return io + sum(2 * c * hl * wl * 4 for hl, wl in _level_grids(h, w, levels))


@pytest.fixture(scope="module")
def kernels_host(require_kernels_library):
    """The C API library without a device: its size query is host code."""
    return cuda_kernels.load_library()


def test_channels_last_workspace_is_bounded_and_monotone(kernels_host):
    """Tiled path (planes above 64x64): NCHW keeps its LL / D workspace; channels-last holds at least one batch
    item's planar copies and planes, the whole batch when it fits the chunk cap, and never more than the cap (or
    one item) plus the regions' alignment, whatever B. The size never decreases as B, H or W grow: TensorRT
    allocates it for a profile's largest shape and runs every smaller shape of the profile in it."""
    lib = kernels_host
    k = 5
    for dtype, c, levels, stride in [(0, 6, 3, 1), (1, 64, 2, 2), (2, 3, 1, 1), (1, 96, 5, 1)]:
        batches, sizes = (1, 2, 3, 5, 8, 13, 40, 200), (65, 100, 129, 255, 515, 1030)
        table = {}
        for b, h, w in itertools.product(batches, sizes, sizes):
            nchw = lib.wtconv_workspace_bytes(dtype, b, c, h, w, k, levels, stride, NCHW, 0)
            nhwc = lib.wtconv_workspace_bytes(dtype, b, c, h, w, k, levels, stride, NHWC, 0)
            where = f"dtype {dtype} {b}x{c}x{h}x{w} L={levels} s={stride}"
            assert nchw == _nchw_workspace(b, c, h, w, levels), where
            assert lib.wtconv_workspace_bytes(dtype, b, c, h, w, k, levels, stride, NHWC, c + 13) == nhwc, where
            item = _channels_last_item_bytes(dtype, c, h, w, levels, stride)
            slack = 2 * levels * ALIGN + ALIGN  # the regions' alignment and the rounded total
            assert nhwc >= (b * item if b * item <= CHANNELS_LAST_CHUNK_BYTES else item), where
            assert nhwc <= max(item, CHANNELS_LAST_CHUNK_BYTES) + slack, where
            table[b, h, w] = nhwc
        for (b, h, w), nhwc in table.items():
            for i, values in enumerate((batches, sizes, sizes)):
                key = [b, h, w]
                position = values.index(key[i])
                if position + 1 < len(values):
                    key[i] = values[position + 1]
                    assert table[tuple(key)] >= nhwc, f"dtype {dtype} L={levels}: {(b, h, w)} -> {tuple(key)}"


def _run_channels_last_padded(kernels, dtype, b, c, pitch, h, w, k, levels, stride, seed):
    """One launch on NHWC tensors with channel pitch `pitch`: input padding channels NaN (never read), output
    padding channels a sentinel (written as zeros), the workspace exactly the size the library asks for with a
    guard band after it (never written). Returns (output as NCHW view, float64 spec, workspace bytes)."""
    dev = torch.device("cuda")
    layer = random_wtconv2d(c, k, levels, stride, seed)
    folded = fold_wtconv(layer)
    bw, bb, ww = folded.tensors(device=dev, dtype=torch.float32)
    ho, wo = (h + stride - 1) // stride, (w + stride - 1) // stride
    gen = torch.Generator(device=dev).manual_seed(seed + 1)
    xp = torch.full((b, h, w, pitch), float("nan"), dtype=dtype, device=dev)
    xp[..., :c] = torch.randn((b, h, w, c), generator=gen, device=dev).to(dtype)
    yp = torch.full((b, ho, wo, pitch), 7.0, dtype=dtype, device=dev)
    yp[..., :c] = float("nan")
    code_dtype = cuda_kernels.DTYPES[dtype]
    need = kernels.wtconv_workspace_bytes(code_dtype, b, c, h, w, k, levels, stride, NHWC, pitch)
    guard = 4096
    ws = torch.full((need + guard,), 0xA5, dtype=torch.uint8, device=dev)
    message = ctypes.create_string_buffer(256)
    code = kernels.wtconv_forward(
        code_dtype,
        b,
        c,
        h,
        w,
        k,
        levels,
        stride,
        NHWC,
        pitch,
        xp.data_ptr(),
        yp.data_ptr(),
        bw.data_ptr(),
        bb.data_ptr(),
        ww.data_ptr(),
        ws.data_ptr(),
        need,
        torch.cuda.current_stream().cuda_stream,
        message,
        len(message),
    )
    torch.cuda.synchronize()
    assert code == 0, message.value.decode()
    assert (ws[need:] == 0xA5).all(), f"seed {seed}: written past the {need} workspace bytes asked for"
    assert (yp[..., c:] == 0).all(), f"seed {seed}: the padding channels of the output are not zeros"
    out = yp[..., :c].permute(0, 3, 1, 2)
    assert not torch.isnan(out).any(), f"seed {seed}: NaN in the output: unwritten, or an input padding channel read"
    x = xp[..., :c].permute(0, 3, 1, 2).double()
    expected = fused_wtconv2d_spec(x, *fold_wtconv(layer, torch.float64).tensors(device=dev), k, levels, stride)
    return out, expected, need


CHANNELS_LAST_TILED = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in (
        (2, 3, 67, 130, 3, 1, 1),  # L = 1: the output pass alone between the transposes; odd sizes
        (1, 5, 129, 97, 5, 3, 2),  # stride 2, odd sizes
        (2, 130, 70, 66, 3, 2, 1),  # C = 130: transpose tiles of 32 channels, 4 full + 2
        (1, 64, 67, 65, 3, 2, 1),  # C = 64: one 64-channel tile
        (2, 40, 66, 71, 5, 1, 2),  # C = 40: a 64-channel tile with 24 idle channels, stride 2
        (1, 4, 75, 90, 9, 4, 2),  # runtime k, stride 2
        (3, 2, 300, 17, 7, 8, 1),  # L = 8, a thin plane (5100 pixels: a partial last pixel tile)
        (1, 3, 65, 65, 5, 2, 3),  # the smallest tiled plane, stride 3
    )
]


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", CHANNELS_LAST_TILED)
def test_channels_last_tiled_path(kernels, error_report, dtype_name, b, c, h, w, k, levels, stride):
    """Planes above 64x64 in channels-last (PyTorch's channels_last, pitch = C) and NCHW match the spec."""
    seed = torch.randint(0, 2**31 - 1, ()).item()
    check_case(b, c, h, w, k, levels, stride, DTYPE_NAMES[dtype_name], seed, error_report)


CHANNELS_LAST_CHUNKED = [
    pytest.param(*case, id="{}x{}p{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in (
        # batch items per chunk (64 MiB cap): fp32 4, fp16/bf16 7 -> chunks 4+4+1 and 7+2
        (9, 6, 8, 515, 515, 5, 2, 1),
        # L = 1, pitch = C, odd sizes: fp32 12 per chunk, fp16/bf16 25 -> 12+12+3 and 25+2
        (27, 5, 5, 401, 333, 3, 1, 1),
        # stride 2, L = 3, kHWC16-style pitch: fp32 11, fp16/bf16 17 -> 11+8 and 17+2
        (19, 10, 16, 257, 300, 7, 3, 2),
        # 64-channel transpose tiles, padded pitch: fp32 3 per chunk, fp16/bf16 5 -> 3+3+1 and 5+2
        (7, 64, 72, 257, 129, 3, 2, 1),
        # one item above the cap: a chunk per item
        (2, 3, 4, 2300, 2100, 3, 2, 1),
    )
]


@pytest.mark.parametrize("dtype_name", list(DTYPE_NAMES))
@pytest.mark.parametrize("b,c,pitch,h,w,k,levels,stride", CHANNELS_LAST_CHUNKED)
def test_channels_last_tiled_path_in_chunks(kernels, dtype_name, b, c, pitch, h, w, k, levels, stride):
    """Channels-last batches whose planar copies do not fit the workspace run in several chunks (the last one
    partial): every item matches the spec, input padding channels are not read, output padding channels are zeros,
    and nothing is written past the workspace size the library reports."""
    dtype = DTYPE_NAMES[dtype_name]
    seed = torch.randint(0, 2**31 - 1, ()).item()
    out, expected, need = _run_channels_last_padded(kernels, dtype, b, c, pitch, h, w, k, levels, stride, seed)
    whole_batch = b * _channels_last_item_bytes(cuda_kernels.DTYPES[dtype], c, h, w, levels, stride)
    assert need < whole_batch, f"the workspace ({need} bytes) holds the whole batch: this case runs in one chunk"
    for item in range(b):
        err = rel_error(out[item], expected[item])
        bound = 1e-6 if dtype == torch.float32 else 8 * UNIT_ROUNDOFF[dtype]
        assert err <= bound, f"seed {seed}, {dtype_name}, batch item {item}: relative error {err:.3e} > {bound:.1e}"


# ---- shared memory: every launch plan fits the 99 KB per block of compute capability 8.6, 8.9 and 12.x ----

RTX_SHARED_BYTES = 101_376  # opt-in shared memory per block of compute capability 8.6, 8.9, 12.x (99 KB)
CONTRACT_K = (1, 3, 5, 7, 9, 11, 13, 15)
CONTRACT_LEVELS = range(1, 9)


def _launch_info(lib, dtype, b, c, h, w, k, levels, stride, layout, pitch=0):
    """(whole-plane path?, most dynamic shared memory per block) of a launch, from the library's plan."""
    fn = lib.wtconv_launch_info
    i32, i64 = ctypes.c_int32, ctypes.c_int64
    fn.argtypes = [
        i32,
        i64,
        i64,
        i64,
        i64,
        i32,
        i32,
        i32,
        i32,
        i64,
        ctypes.POINTER(i32),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    fn.restype = ctypes.c_int
    whole, shared = i32(), ctypes.c_size_t()
    code = fn(dtype, b, c, h, w, k, levels, stride, layout, pitch, ctypes.byref(whole), ctypes.byref(shared))
    assert code == 0, f"wtconv_launch_info returned {code}"
    return bool(whole.value), shared.value


def test_every_plan_fits_the_smallest_shared_memory_of_our_targets(kernels_host):
    """The plan (whole-plane or tiled path) is chosen from the sizes alone, so an engine built on one GPU runs on
    another: every plan over the contract's k and levels, at the plane sizes around the whole-plane limit (64 x 64)
    and above it, in both layouts, must fit 99 KB per block. A plan above it builds and then fails at enqueue on
    an RTX card."""
    worst = (0, None)
    for k, levels, (h, w), layout in itertools.product(
        CONTRACT_K, CONTRACT_LEVELS, [(64, 64), (63, 64), (64, 57), (33, 64), (64, 1), (65, 64), (200, 300)], (0, 1)
    ):
        for dtype, batch in ((0, 1), (1, 7), (0, 64)):
            _, shared = _launch_info(kernels_host, dtype, batch, 8, h, w, k, levels, 1, layout)
            worst = max(worst, (shared, (dtype, batch, h, w, k, levels, layout)))
    assert worst[0] <= RTX_SHARED_BYTES, f"{worst[0]} bytes of shared memory per block at {worst[1]}"


@pytest.fixture
def rtx_shared_memory(kernels):
    """Launches behave as on an RTX card (99 KB of shared memory per block) for the test, then as before."""
    setter = kernels.wtconv_set_shared_memory_limit_for_testing
    setter.argtypes = [ctypes.c_size_t]
    setter.restype = None
    setter(RTX_SHARED_BYTES)
    yield setter
    setter(0)


def test_the_shared_memory_hook_limits_launches(kernels, rtx_shared_memory):
    """Not vacuous: with the limit set below a plan's shared memory, its launch fails as it would on such a GPU."""
    whole, shared = _launch_info(kernels, 0, 1, 2, 64, 64, 5, 4, 1, NCHW)
    assert whole and shared > 48 * 1024
    rtx_shared_memory(shared - 1)
    layer = random_wtconv2d(2, 5, 4, 1, 3)
    x = torch.randn(1, 2, 64, 64, device="cuda")
    with pytest.raises(RuntimeError, match="cudaErrorInvalidValue"):
        run_kernels(x, fold_wtconv(layer))


@pytest.mark.parametrize("k", CONTRACT_K)
def test_kernels_run_with_the_shared_memory_of_an_rtx_card(kernels, rtx_shared_memory, error_report, k):
    """With the launches limited to 99 KB per block, every level count at this k runs and matches the spec, at the
    largest whole-plane planes (64 x 64; 8 channels, so channels-last runs the cluster kernels) and a plane just
    above them (tiled path), NCHW and channels-last."""
    for levels in CONTRACT_LEVELS:
        for h, w in ((64, 64), (65, 64)):
            seed = torch.randint(0, 2**31 - 1, ()).item()
            check_case(1, 8, h, w, k, levels, 1, torch.float32, seed, error_report)


def test_two_copies_of_the_library_in_one_process_each_launch(kernels, tmp_path):
    """Two builds of the library loaded side by side (benchmarks/ab_kernels.py does this; so does a process holding
    the package's library and another copy) both launch every path: each keeps its own per-kernel shared-memory
    record because the library exports its C API only (plugin/kernels/exports/wtconv_kernels_capi.map). The
    cases need more than 48 KB of shared memory per block (raised per kernel), and the two copies alternate."""
    import shutil

    source = cuda_kernels.library_path()
    libs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        copy = tmp_path / name / source.name
        shutil.copyfile(source, copy)
        libs.append(cuda_kernels.open_library(copy))
    cases = [  # (B, C, H, W, k, levels, layout): whole plane, its cluster mode (channels-last), tiled
        (1, 2, 64, 64, 5, 4, NCHW),
        (1, 8, 64, 64, 5, 4, cuda_kernels.NHWC),
        (1, 2, 160, 96, 7, 2, NCHW),
    ]
    for b, c, h, w, k, levels, layout in cases:
        whole, shared = _launch_info(kernels, 0, b, c, h, w, k, levels, 1, layout)
        assert shared > 48 * 1024, (h, w, k, levels, shared)
        layer = random_wtconv2d(c, k, levels, 1, h + k)
        folded = fold_wtconv(layer)
        weights = folded.tensors(device="cuda", dtype=torch.float32)
        x = torch.randn(b, c, h, w, device="cuda").contiguous(memory_format=cuda_kernels.memory_format(layout))
        expected = fused_wtconv2d_spec(
            x.double(), *fold_wtconv(layer, dtype=torch.float64).tensors(device="cuda"), k, levels, 1
        )
        outs = []
        for lib in (*libs, *libs):
            plan = cuda_kernels.Plan(lib, 0, x.shape, k, levels, 1, layout, tuple(t.data_ptr() for t in weights))
            workspace = torch.empty(max(plan.need, 1), dtype=torch.uint8, device="cuda")
            out = torch.full_like(x, float("nan"))
            plan.forward(x.data_ptr(), out.data_ptr(), workspace.data_ptr(), torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            outs.append(out)
        for out in outs:
            assert rel_error(out, expected) <= 1e-6, (b, c, h, w, k, levels, layout, whole)
            assert torch.equal(out, outs[0])
