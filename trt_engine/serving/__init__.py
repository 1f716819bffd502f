"""Serving the exported model with Triton Inference Server's Python backend (docs/serving.md).

- repository.py: the model repository (config.pbtxt checked against Triton's schema, model.py, the model files);
- model.py / python_model.py: what Triton runs (model.py is copied into the repository);
- runtimes.py: TensorRT engine, PyTorch on our CUDA kernels, or ONNX Runtime, the best one present;
- server.py: the tritonserver binary of the nvidia-pytriton wheel, started, checked for readiness and stopped;
- load.py: a bounded load generator that matches every response to its request.
"""
