"""TensorRT engines for WTConv / WTConvNeXt models (docs/engines.md).

- ``build``        ONNX -> engine with the WTConv2d plugin, fp32 / fp16 on TensorRT 10 and 11, + manifest
- ``validate``     engine vs the source PyTorch model with Polygraphy
- ``bench``        trtexec-style latency percentiles and throughput, with and without CUDA graphs
- ``triton``       Triton Inference Server model repository
- ``profiles``, ``manifest``, ``plugin_library``: plain-Python pieces (tested on the CPU)
- ``tensorrt_api`` the only module that calls TensorRT

Nothing here imports TensorRT at import time: without it, commands fail with one line saying so.
"""
