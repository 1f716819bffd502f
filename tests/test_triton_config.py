"""The one Triton model-configuration writer (wtconv_serving.repositories.triton_config), tested once for every
backend: each
field rendered and parsed with Triton's own schema (tritonclient's model_config_pb2, google.protobuf.text_format),
and the decisions it alone makes (batching, preferred sizes, warm-up, instance groups, labels) with the same refusal
from the Python, onnxruntime and TensorRT backends' configs."""

from __future__ import annotations

import pytest
from engine_helpers import fake_engine

from wtconv_core.errors import InputError
from wtconv_serving.repositories.repository import ModelFolder, write_model_folder
from wtconv_serving.repositories.triton_config import (
    CudaGraph,
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    TensorConfig,
    check_gpus,
    check_model_name,
    dynamic_batching,
    label_lines,
    warmup_batch_sizes,
)
from wtconv_serving.tuning import Tuning

model_config_pb2 = pytest.importorskip(
    "tritonclient.grpc.model_config_pb2",
    reason="tritonclient[grpc] is not installed (pip install 'tritonclient[grpc]')",
)
text_format = pytest.importorskip("google.protobuf.text_format")


def parse(text):
    """Triton's schema check: raises ParseError on any field or enum not in model_config.proto."""
    config = model_config_pb2.ModelConfig()
    text_format.Parse(text, config)
    return config


def test_every_field_renders_as_triton_reads_it():
    config = ModelConfig(
        name="digits",
        backend="onnxruntime",
        max_batch_size=16,
        default_model_filename="model.onnx",
        inputs=(TensorConfig("input", "float16", (1, 32, 32)),),
        outputs=(TensorConfig("output", "float16", (10,), "labels.txt"),),
        dynamic_batching=DynamicBatching((4, 16), 250, max_queue_size=64, queue_timeout_us=2_000_000),
        instance_group=InstanceGroup(count=2, kind="KIND_GPU", gpus=(0, 1), profiles=(0, 1)),
        warmup_batch_sizes=(1, 16),
        parameters=(("runtime", "onnxruntime"), ("quoted", 'a "b" \\c')),
        op_libraries=("/models/digits/libwtconv_ort.so",),
        cuda_accelerator=(("use_tf32", "0"), ("cudnn_conv_algo_search", "HEURISTIC")),
        cuda_graphs=(CudaGraph(1, "input", (1, 32, 32)), CudaGraph(16, "input", (1, 32, 32), lower_bound=5)),
    )
    parsed = parse(config.render())
    assert (parsed.name, parsed.backend, parsed.max_batch_size) == ("digits", "onnxruntime", 16)
    assert parsed.default_model_filename == "model.onnx" and parsed.platform == ""
    [inp], [out] = parsed.input, parsed.output
    assert (inp.name, inp.data_type, list(inp.dims)) == ("input", model_config_pb2.TYPE_FP16, [1, 32, 32])
    assert (out.name, list(out.dims), out.label_filename) == ("output", [10], "labels.txt")
    assert list(parsed.dynamic_batching.preferred_batch_size) == [4, 16]
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 250
    policy = parsed.dynamic_batching.default_queue_policy
    assert (policy.max_queue_size, policy.default_timeout_microseconds) == (64, 2_000_000)
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT and policy.allow_timeout_override
    [group] = parsed.instance_group
    assert (group.count, group.kind, list(group.gpus), list(group.profile)) == (
        2,
        model_config_pb2.ModelInstanceGroup.KIND_GPU,
        [0, 1],
        ["0", "1"],
    )
    assert [(w.name, w.batch_size) for w in parsed.model_warmup] == [("warmup_batch_1", 1), ("warmup_batch_16", 16)]
    assert all(w.inputs["input"].zero_data and list(w.inputs["input"].dims) == [1, 32, 32] for w in parsed.model_warmup)
    assert {k: v.string_value for k, v in parsed.parameters.items()} == {
        "runtime": "onnxruntime",
        "quoted": 'a "b" \\c',
    }
    assert list(parsed.model_operations.op_library_filename) == ["/models/digits/libwtconv_ort.so"]
    [accelerator] = parsed.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "cuda"
    assert dict(accelerator.parameters) == {"use_tf32": "0", "cudnn_conv_algo_search": "HEURISTIC"}
    cuda = parsed.optimization.cuda
    assert cuda.graphs and [g.batch_size for g in cuda.graph_spec] == [1, 16]
    assert list(cuda.graph_spec[1].input["input"].dim) == [1, 32, 32]
    assert not cuda.graph_spec[0].HasField("graph_lower_bound")
    bound = cuda.graph_spec[1].graph_lower_bound
    assert bound.batch_size == 5 and list(bound.input["input"].dim) == [1, 32, 32]


def test_the_least_config_and_a_platform():
    parsed = parse(
        ModelConfig(
            name="m",
            platform="tensorrt_plan",
            inputs=(TensorConfig("x", "float32", (4, 1, 8, 8)),),
            outputs=(TensorConfig("y", "float32", (4, 10)),),
        ).render()
    )
    assert parsed.platform == "tensorrt_plan" and parsed.max_batch_size == 0
    assert not parsed.HasField("dynamic_batching") and not parsed.model_warmup and not parsed.parameters
    assert parsed.instance_group[0].count == 1 and list(parsed.instance_group[0].gpus) == []


