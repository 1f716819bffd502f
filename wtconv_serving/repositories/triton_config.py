"""Triton model configurations: one typed description, rendered to config.pbtxt in one place and parsed with Triton's
own schema before anyone writes it; the single place that decides batching, preferred batch sizes, warm-up, instance
groups and labels for every backend (docs/serving.md, "Model configuration")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from wtconv_core.errors import InputError, ServingError
from wtconv_core.inputs import MAX_INT32, check_int
from wtconv_core.options import TRITON_BACKEND_QUEUE_DELAY_US
from wtconv_serving.tuning import Tuning

__all__ = [
    "CLIENT_DTYPES",
    "CudaGraph",
    "DEFAULT_LABELS",
    "DynamicBatching",
    "InstanceGroup",
    "LABELS_FILE",
    "MAX_GPU_INDEX",
    "MAX_INSTANCES",
    "MAX_QUEUE_DELAY_US",
    "MODEL_NAME",
    "ModelConfig",
    "TRITON_DTYPES",
    "TensorConfig",
    "check_gpus",
    "check_model_name",
    "dynamic_batching",
    "label_lines",
    "parse_config",
    "warmup_batch_sizes",
]

# NumPy dtype name -> Triton DataType (model_config.proto).
TRITON_DTYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "bfloat16": "TYPE_BF16",
    "int8": "TYPE_INT8",
    "uint8": "TYPE_UINT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "bool": "TYPE_BOOL",
}
# Triton wire types used by clients (tritonclient InferInput datatype).
CLIENT_DTYPES = {
    "float32": "FP32",
    "float16": "FP16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "int8": "INT8",
    "bool": "BOOL",
}
MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a model name Triton takes (fullmatch)
# Each instance holds its own execution context and activation memory on every GPU it runs on; beyond a few the
# instances only queue behind each other, and a large count exhausts GPU memory when Triton loads the model.
MAX_INSTANCES = 64
MAX_GPU_INDEX = 1023
MAX_QUEUE_DELAY_US = 10**8  # dynamic batching's longest wait: 100 s
LABELS_FILE = "labels.txt"
DEFAULT_LABELS = [str(d) for d in range(10)]  # the shipped default model classifies the digits 0-9


@dataclass(frozen=True)
class TensorConfig:
    """One input or output: its name, NumPy dtype name and dims (without the batch dimension when Triton batches)."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    label_filename: str | None = None  # classification labels of an output


@dataclass(frozen=True)
class DynamicBatching:
    """Triton's dynamic batcher: the batch sizes it prefers to form, how long it waits for them, and its queue policy
    (default_queue_policy): requests beyond ``max_queue_size`` are refused at once, and a request that waited longer
    than ``queue_timeout_us`` is refused (0: no limit for either); a client may ask for a shorter timeout."""

    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = TRITON_BACKEND_QUEUE_DELAY_US
    max_queue_size: int = 0
    queue_timeout_us: int = 0


@dataclass(frozen=True)
class CudaGraph:
    """One CUDA graph the TensorRT backend captures at load (optimization.cuda.graph_spec): for batch ``batch_size``
    and, from ``lower_bound`` up to it, the batches it also serves (their rows beyond the batch are left unset, which a
    model computing each image on its own does not read); ``input``: the input's dims without the batch."""

    batch_size: int
    input_name: str
    input_dims: tuple[int, ...]
    lower_bound: int = 0  # 0: the graph serves batch_size only


@dataclass(frozen=True)
class InstanceGroup:
    """The model's instances: how many per device, on which kind of device, on which GPUs, with which TensorRT
    optimisation profiles."""

    count: int = 1
    kind: str = "KIND_GPU"  # KIND_GPU, KIND_CPU or KIND_MODEL
    gpus: tuple[int, ...] = ()  # empty: every visible GPU
    profiles: tuple[int, ...] = ()  # empty: Triton's default (profile 0 for a TensorRT plan)


