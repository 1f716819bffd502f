"""A model repository for Triton's TensorRT backend (``wtconv-trt triton-repo --engine``): the engine, its manifest,
the static-registration plugin library and serve.sh, which preloads it (docs/engines.md, "Triton").

The writer reads each fact once and in one direction: the options checked, the engine's facts gathered in one
descent into trt_engine (open_engine: the file, its manifest and sha256; preloaded_plugin: the static-registration
plugin Triton preloads), the model
configuration planned from them, and the folder written at the end (repository.write_model_folder)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trt_engine.engine_file import OpenedEngine, open_engine
from trt_engine.manifest import EngineManifest
from trt_engine.plugins import preloaded_plugin
from wtconv_core.errors import ModelError, ServingError
from wtconv_core.options import TRITON_BACKEND_QUEUE_DELAY_US, RepositoryOptions, TuningOptions, refuse_others
from wtconv_core.paths import check_input_file, check_output_dir
from wtconv_serving.repositories.repository import (
    ModelFolder,
    TritonRepository,
    check_model_dir,
    serve_script,
    write_model_folder,
)
from wtconv_serving.repositories.triton_config import (
    CudaGraph,
    InstanceGroup,
    ModelConfig,
    TensorConfig,
    check_batching_options,
    check_gpus,
    check_model_name,
    dynamic_batching,
    label_lines,
    warmup_batch_sizes,
)
from wtconv_serving.tuning import Tuning, check_tuning

__all__ = ["BatchPlan", "plan_batching", "tensorrt_config", "write_tensorrt_repository"]

MODEL_FILE = "model.plan"


@dataclass
class BatchPlan:
    max_batch_size: int  # 0: no Triton batching (the engine's batch dimension is fixed)
    profiles: list  # profile indices the instances may use (all of them when the engine has one)
    input_dims: list  # dims without the batch dimension (-1 where the profiles allow a range)
    note: str = ""


def plan_batching(manifest: EngineManifest) -> BatchPlan:
    """max_batch_size from the optimisation profiles. Triton sends any batch from 1 to max_batch_size, so the
    profiles' batch ranges must cover 1..max_batch_size without a gap; a profile that does not start at 1 is
    refused with the explanation."""
    profiles = manifest.profiles
    if len(manifest.inputs) != 1:
        raise ModelError(f"the engine has {len(manifest.inputs)} inputs; triton-repo handles single-input models")
    name, engine_shape = manifest.inputs[0].name, manifest.inputs[0].shape
    if engine_shape[0] != -1:
        # The batch dimension is fixed in the engine: Triton must not add its own.
        note = f"the engine's batch dimension is fixed at {engine_shape[0]}: max_batch_size 0 (no batching)"
        return BatchPlan(0, list(range(len(profiles))), [int(d) for d in engine_shape], note)
    ranges = sorted((p.inputs[name].min[0], p.inputs[name].max[0], i) for i, p in enumerate(profiles))
    if not ranges or ranges[0][0] != 1:
        raise ModelError(
            "no optimisation profile starts at batch 1 ("
            + "; ".join(f"profile {i}: batch {lo}..{hi}" for lo, hi, i in ranges)
            + "). Triton batches requests dynamically and may send any batch from 1 to max_batch_size, so the "
            "engine must accept batch 1; rebuild with --shapes NAME:1x.../OPTx.../MAXx..."
        )
    covered, used = 0, []
    for lo, hi, i in ranges:
        if lo > covered + 1:
            break
        covered = max(covered, hi)
        used.append(i)
    dims = []
    for axis in range(1, len(engine_shape)):
        values = {(profiles[i].inputs[name].min[axis], profiles[i].inputs[name].max[axis]) for i in used}
        fixed = engine_shape[axis] if engine_shape[axis] != -1 else None
        if fixed is None and len(values) == 1 and next(iter(values))[0] == next(iter(values))[1]:
            fixed = next(iter(values))[0]
        dims.append(int(fixed) if fixed is not None else -1)
    note = ""
    if len(used) < len(profiles):
        note = (
            f"profiles {sorted(set(range(len(profiles))) - set(used))} leave a gap above batch {covered} and "
            f"are not used by Triton"
        )
    return BatchPlan(covered, sorted(used), dims, note)


def tensorrt_config(
    manifest: EngineManifest,
    *,
    name: str,
    instances: int = 1,
    gpus=(),
    preferred_batch_sizes=None,
    max_queue_delay_us: int = TRITON_BACKEND_QUEUE_DELAY_US,
    labels=None,
    plan: BatchPlan | None = None,
    tuning: Tuning | None = None,
    warmup: bool = True,
) -> ModelConfig:
    """The model configuration of an engine named ``name`` (checked): max_batch_size and dims from its profiles
    (plan_batching), its I/O types, the class labels of the file ``labels`` (default digits 0-9 for the shipped
    model), batching with the buckets of ``tuning`` as preferred sizes (default: tuning.default_buckets)
    and its queue policy, a warm-up request per bucket, and with ``tuning.cuda_graphs`` one CUDA graph per bucket,
    each also serving the sizes down to the bucket below (graph_lower_bound: Triton pads the batch, as our runners
    do), and the instances on the GPU with the profiles Triton may use. Graphs and warm-up need the input's dims
    fixed besides the batch. ``plan``: plan_batching's, when made already."""
    plan = plan or plan_batching(manifest)
    name = check_model_name(name)
    labels = label_lines(labels, (manifest.source_model or {}).get("source") == "default")
    tuning = (tuning or Tuning()).with_max_batch(plan.max_batch_size)
    name_in = manifest.inputs[0].name
    static = all(int(d) > 0 for d in plan.input_dims)
    graphs = []
    if tuning.cuda_graphs and static and plan.max_batch_size > 0:
        previous = 0
        for bucket in tuning.buckets:
            lower = previous + 1 if previous + 1 < bucket else 0
            graphs.append(CudaGraph(bucket, name_in, tuple(plan.input_dims), lower))
            previous = bucket
    outputs = [
        TensorConfig(t.name, t.dtype, tuple(t.shape[1:] if plan.max_batch_size > 0 else t.shape))
        for t in manifest.outputs
    ]
    if labels is not None:
        outputs[0] = TensorConfig(outputs[0].name, outputs[0].dtype, outputs[0].dims, "labels.txt")
    return ModelConfig(
        name=name,
        platform="tensorrt_plan",
        max_batch_size=plan.max_batch_size,
        default_model_filename=MODEL_FILE,
        inputs=(TensorConfig(manifest.inputs[0].name, manifest.inputs[0].dtype, tuple(plan.input_dims)),),
        outputs=tuple(outputs),
        dynamic_batching=dynamic_batching(plan.max_batch_size, preferred_batch_sizes, max_queue_delay_us, tuning),
        instance_group=InstanceGroup(
            count=instances,
            kind="KIND_GPU",
            gpus=tuple(gpus),
            profiles=tuple(plan.profiles) if len(manifest.profiles) > 1 else (),
        ),
        warmup_batch_sizes=warmup_batch_sizes(plan.max_batch_size, plan.input_dims, warmup, tuning.buckets),
        cuda_graphs=tuple(graphs),
        labels=labels,
    )