def test_batching_is_decided_in_one_place():
    assert dynamic_batching(0, [4], 100) is None  # a fixed batch: Triton does not batch
    assert dynamic_batching(32, [8, 32, 8], 100) == DynamicBatching((8, 32), 100)
    assert dynamic_batching(32, None, 7) == DynamicBatching((), 7)
    # With the tuning: its buckets are the preferred sizes, its queue policy the batcher's (ms -> us).
    tuning = Tuning(max_queue_size=9, queue_timeout_ms=250).with_max_batch(32)
    assert dynamic_batching(32, None, 7, tuning) == DynamicBatching((1, 2, 4, 8, 16, 32), 7, 9, 250_000)
    assert dynamic_batching(32, [8], 7, tuning).preferred_batch_sizes == (8,)
    with pytest.raises(InputError, match=r"^preferred_batch_sizes \[0, 64\]: outside 1..32 \(max_batch_size\)$"):
        dynamic_batching(32, [0, 8, 64], 100)


def _preferred_64(backend, tmp_path):
    """Each backend's config of a model that batches up to 32, asked to prefer batches of 64."""
    if backend == "tensorrt":
        from wtconv_serving.repositories.tensorrt_backend import tensorrt_config

        _, manifest = fake_engine(tmp_path)
        return tensorrt_config(manifest, name="m", preferred_batch_sizes=[64])
    description = {
        "input": {"name": "input", "dtype": "float32", "shape": [-1, 1, 32, 32]},
        "output": {"name": "output", "dtype": "float32", "shape": [-1, 10]},
        "metadata": {},
    }
    if backend == "onnxruntime":
        from wtconv_serving.repositories.onnxruntime_backend import onnxruntime_config

        return onnxruntime_config(description, name="m", max_batch_size=32, preferred_batch_sizes=[64])
    from wtconv_serving.repositories.python_backend import python_config

    return python_config(
        description,
        name="m",
        max_batch_size=32,
        input_dims=[1, 32, 32],
        output_dims=[10],
        parameters={},
        preferred_batch_sizes=[64],
    )


@pytest.mark.parametrize("backend", ["python", "onnxruntime", "tensorrt"])
def test_every_backend_refuses_a_preferred_batch_outside_its_range_alike(backend, tmp_path):
    """The Python backend used to drop such a size without a word; now all three refuse it with one message."""
    with pytest.raises(InputError) as error:
        _preferred_64(backend, tmp_path)
    assert str(error.value) == "preferred_batch_sizes [64]: outside 1..32 (max_batch_size)"
    assert error.value.parameter == "preferred_batch_sizes"


def test_warmup_sizes():
    assert warmup_batch_sizes(16, [1, 32, 32]) == (1, 16)
    assert warmup_batch_sizes(16, [1, 32, 32], buckets=(16, 1, 4)) == (1, 4, 16)  # one request per bucket
    assert warmup_batch_sizes(1, [1, 32, 32]) == (1,)
    assert warmup_batch_sizes(0, [4, 1, 32, 32]) == (0,)  # no batching: one request of the fixed shape
    assert warmup_batch_sizes(16, [1, -1, -1]) == ()  # a dynamic dimension: no shape to send
    assert warmup_batch_sizes(16, [1, 32, 32], warmup=False) == ()


def test_labels_are_written_beside_the_config(tmp_path):
    given = tmp_path / "classes.txt"
    given.write_text("cat\ndog\n")
    assert label_lines(given) == ("cat", "dog")
    assert label_lines(None, default_model=True) == tuple(str(d) for d in range(10))
    assert label_lines(None) is None
    model_dir = tmp_path / "repo" / "m"
    config = ModelConfig(
        name="m",
        inputs=(TensorConfig("x", "float32", (8,)),),
        outputs=(TensorConfig("y", "float32", (2,), "labels.txt"),),
        labels=label_lines(given),
    )
    assert parse(write_model_folder(ModelFolder(model_dir, config))).output[0].label_filename == "labels.txt"
    assert (model_dir / "labels.txt").read_text() == "cat\ndog\n"
    assert parse((model_dir / "config.pbtxt").read_text()) == parse(config.render())


def test_names_and_gpus_are_checked():
    assert check_model_name("wtconvnext_tiny-1.0") == "wtconvnext_tiny-1.0"
    with pytest.raises(InputError, match="name 'bad name': use letters"):
        check_model_name("bad name")
    assert check_gpus(None) == () and check_gpus([1, 0]) == (1, 0)
    for bad in ([], [0, 0], [-1], [True], [1024]):
        with pytest.raises(InputError, match="gpus: expected distinct GPU indices"):
            check_gpus(bad)


def test_a_type_triton_does_not_take_is_refused():
    from wtconv_core.errors import ServingError

    config = ModelConfig(name="m", inputs=(TensorConfig("x", "complex64", (2,)),), outputs=())
    with pytest.raises(ServingError, match="dtype complex64"):
        config.render()
