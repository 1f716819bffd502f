"""What a model expects of its input, read from the model itself or from an exported ONNX file, and checks of what
the user asked for against it, made before any slow work (tracing, exporting, validating) starts.

- Channels: the first convolution's ``in_channels`` (a WTConvNeXt's stem).
- Smallest height and width: a WTConvNeXt's stem is a patch_size x patch_size, stride patch_size convolution and
  every later stage halves the resolution with a 2x2, stride 2 convolution, so H and W must be at least
  patch_size * 2 ** (stages - 1). (WTConv2d itself pads odd sizes at every wavelet level, so its levels add no
  bound of their own.)
- Largest example: an input whose first-stage activation would not fit in a few GiB is refused instead of
  attempted.
- Static or dynamic axes: from the ONNX graph input (``dim_value`` fixed, ``dim_param`` or nothing dynamic).

Every failure is an InputError or ModelError whose one line says what the model expects and what to give.
"""

from __future__ import annotations

import numpy as np

from wtconv_core.errors import InputError, ModelError
from wtconv_core.inputs import refuse

# The first-stage activation of an example input may take at most this many bytes (fp32). Tracing and a reference
# forward pass hold several such tensors at once.
MAX_ACTIVATION_BYTES = 2**30


def _modules(model):
    modules = getattr(model, "modules", None)
    return list(modules()) if callable(modules) else []


def input_channels(model) -> int | None:
    """Channels the model takes: the first module with ``in_channels`` (a convolution), or None if unknown."""
    for module in _modules(model):
        channels = getattr(module, "in_channels", None)
        if isinstance(channels, int) and channels > 0:
            return channels
    return None


def _stem_and_stages(model) -> tuple[int, int, int] | None:
    """(patch_size, number of stages, first-stage channels) of a WTConvNeXt-like model, else None."""
    stem, stages, dims = getattr(model, "stem", None), getattr(model, "stages", None), getattr(model, "dims", None)
    if stem is None or stages is None or not dims:
        return None
    conv = next((m for m in stem.modules() if hasattr(m, "stride") and hasattr(m, "kernel_size")), None)
    if conv is None:
        return None
    stride = conv.stride[0] if isinstance(conv.stride, tuple) else int(conv.stride)
    kernel = conv.kernel_size[0] if isinstance(conv.kernel_size, tuple) else int(conv.kernel_size)
    return max(stride, kernel), len(stages), int(dims[0])


def min_size(model) -> int:
    """Smallest height and width the model accepts (1 when the model's structure does not say)."""
    structure = _stem_and_stages(model)
    if structure is None:
        return 1
    patch, stages, _ = structure
    return patch * 2 ** (stages - 1)


def output_classes(model) -> int | None:
    """Number of classes of a classifier's (B, classes) output, or None when the model does not say."""
    classes = getattr(model, "num_classes", None)
    return classes if isinstance(classes, int) and classes > 0 else None