@dataclass(frozen=True)
class ModelConfig:
    """A model configuration (Triton's model_config.proto), one field per setting we write."""

    name: str
    inputs: tuple[TensorConfig, ...]
    outputs: tuple[TensorConfig, ...]
    backend: str | None = None  # "python", "onnxruntime"
    platform: str | None = None  # "tensorrt_plan"
    max_batch_size: int = 0  # 0: Triton does not batch (the model's batch dimension is fixed)
    default_model_filename: str | None = None
    dynamic_batching: DynamicBatching | None = None
    instance_group: InstanceGroup = InstanceGroup()
    warmup_batch_sizes: tuple[int, ...] = ()  # a zero-data warm-up request per size (0: a model without batching)
    parameters: tuple[tuple[str, str], ...] = ()  # string parameters the model reads
    op_libraries: tuple[str, ...] = ()  # model_operations.op_library_filename: ONNX Runtime custom-op libraries
    cuda_accelerator: tuple[tuple[str, str], ...] = ()  # the onnxruntime backend's CUDA execution provider options
    cuda_graphs: tuple[CudaGraph, ...] = ()  # the TensorRT backend's CUDA graphs (optimization.cuda)
    labels: tuple[str, ...] | None = field(default=None, compare=False)  # written as LABELS_FILE beside the config

    def render(self) -> str:
        """config.pbtxt text, parsed with Triton's schema (parse_config) before it is returned."""
        lines = [f"name: {_string(self.name)}"]
        if self.backend:
            lines.append(f"backend: {_string(self.backend)}")
        if self.platform:
            lines.append(f"platform: {_string(self.platform)}")
        lines.append(f"max_batch_size: {int(self.max_batch_size)}")
        if self.default_model_filename:
            lines.append(f"default_model_filename: {_string(self.default_model_filename)}")
        for key, tensors in (("input", self.inputs), ("output", self.outputs)):
            lines.append(f"{key} [")
            for i, t in enumerate(tensors):
                lines += [
                    "  {",
                    f"    name: {_string(t.name)}",
                    f"    data_type: {_dtype(t)}",
                    f"    dims: {_ints(t.dims)}",
                ]
                if t.label_filename:
                    lines.append(f"    label_filename: {_string(t.label_filename)}")
                lines.append("  }" + ("," if i < len(tensors) - 1 else ""))
            lines.append("]")
        if self.dynamic_batching is not None:
            batching = self.dynamic_batching
            lines.append("dynamic_batching {")
            if batching.preferred_batch_sizes:
                lines.append(f"  preferred_batch_size: {_ints(batching.preferred_batch_sizes)}")
            lines.append(f"  max_queue_delay_microseconds: {int(batching.max_queue_delay_us)}")
            if batching.max_queue_size or batching.queue_timeout_us:
                lines += [
                    "  default_queue_policy {",
                    f"    max_queue_size: {int(batching.max_queue_size)}",
                    f"    default_timeout_microseconds: {int(batching.queue_timeout_us)}",
                    "    timeout_action: REJECT",
                    "    allow_timeout_override: true",
                    "  }",
                ]
            lines.append("}")
        group = self.instance_group
        lines += ["instance_group [", "  {", f"    count: {int(group.count)}", f"    kind: {group.kind}"]
        if group.gpus:
            lines.append(f"    gpus: {_ints(group.gpus)}")
        if group.profiles:
            lines.append("    profile: [ " + ", ".join(_string(p) for p in group.profiles) + " ]")
        lines += ["  }", "]"]
        for key, value in self.parameters:
            lines += ["parameters {", f"  key: {_string(key)}", f"  value: {{ string_value: {_string(value)} }}", "}"]
        for batch in self.warmup_batch_sizes:
            first = self.inputs[0]
            lines += ["model_warmup {", f'  name: "warmup_batch_{batch}"']
            if batch:
                lines.append(f"  batch_size: {batch}")
            lines += [
                "  inputs {",
                f"    key: {_string(first.name)}",
                f"    value {{ data_type: {_dtype(first)} dims: {_ints(first.dims)} zero_data: true }}",
                "  }",
                "}",
            ]
        for library in self.op_libraries:
            lines.append(f"model_operations {{ op_library_filename: {_string(library)} }}")
        if self.cuda_accelerator or self.cuda_graphs:
            lines.append("optimization {")
            if self.cuda_accelerator:
                options = " ".join(
                    f"parameters {{ key: {_string(k)} value: {_string(v)} }}" for k, v in self.cuda_accelerator
                )
                lines.append(
                    f'  execution_accelerators {{ gpu_execution_accelerator [ {{ name: "cuda" {options} }} ] }}'
                )
            if self.cuda_graphs:
                lines += ["  cuda {", "    graphs: true"]
                for graph in self.cuda_graphs:
                    shape = f"input {{ key: {_string(graph.input_name)} value {{ dim: {_ints(graph.input_dims)} }} }}"
                    lines.append(f"    graph_spec {{ batch_size: {int(graph.batch_size)} {shape}")
                    if graph.lower_bound:
                        lines.append(f"      graph_lower_bound {{ batch_size: {int(graph.lower_bound)} {shape} }}")
                    lines.append("    }")
                lines.append("  }")
            lines.append("}")
        text = "\n".join(lines) + "\n"
        parse_config(text, f"the generated config of {self.name}")
        return text


