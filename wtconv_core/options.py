"""Every option shared by jobs, declared once: a frozen dataclass per concept (the model a job exports or compares
against, a serving repository, its tuning, the server, the load test), each field with its default and its one help
text (docs/design.md §1, "Each option is declared once"). The API functions take these dataclasses;
the command line builds its argument groups from them (``add_group``) and reads them back (``from_args``), as
Polygraphy's argument groups are shared by its subcommands, so an option has one default and one help text wherever
it appears. This module imports nothing heavy: the command line builds its parsers from it without numpy.

A field's ``metadata`` says how the command line spells it (``option``): its flag (``--name`` from the field's name
unless given), the argparse type's name (``arguments.py``), choices, a metavar, for a boolean that is on by default
the ``--no-...`` flag that turns it off, and ``exclusive``: the fields sharing that name may not be given together.
docs/serving.md, "Tuning", says how each serving default was chosen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ARCHS",
    "CUDNN_SEARCHES",
    "DEFAULT_REPOSITORY",
    "CLIENT_CONNECTIONS",
    "DEVICES",
    "GPU_INSTANCES",
    "INSTANCE_KINDS",
    "PROTOCOLS",
    "PYTHON_BACKEND_QUEUE_DELAY_US",
    "RECOVERIES",
    "RUNTIMES",
    "SHARED_MEMORY_MODES",
    "TRITON_BACKEND_QUEUE_DELAY_US",
    "LoadTestOptions",
    "ModelSource",
    "RepositoryOptions",
    "ServerOptions",
    "ServingOptions",
    "TuningOptions",
    "add_group",
    "from_args",
    "help_of",
    "refuse_others",
    "split_keywords",
]

# Model instances per GPU. On an H200, WTConvNeXt-T fp16 at 256 requests in flight: 2 instances served 3,400-4,600
# images/s, 3 about 5,100, 4 6,000-6,800 (each instance spends about two thirds of an execution on host copies of the
# batch; the others keep the GPU busy meanwhile).
GPU_INSTANCES = 4
# ONNX Runtime CUDA EP's cudnn_conv_algo_search; "auto": EXHAUSTIVE under CUDA graphs (a bucket's plan is searched
# once, at capture), HEURISTIC when eager (every change of batch size re-plans; 14-17 ms instead of 93-115 ms).
CUDNN_SEARCHES = ("auto", "EXHAUSTIVE", "HEURISTIC", "DEFAULT")
RUNTIMES = ("auto", "tensorrt", "torch-cuda", "onnxruntime")
DEVICES = ("auto", "cpu", "cuda")
INSTANCE_KINDS = ("auto", "cpu", "gpu", "model")
PROTOCOLS = ("grpc", "http", "both")
# How a client hands request tensors to a server on the same machine (docs/serving.md, "Shared memory"): in the
# request itself (none), in system shared memory (/dev/shm), or in GPU memory the server maps (cuda: CUDA IPC).
SHARED_MEMORY_MODES = ("none", "system", "cuda")
# How the sweep's clients reach the server over gRPC: the requests in flight of a client process on its one connection
# (process), or each on a connection of its own, as independent clients hold them (client). The server takes in more
# at once from many connections: HTTP/2's flow control is per connection (docs/serving.md, "The soak").
CLIENT_CONNECTIONS = ("process", "client")
# How the server's watch brings back a model whose backend process died (docs/serving.md, "The soak"): a restart of the
# server process, the only way Triton frees the model's old version after a stub died with requests in flight; or a
# reload of the model in the same process.
RECOVERIES = ("restart", "reload")
DEFAULT_REPOSITORY = "triton_models"  # where serve writes its model repository
# Dynamic batching's longest wait to gather a batch: Triton's own TensorRT and onnxruntime backends run the batch
# themselves, with no copy to a runner, so they wait less than serve's Python backend.
PYTHON_BACKEND_QUEUE_DELAY_US = 500
TRITON_BACKEND_QUEUE_DELAY_US = 100
ARCHS = ("wtconvnext_tiny", "wtconvnext_small", "wtconvnext_base")  # the published WTConvNeXt architectures


def option(default: Any = None, help: str = "", **spelling: Any) -> Any:  # noqa: A002 (argparse's word)
    """A dataclass field with its default and the command line's spelling of it (see the module docstring)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default: use a tuple")
    return field(default=default, metadata={"help": help, **spelling})


