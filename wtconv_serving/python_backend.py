"""A Triton model repository for the Python backend (``wtconv-trt serve`` / ``triton-repo --backend python``).

Layout written under DIR (the model repository)::

    DIR/<name>/config.pbtxt     backend "python", max_batch_size, I/O names and types of the model (fp16 I/O for an
                                fp16 export), dynamic batching, instance group, warm-up, parameters (runtime,
                                file names, the environment's site-packages)
    DIR/<name>/1/model.py       wtconv_serving/model.py (hands over to wtconv_serving.python_model)
    DIR/<name>/1/model.onnx     the exported ONNX model (ONNX Runtime, and the PyTorch model's metadata)
    DIR/<name>/1/model.plan     the TensorRT engine and model.plan.json, its manifest, when given
    DIR/<name>/libwtconv_ort.so the ONNX Runtime op library for the WTConv2d nodes (runtime onnxruntime or auto), when
                                one is found or given
    DIR/<name>/labels.txt       digit labels for the shipped default model

The served model runs the best runtime present where the server runs (wtconv_serving/runtimes.py) unless
the config's ``runtime`` parameter names one; ``ort_device`` says where ONNX Runtime runs it (cpu, or cuda: the
instance's GPU through the CUDA execution provider, with KIND_GPU instances). The config is parsed into Triton's
ModelConfig protobuf before it is written, so a server never sees a config that does not parse.
"""

from __future__ import annotations

import os
import shutil
import site
from pathlib import Path

from trt_engine import manifest as mf
from wtconv_core.errors import InputError, ModelError, ServingError
from wtconv_core.files import atomic_write_bytes, atomic_write_json
from wtconv_core.inputs import MAX_INT32, check_choice, check_int
from wtconv_serving.tensorrt_backend import MAX_INSTANCES, MAX_QUEUE_DELAY_US, TRITON_DTYPES, plan_batching

DEFAULT_MAX_BATCH = 32
MAX_THREADS = 1024  # ONNX Runtime intra-op threads
INSTANCE_KINDS = {"auto": None, "cpu": "KIND_CPU", "gpu": "KIND_GPU", "model": "KIND_MODEL"}
ONNX_TYPES = {1: "float32", 10: "float16"}  # onnx.TensorProto.FLOAT, FLOAT16
MODEL_TEMPLATE = Path(__file__).with_name("model.py")


