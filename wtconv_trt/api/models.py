"""Which PyTorch model a job exports or compares against (``--arch``, ``--checkpoint``, ``--random-weights``,
``--seed``, ``--num-classes``, ``--in-chans``): the shipped default model, or a published WTConvNeXt with its
checkpoint or seeded random weights (a fine-tuned one: its class count and input channels read from the checkpoint
or given). A model of your own is handed to the jobs as a module (``model=``; docs/onnx_export.md, "Your own
model")."""

from __future__ import annotations

from typing import Any

from wtconv_core.inputs import MAX_SEED, check_int

__all__ = [
    "BOTH_MESSAGE",
    "MAX_CLASSES",
    "MAX_IN_CHANS",
    "MAX_SEED",
    "MODEL_OPTIONS",
    "load_model",
    "model_options_given",
]

# The keyword arguments that name the model of a job (export_onnx, validate_onnx, validate_engine), in the order
# of the command line's options; each job passes them to load_model.
MODEL_OPTIONS = ("arch", "checkpoint", "random_weights", "seed", "num_classes", "in_chans")
# Bounds of --num-classes and --in-chans given by hand: beyond them a WTConvNeXt's head or stem alone would take
# gigabytes (21,843 classes is ImageNet-21k's; multispectral images have tens of bands).
MAX_CLASSES = 100_000
MAX_IN_CHANS = 1024
BOTH_MESSAGE = "give either model or arch, checkpoint, random_weights, num_classes, in_chans, not both"


def load_model(
    arch: str | None = None,
    *,
    checkpoint: str | None = None,
    random_weights: bool = False,
    seed: int = 0,
    num_classes: int | None = None,
    in_chans: int | None = None,
) -> tuple[Any, dict]:
    """``(model, description)``: the model in eval mode and what the exporter records about it in the ONNX
    metadata (source, weights, input_shape; for a WTConvNeXt num_classes and in_chans).

    arch: None for the shipped default model, else "wtconvnext_tiny" / "wtconvnext_small" / "wtconvnext_base",
    with exactly one of ``checkpoint`` (a published-format .pth/.pt or .safetensors file, or a ``torch.save``d
    state_dict of a fine-tuned model) or ``random_weights`` (seeded by ``seed``, 0 to 2**63 - 1). num_classes
    (0 to 100000; 0: no classifier head) and in_chans (1 to 1024): a WTConvNeXt's classifier outputs and input
    channels; left out they are read from the checkpoint (the rows of head.fc.weight, the channels of
    stem.0.weight), else the published 1000 and 3; given with a checkpoint they must agree with it. A checkpoint
    file that is not one is refused before torch reads it."""
    from wtconv_export.model_checks import check_checkpoint_file
    from wtconv_export.onnx_models import model_from_source

    seed = check_int(seed, "seed", 0, MAX_SEED)
    if num_classes is not None:
        num_classes = check_int(num_classes, "num_classes", 0, MAX_CLASSES, " (0: no classifier head)")
    if in_chans is not None:
        in_chans = check_int(in_chans, "in_chans", 1, MAX_IN_CHANS)
    if checkpoint and arch:  # without arch, model_from_source says that arch is needed
        check_checkpoint_file(checkpoint)
    return model_from_source(
        arch,
        checkpoint=checkpoint,
        random_weights=random_weights,
        seed=seed,
        num_classes=num_classes,
        in_chans=in_chans,
    )


def resolve_model(
    model: Any,
    arch: str | None = None,
    checkpoint: str | None = None,
    random_weights: bool = False,
    seed: int = 0,
    num_classes: int | None = None,
    in_chans: int | None = None,
    *,
    default: bool = False,
) -> tuple[Any, dict | None]:
    """The model a job works on, from its ``model`` and model options (MODEL_OPTIONS, in that order): the module
    given (description None), else load_model of the options when any is given, or with ``default`` always (the
    shipped default model), else (None, None): the job takes the model its input file records. InputError for a
    module and options both."""
    from wtconv_core.errors import InputError

    given = model_options_given(arch, checkpoint, random_weights, num_classes, in_chans)
    if model is not None:
        if given:
            raise InputError(BOTH_MESSAGE)
        return model, None
    if not (given or default):
        return None, None
    return load_model(
        arch,
        checkpoint=checkpoint,
        random_weights=random_weights,
        seed=seed,
        num_classes=num_classes,
        in_chans=in_chans,
    )


def model_options_given(arch=None, checkpoint=None, random_weights=False, num_classes=None, in_chans=None) -> bool:
    """Whether any model-source option was given (otherwise a job takes the model its input file records)."""
    return bool(arch or checkpoint or random_weights) or num_classes is not None or in_chans is not None
