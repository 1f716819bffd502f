"""What every served runtime shares: a batch made of several requests' rows, run on buffers made once, and the one
load-time check of a captured CUDA graph.

``BatchRunner.run(parts)`` takes the requests' arrays as the dynamic batcher hands them over and returns one output
per request. On a GPU runner (``DeviceBuffers``, made once at load) a batch costs:

- inputs that arrived on the GPU (a client's CUDA shared memory; the Python backend hands them over through DLPack):
  one copy on the GPU into the batch's device buffer (a CUDA graph reads a fixed address), none through the host;
- inputs that arrived on the host: one copy into the pinned staging buffer, then one copy to the device per run of
  consecutive host parts (``staging_plan``);
- the outputs: where the inputs came from (``outputs_on_device``). A batch whose every input came on the GPU is
  answered on the GPU: one copy of the batch's rows on the GPU (the graph's output buffer is reused by the next
  batch), whose per-request views the backend takes through DLPack and Triton copies where the client wants them
  (its CUDA region, or the host). Any other batch: one copy to a pinned host buffer. Either way one synchronisation.

A GPU runner runs a batch on its buckets (wtconv_serving.tuning) as its ``plan`` says (bucket_plan.BucketPlan, from
each bucket's time measured at load): padded up to one bucket, or split into several pieces, each moved to the front
of the device buffer and its output rows gathered into one batch output; the padding is dropped from the answer.
``check_graph_replay`` is how every runner checks a CUDA graph it captured, at load.

GPU only: pinned memory and CUDA streams. On the CPU (the tests) the same code runs with plain host buffers and no
stream, device parts being PyTorch tensors, so the staging and the choices above are checked there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from wtconv_core.errors import ServingError
from wtconv_serving.runners.bucket_plan import BucketPlan, gpu_alone, time_buckets
from wtconv_serving.tuning import bucket_for

log = logging.getLogger(__name__)

__all__ = [
    "BatchRunner",
    "DeviceBuffers",
    "check_graph_replay",
    "graph_tolerance",
    "outputs_on_device",
    "relative_difference",
    "staging_plan",
]


def on_host(part) -> bool:
    """Whether a request's input is in host memory (a NumPy array; a tensor from DLPack is on the GPU)."""
    return isinstance(part, np.ndarray)


def outputs_on_device(parts: Sequence) -> bool:
    """Whether a batch is answered on the GPU: when every one of its inputs came there (docstring above)."""
    return bool(parts) and not any(on_host(p) for p in parts)


def staging_plan(parts: Sequence) -> tuple[list, list, list]:
    """Where each part's rows go in the batch: ([(part index, first row, rows)] of the host parts, the same of the
    device parts, [(first row, end row)] of the runs of consecutive host rows, each one copy to the device)."""
    host, device, runs = [], [], []
    start = 0
    for index, part in enumerate(parts):
        count = len(part)
        if on_host(part):
            host.append((index, start, count))
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], start + count)
            else:
                runs.append((start, start + count))
        else:
            device.append((index, start, count))
        start += count
    return host, device, runs


