"""The onnxruntime-extensions Python op runs WTConv2d nodes where libwtconv_ort.so is not built (the state right after
the quick start). It must take every layout and dtype an export writes, as the native op does, and never take the
process down: onnxruntime-extensions aborts the process when a Python op raises.

Oracles: the executable spec in float64 on the float64-folded weights for single nodes (tests/test_ort_cpu.py's
check_against_spec: fp32 within 1e-6, fp16 within the fp16 reference module's own error); the PyTorch model for
whole exports; the exit status and stderr of a child process for what used to abort.

The export matrix: the shipped model's plugin exports in both layouts and both precisions (the session's shared
exports), and a small network of our own with a stride-2 WTConv2d on an odd size, each run on the Python op and on
the native op at an odd, non-square input size.
"""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime_extensions")

from test_ort_channels_last import transposed_run  # noqa: E402
from test_ort_cpu import check_against_spec, node_model, rel_error  # noqa: E402

from wtconv_ort.session import make_ort_session  # noqa: E402
from wtconv_torch.folding import fold_wtconv  # noqa: E402
from wtconv_torch.wtconv2d import WTConv2d, random_wtconv2d  # noqa: E402


def python_session(model):
    return make_ort_session(model, op="python")


def run_python_op(model, x):
    return python_session(model).run(None, {"x": x})[0]


CASES = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in itertools.chain(
        ((2, 3, 37, 30, k, 2, 1) for k in (1, 3, 7)),
        ((3, 5, 33, 19, 5, lv, s) for lv in (1, 4) for s in (2, 3)),
        ((2, 3, 1, 1, 5, 3, 1), (2, 2, 1, 9, 3, 5, 2), (1, 4, 7, 1, 7, 8, 1), (4, 2, 5, 3, 5, 8, 2)),
    )
]


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", CASES)
def test_python_op_node_matches_spec(error_report, layout, dtype, b, c, h, w, k, levels, stride):
    run = run_python_op if layout == "nchw" else transposed_run(python_session)
    check_against_spec(
        run,
        b,
        c,
        h,
        w,
        k,
        levels,
        stride,
        dtype,
        seed=k * 100 + levels * 10 + stride,
        report=error_report,
        label=f"Python {layout}",
    )


@pytest.mark.parametrize("channels_last", [0, 1])
def test_python_op_empty_input_gives_empty_output(channels_last):
    """An empty batch and an empty plane give the empty output of the native op's shape (PyTorch's convolution
    alone refuses a plane of height 0)."""
    folded = fold_wtconv(random_wtconv2d(3, 5, 2, 2, 0))
    model = node_model(folded, channels_last=channels_last)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    session = python_session(model)
    for nchw, expected in (((0, 3, 9, 8), (0, 3, 5, 4)), ((2, 3, 0, 7), (2, 3, 0, 4))):
        shape = (nchw[0], nchw[2], nchw[3], nchw[1]) if channels_last else nchw
        y = session.run(None, {"x": np.zeros(shape, np.float32)})[0]
        assert y.shape == ((expected[0], expected[2], expected[3], expected[1]) if channels_last else expected)


