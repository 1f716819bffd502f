"""The ``onnxruntime`` runtime: the exported ONNX model itself in ONNX Runtime, on the CPU or through onnxruntime-gpu's
CUDA execution provider, its WTConv2d nodes on libwtconv_ort.so (wtconv_ort.execution plans where and how).

On a GPU with buckets (docs/serving.md, "Tuning"), every bucket runs through I/O binding on device buffers made once,
with ONNX Runtime on our stream (``user_compute_stream``), so a batch is one copy in, one run, one copy out and one
synchronisation. Three ways keep ONNX Runtime's CUDA Conv from re-planning whenever the batch size changes (it keeps
the plan of the last shape only): CUDA graphs (``enable_cuda_graph``, one ``gpu_graph_id`` per bucket: the plan
searched at capture is replayed), one session per bucket, or a cheap search (HEURISTIC) in one session.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from wtconv_core.errors import ServingError
from wtconv_serving.runners.batch_runner import BatchRunner, DeviceBuffers, check_graph_replay, host_array
from wtconv_serving.tuning import Tuning

log = logging.getLogger(__name__)

__all__ = ["OnnxRuntimeRunner", "OrtModel"]

_ONNX_NUMPY = {1: np.float32, 10: np.float16}  # onnx.TensorProto.FLOAT, FLOAT16
# ONNX Runtime captures a graph id once the session has made this many regular runs (its CUDA EP's
# min_num_runs_before_cuda_graph_capture, at most 2 in the releases we use), then replays it: warm-up runs each
# bucket once more than that, so the last run is a replay.
RUNS_BEFORE_CAPTURE = 2


@dataclass(frozen=True)
class OrtModel:
    """An export read once, with where ONNX Runtime runs it and what runs its WTConv2d nodes planned once (load):
    what OnnxRuntimeRunner runs; ``threads``: ONNX Runtime's intra-op threads (0: its own)."""

    runtime: ClassVar[str] = "onnxruntime"
    exported: Any  # wtconv_export.exported.ExportedModel
    execution: Any  # wtconv_ort.execution.OrtExecution
    threads: int = 0

    @classmethod
    def load(cls, onnx, ort_device: str = "cpu", device: int = 0, library=None, threads: int = 0) -> OrtModel:
        """``onnx`` (its path, read once here, or its ExportedModel) on the CPU (``ort_device="cpu"``) or on GPU
        ``device`` through the CUDA execution provider (``"cuda"``), its WTConv2d nodes on ``library`` (default: the
        libwtconv_ort.so found in lookup order; wtconv_ort.execution.plan_ort_execution)."""
        from wtconv_export.exported import ExportedModel
        from wtconv_ort.execution import plan_ort_execution

        exported = ExportedModel.of(onnx)
        return cls(exported, plan_ort_execution(exported, _ort_device_text(ort_device, device), library), int(threads))

    def runner(self, *, buckets=(), input_dims=None, tuning: Tuning | None = None) -> OnnxRuntimeRunner:
        """A runner on this model (runtimes.make_runner)."""
        return OnnxRuntimeRunner(self, buckets=buckets, input_dims=input_dims, tuning=tuning)