def environment_paths() -> list:
    """The site-packages the backend stub must see: PYTHONPATH's entries (the stub ignores the variable itself),
    this environment's site-packages, and the folder holding trt_engine (a source checkout not installed)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p)]
    paths += [p for p in site.getsitepackages() if p not in paths]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        paths.append(site.getusersitepackages())
    project = str(Path(__file__).resolve().parents[2])
    if project not in paths:
        paths.append(project)
    return paths


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


def check_repository(repo) -> list:
    """Every model folder of ``repo`` has a config.pbtxt that parses and a version folder; returns the model
    names. ServingError (one line) otherwise."""
    repo = Path(repo)
    if not repo.is_dir():
        raise ServingError(
            f"model repository {repo} does not exist; write one with: wtconv-trt serve MODEL.onnx "
            f"--repo {repo} --write-only"
        )
    names = []
    for model_dir in sorted(p for p in repo.iterdir() if p.is_dir()):
        config = model_dir / "config.pbtxt"
        if not config.is_file():
            raise ServingError(f"{model_dir} has no config.pbtxt: not a Triton model folder")
        parsed = parse_config(config.read_text(encoding="utf-8"), str(config))
        if parsed.name and parsed.name != model_dir.name:
            raise ServingError(f"{config} names the model {parsed.name!r} but its folder is {model_dir.name!r}")
        if not any(p.is_dir() and p.name.isdigit() for p in model_dir.iterdir()):
            raise ServingError(f"{model_dir} has no version folder (e.g. {model_dir}/1)")
        names.append(model_dir.name)
    if not names:
        raise ServingError(f"model repository {repo} holds no model folder")
    return names


def describe_onnx(onnx_path) -> dict:
    """Input/output names, element types and dims of an exported model, its metadata and its number of WTConv2d
    nodes."""
    import onnx

    from wtconv_export.onnx_export import read_metadata

    if not Path(onnx_path).is_file():
        raise ModelError(f"{onnx_path} does not exist; export one with: wtconv-trt export -o {onnx_path}")
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as error:
        raise ModelError(f"{onnx_path} is not a readable ONNX model: {error}") from None
    if len(proto.graph.input) != 1 or not proto.graph.output:
        raise ModelError(f"{onnx_path} has {len(proto.graph.input)} inputs; serving handles single-input models")

    def tensor(value):
        kind = value.type.tensor_type
        if kind.elem_type not in ONNX_TYPES:
            raise ModelError(
                f"{onnx_path}: tensor {value.name!r} has element type {kind.elem_type}; serving takes "
                f"float32 or float16 models"
            )
        dims = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in kind.shape.dim]
        return {"name": value.name, "dtype": ONNX_TYPES[kind.elem_type], "shape": dims}

    from wtconv_export.contract import count_wtconv_nodes

    return {
        "input": tensor(proto.graph.input[0]),
        "output": tensor(proto.graph.output[0]),
        "metadata": read_metadata(proto),
        "wtconv_nodes": count_wtconv_nodes(proto),
    }


def plan_from_onnx(description: dict, max_batch_size: int | None) -> tuple:
    """(max_batch_size, input dims, output dims) for an ONNX model: a dynamic batch axis gets Triton batching
    up to ``max_batch_size`` (default 32); other dims come from the model's native input shape in its metadata
    where the graph leaves them dynamic (so Triton refuses other sizes before the model sees them)."""
    shape = description["input"]["shape"]
    native = description["metadata"].get("input_shape")
    native = [int(d) for d in native.split(",")] if native else None
    dims = [d if d != -1 or native is None else native[i] for i, d in enumerate(shape)]
    out_dims = description["output"]["shape"]
    if shape[0] == -1:
        batch = DEFAULT_MAX_BATCH if max_batch_size is None else int(max_batch_size)
        if batch < 1:
            raise ServingError(f"--max-batch-size must be >= 1 for a model with a dynamic batch axis, got {batch}")
        return batch, dims[1:], out_dims[1:]
    return 0, dims, out_dims


def pbtxt_dims(values) -> str:
    """A list of integers in a config.pbtxt: ``[ 1, 32, 32 ]``."""
    return "[ " + ", ".join(str(int(v)) for v in values) + " ]"


def pbtxt_string(text) -> str:
    """A quoted string in a config.pbtxt (backslashes and quotes escaped)."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_python_config(
    *,
    name: str,
    input_desc: dict,
    output_desc: dict,
    max_batch_size: int,
    input_dims,
    output_dims,
    parameters: dict,
    instances: int = 1,
    instance_kind: str = "KIND_CPU",
    preferred_batch_sizes=None,
    max_queue_delay_us: int = 500,
    warmup: bool = True,
    labels: bool = False,
) -> str:
    """config.pbtxt text for the Python-backend model (parsed with parse_config before it is returned)."""
    if instances < 1:
        raise ServingError(f"--instances must be >= 1, got {instances}")
    dims, quoted = pbtxt_dims, pbtxt_string
    in_type, out_type = TRITON_DTYPES[input_desc["dtype"]], TRITON_DTYPES[output_desc["dtype"]]
    lines = [
        f"name: {quoted(name)}",
        'backend: "python"',
        f"max_batch_size: {int(max_batch_size)}",
        "input [",
        "  {",
        f"    name: {quoted(input_desc['name'])}",
        f"    data_type: {in_type}",
        f"    dims: {dims(input_dims)}",
        "  }",
        "]",
        "output [",
        "  {",
        f"    name: {quoted(output_desc['name'])}",
        f"    data_type: {out_type}",
        f"    dims: {dims(output_dims)}",
    ]
    if labels:
        lines.append('    label_filename: "labels.txt"')
    lines += ["  }", "]"]
    if max_batch_size > 0:
        preferred = sorted({int(b) for b in (preferred_batch_sizes or []) if 1 <= int(b) <= max_batch_size})
        lines.append("dynamic_batching {")
        if preferred:
            lines.append(f"  preferred_batch_size: {dims(preferred)}")
        lines += [f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}", "}"]
    lines += ["instance_group [", "  {", f"    count: {int(instances)}", f"    kind: {instance_kind}", "  }", "]"]
    for key, value in parameters.items():
        lines += ["parameters {", f"  key: {quoted(key)}", f"  value: {{ string_value: {quoted(value)} }}", "}"]
    if warmup and all(d > 0 for d in input_dims):
        sizes = sorted({1, max_batch_size}) if max_batch_size > 0 else [0]
        for b in sizes:
            lines += ["model_warmup {", f'  name: "warmup_batch_{b}"']
            if b:
                lines.append(f"  batch_size: {b}")
            lines += [
                "  inputs {",
                f"    key: {quoted(input_desc['name'])}",
                f"    value {{ data_type: {in_type} dims: {dims(input_dims)} zero_data: true }}",
                "  }",
                "}",
            ]
    text = "\n".join(lines) + "\n"
    parse_config(text, f"the generated config of {name}")
    return text


