"""The pure parts of the model profile (benchmarks/model_profile.py) on the CPU: the kernel classifier against
real kernel names, the trace reading and per-image sums on a hand-built trace with totals worked out by hand, what
runs around our kernels, the graph-break summary on a real torch._dynamo.explain of a small WTConvNeXt, the
markdown tables, and the command line's refusals (the measurements themselves need a CUDA GPU)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import model_profile as mp

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------------------
# the classifier


def our_kernel_names() -> list[str]:
    """The __global__ functions of plugin/kernels, read from the source."""
    names = set()
    for path in sorted((ROOT / "plugin" / "kernels").glob("*.cu*")):
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(", text))
    return sorted(names)


def test_every_kernel_of_ours_is_recognised_demangled_and_mangled():
    names = our_kernel_names()
    assert {"smallPlaneKernel", "levelKernel", "poolKernel", "transposeKernel"} <= set(names), names
    for name in names:
        demangled = f"void wtconv::detail::{name}<__half, 5, true>(wtconv::detail::Args)"
        mangled = f"_ZN6wtconv6detail{len(name)}{name}I6__halfLi5ELb1EEEvNS0_4ArgsE"
        assert mp.classify_kernel(demangled) == mp.WTCONV, demangled
        assert mp.classify_kernel(mangled) == mp.WTCONV, mangled


# Kernel names as CUDA profilers print them: PyTorch's own kernels (aten/src/ATen/native/cuda), cuDNN's, cuBLAS's and
# inductor's Triton kernels. The operator is the innermost one that launched the kernel (None: not recorded).
DEPTHWISE_DIMS = [[256, 96, 56, 56], [96, 1, 7, 7], [96], [], [], [], []]
STEM_DIMS = [[256, 3, 224, 224], [96, 3, 4, 4], [96], [], [], [], []]
REAL_NAMES = [
    (
        "void conv2d_c1_k1_nhwc_kernel_specialized<__half, __half, __half, float, float, 5, 1, 8, 3, true>(float, "
        "cudnnTensorStruct, __half const*, cudnnFilterStruct, __half const*, cudnnConvolutionStruct, float)",
        None,
        None,
        mp.DEPTHWISE,
    ),
    (
        "sm50_xmma_fprop_conv2d_c1_k1_f32f32_f32_f32_nchwkcrs_nchw_tilesize10x40x8_threadsize4x4_r3s3_u1v1_xcorr_"
        "zerobeta_execute_kernel_trt",
        None,
        None,
        mp.DEPTHWISE,
    ),
    (
        "void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<0, c10::Half, float, int>("
        "at::GenericPackedTensorAccessor<c10::Half const, 4ul, at::DefaultPtrTraits, int>)",
        "aten::_conv_depthwise2d",
        [[256, 96, 56, 56], [96, 1, 7, 7], [7, 7], [96], [], [], []],
        mp.DEPTHWISE,
    ),
    # cuDNN's implicit GEMM: a depthwise convolution or a dense one, as the launching operator's shapes say
    (
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cudnn",
        "aten::cudnn_convolution",
        DEPTHWISE_DIMS,
        mp.DEPTHWISE,
    ),
    (
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cudnn",
        "aten::cudnn_convolution",
        STEM_DIMS,
        mp.OTHER_CONV,
    ),
    ("void conv2d_c1_k1_nhwc_kernel_specialized<__half>(float)", "aten::cudnn_convolution", STEM_DIMS, mp.OTHER_CONV),
    (
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cudnn",
        None,
        None,
        mp.OTHER_CONV,
    ),
    ("_5x_cudnn_ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", None, None, mp.OTHER_CONV),
    # layout conversions, inside a convolution too
    (
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float, __half, float, (bool)0, (bool)1, "
        "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, __half*)",
        "aten::cudnn_convolution",
        DEPTHWISE_DIMS,
        mp.COPY,
    ),
    (
        "void cudnn::ops::nhwcToNchwKernel<__half, __half, float, bool=1, bool=0, cudnnKernelDataType_t=0>("
        "cudnn::ops::nhwc2nchw_params_t<float>, __half const *, __half*)",
        None,
        None,
        mp.COPY,
    ),
    (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
        "operator()() const::{lambda(c10::Half)#1}>(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)",
        "aten::copy_",
        [[256, 56, 56, 96], [256, 56, 56, 96], []],
        mp.COPY,
    ),
    ("triton_poi_fused_clone_0", None, None, mp.COPY),
    ("triton_poi_fused_fused_wtconv2d_3", None, None, mp.COPY),
    ("triton_poi_fused_add_fused_wtconv2d_3", None, None, mp.TRITON),
    ("triton_per_fused_native_layer_norm_1", None, None, mp.TRITON),
    ("triton_poi_fused__to_copy_gelu_2", None, None, mp.TRITON),
    ("triton_red_fused_mean_7", None, None, mp.TRITON),
    # GEMMs: cuBLAS (nvjet on Hopper, xmma), CUTLASS
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_TNT", "aten::addmm", [[384], [50176, 96], [96, 384], [], []], mp.GEMM),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_NNN", None, None, mp.GEMM),
    (
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel_"
        "_5x_cublas",
        None,
        None,
        mp.GEMM,
    ),
    (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_16x16_64x1_tn_align8>("
        "cutlass_80_wmma_tensorop_f16_s161616gemm_f16_16x16_64x1_tn_align8::Params)",
        None,
        None,
        mp.GEMM,
    ),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", None, None, mp.GEMM),
    # normalization, elementwise, reductions
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>(int, float, "
        "c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)",
        "aten::native_layer_norm",
        [[256, 56, 56, 96], [], [96], [96], []],
        mp.NORM,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)"
        "#1}, std::array<char*, 2ul> >(int, ...)",
        "aten::gelu",
        [[256, 56, 56, 384], []],
        mp.ELEMENTWISE,
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::MeanOps<c10::Half, float, "
        "float, c10::Half>, unsigned int, c10::Half, 4, 4> >(at::native::ReduceOp<c10::Half, ...>)",
        "aten::mean",
        [[256, 768, 7, 7], [], [], []],
        mp.ELEMENTWISE,
    ),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel", None, None, mp.ELEMENTWISE),
    ("void some_library::unknownKernel<float>(float*)", None, None, mp.OTHER),
]


@pytest.mark.parametrize(("name", "op", "dims", "category"), REAL_NAMES, ids=[f"{i}" for i in range(len(REAL_NAMES))])
def test_real_kernel_names_fall_in_their_category(name, op, dims, category):
    assert mp.classify_kernel(name, op, dims) == category


def test_kernels_named_after_our_operator_or_transposes_elsewhere_are_not_ours():
    for name in (
        "triton_poi_fused_fused_wtconv2d_0",
        "void at::native::transposeKernel<float>(float*)",  # a transposeKernel outside namespace wtconv::detail
        "fast_wtconv_forward_kernel",
    ):
        assert mp.classify_kernel(name) != mp.WTCONV, name


def test_depthwise_is_told_from_the_shapes():
    assert mp.is_depthwise(DEPTHWISE_DIMS) is True
    assert mp.is_depthwise(STEM_DIMS) is False
    assert mp.is_depthwise([[8, 96, 28, 28], [192, 96, 2, 2]]) is False  # the downsampling convolution
    assert mp.is_depthwise([[8, 96, 28, 28], [192, 1, 3, 3]]) is True  # depth multiplier 2
    assert mp.is_depthwise([[8, 1, 28, 28], [1, 1, 3, 3]]) is False  # one channel: an ordinary convolution
    assert mp.is_depthwise(None) is None
    assert mp.is_depthwise([[], []]) is None


# ----------------------------------------------------------------------------------------------------------
# the trace and the sums


def kernel(name, ext, dur, ts, cat="kernel"):
    args = {"stream": 7, "correlation": 1000 + int(ts)}
    if ext is not None:
        args["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def cpu_op(name, ext, dims=None):
    args = {"External id": ext, "Record function id": 0}
    if dims is not None:
        args["Input Dims"] = dims
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 1.0, "dur": 500.0, "args": args}


OURS_NAME = "void wtconv::detail::smallPlaneKernel<__half, 5, true>(wtconv::detail::SmallArgs)"
HAND_TRACE = {
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        cpu_op("aten::cudnn_convolution", 10, DEPTHWISE_DIMS),
        cpu_op("aten::cudnn_convolution", 11, STEM_DIMS),
        cpu_op("aten::copy_", 12),
        cpu_op("aten::addmm", 13),
        cpu_op("wtconv::fused_wtconv2d", 14),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 3, "args": {"External id": 10}},
        kernel("sm90_xmma_fprop_implicit_gemm_f16f16_stem", 11, 20.0, 10),
        kernel("void cudnn::engines_precompiled::nchwToNhwcKernel<__half>(float)", 11, 4.0, 40),
        kernel(OURS_NAME, 14, 50.0, 50),  # compiled: launched through the operator
        kernel("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>(int)", 12, 6.0, 110),
        kernel("void conv2d_c1_k1_nhwc_kernel_specialized<__half>(float)", 10, 30.0, 120),
        kernel("sm90_xmma_fprop_implicit_gemm_f16f16_depthwise", 10, 10.0, 160),
        kernel("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_TNT", 13, 40.0, 180),
        kernel(OURS_NAME, None, 30.0, 230),  # eager: no operator recorded
        kernel("Memcpy DtoD (Device -> Device)", None, 2.0, 270, cat="gpu_memcpy"),
    ]
}


def test_device_events_carry_their_operator_and_category_in_start_order():
    events = mp.device_events(HAND_TRACE)
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert [(e.category, e.op, e.kind) for e in events] == [
        (mp.OTHER_CONV, "aten::cudnn_convolution", "kernel"),
        (mp.COPY, "aten::cudnn_convolution", "kernel"),
        (mp.WTCONV, "wtconv::fused_wtconv2d", "kernel"),
        (mp.COPY, "aten::copy_", "kernel"),
        (mp.DEPTHWISE, "aten::cudnn_convolution", "kernel"),
        (mp.DEPTHWISE, "aten::cudnn_convolution", "kernel"),
        (mp.GEMM, "aten::addmm", "kernel"),
        (mp.WTCONV, None, "kernel"),
        (mp.MEMCPY, None, "memcpy"),
    ]
    assert mp.operator_calls(HAND_TRACE, "wtconv::fused_wtconv2d") == 1


def test_sums_per_image_and_launches_per_forward():
    # batch 4, 2 forwards: 8 images. Worked out by hand from the durations above.
    summary = mp.summarize(mp.device_events(HAND_TRACE), images=8, forwards=2, top=3)
    us = summary["us_per_image"]
    assert us[mp.WTCONV] == pytest.approx(80 / 8)
    assert us[mp.DEPTHWISE] == pytest.approx(40 / 8)
    assert us[mp.OTHER_CONV] == pytest.approx(20 / 8)
    assert us[mp.COPY] == pytest.approx(10 / 8)
    assert us[mp.GEMM] == pytest.approx(40 / 8)
    assert us[mp.MEMCPY] == pytest.approx(2 / 8)
    assert us[mp.NORM] == us[mp.TRITON] == us[mp.OTHER] == 0
    assert summary["total_us_per_image"] == pytest.approx(192 / 8)
    assert summary["launches_per_forward"] == 8 / 2  # the memcpy is not a launch
    assert summary["category_launches_per_forward"][mp.WTCONV] == 1.0
    assert summary["category_launches_per_forward"][mp.MEMCPY] == 0
    assert [k["name"] for k in summary["top"]] == [
        OURS_NAME,
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_TNT",
        "void conv2d_c1_k1_nhwc_kernel_specialized<__half>(float)",
    ]
    ours = summary["kernels"][0]
    assert ours["name"] == OURS_NAME and ours["us_per_image"] == pytest.approx(10.0)
    assert ours["launches_per_forward"] == 1.0
    assert len(summary["kernels"]) == 8  # distinct names: our kernel twice
    assert len(summary["top"]) == 3


def event(category, name="k", stream=7):
    return mp.DeviceEvent(name=name, us=1.0, category=category, stream=stream)


def test_around_ours_counts_calls_and_the_copies_next_to_them():
    records = [
        event(mp.NORM, "layer_norm"),
        event(mp.WTCONV, "ours_a"),  # call 1: norm before, copy after
        event(mp.COPY, "copy"),
        event(mp.WTCONV, "ours_a"),  # call 2 (two kernels): copy before, gemm after
        event(mp.WTCONV, "ours_b"),
        event(mp.GEMM, "gemm"),
        event(mp.WTCONV, "ours_a", stream=9),  # call 3: alone on its stream, no neighbours
        event(mp.COPY, "copy"),  # after the gemm on stream 7: next to no call of ours
    ]
    around = mp.around_ours(records, forwards=1)
    assert around["calls_per_forward"] == 3
    assert around["kernels_per_forward"] == 4
    assert around["copy_before_per_forward"] == 1
    assert around["copy_after_per_forward"] == 1
    assert {(n["kernel"], n["category"], n["per_forward"]) for n in around["before"]} == {
        ("layer_norm", mp.NORM, 1),
        ("copy", mp.COPY, 1),
    }
    assert {(n["kernel"], n["category"]) for n in around["after"]} == {("copy", mp.COPY), ("gemm", mp.GEMM)}
    halved = mp.around_ours(records, forwards=2)
    assert halved["calls_per_forward"] == 1.5 and halved["kernels_per_forward"] == 2


def test_a_real_trace_is_read():
    """torch.profiler's own export, CPU activity only (the kernels need a GPU): the trace reader finds our operator's
    calls (on the CPU the fused layers go through the custom operator) and the convolutions' recorded shapes."""
    trace = mp.profile_trace(torch, small_wtconvnext(), torch.randn(2, 3, 32, 32), forwards=2, cuda=False)
    assert mp.operator_calls(trace, mp.OUR_OPERATOR) == 2 * 3
    assert mp.device_events(trace) == []
    convs = [e for e in mp.trace_events(trace) if e.get("cat") == "cpu_op" and e["name"] == "aten::convolution"]
    assert convs and all("External id" in e["args"] for e in convs)
    assert [2, 3, 32, 32] in [e["args"]["Input Dims"][0] for e in convs]  # the stem
    assert mp.is_depthwise(convs[0]["args"]["Input Dims"]) is False