@dataclass(frozen=True)
class ModelSource:
    """Which of our PyTorch models a job exports or compares against: the shipped default model (no ``arch``), or a
    published WTConvNeXt with its checkpoint or seeded random weights (``export``, ``validate``; the API's
    ``model=``, where a torch.nn.Module of your own may stand instead). One that names no model (``names_a_model``
    false: only a seed, or nothing) leaves the choice to the job: export takes the shipped default model, validation
    the model its input file records. wtconv_export.onnx_models checks the values and builds the model."""

    arch: str | None = option(
        None, "a published WTConvNeXt architecture instead of the shipped default model", choices=ARCHS
    )
    checkpoint: str | None = option(
        None,
        "published-format weights for --arch: a .pth/.pt state_dict or a .safetensors file",
        metavar="FILE",
        exclusive="weights",
    )
    random_weights: bool = option(
        False, "random weights for --arch (seeded by --seed; every layer contributes)", exclusive="weights"
    )
    seed: int = option(0, "seed of --random-weights, 0 to 2**63 - 1 (default 0)")
    num_classes: int | None = option(
        None,
        "classes of --arch's head, 0 to 100000 (0: no head); default: the checkpoint's (rows of head.fc.weight), "
        "else 1000",
        metavar="N",
    )
    in_chans: int | None = option(
        None, "input channels of --arch, 1 to 1024; default: the checkpoint's (stem.0.weight), else 3", metavar="C"
    )

    @property
    def names_a_model(self) -> bool:
        """Whether any option but the seed was given (otherwise the job takes its own default model)."""
        return bool(self.arch or self.checkpoint or self.random_weights) or (
            self.num_classes is not None or self.in_chans is not None
        )


@dataclass(frozen=True)
class TuningOptions:
    """How the runners and Triton's scheduler serve a model (wtconv_serving.tuning.Tuning checks and resolves them).
    A Python-backend repository (``serve``) takes them all; Triton's TensorRT backend all but the ONNX Runtime ones,
    its onnxruntime backend all but ``cuda_graphs`` and ``session_per_bucket`` (it runs without graphs)."""

    buckets: tuple[int, ...] | None = option(
        None,
        "the batch sizes the model is prepared for: Triton's preferred and warm-up sizes, one CUDA graph each, and on "
        "a GPU the sizes serve's runners pad a batch up to or split it into (default: powers of two up to "
        "max_batch_size, which must be the largest; from 64 on, steps of an eighth of it above a quarter of it: "
        "1,2,4,8,16,32,48,64,...,128; docs/serving.md, 'Tuning')",
        type="integer_list",
        metavar="1,2,4,...",
    )
    cuda_graphs: bool = option(
        True, "run every batch eagerly (default: one CUDA graph per bucket)", negative="--no-cuda-graphs"
    )
    cudnn_search: str = option(
        "auto",
        "ONNX Runtime's cudnn_conv_algo_search (default auto: EXHAUSTIVE with CUDA graphs or a session per bucket, "
        "HEURISTIC otherwise, as in Triton's onnxruntime backend, which runs without graphs)",
        choices=CUDNN_SEARCHES,
    )
    session_per_bucket: bool = option(False, "ONNX Runtime on a GPU without CUDA graphs: one session per bucket")
    # 0, no limit, is the default: any limit is a queue policy, which turns off the prefetching of Triton's dynamic
    # batcher (core src/scheduler_utils.cc: only a queue without timeout, timeout override or size supports it): the
    # batcher then waits for a busy instance on its condition variable under a mutex of its own
    # (src/dynamic_batch_scheduler.cc, WaitForPayloadSlotAvailable), whose wake-up can be missed, and sleeps out its
    # 500 ms timeout. Measured on a 2-core CPU, the shipped model, 16 requests in flight: p99 525-543 ms with a limit
    # of 512 requests and 5000 ms, 22 ms without (docs/serving.md, "Tuning").
    max_queue_size: int = option(
        0,
        "requests waiting in Triton's queue beyond which the next is refused at once (default 0: no limit, which "
        "keeps Triton's batcher prefetching; docs/serving.md)",
    )
    queue_timeout_ms: int = option(0, "a request waiting longer in Triton's queue is refused (default 0 ms: no limit)")


