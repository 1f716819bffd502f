"""Which PyTorch model a job exports or compares against (``--arch``, ``--checkpoint``, ``--random-weights``,
``--seed``): the shipped default model, or a published WTConvNeXt with its checkpoint or seeded random weights."""

from __future__ import annotations

from typing import Any

from wtconv_export.inputs import MAX_SEED, check_int

__all__ = ["MAX_SEED", "load_model", "model_options_given"]


def load_model(
    arch: str | None = None, *, checkpoint: str | None = None, random_weights: bool = False, seed: int = 0
) -> tuple[Any, dict]:
    """``(model, description)``: the model in eval mode and what the exporter records about it in the ONNX
    metadata (source, weights, input_shape).

    arch: None for the shipped default model, else "wtconvnext_tiny" / "wtconvnext_small" / "wtconvnext_base",
    with exactly one of ``checkpoint`` (a published-format .pth/.pt or .safetensors file) or ``random_weights``
    (seeded by ``seed``, 0 to 2**63 - 1). A checkpoint file that is not one is refused before torch reads it."""
    from wtconv_export.model_checks import check_checkpoint_file
    from wtconv_export.onnx_models import model_from_source

    seed = check_int(seed, "--seed", 0, MAX_SEED)
    if checkpoint and arch:  # without arch, model_from_source says that arch is needed
        check_checkpoint_file(checkpoint)
    return model_from_source(arch, checkpoint=checkpoint, random_weights=random_weights, seed=seed)


def model_options_given(arch=None, checkpoint=None, random_weights=False) -> bool:
    """Whether any model-source option was given (otherwise a job takes the model its input file records)."""
    return bool(arch or checkpoint or random_weights)
