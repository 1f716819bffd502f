"""The repository for Triton's onnxruntime backend (``wtconv-trt triton-repo --onnx``,
wtconv_serving/repositories/onnxruntime_backend.py): config.pbtxt checked against Triton's model-configuration schema
(tritonclient's
model_config_pb2, parsed with google.protobuf.text_format) and against the export it serves, and the files it names
run as the backend runs them.

The nvidia-pytriton wheel's tritonserver ships the Python backend only (its backends/ folder holds python/), so no
server runs this repository here. What the backend does with it (triton-inference-server/onnxruntime_backend,
src/onnxruntime.cc) is done in this process instead: ONNX Runtime registers the library the config names by its
path, opens the repository's model.onnx and runs it; its outputs must equal those of the export run directly and
agree with PyTorch.
"""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from test_triton_config import model_config_pb2, parse  # the schema check (skips without tritonclient[grpc])

import wtconv_trt
from wtconv_core.errors import ConfigurationError, InputError
from wtconv_libs import lookup


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    wtconv_trt.export_onnx(out / "digits.onnx")
    wtconv_trt.export_onnx(out / "digits_fp16.onnx", precision="fp16")
    wtconv_trt.export_onnx(out / "digits_std.onnx", ops="standard")
    return {"plugin": out / "digits.onnx", "plugin_fp16": out / "digits_fp16.onnx", "standard": out / "digits_std.onnx"}


def export_io(path):
    """(input name, elem type, dims after the batch axis at the export's size, output name, output dims) read from the
    ONNX file: the graph's own dims, its dynamic ones from the size the exporter records (metadata input_shape)."""
    proto = onnx.load(str(path), load_external_data=False)
    meta = {p.key: p.value for p in proto.metadata_props}
    size = [int(d) for d in meta["wtconv_trt.input_shape"].split(",")]
    inp, out = proto.graph.input[0], proto.graph.output[0]
    dims = [d.dim_value if d.HasField("dim_value") else size[i] for i, d in enumerate(inp.type.tensor_type.shape.dim)]
    out_dims = [d.dim_value for d in out.type.tensor_type.shape.dim][1:]
    return inp.name, inp.type.tensor_type.elem_type, dims[1:], out.name, out_dims


def run_as_the_backend(config, model_dir, x):
    """What the onnxruntime backend does for one CPU instance: register each op library named in the config, open
    the version folder's model file, run it."""
    options = onnxruntime.SessionOptions()
    for library in config.model_operations.op_library_filename:
        options.register_custom_ops_library(library)
    session = onnxruntime.InferenceSession(
        str(model_dir / "1" / config.default_model_filename), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {config.input[0].name: x})[0]


def test_plugin_export_config_and_files(exports, ort_library, tmp_path):
    repo = wtconv_trt.write_onnxruntime_repository(exports["plugin"], tmp_path / "models", ort_library=ort_library)
    config = parse(repo.config.read_text())
    assert config.name == repo.name == "digits" and config.backend == "onnxruntime"
    assert config.default_model_filename == "model.onnx"
    name, elem, dims, out_name, out_dims = export_io(exports["plugin"])
    assert config.max_batch_size == 128  # the export's batch axis is dynamic: Triton batches
    buckets = [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128]  # default_buckets(128)
    assert list(config.dynamic_batching.preferred_batch_size) == buckets
    assert [w.batch_size for w in config.model_warmup] == buckets  # every bucket warmed up at load
    [inp] = config.input
    assert inp.name == name and list(inp.dims) == dims == [1, 32, 32]
    assert elem == onnx.TensorProto.FLOAT and inp.data_type == model_config_pb2.TYPE_FP32
    [out] = config.output
    assert out.name == out_name and list(out.dims) == out_dims == [10] and out.data_type == model_config_pb2.TYPE_FP32
    assert out.label_filename == "labels.txt" and (repo.model_dir / "labels.txt").read_text().split() == list(
        "0123456789"
    )
    assert config.HasField("dynamic_batching") and config.dynamic_batching.max_queue_delay_microseconds == 100
    # The library: copied beside the model, named by its absolute path, the same bytes.
    [library] = config.model_operations.op_library_filename
    copy = repo.model_dir / "libwtconv_ort.so"
    assert library == str(copy.resolve()) == repo.library_in_server and repo.ort_library == copy
    assert copy.read_bytes() == ort_library.read_bytes()
    assert (repo.model_dir / "1" / "model.onnx").read_bytes() == exports["plugin"].read_bytes()
    [group] = config.instance_group
    gpu = lookup.ort_library_info(ort_library)["cuda"] == "yes"
    assert group.count == (2 if gpu else 1)
    assert group.kind == (
        model_config_pb2.ModelInstanceGroup.KIND_GPU if gpu else model_config_pb2.ModelInstanceGroup.KIND_CPU
    )
    assert bool(repo.note) == (not gpu)
    subprocess.run(["bash", "-n", str(repo.serve_script)], check=True)
    assert 'exec tritonserver --model-repository="$HERE"' in repo.serve_script.read_text()

    # The files the config names, run as the backend runs them: the export's outputs, PyTorch's within fp32.
    model, _ = wtconv_trt.load_model()
    x = np.random.default_rng(1).standard_normal((8, 1, 32, 32)).astype(np.float32)
    got = run_as_the_backend(config, repo.model_dir, x)
    direct = onnxruntime.SessionOptions()
    direct.register_custom_ops_library(str(ort_library))
    expected = onnxruntime.InferenceSession(str(exports["plugin"]), direct, providers=["CPUExecutionProvider"])
    assert np.array_equal(got, expected.run(None, {"input": x})[0])
    with torch.no_grad():
        reference = model(torch.from_numpy(x)).numpy()
    assert np.abs(got - reference).max() <= 1e-5 * np.abs(reference).max()


