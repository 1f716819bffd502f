"""Shared test fixtures. GPU and TensorRT availability is decided here, and only here.

Fixtures for hardware- and library-dependent tests (each calls pytest.skip with the reason when absent):

    require_cuda_device  a CUDA device usable by PyTorch; returns its name.
    require_cuda         a CUDA device AND the built kernel library (plugin/kernels' extern "C" shared
                         library); returns its path. The library is found, in order, from the environment
                         variable WTCONV_KERNELS_LIB, from ``wtconv_export.cuda_kernels.find_library()`` when
                         that module exists, or not at all (skip, saying how to build it).
    require_tensorrt     ``import tensorrt`` works (bindings and libnvinfer); returns the module.

Markers do the same for a whole test: ``@pytest.mark.gpu`` behaves like require_cuda and
``@pytest.mark.tensorrt`` like require_tensorrt (markers are declared in pyproject.toml).

Threads: on machines without a CUDA device PyTorch runs single-threaded in tests (WTCONV_TEST_THREADS=N
overrides, everywhere). The CPU tests use small tensors, where OpenMP's thread pool only costs time, and on
a loaded two-core machine its spinning threads made small float64 convolutions 1000x slower (1 s, not 1 ms).
GPU machines keep PyTorch's default, since their tests may compute large float64 references on the CPU.

``error_report``: tests record (what, error) figures; the worst of each is printed in the terminal summary,
so a plain ``pytest -q`` run shows the measured agreement, not only pass/fail.
"""

import importlib
import os
from pathlib import Path

import pytest

KERNELS_LIB_ENV = "WTCONV_KERNELS_LIB"


def pytest_configure(config):
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
        module = importlib.import_module("wtconv_export.cuda_kernels")
    except ImportError:
        module = None
    if module is not None and hasattr(module, "find_library"):
        path = module.find_library()
        if path:
            return Path(path), None
    return None, (f"CUDA kernel library not found: build it (cmake -S plugin -B build && cmake --build build) "
                  f"or set {KERNELS_LIB_ENV} to its path")


def cuda_skip_reason():
    return cuda_device_skip_reason() or find_kernels_library()[1]


def tensorrt_skip_reason():
    try:
        import tensorrt  # noqa: F401
    except Exception as error:  # ImportError, or the bindings present but libnvinfer missing (OSError)
        return f"TensorRT is not available ({type(error).__name__}: {error})"
    return None


@pytest.fixture(scope="session")
def require_cuda_device():
    reason = cuda_device_skip_reason()
    if reason:
        pytest.skip(reason)
    import torch
    return torch.cuda.get_device_name()


@pytest.fixture(scope="session")
def require_cuda():
    reason = cuda_skip_reason()
    if reason:
        pytest.skip(reason)
    return find_kernels_library()[0]


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


def pytest_terminal_summary(terminalreporter):
    if _REPORT.worst:
        terminalreporter.section("worst measured errors")
        for name, (error, where) in sorted(_REPORT.worst.items()):
            terminalreporter.write_line(f"{name}: {error:.3e}  {where}")
