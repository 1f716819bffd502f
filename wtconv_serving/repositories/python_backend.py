"""A model repository for Triton's Python backend (``wtconv-trt serve``): the export, an engine when given, and
model.py, which runs the best runtime present where the server runs (docs/serving.md, "The repository")."""

from __future__ import annotations

import os
import site
from dataclasses import dataclass, field
from pathlib import Path

from trt_engine.engine_file import OpenedEngine
from trt_engine.manifest import manifest_path
from wtconv_core.errors import InputError
from wtconv_core.inputs import MAX_INT32, check_choice, check_int
from wtconv_core.options import PYTHON_BACKEND_QUEUE_DELAY_US, RepositoryOptions, refuse_others
from wtconv_export.exported import ExportedModel
from wtconv_serving.repositories.repository import (
    ModelFolder,
    check_model_dir,
    default_model_name,
    describe_export,
    onnx_batching,
    write_model_folder,
)
from wtconv_serving.repositories.triton_config import (
    MAX_INSTANCES,
    MAX_QUEUE_DELAY_US,
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

__all__ = [
    "INSTANCE_KINDS",
    "MODEL_TEMPLATE",
    "PythonRepositoryPlan",
    "ServingRepository",
    "check_engine_pairs_onnx",
    "check_python_repository",
    "environment_paths",
    "instances_on_cpu",
    "python_config",
    "write_python_repository",
]

MAX_THREADS = 1024  # ONNX Runtime intra-op threads
INSTANCE_KINDS = {"auto": None, "cpu": "KIND_CPU", "gpu": "KIND_GPU", "model": "KIND_MODEL"}
MODEL_TEMPLATE = Path(__file__).resolve().parents[1] / "runners" / "model.py"  # what Triton loads


def instances_on_cpu(instance_kind, runtime: str, ort_device: str | None) -> bool:
    """Whether a model's instances run on the CPU: ``instance_kind`` (a key of INSTANCE_KINDS or its value) cpu, or
    one that does not ask for GPUs (auto, model) with ONNX Runtime running the model on the CPU (``ort_device``
    "cpu", as asked or as resolved on this machine)."""
    kind = INSTANCE_KINDS.get(instance_kind, instance_kind)
    return kind == "KIND_CPU" or (kind != "KIND_GPU" and runtime == "onnxruntime" and ort_device == "cpu")


@dataclass
class ServingRepository:
    """A written Python-backend repository: the model's name and folder, its config (path and text), Triton's
    max_batch_size, and what it serves (the runtime asked for, the ONNX model and its description, the engine)."""

    name: str
    repository: Path
    model_dir: Path
    config: Path
    config_text: str
    max_batch_size: int
    runtime: str
    onnx: Path
    description: dict
    engine: Path | None = None
    plugin: Path | None = None
    threads: int = 0
    ort_device: str | None = None  # where ONNX Runtime runs the model: "cpu" or "cuda" (runtime onnxruntime or auto)
    ort_library: Path | None = None  # the libwtconv_ort.so copied into the model's folder
    tuning: Tuning = Tuning()  # buckets resolved for max_batch_size
    instances: int = 1  # per GPU for GPU instances
    instance_kind: str = "KIND_CPU"
    gpus: tuple[int, ...] = ()  # the GPUs named for the GPU instances; empty: every GPU the server sees

    def placement(self, visible_gpus: int | None = None) -> str:
        """Where Triton puts the instances, in words; ``visible_gpus``: how many GPUs the server sees, when known."""
        count = self.instances
        if self.instance_kind == "KIND_CPU":
            return f"{count} on the CPU"
        if self.instance_kind == "KIND_MODEL":
            return f"{count}, placed by the runtime at load (GPU 0 for a GPU runtime)"
        if self.gpus:
            return f"{count} on each of GPU {','.join(map(str, self.gpus))}"
        seen = "" if visible_gpus is None else f" ({visible_gpus} here: {','.join(map(str, range(visible_gpus)))})"
        return f"{count} on each GPU the server sees{seen}"


@dataclass
class PythonRepositoryPlan:
    """Checked options of a Python-backend repository (check_python_repository), ready to write."""

    onnx: Path
    repository: Path
    model_dir: Path
    description: dict
    runtime: str
    max_batch_size: int | None
    instances: int | None  # None: Tuning.gpu_instances for GPU instances, else 1
    instance_kind: str
    max_queue_delay_us: int
    threads: int
    device: str
    gpus: tuple[int, ...] = ()  # the GPUs of the GPU instances; empty: every GPU the server sees
    warmup: bool = True
    preferred_batch_sizes: tuple[int, ...] | None = None
    engine: OpenedEngine | None = None
    plugin: Path | None = None
    ort_library: Path | None = None
    tuning: Tuning = Tuning()
    exported: ExportedModel | None = field(default=None, repr=False, compare=False)  # the export, read once

    @property
    def name(self) -> str:
        return self.model_dir.name


# The options of a Python-backend repository: the others (those of Triton's own backends) are refused.
OPTIONS = ("name", "engine", "plugin", "runtime", "device", "ort_library", "max_batch_size", "instances", "gpus")
OPTIONS += ("instance_kind", "preferred_batch_sizes", "max_queue_delay_us", "threads", "warmup", "force")
JOB = "a Python-backend repository (serve)"


def environment_paths() -> list:
    """The site-packages the backend stub must see: PYTHONPATH's entries (the stub ignores the variable itself),
    this environment's site-packages, and the folder holding our packages (a source checkout not installed)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p)]
    paths += [p for p in site.getsitepackages() if p not in paths]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        paths.append(site.getusersitepackages())
    project = str(Path(__file__).resolve().parents[1])
    if project not in paths:
        paths.append(project)
    return paths


def check_python_repository(
    onnx,
    out,
    options: RepositoryOptions | None = None,
    *,
    tuning: Tuning | None = None,
    **keywords,
) -> PythonRepositoryPlan:
    """Every option of a Python-backend repository checked once, in the order ``wtconv-trt serve`` reports them,
    before anything is written: the values, the library, the repository folder (a model folder that holds files
    is replaced only with ``force``), the ONNX model and the engine (its manifest and sha256). ``options``: a
    RepositoryOptions (wtconv_core.options), or its fields as ``keywords``; those of Triton's own backends (labels,
    plugin_static, server_path) are refused. ``gpus`` places GPU instances: it makes instance_kind auto GPU, and is
    refused with CPU instances (instance_kind cpu, or ONNX Runtime on device cpu) and with instance_kind model."""
    o = options or RepositoryOptions(**keywords)
    refuse_others(o, OPTIONS, JOB)
    name, engine, plugin, runtime, device, ort_library = o.name, o.engine, o.plugin, o.runtime, o.device, o.ort_library
    max_batch_size, instances, instance_kind, threads = o.max_batch_size, o.instances, o.instance_kind, o.threads
    warmup, force, preferred_batch_sizes = o.warmup, o.force, o.preferred_batch_sizes
    max_queue_delay_us = PYTHON_BACKEND_QUEUE_DELAY_US if o.max_queue_delay_us is None else o.max_queue_delay_us
    from trt_engine.engine_file import open_engine
    from wtconv_core.paths import check_output_dir
    from wtconv_ort.execution import check_ort_library
    from wtconv_serving.runners.runtimes import ORT_DEVICES, RUNTIMES

    if max_batch_size is not None:
        check_int(max_batch_size, "max_batch_size", 1, MAX_INT32)
    if instances is not None:
        check_int(instances, "instances", 1, MAX_INSTANCES)
    check_choice(instance_kind, "instance_kind", tuple(INSTANCE_KINDS) + tuple(INSTANCE_KINDS.values())[1:])
    check_int(max_queue_delay_us, "max_queue_delay_us", 0, MAX_QUEUE_DELAY_US)
    check_int(threads, "threads", 0, MAX_THREADS)
    check_choice(runtime, "runtime", ("auto", *RUNTIMES))
    check_choice(device, "device", ORT_DEVICES)
    gpus = check_gpus(o.gpus)
    if gpus:
        kind = INSTANCE_KINDS.get(instance_kind, instance_kind)
        if kind == "KIND_MODEL" or instances_on_cpu(kind, runtime, device):
            why = "instance_kind model lets the runtime place them" if kind == "KIND_MODEL" else "they run on the CPU"
            raise InputError(
                f"gpus {','.join(map(str, gpus))}: places GPU instances, and {why}; leave gpus out, or serve on GPUs "
                "(instance_kind=gpu, or device=cuda for ONNX Runtime)",
                parameter="gpus",
            )
    if preferred_batch_sizes is not None:
        preferred_batch_sizes = tuple(
            check_int(b, "preferred_batch_sizes", 1, MAX_INT32) for b in preferred_batch_sizes
        )
    if device != "auto" and runtime not in ("auto", "onnxruntime"):
        raise InputError(
            f"device {device} says where ONNX Runtime runs the model: it applies with runtime=onnxruntime (or "
            f"auto), not {runtime}, which runs on the GPU",
            parameter="device",
        )
    if ort_library is not None:
        check_ort_library(ort_library)
    check_output_dir(out, option="repository", force=True)  # the model's own folder needs force (check_model_dir)
    if not str(onnx).endswith(".onnx"):
        raise InputError(f"{onnx}: give the exported ONNX model (MODEL.onnx); an engine goes with engine=")
    exported = ExportedModel.read(onnx)
    description = describe_export(exported)
    opened = open_engine(engine) if engine else None
    if opened is not None:
        check_engine_pairs_onnx(opened, onnx, description)
    name = check_model_name(name or default_model_name(onnx, description["metadata"]))
    batch, _, _ = onnx_batching(description, max_batch_size)
    if opened is not None:
        from wtconv_serving.repositories.tensorrt_backend import plan_batching

        engine_batch = plan_batching(opened.manifest).max_batch_size
        batch = engine_batch if max_batch_size is None else min(int(max_batch_size), engine_batch)
    tuning = (tuning or Tuning()).with_max_batch(batch)
    return PythonRepositoryPlan(
        onnx=Path(onnx),
        repository=Path(out),
        model_dir=check_model_dir(out, name, force),
        description=description,
        exported=exported,
        runtime=runtime,
        max_batch_size=max_batch_size,
        instances=instances,
        instance_kind=instance_kind,
        gpus=gpus,
        max_queue_delay_us=max_queue_delay_us,
        threads=threads,
        device=device,
        warmup=warmup,
        preferred_batch_sizes=preferred_batch_sizes,
        engine=opened,
        plugin=None if plugin is None else Path(plugin),
        ort_library=None if ort_library is None else Path(ort_library),
        tuning=tuning,
    )


def _dims(shape) -> str:
    return "x".join("?" if int(d) < 0 else str(int(d)) for d in shape) or "scalar"


def _fits(engine_dims, onnx_dims) -> bool:
    """Same rank, and every dimension equal where both are fixed (-1: dynamic)."""
    return len(engine_dims) == len(onnx_dims) and all(
        int(a) == int(b) or int(a) < 0 or int(b) < 0 for a, b in zip(engine_dims, onnx_dims, strict=True)
    )


def check_engine_pairs_onnx(engine: OpenedEngine, onnx, description: dict) -> None:
    """InputError (parameter "engine") unless ``engine`` was built from the ONNX file ``onnx``: the manifest records
    that file's sha256 (trt_engine/manifest.py), and the served model's inputs, outputs and labels are the ONNX
    file's, so an engine of another model (or of the same model in another precision) would answer for it. A
    manifest without the hash (written by an older version) is held to the file's input and output instead."""
    from trt_engine.manifest import sha256_file

    manifest = engine.manifest
    digest = sha256_file(onnx)
    if manifest.onnx_sha256 == digest:
        return
    # The export's dims, its native size where the graph leaves them dynamic (as the served config takes them).
    batch, input_dims, output_dims = onnx_batching(description, 1)
    if batch == 0:  # a fixed batch: onnx_batching gives the whole shapes
        input_dims, output_dims = input_dims[1:], output_dims[1:]
    differences = []
    for what, engine_io, dims, dtype in (
        ("input", manifest.inputs, input_dims, description["input"]["dtype"]),
        ("output", manifest.outputs, output_dims, description["output"]["dtype"]),
    ):
        e = engine_io[0] if len(engine_io) == 1 else None
        if e is not None and (not _fits(e.shape[1:], dims) or e.dtype != dtype):
            differences.append(f"{what} {_dims(e.shape[1:])} {e.dtype}, this model's {_dims(dims)} {dtype}")
    if not manifest.onnx_sha256 and not differences:
        return
    built_from = Path(manifest.onnx_file).name if manifest.onnx_file else "another ONNX file"
    why = (
        f" (its {', '.join(differences)})"
        if differences
        else f" (its sha256 {manifest.onnx_sha256[:12]}..., this file's {digest[:12]}...)"
    )
    raise InputError(
        f"engine {engine.path.name} was built from {built_from}, not from {Path(onnx).name}{why}; give the ONNX "
        f"file the engine was built from, or build an engine from this one (wtconv-trt build {onnx})",
        parameter="engine",
    )