def test_gpu_instances_get_tf32_by_precision_and_a_cheap_cudnn_search(exports, ort_library, tmp_path):
    """KIND_GPU instances: the CUDA execution provider's options (the backend passes the "cuda" accelerator's
    parameters to it): TF32 off for an fp32 export, on for fp16, and cuDNN's HEURISTIC search, which re-plans a Conv
    for a new batch size in milliseconds (the backend keeps no plan per size and cannot replay CUDA graphs); the same
    search as the model parameter the backend also reads (0/1/2, and EXHAUSTIVE when absent). --server-path names
    the library where a container mounts the repository; --gpus, --instances and preferred batches."""
    repo = wtconv_trt.write_onnxruntime_repository(
        exports["plugin"],
        tmp_path / "models",
        ort_library=ort_library,
        instance_kind="gpu",
        instances=2,
        gpus=[0, 1],
        max_batch_size=64,
        preferred_batch_sizes=[16, 64],
        server_path="/models",
    )
    config = parse(repo.config_text)
    [group] = config.instance_group
    assert (
        group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU and group.count == 2 and list(group.gpus) == [0, 1]
    )
    assert config.max_batch_size == 64 and list(config.dynamic_batching.preferred_batch_size) == [16, 64]
    assert list(config.model_operations.op_library_filename) == ["/models/digits/libwtconv_ort.so"]
    [accelerator] = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "cuda"
    assert dict(accelerator.parameters) == {"use_tf32": "0", "cudnn_conv_algo_search": "HEURISTIC"}
    assert config.parameters["cudnn_conv_algo_search"].string_value == "1"
    half = wtconv_trt.write_onnxruntime_repository(
        exports["plugin_fp16"],
        tmp_path / "models",
        name="digits_fp16",
        ort_library=ort_library,
        instance_kind="gpu",
        cudnn_search="EXHAUSTIVE",
    )
    config = parse(half.config_text)
    [accelerator] = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert dict(accelerator.parameters) == {"use_tf32": "1", "cudnn_conv_algo_search": "EXHAUSTIVE"}
    assert config.parameters["cudnn_conv_algo_search"].string_value == "0"
    assert half.name == "digits_fp16" and config.instance_group[0].count == 4  # docs/serving.md, "Instances"
    assert config.input[0].data_type == config.output[0].data_type == model_config_pb2.TYPE_FP16


def test_standard_export_needs_no_library(exports, tmp_path):
    repo = wtconv_trt.write_onnxruntime_repository(exports["standard"], tmp_path / "models", name="std")
    config = parse(repo.config_text)
    assert not config.HasField("model_operations") and repo.ort_library is None
    assert not (repo.model_dir / "libwtconv_ort.so").exists()
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU  # the production recipe
    x = np.random.default_rng(2).standard_normal((3, 1, 32, 32)).astype(np.float32)
    model, _ = wtconv_trt.load_model()
    with torch.no_grad():
        reference = model(torch.from_numpy(x)).numpy()
    got = run_as_the_backend(config, repo.model_dir, x)
    assert np.abs(got - reference).max() <= 1e-5 * np.abs(reference).max()


def test_refusals(exports, ort_library, tmp_path, monkeypatch):
    """WTConv2d nodes and no library anywhere; a model folder that holds files; nothing written by either."""
    monkeypatch.delenv(lookup.ENV_VARS["ort"], raising=False)
    monkeypatch.setattr(lookup, "ort_library", lambda: None)
    with pytest.raises(ConfigurationError, match="has 5 WTConv2d nodes, which Triton's onnxruntime backend runs with"):
        wtconv_trt.write_onnxruntime_repository(exports["plugin"], tmp_path / "models")
    assert not (tmp_path / "models").exists()
    wtconv_trt.write_onnxruntime_repository(exports["plugin"], tmp_path / "models", ort_library=ort_library)
    before = (tmp_path / "models" / "digits" / "config.pbtxt").read_bytes()
    with pytest.raises(InputError, match="already exists and is not empty; pass force=True"):
        wtconv_trt.write_onnxruntime_repository(
            exports["plugin"], tmp_path / "models", ort_library=ort_library, max_batch_size=8
        )
    assert (tmp_path / "models" / "digits" / "config.pbtxt").read_bytes() == before
    again = wtconv_trt.write_onnxruntime_repository(
        exports["plugin"], tmp_path / "models", ort_library=ort_library, max_batch_size=8, force=True
    )
    assert parse(again.config_text).max_batch_size == 8
