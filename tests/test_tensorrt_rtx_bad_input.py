"""Bad input through TensorRT-RTX's real ONNX parser and our plugin, through ``wtconv-trt build`` in a subprocess
(a crash of the process would show as a signal, not exit status 2).

Each case must end with exit status 2, one error line from wtconv-trt naming the cause, and — where the plugin
is the one that refuses — the plugin's own message in TensorRT's log (the plugin logs through TensorRT's
ILogger, prefixed "WTConv2d plugin:"). No engine file may be left behind.
"""

import os
import shutil
import subprocess
import sys

import pytest
from onnx import TensorProto

pytestmark = pytest.mark.slow  # real TensorRT-RTX builds with the plugin built once: minutes; CI runs them

PROFILE = "input:1x4x16x16/2x4x16x16/4x4x16x16"


def wtconv_model(
    path,
    *,
    channels=4,
    kernel_size=3,
    levels=1,
    drop=None,
    plugin_version="1",
    base_weight_delta=0,
    cast_to=None,
    elem=TensorProto.FLOAT,
):
    """input -> [Cast to ``cast_to``] -> WTConv2d -> [Cast back] -> output, with the node's attributes as the
    exporter writes them (docs/onnx_export.md), one of them spoiled as asked."""
    import onnx
    from onnx import helper

    c, k, n = channels, kernel_size, levels
    attrs = {
        "kernel_size": k,
        "wt_levels": n,
        "stride": 1,
        "base_weight": [0.1] * (c * k * k + base_weight_delta),
        "base_bias": [0.0] * c,
        "wavelet_weight": [0.01] * (n * 4 * c * k * k),
        "plugin_version": plugin_version,
        "plugin_namespace": "",
    }
    if drop:
        del attrs[drop]
    x = helper.make_tensor_value_info("input", elem, ["batch", c, 16, 16])
    y = helper.make_tensor_value_info("output", elem, ["batch", c, 16, 16])
    nodes, src, dst = [], "input", "output"
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["input"], ["x_cast"], to=cast_to, name="cast_in"))
        src, dst = "x_cast", "y_cast"
    nodes.append(helper.make_node("WTConv2d", [src], [dst], name="wtconv0", domain="wtconv", **attrs))
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["y_cast"], ["output"], to=elem, name="cast_out"))
    graph = helper.make_graph(nodes, "bad_wtconv", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("wtconv", 1)])
    onnx.save(model, str(path))
    return path


