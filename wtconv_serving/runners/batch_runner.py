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

The batch is padded up to its bucket (wtconv_serving.tuning) and the padding dropped from the answer.
``check_graph_replay`` is how every runner checks a CUDA graph it captured, at load.

GPU only: pinned memory and CUDA streams. On the CPU (the tests) the same code runs with plain host buffers and no
stream, device parts being PyTorch tensors, so the staging and the choices above are checked there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from wtconv_core.errors import ServingError
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
    ``buckets`` (empty: every batch runs at its own size) and implement ``_run``; a GPU runner with buffers sets
    ``buffers`` (DeviceBuffers), and its ``_run`` returns the device output, which run brings where it belongs."""

    name = ""
    buckets: tuple[int, ...] = ()
    buffers = None
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
        size = bucket_for(rows, self.buckets)
        out = self._run(parts, rows, size)
        if self.buffers is not None and not on_host(out):
            out = self.buffers.fetch(out, rows, on_device=outputs_on_device(parts))
        outputs, start = [], 0
        for count in sizes:
            if on_host(out):
                outputs.append(np.array(out[start : start + count]))  # a copy: the buffer is reused by the next batch
            else:
                outputs.append(out[start : start + count])  # views of this batch's own copy (fetch)
            start += count
        return outputs

    def _run(self, parts: Sequence, rows: int, size: int):
        """The outputs of the batch (at least ``rows`` rows), valid until the next call: a NumPy array, or with
        ``buffers`` the device tensor the model wrote."""
        raise NotImplementedError

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

    def fetch(self, output, rows: int, on_device: bool = False):
        """The first ``rows`` rows of the device tensor ``output``, after one synchronisation of the stream: on the
        host (a pinned buffer, valid until the next batch) or with ``on_device`` a copy of them on the device, which
        the answers of this batch keep (the graph's output is the next batch's)."""
        torch = self.torch
        with self._on_device(), torch.cuda.stream(self.stream):
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

    def _on_device(self):
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