# ----------------------------------------------------------------------------------------------------------
# graph breaks: a real torch._dynamo.explain of a small WTConvNeXt on the CPU (the custom operator's CPU kernel)


def small_wtconvnext():
    from wtconv_torch.fused_module import fuse_wtconv_layers
    from wtconv_torch.wtconvnext import WTConvNeXt

    return fuse_wtconv_layers(WTConvNeXt(depths=(1, 2), dims=(8, 16), wt_levels=2, num_classes=5).eval())


@pytest.mark.parametrize("layout", mp.LAYOUTS)
def test_graph_summary_of_a_small_wtconvnext(layout):
    model, x = small_wtconvnext(), torch.randn(1, 3, 32, 32)
    if layout == "channels_last":
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        summary = mp.graph_summary(torch._dynamo.explain(model)(x))
    assert summary["graph_count"] == 1 and summary["graph_break_count"] == 0, summary
    assert summary["break_reasons"] == []
    assert summary["our_op_calls"] == 3  # one per block
    assert summary["our_op_outputs_in_input_layout"] == 3  # the fake implementation keeps the layout
    if layout == "channels_last":
        assert summary["our_op_inputs_channels_last"] == 3


class BrokenBetween(torch.nn.Module):
    """Two fused layers with a graph break between them."""

    def __init__(self):
        super().__init__()
        model = small_wtconvnext()
        self.first, self.second = model.stages[0].blocks[0].conv_dw, model.stages[1].blocks[0].conv_dw
        self.widen = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x):
        x = self.first(x)
        torch._dynamo.graph_break()
        return self.second(self.widen(x))


