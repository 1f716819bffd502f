"""Research benchmarks, profiles and studies: not part of the installed package (the wheel holds what users run:
``wtconv-trt bench`` and ``bench-layer``). Run each from the repository root as ``python -m benchmarks.NAME``, with
the package importable (an editable install, or ``PYTHONPATH`` at the checkout, as the device scripts in ``tools/``
set it). Their results, with the GPU and the command, are committed under docs/bench/ (docs/bench/README.md).

- kernels: ``ab_kernels`` (two builds of the kernels timed interleaved), ``profile_kernels`` (launches for ncu),
  ``ncu_summary`` (a line per profiled launch), ``sass_phases`` (a kernel's instructions by activity, static and
  executed), ``bench_layouts`` (NCHW against channels-last), ``half_arithmetic_study`` (packed-half arithmetic,
  emulated);
- models: ``profile_models`` over ``model_profile`` (WTConvNeXt-T against ConvNeXt-T per kernel),
  ``bench_memory`` over ``memory`` and ``memory_snapshot`` (peak memory);
- runtimes: ``bench_ort`` (ONNX Runtime, CPU and CUDA), ``serving_alternatives`` (the serving runner's choices,
  direct) and ``serving_summary`` (the results of tools/device_serving.sh);
- packaging: ``wheel_size`` (the binary wheel's size per library and per architecture, its manylinux tag, its build).
"""