def build(onnx_path, plugin, engine):
    """`wtconv-trt build` of onnx_path with the TensorRT-RTX backend, in a subprocess (a crash stays visible)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "wtconv_trt",
            "build",
            str(onnx_path),
            "--plugin",
            str(plugin),
            "--shapes",
            PROFILE,
            "-o",
            str(engine),
            "--precision",
            "fp32",
            "--no-progress",
            "--backend",
            "tensorrt-rtx",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )


def run_build(onnx_path, plugin, tmp_path):
    """A build expected to fail: it must leave neither an engine nor its manifest behind."""
    engine = tmp_path / "out.engine"
    done = build(onnx_path, plugin, engine)
    assert not engine.exists() and not (tmp_path / "out.engine.json").exists()
    return done


def assert_one_line_error(done, *fragments):
    assert done.returncode == 2, f"exit {done.returncode} (a negative status is a crash)\n{done.stderr[-3000:]}"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("wtconv-trt build: error: "), last
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in the error line: {last}"
    assert "Traceback" not in done.stderr


CASES = [
    # (id, model arguments, message the plugin logs through TensorRT, text of our error line)
    (
        "wrong weight length",
        {"base_weight_delta": -1},
        "WTConv2d plugin: field 'base_weight': expected length C*k*k with C=4 (length of base_bias), k=3 = 36, "
        "given 35",
        "TensorRT's ONNX parser rejected",
    ),
    (
        "missing attribute",
        {"drop": "wavelet_weight"},
        "WTConv2d plugin: createPlugin: missing field 'wavelet_weight'",
        "TensorRT's ONNX parser rejected",
    ),
    (
        "even kernel size",
        {"kernel_size": 4},
        "WTConv2d plugin: field 'kernel_size': expected an odd integer",
        "TensorRT's ONNX parser rejected",
    ),
    (
        "int32 input",
        {"cast_to": TensorProto.INT32},
        "WTConv2d plugin: getOutputDataTypes: input 0: expected float32, float16 or bfloat16",
        "given int32",
    ),
    (
        "int8 input",
        {"cast_to": TensorProto.INT8},
        "WTConv2d plugin: getOutputDataTypes: input 0: expected float32, float16 or bfloat16",
        "given int8",
    ),
]


@pytest.mark.parametrize("kwargs,plugin_message,error_text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_plugin_refuses_through_the_real_parser(kwargs, plugin_message, error_text, rtx_plugin, tmp_path):
    done = run_build(wtconv_model(tmp_path / "bad.onnx", **kwargs), rtx_plugin["plugin"], tmp_path)
    assert_one_line_error(done, error_text, "the plugin said: " + plugin_message)
    # TensorRT's log (our ILogger -> stderr) carries the plugin's message as TensorRT received it.
    assert f"[TensorRT] {plugin_message}" in done.stderr


def test_unknown_plugin_version(rtx_plugin, tmp_path):
    done = run_build(wtconv_model(tmp_path / "v2.onnx", plugin_version="2"), rtx_plugin["plugin"], tmp_path)
    assert_one_line_error(done, "Plugin not found", "our plugin is registered as 'WTConv2d' version '1'")


def test_a_good_node_builds(rtx_plugin, tmp_path):
    """The same hand-written node with nothing spoiled builds: the failures above come from what was spoiled."""
    engine = tmp_path / "good.engine"
    done = build(wtconv_model(tmp_path / "ok.onnx"), rtx_plugin["plugin"], engine)
    assert done.returncode == 0, done.stderr[-3000:]
    assert engine.is_file() and "error" not in done.stderr.lower()


def test_double_input_is_refused_before_tensorrt(rtx_plugin, tmp_path):
    """A float64 graph input is refused by our ONNX check (TensorRT has no float64 tensors to give the plugin;
    a float64 Cast inside the graph is narrowed to float32 by the parser and builds)."""
    done = run_build(wtconv_model(tmp_path / "f64.onnx", elem=TensorProto.DOUBLE), rtx_plugin["plugin"], tmp_path)
    assert_one_line_error(done, "the ONNX model's input is float64; expected float32 or float16")


@pytest.fixture(scope="module")
def c_compiler():
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libraries")
    return cc


def test_library_that_is_not_a_plugin(c_compiler, rtx_plugin, tmp_path):
    """A shared library that exports getCreators but registers nothing, and one that exports nothing of a plugin:
    both refused with one line, the process intact."""
    model = wtconv_model(tmp_path / "ok.onnx")
    empty = tmp_path / "libempty_creators.so"
    (tmp_path / "e.c").write_text(
        "void* getCreators(int* n) { *n = 0; return 0; }\nvoid setLoggerFinder(void* f) { (void)f; }\n"
    )
    subprocess.run([c_compiler, "-shared", "-fPIC", "-o", str(empty), str(tmp_path / "e.c")], check=True)
    done = run_build(model, empty, tmp_path)
    assert_one_line_error(done, "could not load plugin library", "it is not a TensorRT plugin library")
    plain = tmp_path / "libplain.so"
    (tmp_path / "p.c").write_text("int answer(void) { return 42; }\n")
    subprocess.run([c_compiler, "-shared", "-fPIC", "-o", str(plain), str(tmp_path / "p.c")], check=True)
    done = run_build(model, plain, tmp_path)
    assert_one_line_error(done, "not the dynamic WTConv2d plugin")
    text = tmp_path / "libtext.so"
    text.write_text("not a library\n")
    done = run_build(model, text, tmp_path)
    assert_one_line_error(done, "not an ELF shared library")
