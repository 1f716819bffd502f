"""Query any model served by Triton Inference Server and check its answers against the ONNX file run here.

Start a server: ``wtconv-trt serve MODEL.onnx`` (Triton's Python backend, any machine; docs/serving.md), which
prints the line that runs this client for its model, or the TensorRT-backend repository written by
``wtconv-trt triton-repo`` (``REPO/serve.sh``; docs/engines.md). Then:

    pip install -e . "tritonclient[grpc]"   # this package (its options, the ONNX check, shared memory) and the client
    python samples/triton_client.py --model digits --onnx digits.onnx    # 256 held-out digits, checked
    python samples/triton_client.py --model tiny --onnx tiny.onnx        # seeded random images of the served shape
    python samples/triton_client.py --model tiny --onnx tiny.onnx --images cat.jpg dog.png   # needs Pillow
    python samples/triton_client.py --model tiny --inputs batch.npz      # your own (B,C,H,W) arrays, not checked
    python samples/triton_client.py --model tiny --onnx tiny.onnx --shared-memory system   # tensors through /dev/shm

It asks the server for the model's input name, shape and datatype (model metadata and config: FP16 for an fp16
export or engine), sends the data in requests of ``--batch`` images (at most the served max_batch_size: a larger
``--batch`` is said and sent in requests of the maximum; the server's dynamic batcher may merge concurrent
requests) and, with ``--onnx``, runs the same inputs through that ONNX file in ONNX Runtime here (WTConv2d nodes
through wtconv_ort.session.make_ort_session) and compares: element-wise within atol and rtol (default per datatype:
the engine validation's, docs/engines.md), the largest difference relative to the output's scale, and the top-1
agreement of a classifier's logits (with the held-out labels' accuracy for the shipped digits model).

The data: ``--images`` (pictures resized to the served height and width; grey for one channel, RGB for three;
the shipped digits model's own preprocessing when the ONNX file says it is that model, else values in [0, 1]
standardised by ``--mean``/``--std``, ImageNet's for three channels), ``--inputs`` (.npy/.npz arrays), the shipped
held-out digits for the shipped model, else ``--count`` seeded standard-normal images. A served input whose
height or width is dynamic (a TensorRT-backend repository of a dynamic engine) takes its size from ``--shape``,
else from the size the ONNX file was exported at.

With ``--shared-memory system`` (or ``cuda``) the server runs on this machine and the tensors do not travel in the
requests: each request's images are written into a region of /dev/shm (or of GPU 0's memory, which reaches a GPU
instance on the GPU; needs cuda-python) that the server has registered, and the server writes the answer into a
second one (wtconv_serving.traffic.shared_memory). Both regions are made once, reused by every request, and removed
on every exit, Ctrl-C and errors included (docs/serving.md, "Shared memory").

Exit status: 0 when every answer matches (or was not checked, without --onnx), 1 when they differ beyond the
tolerance, 2 with one line for anything that stops the check (no server, the server's HTTP port given instead of
its gRPC one, model not ready, a shape, file or picture that does not fit, shared memory the server cannot map),
130 after Ctrl-C.
"""

import argparse
import contextlib
import sys

import numpy as np

from wtconv_core.options import SHARED_MEMORY_MODES, LoadTestOptions, help_of

DTYPES = {"FP16": np.float16, "FP32": np.float32}
# The engine validation's element-wise tolerances per precision (wtconv_validate.engine.TOLERANCES): a served engine
# computes with TF32 (fp32) or fp16 arithmetic; ONNX Runtime inside the server gives the local result exactly.
TOLERANCE = {"FP16": 5e-2, "FP32": 1e-3}
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


DEFAULT_BATCH = 16


