"""Train the shipped default model: a small WTConvNeXt on scikit-learn's 8x8 digits, upsampled to 32x32.

    python samples/train_default_model.py            # writes wtconv_torch/data/default_model.* and
                                                     # wtconv_torch/data/digits_heldout.safetensors

Deterministic (fixed seeds, fixed stratified split, one CPU thread); about a minute on two CPU cores.
Architecture: patch-2 stem, so the four stages see 16x16, 8x8, 4x4 and 2x2 maps; WTConv2d kernel 5 with
wt_levels (3, 2, 2, 1), so every stage's deepest level reaches a 1x1 or 2x2 map, i.e. the whole image.
Needs scikit-learn (pip install scikit-learn).
"""

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from wtconv_torch.models import DATA_DIR, accuracy, load_digits_dataset, preprocess_digits
from wtconv_torch.wtconvnext import WTConvNeXt

MODEL_CONFIG = dict(
    in_chans=1,
    num_classes=10,
    depths=[1, 1, 2, 1],
    dims=[16, 24, 32, 48],
    kernel_sizes=5,
    wt_levels=[3, 2, 2, 1],
    patch_size=2,
    ls_init_value=1e-6,
)
SPLIT_SEED = 0
TEST_SIZE = 0.2
TRAIN_SEED = 0


def random_shift(x: torch.Tensor, generator: torch.Generator, max_shift: int = 2) -> torch.Tensor:
    """Translate each image by up to ``max_shift`` pixels (zero-padded in the standardised space's 0)."""
    n, _, h, w = x.shape
    padded = F.pad(x, (max_shift,) * 4, value=float(x.min()))
    dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
    return torch.stack([padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--output-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args()

    torch.manual_seed(TRAIN_SEED)
    torch.set_num_threads(1)  # reproducible reductions
    generator = torch.Generator().manual_seed(TRAIN_SEED)

    train_images, train_labels, test_images, test_labels = load_digits_dataset(SPLIT_SEED, TEST_SIZE)
    raw = preprocess_digits(train_images, 0.0, 1.0)
    mean, std = float(raw.mean()), float(raw.std())
    x_train = preprocess_digits(train_images, mean, std)
    x_test = preprocess_digits(test_images, mean, std)

    model = WTConvNeXt(**MODEL_CONFIG)
    decay = [
        p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1 and n not in model.no_weight_decay()
    ]
    no_decay = [
        p for n, p in model.named_parameters() if p.requires_grad and (p.ndim <= 1 or n in model.no_weight_decay())
    ]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr
    )
    steps_per_epoch = math.ceil(len(train_labels) / args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    warmup = steps_per_epoch * 2
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)),
    )

    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train_labels), generator=generator)
        total_loss = 0.0
        for i in range(0, len(order), args.batch_size):
            idx = order[i : i + args.batch_size]
            xb = random_shift(x_train[idx], generator)
            loss = F.cross_entropy(model(xb), train_labels[idx], label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            total_loss += loss.item() * len(idx)
        if epoch % 5 == 4 or epoch == args.epochs - 1:
            model.eval()
            print(
                f"epoch {epoch + 1:3d}  loss {total_loss / len(order):.4f}  "
                f"held-out accuracy {accuracy(model, x_test, test_labels):.4f}  ({time.time() - start:.0f} s)"
            )

    model.eval()
    test_accuracy = accuracy(model, x_test, test_labels)
    train_accuracy = accuracy(model, x_train, train_labels)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(args.output_dir / "default_model.safetensors"))
    save_file(
        {"images": test_images.contiguous(), "labels": test_labels.to(torch.uint8).contiguous()},
        str(args.output_dir / "digits_heldout.safetensors"),
    )
    config = {
        "name": "wtconvnext_digits",
        "description": "WTConvNeXt trained on scikit-learn digits (8x8, upsampled bilinear to 32x32)",
        "model": MODEL_CONFIG,
        "preprocessing": {
            "input_size": [1, 32, 32],
            "scale": 1.0 / 16.0,
            "resize": "bilinear 8x8 -> 32x32",
            "mean": mean,
            "std": std,
        },
        "dataset": {
            "name": "sklearn.datasets.load_digits",
            "split": "train_test_split stratified",
            "split_seed": SPLIT_SEED,
            "test_size": TEST_SIZE,
            "train_count": len(train_labels),
            "test_count": len(test_labels),
        },
        "training": {
            "seed": TRAIN_SEED,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "weight_decay": args.weight_decay,
            "optimizer": "AdamW, cosine schedule, 2 warm-up epochs",
            "augmentation": "random shift up to 2 px",
            "label_smoothing": 0.1,
            "torch": torch.__version__,
        },
        "heldout_accuracy": test_accuracy,
        "train_accuracy": train_accuracy,
    }
    with open(args.output_dir / "default_model.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(
        f"held-out accuracy {test_accuracy:.4f} ({len(test_labels)} images), train accuracy "
        f"{train_accuracy:.4f}; wrote {args.output_dir}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
