"""Which PyTorch model to export or validate against: the shipped default model, or a WTConvNeXt with a
published-format checkpoint (.pth state_dict or .safetensors) or random weights.

The source is recorded in the exported ONNX model's metadata (``wtconv_trt.source``, ``.weights``, and for a
WTConvNeXt ``.num_classes`` and ``.in_chans``), so ``validate`` can rebuild the same PyTorch reference without
being told again. A model exported from Python (``export_onnx(module, ...)`` without a source) is recorded as
source ``module`` with its class (``wtconv_trt.module_class``): its weights live only in the user's module, so it is
validated from Python with the module in hand (docs/onnx_export.md, "Your own model").
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn

from wtconv_core.errors import ConfigurationError, InputError, ModelError
from wtconv_core.options import ARCHS, ModelSource

DEFAULT_SOURCE = "default"
MODULE_SOURCE = "module"  # exported from a Python module: not rebuilt here, validated with the module in hand
# Metadata keys that rebuild a WTConvNeXt beyond its architecture and weights (WTConvNeXt constructor options).
WTCONVNEXT_OPTIONS = ("num_classes", "in_chans")
# Every key build_model's description may hold (what an engine's manifest should carry to rebuild the model).
SOURCE_KEYS = ("source", "weights", "input_shape") + WTCONVNEXT_OPTIONS + ("module_class",)
# Bounds of num_classes and in_chans given by hand: beyond them a WTConvNeXt's head or stem alone would take
# gigabytes (21,843 classes is ImageNet-21k's; multispectral images have tens of bands).
MAX_CLASSES = 100_000
MAX_IN_CHANS = 1024


def check_checkpoint_file(path: str) -> None:
    """A checkpoint must exist and look like a PyTorch (zip or pickle) or safetensors file before torch reads it:
    anything else (a text file renamed .pth) gets a message saying what the file is expected to be."""
    if not os.path.isfile(path):
        raise InputError(f"checkpoint {path} does not exist (or is not a file)", parameter="checkpoint")
    with open(path, "rb") as f:
        head = f.read(16)
    if not head:
        raise ModelError(
            f"checkpoint {path} is empty (0 bytes); give the published .pth/.pt or .safetensors file",
            parameter="checkpoint",
        )
    is_zip = head.startswith(b"PK\x03\x04")  # torch.save since PyTorch 1.6
    is_pickle = head[:1] == b"\x80"  # legacy torch.save (pickle protocol >= 2)
    header = int.from_bytes(head[:8], "little") if len(head) >= 9 else 0
    is_safetensors = 0 < header < 100_000_000 and head[8:9] == b"{"
    if not (is_zip or is_pickle or is_safetensors):
        raise ModelError(
            f"checkpoint {path} is not a PyTorch checkpoint (torch.save) or a safetensors file (it "
            f"starts with {head[:8]!r}); give the published .pth/.pt or .safetensors weights",
            parameter="checkpoint",
        )


def read_checkpoint(path: str) -> dict:
    """The state_dict of a published-format checkpoint (.pth/.pt state_dict, possibly nested, or .safetensors):
    models.read_state_dict, with an unreadable file reported as a ModelError naming it."""
    from wtconv_torch.models import read_state_dict

    if not os.path.isfile(path):
        raise InputError(f"checkpoint {path} does not exist (or is not a file)")
    try:
        return read_state_dict(path)
    except ValueError:
        raise
    except Exception as error:  # unpicklable or truncated files, safetensors header errors
        raise ModelError(f"cannot read checkpoint {path}: {error}") from error


def module_description(model: nn.Module) -> dict:
    """The metadata of a model exported from Python without a source: source 'module' and the module's class."""
    cls = type(model)
    return {"source": MODULE_SOURCE, "module_class": f"{cls.__module__}.{cls.__qualname__}"}