def test_graph_summary_reports_a_break_and_where_it_is():
    with torch.no_grad():
        summary = mp.graph_summary(torch._dynamo.explain(BrokenBetween().eval())(torch.randn(1, 8, 8, 8)))
    assert summary["graph_count"] == 2 and summary["graph_break_count"] == 1, summary
    assert len(summary["break_reasons"]) == 1 and "test_model_profile.py:" in summary["break_reasons"][0]
    assert summary["our_op_calls"] == 2
    assert summary["our_op_inputs_channels_last"] == 0  # NCHW-contiguous input, 1x1 convolution's NCHW output
    assert summary["our_op_outputs_in_input_layout"] == 2


# ----------------------------------------------------------------------------------------------------------
# the markdown tables


def profile_row(model, mode, layout, us, launches):
    return dict(
        model=model,
        mode=mode,
        layout=layout,
        batch=256,
        us_per_image=us,
        category_launches_per_forward=launches,
        total_us_per_image=sum(us.values()),
        launches_per_forward=sum(launches.values()),
        top=[
            dict(
                name="void a|b<int>(int)", category=mp.GEMM, op="aten::addmm", us_per_image=1.25, launches_per_forward=2
            )
        ],
        our_op_calls_per_forward=0,
    )


def hand_result():
    ours = profile_row(mp.OURS, "eager", "nchw", {mp.WTCONV: 2.0, mp.GEMM: 1.0}, {mp.WTCONV: 18, mp.GEMM: 36})
    ours["around_ours"] = dict(
        calls_per_forward=18,
        kernels_per_forward=18,
        copy_before_per_forward=0,
        copy_after_per_forward=0,
        before=[dict(kernel="layer_norm", category=mp.NORM, per_forward=18)],
        after=[],
    )
    conv = profile_row(mp.CONVNEXT, "eager", "nchw", {mp.DEPTHWISE: 1.0, mp.GEMM: 1.0}, {mp.DEPTHWISE: 18, mp.GEMM: 36})
    layers = [
        dict(model=mp.OURS, layout="nchw", stage=0, index=0, shape=[1, 96, 56, 56], us=10.0),
        dict(model=mp.OURS, layout="nchw", stage=0, index=1, shape=[1, 96, 56, 56], us=20.0),
        dict(model=mp.OURS, layout="nchw", stage=1, index=2, shape=[1, 192, 28, 28], us=30.0),
        dict(model=mp.CONVNEXT, layout="nchw", stage=0, index=0, shape=[1, 96, 56, 56], us=5.0),
        dict(model=mp.CONVNEXT, layout="nchw", stage=0, index=1, shape=[1, 96, 56, 56], us=5.0),
        dict(model=mp.CONVNEXT, layout="nchw", stage=1, index=2, shape=[1, 192, 28, 28], us=15.0),
    ]
    return dict(
        meta=dict(gpu="Test GPU", torch="2.x", command="python -m benchmarks.profile_models --out OUT", date="today"),
        failures=["latency: RuntimeError: boom"],
        compile=[
            dict(
                model=mp.OURS,
                layout="nchw",
                graph_count=1,
                graph_break_count=0,
                op_count=99,
                break_reasons=[],
                our_op_calls=18,
                our_op_inputs_channels_last=17,
                our_op_outputs_in_input_layout=18,
            ),
            dict(model=mp.OURS, layout="channels_last", error="RuntimeError: explain failed"),
        ],
        profile=[ours, conv],
        throughput=[
            dict(model=mp.OURS, mode="eager", layout="nchw", dtype="fp16", batch=256, ms=10.0, img_per_s=900.0),
            dict(model=mp.CONVNEXT, mode="eager", layout="nchw", dtype="fp16", batch=256, ms=10.0, img_per_s=1200.0),
            dict(model=mp.OURS, mode="eager", layout="nchw", dtype="fp32", batch=64, error="OutOfMemoryError: oom"),
            dict(model=mp.CONVNEXT, mode="eager", layout="nchw", dtype="fp32", batch=64, ms=1.0, img_per_s=64000.0),
        ],
        latency=dict(
            graphs=[
                dict(model=mp.OURS, layout="nchw", batch=1, ms=2.0, launches_per_forward=120),
                dict(model=mp.CONVNEXT, layout="nchw", batch=1, ms=1.0, launches_per_forward=100),
            ],
            layers=layers,
        ),
    )