class StridedNet(torch.nn.Module):
    """A network of our own: a convolution, a stride-2 WTConv2d, a stride-1 WTConv2d with 3 levels, a head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.down = WTConv2d(8, 8, kernel_size=5, stride=2, wt_levels=2)
        self.mix = WTConv2d(8, 8, kernel_size=3, wt_levels=3)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(torch.relu(self.mix(torch.relu(self.down(self.stem(x))))))


@pytest.fixture(scope="module")
def strided_exports(tmp_path_factory):
    """StridedNet (random weights) exported in fp32 and fp16, example input at an odd size."""
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import randomize_weights

    model = randomize_weights(StridedNet(), 3).eval()
    out = tmp_path_factory.mktemp("strided")
    paths = {p: out / f"strided_{p}.onnx" for p in ("fp32", "fp16")}
    for precision, path in paths.items():
        export_onnx(model, path, precision=precision, input_shape=(1, 3, 21, 17))
    return model, paths


def check_both_ops(model, path, precision, x, ort_library, error_report, what):
    """The export on the Python op and on the native op against the PyTorch model: fp32 within 1e-5 of PyTorch
    fp32, fp16 within 2x PyTorch fp16's own error against float64 (docs/onnx_export.md, "Tolerances"); the two ops
    within 1e-5 of each other in fp32."""
    with torch.no_grad():  # on copies: the shipped model is the session's, and half() would round its weights
        ref64 = copy.deepcopy(model).double()(x.double()).numpy()
        ref32 = model(x).numpy()
        ref16 = copy.deepcopy(model).half()(x.half()).float().numpy() if precision == "fp16" else None
    feed = x.numpy().astype(np.float16 if precision == "fp16" else np.float32)
    outputs = {}
    for op, library in (("python", None), ("native", ort_library)):
        session = make_ort_session(path, op=op, library=library)
        outputs[op] = session.run(None, {session.get_inputs()[0].name: feed})[0]
        assert outputs[op].dtype == feed.dtype and outputs[op].shape == ref32.shape, (op, outputs[op].shape)
        if precision == "fp32":
            err = rel_error(outputs[op], ref32)
            error_report.add(f"ONNX Runtime {op} op, export matrix fp32 vs PyTorch fp32", err, what)
            assert err <= 1e-5, (op, what, err)
        else:
            err, own = rel_error(outputs[op], ref64), rel_error(ref16, ref64)
            error_report.add(f"ONNX Runtime {op} op, export matrix fp16 error / PyTorch fp16's", err / own, what)
            assert err <= 2.0 * own, (op, what, err, own)
    if precision == "fp32":
        assert rel_error(outputs["python"], outputs["native"]) <= 1e-5


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_shipped_model_exports_run_on_both_ops(
    shipped_model, shipped_export, ort_library, error_report, layout, precision
):
    path = shipped_export("plugin", precision, "onnxruntime", layout)
    x = torch.randn((3, 1, 37, 29), generator=torch.Generator().manual_seed(1))
    check_both_ops(shipped_model, path, precision, x, ort_library, error_report, f"digits {layout} {precision}")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_strided_network_exports_run_on_both_ops(strided_exports, ort_library, error_report, precision):
    model, paths = strided_exports
    x = torch.randn((2, 3, 23, 15), generator=torch.Generator().manual_seed(2))
    check_both_ops(model, paths[precision], precision, x, ort_library, error_report, f"stride 2 {precision}")


def child(code: str, tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """Python ``code`` (or, with argv, the command line) in a child process whose lookup finds no libwtconv_ort.so."""
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, WTCONV_TRT_CACHE=str(tmp_path / "empty-cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH")) if p)
    env.pop("WTCONV_ORT_LIB", None)
    command = [sys.executable, "-m", "wtconv_trt", *argv] if argv else [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_validate_of_a_channels_last_export_without_the_library(shipped_export, tmp_path):
    """``wtconv-trt validate`` of a channels-last export right after the quick start (no libwtconv_ort.so) passes
    on the Python op; it used to abort the process (SIGABRT, status 134)."""
    path = shipped_export("plugin", "fp32", "onnxruntime", "channels_last")
    done = child("", tmp_path, "validate", str(path))
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "PASSED" in done.stdout and "onnxruntime-extensions Python op" in done.stdout, done.stdout


def test_python_op_failures_are_errors_not_aborts(tmp_path):
    """A wrong input, and the op itself failing (a bug, simulated), end in ONNX Runtime's exception in the
    calling process, which lives on; the op's failure is logged with its traceback."""
    done = child(
        """
        import numpy as np
        from test_ort_cpu import node_model
        from wtconv_torch.folding import fold_wtconv
        from wtconv_torch.wtconv2d import random_wtconv2d
        from wtconv_ort import session as ort_session

        model = node_model(fold_wtconv(random_wtconv2d(4, 3, 2, 1, 0)))
        model.graph.input[0].type.tensor_type.ClearField("shape")  # nothing declared: only the guard checks
        run = ort_session.make_ort_session(model, op="python")
        for shape in ((1, 5, 9, 9), (4, 9, 9)):
            try:
                run.run(None, {"x": np.zeros(shape, np.float32)})
            except Exception as error:
                print("refused", shape, type(error).__name__)

        def broken(*args):
            raise RuntimeError("simulated bug")

        ort_session.python_op_output = broken
        try:
            run.run(None, {"x": np.zeros((1, 4, 9, 9), np.float32)})
        except Exception as error:
            print("refused bug", type(error).__name__)
        print("alive")
        """,
        tmp_path,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    assert lines[:2] == ["refused (1, 5, 9, 9) Fail", "refused (4, 9, 9) Fail"], done.stdout
    assert lines[2:] == ["refused bug Fail", "alive"], done.stdout
    assert "simulated bug" in done.stderr and "Traceback" in done.stderr
