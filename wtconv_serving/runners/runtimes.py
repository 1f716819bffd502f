"""The runtimes a served model can run on, and the choice of the best one present.

In order of preference (docs/serving.md):

- ``tensorrt``: the TensorRT engine through trt_engine.tensorrt_api, where TensorRT and a GPU it supports exist;
- ``torch-cuda``: the PyTorch model rebuilt from the ONNX file's metadata, its WTConv2d layers fused and run on
  our CUDA kernels (wtconv_torch.cuda_kernels), in the precision the ONNX model was exported in;
- ``onnxruntime``: the exported ONNX model itself in ONNX Runtime, WTConv2d nodes on the native op library
  libwtconv_ort.so (else, on the CPU, through the onnxruntime-extensions Python op): on a GPU through onnxruntime-gpu's
  CUDA execution provider where it and the library's CUDA op exist, else on the CPU
  (wtconv_ort.execution.plan_ort_execution makes the choice and its checks).

A served model is loaded once (load_runtime: the runtime chosen, then its files read, the engine deserialized, the
ONNX Runtime execution planned), and runners are made on it (make_runner). Each runner
(wtconv_serving.runners.batch_runner.BatchRunner: torch_runner, tensorrt_runner, ort_runner) maps the requests of a
batch, NumPy arrays in the model's input dtype, to one NumPy output each, so the served model and a test calling the
runner directly compute the same thing.
"""

from __future__ import annotations

import logging
from typing import Protocol

from wtconv_core.errors import ConfigurationError, ServingError
from wtconv_export.exported import ExportedModel
from wtconv_serving.runners.batch_runner import BatchRunner
from wtconv_serving.tuning import Tuning

log = logging.getLogger(__name__)

RUNTIMES = ("tensorrt", "torch-cuda", "onnxruntime")
ORT_DEVICES = ("auto", "cpu", "cuda")  # where the onnxruntime runtime runs: auto resolves to cpu or cuda


def exported_model(onnx) -> ExportedModel | None:
    """``onnx`` as an ExportedModel: read once here when given as a path (None stays None)."""
    return None if onnx is None else ExportedModel.of(onnx)


def resolve_ort_device(ort_device: str, onnx_path, library=None) -> tuple[str, str | None]:
    """("cpu" or "cuda", why not "cuda" for "auto"): where the onnxruntime runtime runs the model (an ExportedModel,
    or a path read into one). "cuda": the CUDA execution provider and, for WTConv2d nodes, libwtconv_ort.so's CUDA
    op must exist here (ConfigurationError saying which is missing); "auto": "cuda" when they do, else "cpu" with
    the reason."""
    from wtconv_ort.execution import plan_ort_execution

    if ort_device == "cpu":
        return "cpu", None
    try:
        plan_ort_execution(exported_model(onnx_path), "cuda", library)
    except ConfigurationError:
        if ort_device == "cuda":
            raise
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return "cpu", f"onnxruntime {onnxruntime.__version__} has no CUDAExecutionProvider"
        return "cpu", "no libwtconv_ort.so with its CUDA op for the WTConv2d nodes"
    return "cuda", None


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
        from wtconv_torch import cuda_kernels

        if not onnx_path:
            return "no ONNX model in the repository (its metadata names the PyTorch model)"
        if cuda_kernels.find_library() is None:
            return "our CUDA kernel library is not built (" + cuda_kernels.BUILD_HINT + ")"
        from wtconv_export.onnx_models import MODULE_SOURCE

        if exported_model(onnx_path).metadata.get("source") == MODULE_SOURCE:
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
    RUNTIMES that can. ``onnx_path``: the ExportedModel, or a path read once here."""
    onnx_path = exported_model(onnx_path)
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


class LoadedModel(Protocol):
    """A model as its runtime holds it, its files read and checked once (load_runtime): tensorrt_runner.TensorRTModel,
    torch_runner.TorchModel or ort_runner.OrtModel. It makes runners, as many as wanted (a served one, an eager
    reference), without reading a file again."""

    runtime: str

    def runner(self, *, buckets=(), input_dims=None, tuning: Tuning | None = None) -> BatchRunner: ...


def load_runtime(
    preference: str = "auto",
    *,
    onnx_path=None,
    engine_path=None,
    plugin=None,
    device: int = 0,
    ort_device: str = "cpu",
    ort_library=None,
    threads: int = 0,
) -> LoadedModel:
    """The model loaded by the runtime chosen for it here (select_runtime: ``preference`` when it can run, or for
    "auto" the first of RUNTIMES that can), for GPU ``device``: the TensorRT engine ``engine_path`` deserialized with
    ``plugin`` (TensorRTModel.load), or the export ``onnx_path`` (its path, read once here, or its ExportedModel) for
    PyTorch on our CUDA kernels, or for ONNX Runtime on ``ort_device`` ("cpu", "cuda", or "auto":
    resolve_ort_device) with the WTConv2d op library ``ort_library`` and ``threads`` intra-op threads."""
    from wtconv_serving.runners.ort_runner import OrtModel
    from wtconv_serving.runners.tensorrt_runner import TensorRTModel
    from wtconv_serving.runners.torch_runner import TorchModel

    exported = exported_model(onnx_path)
    runtime = select_runtime(
        preference, onnx_path=exported, engine_path=engine_path, ort_device=ort_device, ort_library=ort_library
    )
    if runtime == "tensorrt":
        return TensorRTModel.load(engine_path, plugin, device)
    if runtime == "torch-cuda":
        return TorchModel(exported, device)
    # "cpu" needs no resolving, and "cuda" was resolved by select_runtime (unavailable_reason): the model is not read
    # and checked for the GPU a second time.
    where = ort_device if ort_device in ("cpu", "cuda") else resolve_ort_device(ort_device, exported, ort_library)[0]
    return OrtModel.load(exported, where, device, ort_library, threads)


def make_runner(model: LoadedModel, *, tuning: Tuning | None = None, input_dims=None) -> BatchRunner:
    """A runner on a loaded model (load_runtime). ``tuning`` (its buckets resolved, Tuning.with_max_batch) and
    ``input_dims`` (the input's dims without the batch): a GPU runner pads batches up to the buckets and runs them as
    the tuning says; without them it runs each batch as it comes."""
    tuning = tuning or Tuning()
    return model.runner(buckets=tuning.buckets if input_dims else (), input_dims=input_dims, tuning=tuning)


__all__ = [
    "ORT_DEVICES",
    "RUNTIMES",
    "LoadedModel",
    "exported_model",
    "load_runtime",
    "resolve_ort_device",
    "make_runner",
    "select_runtime",
    "unavailable_reason",
]
