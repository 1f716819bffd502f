"""The ``tensorrt`` runtime: a TensorRT engine (with its manifest ENGINE.json) through trt_engine.tensorrt_api, on its
model instance's GPU; with buckets, one CUDA graph per bucket (docs/serving.md, "Tuning").

TensorRTModel.load opens the engine file once and deserializes it on the instance's GPU; each TensorRTRunner made
on it (the served one, an eager reference) has its own execution context and stream."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from wtconv_core.errors import ServingError
from wtconv_serving.runners.batch_runner import BatchRunner, DeviceBuffers, check_graph_replay, host_array
from wtconv_serving.tuning import Tuning

log = logging.getLogger(__name__)

__all__ = ["TensorRTModel", "TensorRTRunner"]


@dataclass(frozen=True)
class TensorRTModel:
    """An engine file opened once (its manifest and sha256 checked) and deserialized with its plugin on GPU
    ``device`` (load): what TensorRTRunner runs."""

    runtime: ClassVar[str] = "tensorrt"
    loaded: Any  # trt_engine.tensorrt_api's loaded engine
    profiles: tuple  # its optimisation profiles (the manifest's)
    device: int = 0

    @classmethod
    def load(cls, engine_path, plugin=None, device: int = 0) -> TensorRTModel:
        """The engine at ``engine_path`` on GPU ``device``; ``plugin``: the plugin library (default the manifest's,
        trt_engine.engine_file.load_engine_for_run). TensorRT deserializes the engine (and our plugin uploads its
        weights) on the current device, which is 0 in a fresh backend process whatever model_instance_device_id
        says: the instance's GPU is made current for it."""
        import torch

        from trt_engine.engine_file import load_engine_for_run, open_engine

        opened = open_engine(engine_path)
        with torch.cuda.device(torch.device("cuda", int(device))):
            loaded = load_engine_for_run(opened, plugin)
        return cls(loaded, tuple(opened.manifest.profiles), int(device))

    def runner(self, *, buckets=(), input_dims=None, tuning: Tuning | None = None) -> TensorRTRunner:
        """A runner on this engine (runtimes.make_runner)."""
        return TensorRTRunner(
            self, buckets=buckets, input_dims=input_dims, cuda_graphs=(tuning or Tuning()).cuda_graphs
        )


class TensorRTRunner(BatchRunner):
    """A TensorRT engine loaded on its GPU (TensorRTModel). With ``buckets`` and ``input_dims``, batches run on buffers
    made once, padded up to their bucket, each bucket's enqueue replayed as a CUDA graph when ``cuda_graphs`` (checked
    against an eager run at load; a bucket that fails runs eagerly)."""

    name = "tensorrt"

    def __init__(self, model: TensorRTModel, *, buckets=(), input_dims=None, cuda_graphs=True):
        import torch

        from trt_engine.profiles import find_profile

        self.loaded = model.loaded
        self.profiles = model.profiles
        self.device = torch.device("cuda", model.device)
        # The context, stream and tensors on the engine's GPU, as its deserialization (TensorRTModel.load).
        with torch.cuda.device(self.device):
            self.context = self.loaded.engine.create_execution_context()
            self.stream = torch.cuda.Stream(self.device)
        io = self.loaded.io()
        inputs, outputs = [t for t in io if t.mode == "input"], [t for t in io if t.mode == "output"]
        self.input_name, self.output_name = inputs[0].name, outputs[0].name
        self.input_dtype, self.output_dtype = np.dtype(inputs[0].dtype), np.dtype(outputs[0].dtype)
        self.profile = 0
        self.find_profile = find_profile
        self.torch = torch
        self.buffers = None
        self.graphs: dict = {}
        self.outputs: dict = {}
        if buckets and input_dims and all(int(d) > 0 for d in input_dims):
            self.buckets = tuple(int(b) for b in buckets)
            with torch.cuda.device(self.device):
                self.buffers = DeviceBuffers(
                    torch, self.device, self.stream, self.buckets[-1], input_dims, self.input_dtype
                )
                self.prepare_buckets(lambda: self._prepare(cuda_graphs))

    @property
    def description(self) -> str:
        if self.buffers is None:
            return "TensorRT, eager"
        graphs = ",".join(map(str, sorted(self.graphs))) or "none"
        return f"TensorRT, buckets {','.join(map(str, self.buckets))}, CUDA graphs for batches {graphs}"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.buffers is not None:
            return self.run([x])[0]
        with self.torch.cuda.device(self.device):
            return self._run_unbuffered(x)

    def _bind(self, shape, input_ptr: int, output=None):
        """Select the profile for ``shape``, set the shape and addresses; returns the output tensor."""
        torch = self.torch
        profile = self.find_profile(self.profiles, {self.input_name: tuple(shape)})
        if profile != self.profile:
            self.context.set_optimization_profile_async(profile, self.stream.cuda_stream)
            self.profile = profile
        if not self.context.set_input_shape(self.input_name, tuple(shape)):
            raise ServingError(f"the engine rejected input shape {tuple(shape)}")
        if output is None:
            out_shape = tuple(self.context.get_tensor_shape(self.output_name))
            output = torch.empty(out_shape, dtype=getattr(torch, self.output_dtype.name), device=self.device)
        self.context.set_tensor_address(self.input_name, input_ptr)
        self.context.set_tensor_address(self.output_name, output.data_ptr())
        return output

    def _enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise ServingError("TensorRT execute_async_v3 failed (see the server log)")

    def _run(self, parts, rows: int, size: int):
        """Without buckets: the batch as it comes."""
        with self.torch.cuda.device(self.device):
            return self._run_unbuffered(np.concatenate([host_array(p) for p in parts]))

    def _run_unbuffered(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        inp = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        out = self._bind(x.shape, inp.data_ptr())
        with torch.cuda.stream(self.stream):
            self._enqueue()
        self.stream.synchronize()
        return out.cpu().numpy()

    def _prepare(self, cuda_graphs: bool) -> None:
        """Bind and run every bucket once (TensorRT's lazy work, outside any capture) and, with graphs, capture its
        enqueue and check the replay against an eager enqueue (check_graph_replay); a bucket that fails runs
        eagerly."""
        torch = self.torch
        self.buffers.device_input.normal_()
        for bucket in sorted(self.buckets, reverse=True):
            x = self.buffers.device_input[:bucket]
            output = self._bind(x.shape, x.data_ptr())
            self.outputs[bucket] = output
            with torch.cuda.stream(self.stream):
                self._enqueue()  # the first enqueue of a shape does TensorRT's lazy work, outside any capture
            self.stream.synchronize()
            if not cuda_graphs:
                continue
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=self.stream):
                    self._enqueue()
                check_graph_replay(
                    torch, self.stream, x, output, graph.replay, self._eager_into(output), self.output_dtype, bucket
                )
                self.graphs[bucket] = graph
            except (RuntimeError, ServingError) as error:
                log.warning("tensorrt: batch %d runs eagerly: capturing its CUDA graph failed: %s", bucket, error)

    def _eager_into(self, output):
        """An eager enqueue on our stream into the bound ``output``, for the graph check."""

        def run():
            with self.torch.cuda.stream(self.stream):
                self._enqueue()
            return output

        return run

    def _run_bucket(self, size: int):
        x = self.buffers.device_input[:size]
        # The context's shape and addresses are those of the last bucket run; a graph replays its own.
        output = self._bind(x.shape, x.data_ptr(), self.outputs[size])
        with self.torch.cuda.stream(self.stream):
            if size in self.graphs:
                self.graphs[size].replay()
            else:
                self._enqueue()
        return output