def python_config(
    description: dict,
    *,
    name: str,
    max_batch_size: int,
    input_dims,
    output_dims,
    parameters: dict,
    instances: int = 1,
    instance_kind: str = "KIND_CPU",
    gpus: tuple[int, ...] = (),
    preferred_batch_sizes=None,
    max_queue_delay_us: int = PYTHON_BACKEND_QUEUE_DELAY_US,
    warmup: bool = True,
    labels: tuple[str, ...] | None = None,
    tuning: Tuning | None = None,
) -> ModelConfig:
    """The model configuration of the Python-backend model: the export's I/O, batching (preferred sizes: the buckets
    of ``tuning``, with its queue policy), warm-up per bucket, the instances and the string parameters model.py
    reads (those of ``tuning`` included). ``gpus``: the GPUs of GPU instances, ``instances`` on each (empty: every
    GPU the server sees, as Triton places a KIND_GPU group without gpus)."""
    inp, out = description["input"], description["output"]
    tuning = (tuning or Tuning()).with_max_batch(max_batch_size)
    parameters = {**parameters, **tuning.parameters()}
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=(TensorConfig(inp["name"], inp["dtype"], tuple(input_dims)),),
        outputs=(TensorConfig(out["name"], out["dtype"], tuple(output_dims), "labels.txt" if labels else None),),
        dynamic_batching=dynamic_batching(max_batch_size, preferred_batch_sizes, max_queue_delay_us, tuning),
        instance_group=InstanceGroup(
            count=instances, kind=instance_kind, gpus=tuple(gpus) if instance_kind == "KIND_GPU" else ()
        ),
        warmup_batch_sizes=warmup_batch_sizes(max_batch_size, input_dims, warmup, tuning.buckets),
        parameters=tuple(parameters.items()),
        labels=labels,
    )


