"""Which TensorRT runs: TensorRT 10 / 11 (module ``tensorrt``) or TensorRT-RTX 1.x (module ``tensorrt_rtx``).

Both have the same Python API for what we use (builder, network, ONNX parser, plugin registry, runtime), with
these differences (TensorRT-RTX Python bindings 1.7, checked by running them; docs/engines.md, "Backends"):

- TensorRT-RTX networks are always strongly typed and its BuilderFlag has no FP16: the engine's precision is the
  ONNX model's (an fp16 engine comes from an fp16 export);
- it compiles for target compute capabilities (``IBuilderConfig.num_compute_capabilities`` /
  ``set_compute_capability(trt.ComputeCapability.SM89, i)``), and builds on a machine without a GPU;
- its engines run only on the GPUs of those compute capabilities (7.5, 8.0, 8.6, 8.9, 12.x in 1.7);
- plugins are built against TensorRT 11's headers (plugin ABI ``trt11``);
- its wheels ship ``libtensorrt_rtx.so.1`` without the unversioned name its ONNX parser dlopens for plugin
  nodes (trt_engine.rtx_libraries handles that).

The backend is chosen once per process (``--backend``; ``auto`` picks the only one installed, and TensorRT when
both are) and recorded in the engine's manifest.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from wtconv_core.errors import ConfigurationError

AUTO = "auto"
TENSORRT = "tensorrt"
TENSORRT_RTX = "tensorrt-rtx"
CHOICES = (AUTO, TENSORRT, TENSORRT_RTX)


@dataclass(frozen=True)
class BackendInfo:
    name: str  # "tensorrt" | "tensorrt-rtx"
    display: str  # "TensorRT" | "TensorRT-RTX"
    module: str  # the Python module imported
    packages: str  # what to pip install
    probe: tuple  # modules whose presence says the backend is installed (checked without importing)


BACKENDS = {
    TENSORRT: BackendInfo(TENSORRT, "TensorRT", "tensorrt", "tensorrt (10.x or 11.x, for your CUDA)", ("tensorrt",)),
    # tensorrt_rtx_bindings is the module of the two wheels (tensorrt-rtx-cu13-libs + -bindings); the metapackage
    # tensorrt-rtx-cu13 adds ``tensorrt_rtx`` (which Polygraphy imports), re-exporting the same classes.
    TENSORRT_RTX: BackendInfo(
        TENSORRT_RTX, "TensorRT-RTX", "tensorrt_rtx_bindings", "tensorrt-rtx-cu13", ("tensorrt_rtx_bindings",)
    ),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_backends() -> list[str]:
    """Backends whose Python module is present (not imported, so nothing is loaded)."""
    return [name for name, info in BACKENDS.items() if all(_installed(m) for m in info.probe)]


def choose_backend(requested: str | None = None) -> str:
    """The backend to use for ``requested`` ('auto', None, 'tensorrt' or 'tensorrt-rtx'); ConfigurationError
    saying what to install when it is not there."""
    requested = requested or AUTO
    if requested not in CHOICES:
        raise ConfigurationError(f"backend {requested!r}: expected one of {', '.join(CHOICES)}", parameter="backend")
    present = installed_backends()
    if requested == AUTO:
        if not present:
            raise ConfigurationError(
                "TensorRT is not installed (neither TensorRT nor TensorRT-RTX): pip install tensorrt (TensorRT "
                "10/11, on a machine with an NVIDIA GPU and driver) or pip install tensorrt-rtx-cu13 (TensorRT-RTX, "
                "which also builds engines without a GPU)"
            )
        return present[0]  # TensorRT first when both are there; --backend tensorrt-rtx picks the other
    if requested not in present:
        info = BACKENDS[requested]
        others = f" ({', '.join(present)} is installed; pass backend={present[0]})" if present else ""
        raise ConfigurationError(
            f"backend {requested}: {info.display} is not installed: pip install {info.packages}{others}",
            parameter="backend",
        )
    return requested


def display_name(backend: str) -> str:
    return BACKENDS[backend].display


__all__ = [
    "AUTO",
    "BACKENDS",
    "CHOICES",
    "TENSORRT",
    "TENSORRT_RTX",
    "BackendInfo",
    "choose_backend",
    "display_name",
    "installed_backends",
]