def answers_http(url) -> bool:
    """True when ``url`` (HOST:PORT) answers an HTTP request for Triton's liveness: the HTTP port given to this
    gRPC client."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{url}/v2/health/live", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # an HTTP server answered, with an error status
    except (OSError, ValueError):
        return False


class Stop(Exception):
    """A reason the check cannot run: printed as one line, exit status 2."""


def served_input(client, model):
    """(name, datatype, dims of one image (C, H, W; -1 where dynamic), max_batch_size, the fixed batch of a model
    without batching (-1 with batching)) of the served model's single input."""
    metadata = client.get_model_metadata(model)
    config = client.get_model_config(model).config
    if len(metadata.inputs) != 1:
        raise Stop(f"model {model!r} has {len(metadata.inputs)} inputs; this client sends one image tensor")
    inp = metadata.inputs[0]
    if inp.datatype not in DTYPES:
        raise Stop(f"model {model!r} takes {inp.datatype} input {inp.name!r}; this client sends FP32 or FP16 images")
    dims = [int(d) for d in inp.shape]  # with batching, the metadata's first dimension is the batch (-1)
    if len(dims) != 4:
        raise Stop(f"model {model!r} takes input {inp.name!r} of shape {dims}; this client sends (B, C, H, W) images")
    batching = config.max_batch_size > 0
    return inp.name, inp.datatype, dims[1:], config.max_batch_size, -1 if batching else dims[0]


def fill_dynamic(sample, shape_option, metadata, model):
    """The served per-image dims with dynamic ones (-1) taken from --shape, else from the ONNX file's export size."""
    if shape_option:
        parts = shape_option.replace("x", ",").split(",")
        given = [int(d) for d in parts if d.strip().isdigit()]
        fits = len(given) == 3 and len(parts) == 3 and min(given) > 0
        if not fits or any(s not in (-1, g) for s, g in zip(sample, given, strict=True)):
            raise Stop(f"--shape {shape_option}: expected C,H,W fitting the served input {sample} (-1: any size)")
        return given
    if -1 not in sample:
        return sample
    exported = (metadata or {}).get("input_shape")
    if exported:
        native = [int(d) for d in exported.split(",")][1:]
        return [n if s == -1 else s for s, n in zip(sample, native, strict=True)]
    raise Stop(
        f"model {model!r}'s input has dynamic dimensions {sample} (-1: any size): give --shape C,H,W, or --onnx "
        f"MODEL.onnx (its export size is used)"
    )


def open_picture(path, mode, width, height):
    """The picture at ``path`` converted to ``mode`` ("L" grey, "RGB") and resized; Stop in one line when it cannot
    be read as one (a missing file, not a picture, a truncated one)."""
    from PIL import Image

    try:
        with Image.open(path) as picture:
            return picture.convert(mode).resize((width, height), Image.BILINEAR)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise Stop(f"--images {path}: cannot read it as a picture ({error})") from None


def load_images(paths, channels, height, width, digits_config, mean, std):
    """Pictures -> (N, C, H, W) float32 model input."""
    try:
        import PIL  # noqa: F401 (open_picture's)
    except ImportError:
        raise Stop("--images needs Pillow: pip install Pillow (or give arrays with --inputs)") from None
    if digits_config is not None:  # the shipped digits model: 8x8, ink bright on dark, values 0..16, then its own
        import torch

        from wtconv_torch.models import preprocess_digits

        digits = []
        for path in paths:
            grey = np.asarray(open_picture(path, "L", 8, 8), dtype=np.float32)
            if grey.mean() > 127:  # dark ink on light paper: invert to the dataset's convention
                grey = 255.0 - grey
            digits.append(grey / 255.0 * 16.0)
        pre = digits_config["preprocessing"]
        return preprocess_digits(torch.from_numpy(np.stack(digits)), pre["mean"], pre["std"]).numpy()
    if channels not in (1, 3):
        raise Stop(f"--images: the model takes {channels} channels; pictures give 1 (grey) or 3 (RGB): use --inputs")
    mode = "L" if channels == 1 else "RGB"
    pictures = []
    for path in paths:
        picture = open_picture(path, mode, width, height)
        array = np.asarray(picture, dtype=np.float32).reshape(height, width, channels) / 255.0
        pictures.append(array.transpose(2, 0, 1))
    if mean is None:
        mean, std = IMAGENET if channels == 3 else ((0.0,), (1.0,))
    if len(mean) not in (1, channels) or len(std) not in (1, channels) or not all(v > 0 for v in std):
        raise Stop(f"--mean and --std: one value or {channels} (one per channel) each, --std above 0")
    x = np.stack(pictures)
    return (x - np.asarray(mean, np.float32).reshape(1, -1, 1, 1)) / np.asarray(std, np.float32).reshape(1, -1, 1, 1)