def default_model_name(onnx_path, metadata: dict) -> str:
    """The model's name in the repository when none is given: 'digits' for the shipped default model, else the
    ONNX file's name up to its first dot, with characters Triton does not take in a name replaced by '_'."""
    import re

    if metadata.get("source") == "default":
        return "digits"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(onnx_path).name.split(".")[0]) or "model"


def check_repository_options(
    onnx,
    out,
    *,
    runtime: str = "auto",
    max_batch_size: int | None = None,
    instances: int = 1,
    instance_kind: str = "auto",
    max_queue_delay_us: int = 500,
    threads: int = 0,
    device: str = "auto",
    ort_library=None,
) -> dict:
    """The options of write_python_repository checked, in the order ``wtconv-trt serve`` reports them, before
    anything is read or written; returns the ONNX model's description (describe_onnx)."""
    from wtconv_core.paths import check_output_dir
    from wtconv_ort.execution import check_ort_library
    from wtconv_serving.runtimes import ORT_DEVICES, RUNTIMES

    if max_batch_size is not None:
        check_int(max_batch_size, "--max-batch-size", 1, MAX_INT32)
    check_int(instances, "--instances", 1, MAX_INSTANCES)
    check_choice(instance_kind, "--instance-kind", tuple(INSTANCE_KINDS) + tuple(INSTANCE_KINDS.values())[1:])
    check_int(max_queue_delay_us, "--max-queue-delay-us", 0, MAX_QUEUE_DELAY_US)
    check_int(threads, "--threads", 0, MAX_THREADS)
    check_choice(runtime, "--runtime", ("auto", *RUNTIMES))
    check_choice(device, "--device", ORT_DEVICES)
    if device != "auto" and runtime not in ("auto", "onnxruntime"):
        raise InputError(
            f"--device {device} says where ONNX Runtime runs the model: it applies with --runtime onnxruntime (or "
            f"auto), not {runtime}, which runs on the GPU"
        )
    if ort_library is not None:
        check_ort_library(ort_library)
    check_output_dir(out, option="--repo", force=True)  # an existing model folder needs force: write_python_repository
    if not str(onnx).endswith(".onnx"):
        raise InputError(f"{onnx}: give the exported ONNX model (MODEL.onnx); an engine goes with --engine")
    return describe_onnx(onnx)