def check_input_shape(
    model,
    shape,
    option: str = "input_shape",
    *,
    dynamic: bool = False,
    arrays: bool = False,
    limit_memory: bool = True,
    suggest: bool = True,
) -> None:
    """Check a (B, C, H, W) the user asked for against the model: channels, smallest and largest size.
    ``arrays``: the shape is that of an array the user gave with ``option`` (no shape to suggest).
    ``limit_memory``: refuse an input whose activations would not fit in host memory here (tracing, a PyTorch
    reference); off for shapes a GPU engine will run. ``suggest``: end the message with a corrected ``option``."""
    shape = tuple(int(d) for d in shape)
    shown = ",".join(map(str, shape))
    subject = f"{option}: an array of shape {shown}" if arrays else f"{option} {shown}"
    suggest = suggest and not arrays
    if len(shape) != 4:
        raise refuse(subject, "expected 4 dimensions B,C,H,W")
    batch, channels, height, width = shape
    want = input_channels(model)
    if want is not None and channels != want:
        example = ",".join(map(str, (batch, want, height, width)))
        raise refuse(
            subject,
            f"the model takes {want} input channel{'s' if want != 1 else ''} (dimension 1), not {channels}"
            + (f"; e.g. {option}={example}" if suggest else ""),
        )
    smallest = min_size(model)
    if min(height, width) < smallest:
        patch, stages, _ = _stem_and_stages(model)
        raise refuse(
            subject,
            f"height and width must be at least {smallest} for this model (a {patch}x{patch} stem, then "
            f"{stages - 1} stages halving the resolution)"
            + (f"; e.g. {option}={batch},{channels},{max(height, smallest)},{max(width, smallest)}" if suggest else ""),
        )
    structure = _stem_and_stages(model)
    patch, first_channels = (structure[0], structure[2]) if structure else (1, max(channels, 1))
    activation = batch * max(first_channels, channels) * -(-height // patch) * -(-width // patch) * 4
    too_large = activation > MAX_ACTIVATION_BYTES or batch * channels * height * width * 4 > MAX_ACTIVATION_BYTES
    if limit_memory and too_large:
        hint = (
            "the export is dynamic in batch, height and width, so a small example input serves every size; "
            "leave input_shape out or give a smaller one"
            if dynamic
            else "give a smaller shape"
        )
        raise refuse(
            subject,
            f"this input would need about {activation / 2**30:.0f} GiB per activation (limit "
            f"{MAX_ACTIVATION_BYTES // 2**30} GiB); {hint}",
        )


def check_input_arrays(model, arrays, option: str = "inputs") -> None:
    """Check user-given (B, C, H, W) arrays against the model (channels, smallest and largest size)."""
    for array in arrays:
        check_input_shape(model, np.shape(array), option, arrays=True)


def architecture_of(metadata: dict):
    """The exported model's architecture without its weights (on PyTorch's meta device: no memory, no file
    read), from the ONNX metadata's ``source``; None when the metadata does not say or names no architecture
    this package knows. For the checks above (channels, smallest size) on engines built from the export."""
    import torch

    source = metadata.get("source")
    with torch.device("meta"):
        if source == "default":
            from wtconv_torch.models import build_model_from_config, read_default_config

            return build_model_from_config(read_default_config())
        from wtconv_export.onnx_models import wtconvnext_options_from_metadata
        from wtconv_torch.wtconvnext import WTCONVNEXT_CONFIGS, create_wtconvnext

        if source in WTCONVNEXT_CONFIGS:  # with the recorded num_classes and in_chans (a fine-tuned model's)
            return create_wtconvnext(source, **wtconvnext_options_from_metadata(metadata))
    return None


# --- the ONNX side -------------------------------------------------------------------------------------------


def _show(dims) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def check_onnx_matches_model(exported, model, what: str = "the PyTorch model") -> None:
    """The ONNX model (an ExportedModel) and the PyTorch reference must agree on input channels and on the output's
    shape."""
    dims = exported.input.fixed_dims
    if len(dims) != 4:
        raise ModelError(f"the ONNX model's input has shape {_show(dims)}; expected 4 dimensions (B, C, H, W)")
    channels = input_channels(model)
    if channels is not None and dims[1] is not None and dims[1] != channels:
        raise ModelError(
            f"the ONNX model takes {dims[1]} input channels but {what} takes {channels}: is this the "
            f"ONNX model exported from it? Give the matching arch=ARCH checkpoint=FILE, or export it again"
        )
    classes = output_classes(model)
    outputs = exported.outputs
    if classes is not None and outputs:
        out = outputs[0].fixed_dims
        if len(outputs) != 1 or len(out) != 2 or (out[1] is not None and out[1] != classes):
            shapes = ", ".join(_show(o.fixed_dims) for o in outputs)
            raise ModelError(
                f"the ONNX model's output{'s' if len(outputs) > 1 else ''} {shapes} do not match "
                f"{what}, which gives (B, {classes}): is this the ONNX model exported from it? Give "
                f"the matching arch=ARCH checkpoint=FILE, or export it again"
            )


def check_arrays_fit_onnx(
    arrays, dims, option: str, what: str = "the ONNX model", fix: str = "export without static=True"
) -> None:
    """Every array's shape must equal the input's fixed dimensions (``dims``, None where dynamic): a static export
    (or an engine) takes only the sizes it fixes."""
    for array in arrays:
        shape = tuple(np.shape(array))
        if len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape, strict=False)):
            fixed = ",".join("?" if d is None else str(d) for d in dims)
            raise refuse(
                option,
                f"{what}'s input is fixed at {fixed} ('?': any size) but an input has shape "
                f"{','.join(map(str, shape))}; give inputs of that shape, or {fix}",
            )


def fit_batches(arrays, dims) -> list:
    """Default inputs re-cut for a model whose batch dimension is fixed: batches of exactly that size."""
    batch = dims[0] if dims else None
    if batch is None:
        return list(arrays)
    joined = np.concatenate(list(arrays), axis=0)
    count = len(joined) // batch
    if count == 0:
        raise InputError(
            f"the ONNX model's batch is fixed at {batch}, more than the {len(joined)} default inputs; "
            f"give inputs=FILE with batch {batch}"
        )
    return [joined[i * batch : (i + 1) * batch] for i in range(min(count, 2))]
