"""Shared test fixtures. GPU and TensorRT availability is decided here, and only here.

Fixtures for hardware- and library-dependent tests (each calls pytest.skip with the reason when absent):

    require_cuda_device  a CUDA device usable by PyTorch; returns its name.
    require_kernels_library  the built kernel library alone (its host functions, e.g. the workspace size query,
                         run without a device); returns its path.
    require_cuda         a CUDA device AND the built kernel library (plugin/kernels' extern "C" shared
                         library); returns its path. The library is found, in order, from the environment
                         variable WTCONV_KERNELS_LIB, from ``wtconv_torch.cuda_kernels.find_library()`` when
                         that module exists, or not at all (skip, saying how to build it).
    require_cuda_shared_memory  require_cuda, and a client here can make CUDA shared memory (tritonclient's
                         cuda_shared_memory over NVIDIA's cuda-python); returns the kernel library's path.
    require_tensorrt     ``import tensorrt`` works (bindings and libnvinfer); returns the module.
    tensorrt_rtx         TensorRT-RTX is installed and imports (our loader links included); selects it as this
                         process's backend and returns its module.
    rtx_plugin           the plugin libraries built with CMake against the TensorRT header set TensorRT-RTX's ABI
                         matches (``<repo>/../shared/tensorrt-headers/11.1``), one CUDA architecture, into the
                         tests' build folder; rebuilt only when the sources' hash changes. {"plugin": dynamic,
                         "plugin-static": ...}.
                         Skips with the reason when the headers, CMake or nvcc are absent.
    no_tensorrt          simulates a machine with neither TensorRT nor TensorRT-RTX (monkeypatch), so the "not
                         installed" paths run on every machine.
    ort_library          libwtconv_ort.so (the ONNX Runtime custom-op library): $WTCONV_ORT_LIB as given to the
                         run, else built with CMake from plugin/ once per source hash into the tests' build folder;
                         with its CUDA op (one architecture) where nvcc is found and a GPU can run it, else the
                         CPU op alone (g++ only, as on a CI machine). Returns its path. Skips with the reason when
                         the ONNX Runtime C API headers, CMake or a C++ compiler are absent.
    ort_cuda             ONNX Runtime's CUDA execution provider with that library's CUDA op: onnxruntime-gpu
                         offering CUDAExecutionProvider, a GPU, and a library built with CUDA; returns the library.

Markers do the same for a whole test: ``@pytest.mark.gpu`` behaves like require_cuda and
``@pytest.mark.tensorrt`` like require_tensorrt (markers are declared in pyproject.toml).

Threads: on machines without a CUDA device PyTorch runs single-threaded in tests (WTCONV_TEST_THREADS=N
overrides, everywhere). The CPU tests use small tensors, where OpenMP's thread pool only costs time, and on
a loaded two-core machine its spinning threads made small float64 convolutions 1000x slower (1 s, not 1 ms).
GPU machines keep PyTorch's default, since their tests may compute large float64 references on the CPU.

``error_report``: tests record (what, error) figures; the worst of each is printed in the terminal summary,
so a plain ``pytest -q`` run shows the measured agreement, not only pass/fail.

User state: what a user built, cached or set must not change a result. The first pytest process of a run (not an
xdist worker, which inherits it) points the package's per-user cache (``WTCONV_TRT_CACHE``) at an empty folder of
its own, removed at the end, and takes the library variables out of the environment the code under test reads:
``WTCONV_TRT_PLUGIN`` and ``WTCONV_TRT_PLUGIN_STATIC`` are dropped, ``WTCONV_ORT_LIB`` becomes the input of the
``ort_library`` fixture alone (``WTCONV_TEST_ORT_LIB``). ``WTCONV_KERNELS_LIB`` stays: only a CUDA device runs that
library, and the GPU scripts name it so. The libraries the fixtures build from this checkout's sources are kept,
per source hash, in ``WTCONV_TEST_BUILDS`` (default: ``test-builds`` in the user's cache, a folder only the tests
write), so a second run does not build them again.

Side by side (``-n 2``, pytest-xdist): each module runs whole on one worker (``--dist loadfile``), since its tests
share module fixtures (exports, builds), and the longest modules start first; the workers' error reports and build
times are merged into the summary. Session fixtures that build libraries take a file lock, so two workers build a
library once.
"""

import importlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

