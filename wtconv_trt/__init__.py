"""wtconv-trt's Python API and its command line.

The workflow, one function per job (docs/api.md)::

    import wtconv_trt

    exported = wtconv_trt.export_onnx("digits.onnx")         # the shipped default model
    print(wtconv_trt.validate_onnx("digits.onnx").summary())  # ONNX Runtime vs PyTorch, on the CPU
    built = wtconv_trt.build_engine("digits.onnx")           # TensorRT or TensorRT-RTX, with the plugin found
    report = wtconv_trt.validate_engine(built.engine_path)    # on a GPU the engine runs on
    timings = wtconv_trt.benchmark_engine(built.engine_path)

Every function checks what it is given, takes the defaults the command line takes, and raises a
``WtconvTrtError`` subclass with a one-line message for a mistake a user can fix. The names are imported lazily
(PEP 562): ``import wtconv_trt`` needs neither torch nor TensorRT nor a GPU; a job imports what it uses.

The implementation is in ``wtconv_trt.api`` (one module per job); the ``wtconv-trt`` command line
(``wtconv_trt.cli``, ``wtconv_trt.commands``) maps its options onto these functions and prints their results.
``wtconv_export`` (PyTorch reference, export, ONNX validation) and ``trt_engine`` (TensorRT engines, serving) are
the libraries underneath; they never import this package.
"""

import importlib

from wtconv_core.version import __version__

_EXPORTS = {
    # the workflow
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
