"""Where ONNX Runtime runs an export and what runs its WTConv2d nodes, planned once before any session is made
(docs/onnx_runtime.md, "From wtconv-trt")."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from wtconv_core.errors import ConfigurationError, InputError
from wtconv_libs import contract

DEVICES = ("cpu", "cuda")  # where ONNX Runtime runs an export: its CPU or CUDA execution provider
MAX_GPU_INDEX = 1023

__all__ = ["DEVICES", "OrtExecution", "check_ort_library", "parse_device", "plan_ort_execution"]


def parse_device(device: str) -> tuple[str, int]:
    """("cpu", 0) or ("cuda", N): where ONNX Runtime runs, from "cpu", "cuda" (GPU 0) or "cuda:N"; InputError
    naming ``--device`` for anything else."""
    match = re.fullmatch(r"(cpu|cuda)(?::([0-9]{1,4}))?", device.strip()) if isinstance(device, str) else None
    if match and not (match.group(1) == "cpu" and match.group(2)) and int(match.group(2) or 0) <= MAX_GPU_INDEX:
        return match.group(1), int(match.group(2) or 0)
    raise InputError(
        f"device: expected cpu, cuda or cuda:N (N a GPU index from 0 to {MAX_GPU_INDEX}), got {device!r}",
        parameter="device",
    )


def check_ort_library(path: str | os.PathLike, option: str = "ort_library") -> Path:
    """``path`` must be a libwtconv_ort.so (an existing file carrying the library's record,
    wtconv_libs.lookup.ort_library_info); InputError naming ``option`` otherwise."""
    from wtconv_core.paths import check_input_file
    from wtconv_libs.build import build_libs_command
    from wtconv_libs.lookup import ort_library_info

    made_by = f"give the libwtconv_ort.so '{build_libs_command()}' builds ('wtconv-trt doctor --ort-library' prints it)"
    check_input_file(path, what=option, made_by=made_by)
    if not ort_library_info(path):
        raise InputError(
            f"{option} {os.fspath(path)} is not libwtconv_ort.so (it has no wtconv_ort_info record); {made_by}",
            parameter=option,
        )
    return Path(path)


def _import_cuda_libraries() -> None:
    """Load PyTorch, when installed, before ONNX Runtime creates its CUDA execution provider: onnxruntime-gpu's
    provider library finds the CUDA and cuDNN libraries PyTorch has loaded (the documentation of
    ``onnxruntime.preload_dlls``), where a Python without them on its library path would fail to create it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass


@dataclasses.dataclass
class OrtExecution:
    """Where ONNX Runtime runs an exported model and how its WTConv2d nodes run (plan_ort_execution)."""

    device: str  # "cpu" or "cuda"
    device_id: int  # the GPU, for "cuda"
    providers: list  # for onnxruntime.InferenceSession: names or (name, options)
    nodes: int  # WTConv2d nodes in the model
    op: str | None  # "native" (libwtconv_ort.so), "python" (onnxruntime-extensions), None: no WTConv2d node
    library: Path | None = None  # the native library, for "native"

    @property
    def fallback(self) -> bool:
        """The Python op runs the nodes because no library was found (plan_ort_execution takes the library whenever
        one is found, so the Python op is always the fallback)."""
        return self.op == "python"

    def describe(self) -> str:
        """One phrase: the execution provider, and what runs the WTConv2d nodes."""
        where = "CPU EP" if self.device == "cpu" else f"CUDA EP (GPU {self.device_id}, TF32 off)"
        text = f"ONNX Runtime {where}"
        if self.op == "native":
            text += f", {self.nodes} WTConv2d nodes on {self.library.name}" + (
                "'s CUDA op" if self.device == "cuda" else ""
            )
        elif self.op == "python":
            text += f", {self.nodes} WTConv2d nodes on the onnxruntime-extensions Python op"
            if self.fallback:
                text += " (libwtconv_ort.so not found)"
        return text

    def session(self, model: Any = None, session_options: Any = None) -> Any:
        """An onnxruntime.InferenceSession of ``model`` (an ExportedModel, a path, bytes or ModelProto) as planned:
        an ExportedModel is opened by ONNX Runtime from its file, or rewritten from the graph already read when the
        Python op runs its nodes (never parsed again here). On the GPU, ConfigurationError when ONNX Runtime could
        not start its CUDA execution provider (it falls back to the CPU with a logged error otherwise)."""
        from wtconv_export.exported import ExportedModel
        from wtconv_ort.session import make_ort_session, warn_python_op_fallback

        if isinstance(model, ExportedModel):
            model = model.proto if self.op == "python" else os.fspath(model.path)

        if self.device == "cuda":
            _import_cuda_libraries()
        if self.fallback:
            warn_python_op_fallback(self.nodes)
        # As planned, without a second lookup (op None: no WTConv2d node, nothing for either op to run).
        session = make_ort_session(model, self.providers, session_options, op=self.op or "python", library=self.library)
        if self.device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
            raise ConfigurationError(
                f"device cuda:{self.device_id}: ONNX Runtime could not start its CUDA execution provider (its "
                f"log says why, usually a CUDA or cuDNN library it cannot load); the session has only "
                f"{', '.join(session.get_providers())}",
                parameter="device",
            )
        return session


