"""wtconv-trt's Python API (one function per job, imported lazily: no torch, TensorRT or GPU needed to import it)
and, on it, the ``wtconv-trt`` command line (docs/api.md)."""

import importlib

from wtconv_core.version import __version__

_EXPORTS = {
    # the workflow
    "ModelSource": "wtconv_core.options",
    "load_model": ".api.models",
    "export_onnx": ".api.export",
    "validate_onnx": ".api.onnx_validation",
    "build_engine": ".api.engine",
    "validate_engine": ".api.engine",
    "benchmark_engine": ".api.engine",
    "write_triton_repository": ".api.triton",
    "write_onnxruntime_repository": ".api.triton",
    "write_serving_repository": ".api.serving",
    "serve": ".api.serving",
    # the libraries and the machine
    "build_libraries": ".api.libraries",
    "doctor": ".api.libraries",
    "ort_library": ".api.libraries",
    # the demonstration and the kernel benchmark
    "run_demo": ".api.demo",
    "benchmark_layers": ".api.bench_layer",
    # the errors a user can fix (wtconv_core/errors.py)
    "WtconvTrtError": "wtconv_core.errors",
    "InputError": "wtconv_core.errors",
    "ModelError": "wtconv_core.errors",
    "ExportError": "wtconv_core.errors",
    "ConfigurationError": "wtconv_core.errors",
    "PluginError": "wtconv_core.errors",
    "EngineError": "wtconv_core.errors",
    "ServingError": "wtconv_core.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
