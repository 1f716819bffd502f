"""The Python API of wtconv-trt: one function per job, every check and default made inside it.

``import wtconv_trt`` gives these functions by name (wtconv_trt/__init__.py); docs/api.md lists them. Each takes
typed keyword options, returns a result object, and raises a ``WtconvTrtError`` subclass (wtconv_core/errors.py)
with a one-line message for every mistake a user can fix, before any slow work starts and before anything is
written. The ``wtconv-trt`` command line (wtconv_trt/cli.py, commands/) only maps its options onto these
functions and prints their results, so a script and the command line get the same checks, defaults and
messages; the messages name the command-line option (``argument --iterations: ...``, ``-o m.onnx already
exists; pass --force ...``), whose Python keyword has the same name.

- ``models``: ``load_model`` (the shipped default model or a WTConvNeXt with a checkpoint or random weights);
- ``export``: ``export_onnx``; ``onnx_validation``: ``validate_onnx`` (ONNX Runtime, CPU);
- ``engine``: ``build_engine``, ``validate_engine``, ``benchmark_engine`` (TensorRT, trt_engine);
- ``triton``: ``write_triton_repository`` (Triton's TensorRT backend);
- ``serving``: ``write_serving_repository``, ``serve`` (Triton's Python backend), the load test;
- ``libraries``: ``build_libraries``, ``doctor``; ``demo``: ``run_demo``; ``bench_layer``: ``benchmark_layers``.

Heavy packages (torch, onnx, tensorrt) are imported inside the functions, so importing this package is cheap and
works on a machine without TensorRT or a GPU. This package never imports the command line.
"""
