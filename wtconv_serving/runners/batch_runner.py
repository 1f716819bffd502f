"""What every served runtime shares: a batch made of several requests' rows, run on buffers made once.

``BatchRunner.run(parts)`` takes the requests' arrays as the dynamic batcher hands them over and returns one output
per request. Each part is copied once, into the batch's buffer (no concatenation); on a GPU the batch is padded up to
its bucket (wtconv_serving.tuning) and the padding dropped from the answer. ``DeviceBuffers`` holds the GPU runners'
pinned host buffers and device buffers, so a batch costs one copy in, one copy out and one synchronisation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from wtconv_serving.tuning import bucket_for

log = logging.getLogger(__name__)

__all__ = ["BatchRunner", "DeviceBuffers", "graph_agrees", "graph_tolerance", "relative_difference"]


class BatchRunner:
    """Base of the runners: ``run(parts)`` and ``__call__(x)`` (one part). Subclasses set the names, dtypes and
    ``buckets`` (empty: every batch runs at its own size) and implement ``_run``."""

    name = ""
    buckets: tuple[int, ...] = ()
    input_name = "input"
    output_name = "output"
    input_dtype = np.dtype(np.float32)
    output_dtype = np.dtype(np.float32)

    def __call__(self, x) -> np.ndarray:
        return self.run([x])[0]

    def run(self, parts: Sequence) -> list[np.ndarray]:
        """One output per part (NumPy arrays, or CUDA tensors through DLPack on a GPU runner), in order: the parts
        run as one batch of their rows, padded up to its bucket."""
        sizes = [len(p) for p in parts]
        rows = sum(sizes)
        size = bucket_for(rows, self.buckets)
        out = self._run(parts, rows, size)
        outputs, start = [], 0
        for count in sizes:
            outputs.append(np.array(out[start : start + count]))  # a copy: the buffer is reused by the next batch
            start += count
        return outputs

    def _run(self, parts: Sequence, rows: int, size: int) -> np.ndarray:
        """The outputs of the batch (at least ``rows`` rows), valid until the next call."""
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
    """Pinned host buffers and device buffers for batches of up to ``rows`` images on ``device`` (a torch device),
    the copies on ``stream``: ``stage`` puts the parts into the device input, ``fetch`` brings the output's rows to
    the host and synchronises once."""

    def __init__(self, torch, device, stream, rows: int, input_dims, input_dtype):
        self.torch, self.device, self.stream = torch, device, stream
        dtype = _torch_dtype(torch, input_dtype)
        self.host_input = torch.empty((rows, *input_dims), dtype=dtype, pin_memory=True)
        self.host_input_array = self.host_input.numpy()
        self.device_input = torch.empty((rows, *input_dims), dtype=dtype, device=device)
        self.host_output = None

    def stage(self, parts: Sequence, rows: int) -> None:
        """Copy the parts' rows into device_input[:rows]: host parts into the pinned buffer, then one copy to the
        device; a part already on this GPU (DLPack from the backend) directly."""
        torch = self.torch
        start = 0
        on_host = all(isinstance(p, np.ndarray) for p in parts)
        with torch.cuda.stream(self.stream):
            for part in parts:
                count = len(part)
                if on_host:
                    self.host_input_array[start : start + count] = part
                elif isinstance(part, np.ndarray):
                    self.device_input[start : start + count].copy_(torch.from_numpy(np.ascontiguousarray(part)))
                else:
                    self.device_input[start : start + count].copy_(part.to(self.device), non_blocking=True)
                start += count
            if on_host:
                self.device_input[:rows].copy_(self.host_input[:rows], non_blocking=True)

    def fetch(self, output, rows: int) -> np.ndarray:
        """The first ``rows`` rows of the device tensor ``output`` on the host (pinned buffer, valid until the next
        batch), after one synchronisation of the stream."""
        torch = self.torch
        if self.host_output is None or self.host_output.shape[1:] != output.shape[1:]:
            capacity = len(self.device_input)
            self.host_output = torch.empty((capacity, *output.shape[1:]), dtype=output.dtype, pin_memory=True)
        with torch.cuda.stream(self.stream):
            self.host_output[:rows].copy_(output[:rows], non_blocking=True)
        self.stream.synchronize()
        return self.host_output[:rows].numpy()


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


def graph_agrees(graph_output: np.ndarray, eager_output: np.ndarray, tolerance: float = 1e-3) -> bool:
    """A captured graph's output against the same model run eagerly on the same input, at load: a graph that missed
    work done outside the capture answers differently, and must not serve."""
    return relative_difference(graph_output, eager_output) <= tolerance
