"""The ``tensorrt`` runtime: a TensorRT engine (with its manifest ENGINE.json) through trt_engine.tensorrt_api, on its
model instance's GPU; with buckets, one CUDA graph per bucket (docs/serving.md, "Tuning")."""

from __future__ import annotations

import logging

import numpy as np

from wtconv_core.errors import ServingError
from wtconv_serving.runners.batch_runner import BatchRunner, DeviceBuffers, graph_agrees

log = logging.getLogger(__name__)

__all__ = ["TensorRTRunner"]


class TensorRTRunner(BatchRunner):
    """A TensorRT engine on GPU ``device``. With ``buckets`` and ``input_dims``, batches run on buffers made once,
    padded up to their bucket, each bucket's enqueue replayed as a CUDA graph when ``cuda_graphs`` (checked against
    an eager run at load; a bucket that fails runs eagerly)."""

    name = "tensorrt"

    def __init__(self, engine_path, plugin=None, device: int = 0, *, buckets=(), input_dims=None, cuda_graphs=True):
        import torch

        from trt_engine.engine_file import load_engine_for_run, open_engine
        from trt_engine.profiles import find_profile

        self.engine = open_engine(engine_path)
        self.profiles = self.engine.manifest.profiles
        self.device = torch.device("cuda", int(device))
        # Everything on the instance's GPU: TensorRT deserializes the engine and creates the context (and our plugin
        # uploads its weights) on the current device, which is 0 in a fresh backend process whatever
        # model_instance_device_id says; the stream and tensors below live on self.device.
        with torch.cuda.device(self.device):
            self.loaded = load_engine_for_run(self.engine, plugin)
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
                self._prepare(cuda_graphs)

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

    def _run_unbuffered(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        inp = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        out = self._bind(x.shape, inp.data_ptr())
        with torch.cuda.stream(self.stream):
            self._enqueue()
        self.stream.synchronize()
        return out.cpu().numpy()

    def _prepare(self, cuda_graphs: bool) -> None:
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
            eager = output.float().cpu().numpy()
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=self.stream):
                    self._enqueue()
                graph.replay()
                self.stream.synchronize()
                if not graph_agrees(output.float().cpu().numpy(), eager):
                    raise RuntimeError("the graph's output differs from the eager run's")
                self.graphs[bucket] = graph
            except RuntimeError as error:
                log.warning("tensorrt: batch %d runs eagerly: capturing its CUDA graph failed: %s", bucket, error)

    def _run(self, parts, rows: int, size: int) -> np.ndarray:
        torch = self.torch
        with torch.cuda.device(self.device):
            self.buffers.stage(parts, rows)
            x = self.buffers.device_input[:size]
            # The context's shape and addresses are those of the last bucket run; a graph replays its own.
            output = self._bind(x.shape, x.data_ptr(), self.outputs[size])
            with torch.cuda.stream(self.stream):
                if size in self.graphs:
                    self.graphs[size].replay()
                else:
                    self._enqueue()
            return self.buffers.fetch(output, rows)
