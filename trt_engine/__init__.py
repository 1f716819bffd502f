"""TensorRT engines: building with the WTConv2d plugin, the manifest, opening engine files, profiles, latency
benchmarks (docs/engines.md). Only ``tensorrt_api`` calls TensorRT, and nothing imports it at import time."""
