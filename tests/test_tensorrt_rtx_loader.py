"""TensorRT-RTX's missing ``libtensorrt_rtx.so`` (docs/engines.md): what the wheel does on its own, what our loader
links change, and that the user's installed package is left as it was. Each case runs in its own process, since
the dynamic loader's state is per process and the wheel's defect aborts it."""

import os
import subprocess
import sys

import pytest

PARSE = """
import sys
registry = trt.get_plugin_registry()
assert registry.load_library(sys.argv[1]) is not None
logger = trt.Logger(trt.Logger.ERROR)
network = trt.Builder(logger).create_network(0)
parser = trt.OnnxParser(network, logger)
ok = parser.parse_from_file(sys.argv[2])
print("parsed", ok, network.num_layers)
"""


@pytest.fixture(scope="module")
def plugin_model(tmp_path_factory):
    from test_tensorrt_rtx_bad_input import wtconv_model

    return wtconv_model(tmp_path_factory.mktemp("loader") / "one_node.onnx")


def run_python(code, *args, env=None):
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or dict(os.environ),
    )


def wheel_listing():
    from trt_engine import rtx_libraries

    folder = rtx_libraries.wheel_lib_dir()
    return folder, sorted(p.name for p in folder.iterdir())


def test_wheel_alone_aborts_on_a_plugin_node(tensorrt_rtx, rtx_plugin, plugin_model):
    """Without our links the parser's dlopen("libtensorrt_rtx.so") fails and the process aborts: the defect our
    loader handles. Should a later wheel ship the name, this test says so (skip) instead of passing silently."""
    from trt_engine import rtx_libraries

    folder, names = wheel_listing()
    if rtx_libraries.UNVERSIONED in names:
        pytest.skip("this TensorRT-RTX wheel ships libtensorrt_rtx.so itself: the loader links are not needed")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    done = run_python("import tensorrt_rtx_bindings as trt\n" + PARSE, rtx_plugin["plugin"], plugin_model, env=env)
    assert done.returncode < 0, (done.returncode, done.stdout, done.stderr[-2000:])  # killed by SIGABRT
    assert "terminate called" in done.stderr


def test_our_loader_links_make_the_parser_work(tensorrt_rtx, rtx_plugin, plugin_model):
    before = wheel_listing()
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    done = run_python(
        "from trt_engine import tensorrt_api\ntensorrt_api.use_backend('tensorrt-rtx')\n"
        "trt = tensorrt_api.import_tensorrt()\n" + PARSE,
        rtx_plugin["plugin"],
        plugin_model,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["parsed", "True", "1"]
    assert wheel_listing() == before  # nothing was added to the installed package


def test_importing_tensorrt_rtx_first_is_refused_not_aborted(tensorrt_rtx, plugin_model):
    from trt_engine import rtx_libraries

    if rtx_libraries.UNVERSIONED in wheel_listing()[1]:
        pytest.skip("this TensorRT-RTX wheel ships libtensorrt_rtx.so itself")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    done = run_python(
        "import tensorrt_rtx_bindings\nfrom trt_engine import tensorrt_api\n"
        "from wtconv_core.errors import ConfigurationError\n"
        "tensorrt_api.use_backend('tensorrt-rtx')\n"
        "try:\n    tensorrt_api.import_tensorrt()\n"
        "except ConfigurationError as e:\n    print('refused:', e)\n",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused: TensorRT-RTX was imported before wtconv-trt could prepare")
    assert "LD_LIBRARY_PATH=" in done.stdout


def test_rtx_environment_line_for_other_processes(tensorrt_rtx, rtx_plugin, plugin_model):
    """The line `wtconv-trt doctor --rtx-env` prints gives a plain `import tensorrt_rtx` process the same fix."""
    from trt_engine import rtx_libraries

    if rtx_libraries.UNVERSIONED in wheel_listing()[1]:
        pytest.skip("this TensorRT-RTX wheel ships libtensorrt_rtx.so itself")
    done = subprocess.run(
        [sys.executable, "-m", "wtconv_trt", "doctor", "--rtx-env"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    for word in done.stdout.split():
        key, _, value = word.partition("=")
        assert key in ("LD_LIBRARY_PATH", "LD_PRELOAD"), word
        env[key] = value
    done = run_python("import tensorrt_rtx_bindings as trt\n" + PARSE, rtx_plugin["plugin"], plugin_model, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["parsed", "True", "1"]
