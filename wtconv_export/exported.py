"""The one reader of an exported ONNX file: ``ExportedModel.read(path)`` parses it once and holds what every job
plans from (its inputs, outputs, dtypes and dims, its WTConv2d node count, the metadata the exporter wrote and the
source-model record in it), beside the graph itself for whoever must walk it (docs/design.md §1).

Every command reads its ONNX file here, once (tests/test_onnx_reads.py counts the parses), and hands the
ExportedModel on: the engine build plans its profiles from it, validation picks the reference model and the
inputs, serving writes the repository and chooses the runtime, the runners inside Triton open their sessions.
The writer of the metadata and the source record is onnx_export.py / onnx_models.py beside it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wtconv_core.errors import InputError, ModelError
from wtconv_libs import contract
from wtconv_libs.contract import METADATA_PREFIX

__all__ = [
    "ONNX_MADE_BY",
    "ExportedModel",
    "Tensor",
    "is_default_source",
    "metadata_of",
    "parse_source_model",
    "source_from_metadata",
]

ONNX_MADE_BY = "export one with 'wtconv-trt export -o MODEL.onnx'"


@dataclass(frozen=True)
class Tensor:
    """One graph input or output: its name, element type (ONNX's number and NumPy's name, None for a type NumPy
    has not) and dims (an int when fixed, -1 when dynamic)."""

    name: str
    elem_type: int
    dtype: str | None
    dims: tuple[int, ...]

    @property
    def fixed_dims(self) -> list[int | None]:
        """The dims with None for a dynamic one."""
        return [None if d == -1 else d for d in self.dims]


def _tensor(value: Any) -> Tensor:
    from onnx import helper

    kind = value.type.tensor_type
    try:
        dtype = helper.tensor_dtype_to_np_dtype(kind.elem_type).name
    except (KeyError, ValueError, TypeError):
        dtype = None
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in kind.shape.dim)
    return Tensor(value.name, int(kind.elem_type), dtype, dims)


def metadata_of(model_proto: Any) -> dict[str, str]:
    """The wtconv_trt.* metadata_props of a ModelProto, without the prefix (what ExportedModel.metadata holds; the
    exporter uses it on the model it has just built)."""
    return {
        p.key[len(METADATA_PREFIX) :]: p.value for p in model_proto.metadata_props if p.key.startswith(METADATA_PREFIX)
    }


@dataclass(frozen=True)
class ExportedModel:
    """An exported ONNX file, read once (``read``). ``inputs`` are the graph inputs that are not initializers."""

    path: Path
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    wtconv_nodes: int
    metadata: dict[str, str]
    proto: Any = field(repr=False, compare=False)  # the onnx.ModelProto, for whoever walks the graph

    @classmethod
    def read(cls, path: str | os.PathLike, *, what: str = "ONNX model") -> ExportedModel:
        """Parse ``path`` (the graph and its weights: our exports keep no external data). InputError when it is
        not a non-empty file (naming ``what`` and how to make one) or is a TensorRT engine; ModelError when it is
        not ONNX or has no graph input."""
        import onnx

        from wtconv_core.paths import check_input_file

        shown = check_input_file(path, what=what, made_by=ONNX_MADE_BY)
        try:
            proto = onnx.load(shown)
        except Exception as error:  # onnx raises DecodeError and other protobuf errors for a file that is not ONNX
            if shown.endswith((".engine", ".plan")) or os.path.isfile(shown + ".json"):  # an engine's manifest
                raise InputError(
                    f"{shown} is a TensorRT engine, not an ONNX model: validate it with engine={shown} "
                    f"(wtconv_trt.validate_engine)"
                ) from error
            raise ModelError(
                f"cannot read {shown} as an ONNX model ({type(error).__name__}: {error}); give the .onnx file "
                f"written by 'wtconv-trt export'"
            ) from None
        initializers = {t.name for t in proto.graph.initializer}
        inputs = tuple(_tensor(v) for v in proto.graph.input if v.name not in initializers)
        if not inputs:
            raise ModelError(f"ONNX model {shown} has no graph input")
        return cls(
            path=Path(shown),
            inputs=inputs,
            outputs=tuple(_tensor(v) for v in proto.graph.output),
            wtconv_nodes=contract.count_wtconv_nodes(proto),
            metadata=metadata_of(proto),
            proto=proto,
        )

    @classmethod
    def of(cls, model: ExportedModel | str | os.PathLike) -> ExportedModel:
        """``model`` itself when it is an ExportedModel already, else the file read (``read``): a job that may be
        handed either reads the file at most once."""
        return model if isinstance(model, ExportedModel) else cls.read(model)

    @property
    def input(self) -> Tensor:
        """The single image input (B, C, H, W); ModelError for a model with several."""
        if len(self.inputs) != 1:
            raise ModelError(
                f"the ONNX model has {len(self.inputs)} inputs; wtconv-trt handles models with one image input "
                f"(B, C, H, W)"
            )
        return self.inputs[0]

    @property
    def input_dtype(self) -> str | None:
        """NumPy's name of the first input's element type."""
        return self.inputs[0].dtype

    @property
    def input_dims(self) -> dict[str, tuple[int, ...]]:
        """Each input's dims by name (-1: dynamic)."""
        return {t.name: t.dims for t in self.inputs}

    @property
    def precision(self) -> str:
        """ "fp16" for an fp16 export, else "fp32"."""
        return "fp16" if self.input_dtype == "float16" else "fp32"

    @property
    def source(self) -> dict | None:
        """The source-model record the exporter wrote (source_from_metadata), None for a file without one."""
        return source_from_metadata(self.metadata)