def write_python_repository(plan: PythonRepositoryPlan) -> ServingRepository:
    """Write the checked repository (check_python_repository): the model's folder with config.pbtxt, model.py, the
    export, the engine and its manifest, the plugin and op libraries, labels.txt. The folder takes its place only
    once complete (repository.write_model_folder): an interrupted write leaves the repository as it was.

    ``device``: where the onnxruntime runtime runs the model, "cpu", "cuda" (the instance's GPU, CUDA execution
    provider) or "auto" (cuda where onnxruntime-gpu and, for WTConv2d nodes, the library's CUDA op exist on this
    machine, else cpu)."""
    description, runtime = plan.description, plan.runtime
    _, input_dims, output_dims = onnx_batching(description, plan.max_batch_size)
    batch = plan.tuning.buckets[-1] if plan.tuning.buckets else 0
    ort_device, ort_library = None, plan.ort_library
    if runtime in ("auto", "onnxruntime"):
        from wtconv_libs import lookup
        from wtconv_serving.runners.runtimes import resolve_ort_device

        if description["wtconv_nodes"] and ort_library is None:
            ort_library = lookup.ort_library()  # None: the stub falls back to the Python op (CPU), and says so
        exported = plan.exported or plan.onnx
        ort_device = plan.device if plan.device != "auto" else resolve_ort_device("auto", exported, ort_library)[0]
    kind = INSTANCE_KINDS.get(plan.instance_kind, plan.instance_kind)
    if kind is None and plan.gpus:
        kind = "KIND_GPU"  # GPUs named: the instances go on them (check_python_repository refused the CPU)
    if kind is None:
        if runtime == "onnxruntime":
            kind = "KIND_GPU" if ort_device == "cuda" else "KIND_CPU"
        else:
            kind = "KIND_GPU" if runtime != "auto" else "KIND_MODEL"
    instances = plan.instances or (plan.tuning.gpu_instances if kind == "KIND_GPU" else 1)
    parameters = {"runtime": runtime, "onnx_file": "model.onnx", "site_packages": os.pathsep.join(environment_paths())}
    if plan.engine is not None:
        parameters["engine_file"] = "model.plan"
    if plan.plugin:
        parameters["plugin"] = plan.plugin.name  # in the model's folder (python_model._model_file)
    if ort_device:
        parameters["ort_device"] = ort_device
    if ort_library and description["wtconv_nodes"]:
        parameters["ort_library"] = Path(ort_library).name
    if plan.threads:
        parameters["threads"] = str(int(plan.threads))
    if kind != "KIND_CPU":
        # Inputs a client placed in GPU memory (CUDA shared memory) reach the runner there, through DLPack.
        parameters["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"
    config = python_config(
        description,
        name=plan.name,
        max_batch_size=batch,
        input_dims=input_dims,
        output_dims=output_dims,
        parameters=parameters,
        instances=instances,
        instance_kind=kind,
        gpus=plan.gpus,
        preferred_batch_sizes=plan.preferred_batch_sizes,
        max_queue_delay_us=plan.max_queue_delay_us,
        warmup=plan.warmup,
        labels=label_lines(None, description["metadata"].get("source") == "default"),
        tuning=plan.tuning,
    )
    model_files = [(plan.onnx, "model.onnx"), (MODEL_TEMPLATE, "model.py")]
    json_files = []
    if plan.engine is not None:
        model_files.append((plan.engine.path, "model.plan"))
        json_files.append((f"1/{manifest_path('model.plan').name}", plan.engine.manifest.to_json()))
    libraries = [plan.plugin] if plan.plugin else []
    if "ort_library" in parameters:
        libraries.append(Path(ort_library))
    model_dir = plan.model_dir
    text = write_model_folder(
        ModelFolder(
            model_dir=model_dir,
            config=config,
            model_files=tuple(model_files),
            libraries=tuple(libraries),
            json_files=tuple(json_files),
            bytecode=("model.py",),
            inputs=(
                ("ONNX model", plan.onnx),
                ("engine", plan.engine and plan.engine.path),
                ("plugin", plan.plugin),
                ("library", ort_library),
            ),
            option="repository",
        )
    )
    return ServingRepository(
        name=plan.name,
        repository=plan.repository,
        model_dir=model_dir,
        config=model_dir / "config.pbtxt",
        config_text=text,
        max_batch_size=batch,
        runtime=runtime,
        onnx=plan.onnx,
        description=description,
        engine=None if plan.engine is None else plan.engine.path,
        plugin=plan.plugin,
        threads=plan.threads,
        ort_device=ort_device,
        ort_library=model_dir / parameters["ort_library"] if "ort_library" in parameters else None,
        tuning=plan.tuning,
        instances=instances,
        instance_kind=kind,
        gpus=plan.gpus if kind == "KIND_GPU" else (),
    )
