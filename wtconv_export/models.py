"""Model loading: published-format checkpoints, the shipped default model and its digits data.

The default model is a small WTConvNeXt trained on scikit-learn's 8x8 handwritten digits upsampled to
32x32 (samples/train_default_model.py). Its weights (safetensors), configuration and held-out accuracy
(JSON) and the held-out split itself (raw 8x8 images + labels) ship in ``wtconv_export/data/``, so the
main job runs on a fresh machine without scikit-learn and without any download.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .wtconvnext import WTConvNeXt

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

def read_state_dict(path_or_state_dict) -> dict:
    """A state_dict from a mapping, a ``.pth``/``.pt`` file (a state_dict, or {'state_dict': sd},
    {'model': sd} or {'state_dict_ema': sd} as timm's training script saves) or a ``.safetensors`` file.
    A 'module.' prefix on every key (DataParallel / DDP checkpoints) is removed."""
    if isinstance(path_or_state_dict, (str, os.PathLike)):
        path = Path(path_or_state_dict)
        if not path.is_file():
            raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            obj = load_file(str(path))
        else:
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
        source = str(path)
    else:
        obj, source = path_or_state_dict, "state_dict"
    if not isinstance(obj, dict):
        raise ValueError(f"checkpoint {source}: expected a state_dict (a mapping of names to tensors), "
                         f"got {type(obj).__name__}")
    for wrapper in ("state_dict", "model", "state_dict_ema"):
        if wrapper in obj and isinstance(obj[wrapper], dict):
            obj = obj[wrapper]
            break
    state = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state:
        raise ValueError(f"checkpoint {source}: no tensors found (keys: {sorted(obj)[:10]})")
    if all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def _short_list(keys, limit: int = 8) -> str:
    keys = sorted(keys)
    more = f", ... ({len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_checkpoint(model: nn.Module, path_or_state_dict, strict: bool = True) -> nn.Module:
    """Load a checkpoint into ``model`` (in place; returns it).

    Raises ValueError naming every key that does not fit: shape mismatches (expected vs given shape),
    and with ``strict`` also missing and unexpected keys. Nothing is loaded when an error is raised.
    """
    state = read_state_dict(path_or_state_dict)
    own = model.state_dict()
    mismatched = [f"{k}: expected {tuple(own[k].shape)}, got {tuple(v.shape)}"
                  for k, v in state.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    problems = []
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatch(es): " + "; ".join(mismatched[:8])
                        + (f"; ... ({len(mismatched) - 8} more)" if len(mismatched) > 8 else ""))
    if strict and missing:
        problems.append(f"{len(missing)} missing key(s): {_short_list(missing)}")
    if strict and unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_short_list(unexpected)}")
    if problems:
        raise ValueError(f"checkpoint does not fit {type(model).__name__}: " + " | ".join(problems)
                         + ". Check the model variant (tiny/small/base) and its num_classes.")
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
        raise FileNotFoundError(f"the default model's weights are missing ({DEFAULT_MODEL_WEIGHTS.name}); "
                                f"run samples/train_default_model.py to create them")
    config = read_default_config()
    model = build_model_from_config(config)
    load_checkpoint(model, DEFAULT_MODEL_WEIGHTS)
    return model.eval(), config


def preprocess_digits(images: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """(N, 8, 8) digits with values 0..16 (any dtype) -> (N, 1, 32, 32) float32 standardised model input."""
    x = images.to(torch.float32).reshape(-1, 1, 8, 8) / DIGITS_MAX_VALUE
    x = F.interpolate(x, size=(DIGITS_IMAGE_SIZE, DIGITS_IMAGE_SIZE), mode="bilinear", align_corners=False)
    return (x - mean) / std


def load_heldout_digits(config: dict | None = None, count: int | None = None):
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


def load_digits_dataset(split_seed: int, test_size: float):
    """scikit-learn's digits, split exactly as the default model was trained (stratified).

    Returns raw (N, 8, 8) uint8 images and int64 labels: (train_images, train_labels, test_images,
    test_labels). Needs scikit-learn (a test / training dependency, not a run-time one)."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as error:
        raise ImportError("load_digits_dataset needs scikit-learn: pip install scikit-learn") from error
    digits = load_digits()
    images = torch.from_numpy(digits.images.astype("uint8"))
    labels = torch.from_numpy(digits.target.astype("int64"))
    index = torch.arange(len(labels)).numpy()
    train_idx, test_idx = train_test_split(index, test_size=test_size, random_state=split_seed,
                                           stratify=labels.numpy())
    train_idx, test_idx = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
    return images[train_idx], labels[train_idx], images[test_idx], labels[test_idx]


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> float:
    """Top-1 accuracy of ``model`` on (inputs, labels)."""
    correct = 0
    for i in range(0, len(labels), batch_size):
        correct += (model(inputs[i:i + batch_size]).argmax(1) == labels[i:i + batch_size]).sum().item()
    return correct / max(len(labels), 1)
