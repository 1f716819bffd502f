"""Which PyTorch model a job exports or compares against: a module of your own (``model=`` any torch.nn.Module
holding WTConv2d layers; docs/onnx_export.md, "Your own model"), or one of ours named by a ModelSource
(``wtconv_core.options``, the options ``--arch``, ``--checkpoint``, ``--random-weights``, ``--seed``,
``--num-classes``, ``--in-chans`` of ``export`` and ``validate``): the shipped default model, or a published
WTConvNeXt with its checkpoint or seeded random weights (a fine-tuned one: its class count and input channels read
from the checkpoint or given)."""

from __future__ import annotations

from typing import Any

from wtconv_core.options import ModelSource

__all__ = ["ModelSource", "load_model"]


def load_model(source: ModelSource | None = None) -> tuple[Any, dict]:
    """``(model, description)``: the model ``source`` names, in eval mode (default: the shipped default model), and
    what the exporter records about it in the ONNX metadata (source, weights, input_shape; for a WTConvNeXt
    num_classes and in_chans).

    ``source.arch``: None for the shipped default model, else "wtconvnext_tiny" / "wtconvnext_small" /
    "wtconvnext_base", with exactly one of ``checkpoint`` (a published-format .pth/.pt or .safetensors file, or a
    ``torch.save``d state_dict of a fine-tuned model) or ``random_weights`` (seeded by ``seed``, 0 to 2**63 - 1).
    num_classes (0 to 100000; 0: no classifier head) and in_chans (1 to 1024): a WTConvNeXt's classifier outputs and
    input channels; left out they are read from the checkpoint (the rows of head.fc.weight, the channels of
    stem.0.weight), else the published 1000 and 3; given with a checkpoint they must agree with it. A checkpoint
    file that is not one is refused before torch reads it (wtconv_export.onnx_models.check_model_source)."""
    from wtconv_export.onnx_models import check_model_source, model_from_source

    return model_from_source(check_model_source(source or ModelSource()))


def checkpoint_of(model: Any) -> str | None:
    """The checkpoint file a job reads when ``model`` is a ModelSource naming one (a job's input, which it must
    not write over)."""
    return model.checkpoint if isinstance(model, ModelSource) else None


def resolve_model(model: Any, *, default: bool = False) -> tuple[Any, dict | None]:
    """The model a job works on, from its ``model``: a module given is taken as it is (description None); a
    ModelSource that names a model (ModelSource.names_a_model), or with ``default`` any ModelSource or None, is
    loaded (load_model; without ``arch``, the shipped default model); else (None, None): the job takes the model its
    input file records. The values of a ModelSource are checked either way."""
    from wtconv_export.onnx_models import check_model_source, model_from_source

    if model is not None and not isinstance(model, ModelSource):
        return model, None
    source = check_model_source(model or ModelSource())
    if not (default or source.names_a_model):
        return None, None
    return model_from_source(source)
