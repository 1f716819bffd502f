"""Model loading: published-format checkpoints, the shipped default model and its digits data.

The default model is a small WTConvNeXt trained on scikit-learn's 8x8 handwritten digits upsampled to
32x32 (samples/train_default_model.py). Its weights (safetensors), configuration and held-out accuracy
(JSON) and the held-out split itself (raw 8x8 images + labels) ship in ``wtconv_torch/data/``, so the
main job runs on a fresh machine without scikit-learn and without any download.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import re
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from wtconv_core.errors import ConfigurationError, InputError, ModelError
from wtconv_core.inputs import parse_shape
from wtconv_torch.wtconv2d import STRIDE_FILTER, WTConv2d, check_stride_filter
from wtconv_torch.wtconvnext import WTConvNeXt

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_MODEL_WEIGHTS = DATA_DIR / "default_model.safetensors"
DEFAULT_MODEL_CONFIG = DATA_DIR / "default_model.json"
DIGITS_HELDOUT = DATA_DIR / "digits_heldout.safetensors"

# Digits preprocessing: pixel values 0..16 -> [0, 1] -> bilinear 8x8 -> 32x32 -> standardised.
DIGITS_IMAGE_SIZE = 32
DIGITS_MAX_VALUE = 16.0


# ---------------------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------------------


def read_state_dict(path_or_state_dict: str | os.PathLike | dict) -> dict[str, torch.Tensor]:
    """A state_dict from a mapping, a ``.pth``/``.pt`` file (a state_dict, or {'state_dict': sd},
    {'model': sd} or {'state_dict_ema': sd} as timm's training script saves) or a ``.safetensors`` file.
    A 'module.' prefix on every key (DataParallel / DDP checkpoints) is removed."""
    if isinstance(path_or_state_dict, (str, os.PathLike)):
        path = Path(path_or_state_dict)
        if not path.is_file():
            raise InputError(f"checkpoint {str(path)!r} does not exist")
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path))
        else:
            try:
                obj = torch.load(str(path), map_location="cpu", weights_only=True)
            except pickle.UnpicklingError:
                raise ModelError(_not_weights_only(path), parameter="checkpoint") from None
        source = str(path)
    else:
        obj, source = path_or_state_dict, "state_dict"
    if not isinstance(obj, dict):
        raise ModelError(
            f"checkpoint {source}: expected a state_dict (a mapping of names to tensors), got {type(obj).__name__}"
        )
    for wrapper in ("state_dict", "model", "state_dict_ema"):
        if wrapper in obj and isinstance(obj[wrapper], dict):
            obj = obj[wrapper]
            break
    state = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state:
        raise ModelError(f"checkpoint {source}: no tensors found (keys: {sorted(obj)[:10]})")
    if all(k.startswith("module.") for k in state):
        state = {k[len("module.") :]: v for k, v in state.items()}
    return state


def _pickled_root_class(path: Path) -> str | None:
    """'module.Class' of the object a torch.save file holds at its root, read from the pickle's opcodes without
    running them (a dict root, or an unreadable file: None). torch.save writes a zip whose data.pkl is the object,
    or (the legacy format) four pickles in a row, the object last."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
                stream, skip = io.BytesIO(archive.read(name)), 0
        else:
            stream, skip = open(path, "rb"), 3  # noqa: SIM115 (closed below)
        with stream:
            for _ in range(skip):
                for _ in pickletools.genops(stream):
                    pass
            strings = []
            for opcode, argument, _ in pickletools.genops(stream):
                if opcode.name in ("PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "MARK"):
                    continue
                if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                    strings.append(argument)
                    continue
                if opcode.name == "GLOBAL":
                    return argument.replace(" ", ".")
                if opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                    return ".".join(strings[-2:])
                return None
    except (OSError, ValueError, StopIteration, zipfile.BadZipFile):
        return None
    return None


def _not_weights_only(path: Path) -> str:
    """Why a checkpoint that holds more than tensors is not read (reading it would run code from the file), and
    what to give instead."""
    root = _pickled_root_class(path)
    fix = (
        "save the weights alone, torch.save(model.state_dict(), 'weights.pth'), and give that file, or export "
        "from Python with the model in hand: wtconv_trt.export_onnx('model.onnx', model)"
    )
    if root and root not in ("collections.OrderedDict", "builtins.dict"):
        return (
            f"checkpoint {path} holds a whole model (a pickled {root}, as torch.save(model) writes), not its weights; "
            f"reading it would run code from the file: {fix}"
        )
    return f"checkpoint {path} holds objects other than tensors, and reading them would run code from the file: {fix}"


# The paper's fast_wtconv modules (BGU-CS-VIL/WTConv fast_wtconv/wtconv_{cuda,triton,metal}.py) name the same
# parameters differently and store no Haar filters: map them onto the published (reference) names.
_FAST_WTCONV_KEYS = [
    (re.compile(r"^(.*\.)?base_weight$"), r"\1base_conv.weight"),
    (re.compile(r"^(.*\.)?base_bias$"), r"\1base_conv.bias"),
    (re.compile(r"^(.*\.)?base_scale$"), r"\1base_scale.weight"),
    (re.compile(r"^(.*\.)?wt_weights\.(\d+)$"), r"\1wavelet_convs.\2.weight"),
    (re.compile(r"^(.*\.)?wt_scales\.(\d+)$"), r"\1wavelet_scale.\2.weight"),
]


def convert_fast_wtconv_state_dict(state: dict, model: nn.Module) -> dict:
    """A state_dict saved from the paper's fast_wtconv WTConv2d (keys ``base_weight``, ``wt_weights.{i}``,
    ``wt_scales.{i}``, ...) renamed to the published names; the Haar filters it lacks are taken from ``model``.
    A state_dict without such keys is returned unchanged."""
    if not any(k.rsplit(".", 2)[-2:-1] == ["wt_weights"] for k in state):
        return state
    out = {}
    for key, value in state.items():
        for pattern, replacement in _FAST_WTCONV_KEYS:
            if pattern.match(key):
                key = pattern.sub(replacement, key)
                break
        out[key] = value
    own = model.state_dict()
    for key, value in own.items():
        if key.endswith(("wt_filter", "iwt_filter")) and key not in out:
            out[key] = value.detach().clone()
    return out


def wtconvnext_options_from_state_dict(state: dict) -> dict:
    """The WTConvNeXt constructor options a checkpoint fixes beyond its architecture: ``num_classes`` (rows of the
    classifier ``head.fc.weight``; 0 when the checkpoint has a head norm but no classifier, a model built with
    num_classes=0) and ``in_chans`` (input channels of the stem convolution ``stem.0.weight``). An option the
    checkpoint does not show is left out, so the architecture's default applies and loading names the keys."""
    options = {}
    fc = state.get("head.fc.weight")
    if isinstance(fc, torch.Tensor) and fc.dim() == 2:
        options["num_classes"] = int(fc.shape[0])
    elif "head.norm.weight" in state and not any(k.startswith("head.fc.") for k in state):
        options["num_classes"] = 0
    stem = state.get("stem.0.weight")
    if isinstance(stem, torch.Tensor) and stem.dim() == 4:
        options["in_chans"] = int(stem.shape[1])
    return options


def _short_list(keys, limit: int = 8) -> str:
    keys = sorted(keys)
    more = f", ... ({len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_checkpoint(model: nn.Module, path_or_state_dict: str | os.PathLike | dict, strict: bool = True) -> nn.Module:
    """Load a checkpoint into ``model`` (in place; returns it). Accepts what read_state_dict accepts, with
    the published WTConv2d names or those of the paper's fast_wtconv modules (convert_fast_wtconv_state_dict).

    Raises ValueError naming every key that does not fit: shape mismatches (expected vs given shape),
    and with ``strict`` also missing and unexpected keys. Nothing is loaded when an error is raised. The
    ``stride_filter`` of a stride > 1 layer saved by the published WTConv2d before its stride fix is checked and
    taken (wtconv2d.check_stride_filter).
    """
    state = convert_fast_wtconv_state_dict(read_state_dict(path_or_state_dict), model)
    own = model.state_dict()
    for path, module in model.named_modules():
        key = f"{path}.{STRIDE_FILTER}" if path else STRIDE_FILTER
        if isinstance(module, WTConv2d) and key in state:
            check_stride_filter(state[key], module.in_channels, module.stride, f"checkpoint: parameter '{key}'")
            own = {**own, key: state[key]}  # taken, and not stored: WTConv2d's load_state_dict accepts it
    mismatched = [
        f"{k}: expected {tuple(own[k].shape)}, got {tuple(v.shape)}"
        for k, v in state.items()
        if k in own and tuple(v.shape) != tuple(own[k].shape)
    ]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    problems = []
    if mismatched:
        problems.append(
            f"{len(mismatched)} shape mismatch(es): "
            + "; ".join(mismatched[:8])
            + (f"; ... ({len(mismatched) - 8} more)" if len(mismatched) > 8 else "")
        )
    if strict and missing:
        problems.append(f"{len(missing)} missing key(s): {_short_list(missing)}")
    if strict and unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_short_list(unexpected)}")
    if problems:
        raise ModelError(
            f"checkpoint does not fit {type(model).__name__}: "
            + " | ".join(problems)
            + ". Check the model variant (tiny/small/base) and its num_classes."
        )
    model.load_state_dict(state, strict=strict)
    return model


# ---------------------------------------------------------------------------------------------------------
# The shipped default model and data
# ---------------------------------------------------------------------------------------------------------


def read_default_config() -> dict:
    """The default model's JSON: architecture (``model``), preprocessing, split seed, held-out accuracy."""
    with open(DEFAULT_MODEL_CONFIG, encoding="utf-8") as f:
        return json.load(f)


def build_model_from_config(config: dict) -> WTConvNeXt:
    """A randomly initialised WTConvNeXt from ``config['model']`` (the constructor's arguments)."""
    return WTConvNeXt(**config["model"])


def load_default_model() -> tuple[WTConvNeXt, dict]:
    """(the shipped default model in eval mode on the CPU, its config dict)."""
    if not DEFAULT_MODEL_WEIGHTS.is_file():
        raise ConfigurationError(
            f"the default model's weights are missing ({DEFAULT_MODEL_WEIGHTS.name}); "
            f"run samples/train_default_model.py to create them"
        )
    config = read_default_config()
    model = build_model_from_config(config)
    load_checkpoint(model, DEFAULT_MODEL_WEIGHTS)
    return model.eval(), config


def preprocess_digits(images: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """(N, 8, 8) digits with values 0..16 (any dtype) -> (N, 1, 32, 32) float32 standardised model input."""
    x = images.to(torch.float32).reshape(-1, 1, 8, 8) / DIGITS_MAX_VALUE
    x = F.interpolate(x, size=(DIGITS_IMAGE_SIZE, DIGITS_IMAGE_SIZE), mode="bilinear", align_corners=False)
    return (x - mean) / std


def load_heldout_digits(config: dict | None = None, count: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The shipped held-out split: (inputs (N, 1, 32, 32) float32 preprocessed, labels (N,) int64).

    Needs no scikit-learn; ``count`` takes the first ``count`` images."""
    from safetensors.torch import load_file

    config = config or read_default_config()
    data = load_file(str(DIGITS_HELDOUT))
    images, labels = data["images"], data["labels"].to(torch.int64)
    if count is not None:
        images, labels = images[:count], labels[:count]
    pre = config["preprocessing"]
    return preprocess_digits(images, pre["mean"], pre["std"]), labels


def load_digits_dataset(split_seed: int | None = None, test_size: float | None = None) -> tuple:
    """scikit-learn's digits, split exactly as the default model was trained (stratified); the split seed
    and test fraction default to those recorded in the default model's JSON.

    Returns raw (N, 8, 8) uint8 images and int64 labels: (train_images, train_labels, test_images,
    test_labels). Needs scikit-learn (a test / training dependency, not a run-time one)."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as error:
        raise ConfigurationError("load_digits_dataset needs scikit-learn: pip install scikit-learn") from error
    if split_seed is None or test_size is None:
        recorded = read_default_config()["dataset"]
        split_seed = recorded["split_seed"] if split_seed is None else split_seed
        test_size = recorded["test_size"] if test_size is None else test_size
    digits = load_digits()
    images = torch.from_numpy(digits.images.astype("uint8"))
    labels = torch.from_numpy(digits.target.astype("int64"))
    index = torch.arange(len(labels)).numpy()
    train_idx, test_idx = train_test_split(index, test_size=test_size, random_state=split_seed, stratify=labels.numpy())
    train_idx, test_idx = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
    return images[train_idx], labels[train_idx], images[test_idx], labels[test_idx]


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``model`` on (inputs, labels)."""
    correct = 0
    for i in range(0, len(labels), batch_size):
        correct += (model(inputs[i : i + batch_size]).argmax(1) == labels[i : i + batch_size]).sum().item()
    return correct / max(len(labels), 1)


def default_inputs(description: dict, shape_text: str | None) -> list[np.ndarray]:
    """The shipped held-out digits for the default model, else two seeded random batches (B and max(B, 3))."""
    if shape_text is None and description.get("source") == "default":
        images, _ = load_heldout_digits(count=9)
        images = images.numpy()
        return [images[:1], images[1:]]  # batch 1 and batch 8
    shape = parse_shape(shape_text or description.get("input_shape", "1,3,224,224"))
    rng = np.random.default_rng(0)
    batch3 = (max(shape[0], 3),) + shape[1:]
    return [rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(batch3, dtype=np.float32)]
