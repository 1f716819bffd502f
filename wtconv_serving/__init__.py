"""Triton Inference Server: one model-configuration writer, the repositories for the Python, onnxruntime and TensorRT
backends, the server, the load test and the served runtimes (docs/serving.md)."""