def _ints(values) -> str:
    return "[ " + ", ".join(str(int(v)) for v in values) + " ]"


def _string(text) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dtype(tensor: TensorConfig) -> str:
    if tensor.dtype not in TRITON_DTYPES:
        raise ServingError(f"tensor {tensor.name!r} has dtype {tensor.dtype}, which Triton does not take")
    return TRITON_DTYPES[tensor.dtype]


def parse_config(text: str, where: str = "config.pbtxt"):
    """The config as Triton's ModelConfig protobuf; ServingError naming the problem when it does not parse."""
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError as error:
        raise ServingError(
            "checking a Triton config needs tritonclient: pip install 'tritonclient[http,grpc]'"
        ) from error
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as error:
        raise ServingError(f"{where} is not a valid Triton model config: {error}") from None


def check_model_name(name: str) -> str:
    """A model name Triton takes: letters, digits, '_', '-', '.'."""
    if not isinstance(name, str) or not MODEL_NAME.fullmatch(name):
        raise InputError(f"name {name!r}: use letters, digits, '_', '-', '.' only", parameter="name")
    return name


def check_gpus(gpus) -> tuple[int, ...]:
    """GPU indices for the instance group: distinct integers from 0 to MAX_GPU_INDEX (None: every visible GPU)."""
    if gpus is None:
        return ()
    gpus = list(gpus)
    if (
        not gpus
        or any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_GPU_INDEX for g in gpus)
        or len(set(gpus)) != len(gpus)
    ):
        raise InputError(
            f"gpus: expected distinct GPU indices from 0 to {MAX_GPU_INDEX}, got {gpus!r}", parameter="gpus"
        )
    return tuple(gpus)


def check_batching_options(instances: int | None, preferred_batch_sizes, max_queue_delay_us: int) -> tuple:
    """(instances, preferred batch sizes or None, queue delay) checked: 1 to MAX_INSTANCES instances (None: the
    backend's default), batch sizes from 1, a delay from 0 to MAX_QUEUE_DELAY_US microseconds."""
    if instances is not None:
        instances = check_int(instances, "instances", 1, MAX_INSTANCES)
    if preferred_batch_sizes is not None:
        preferred_batch_sizes = [check_int(b, "preferred_batch_sizes", 1, MAX_INT32) for b in preferred_batch_sizes]
    return instances, preferred_batch_sizes, check_int(max_queue_delay_us, "max_queue_delay_us", 0, MAX_QUEUE_DELAY_US)


def dynamic_batching(
    max_batch_size: int, preferred_batch_sizes, max_queue_delay_us: int, tuning: Tuning | None = None
) -> DynamicBatching | None:
    """Triton's dynamic batcher for a model that batches (None when max_batch_size is 0), with the queue policy of
    ``tuning``. Preferred batch sizes: those given, else the buckets of ``tuning``. A preferred batch size outside
    1..max_batch_size is refused: Triton would never form it."""
    if max_batch_size <= 0:
        return None
    if preferred_batch_sizes is None and tuning is not None:
        preferred_batch_sizes = tuning.buckets
    preferred = sorted({int(b) for b in preferred_batch_sizes or ()})
    outside = [b for b in preferred if not 1 <= b <= max_batch_size]
    if outside:
        raise InputError(
            f"preferred_batch_sizes {outside}: outside 1..{max_batch_size} (max_batch_size)",
            parameter="preferred_batch_sizes",
        )
    queue = tuning or Tuning(max_queue_size=0, queue_timeout_ms=0)
    return DynamicBatching(
        tuple(preferred), int(max_queue_delay_us), int(queue.max_queue_size), int(queue.queue_timeout_ms) * 1000
    )


def warmup_batch_sizes(max_batch_size: int, input_dims, warmup: bool = True, buckets=()) -> tuple[int, ...]:
    """The warm-up requests a model gets when loaded: one per bucket, else batch 1 and the largest batch (one
    request of batch 0, i.e. the fixed shape, without batching); none when ``warmup`` is off or a dimension is
    dynamic (no shape to send)."""
    if not warmup or any(int(d) <= 0 for d in input_dims):
        return ()
    if max_batch_size <= 0:
        return (0,)
    return tuple(sorted({int(b) for b in buckets} or {1, int(max_batch_size)}))


def label_lines(labels_file=None, default_model: bool = False) -> tuple[str, ...] | None:
    """The classification labels a repository ships: the lines of ``labels_file``, else the digits for the shipped
    default model, else None (no labels)."""
    from pathlib import Path

    if labels_file:
        return tuple(Path(labels_file).read_text(encoding="utf-8").splitlines())
    return tuple(DEFAULT_LABELS) if default_model else None