def test_markdown_tables_carry_the_numbers_and_ratios():
    text = mp.markdown(hand_result())
    assert "— Test GPU" in text and "`python -m benchmarks.profile_models --out OUT`" in text
    assert "- latency: RuntimeError: boom" in text
    assert "| nchw | 1 | 0 | 18 | 17 | 18 | none |" in text
    assert "| channels_last | failed: RuntimeError: explain failed |" in text
    assert "| wtconv (ours) | 2.00 | 18 | – | – | – |" in text
    assert "| depthwise conv | – | – | 1.00 | 18 | – |" in text
    assert "| gemm | 1.00 | 36 | 1.00 | 36 | 1.00× |" in text
    assert "| **total** | **3.00** | 54 | **2.00** | 54 | **1.50×** |" in text
    assert "normalization |" not in text.split("## Top")[0]  # categories without time are left out
    assert "a layout copy right before 0 and right after 0" in text
    assert "| `a\\|b<int>(int)` | gemm | aten::addmm | 1.25 | 2 |" in text  # "void " dropped, "|" escaped
    assert "| eager | fp16 | 256 | nchw | 900 | 1,200 | 0.75× |" in text
    assert "| eager | fp32 | 64 | nchw | failed | 64,000 | – |" in text
    assert "- failed: wtconvnext_t_ours eager fp32 nchw: OutOfMemoryError: oom" in text
    assert "| nchw | 1 | 2.000 | 120 | 1.000 | 100 | 2.00× |" in text
    assert "| nchw | 0 | 1×96×56×56 | 2 / 2 | 30.0 | 10.0 | 3.00× |" in text
    assert "| nchw | 1 | 1×192×28×28 | 1 / 1 | 30.0 | 15.0 | 2.00× |" in text
    assert "| nchw | total | all | 3 / 3 | 60.0 | 25.0 | 2.40× |" in text


def test_markdown_of_a_partial_result():
    result = hand_result()
    for part in ("compile", "profile", "latency"):
        del result[part]
    text = mp.markdown(result)
    assert "## Throughput" in text
    assert "## Graph breaks" not in text and "## CUDA time" not in text and "## Latency" not in text


# ----------------------------------------------------------------------------------------------------------
# the command line


def tool(*args, env=None):
    """The command line in a child process that finds this checkout's package (as tools/device_kernels.sh runs it)."""
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_models", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_help_names_the_options():
    result = tool("--help")
    assert result.returncode == 0, result.stderr
    for option in ("--out", "--parts", "--batch", "--quick"):
        assert option in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--batch", "0"], "batch must be a whole number >= 1, got 0"),
        (["--parts", "profile", "speed"], "parts must be one or more of compile, profile, throughput, latency"),
        ([], "needs a CUDA GPU"),
    ],
)
def test_refusals_are_one_line(tmp_path, args, expected):
    # No GPU visible (also on a machine with one), so the run stops at its checks.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    result = tool("--out", str(tmp_path / "out"), *args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