def plan_ort_execution(model: Any, device: str = "cpu", library: str | os.PathLike | None = None) -> OrtExecution:
    """Where and how ONNX Runtime runs ``model`` (an ExportedModel, or a path read into one; a bare ModelProto of
    a graph built in memory), checked before any session is made.

    ``device``: "cpu", "cuda" or "cuda:N" (parse_device). On the CPU, WTConv2d nodes run on the native library
    (``library``, else the one wtconv_libs.lookup finds), else through the onnxruntime-extensions Python op. On
    a GPU, onnxruntime-gpu's CUDA execution provider with TF32 off, and the native library's CUDA op for WTConv2d
    nodes; ConfigurationError in one line when this onnxruntime has no CUDA execution provider, or the model has
    WTConv2d nodes and the library is missing or was built without its CUDA op. A ``library`` given that does not
    exist is a ConfigurationError too."""
    from wtconv_ort.session import cuda_provider, resolve_wtconv_op

    kind, index = parse_device(device)
    shown = device.strip()
    from wtconv_export.exported import ExportedModel

    if isinstance(model, (str, os.PathLike)):
        model = ExportedModel.read(model)
    nodes = model.wtconv_nodes if isinstance(model, ExportedModel) else contract.count_wtconv_nodes(model)
    if kind == "cuda":
        import onnxruntime

        available = onnxruntime.get_available_providers()
        if "CUDAExecutionProvider" not in available:
            raise ConfigurationError(
                f"device {shown}: onnxruntime {onnxruntime.__version__} here has no CUDAExecutionProvider (it "
                f"offers {', '.join(available)}): install onnxruntime-gpu in its place (pip uninstall onnxruntime; "
                "pip install onnxruntime-gpu)",
                parameter="device",
            )
    providers = (
        ["CPUExecutionProvider"] if kind == "cpu" else [cuda_provider(index, tf32=False), "CPUExecutionProvider"]
    )
    if not nodes:
        return OrtExecution(kind, index, providers, 0, None)
    try:
        how, path = resolve_wtconv_op("native" if kind == "cuda" else "auto", library)
    except ConfigurationError as error:
        if kind == "cpu":
            raise
        raise ConfigurationError(
            f"device {shown}: the model's {nodes} WTConv2d nodes need {error}", parameter="device"
        ) from None
    if how == "python" and importlib.util.find_spec("onnxruntime_extensions") is None:
        from wtconv_libs.build import build_libs_command

        raise ConfigurationError(
            f"the model has {nodes} WTConv2d nodes and no libwtconv_ort.so is built: build it with "
            f"'{build_libs_command()}', or pip install onnxruntime-extensions for the slower Python op"
        )
    if kind == "cuda":
        from wtconv_libs.lookup import ort_library_info

        if ort_library_info(path).get("cuda") != "yes":
            raise ConfigurationError(
                f"device {shown}: {path} has no CUDA op (it was built where nvcc was not found): rebuild it with "
                "the CUDA toolkit present (wtconv-trt build-libs), or validate on the CPU",
                parameter="device",
            )
    return OrtExecution(kind, index, providers, nodes, how, path)
