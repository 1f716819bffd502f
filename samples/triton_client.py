"""Classify digits with the Triton Inference Server serving our engine, and compare with PyTorch.

Start a server: ``wtconv-trt serve digits.onnx`` (Triton's Python backend, any machine; docs/serving.md) or the
TensorRT-backend repository written by ``wtconv-trt triton-repo`` (``REPO/serve.sh``; docs/engines.md), then:

    pip install "tritonclient[grpc]"
    python samples/triton_client.py --model digits                     # 256 held-out digits, batches of 16
    python samples/triton_client.py --model digits --images seven.png  # your own pictures of digits (needs Pillow)

It asks the server for the model's input/output names and types (fp16 I/O for an fp16 engine), sends the images
in batches (the server's dynamic batcher may merge concurrent requests), and compares the logits and the top-1
class with the shipped PyTorch default model on the same inputs. Exit status 1 when they disagree beyond the
tolerance of the engine's precision (the same as 'wtconv-trt validate'), 2 when the server is not reachable.
"""

import argparse
import sys

import numpy as np

DTYPES = {"FP16": np.float16, "FP32": np.float32}
TOLERANCE = {"FP16": 5e-2, "FP32": 1e-3}  # trt_engine.validate.TOLERANCES (atol = rtol) per precision


def load_images(paths, config):
    """Pictures of single digits -> the default model's input (N, 1, 32, 32): grey, 8x8 like scikit-learn's digits
    (ink bright on a dark background, values 0..16), then the model's own preprocessing."""
    try:
        from PIL import Image
    except ImportError:
        sys.exit("--images needs Pillow: pip install Pillow")
    import torch

    from wtconv_export.models import preprocess_digits

    digits = []
    for path in paths:
        grey = np.asarray(Image.open(path).convert("L").resize((8, 8), Image.BILINEAR), dtype=np.float32)
        if grey.mean() > 127:  # dark ink on light paper: invert to the dataset's convention
            grey = 255.0 - grey
        digits.append(grey / 255.0 * 16.0)
    pre = config["preprocessing"]
    return preprocess_digits(torch.from_numpy(np.stack(digits)), pre["mean"], pre["std"]).numpy(), None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="localhost:8001", help="Triton gRPC endpoint (default localhost:8001)")
    parser.add_argument("--model", default="digits", help="model name in the repository")
    parser.add_argument("--count", type=int, default=256, help="held-out digits to classify (default 256)")
    parser.add_argument("--batch", type=int, default=16, help="images per request (<= the model's max_batch_size)")
    parser.add_argument("--images", nargs="+", help="image files of single digits instead of the held-out set")
    args = parser.parse_args(argv)

    import torch
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from wtconv_export.models import load_default_model, load_heldout_digits

    client = grpcclient.InferenceServerClient(url=args.url)
    try:
        if not client.is_model_ready(args.model):
            print(
                f"model {args.model!r} is not ready on {args.url}; is the server running and did the model load? "
                f"(the server log names the cause, e.g. a missing plugin or another TensorRT version)"
            )
            return 2
        metadata = client.get_model_metadata(args.model)
        config = client.get_model_config(args.model).config
    except InferenceServerException as error:
        print(f"cannot reach Triton at {args.url}: {error}")
        return 2
    inp, out = metadata.inputs[0], metadata.outputs[0]
    if inp.datatype not in DTYPES:
        print(f"unexpected input type {inp.datatype}")
        return 2
    max_batch = config.max_batch_size or args.batch
    batch = min(args.batch, max_batch)

    model, model_config = load_default_model()
    if args.images:
        x, labels = load_images(args.images, model_config)
    else:
        x, labels = load_heldout_digits(model_config, count=args.count)
        x, labels = x.numpy(), labels.numpy()

    logits = []
    for start in range(0, len(x), batch):
        chunk = np.ascontiguousarray(x[start : start + batch].astype(DTYPES[inp.datatype]))
        request = grpcclient.InferInput(inp.name, list(chunk.shape), inp.datatype)
        request.set_data_from_numpy(chunk)
        result = client.infer(args.model, [request], outputs=[grpcclient.InferRequestedOutput(out.name)])
        logits.append(result.as_numpy(out.name).astype(np.float32))
    served = np.concatenate(logits)

    with torch.no_grad():
        reference = model(torch.from_numpy(x.astype(np.float32))).numpy()
    served_top1, reference_top1 = served.argmax(1), reference.argmax(1)
    agreement = float((served_top1 == reference_top1).mean())
    diff = np.abs(served - reference)
    max_diff = float(diff.max())
    tol = TOLERANCE[inp.datatype]
    # Polygraphy's elementwise rule: an element fails only when beyond both the absolute and relative tolerance.
    mismatches = int(((diff > tol) & (diff > tol * np.abs(reference))).sum())
    print(f"{len(x)} images through Triton model {args.model!r} ({inp.datatype} I/O, batches of {batch})")
    if labels is not None:
        print(f"accuracy: Triton {(served_top1 == labels).mean():.4f}, PyTorch {(reference_top1 == labels).mean():.4f}")
    else:
        for path, cls in zip(args.images, served_top1, strict=False):
            print(f"  {path}: {cls}")
    print(
        f"top-1 agreement with PyTorch: {agreement:.4f}; max |logit difference| {max_diff:.3e}; "
        f"{mismatches} logits beyond atol = rtol = {tol:g}"
    )
    ok = agreement >= 0.99 and mismatches == 0
    print("PASSED" if ok else "FAILED: Triton's outputs differ from PyTorch's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