def _check_options(num_classes, in_chans) -> dict:
    """The WTConvNeXt options given (None: not given), checked."""
    options = {}
    for name, value, minimum in (("num_classes", num_classes, 0), ("in_chans", in_chans, 1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}", parameter=name)
        options[name] = value
    return options


def _options_from_checkpoint(state: dict, given: dict, path: str) -> dict:
    """num_classes and in_chans read from the checkpoint's head and stem; InputError when a given value differs."""
    from wtconv_torch.models import wtconvnext_options_from_state_dict

    found = wtconvnext_options_from_state_dict(state)
    where = {"num_classes": "classifier head.fc.weight has {} rows", "in_chans": "stem.0.weight takes {} channels"}
    for name, value in given.items():
        if name in found and found[name] != value:
            raise InputError(
                f"{name} {value} was asked for, but checkpoint {path}'s {where[name].format(found[name])}: leave "
                f"{name} out to take the checkpoint's, or give the checkpoint of the {name}={value} model",
                parameter=name,
            )
    return {**found, **given}


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
    source: str = DEFAULT_SOURCE,
    *,
    checkpoint: str | None = None,
    random_weights: bool = False,
    seed: int = 0,
    num_classes: int | None = None,
    in_chans: int | None = None,
) -> tuple[nn.Module, dict]:
    """(model in eval mode, description) for a source: "default" or an architecture name.

    num_classes, in_chans: a WTConvNeXt's classifier outputs and input channels. Left out (None) they are read
    from the checkpoint (the rows of head.fc.weight, the input channels of stem.0.weight), else the published
    1000 and 3; given, they must agree with the checkpoint. Stochastic depth (drop_path) and dropout are training
    settings that leave the checkpoint's keys unchanged: the model is returned in eval mode, where both are the
    identity, so they need no option here.

    The description dict is what export_onnx records in the model's metadata: source, weights, input_shape, and
    for a WTConvNeXt num_classes and in_chans.
    """
    if source == DEFAULT_SOURCE:
        if checkpoint or random_weights:
            raise InputError(
                "checkpoint=FILE / random_weights=True need arch=ARCH (the default model ships its own weights)"
            )
        if num_classes is not None or in_chans is not None:
            raise InputError(
                "num_classes=N / in_chans=N need arch=ARCH (the shipped default model is built as it was trained)"
            )
        try:
            from wtconv_torch import models
        except ImportError as error:
            raise ConfigurationError(
                "the shipped default model is not available in this installation "
                "(wtconv_torch.models is missing); use arch=ARCH with checkpoint=FILE or random_weights=True"
            ) from error
        model, config = models.load_default_model()
        return model.eval(), {"source": DEFAULT_SOURCE, "weights": "shipped", **_default_shape(config)}
    if source not in ARCHS:
        raise InputError(f"unknown architecture {source!r}; expected one of {', '.join(ARCHS)}")
    if bool(checkpoint) == bool(random_weights):
        raise InputError(f"arch {source} needs exactly one of checkpoint=FILE or random_weights=True", parameter="arch")
    from wtconv_torch.models import load_checkpoint
    from wtconv_torch.wtconvnext import create_wtconvnext

    options = _check_options(num_classes, in_chans)
    state = None
    if checkpoint:
        state = read_checkpoint(checkpoint)
        options = _options_from_checkpoint(state, options, checkpoint)
    torch.manual_seed(seed)
    model = create_wtconvnext(source, **options)
    if state is not None:
        load_checkpoint(model, state, strict=True)
        weights = f"checkpoint:{os.path.abspath(checkpoint)}"
    else:
        randomize_weights(model, seed)
        weights = f"random:{seed}"
    return model.eval(), {
        "source": source,
        "weights": weights,
        "input_shape": f"1,{model.in_chans},224,224",
        "num_classes": str(model.num_classes),
        "in_chans": str(model.in_chans),
    }