def write_python_repository(
    onnx,
    out,
    *,
    name: str | None = None,
    engine=None,
    plugin=None,
    runtime: str = "auto",
    max_batch_size: int | None = None,
    instances: int = 1,
    instance_kind: str = "auto",
    preferred_batch_sizes=None,
    max_queue_delay_us: int = 500,
    warmup: bool = True,
    threads: int = 0,
    force: bool = False,
    device: str = "auto",
    ort_library=None,
) -> dict:
    """Write the repository; returns {"model_dir", "config", "config_text", "max_batch_size", "name",
    "ort_device", "ort_library", "description"} (description: the ONNX model's, describe_onnx).

    name: default default_model_name. device: where the onnxruntime runtime runs the model, "cpu", "cuda" (the
    instance's GPU, CUDA execution provider) or "auto" (cuda where onnxruntime-gpu and, for WTConv2d nodes, the
    library's CUDA op exist on this machine, else cpu). ort_library: libwtconv_ort.so for the WTConv2d nodes (default:
    the one found in lookup order), copied into the model's folder. Every option is checked first
    (check_repository_options); an existing model folder that holds files is replaced only with ``force``."""
    description = check_repository_options(
        onnx,
        out,
        runtime=runtime,
        max_batch_size=max_batch_size,
        instances=instances,
        instance_kind=instance_kind,
        max_queue_delay_us=max_queue_delay_us,
        threads=threads,
        device=device,
        ort_library=ort_library,
    )
    onnx = Path(onnx)
    name = name or default_model_name(onnx, description["metadata"])
    batch, input_dims, output_dims = plan_from_onnx(description, max_batch_size)
    if engine:
        from trt_engine.engine_file import check_engine_request

        plan = plan_batching(check_engine_request(engine).manifest)
        batch = plan.max_batch_size if max_batch_size is None else min(int(max_batch_size), plan.max_batch_size)
    ort_device = None
    if runtime in ("auto", "onnxruntime"):
        from wtconv_libs import lookup
        from wtconv_serving.runtimes import resolve_ort_device

        if description["wtconv_nodes"] and ort_library is None:
            ort_library = lookup.ort_library()  # None: the stub falls back to the Python op (CPU), and says so
        ort_device = device if device != "auto" else resolve_ort_device("auto", onnx, ort_library)[0]
    if instance_kind == "auto":
        if runtime == "onnxruntime":
            instance_kind = "KIND_GPU" if ort_device == "cuda" else "KIND_CPU"
        else:
            instance_kind = "KIND_GPU" if runtime != "auto" else "KIND_MODEL"
    else:
        instance_kind = INSTANCE_KINDS.get(instance_kind, instance_kind)
    out = Path(out)
    model_dir = out / name
    if model_dir.exists() and any(model_dir.iterdir()):
        if not force:
            raise ServingError(f"{model_dir} already exists and is not empty; pass --force to overwrite it")
        shutil.rmtree(model_dir)
    version = model_dir / "1"
    version.mkdir(parents=True, exist_ok=True)
    parameters = {"runtime": runtime, "onnx_file": "model.onnx", "site_packages": os.pathsep.join(environment_paths())}
    if engine:
        parameters["engine_file"] = "model.plan"
    if plugin:
        parameters["plugin"] = Path(plugin).name  # in the model's folder (python_model._model_file)
    if ort_device:
        parameters["ort_device"] = ort_device
    if ort_library and description["wtconv_nodes"]:
        parameters["ort_library"] = Path(ort_library).name
    if threads:
        parameters["threads"] = str(int(threads))
    labels = description["metadata"].get("source") == "default"
    config = make_python_config(
        name=name,
        input_desc=description["input"],
        output_desc=description["output"],
        max_batch_size=batch,
        input_dims=input_dims,
        output_dims=output_dims,
        parameters=parameters,
        instances=instances,
        instance_kind=instance_kind,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=max_queue_delay_us,
        warmup=warmup,
        labels=labels,
    )
    shutil.copyfile(onnx, version / "model.onnx")
    if engine:
        shutil.copyfile(engine, version / "model.plan")
        atomic_write_json(mf.manifest_path(version / "model.plan"), mf.read_manifest(engine))
    if plugin:
        shutil.copyfile(plugin, model_dir / Path(plugin).name)
    if "ort_library" in parameters:
        shutil.copyfile(ort_library, model_dir / parameters["ort_library"])
    shutil.copyfile(MODEL_TEMPLATE, version / "model.py")
    if labels:
        atomic_write_bytes(model_dir / "labels.txt", ("\n".join(str(d) for d in range(10)) + "\n").encode())
    atomic_write_bytes(model_dir / "config.pbtxt", config.encode())
    return {
        "model_dir": model_dir,
        "config": model_dir / "config.pbtxt",
        "config_text": config,
        "max_batch_size": batch,
        "name": name,
        "ort_device": ort_device,
        "ort_library": model_dir / parameters["ort_library"] if "ort_library" in parameters else None,
        "description": description,
    }


__all__ = [
    "check_repository_options",
    "default_model_name",
    "write_python_repository",
    "make_python_config",
    "parse_config",
    "check_repository",
    "describe_onnx",
    "environment_paths",
    "pbtxt_dims",
    "pbtxt_string",
    "DEFAULT_MAX_BATCH",
]
