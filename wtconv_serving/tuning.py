"""How a served model runs, with every default in one place (docs/serving.md, "Tuning"): the batch buckets a batch is
padded up to, CUDA graphs, cuDNN's convolution search in ONNX Runtime, instances per GPU, and the queue policy that
answers overload at once with an error.

Why buckets: ONNX Runtime's CUDA Conv keeps the plan of the last input shape only, so every new batch size the
dynamic batcher forms searches cuDNN's algorithms again (about 100 ms with EXHAUSTIVE on WTConvNeXt-T); a fixed set
of sizes, each warmed up (and captured as a CUDA graph) at load, never re-plans while serving. The defaults below are
the values ``tools/device_serving.sh`` measures against their alternatives; change them here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from wtconv_core.errors import InputError
from wtconv_core.inputs import MAX_INT32, check_choice, check_int
from wtconv_core.options import CUDNN_SEARCHES, GPU_INSTANCES, TuningOptions

__all__ = [
    "CUDNN_CODES",
    "CUDNN_SEARCHES",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_TUNING",
    "MAX_BATCH_BYTES",
    "Tuning",
    "bucket_for",
    "check_buckets",
    "check_tuning",
    "default_buckets",
    "default_max_batch",
]

# The largest max_batch_size chosen by default, and the input bytes its largest batch may take ("where memory
# allows"): 128 images of 3x224x224 in fp32 take 77 MB, in fp16 39 MB.
DEFAULT_MAX_BATCH = 128
MAX_BATCH_BYTES = 128 * 2**20
CUDNN_CODES = {"EXHAUSTIVE": 0, "HEURISTIC": 1, "DEFAULT": 2}  # the integers Triton's onnxruntime backend reads
MAX_QUEUE_SIZE = 10**6
MAX_QUEUE_TIMEOUT_MS = 3_600_000


@dataclass(frozen=True)
class Tuning:
    """How the runners and Triton's scheduler serve a model.

    buckets: the batch sizes a batch is padded up to on a GPU (the padding is dropped from the answer); Triton's
    preferred batch sizes and the warm-up sizes; () means default_buckets(max_batch_size) (with_max_batch).
    cuda_graphs: replay one CUDA graph per bucket (torch-cuda, ONNX Runtime's enable_cuda_graph, TensorRT); a runner
    whose capture fails runs eagerly and says so. cudnn_search: see CUDNN_SEARCHES. session_per_bucket: ONNX Runtime
    on a GPU without graphs: one session per bucket, so no Conv ever sees a second shape. gpu_instances: model
    instances per GPU when not given (several, so that some copy their batches on the host while one computes;
    wtconv_core.options says what was measured). Defaults: wtconv_core.options.TuningOptions.
    max_queue_size: requests waiting beyond it are refused at once; queue_timeout_ms: a request waiting longer is
    refused (0: no limit)."""

    buckets: tuple[int, ...] = ()
    cuda_graphs: bool = TuningOptions.cuda_graphs
    cudnn_search: str = TuningOptions.cudnn_search
    session_per_bucket: bool = TuningOptions.session_per_bucket
    gpu_instances: int = GPU_INSTANCES
    max_queue_size: int = TuningOptions.max_queue_size
    queue_timeout_ms: int = TuningOptions.queue_timeout_ms

    def with_max_batch(self, max_batch_size: int) -> Tuning:
        """These settings with the buckets resolved for ``max_batch_size`` (default_buckets when none are given);
        InputError when a bucket exceeds it or the largest bucket is not max_batch_size."""
        if max_batch_size <= 0:
            return replace(self, buckets=())
        buckets = self.buckets or default_buckets(max_batch_size)
        if buckets[-1] != max_batch_size:
            raise InputError(
                f"buckets {list(buckets)}: the largest must be max_batch_size ({max_batch_size}), since the dynamic "
                f"batcher forms batches up to it; add {max_batch_size} or lower max_batch_size",
                parameter="buckets",
            )
        return replace(self, buckets=tuple(buckets))

    def cudnn_search_for(self, graphs: bool) -> str:
        """The cudnn_conv_algo_search ONNX Runtime gets, with or without CUDA graphs."""
        if self.cudnn_search != "auto":
            return self.cudnn_search
        return "EXHAUSTIVE" if graphs else "HEURISTIC"

    def parameters(self) -> dict[str, str]:
        """The string parameters of a Python-backend config that carry these settings to the model (from_parameters
        reads them back)."""
        return {
            "buckets": ",".join(map(str, self.buckets)),
            "cuda_graphs": "1" if self.cuda_graphs else "0",
            "cudnn_conv_algo_search": self.cudnn_search,
            "session_per_bucket": "1" if self.session_per_bucket else "0",
        }

    @classmethod
    def from_parameters(cls, parameters: dict) -> Tuning:
        """The settings a config's parameters carry (parameters()); absent ones take the defaults."""
        default = cls()
        text = parameters.get("buckets") or ""
        return cls(
            buckets=tuple(int(b) for b in text.split(",") if b.strip()),
            cuda_graphs=parameters.get("cuda_graphs", "1" if default.cuda_graphs else "0") == "1",
            cudnn_search=parameters.get("cudnn_conv_algo_search") or default.cudnn_search,
            session_per_bucket=parameters.get("session_per_bucket", "0") == "1",
        )


DEFAULT_TUNING = Tuning()


def check_tuning(options: TuningOptions | None = None, **keywords) -> Tuning:
    """The API's tuning options (a TuningOptions, or its fields as keywords) checked (buckets: distinct sizes from
    1, sorted here; cudnn_search one of CUDNN_SEARCHES; a queue of 1 to 10**6 requests, or 0 for no limit; a timeout
    of 0 to 3,600,000 ms)."""
    o = options or TuningOptions(**keywords)
    return Tuning(
        buckets=() if o.buckets is None else check_buckets(o.buckets),
        cuda_graphs=bool(o.cuda_graphs),
        cudnn_search=check_choice(o.cudnn_search, "cudnn_search", CUDNN_SEARCHES),
        session_per_bucket=bool(o.session_per_bucket),
        max_queue_size=check_int(o.max_queue_size, "max_queue_size", 0, MAX_QUEUE_SIZE, " (0: no limit)"),
        queue_timeout_ms=check_int(o.queue_timeout_ms, "queue_timeout_ms", 0, MAX_QUEUE_TIMEOUT_MS, " (0: no limit)"),
    )


def check_buckets(buckets: Sequence[int]) -> tuple[int, ...]:
    """Distinct batch sizes from 1 to 2**31-1, returned sorted; InputError otherwise."""
    sizes = [check_int(b, "buckets", 1, MAX_INT32) for b in buckets]
    if not sizes:
        raise InputError("buckets: expected at least one batch size, e.g. 1,2,4,8", parameter="buckets")
    if len(set(sizes)) != len(sizes):
        raise InputError(f"buckets {list(buckets)}: each batch size once", parameter="buckets")
    return tuple(sorted(sizes))


def default_max_batch(image_bytes: int) -> int:
    """max_batch_size for a model whose one input image takes ``image_bytes``: DEFAULT_MAX_BATCH, halved while its
    largest batch would take more than MAX_BATCH_BYTES (at least 1)."""
    batch = DEFAULT_MAX_BATCH
    while batch > 1 and batch * image_bytes > MAX_BATCH_BYTES:
        batch //= 2
    return batch


# From this max_batch_size on, the buckets above a quarter of it step by an eighth of it (at least 8 images).
FINE_STEPS_FROM = 64


def default_buckets(max_batch_size: int) -> tuple[int, ...]:
    """Powers of two below ``max_batch_size``, and max_batch_size itself; from a max_batch_size of FINE_STEPS_FROM
    on, powers of two up to a quarter of it, then steps of an eighth of it (128: 1, 2, 4, 8, 16, 32, 48, 64, 80, 96,
    112, 128). Where a batch keeps the GPU busy its time grows with its size, so a batch between two powers of two
    pays for the padding up to the larger, or for the pieces it is split into; the finer steps there spare most of
    that (docs/serving.md, "Padded or split")."""
    sizes, size = [], 1
    fine = max_batch_size >= FINE_STEPS_FROM
    while size < max_batch_size and (not fine or size * 4 <= max_batch_size):
        sizes.append(size)
        size *= 2
    if fine:
        for eighth in range(1, 8):
            step = round(eighth * max_batch_size / 8)
            if step > sizes[-1]:
                sizes.append(step)
    return (*sizes, max_batch_size)


def bucket_for(rows: int, buckets: Sequence[int]) -> int:
    """The smallest bucket holding ``rows`` (rows itself when there are no buckets); ValueError above the largest."""
    if not buckets:
        return rows
    for size in buckets:
        if size >= rows:
            return size
    raise ValueError(f"a batch of {rows} exceeds the largest bucket {buckets[-1]}")
