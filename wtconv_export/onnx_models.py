"""Which PyTorch model to export or validate against: the shipped default model, or a WTConvNeXt with a
published-format checkpoint (.pth state_dict or .safetensors) or random weights.

The source is recorded in the exported ONNX model's metadata (``wtconv_trt.source``), so ``validate``
can rebuild the same PyTorch reference without being told again.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn

from .errors import ConfigurationError, InputError, ModelError

ARCHS = ("wtconvnext_tiny", "wtconvnext_small", "wtconvnext_base")
DEFAULT_SOURCE = "default"


def load_checkpoint_strict(model: nn.Module, path: str) -> nn.Module:
    """Load a published-format checkpoint (.pth/.pt state_dict, possibly nested, or .safetensors) with
    strict=True: models.load_checkpoint, whose ValueError names the missing, unexpected and mis-shaped keys."""
    from .models import load_checkpoint

    if not os.path.isfile(path):
        raise InputError(f"checkpoint {path} does not exist (or is not a file)")
    try:
        return load_checkpoint(model, path, strict=True)
    except (ValueError, FileNotFoundError):
        raise
    except Exception as error:  # unpicklable or truncated files, safetensors header errors
        raise ModelError(f"cannot read checkpoint {path}: {error}") from error


@torch.no_grad()
def randomize_weights(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights with which every layer matters (seeded): convolution and linear weights
    N(0, 1/fan_in); layer scales (gamma, initialised to 1e-6 in ConvNeXt, which would hide every block)
    0.5 +- 0.1; WTConv2d scales around their inits; biases and LayerNorm affines randomised a little."""
    generator = torch.Generator().manual_seed(seed)

    def rand_like(t, mean, std):
        return (torch.randn(t.shape, generator=generator) * std + mean).to(t.dtype)

    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue  # the fixed Haar filters
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "gamma":
            param.copy_(rand_like(param, 0.5, 0.1))
        elif "wavelet_scale" in name:
            param.copy_(rand_like(param, 0.1, 0.05))
        elif "base_scale" in name:
            param.copy_(rand_like(param, 1.0, 0.2))
        elif leaf == "bias":
            param.copy_(rand_like(param, 0.0, 0.02))
        elif param.dim() == 1:  # LayerNorm weights
            param.copy_(rand_like(param, 1.0, 0.1))
        else:
            fan_in = param[0].numel()
            param.copy_(rand_like(param, 0.0, fan_in**-0.5))
    return model


def build_model(
    source: str = DEFAULT_SOURCE, *, checkpoint: str | None = None, random_weights: bool = False, seed: int = 0
) -> tuple[nn.Module, dict]:
    """(model in eval mode, description) for a source: "default" or an architecture name.

    The description dict is what export_onnx records in the model's metadata: source, weights.
    """
    if source == DEFAULT_SOURCE:
        if checkpoint or random_weights:
            raise InputError("--checkpoint / --random-weights need --arch (the default model ships its own weights)")
        try:
            from . import models
        except ImportError as error:
            raise ConfigurationError(
                "the shipped default model is not available in this installation "
                "(wtconv_export.models is missing); use --arch with --checkpoint or --random-weights"
            ) from error
        model, config = models.load_default_model()
        return model.eval(), {"source": DEFAULT_SOURCE, "weights": "shipped", **_default_shape(config)}
    if source not in ARCHS:
        raise InputError(f"unknown architecture {source!r}; expected one of {', '.join(ARCHS)}")
    if bool(checkpoint) == bool(random_weights):
        raise InputError(f"--arch {source} needs exactly one of --checkpoint FILE or --random-weights")
    from .wtconvnext import create_wtconvnext

    torch.manual_seed(seed)
    model = create_wtconvnext(source)
    if checkpoint:
        load_checkpoint_strict(model, checkpoint)
        weights = f"checkpoint:{os.path.abspath(checkpoint)}"
    else:
        randomize_weights(model, seed)
        weights = f"random:{seed}"
    return model.eval(), {"source": source, "weights": weights, "input_shape": "1,3,224,224"}


def model_from_source(
    arch: str | None, *, checkpoint: str | None = None, random_weights: bool = False, seed: int = 0
) -> tuple[nn.Module, dict]:
    """(model, description) for the model-source options of export and validate: the shipped default model when
    ``arch`` is None, else that WTConvNeXt with ``checkpoint`` or random weights."""
    if arch is None:
        return build_model(DEFAULT_SOURCE, checkpoint=checkpoint, random_weights=random_weights)
    return build_model(arch, checkpoint=checkpoint, random_weights=random_weights, seed=seed)


def _default_shape(config) -> dict:
    """The default model's native input shape from its config, if the config says."""
    shape = None
    if isinstance(config, dict):
        pre = config.get("preprocessing", {})
        if isinstance(pre, dict) and "input_size" in pre:  # (C, H, W), as the default model's JSON says
            shape = (1,) + tuple(int(d) for d in pre["input_size"])
        elif "input_shape" in config:
            shape = tuple(config["input_shape"])
        elif "image_size" in config:
            size = config["image_size"]
            size = (size, size) if isinstance(size, int) else tuple(size)
            shape = (1, int(config.get("in_chans", config.get("in_channels", 3)))) + size
    if shape and len(shape) == 3:
        shape = (1,) + shape
    return {"input_shape": ",".join(map(str, shape))} if shape and len(shape) == 4 else {}


def build_model_from_metadata(metadata: dict) -> tuple[nn.Module, dict]:
    """Rebuild the PyTorch model an ONNX file was exported from (its wtconv_trt.* metadata)."""
    source = metadata.get("source")
    weights = metadata.get("weights", "")
    if not source:
        raise ModelError(
            "the ONNX model does not say which PyTorch model it was exported from "
            "(no wtconv_trt.source metadata): give --arch with --checkpoint or --random-weights"
        )
    if source == DEFAULT_SOURCE:
        return build_model(DEFAULT_SOURCE)
    if weights.startswith("random:"):
        return build_model(source, random_weights=True, seed=int(weights.split(":", 1)[1]))
    if weights.startswith("checkpoint:"):
        return build_model(source, checkpoint=weights.split(":", 1)[1])
    raise ModelError(f"unrecognised wtconv_trt.weights metadata {weights!r}: give --checkpoint or --random-weights")
