"""The runtimes a served model can run on, and the choice of the best one present.

In order of preference (docs/serving.md):

- ``tensorrt``: the TensorRT engine through trt_engine.tensorrt_api, where TensorRT and a GPU it supports exist;
- ``torch-cuda``: the PyTorch model rebuilt from the ONNX file's metadata, its WTConv2d layers fused and run on
  our CUDA kernels (wtconv_export.cuda_kernels), in the precision the ONNX model was exported in;
- ``onnxruntime``: the exported ONNX model itself in ONNX Runtime, WTConv2d nodes on the native op library
  libwtconv_ort.so (else, on the CPU, through the onnxruntime-extensions Python op): on a GPU through onnxruntime-gpu's
  CUDA execution provider (TF32 off) where it and the library's CUDA op exist, else on the CPU
  (wtconv_ort.execution.plan_ort_execution makes the choice and its checks).

Each runner maps a NumPy batch in the model's input dtype to a NumPy batch in its output dtype, so the served
model and a test calling the runner directly compute the same thing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from wtconv_core.errors import ConfigurationError, ServingError

log = logging.getLogger(__name__)

RUNTIMES = ("tensorrt", "torch-cuda", "onnxruntime")
ORT_DEVICES = ("auto", "cpu", "cuda")  # where the onnxruntime runtime runs: auto resolves to cpu or cuda
_ONNX_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class OnnxRuntimeRunner:
    """The exported ONNX model itself in ONNX Runtime: on the CPU (``ort_device="cpu"``) or on GPU ``device``
    through the CUDA execution provider (``"cuda"``); WTConv2d nodes on ``library`` (default: the libwtconv_ort.so
    found in lookup order)."""

    name = "onnxruntime"

    def __init__(self, onnx_path, threads: int = 0, *, ort_device: str = "cpu", device: int = 0, library=None):
        import onnxruntime as ort

        from wtconv_ort.execution import plan_ort_execution

        self.execution = plan_ort_execution(str(onnx_path), _ort_device_text(ort_device, device), library)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        self.session = self.execution.session(str(onnx_path), options)
        inp, out = self.session.get_inputs()[0], self.session.get_outputs()[0]
        self.input_name, self.output_name = inp.name, out.name
        self.input_dtype = np.dtype(_ONNX_NUMPY[inp.type])
        self.output_dtype = np.dtype(_ONNX_NUMPY[out.type])

    @property
    def description(self) -> str:
        """Where ONNX Runtime runs the model and what runs its WTConv2d nodes (OrtExecution.describe)."""
        return self.execution.describe()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: x})[0]


def _ort_device_text(ort_device: str, device: int = 0) -> str:
    """plan_ort_execution's device for the runtime's ``ort_device`` ("cpu" or "cuda") on GPU ``device``."""
    if ort_device not in ("cpu", "cuda"):
        raise ServingError(
            f"ort_device {ort_device!r}: expected cpu or cuda (auto is resolved first: resolve_ort_device)"
        )
    return "cpu" if ort_device == "cpu" else f"cuda:{int(device)}"


def resolve_ort_device(ort_device: str, onnx_path, library=None) -> tuple[str, str | None]:
    """("cpu" or "cuda", why not "cuda" for "auto"): where the onnxruntime runtime runs the model. "cuda": the CUDA
    execution provider and, for WTConv2d nodes, libwtconv_ort.so's CUDA op must exist here (ConfigurationError
    saying which is missing); "auto": "cuda" when they do, else "cpu" with the reason."""
    from wtconv_ort.execution import plan_ort_execution

    if ort_device == "cpu":
        return "cpu", None
    try:
        plan_ort_execution(str(onnx_path), "cuda", library)
    except ConfigurationError:
        if ort_device == "cuda":
            raise
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return "cpu", f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider"
        return "cpu", "no libwtconv_ort.so with its CUDA op for the WTConv2d nodes"
    return "cuda", None


class TorchCudaRunner:
    """The PyTorch model of the ONNX file (its wtconv_trt.* metadata), WTConv2d layers on our CUDA kernels."""

    name = "torch-cuda"

    def __init__(self, onnx_path, device: int = 0):
        import onnx
        import torch

        from wtconv_export import cuda_kernels
        from wtconv_export.fused_module import fuse_wtconv_layers
        from wtconv_export.onnx_export import read_metadata
        from wtconv_export.onnx_models import build_model_from_metadata

        proto = onnx.load(str(onnx_path), load_external_data=False)
        metadata = read_metadata(proto)
        cuda_kernels.register()
        model, _ = build_model_from_metadata(metadata)
        self.precision = metadata.get("precision", "fp32")
        self.torch_dtype = torch.float16 if self.precision == "fp16" else torch.float32
        # fp32 means fp32: no TF32 in the model's other convolutions and matmuls (as the exported model).
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        self.device = torch.device("cuda", int(device))
        self.model = fuse_wtconv_layers(model.float().eval().to(self.device, self.torch_dtype))
        self.input_name = proto.graph.input[0].name
        self.output_name = proto.graph.output[0].name
        self.input_dtype = self.output_dtype = np.dtype(np.float16 if self.precision == "fp16" else np.float32)
        self.torch = torch

    def __call__(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        # Our kernels launch on the current device (the fused layers call them directly): make it the model's.
        with torch.inference_mode(), torch.cuda.device(self.device):
            y = self.model(torch.from_numpy(np.ascontiguousarray(x)).to(self.device, non_blocking=False))
        return y.to(self.torch_dtype).cpu().numpy()


class TensorRTRunner:
    """A TensorRT engine (with its manifest ENGINE.json) through trt_engine.tensorrt_api."""

    name = "tensorrt"

    def __init__(self, engine_path, plugin=None, device: int = 0):
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

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with self.torch.cuda.device(self.device):
            return self._run(x)

    def _run(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        profile = self.find_profile(self.profiles, {self.input_name: tuple(x.shape)})
        if profile != self.profile:
            self.context.set_optimization_profile_async(profile, self.stream.cuda_stream)
            self.profile = profile
        if not self.context.set_input_shape(self.input_name, tuple(x.shape)):
            raise ServingError(f"the engine rejected input shape {tuple(x.shape)}")
        inp = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
        out_shape = tuple(self.context.get_tensor_shape(self.output_name))
        out = torch.empty(out_shape, dtype=getattr(torch, self.output_dtype.name), device=self.device)
        self.context.set_tensor_address(self.input_name, inp.data_ptr())
        self.context.set_tensor_address(self.output_name, out.data_ptr())
        with torch.cuda.stream(self.stream):
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise ServingError("TensorRT execute_async_v3 failed (see the server log)")
        self.stream.synchronize()
        return out.cpu().numpy()


def unavailable_reason(
    runtime: str, *, onnx_path=None, engine_path=None, ort_device: str = "auto", ort_library=None
) -> str | None:
    """Why ``runtime`` cannot run here (None: it can); for onnxruntime with ``ort_device="cuda"``, the GPU's part
    too (resolve_ort_device)."""
    if runtime == "onnxruntime":
        if not onnx_path:
            return "no ONNX model in the repository"
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return "onnxruntime is not installed"
        if ort_device == "cuda":
            try:
                resolve_ort_device("cuda", onnx_path, ort_library)
            except ConfigurationError as error:
                return str(error)
        return None
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to PyTorch"
    if runtime == "torch-cuda":
        from wtconv_export import cuda_kernels

        if not onnx_path:
            return "no ONNX model in the repository (its metadata names the PyTorch model)"
        if cuda_kernels.find_library() is None:
            return "our CUDA kernel library is not built (" + cuda_kernels.BUILD_HINT + ")"
        import onnx

        from wtconv_export.onnx_export import read_metadata
        from wtconv_export.onnx_models import MODULE_SOURCE

        if read_metadata(onnx.load(str(onnx_path), load_external_data=False)).get("source") == MODULE_SOURCE:
            # TorchCudaRunner rebuilds the model from the metadata; a module exported from Python is not there.
            return "the model was exported from a Python module, which PyTorch cannot rebuild from the ONNX file"
        return None
    if runtime == "tensorrt":
        from trt_engine import tensorrt_api

        if not engine_path:
            return "no engine in the repository"
        if not tensorrt_api.tensorrt_available():
            return "TensorRT is not installed"
        return None
    raise ServingError(f"unknown runtime {runtime!r}; expected auto or one of {', '.join(RUNTIMES)}")


def select_runtime(
    preference: str = "auto", *, onnx_path=None, engine_path=None, ort_device: str = "auto", ort_library=None
) -> str:
    """``preference`` itself when it can run here (ServingError saying why not), or for "auto" the first of
    RUNTIMES that can."""
    if preference != "auto":
        reason = unavailable_reason(
            preference, onnx_path=onnx_path, engine_path=engine_path, ort_device=ort_device, ort_library=ort_library
        )
        if reason:
            raise ConfigurationError(f"runtime {preference} cannot run here: {reason}", parameter="runtime")
        return preference
    reasons = {}
    for runtime in RUNTIMES:
        reasons[runtime] = unavailable_reason(
            runtime, onnx_path=onnx_path, engine_path=engine_path, ort_device=ort_device, ort_library=ort_library
        )
        if reasons[runtime] is None:
            return runtime
    raise ConfigurationError(
        "no runtime can run this model here: " + "; ".join(f"{r}: {why}" for r, why in reasons.items())
    )


def make_runner(
    runtime: str,
    *,
    onnx_path=None,
    engine_path=None,
    plugin=None,
    device: int = 0,
    threads: int = 0,
    ort_device: str = "cpu",
    ort_library=None,
):
    """A runner for ``runtime`` ("auto" chooses, see select_runtime) on GPU ``device``; for onnxruntime,
    ``ort_device`` ("cpu", "cuda", or "auto": resolve_ort_device) and the WTConv2d op library ``ort_library``."""
    runtime = select_runtime(
        runtime, onnx_path=onnx_path, engine_path=engine_path, ort_device=ort_device, ort_library=ort_library
    )
    if runtime == "onnxruntime":
        # "cpu" needs no resolving, and "cuda" was resolved by select_runtime (unavailable_reason): the model is not
        # read and checked for the GPU a second time.
        if ort_device in ("cpu", "cuda"):
            where = ort_device
        else:
            where, _ = resolve_ort_device(ort_device, onnx_path, ort_library)
        return OnnxRuntimeRunner(Path(onnx_path), threads=threads, ort_device=where, device=device, library=ort_library)
    if runtime == "torch-cuda":
        return TorchCudaRunner(Path(onnx_path), device=device)
    return TensorRTRunner(Path(engine_path), plugin=plugin, device=device)


__all__ = [
    "ORT_DEVICES",
    "RUNTIMES",
    "resolve_ort_device",
    "OnnxRuntimeRunner",
    "TorchCudaRunner",
    "TensorRTRunner",
    "make_runner",
    "select_runtime",
    "unavailable_reason",
]