def reference_session(onnx_path, name, datatype, sample):
    """An ONNX Runtime session of the ONNX file (WTConv2d nodes included) and its wtconv_trt metadata; Stop when
    its input is not the served one."""
    from wtconv_core.errors import WtconvTrtError
    from wtconv_export.exported import ExportedModel
    from wtconv_ort.session import make_ort_session

    try:
        exported = ExportedModel.read(onnx_path)
        metadata = exported.metadata
        session = make_ort_session(exported.proto if exported.wtconv_nodes else onnx_path)
    except FileNotFoundError:
        raise Stop(f"--onnx {onnx_path} does not exist") from None
    except WtconvTrtError as error:
        raise Stop(f"--onnx {onnx_path}: {error}") from None
    except Exception as error:  # onnx's DecodeError and ONNX Runtime's own failures for a file that is not ONNX
        raise Stop(f"--onnx {onnx_path}: cannot run it in ONNX Runtime ({type(error).__name__}: {error})") from None
    inp = session.get_inputs()[0]
    local = [d if isinstance(d, int) else -1 for d in inp.shape[1:]]
    local_type = {"tensor(float)": "FP32", "tensor(float16)": "FP16"}.get(inp.type, inp.type)
    if (
        inp.name != name
        or local_type != datatype
        or len(local) != 3
        or any(-1 not in (a, b) and a != b for a, b in zip(local, sample, strict=True))
    ):
        raise Stop(
            f"--onnx {onnx_path} takes input {inp.name!r} {local_type} {inp.shape}, the served model {name!r} "
            f"{datatype} [-1, {', '.join(map(str, sample))}]: give the ONNX file the served model was exported from"
        )
    return session, metadata


def compare(served, reference, atol, rtol):
    """The measures printed and the verdict: element-wise (Polygraphy's rule: an element fails only beyond both
    atol and rtol * |reference|), relative to scale, bit-identical, top-1 agreement of 2-D outputs."""
    got, want = served.astype(np.float64), reference.astype(np.float64)
    diff = np.abs(got - want)
    beyond = int(((diff > atol) & (diff > rtol * np.abs(want))).sum())
    scale = float(np.abs(want).max()) or 1.0
    measures = {
        "relative": float(diff.max()) / scale,
        "beyond": beyond,
        "elements": int(diff.size),
        "identical": bool(np.array_equal(served, reference)),
    }
    if got.ndim == 2:
        measures["top1"] = float((got.argmax(1) == want.argmax(1)).mean())
    measures["passed"] = beyond == 0 and measures.get("top1", 1.0) >= 0.99
    return measures


def shared_memory(mode, client, url):
    """The client's shared memory (a ClientMemory: every region it makes is removed when the with block ends,
    normally, by an error or by Ctrl-C), or nothing for ``mode`` "none"."""
    if mode == "none":
        return contextlib.nullcontext()
    from wtconv_core.errors import WtconvTrtError
    from wtconv_serving.traffic.shared_memory import ClientMemory

    try:
        return ClientMemory(mode, client, url=url)
    except WtconvTrtError as error:
        raise Stop(in_our_words(error)) from None


def in_our_words(error) -> str:
    """A shared-memory error of the library, its parameter named as this script's option."""
    return str(error).replace("shared_memory=", "--shared-memory ").replace("shared_memory ", "--shared-memory ", 1)


