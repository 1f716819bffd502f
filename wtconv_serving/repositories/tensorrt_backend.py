"""A model repository for Triton's TensorRT backend (``wtconv-trt triton-repo --engine``): the engine, its manifest,
the static-registration plugin library and serve.sh, which preloads it (docs/engines.md, "Triton")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trt_engine.engine_file import OpenedEngine, open_engine
from trt_engine.manifest import EngineManifest
from wtconv_core.errors import ModelError, PluginError, ServingError
from wtconv_core.files import atomic_copy, atomic_write_json, user_file_mode
from wtconv_core.options import TritonBackendOptions
from wtconv_core.paths import check_input_file, check_output_dir
from wtconv_serving.repositories.repository import (
    TritonRepository,
    check_model_dir,
    serve_script,
    write_model_config,
    writing_model_dir,
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
from wtconv_serving.tuning import Tuning

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
    max_queue_delay_us: int = TritonBackendOptions.max_queue_delay_us,
    labels: tuple[str, ...] | None = None,
    plan: BatchPlan | None = None,
    tuning: Tuning | None = None,
    warmup: bool = True,
) -> ModelConfig:
    """The model configuration of an engine: max_batch_size and dims from its profiles (plan_batching), its I/O
    types, batching with the buckets of ``tuning`` as preferred sizes (default: powers of two up to max_batch_size)
    and its queue policy, a warm-up request per bucket, and with ``tuning.cuda_graphs`` one CUDA graph per bucket,
    each also serving the sizes down to the bucket below (graph_lower_bound: Triton pads the batch, as our runners
    do), and the instances on the GPU with the profiles Triton may use. ``plan``: plan_batching's, when made
    already. Graphs and warm-up need the input's dims fixed besides the batch."""
    plan = plan or plan_batching(manifest)
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


def write_tensorrt_repository(
    engine,
    out,
    *,
    name: str | None = None,
    plugin_static=None,
    instances: int | None = None,
    gpus=None,
    preferred_batch_sizes=None,
    max_queue_delay_us: int = TritonBackendOptions.max_queue_delay_us,
    labels=None,
    force: bool = False,
    tuning: Tuning | None = None,
    warmup: bool = True,
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt, 1/model.plan, engine.json: the manifest, labels.txt, the
    static-registration plugin) and ``out/serve.sh``. Every option and file is checked before anything is written:
    the counts and GPU indices, the plugin and labels files, the repository folder, the engine once (its manifest
    and sha256: never ship a corrupt engine) and its TensorRT backend."""
    instances, preferred_batch_sizes, max_queue_delay_us = check_batching_options(
        instances, preferred_batch_sizes, max_queue_delay_us
    )
    gpus = check_gpus(gpus)
    if plugin_static:
        check_input_file(plugin_static, what="plugin_static", made_by="give libwtconv_trt_plugin.so")
    if labels:
        check_input_file(labels, what="labels", made_by="give a text file with one class name per line")
    opened = open_engine(engine)
    check_output_dir(out, option="out", force=force)
    manifest = opened.manifest
    if manifest.backend != "tensorrt":
        raise ServingError(
            f"{engine} was built by TensorRT-RTX, whose engines Triton's TensorRT backend cannot load "
            f"(it runs TensorRT engines): build the engine with --backend tensorrt for Triton"
        )
    name = check_model_name(name or Path(engine).name.split(".")[0])
    model_dir = check_model_dir(out, name, force)
    plugin_static = _static_plugin(manifest, plugin_static)
    source = manifest.source_model or {}
    plan = plan_batching(manifest)
    tuning = tuning or Tuning()
    config = tensorrt_config(
        manifest,
        name=name,
        instances=instances or tuning.gpu_instances,
        gpus=gpus,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=max_queue_delay_us,
        labels=label_lines(labels, source.get("source") == "default"),
        plan=plan,
        tuning=tuning,
        warmup=warmup,
    )
    return _write(opened, Path(out), model_dir, config, plugin_static, plan.note)


def _static_plugin(manifest: EngineManifest, given) -> Path | None:
    """The static-registration library Triton preloads: ``given`` (checked), else the one beside the engine's dynamic
    library or found for its ABI; PluginError when the engine needs one and there is none."""
    from trt_engine.plugins import check_static_plugin, static_plugin_for

    if manifest.plugin is None and not given:
        return None
    plugin = Path(given) if given else static_plugin_for(manifest)
    if plugin is None:
        raise PluginError(
            "the engine uses the WTConv2d plugin: pass plugin_static=PATH/TO/libwtconv_trt_plugin.so "
            "(the static-registration library from plugin/, which Triton loads with LD_PRELOAD)",
            parameter="plugin_static",
        )
    check_static_plugin(plugin, manifest)
    return plugin


def _write(
    opened: OpenedEngine, out: Path, model_dir: Path, config: ModelConfig, plugin: Path | None, note: str
) -> TritonRepository:
    with writing_model_dir(model_dir) as staging:
        atomic_copy(opened.path, staging / "1" / MODEL_FILE, mode=user_file_mode())
        atomic_write_json(staging / "engine.json", opened.manifest.to_json())  # the client sample reads its dtypes
        text = write_model_config(staging, config)
        if plugin is not None:
            atomic_copy(plugin, staging / plugin.name)
    setup, command = [], 'exec tritonserver --model-repository="$HERE" "$@"'
    if plugin is not None:
        setup = [
            "# The WTConv2d plugin: the static-registration library (a plain dlopen registers its creator).",
            f'PLUGIN="${{WTCONV_PLUGIN:-$HERE/{config.name}/{plugin.name}}}"',
            '# Alternative to LD_PRELOAD: exec tritonserver --model-repository="$HERE" '
            '--backend-config=tensorrt,plugins="$PLUGIN" "$@"',
        ]
        command = 'LD_PRELOAD="$PLUGIN${LD_PRELOAD:+:$LD_PRELOAD}" ' + command
    trt = opened.manifest.tensorrt_version
    comments = [
        f"The server's TensorRT must be exactly {trt} (the engine's): use the Triton release whose TensorRT",
        "version matches (Triton release notes), e.g. inside its NGC container:",
    ]
    return TritonRepository(
        name=config.name,
        repository=out,
        model_dir=model_dir,
        config=model_dir / "config.pbtxt",
        config_text=text,
        serve_script=serve_script(out, config.name, comments, setup, command),
        max_batch_size=config.max_batch_size,
        note=note,
    )