KERNELS_LIB_ENV = "WTCONV_KERNELS_LIB"
REPO = Path(__file__).resolve().parent.parent
TENSORRT_HEADERS = REPO.parent / "shared" / "tensorrt-headers"
# TensorRT-RTX 1.7 carries TensorRT 11's ABI (plugin/README.md): its plugins are built against the 11.x headers.
RTX_HEADER_SET = "11.1"
# One architecture keeps the test build short; the build phase runs no kernel. 8.0: its machine code runs on 8.x and
# its PTX on newer GPUs, so every default TensorRT-RTX target can run the plugin (trt_engine.plugins.runnable_targets
# refuses targets a plugin library has no code for). The kernels are those of the compile test's tree
# (tests/kernels_tree.py, the same architecture), linked, not compiled again.
TEST_CUDA_ARCHITECTURES = "80"


# The modules measured longest in a CI run (plugin and kernel builds, WTConvNeXt-T exports, servers), longest
# first: with -n they start first, so that none of them is left running alone at the end.
LONGEST_MODULES = (
    "test_plugin_harness.py",
    "test_cuda_build.py",
    "test_onnx_export.py",
    "test_build_libs.py",
    "test_api_readme.py",
    "test_serving_server.py",
    "test_ort_build.py",
    "test_tensorrt_rtx_build.py",
    "test_own_model_wtconvnext.py",
    "test_onnxruntime_integration.py",
    "test_demo.py",
)


ORT_LIB_ENV = "WTCONV_ORT_LIB"
TEST_BUILDS_ENV = "WTCONV_TEST_BUILDS"
TEST_ORT_LIB_ENV = "WTCONV_TEST_ORT_LIB"
# Library variables a user may have set for their own work; none of them may steer a test.
DROPPED_LIBRARY_VARS = ("WTCONV_TRT_PLUGIN", "WTCONV_TRT_PLUGIN_STATIC")
_SESSION_CACHE: Path | None = None  # the cache this process made for the run (removed at its end)


def _isolate_user_state(config) -> None:
    """The run's own per-user cache and library variables (module docstring, "User state"); once per run, in the
    first process: xdist's workers and the tests' child processes inherit the environment."""
    global _SESSION_CACHE
    if hasattr(config, "workerinput"):
        return
    import tempfile

    from wtconv_libs import lookup

    os.environ.setdefault(TEST_BUILDS_ENV, str(lookup.user_cache_dir() / "test-builds"))
    if os.environ.get(ORT_LIB_ENV):
        os.environ[TEST_ORT_LIB_ENV] = os.environ[ORT_LIB_ENV]
    for name in (ORT_LIB_ENV, *DROPPED_LIBRARY_VARS):
        os.environ.pop(name, None)
    _SESSION_CACHE = Path(tempfile.mkdtemp(prefix="wtconv-trt-test-cache-"))
    os.environ[lookup.ENV_CACHE] = str(_SESSION_CACHE)


def pytest_unconfigure(config):
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def test_builds_dir() -> Path:
    """Where the fixtures keep the libraries they build from this checkout (module docstring, "User state")."""
    return Path(os.environ[TEST_BUILDS_ENV])