def send(client, model, x, batch, name, datatype, output, memory):
    """The served answers to ``x`` in requests of ``batch`` images, one array per request, the tensors in the
    requests or, with ``memory``, in two regions made once: the images written into one, the answers read from the
    other (sized from the model's output, when its dimensions are fixed)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from wtconv_core.errors import WtconvTrtError

    inputs = outputs = None
    if memory is not None:
        described = client.get_model_metadata(model).outputs[0]
        dims = [int(d) for d in described.shape[1:]]
        out_dtype = np.dtype(DTYPES.get(described.datatype, np.float32))
        try:
            inputs = memory.region(x[:batch].nbytes, "inputs")
            if described.datatype in DTYPES and min(dims, default=1) > 0:
                outputs = memory.region(batch * int(np.prod(dims)) * out_dtype.itemsize, "outputs")
        except WtconvTrtError as error:
            raise Stop(in_our_words(error)) from None
    for start in range(0, len(x), batch):
        chunk = x[start : start + batch]
        request = grpcclient.InferInput(name, list(chunk.shape), datatype)
        wanted = grpcclient.InferRequestedOutput(output)
        if inputs is None:
            request.set_data_from_numpy(chunk)
        else:
            inputs.write(chunk)
            request.set_shared_memory(inputs.name, chunk.nbytes)
        if outputs is not None:
            wanted.set_shared_memory(outputs.name, len(chunk) * int(np.prod(dims)) * out_dtype.itemsize)
        try:
            result = client.infer(model, [request], outputs=[wanted])
        except InferenceServerException as error:
            raise Stop(f"the server refused a request of shape {list(chunk.shape)}: {error}") from None
        if outputs is None:
            yield result.as_numpy(output)
        else:
            yield outputs.read(out_dtype, result.get_output(output).shape)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="localhost:8001", help="Triton gRPC endpoint (default localhost:8001)")
    parser.add_argument("--model", default="digits", help="model name in the repository (default digits)")
    parser.add_argument("--onnx", metavar="MODEL.onnx", help="check the answers against this file in ONNX Runtime")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--images", nargs="+", metavar="PICTURE", help="pictures to send (needs Pillow)")
    data.add_argument("--inputs", metavar="FILE", help="a .npy array (B,C,H,W) or a .npz of such arrays to send")
    parser.add_argument("--count", type=int, default=None, help="images to send (default 256 digits, 32 random)")
    parser.add_argument(
        "--batch", type=int, help="images per request (default 16; above the served max_batch_size: requests of it)"
    )
    parser.add_argument("--shape", metavar="C,H,W", help="image size for a served input with dynamic dimensions")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random images (default 0)")
    parser.add_argument("--mean", type=float, nargs="+", help="--images: per-channel mean (default ImageNet's)")
    parser.add_argument("--std", type=float, nargs="+", help="--images: per-channel std (default ImageNet's)")
    parser.add_argument("--atol", type=float, help="absolute tolerance (default FP32 1e-3, FP16 5e-2)")
    parser.add_argument("--rtol", type=float, help="relative tolerance (default FP32 1e-3, FP16 5e-2)")
    parser.add_argument(
        "--shared-memory",
        choices=SHARED_MEMORY_MODES,
        default="none",
        help=help_of(LoadTestOptions, "shared_memory"),
    )
    args = parser.parse_args(argv)
    try:
        return run(args)
    except Stop as reason:
        print(f"triton_client: error: {' '.join(str(reason).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the shared-memory regions are gone by now (ClientMemory's with block)
        print("triton_client: interrupted", file=sys.stderr)
        return 130


def run(args) -> int:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    if (args.count is not None and args.count < 1) or (args.batch is not None and args.batch < 1):
        raise Stop("--count and --batch must be at least 1")
    if (args.mean is None) != (args.std is None):
        raise Stop("--mean and --std go together")
    client = grpcclient.InferenceServerClient(url=args.url)
    try:
        if not client.is_model_ready(args.model):
            try:
                index = client.get_model_repository_index().models
            except InferenceServerException:  # wtconv-trt serve opens its model list only to itself
                raise Stop(f"model {args.model!r} is not ready on {args.url}") from None
            there = ", ".join(
                f"{m.name} ({m.state or 'not loaded'}{': ' + m.reason if m.reason else ''})" for m in index
            )
            raise Stop(f"model {args.model!r} is not ready on {args.url}; the server has: {there or 'no model'}")
        name, datatype, sample, max_batch, fixed_batch = served_input(client, args.model)
        output = client.get_model_metadata(args.model).outputs[0].name
    except InferenceServerException as error:
        if answers_http(args.url):
            raise Stop(
                f"{args.url} is Triton's HTTP endpoint (it answered /v2/health/live); this client speaks gRPC: give "
                "the server's gRPC endpoint with --url HOST:PORT (tritonserver's --grpc-port, 8001 by default; "
                "'wtconv-trt serve' prints the client line with it)"
            ) from None
        raise Stop(f"cannot reach Triton at {args.url}: {error}") from None

    session, metadata = reference_session(args.onnx, name, datatype, sample) if args.onnx else (None, {})
    channels, height, width = fill_dynamic(sample, args.shape, metadata, args.model)
    digits_config, labels = None, None
    if metadata.get("source") == "default":
        from wtconv_torch.models import read_default_config

        digits_config = read_default_config()
    if args.images:
        x = load_images(args.images, channels, height, width, digits_config, args.mean, args.std)
    elif args.inputs:
        from wtconv_core.errors import WtconvTrtError
        from wtconv_core.inputs import load_inputs

        try:
            x = np.concatenate(load_inputs(args.inputs))
        except (WtconvTrtError, ValueError) as error:
            raise Stop(str(error)) from None
    elif digits_config is not None and [channels, height, width] == [1, 32, 32]:
        from wtconv_torch.models import load_heldout_digits

        x, labels = load_heldout_digits(digits_config, count=args.count or 256)
        x, labels = x.numpy(), labels.numpy()
    else:
        x = np.random.default_rng(args.seed).standard_normal((args.count or 32, channels, height, width), np.float32)
    if x.ndim != 4 or list(x.shape[1:]) != [channels, height, width]:
        raise Stop(
            f"the inputs have shape {list(x.shape)}; model {args.model!r} takes [B, {channels}, {height}, {width}]"
        )
    x = np.ascontiguousarray(x.astype(DTYPES[datatype]))
    wanted = DEFAULT_BATCH if args.batch is None else args.batch
    batch = fixed_batch if fixed_batch > 0 else min(wanted, max_batch or wanted)
    if fixed_batch > 0 and len(x) % fixed_batch:
        raise Stop(f"model {args.model!r} takes batches of exactly {fixed_batch}; send a multiple of it (--count)")
    if args.batch is not None and batch != args.batch:
        served_limit = f"batches of exactly {fixed_batch}" if fixed_batch > 0 else f"max_batch_size {max_batch}"
        print(f"--batch {args.batch}: model {args.model!r} is served with {served_limit}; sending requests of {batch}")

    with shared_memory(args.shared_memory, client, args.url) as memory:
        served = np.concatenate(list(send(client, args.model, x, batch, name, datatype, output, memory)))
    print(
        f"{len(x)} images through Triton model {args.model!r} at {args.url}: input {name!r} {datatype} "
        f"[{channels}, {height}, {width}], batches of {batch}; output {output!r} {list(served.shape)}"
        + ("" if args.shared_memory == "none" else f"; tensors in {args.shared_memory} shared memory")
    )
    if session is None:
        if served.ndim == 2:
            print("top-1 classes of the first images: " + " ".join(map(str, served.argmax(1)[:16])))
        print("not checked: give --onnx MODEL.onnx (the file the served model was exported from) to compare")
        return 0

    reference = np.concatenate([session.run(None, {name: x[i : i + batch]})[0] for i in range(0, len(x), batch)])
    atol = TOLERANCE[datatype] if args.atol is None else args.atol
    rtol = TOLERANCE[datatype] if args.rtol is None else args.rtol
    m = compare(served, reference, atol, rtol)
    line = (
        f"against {args.onnx} in ONNX Runtime: max |served - onnx| / max |onnx| = {m['relative']:.3e}, "
        f"{m['beyond']} of {m['elements']} elements beyond atol {atol:g} and rtol {rtol:g}"
        + (", bit-identical" if m["identical"] else "")
    )
    if "top1" in m:
        line += f"; top-1 agreement {m['top1']:.4f}"
    print(line)
    if labels is not None:
        print(
            f"accuracy on the held-out digits: served {(served.argmax(1) == labels).mean():.4f}, "
            f"ONNX Runtime {(reference.argmax(1) == labels).mean():.4f}"
        )
    print("PASSED" if m["passed"] else "FAILED: the served answers differ from the ONNX file's")
    return 0 if m["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