@dataclass(frozen=True)
class RepositoryOptions:
    """A model repository: what it serves and how Triton batches it, for ``serve`` (Triton's Python backend, running
    the best runtime present) and ``triton-repo`` (Triton's own TensorRT or onnxruntime backend). Each writer reads
    the fields it takes and refuses the others given (refuse_others): engine, plugin, runtime, device and threads are
    the Python backend's; labels, plugin_static (TensorRT backend) and server_path (onnxruntime backend) Triton's
    own backends'; an engine alone takes no ort_library, max_batch_size or instance_kind; the rest are everyone's."""

    name: str | None = option(
        None,
        "model name in the repository (default: for an export, 'digits' for the shipped model, else the file's stem; "
        "for an engine alone, its file's stem)",
    )
    engine: str | None = option(
        None,
        "TensorRT engine built by 'wtconv-trt build' (its ENGINE.json beside it), run by TensorRT on the server's GPU",
    )
    plugin: str | None = option(
        None, "WTConv2d plugin library for --engine (copied into the repository)", metavar="LIB"
    )
    plugin_static: str | None = option(
        None,
        "the static-registration plugin library libwtconv_trt_plugin.so, which Triton preloads "
        "(default: beside the dynamic library recorded in the engine's manifest); copied into the repository",
        metavar="LIB",
    )
    runtime: str = option(
        "auto",
        "what runs the model inside the server (default auto: TensorRT engine, else PyTorch on our CUDA "
        "kernels, else ONNX Runtime, the first that can run there)",
        choices=RUNTIMES,
    )
    device: str = option(
        "auto",
        "where ONNX Runtime runs the model (runtime onnxruntime or auto): cuda, each GPU instance on its GPU "
        "through onnxruntime-gpu's CUDA execution provider with libwtconv_ort.so's CUDA op; cpu; auto (default): cuda "
        "where both exist here, else cpu",
        choices=DEVICES,
    )
    ort_library: str | None = option(
        None,
        "libwtconv_ort.so for the WTConv2d nodes, copied into the repository (default: the one 'wtconv-trt doctor' "
        "finds; without one, serve's runner runs them through the onnxruntime-extensions Python op on the CPU, and "
        "Triton's onnxruntime backend cannot run them)",
        metavar="LIB",
    )
    server_path: str | None = option(
        None,
        "the repository's absolute path as the server sees it (e.g. /models in a container), "
        "where config.pbtxt names the library (default: its absolute path here)",
        metavar="DIR",
    )
    max_batch_size: int | None = option(
        None,
        "Triton's max_batch_size for an export's dynamic batch axis, 1 to 2^31-1 (default: 128, fewer for large "
        "inputs; with an engine, at most its profiles' largest batch)",
    )
    instances: int | None = option(
        None, f"model instances per GPU, 1 to 64 (default: {GPU_INSTANCES} per GPU for GPU instances, else 1)"
    )
    instance_kind: str = option(
        "auto",
        "instance_group kind: gpu, cpu, or model (serve: the runtime chosen at load places them); default auto: where "
        "the model runs (gpu, cpu for ONNX Runtime on the CPU or a libwtconv_ort.so without a CUDA op; model for "
        "serve's runtime auto)",
        choices=INSTANCE_KINDS,
    )
    gpus: tuple[int, ...] | None = option(
        None,
        "the GPUs the instances are placed on, --instances of them on each (default: every visible GPU)",
        type="gpu_list",
        metavar="0,1",
    )
    preferred_batch_sizes: tuple[int, ...] | None = option(
        None,
        "dynamic batching's preferred batch size (repeatable; default: the buckets)",
        flag="--preferred-batch",
        type="integer",
        metavar="N",
        repeat=True,
    )
    max_queue_delay_us: int | None = option(
        None,
        f"dynamic batching: longest wait to gather a batch, 0 to 10^8 us (default: {PYTHON_BACKEND_QUEUE_DELAY_US} us "
        f"for serve's Python backend, {TRITON_BACKEND_QUEUE_DELAY_US} us for Triton's TensorRT and onnxruntime "
        "backends, which run a batch with no copy to a runner)",
    )
    threads: int = option(0, "ONNX Runtime intra-op threads, 0 to 1024 (default 0: its own)")
    labels: str | None = option(
        None,
        "class labels, one per line (default: digits 0-9 for the shipped default model)",
        metavar="FILE",
    )
    warmup: bool = option(True, "no model_warmup in the config", negative="--no-warmup")
    force: bool = option(False, "replace the model's folder in the repository when it holds files")