def pytest_configure(config):
    _isolate_user_state(config)
    if getattr(config.option, "numprocesses", None):
        if config.option.dist == "load":
            # Each module whole on one worker (its tests share module fixtures: exports, builds). Not by
            # xdist_group: xdist 3.8 marks a group in the node id through an attribute pytest 9.2 no longer reads.
            config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # the workers' order (pytest_collection_modifyitems), longest first
    try:
        import torch
    except ImportError:
        return
    threads = os.environ.get("WTCONV_TEST_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    elif not torch.cuda.is_available():
        torch.set_num_threads(1)


def cuda_device_skip_reason():
    """None if PyTorch sees a CUDA device, else why not."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, built with CUDA {torch.version.cuda})"
    return None


def find_kernels_library():
    """(path or None, reason when None)."""
    env = os.environ.get(KERNELS_LIB_ENV)
    if env:
        return (Path(env), None) if Path(env).is_file() else (None, f"{KERNELS_LIB_ENV}={env} does not exist")
    try:
        module = importlib.import_module("wtconv_torch.cuda_kernels")
    except ImportError:
        module = None
    if module is not None and hasattr(module, "find_library"):
        path = module.find_library()
        if path:
            return Path(path), None
    return None, (
        f"CUDA kernel library not found: build it (wtconv-trt build-libs; 'wtconv-trt doctor' shows where it is "
        f"looked for) or set {KERNELS_LIB_ENV} to its path"
    )


def cuda_skip_reason():
    return cuda_device_skip_reason() or find_kernels_library()[1]


def tensorrt_skip_reason():
    try:
        import tensorrt  # noqa: F401
    except Exception as error:  # ImportError, or the bindings present but libnvinfer missing (OSError)
        return f"TensorRT is not available ({type(error).__name__}: {error})"
    return None


def tensorrt_rtx_skip_reason():
    if importlib.util.find_spec("tensorrt_rtx_bindings") is None:
        return (
            "TensorRT-RTX is not installed (pip install -e '.[test]' installs tensorrt-rtx-cu13, which builds "
            "engines without a GPU)"
        )
    return None


@pytest.fixture(scope="session")
def tensorrt_rtx():
    reason = tensorrt_rtx_skip_reason()
    if reason:
        pytest.skip(reason)
    from trt_engine import tensorrt_api
    from wtconv_core.errors import ConfigurationError

    try:
        tensorrt_api.use_backend("tensorrt-rtx")  # one backend per process: refused if TensorRT came first
        return tensorrt_api.import_tensorrt()
    except ConfigurationError as error:
        pytest.skip(f"TensorRT-RTX cannot be used in this test process: {error}")


def rtx_plugin_skip_reason():
    headers = TENSORRT_HEADERS / RTX_HEADER_SET
    if not (headers / "include" / "NvInferRuntime.h").is_file():
        return (
            f"TensorRT {RTX_HEADER_SET} headers not found at {headers} (../shared/tensorrt-headers beside the "
            f"checkout): the plugin cannot be built for the real-TensorRT tests"
        )
    if shutil.which("cmake") is None:
        return "cmake is not on PATH: the plugin cannot be built for the real-TensorRT tests"
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").is_file():
        return "nvcc (CUDA toolkit) not found: the plugin cannot be built for the real-TensorRT tests"
    return None


@pytest.fixture(scope="session")
def rtx_plugin(tensorrt_rtx):
    """The plugin libraries for TensorRT-RTX, built once per source hash into the tests' build folder
    (test_builds_dir; a lock keeps concurrent test runs from building the same folder twice)."""
    import fcntl

    from kernels_tree import kernels_tree

    from wtconv_libs import lookup
    from wtconv_libs.build import build_libraries, sources_digest

    reason = rtx_plugin_skip_reason()
    if reason:
        pytest.skip(reason)
    headers = TENSORRT_HEADERS / RTX_HEADER_SET
    digest = sources_digest(
        REPO / "plugin",
        RTX_HEADER_SET,
        TEST_CUDA_ARCHITECTURES,
        (headers / "include" / "NvInferVersion.h").read_text(errors="replace"),
    )[:16]
    folder = test_builds_dir() / digest
    folder.mkdir(parents=True, exist_ok=True)
    names = {kind: folder / "lib" / "trt11" / lookup.FILE_NAMES[kind] for kind in ("plugin", "plugin-static")}
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(p.is_file() for p in names.values()):
            ok, output, kernels = kernels_tree(TEST_CUDA_ARCHITECTURES)
            assert ok, f"the kernels do not compile:\n{output[-4000:]}"
            build_libraries(
                tensorrt_headers=headers,
                source=REPO / "plugin",
                build_dir=folder / "build",
                install_root=folder / "lib",
                cuda_architectures=TEST_CUDA_ARCHITECTURES,
                kinds=["plugin", "plugin-static"],
                kernels_prebuilt=kernels / "libwtconv_kernels.a",
            )
    return names


# The ONNX Runtime library's CUDA op is built only where a GPU is visible: for that GPU alone (CMake's "native").
ORT_TEST_CUDA_ARCHITECTURES = "native"


def ort_library_skip_reason():
    from wtconv_libs.build import onnxruntime_headers

    given = os.environ.get(TEST_ORT_LIB_ENV)
    if given:
        return (
            None
            if Path(given).is_file()
            else f"{ORT_LIB_ENV} (for the tests: {TEST_ORT_LIB_ENV})={given} does not exist"
        )
    if onnxruntime_headers(source=REPO / "plugin") is None:
        return (
            "ONNX Runtime C API headers not found (../shared/onnxruntime-headers/<version>/include beside the "
            "checkout, third_party/onnxruntime-headers/<version>/include, or ONNXRUNTIME_INCLUDE_DIR): "
            "libwtconv_ort.so cannot be built"
        )
    if shutil.which("cmake") is None:
        return "cmake is not on PATH: libwtconv_ort.so cannot be built"
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return "no C++ compiler (c++, g++ or clang++) on PATH: libwtconv_ort.so cannot be built"
    return None


@pytest.fixture(scope="session")
def ort_library():
    """libwtconv_ort.so, built once per source hash into the tests' build folder (test_builds_dir; a lock keeps
    concurrent test runs from building the same folder twice)."""
    import fcntl

    from wtconv_libs import lookup
    from wtconv_libs.build import build_libraries, nvcc_path, onnxruntime_headers, sources_digest

    reason = ort_library_skip_reason()
    if reason:
        pytest.skip(reason)
    if os.environ.get(TEST_ORT_LIB_ENV):
        return Path(os.environ[TEST_ORT_LIB_ENV])
    headers = onnxruntime_headers(source=REPO / "plugin")
    # The CUDA op only where it can run: without a GPU, compiling the kernels would only cost minutes here
    # (tests/test_ort_build.py compiles the CUDA op itself wherever nvcc is found).
    cuda = nvcc_path() is not None and cuda_device_skip_reason() is None
    digest = sources_digest(
        REPO / "plugin",
        "ort",
        (headers / "onnxruntime_c_api.h").read_text(errors="replace"),
        ORT_TEST_CUDA_ARCHITECTURES if cuda else "no-cuda",
    )[:16]
    folder = test_builds_dir() / f"ort-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "lib" / lookup.FILE_NAMES["ort"]
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            build_libraries(
                source=REPO / "plugin",
                build_dir=folder / "build",
                install_root=folder / "lib",
                cuda_architectures=ORT_TEST_CUDA_ARCHITECTURES,
                kinds=["ort"],
                onnxruntime_include=headers,
                with_cuda=cuda,
            )
    return path


def ort_cuda_skip_reason(library):
    from wtconv_libs import lookup

    try:
        import onnxruntime
    except ImportError:
        return "onnxruntime is not installed"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return (
            f"onnxruntime {onnxruntime.__version__} offers no CUDAExecutionProvider "
            f"({', '.join(onnxruntime.get_available_providers())}): install onnxruntime-gpu"
        )
    if lookup.ort_library_info(library).get("cuda") != "yes":
        return f"{library} was built without its CUDA op (no nvcc where it was built)"
    return cuda_device_skip_reason()


@pytest.fixture(scope="session")
def ort_cuda(ort_library):
    reason = ort_cuda_skip_reason(ort_library)
    if reason:
        pytest.skip(reason)
    return ort_library


@pytest.fixture(scope="session")
def install():
    """The tritonserver install the serving tests start (pytriton's), or a skip naming how to get one."""
    from wtconv_core.errors import ConfigurationError
    from wtconv_serving.server.launcher import INSTALL_HINT, find_server

    try:
        return find_server()
    except ConfigurationError:
        pytest.skip("tritonserver is not installed: " + INSTALL_HINT)


@pytest.fixture(scope="session")
def shipped_model():
    """The shipped default model (a small WTConvNeXt: 5 blocks in 4 stages), loaded once per session."""
    from wtconv_torch.models import load_default_model

    model, _ = load_default_model()
    return model


@pytest.fixture(scope="session")
def shipped_export(shipped_model, tmp_path_factory):
    """export(ops, precision, runtime, layout) -> the path of the shipped default model's export (example input
    1x1x32x32, dynamic), made once per session: the rendering tests and the TensorRT-RTX tests share them."""
    from wtconv_export.onnx_export import export_onnx

    model = shipped_model
    folder = tmp_path_factory.mktemp("shipped_exports")
    made = {}

    def export(ops="plugin", precision="fp32", runtime="onnxruntime", layout="nchw"):
        key = (ops, precision, runtime, layout)
        if key not in made:
            path = folder / ("digits_" + "_".join(key) + ".onnx")
            export_onnx(
                model,
                path,
                ops=ops,
                precision=precision,
                runtime=runtime,
                layout=layout,
                input_shape=(1, 1, 32, 32),
                metadata={"source": "default"},
            )
            made[key] = path
        return made[key]

    return export


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rtx_exports")


@pytest.fixture(scope="session")
def shipped_exports(shipped_export):
    """The shipped model's exports (shipped_export's): plugin fp32, plugin fp16, standard ops fp32, rendered for
    ONNX Runtime (the files both runtimes are given by default); plugin fp16 rendered for TensorRT, key (ops,
    precision, "tensorrt"); plugin fp16 with channels-last blocks, key (ops, precision, "channels_last")."""
    return {
        ("plugin", "fp32"): shipped_export("plugin", "fp32"),
        ("plugin", "fp16"): shipped_export("plugin", "fp16"),
        ("standard", "fp32"): shipped_export("standard", "fp32"),
        ("plugin", "fp16", "tensorrt"): shipped_export("plugin", "fp16", "tensorrt"),
        ("plugin", "fp16", "channels_last"): shipped_export("plugin", "fp16", "onnxruntime", "channels_last"),
    }


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Neither TensorRT nor TensorRT-RTX, whatever is installed: the backend lookup finds none and ``import
    tensorrt`` fails, so trt_engine takes its "not installed" paths."""
    from trt_engine import backends, tensorrt_api

    monkeypatch.setattr(backends, "installed_backends", lambda: [])
    monkeypatch.setattr(tensorrt_api, "_TRT", None)
    monkeypatch.setattr(tensorrt_api, "_BACKEND", None)
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt -> ImportError


@pytest.fixture(scope="session")
def require_cuda_device():
    reason = cuda_device_skip_reason()
    if reason:
        pytest.skip(reason)
    import torch

    return torch.cuda.get_device_name()


@pytest.fixture(scope="session")
def require_kernels_library():
    path, reason = find_kernels_library()
    if reason:
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def require_cuda():
    reason = cuda_skip_reason()
    if reason:
        pytest.skip(reason)
    return find_kernels_library()[0]


def cuda_shared_memory_skip_reason():
    """None where a client here can make CUDA shared memory (a CUDA device, and tritonclient's cuda_shared_memory with
    NVIDIA's cuda-python under it), else why not."""
    reason = cuda_device_skip_reason()
    if reason:
        return reason
    try:
        import tritonclient.utils.cuda_shared_memory  # noqa: F401
    except ImportError as error:
        return f"tritonclient's CUDA shared memory cannot be imported ({error}): pip install 'tritonclient[cuda]'"
    return None


@pytest.fixture(scope="session")
def require_cuda_shared_memory(require_cuda):
    """A CUDA device, our kernel library (the torch-cuda runtime serves the model) and CUDA shared memory."""
    reason = cuda_shared_memory_skip_reason()
    if reason:
        pytest.skip(reason)
    return require_cuda


@pytest.fixture(scope="session")
def require_tensorrt():
    reason = tensorrt_skip_reason()
    if reason:
        pytest.skip(reason)
    import tensorrt

    return tensorrt


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu"):
        reason = cuda_skip_reason()
        if reason:
            pytest.skip(reason)
    if item.get_closest_marker("tensorrt"):
        reason = tensorrt_skip_reason()
        if reason:
            pytest.skip(reason)


class ErrorReport:
    """Worst recorded error per figure name, printed at the end of the session."""

    def __init__(self):
        self.worst = {}

    def add(self, name: str, error: float, where: str = "") -> None:
        if name not in self.worst or error > self.worst[name][0]:
            self.worst[name] = (float(error), where)


_REPORT = ErrorReport()


@pytest.fixture(scope="session")
def error_report():
    return _REPORT


_BUILD_TIMES: dict = {}


@pytest.fixture(scope="session")
def build_times():
    """{what: seconds} of the real engine builds; printed in the terminal summary."""
    return _BUILD_TIMES


def pytest_collection_modifyitems(config, items):
    """On an xdist worker (the workers collect; the controller schedules modules in the order they report): the
    longest modules first (LONGEST_MODULES), the others in their usual order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module's order is kept


def pytest_sessionfinish(session):
    """On an xdist worker: hand this worker's error report and build times to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["wtconv_error_report"] = {name: list(value) for name, value in _REPORT.worst.items()}
        output["wtconv_build_times"] = dict(_BUILD_TIMES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """On the xdist controller: merge a finished worker's error report and build times."""
    output = getattr(node, "workeroutput", {})
    for name, (value, where) in output.get("wtconv_error_report", {}).items():
        _REPORT.add(name, value, where)
    _BUILD_TIMES.update(output.get("wtconv_build_times", {}))


def pytest_terminal_summary(terminalreporter):
    if _BUILD_TIMES:
        terminalreporter.section("TensorRT-RTX engine builds (parse + build, seconds)")
        for name, seconds in _BUILD_TIMES.items():
            terminalreporter.write_line(f"{name}: {seconds:.2f} s")
    if _REPORT.worst:
        terminalreporter.section("worst measured errors")
        for name, (error, where) in sorted(_REPORT.worst.items()):
            terminalreporter.write_line(f"{name}: {error:.3e}  {where}")
