"""The ``torch-cuda`` runtime: the PyTorch model of the ONNX file (its wtconv_trt.* metadata), WTConv2d layers fused on
our CUDA kernels, in the precision the model was exported in; one CUDA graph per bucket (docs/serving.md, "Tuning")."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from wtconv_core.errors import ServingError
from wtconv_serving.runners.batch_runner import BatchRunner, DeviceBuffers, check_graph_replay, host_array
from wtconv_serving.tuning import Tuning

log = logging.getLogger(__name__)

__all__ = ["TorchCudaRunner", "TorchModel"]


@dataclass(frozen=True)
class TorchModel:
    """An export read once, whose metadata names the PyTorch model each TorchCudaRunner rebuilds on GPU ``device``."""

    runtime: ClassVar[str] = "torch-cuda"
    exported: Any  # wtconv_export.exported.ExportedModel
    device: int = 0

    def runner(self, *, buckets=(), input_dims=None, tuning: Tuning | None = None) -> TorchCudaRunner:
        """A runner on this model (runtimes.make_runner)."""
        cuda_graphs = (tuning or Tuning()).cuda_graphs
        return TorchCudaRunner(
            self.exported, self.device, buckets=buckets, input_dims=input_dims, cuda_graphs=cuda_graphs
        )


class TorchCudaRunner(BatchRunner):
    """The model on GPU ``device``. With ``buckets`` and the input's ``input_dims`` (without the batch), batches run
    on pinned and device buffers made once, padded up to their bucket, each bucket replayed as a CUDA graph when
    ``cuda_graphs`` (captured and checked against an eager run at load; a bucket whose capture fails or disagrees
    runs eagerly, and ``description`` says so). Without them, each call allocates as PyTorch does."""

    name = "torch-cuda"

    def __init__(self, onnx_path, device: int = 0, *, buckets=(), input_dims=None, cuda_graphs: bool = True):
        import torch

        from wtconv_export.exported import ExportedModel
        from wtconv_export.onnx_models import build_model_from_metadata
        from wtconv_torch import cuda_kernels
        from wtconv_torch.fused_module import fuse_wtconv_layers

        exported = ExportedModel.of(onnx_path)  # the one read of the file
        metadata = exported.metadata
        cuda_kernels.register()
        model, _ = build_model_from_metadata(metadata)
        self.precision = metadata.get("precision", "fp32")
        self.torch_dtype = torch.float16 if self.precision == "fp16" else torch.float32
        # fp32 means fp32: no TF32 in the model's other convolutions and matmuls (as the exported model).
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        self.device = torch.device("cuda", int(device))
        self.model = fuse_wtconv_layers(model.float().eval().to(self.device, self.torch_dtype))
        self.input_name = exported.inputs[0].name
        self.output_name = exported.outputs[0].name
        self.input_dtype = self.output_dtype = np.dtype(np.float16 if self.precision == "fp16" else np.float32)
        self.torch = torch
        self.graphs: dict = {}  # bucket -> (CUDAGraph, its output tensor)
        self.eager_note = ""
        self.buffers = None
        if buckets and input_dims and all(int(d) > 0 for d in input_dims):
            self.buckets = tuple(int(b) for b in buckets)
            # Fixed shapes: cuDNN's search runs once per bucket and is remembered per shape (unlike ONNX Runtime).
            torch.backends.cudnn.benchmark = True
            with torch.cuda.device(self.device):
                self.stream = torch.cuda.Stream(self.device)
                self.buffers = DeviceBuffers(
                    torch, self.device, self.stream, self.buckets[-1], input_dims, self.input_dtype
                )
                self.prepare_buckets(lambda: self._prepare(cuda_graphs))

    @property
    def description(self) -> str:
        if self.buffers is None:
            return f"PyTorch on our CUDA kernels, {self.precision}, eager"
        graphs = sorted(self.graphs)
        how = f"CUDA graphs for batches {_sizes(graphs)}" if graphs else "eager"
        return f"PyTorch on our CUDA kernels, {self.precision}, buckets {_sizes(self.buckets)}, {how}{self.eager_note}"

    def _forward(self, x):
        with self.torch.inference_mode():
            return self.model(x).to(self.torch_dtype)

    def _prepare(self, cuda_graphs: bool) -> None:
        """Warm every bucket up (cuDNN's per-shape search) and, with graphs, capture it right after its warm-up (our
        kernels' plans are made per shape outside the capture), then check the replay (check_graph_replay). Largest
        first: the graphs share one memory pool, which is safe because each batch's output is copied out before
        another graph replays."""
        torch = self.torch
        pool = torch.cuda.graph_pool_handle() if cuda_graphs else None
        failed = []
        self.buffers.device_input.normal_()
        for bucket in sorted(self.buckets, reverse=True):
            x = self.buffers.device_input[:bucket]
            with torch.cuda.stream(self.stream):
                for _ in range(2):
                    self._forward(x)
            self.stream.synchronize()
            if not cuda_graphs:
                continue
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=self.stream):
                    output = self._forward(x)
                check_graph_replay(
                    torch, self.stream, x, output, graph.replay, lambda x=x: self._eager(x), self.output_dtype, bucket
                )
                self.graphs[bucket] = (graph, output)
            except (RuntimeError, ServingError) as error:
                failed.append(bucket)
                log.warning("torch-cuda: batch %d runs eagerly: capturing its CUDA graph failed: %s", bucket, error)
        if failed:
            self.eager_note = f" (eager for {_sizes(sorted(failed))}: capture failed)"

    def _eager(self, x):
        """An eager run on our stream, for the graph check."""
        with self.torch.cuda.stream(self.stream):
            return self._forward(x)

    def _run(self, parts, rows: int, size: int):
        """Without buckets: the batch as it comes, eagerly."""
        torch = self.torch
        x = parts[0] if len(parts) == 1 else np.concatenate([host_array(p) for p in parts])
        with torch.cuda.device(self.device):
            tensor = torch.as_tensor(np.ascontiguousarray(host_array(x))).to(self.device)
            return self._forward(tensor).cpu().numpy()

    def _run_bucket(self, size: int):
        with self.torch.cuda.stream(self.stream):
            if size in self.graphs:
                graph, output = self.graphs[size]
                graph.replay()
                return output
            return self._forward(self.buffers.device_input[:size])


def _sizes(sizes) -> str:
    return ",".join(map(str, sizes)) if sizes else "none"