@dataclass(frozen=True)
class ServerOptions:
    """The tritonserver a serve starts."""

    host: str = option(
        "127.0.0.1",
        "address the server listens on (default 127.0.0.1, this machine only). Another address exposes inference to "
        "the network (the repository API stays closed to everyone); engines and plugin libraries are native code, "
        "trust them like any program you run",
    )
    http_port: int = option(8000, "HTTP port (default 8000; 0 picks a free one)")
    grpc_port: int = option(8001, "gRPC port (default 8001; 0 picks a free one)")
    metrics_port: int = option(8002, "Prometheus metrics port (default 8002; 0 picks a free one)")
    metrics: bool = option(True, "no metrics endpoint", negative="--no-metrics")
    log: str | None = option(None, "server log file, kept (default: a temporary file, removed)", metavar="FILE")
    timeout: float = option(
        300.0, "seconds to wait for the server to be ready, 1 to 86400 (default 300)", type="number"
    )
    recover: str = option(
        "restart",
        "when a model's backend process dies: restart the server (default; after a death with requests in flight "
        "only a restart frees the model's old version; requests in flight fail, clients retry once it is ready) or "
        "reload the model in the running server (docs/serving.md, The soak)",
        choices=RECOVERIES,
    )
    mps: bool = option(
        False,
        "run the server's processes as clients of an NVIDIA MPS server of their own (nvidia-cuda-mps-control), so "
        "the instances on a GPU run their kernels side by side instead of taking turns; stopped with the server "
        "(docs/serving.md, 'Sharing a GPU between instances: MPS')",
    )


@dataclass(frozen=True)
class LoadTestOptions:
    """Traffic against the running server (wtconv_serving.traffic): the answer check, then the timed sweep."""

    load_test: int | None = option(
        None,
        "once ready, check N requests (distinct inputs, each response compared with the model run here), time the "
        "runner directly, run the --sweep and the --soak if given, print the table, stop the server and exit",
        metavar="N",
    )
    concurrency: int = option(16, "the check's and the soak's concurrent clients, 1 to 4096 (default 16)")
    batch_sizes: tuple[int, ...] = option(
        (1, 2, 4, 8),
        "request batch sizes, cycled, of the check and the sweep's first mix (default 1,2,4,8)",
        type="integer_list",
        metavar="1,2,4,8",
    )
    protocol: str = option("grpc", "the check's protocol (default grpc)", choices=PROTOCOLS)
    shared_memory: str = option(
        "none",
        "where requests carry their tensors: none (in the request, default), system (/dev/shm regions the server "
        "maps) or cuda (GPU memory the server maps; needs cuda-python); regions are registered once, reused and "
        "removed on every exit; the server must run on this machine",
        choices=SHARED_MEMORY_MODES,
    )
    kill_backend: bool = option(
        False, "kill the model's backend once: halfway through the --soak when given, else a quarter into the check"
    )
    sweep: tuple[int, ...] = option(
        (),
        "timed load: requests in flight per point, from several client processes over gRPC (default: none)",
        type="integer_list",
        metavar="16,64,256",
    )
    mixes: tuple[tuple[int, ...], ...] = option(
        (),
        "a further mix of request sizes for the sweep (repeatable)",
        flag="--mix",
        type="integer_list",
        metavar="1,2,...,64",
        repeat=True,
    )
    processes: int | None = option(
        None, "client processes of the sweep, 1 to 64 (default: a quarter of the cores, 1 to 4)"
    )
    window_s: float = option(3.0, "seconds measured per point of the sweep (default 3)", flag="--window", type="number")
    connections: str = option(
        "process",
        "the sweep's gRPC connections: process (a client process's requests in flight share its one connection, "
        "default) or client (a connection per request in flight, as independent clients hold them)",
        choices=CLIENT_CONNECTIONS,
    )
    extra_process: bool = option(
        True,
        "skip the sweep's last point: the busiest one again with one more client process",
        negative="--no-extra-process",
    )
    soak_s: float | None = option(
        None,
        "after the check and the sweep, a soak of this many seconds: --concurrency requests in flight, sizes cycling "
        "through --batch-sizes, every answer checked, failed requests retried, memory sampled (docs/serving.md)",
        flag="--soak",
        type="number",
        metavar="SECONDS",
    )
    sample_every_s: float = option(
        60.0, "seconds between the soak's memory samples (default 60)", flag="--sample-every", type="number"
    )
    json_path: str | None = option(None, "load test: write the results as JSON", flag="--json", metavar="FILE")


# -------------------------------------------------------------------------------------------------------------
# The command line's side: argument groups made from the dataclasses, and the dataclasses read back
# -------------------------------------------------------------------------------------------------------------


def _flag(item: dataclasses.Field) -> str:
    if item.metadata.get("negative"):
        return item.metadata["negative"]
    return item.metadata.get("flag") or "--" + item.name.replace("_", "-")


def _dest(item: dataclasses.Field) -> str:
    return _flag(item).lstrip("-").replace("-", "_")


