"""The ONNX Runtime custom-op library's CUDA op (plugin/onnxruntime/wtconvOrtCudaOp.cpp) on onnxruntime-gpu's CUDA
execution provider. Skipped with the reason (tests/conftest.py's ort_cuda) without onnxruntime-gpu, a GPU, or a
library built with CUDA.

Oracle as for the CPU op (tests/test_ort_cpu.py) and the kernels (tests/test_kernels_gpu.py): the spec in float64
on the float64-folded weights; fp32 within 1e-6 relative (TF32 off in the CUDA EP: `use_tf32=0`), fp16 within 1.0x
the error of the PyTorch reference module run in fp16 on the GPU. Each session is checked to have placed the node on
the CUDA EP (ONNX Runtime's profile names the provider of every node), so a silent fall-back to the CPU op fails.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from test_ort_cpu import check_against_spec, check_threads_agree, node_model, rel_error  # noqa: E402

from wtconv_export import contract  # noqa: E402
from wtconv_export.folding import fold_wtconv  # noqa: E402
from wtconv_export.fused_spec import fused_wtconv2d_spec  # noqa: E402
from wtconv_export.wtconv2d import random_wtconv2d  # noqa: E402
from wtconv_ort.session import cuda_provider, make_ort_session  # noqa: E402


def cuda_session(library, model, profile=False):
    options = ort.SessionOptions()
    options.enable_profiling = profile
    return make_ort_session(model, [cuda_provider(), "CPUExecutionProvider"], options, op="native", library=library)


def providers_of_wtconv_nodes(session) -> set:
    """Which execution providers ran the WTConv2d nodes, from the session's profile (ends profiling)."""
    with open(session.end_profiling()) as f:
        events = json.load(f)
    return {
        e["args"].get("provider")
        for e in events
        if e.get("cat") == "Node" and e.get("args", {}).get("op_name") == contract.OP_TYPE
    }


def check_cuda_layer(library, b, c, h, w, k, levels, stride, dtype, seed, report):
    def run(model, x):
        session = cuda_session(library, model, profile=True)
        y = session.run(None, {"x": x})[0]
        assert providers_of_wtconv_nodes(session) == {"CUDAExecutionProvider"}
        return y

    check_against_spec(run, b, c, h, w, k, levels, stride, dtype, seed, report, label="CUDA", device="cuda")


MATRIX = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in itertools.chain(
        ((2, 3, 37, 70, k, 2, 1) for k in (1, 3, 5, 7, 9, 11, 13, 15)),
        ((1, 2, 45, 29, k, lv, 1) for k in (3, 5, 7) for lv in range(1, contract.MAX_WT_LEVELS + 1)),
        ((3, 2, 67, 130, k, lv, s) for k in (3, 5, 7) for lv in (1, 4) for s in (2, 3)),
        ((2, 3, 1, 1, 5, 3, 1), (2, 1, 1, 9, 3, 5, 2), (1, 2, 7, 1, 7, 8, 1), (4, 2, 5, 3, 5, 8, 2)),
        ((64, c, hw, hw, 5, lv, 1) for c, hw, lv in ((96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2))),
    )
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", MATRIX)
def test_matches_spec_on_cuda(ort_cuda, error_report, dtype, b, c, h, w, k, levels, stride):
    check_cuda_layer(
        ort_cuda, b, c, h, w, k, levels, stride, dtype, seed=k * 100 + levels * 10 + stride, report=error_report
    )


def test_inputs_and_outputs_bound_on_the_gpu(ort_cuda):
    """I/O binding with both tensors in device memory (no host copies): the same bits as a plain run."""
    folded = fold_wtconv(random_wtconv2d(96, 5, 5, 1, 1))
    session = cuda_session(ort_cuda, node_model(folded, np.float16))
    x = np.random.default_rng(0).standard_normal((8, 96, 56, 56)).astype(np.float16)
    plain = session.run(None, {"x": x})[0]
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    out = ort.OrtValue.ortvalue_from_shape_and_type(plain.shape, np.float16, "cuda", 0)
    binding.bind_ortvalue_output("y", out)
    session.run_with_iobinding(binding)
    assert out.device_name() == "cuda"
    assert np.array_equal(out.numpy(), plain)


def test_workspace_grows_and_shrinking_inputs_still_run(ort_cuda):
    """One session, batches 1 -> 64 -> 1 -> 17 (the per-kernel workspace grows once it is too small): every run
    agrees with the spec."""
    layer = random_wtconv2d(192, 5, 4, 1, 2)
    session = cuda_session(ort_cuda, node_model(fold_wtconv(layer)))
    folded64 = fold_wtconv(layer, dtype=torch.float64).tensors()
    for b in (1, 64, 1, 17):
        x = torch.randn((b, 192, 28, 29), generator=torch.Generator().manual_seed(b))
        y = session.run(None, {"x": x.numpy()})[0]
        expected = fused_wtconv2d_spec(x.double(), *folded64, 5, 4, 1).numpy()
        assert rel_error(y, expected) <= 1e-6, b


def test_four_threads_running_one_session_agree_on_cuda(ort_cuda):
    """Four threads run one CUDA session at once (each run on its own stream, one kernel instance per node, one
    workspace): each output equals, bit for bit, that input's output from a session used by one thread."""
    folded = fold_wtconv(random_wtconv2d(96, 5, 5, 1, 3))
    shared = cuda_session(ort_cuda, node_model(folded))
    alone = cuda_session(ort_cuda, node_model(folded))
    check_threads_agree(shared, alone, [(16, 96, 56, 56), (3, 96, 31, 31), (32, 96, 57, 57), (1, 96, 20, 20)], 20)


def test_cuda_op_agrees_with_cpu_op_on_an_export(ort_cuda, tmp_path, error_report):
    """A small WTConvNeXt's plugin export: the CUDA EP (TF32 off) and the CPU EP, both on the library, agree to
    fp32 rounding of the whole model, and the CUDA session ran every WTConv2d node on the GPU."""
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import randomize_weights
    from wtconv_export.wtconvnext import create_wtconvnext

    model = randomize_weights(create_wtconvnext("wtconvnext_tiny", depths=(1, 1, 1, 1), num_classes=10), 0).eval()
    path = tmp_path / "small.onnx"
    export_onnx(model, path, input_shape=(1, 3, 64, 64))
    x = np.random.default_rng(1).standard_normal((4, 3, 72, 88)).astype(np.float32)
    gpu = cuda_session(ort_cuda, path, profile=True)
    y_gpu = gpu.run(None, {"input": x})[0]
    assert providers_of_wtconv_nodes(gpu) == {"CUDAExecutionProvider"}
    y_cpu = make_ort_session(path, op="native", library=ort_cuda).run(None, {"input": x})[0]
    error = rel_error(y_gpu, y_cpu)
    error_report.add("ONNX Runtime CUDA EP vs CPU EP, small WTConvNeXt fp32 (TF32 off)", error, "4x3x72x88")
    assert error <= 1e-5