# -------------------------------------------------------------------------------------------------------------
# The source-model record: how validation rebuilds the PyTorch model an export (or an engine built from it) came from
# -------------------------------------------------------------------------------------------------------------


def parse_source_model(text: str | None) -> dict | None:
    """A source model given by hand, in the exporter's metadata format (onnx_models.SOURCE_KEYS): 'default' ->
    {"source": "default", "weights": "shipped"}; 'wtconvnext_tiny:ckpt.pth' -> {"source": "wtconvnext_tiny",
    "weights": "checkpoint:/abs/ckpt.pth"}; a JSON object with a "source" key is taken as is."""
    if text is None or text == "":
        return None
    text = text.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as error:
            raise InputError(f"source model {text!r}: not valid JSON ({error})") from None
        if not isinstance(obj, dict) or "source" not in obj:
            raise InputError(f"source model {text!r}: a JSON object with a 'source' key is expected")
        return obj
    if text == "default":
        return {"source": "default", "weights": "shipped"}
    arch, sep, checkpoint = text.partition(":")
    if not arch.startswith("wtconvnext_"):
        raise InputError(
            f"source model {text!r}: expected 'default' or ARCH:CHECKPOINT with ARCH one of "
            f"wtconvnext_tiny / wtconvnext_small / wtconvnext_base"
        )
    if not sep or not checkpoint:
        raise InputError(
            f"source model {text!r}: give the checkpoint too, ARCH:CHECKPOINT (e.g. "
            f"wtconvnext_tiny:WTConvNeXt_tiny_5_300e_ema.pth)"
        )
    return {"source": arch, "weights": f"checkpoint:{os.path.abspath(checkpoint)}"}


def source_from_metadata(metadata: dict) -> dict | None:
    """The source model the exporter recorded in the ONNX metadata: every key it records to rebuild the model
    (wtconv_trt.source, .weights, .input_shape, a fine-tuned WTConvNeXt's .num_classes and .in_chans, a Python
    module's class), so that validate rebuilds the reference from the manifest alone."""
    from wtconv_export.onnx_models import SOURCE_KEYS

    if not metadata.get("source"):
        return None
    return {key: metadata[key] for key in SOURCE_KEYS if key in metadata}


def is_default_source(source) -> bool:
    return bool(source) and source.get("source") == "default"