def add_group(
    parser: Any,
    cls: type,
    title: str | None = None,
    *,
    types: Any,
    skip: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
) -> Any:
    """Add the fields of ``cls`` (``only`` those, in that order, else all but ``skip``) to ``parser`` (a parser or an
    argument group) as options, in a group titled ``title`` (none: on ``parser`` itself). ``types``: the module of
    argparse types (wtconv_trt.arguments), named by a field's ``type``; an int field without one takes
    ``types.integer``. An option left out is None in the parsed arguments (the command can tell it was not given);
    from_args then takes the field's default. Returns the group."""
    group = parser.add_argument_group(title) if title else parser
    fields = {item.name: item for item in dataclasses.fields(cls)}
    chosen = [fields[name] for name in only] if only is not None else [f for f in fields.values() if f.name not in skip]
    exclusive: dict[str, Any] = {}  # a field's ``exclusive`` name -> its mutually exclusive group
    for item in chosen:
        meta = item.metadata
        place = group
        if meta.get("exclusive"):
            place = exclusive.setdefault(meta["exclusive"], group.add_mutually_exclusive_group())
        kwargs: dict[str, Any] = {"help": meta["help"], "dest": _dest(item), "default": None}
        if meta.get("negative") or item.type == "bool":
            kwargs["action"] = "store_true"
        else:
            type_name = meta.get("type") or ("integer" if "int" in str(item.type) else None)
            if type_name:
                kwargs["type"] = getattr(types, type_name)
            if "choices" in meta:
                kwargs["choices"] = list(meta["choices"])
            if "metavar" in meta:
                kwargs["metavar"] = meta["metavar"]
            if meta.get("repeat"):
                kwargs["action"] = "append"
        place.add_argument(_flag(item), **kwargs)
    return group


def from_args(cls: type, args: Any, **given: Any) -> Any:
    """The ``cls`` the command line's ``args`` hold (its options as add_group made them; one left out takes the
    field's default); ``given``: fields the command sets itself (e.g. a positional argument)."""
    values = {}
    for item in dataclasses.fields(cls):
        if item.name in given or getattr(args, _dest(item), None) is None:
            continue
        value = getattr(args, _dest(item))
        if item.metadata.get("negative"):
            value = not value
        elif isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        values[item.name] = value
    return cls(**values, **given)


def help_of(cls: type, name: str) -> str:
    """The help text of field ``name`` of ``cls``, for a command that declares the option in a group of its own
    (e.g. a required choice between two)."""
    return next(item.metadata["help"] for item in dataclasses.fields(cls) if item.name == name)


def refuse_others(options: Any, taken: tuple[str, ...], job: str) -> None:
    """InputError naming the first field of ``options`` (a dataclass of this module) given a value other than its
    default that is not among ``taken``, the fields ``job`` reads (e.g. "a repository for Triton's TensorRT
    backend"): a Python caller learns that the option does nothing there, as argparse tells a command line."""
    from wtconv_core.errors import InputError

    for item in dataclasses.fields(options):
        if item.name not in taken and getattr(options, item.name) != item.default:
            raise InputError(f"{item.name}: not an option of {job}", parameter=item.name)


def split_keywords(keywords: Mapping[str, Any], *classes: type) -> list[Any]:
    """Flat keyword arguments (the API's ``serve(onnx, http_port=0, ...)``) shared out among ``classes`` by field
    name: one instance of each. TypeError naming a keyword no class has, as Python says for any unknown keyword."""
    remaining = dict(keywords)
    made = []
    for cls in classes:
        names = {item.name for item in dataclasses.fields(cls)}
        made.append(cls(**{k: remaining.pop(k) for k in list(remaining) if k in names}))
    if remaining:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(remaining))}")
    return made


@dataclass(frozen=True)
class ServingOptions:
    """Every option of ``wtconv-trt serve`` (wtconv_trt.api.serving.plan_serving), by concept."""

    repository: RepositoryOptions = RepositoryOptions()
    tuning: TuningOptions = TuningOptions()
    server: ServerOptions = ServerOptions()
    load_test: LoadTestOptions = LoadTestOptions()

    @classmethod
    def from_keywords(cls, **keywords: Any) -> ServingOptions:
        """The options of the API's flat keywords (``serve(onnx, http_port=0, runtime="onnxruntime")``), each
        given to the group that declares it (split_keywords)."""
        repository, tuning, server, load_test = split_keywords(
            keywords, RepositoryOptions, TuningOptions, ServerOptions, LoadTestOptions
        )
        return cls(repository, tuning, server, load_test)

    @classmethod
    def from_args(cls, args: Any) -> ServingOptions:
        """The options the command line's ``args`` hold (their groups made by add_group)."""
        groups = (RepositoryOptions, TuningOptions, ServerOptions, LoadTestOptions)
        return cls(*(from_args(group, args) for group in groups))