class BatchRunner:
    """Base of the runners: ``run(parts)`` and ``__call__(x)`` (one part). Subclasses set the names, dtypes and
    ``buckets`` (empty: every batch runs at its own size). A runner without buffers implements ``_run``; a GPU runner
    with buffers sets ``buffers`` (DeviceBuffers) and implements ``_run_bucket``, and ``run`` stages the batch, runs
    its pieces (``plan``, made by ``prepare_buckets`` at load; without it every batch is padded up to one bucket)
    and brings the output where it belongs."""

    name = ""
    buckets: tuple[int, ...] = ()
    buffers = None
    plan: BucketPlan | None = None
    input_name = "input"
    output_name = "output"
    input_dtype = np.dtype(np.float32)
    output_dtype = np.dtype(np.float32)

    def __call__(self, x) -> np.ndarray:
        return self.run([x])[0]

    def run(self, parts: Sequence) -> list:
        """One output per part, in order: NumPy arrays, or for a batch whose inputs all came on the GPU, tensors on
        the GPU (outputs_on_device); the parts run as one batch of their rows, padded up to its bucket."""
        sizes = [len(p) for p in parts]
        rows = sum(sizes)
        if self.buffers is None:
            out = self._run(parts, rows, bucket_for(rows, self.buckets))
        else:
            out = self.buffers.fetch(self._run_pieces(parts, rows), rows, on_device=outputs_on_device(parts))
        outputs, start = [], 0
        for count in sizes:
            if on_host(out):
                outputs.append(np.array(out[start : start + count]))  # a copy: the buffer is reused by the next batch
            else:
                outputs.append(out[start : start + count])  # views of this batch's own copy (fetch)
            start += count
        return outputs

    def _run(self, parts: Sequence, rows: int, size: int):
        """Without buffers: the outputs of the batch, ``rows`` rows as a NumPy array."""
        raise NotImplementedError

    def _run_bucket(self, size: int):
        """With buffers: run bucket ``size`` on ``buffers.device_input[:size]`` on the runner's stream (queued, not
        waited for); the device tensor its output is in (at least ``size`` rows), valid until that bucket runs
        again."""
        raise NotImplementedError

    def _run_pieces(self, parts: Sequence, rows: int):
        """The batch staged into the device buffer and run as the plan's pieces (module docstring); the device
        tensor holding its ``rows`` output rows."""
        buffers = self.buffers
        pieces = self.plan.pieces(rows) if self.plan else [(0, rows, bucket_for(rows, self.buckets))]
        with buffers.current_device():
            buffers.stage(parts, rows)
            if len(pieces) == 1:
                return self._run_bucket(pieces[0][2])
            for start, count, bucket in pieces:
                buffers.move_to_front(start, count)
                buffers.gather(self._run_bucket(bucket), start, count)
            return buffers.gathered

    def prepare_buckets(self, prepare) -> None:
        """At load: ``prepare()`` (the runner's warm-up, graph captures and checks of every bucket), then each bucket
        timed on the runner's stream and the plan made from the times (bucket_plan); both with the GPU to this runner
        alone among those of this host (gpu_alone), so that the times are the GPU's own."""
        buffers = self.buffers
        with gpu_alone(buffers.device_input.device.index or 0):
            prepare()
            with buffers.current_device():
                seconds = time_buckets(self.torch, buffers.stream, self.buckets, self._run_bucket)
        self.plan = BucketPlan(self.buckets, seconds)
        log.info("%s: %s", self.name, self.plan.describe())

    @property
    def description(self) -> str:
        """Where and how the runner runs the model, in one phrase."""
        return self.name


def host_array(part) -> np.ndarray:
    """A part as a host NumPy array (a CUDA tensor is copied to the host)."""
    if isinstance(part, np.ndarray):
        return part
    return part.cpu().numpy() if hasattr(part, "cpu") else np.asarray(part)


