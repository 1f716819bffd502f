"""The shipped default model: loads, reaches its recorded held-out accuracy, and its data is the real split."""

import torch

from wtconv_torch.models import (
    DEFAULT_MODEL_WEIGHTS,
    DIGITS_HELDOUT,
    accuracy,
    load_default_model,
    load_digits_dataset,
    load_heldout_digits,
    preprocess_digits,
)
from wtconv_torch.wtconv2d import WTConv2d


def test_default_model_reaches_recorded_accuracy():
    model, config = load_default_model()
    assert not model.training
    x, y = load_heldout_digits(config)
    assert len(y) == config["dataset"]["test_count"]
    acc = accuracy(model, x, y)
    assert abs(acc - config["heldout_accuracy"]) <= 0.005, (acc, config["heldout_accuracy"])
    assert acc >= 0.90


def test_default_model_is_small_and_uses_wtconv():
    model, config = load_default_model()
    layers = [m for m in model.modules() if isinstance(m, WTConv2d)]
    assert len(layers) == sum(config["model"]["depths"])
    assert [m.wt_levels for m in layers] == [
        lv for d, lv in zip(config["model"]["depths"], config["model"]["wt_levels"], strict=True) for _ in range(d)
    ]
    assert DEFAULT_MODEL_WEIGHTS.stat().st_size < 1_000_000 and DIGITS_HELDOUT.stat().st_size < 100_000


def test_shipped_heldout_split_is_the_recorded_split():
    """With scikit-learn: the split recorded in the JSON reproduces the shipped held-out images exactly, and the
    recorded preprocessing statistics are those of the training split."""
    import pytest

    pytest.importorskip("sklearn")
    _, config = load_default_model()
    ds = config["dataset"]
    train_images, _, test_images, test_labels = load_digits_dataset(ds["split_seed"], ds["test_size"])
    x, y = load_heldout_digits(config)
    assert torch.equal(y, test_labels)
    pre = config["preprocessing"]
    assert torch.equal(x, preprocess_digits(test_images, pre["mean"], pre["std"]))
    raw = preprocess_digits(train_images, 0.0, 1.0)
    assert abs(float(raw.mean()) - pre["mean"]) < 1e-6 and abs(float(raw.std()) - pre["std"]) < 1e-6