class OnnxRuntimeRunner(BatchRunner):
    """The exported model in ONNX Runtime, as an OrtModel plans it (``model``; or the export's path, loaded here with
    ``threads``, ``ort_device``, ``device`` and ``library``: OrtModel.load). On the GPU with ``buckets`` and
    ``input_dims``, batches are padded up to their bucket and run as ``tuning`` says (the module docstring); a capture
    that fails or answers differently from an eager run at load falls back to eager sessions, and ``description``
    says so."""

    name = "onnxruntime"

    def __init__(
        self,
        model,
        threads: int = 0,
        *,
        ort_device: str = "cpu",
        device: int = 0,
        library=None,
        buckets=(),
        input_dims=None,
        tuning: Tuning | None = None,
    ):
        if not isinstance(model, OrtModel):
            model = OrtModel.load(model, ort_device, device, library, threads)
        self.exported = model.exported
        self.onnx_path = self.exported.path
        self.threads = model.threads
        self.execution = model.execution
        self.tuning = tuning or Tuning()
        self.mode = "eager"
        self.fallback_note = ""
        self.sessions: dict = {}  # bucket -> session (one shared session unless per bucket)
        self.buffers = None
        self._read_io()
        self.staging = None
        gpu = self.execution.device == "cuda" and buckets and input_dims and all(int(d) > 0 for d in input_dims)
        if not gpu:
            self.session = self._session(self.execution)
            return
        import torch

        self.torch = torch
        self.buckets = tuple(int(b) for b in buckets)
        self.device = torch.device("cuda", self.execution.device_id)
        with torch.cuda.device(self.device):
            self.stream = torch.cuda.Stream(self.device)  # not the default stream, which ONNX Runtime refuses
            self.buffers = DeviceBuffers(
                torch, self.device, self.stream, self.buckets[-1], input_dims, self.input_dtype
            )
            self.prepare_buckets(self._prepare)

    # --- sessions -------------------------------------------------------------------------------------------------

    def _session(self, execution):
        import onnxruntime as ort

        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = self.threads
        return execution.session(self.exported, options)

    def _gpu_session(self, *, graphs: bool, search: str):
        """A CUDA-EP session on our stream: TF32 by precision (off for fp32, docs/onnx_runtime.md), the cuDNN search
        ``search``, and ONNX Runtime's CUDA graphs when ``graphs``."""
        from wtconv_ort.session import cuda_provider

        fp16 = self.input_dtype == np.float16
        options = {"cudnn_conv_algo_search": search, "user_compute_stream": str(self.stream.cuda_stream)}
        if graphs:
            options["enable_cuda_graph"] = "1"
        provider = cuda_provider(self.execution.device_id, tf32=fp16, **options)
        return self._session(dataclasses.replace(self.execution, providers=[provider, "CPUExecutionProvider"]))

    def _read_io(self) -> None:
        """The input's and output's names and dtypes, from the export read once (no session needed)."""
        inp, out = self.exported.inputs[0], self.exported.outputs[0]
        self.input_name, self.output_name = inp.name, out.name
        self.input_dtype = np.dtype(_ONNX_NUMPY[inp.elem_type])
        self.output_dtype = np.dtype(_ONNX_NUMPY[out.elem_type])

    @property
    def description(self) -> str:
        """Where ONNX Runtime runs the model, what runs its WTConv2d nodes, and how batches run."""
        text = self.execution.describe()
        if self.buffers is None:
            return text
        if self.input_dtype == np.float16:
            text = text.replace("TF32 off", "TF32 on (fp16 model)")
        sizes = ",".join(map(str, self.buckets))
        return f"{text}, buckets {sizes}, {self.mode}{self.fallback_note}"

    # --- GPU path -------------------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Sessions, bindings and warm-up of every bucket, as the tuning asks; CUDA graphs first when asked, eager
        sessions when their capture fails or disagrees with an eager run."""
        if self.tuning.cuda_graphs:
            try:
                self._build(graphs=True)
                return
            except Exception as error:  # onnxruntime's own exception types are not importable by a stable name
                reason = " ".join(str(error).split())[:300]
                log.warning("onnxruntime: CUDA graphs are off for this model: %s", reason)
                self.fallback_note = f" (CUDA graphs failed: {reason})"
                self.sessions, self.bindings = {}, {}
        self._build(graphs=False)

    def _build(self, graphs: bool) -> None:
        import onnxruntime as ort

        torch = self.torch
        per_bucket = not graphs and self.tuning.session_per_bucket
        search = self.tuning.cudnn_search_for(graphs or per_bucket)
        shared = None if per_bucket else self._gpu_session(graphs=graphs, search=search)
        self.bindings, self.run_options, self.outputs = {}, {}, {}
        with torch.cuda.stream(self.stream):  # ordered before ONNX Runtime's runs on the same stream
            self.buffers.device_input.normal_()
        for index, bucket in enumerate(self.buckets):
            session = shared or self._gpu_session(graphs=False, search=search)
            self.sessions[bucket] = session
            binding = session.io_binding()
            x = self.buffers.device_input[:bucket]
            binding.bind_input(
                self.input_name, "cuda", self.device.index, self.input_dtype.type, tuple(x.shape), x.data_ptr()
            )
            options = ort.RunOptions()
            options.add_run_config_entry("disable_synchronize_execution_providers", "1")  # we synchronise once
            if graphs:
                options.add_run_config_entry("gpu_graph_id", str(index + 1))
            # The output's shape from one run on a buffer of ONNX Runtime's, then our own buffer bound. That run must
            # not be captured (ONNX Runtime counts regular runs per session, not per graph id, so a later bucket's
            # first run would be): a graph replays into the buffer bound at capture, here one freed at once.
            binding.bind_output(self.output_name, "cuda", self.device.index)
            session.run_with_iobinding(binding, _eager_run_options(ort))
            self.stream.synchronize()
            shape = tuple(binding.get_outputs()[0].shape())
            output = torch.empty(shape, dtype=_torch_dtype(torch, self.output_dtype), device=self.device)
            binding.bind_output(
                self.output_name, "cuda", self.device.index, self.output_dtype.type, shape, output.data_ptr()
            )
            self.bindings[bucket], self.run_options[bucket], self.outputs[bucket] = binding, options, output
            for _ in range(RUNS_BEFORE_CAPTURE + 1 if graphs else 2):
                session.run_with_iobinding(binding, options)
            self.stream.synchronize()
            if graphs:
                self._check_replay(session, binding, options, output, bucket)
        if graphs:
            self.mode = f"CUDA graphs (cudnn_conv_algo_search {search} at capture)"
        elif per_bucket:
            self.mode = f"eager, one session per bucket (cudnn_conv_algo_search {search})"
        else:
            self.mode = f"eager (cudnn_conv_algo_search {search})"

    def _check_replay(self, session, binding, options, output, bucket: int) -> None:
        """check_graph_replay: a replay (``options``: the bucket's graph id) and an eager run of the same session
        (gpu_graph_id -1), both into the bound ``output``."""
        import onnxruntime as ort

        def run(run_options):
            session.run_with_iobinding(binding, run_options)
            return output

        x = self.buffers.device_input[:bucket]
        eager = _eager_run_options(ort)
        check_graph_replay(
            self.torch, self.stream, x, output, lambda: run(options), lambda: run(eager), self.output_dtype, bucket
        )

    def _run_bucket(self, size: int):
        self.sessions[size].run_with_iobinding(self.bindings[size], self.run_options[size])
        return self.outputs[size]

    def _run(self, parts, rows: int, size: int):
        """CPU, or a GPU without buckets: the parts in one host buffer (made once, grown when needed), one run."""
        if len(parts) == 1:
            x = np.ascontiguousarray(host_array(parts[0]))
        else:
            first = host_array(parts[0])
            if self.staging is None or len(self.staging) < rows or self.staging.shape[1:] != first.shape[1:]:
                self.staging = np.empty((rows, *first.shape[1:]), dtype=first.dtype)
            start = 0
            for part in parts:
                self.staging[start : start + len(part)] = host_array(part)
                start += len(part)
            x = self.staging[:rows]
        return self.session.run([self.output_name], {self.input_name: x})[0]


def _eager_run_options(ort):
    """Run options for a run that neither captures nor replays a CUDA graph (gpu_graph_id -1)."""
    options = ort.RunOptions()
    options.add_run_config_entry("gpu_graph_id", "-1")
    return options


def _torch_dtype(torch, dtype):
    return {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}[np.dtype(dtype)]


def _ort_device_text(ort_device: str, device: int = 0) -> str:
    """plan_ort_execution's device for the runtime's ``ort_device`` ("cpu" or "cuda") on GPU ``device``."""
    if ort_device not in ("cpu", "cuda"):
        raise ServingError(
            f"ort_device {ort_device!r}: expected cpu or cuda (auto is resolved first: resolve_ort_device)"
        )
    return "cpu" if ort_device == "cpu" else f"cuda:{int(device)}"