# The options of a repository for Triton's TensorRT backend: the others are refused (refuse_others).
OPTIONS = ("name", "plugin_static", "instances", "gpus", "preferred_batch_sizes", "max_queue_delay_us", "labels")
OPTIONS += ("warmup", "force")
TUNING = ("buckets", "cuda_graphs", "max_queue_size", "queue_timeout_ms")
JOB = "a repository for Triton's TensorRT backend"


def write_tensorrt_repository(
    engine, out, options: RepositoryOptions | None = None, tuning: TuningOptions | None = None
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt, 1/model.plan, engine.json: the manifest, labels.txt, the
    static-registration plugin) and ``out/serve.sh``, with ``options`` (wtconv_core.options.RepositoryOptions: name,
    plugin_static, instances, gpus, preferred_batch_sizes, max_queue_delay_us, labels, warmup, force; any other is
    refused) and ``tuning`` (TuningOptions: buckets, cuda_graphs, max_queue_size, queue_timeout_ms).

    Everything is checked before anything is written, each fact once: the option values, the plugin and labels
    files, the repository folder; then the engine (its manifest and sha256: never ship a corrupt engine; the
    static-registration plugin Triton preloads) and that Triton's TensorRT backend can load it; then the
    configuration; then, writing, that no output is one of the inputs."""
    o, tuning = options or RepositoryOptions(), tuning or TuningOptions()
    refuse_others(o, OPTIONS, JOB)
    refuse_others(tuning, TUNING, JOB)
    delay = TRITON_BACKEND_QUEUE_DELAY_US if o.max_queue_delay_us is None else o.max_queue_delay_us
    instances, preferred_batch_sizes, delay = check_batching_options(o.instances, o.preferred_batch_sizes, delay)
    gpus = check_gpus(o.gpus)
    tuning = check_tuning(tuning)
    if o.plugin_static:
        check_input_file(o.plugin_static, what="plugin_static", made_by="give libwtconv_trt_plugin.so")
    if o.labels:
        check_input_file(o.labels, what="labels", made_by="give a text file with one class name per line")
    check_output_dir(out, option="out", force=o.force)
    opened = open_engine(engine)
    if opened.manifest.backend != "tensorrt":
        raise ServingError(
            f"{engine} was built by TensorRT-RTX, whose engines Triton's TensorRT backend cannot load "
            f"(it runs TensorRT engines): build the engine with --backend tensorrt for Triton"
        )
    plugin = preloaded_plugin(opened.manifest, o.plugin_static)
    folder = _model_folder(
        opened,
        plugin,
        Path(out),
        o,
        instances=instances or tuning.gpu_instances,
        gpus=gpus,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=delay,
        tuning=tuning,
    )
    text = write_model_folder(folder)
    return TritonRepository(
        name=folder.config.name,
        repository=folder.repository,
        model_dir=folder.model_dir,
        config=folder.model_dir / "config.pbtxt",
        config_text=text,
        serve_script=folder.repository / "serve.sh",
        max_batch_size=folder.config.max_batch_size,
        note=folder.note,
    )


def _model_folder(opened: OpenedEngine, plugin: Path | None, out: Path, o: RepositoryOptions, **checked) -> ModelFolder:
    """The model's folder, planned from the opened engine, its static-registration ``plugin`` and the checked
    options (``checked``: tensorrt_config's): its configuration, the engine and its manifest (the client sample reads
    its dtypes), the plugin, and serve.sh, which preloads the plugin and names the TensorRT the server must have."""
    manifest = opened.manifest
    plan = plan_batching(manifest)
    name = o.name or opened.path.name.split(".")[0]
    config = tensorrt_config(manifest, name=name, labels=o.labels, plan=plan, warmup=o.warmup, **checked)
    setup, command = [], 'exec tritonserver --model-repository="$HERE" "$@"'
    if plugin is not None:
        setup = [
            "# The WTConv2d plugin: the static-registration library (a plain dlopen registers its creator).",
            f'PLUGIN="${{WTCONV_PLUGIN:-$HERE/{config.name}/{plugin.name}}}"',
            '# Alternative to LD_PRELOAD: exec tritonserver --model-repository="$HERE" '
            '--backend-config=tensorrt,plugins="$PLUGIN" "$@"',
        ]
        command = 'LD_PRELOAD="$PLUGIN${LD_PRELOAD:+:$LD_PRELOAD}" ' + command
    comments = [
        f"The server's TensorRT must be exactly {manifest.tensorrt_version} (the engine's): use the Triton release",
        "whose TensorRT version matches (Triton release notes), e.g. inside its NGC container:",
    ]
    return ModelFolder(
        model_dir=check_model_dir(out, config.name, o.force),
        config=config,
        model_files=((opened.path, MODEL_FILE),),
        libraries=(plugin,) if plugin is not None else (),
        json_files=(("engine.json", manifest.to_json()),),
        serve_script=serve_script(config.name, comments, setup, command),
        inputs=(("engine", opened.path), ("plugin", plugin), ("labels", o.labels)),
        note=plan.note,
    )
