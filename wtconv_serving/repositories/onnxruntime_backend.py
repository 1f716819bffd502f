"""A model repository for Triton's onnxruntime backend (``wtconv-trt triton-repo --onnx``): the export itself, its
WTConv2d nodes on libwtconv_ort.so named in the config (docs/onnx_runtime.md, "From Triton")."""

from __future__ import annotations

import os
from pathlib import Path

from wtconv_core.errors import ConfigurationError, InputError
from wtconv_core.inputs import MAX_INT32, check_choice, check_int
from wtconv_core.options import TRITON_BACKEND_QUEUE_DELAY_US, RepositoryOptions, TuningOptions, refuse_others
from wtconv_core.paths import check_input_file, check_output_dir
from wtconv_export.exported import ExportedModel
from wtconv_serving.repositories.repository import (
    ModelFolder,
    TritonRepository,
    check_model_dir,
    default_model_name,
    describe_export,
    onnx_batching,
    serve_script,
    write_model_folder,
)
from wtconv_serving.repositories.triton_config import (
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
from wtconv_serving.tuning import CUDNN_CODES, Tuning, check_tuning

__all__ = ["INSTANCE_KINDS", "onnxruntime_config", "write_onnxruntime_repository"]

INSTANCE_KINDS = {"auto": None, "gpu": "KIND_GPU", "cpu": "KIND_CPU"}  # "model" is serve's (its runtime places them)
MODEL_FILE = "model.onnx"


def onnxruntime_config(
    description: dict,
    *,
    name: str,
    max_batch_size: int | None = None,
    library_path: str | None = None,
    instances: int = 1,
    kind: str = "KIND_GPU",
    gpus=(),
    preferred_batch_sizes=None,
    max_queue_delay_us: int = TRITON_BACKEND_QUEUE_DELAY_US,
    labels: tuple[str, ...] | None = None,
    tuning: Tuning | None = None,
    warmup: bool = True,
) -> ModelConfig:
    """The model configuration of an export (``description``: repository.describe_export): its I/O, batching (preferred
    sizes: the buckets of ``tuning``, with its queue policy), a warm-up request per bucket, the instances (GPU indices
    only for GPU instances), the custom-op library (``library_path``, as the server sees it) and, on the GPU, the CUDA
    execution provider's options: TF32 by precision (off for fp32, docs/onnx_runtime.md) and a cuDNN search that does
    not re-plan at length for every new batch size (Tuning.cudnn_search_for without graphs: the backend binds each
    request's own buffers, which ONNX Runtime's CUDA graphs cannot replay, docs/serving.md "Tuning")."""
    batch, input_dims, output_dims = onnx_batching(description, max_batch_size)
    inp, out = description["input"], description["output"]
    tuning = (tuning or Tuning()).with_max_batch(batch)
    accelerator, parameters = (), ()
    if kind == "KIND_GPU":
        search = tuning.cudnn_search_for(graphs=False)
        accelerator = (("cudnn_conv_algo_search", search), ("use_tf32", "0" if inp["dtype"] == "float32" else "1"))
        # The backend reads a model parameter of this name too, and when the config has any parameters it overrides
        # the accelerator's value with it (EXHAUSTIVE when absent): both say the same.
        parameters = (("cudnn_conv_algo_search", str(CUDNN_CODES[search])),)
    return ModelConfig(
        name=name,
        backend="onnxruntime",
        max_batch_size=batch,
        default_model_filename=MODEL_FILE,
        inputs=(TensorConfig(inp["name"], inp["dtype"], tuple(input_dims)),),
        outputs=(TensorConfig(out["name"], out["dtype"], tuple(output_dims), "labels.txt" if labels else None),),
        dynamic_batching=dynamic_batching(batch, preferred_batch_sizes, max_queue_delay_us, tuning),
        instance_group=InstanceGroup(count=instances, kind=kind, gpus=tuple(gpus) if kind == "KIND_GPU" else ()),
        warmup_batch_sizes=warmup_batch_sizes(batch, input_dims, warmup, tuning.buckets),
        parameters=parameters,
        op_libraries=(library_path,) if library_path else (),
        cuda_accelerator=accelerator,
        labels=labels,
    )


# The options of a repository for Triton's onnxruntime backend: the others are refused (refuse_others).
OPTIONS = ("name", "ort_library", "server_path", "max_batch_size", "instances", "instance_kind", "gpus")
OPTIONS += ("preferred_batch_sizes", "max_queue_delay_us", "labels", "warmup", "force")
TUNING = ("buckets", "cudnn_search", "max_queue_size", "queue_timeout_ms")
JOB = "a repository for Triton's onnxruntime backend"


def write_onnxruntime_repository(
    onnx, out, options: RepositoryOptions | None = None, tuning: TuningOptions | None = None
) -> TritonRepository:
    """Write ``out/<name>/`` (config.pbtxt, 1/model.onnx: the export unchanged, libwtconv_ort.so when it has
    WTConv2d nodes, labels.txt) and ``out/serve.sh``, with ``options`` (wtconv_core.options.RepositoryOptions: name,
    ort_library, server_path, max_batch_size, instances, instance_kind, gpus, preferred_batch_sizes,
    max_queue_delay_us, labels, warmup, force; any other is refused) and ``tuning`` (TuningOptions: buckets,
    cudnn_search, max_queue_size, queue_timeout_ms). Every option and file is checked before anything is written:
    the counts and GPU indices, the ONNX file, the library (``ort_library``, else the one found in lookup order), the
    labels, the repository folder (a model folder that holds files is replaced only with ``force``), ``server_path``
    (absolute). ``instance_kind`` "auto": KIND_GPU, or KIND_CPU when the library has no CUDA op (said in the note).
    ``instances`` None: Tuning.gpu_instances per GPU, 1 on the CPU."""
    from wtconv_libs import lookup
    from wtconv_ort.execution import check_ort_library

    o, tuning = options or RepositoryOptions(), tuning or TuningOptions()
    refuse_others(o, OPTIONS, JOB)
    refuse_others(tuning, TUNING, JOB)
    delay = TRITON_BACKEND_QUEUE_DELAY_US if o.max_queue_delay_us is None else o.max_queue_delay_us
    instances, preferred_batch_sizes, delay = check_batching_options(o.instances, o.preferred_batch_sizes, delay)
    tuning = check_tuning(tuning)
    gpus = check_gpus(o.gpus)
    if o.max_batch_size is not None:
        check_int(o.max_batch_size, "max_batch_size", 1, MAX_INT32)
    check_choice(o.instance_kind, "instance_kind", tuple(INSTANCE_KINDS))
    server_path = o.server_path
    if server_path is not None and not os.path.isabs(os.fspath(server_path)):
        raise InputError(
            f"server_path {os.fspath(server_path)}: give the repository's absolute path as the server sees it "
            "(e.g. /models inside a container)",
            parameter="server_path",
        )
    if o.ort_library is not None:
        check_ort_library(o.ort_library)
    if o.labels:
        check_input_file(o.labels, what="labels", made_by="give a text file with one class name per line")
    check_input_file(onnx, what="onnx", made_by="export one with 'wtconv-trt export -o MODEL.onnx'")
    if not os.fspath(onnx).endswith(".onnx"):
        raise InputError(
            f"onnx {os.fspath(onnx)}: give the exported ONNX model (MODEL.onnx); an engine goes with engine=",
            parameter="onnx",
        )
    check_output_dir(out, option="out", force=o.force)
    description = describe_export(ExportedModel.read(onnx, what="onnx"))
    nodes = description["wtconv_nodes"]
    library = None
    if nodes:
        library = Path(o.ort_library) if o.ort_library is not None else lookup.ort_library()
        if library is None:
            raise ConfigurationError(
                f"onnx {os.fspath(onnx)} has {nodes} WTConv2d nodes, which Triton's onnxruntime backend runs with "
                "libwtconv_ort.so, and none is built: wtconv-trt build-libs, or ort_library=LIB",
                parameter="onnx",
            )
    note = ""
    kind = INSTANCE_KINDS[o.instance_kind]
    if kind is None:
        kind = "KIND_GPU"
        if library is not None and lookup.ort_library_info(library).get("cuda") != "yes":
            kind = "KIND_CPU"
            note = (
                f"{library} has no CUDA op (built without nvcc): instances on the CPU (KIND_CPU); a library built "
                "with nvcc serves on the GPU"
            )
    name = check_model_name(o.name or default_model_name(onnx, description["metadata"]))
    out = Path(out)
    library_in_server = None
    if library is not None:
        root = Path(server_path) if server_path is not None else out.resolve()
        library_in_server = str(root / name / library.name)
    config = onnxruntime_config(
        description,
        name=name,
        max_batch_size=o.max_batch_size,
        library_path=library_in_server,
        instances=instances or (tuning.gpu_instances if kind == "KIND_GPU" else 1),
        kind=kind,
        gpus=gpus,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=delay,
        labels=label_lines(o.labels, description["metadata"].get("source") == "default"),
        tuning=tuning,
        warmup=o.warmup,
    )
    comments = [
        "Triton's onnxruntime backend, e.g. inside its NGC container (the repository mounted where config.pbtxt",
        "says, see the library path below). Its ONNX Runtime must be 1.17 or newer (libwtconv_ort.so asks for its",
        "C API version 17).",
    ]
    if library_in_server:
        comments.append(f"config.pbtxt loads the WTConv2d op from {library_in_server} (the server's view of it).")
    folder = ModelFolder(
        model_dir=check_model_dir(out, name, o.force),
        config=config,
        model_files=((Path(onnx), MODEL_FILE),),
        libraries=(library,) if library is not None else (),
        serve_script=serve_script(name, comments, [], 'exec tritonserver --model-repository="$HERE" "$@"'),
        inputs=(("ONNX model", onnx), ("library", library), ("labels", o.labels)),
        note=note,
    )
    text = write_model_folder(folder)
    return TritonRepository(
        name=name,
        repository=out,
        model_dir=folder.model_dir,
        config=folder.model_dir / "config.pbtxt",
        config_text=text,
        serve_script=out / "serve.sh",
        max_batch_size=config.max_batch_size,
        note=note,
        ort_library=folder.model_dir / library.name if library is not None else None,
        library_in_server=library_in_server,
        kind=kind,
    )
