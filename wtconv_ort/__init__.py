"""ONNX Runtime sessions for our exports: the custom-op library registered, the execution provider chosen, TF32 off
(docs/onnx_runtime.md)."""