class DeviceBuffers:
    """The staging and device buffers of batches of up to ``rows`` images on ``device`` (a torch device), the copies
    on ``stream``: ``stage`` puts the parts into ``device_input``, ``fetch`` brings the output's rows where they are
    wanted and synchronises once (module docstring). The host buffer is pinned on a CUDA device (GPU only); on the
    CPU, with ``stream`` None, the same steps run on plain memory."""

    def __init__(self, torch, device, stream, rows: int, input_dims, input_dtype):
        self.torch, self.device, self.stream = torch, device, stream
        self.pinned = torch.device(device).type == "cuda"
        dtype = _torch_dtype(torch, input_dtype)
        self.host_input = torch.empty((rows, *input_dims), dtype=dtype, pin_memory=self.pinned)
        self.host_input_array = self.host_input.numpy()
        self.device_input = torch.empty((rows, *input_dims), dtype=dtype, device=device)
        self.host_output = None
        self.gathered = None  # a batch run in pieces: its output rows, gathered (made at the first such batch)

    def stage(self, parts: Sequence, rows: int) -> None:
        """Copy the parts' rows into device_input[:rows]: a part on the GPU directly (one copy on the GPU); the host
        parts into the pinned buffer (one host copy each), then one copy to the device per run of them."""
        torch = self.torch
        host, device, runs = staging_plan(parts)
        for index, start, count in host:
            self.host_input_array[start : start + count] = parts[index]
        with torch.cuda.stream(self.stream):
            for index, start, count in device:
                self.device_input[start : start + count].copy_(parts[index].to(self.device), non_blocking=True)
            for start, end in runs:
                self.device_input[start:end].copy_(self.host_input[start:end], non_blocking=self.pinned)

    def move_to_front(self, start: int, count: int) -> None:
        """A piece's rows moved to the front of device_input, where its bucket reads them (on the stream, after the
        earlier pieces' runs; the rows do not overlap: bucket_plan's module docstring)."""
        if start:
            with self.torch.cuda.stream(self.stream):
                self.device_input[:count].copy_(self.device_input[start : start + count])

    def gather(self, output, start: int, count: int) -> None:
        """A piece's ``count`` output rows (the first of ``output``) into rows ``start``... of ``gathered``."""
        torch = self.torch
        shape = (len(self.device_input), *output.shape[1:])
        if self.gathered is None or tuple(self.gathered.shape) != shape or self.gathered.dtype != output.dtype:
            self.gathered = torch.empty(shape, dtype=output.dtype, device=output.device)
        with torch.cuda.stream(self.stream):
            self.gathered[start : start + count].copy_(output[:count])

    def fetch(self, output, rows: int, on_device: bool = False):
        """The first ``rows`` rows of the device tensor ``output``, after one synchronisation of the stream: on the
        host (a pinned buffer, valid until the next batch) or with ``on_device`` a copy of them on the device, which
        the answers of this batch keep (the graph's output is the next batch's)."""
        torch = self.torch
        with self.current_device(), torch.cuda.stream(self.stream):
            if on_device:
                rows_out = output[:rows].clone()
            else:
                if self.host_output is None or self.host_output.shape[1:] != output.shape[1:]:
                    capacity = len(self.device_input)
                    shape = (capacity, *output.shape[1:])
                    self.host_output = torch.empty(shape, dtype=output.dtype, pin_memory=self.pinned)
                self.host_output[:rows].copy_(output[:rows], non_blocking=self.pinned)
                rows_out = self.host_output[:rows].numpy()
        self._synchronize()
        return rows_out

    def current_device(self):
        """The runner's GPU made current (GPU only; nothing on the CPU)."""
        import contextlib

        return self.torch.cuda.device(self.device) if self.pinned else contextlib.nullcontext()

    def _synchronize(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()


def _torch_dtype(torch, dtype):
    return {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}[np.dtype(dtype)]


def relative_difference(got: np.ndarray, want: np.ndarray) -> float:
    """The largest absolute difference over the largest magnitude of ``want`` (inf for another shape or a value
    that is not finite)."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    if got.shape != want.shape or not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-12)


def graph_tolerance(dtype) -> float:
    """How far a graph's output may be from an eager run's: the rounding of the output's precision (a CUDA graph
    may replay another convolution algorithm than an eager run picks; an fp16 output's last bit is about 1e-3 of
    its largest value), far below what a missed piece of work gives (NaN or an answer to another input)."""
    return 1e-2 if np.dtype(dtype) == np.float16 else 1e-3


def check_graph_replay(torch, stream, new_input, output, replay, eager, dtype, bucket: int) -> float:
    """The load-time check of a captured CUDA graph, one for every runner: new values in the graph's input buffer
    (``new_input``), its output buffer ``output`` filled with NaN, ``replay()``; then ``output`` filled with NaN again
    and ``eager()`` run on the same input, which returns the tensor holding its answer (``output`` itself for a
    runtime writing into bound buffers, or a tensor of its own). A graph that missed work done outside its capture
    leaves NaN or answers the input it was captured on; one that replays another convolution algorithm than an eager
    run picks differs by rounding (graph_tolerance). ServingError naming the bucket when they disagree; returns the
    difference (relative_difference)."""
    nan = float("nan")

    def synchronize():
        if stream is not None:
            stream.synchronize()

    # inference mode: the PyTorch runner's output is an inference tensor (captured under torch.inference_mode()),
    # which PyTorch updates in place only in that mode
    with torch.inference_mode(), torch.cuda.stream(stream):
        new_input.normal_()
        output.fill_(nan)
    synchronize()
    with torch.cuda.stream(stream):
        replay()
    synchronize()
    graph = np.array(output.float().cpu().numpy())  # a copy: on the CPU .cpu() is the buffer itself
    with torch.inference_mode(), torch.cuda.stream(stream):
        output.fill_(nan)
        answer = eager()
    synchronize()
    error, tolerance = relative_difference(graph, answer.float().cpu().numpy()), graph_tolerance(dtype)
    if not error <= tolerance:
        raise ServingError(
            f"batch {bucket}: the CUDA graph's output differs from an eager run's by {error:.1e} of its largest value "
            f"(at most {tolerance:.0e})"
        )
    return error