def check_model_source(source: ModelSource) -> ModelSource:
    """``source`` (wtconv_core.options.ModelSource) with its values checked, before any model is built: seed 0 to
    2**63 - 1, num_classes 0 to 100000 (0: no classifier head), in_chans 1 to 1024, and with ``arch`` a checkpoint
    that is one before torch reads it. Every value is checked, even of a source that names no model."""
    from wtconv_core.inputs import MAX_SEED, check_int

    check_int(source.seed, "seed", 0, MAX_SEED)
    if source.num_classes is not None:
        check_int(source.num_classes, "num_classes", 0, MAX_CLASSES, " (0: no classifier head)")
    if source.in_chans is not None:
        check_int(source.in_chans, "in_chans", 1, MAX_IN_CHANS)
    if source.checkpoint and source.arch:  # without arch, build_model says that arch is needed
        check_checkpoint_file(source.checkpoint)
    return source


def model_from_source(source: ModelSource) -> tuple[nn.Module, dict]:
    """(model, description) for a ModelSource checked by check_model_source: the shipped default model when it has
    no ``arch``, else that WTConvNeXt with its checkpoint or seeded random weights (num_classes and in_chans: see
    build_model)."""
    options = dict(
        checkpoint=source.checkpoint,
        random_weights=source.random_weights,
        num_classes=source.num_classes,
        in_chans=source.in_chans,
    )
    if source.arch is None:
        return build_model(DEFAULT_SOURCE, **options)
    return build_model(source.arch, seed=source.seed, **options)


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


def wtconvnext_options_from_metadata(metadata: dict) -> dict:
    """The WTConvNeXt options (num_classes, in_chans) recorded in an export's metadata, as ints; those not recorded
    (exports older than these keys) are left out, so create_wtconvnext's defaults apply."""
    options = {}
    for key in WTCONVNEXT_OPTIONS:
        if key in metadata:
            try:
                options[key] = int(metadata[key])
            except ValueError:
                raise ModelError(
                    f"the ONNX model's wtconv_trt.{key} metadata {metadata[key]!r} is not an integer: give arch=ARCH "
                    f"with checkpoint=FILE or random_weights=True"
                ) from None
    return options


def build_model_from_metadata(metadata: dict) -> tuple[nn.Module, dict]:
    """Rebuild the PyTorch model an ONNX file was exported from (its wtconv_trt.* metadata). ModelError saying how
    to validate instead when the metadata names no model that can be rebuilt (a module exported from Python)."""
    source = metadata.get("source")
    weights = metadata.get("weights", "")
    if not source:
        raise ModelError(
            "the ONNX model does not say which PyTorch model it was exported from "
            "(no wtconv_trt.source metadata): give arch=ARCH with checkpoint=FILE or random_weights=True"
        )
    if source == MODULE_SOURCE:
        raise ModelError(
            f"the ONNX model was exported from Python, from a module of class "
            f"{metadata.get('module_class', '(not recorded)')}, whose weights only that module holds: validate it "
            f"from Python with the module in hand, wtconv_trt.validate_onnx(ONNX_FILE, module) (an engine: "
            f"wtconv_trt.validate_engine(ENGINE, module)); a WTConvNeXt can also be given with arch=ARCH and "
            f"checkpoint=FILE"
        )
    if source == DEFAULT_SOURCE:
        return build_model(DEFAULT_SOURCE)
    if weights.startswith("random:"):
        seed = int(weights.split(":", 1)[1])
        return build_model(source, random_weights=True, seed=seed, **wtconvnext_options_from_metadata(metadata))
    if weights.startswith("checkpoint:"):
        checkpoint = weights.split(":", 1)[1]
        if not os.path.isfile(checkpoint):
            raise InputError(
                f"the checkpoint the model was exported from, {checkpoint} (recorded in its metadata, "
                f"wtconv_trt.weights), does not exist (moved?): give it with arch={source} checkpoint=NEWPATH"
            )
        # The checkpoint itself says its num_classes and in_chans (validate then checks the ONNX output against it).
        return build_model(source, checkpoint=checkpoint)
    raise ModelError(
        f"unrecognised wtconv_trt.weights metadata {weights!r}: give checkpoint=FILE or random_weights=True"
    )
