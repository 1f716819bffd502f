"""``wtconv-trt demo``: the shipped default model, reference WTConv2d vs the fused operator, layer by layer.

Loads the default model (a small WTConvNeXt trained on digits), folds every WTConv2d, and runs the published
reference and the fused operator (the executable spec behind ``wtconv::fused_wtconv2d``) on the shipped
held-out images; prints per-layer and logits agreement and the accuracy; then exports the model to ONNX
(one WTConv2d plugin node per layer in fp32 and fp16, and the standard-op fallback) and validates each export
against PyTorch with Polygraphy in ONNX Runtime. Exits 1 when any relative error (max |fused - reference| /
max |reference|) exceeds the tolerance or any ONNX validation fails.
"""

from wtconv_trt import arguments

HELP = "run the shipped default model through the reference and the fused WTConv operator and compare them"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--count",
        type=arguments.positive_int,
        default=64,
        help="number of shipped held-out images to run (default 64, at most the split size)",
    )
    parser.add_argument(
        "--tolerance",
        type=arguments.tolerance,
        default=1e-5,
        help="largest accepted fp32 relative error, per layer and for the logits (default 1e-5)",
    )
    parser.add_argument(
        "--onnx-dir",
        default="wtconv_trt_out",
        help="where the ONNX exports of the default model are written (default ./wtconv_trt_out)",
    )
    parser.add_argument("--skip-onnx", action="store_true", help="only the PyTorch comparison, no ONNX export")
    parser.add_argument("--force", action="store_true", help="overwrite earlier exports in --onnx-dir")


# The files the ONNX step writes into --onnx-dir (wtconv_export.onnx_validate.export_and_validate_default).
ONNX_FILES = ("default_plugin_fp32.onnx", "default_plugin_fp16.onnx", "default_standard_fp32.onnx")


def _next_step(onnx_dir: str) -> str:
    """The next command the user can run on this machine: a TensorRT build where TensorRT is installed (of the
    plugin export when the plugin library is found, else of the standard-op export, which needs no plugin), else
    the validation of an export in ONNX Runtime (which runs anywhere)."""
    import os

    from trt_engine.plugin_library import default_plugin
    from trt_engine.tensorrt_api import tensorrt_available

    if tensorrt_available():
        if default_plugin() is not None:
            return (
                f"Next: build a TensorRT engine: wtconv-trt build "
                f"{os.path.join(onnx_dir, 'default_plugin_fp16.onnx')} (docs/engines.md)"
            )
        return (
            f"Next: build a TensorRT engine from the standard-op export (no plugin library found): wtconv-trt "
            f"build {os.path.join(onnx_dir, 'default_standard_fp32.onnx')} (docs/engines.md)"
        )
    return (
        f"Next: wtconv-trt validate {os.path.join(onnx_dir, 'default_plugin_fp32.onnx')} (ONNX Runtime, runs "
        f"here); TensorRT is not installed, so 'wtconv-trt build' needs a machine with it (docs/engines.md)"
    )


def _errors(got, expected):
    diff = (got.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    return diff, diff / scale if scale > 0 else diff


def run(args) -> int:
    import copy
    import time

    import torch

    from wtconv_export import haar
    from wtconv_export.folding import fold_wtconv
    from wtconv_export.fused_module import FusedWTConv2d, fuse_wtconv_layers
    from wtconv_export.models import accuracy, load_default_model, load_heldout_digits
    from wtconv_export.ops import fused_wtconv2d
    from wtconv_export.paths import check_output_dir
    from wtconv_export.wtconv2d import WTConv2d

    if not args.skip_onnx:  # before the PyTorch part, so a bad --onnx-dir costs nothing
        check_output_dir(args.onnx_dir, option="--onnx-dir", force=args.force, will_write=ONNX_FILES)
    # Tiny tensors: one thread is fastest, and OpenMP's spinning pool stalls on a busy machine.
    torch.set_num_threads(1)
    start = time.perf_counter()
    model, config = load_default_model()
    x, labels = load_heldout_digits(config, count=args.count)
    arch = config["model"]
    print(
        f"default model: {config['name']} — depths {arch['depths']}, dims {arch['dims']}, kernel "
        f"{arch['kernel_sizes']}, wt_levels {arch['wt_levels']}, input {tuple(x.shape[1:])}; "
        f"recorded held-out accuracy {config['heldout_accuracy']:.4f} on {config['dataset']['test_count']} images"
    )
    print(f"batch: {len(labels)} shipped held-out images\n")

    # Reference run, capturing every WTConv2d's input and output.
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, WTConv2d)]
    captured = {}
    hooks = [
        m.register_forward_hook(lambda mod, inp, out, name=name: captured.__setitem__(name, (inp[0], out)))
        for name, m in layers
    ]
    with torch.no_grad():
        ref_logits = model(x)
    for h in hooks:
        h.remove()

    failures = []
    header = f"{'layer':<32} {'C':>4} {'H x W':>7} {'k':>2} {'L':>2} {'s':>2} {'max abs err':>12} {'rel err':>10}"
    print(header)
    print("-" * len(header))
    with torch.no_grad():
        for name, layer in layers:
            inp, out = captured[name]
            folded = fold_wtconv(layer)
            got = fused_wtconv2d(inp, *folded.tensors(), folded.kernel_size, folded.wt_levels, folded.stride)
            abs_err, rel_err = _errors(got, out)
            flag = "" if rel_err <= args.tolerance else "  <-- exceeds tolerance"
            print(
                f"{name:<32} {folded.channels:>4} {inp.shape[2]:>3}x{inp.shape[3]:<3} {folded.kernel_size:>2} "
                f"{folded.wt_levels:>2} {folded.stride:>2} {abs_err:>12.3e} {rel_err:>10.3e}{flag}"
            )
            if rel_err > args.tolerance:
                failures.append(name)

    # Whole model with every WTConv2d replaced by the fused operator.
    fused = fuse_wtconv_layers(copy.deepcopy(model)).eval()
    n_fused = sum(isinstance(m, FusedWTConv2d) for m in fused.modules())
    with torch.no_grad():
        fused_logits = fused(x)
    abs_err, rel_err = _errors(fused_logits, ref_logits)
    same = (fused_logits.argmax(1) == ref_logits.argmax(1)).sum().item()
    print(
        f"\nlogits (fp32, {n_fused} fused layers): max abs err {abs_err:.3e}, rel err {rel_err:.3e}; "
        f"same prediction on {same}/{len(labels)} images"
    )
    if rel_err > args.tolerance:
        failures.append("logits")

    # The same comparison in float64 with exact Haar filters: the fused formulation is exact.
    ref64 = copy.deepcopy(model).double()
    with torch.no_grad():
        for _, layer in ((n, m) for n, m in ref64.named_modules() if isinstance(m, WTConv2d)):
            wt, iwt = haar.create_2d_haar_filters(layer.in_channels, torch.float64)
            layer.wt_filter.copy_(wt)
            layer.iwt_filter.copy_(iwt)
        fused64 = copy.deepcopy(ref64)
        for name, child in [(n, m) for n, m in fused64.named_modules() if isinstance(m, WTConv2d)]:
            parent = fused64.get_submodule(name.rsplit(".", 1)[0])
            f64 = FusedWTConv2d(fold_wtconv(child, torch.float64))
            setattr(parent, name.rsplit(".", 1)[1], f64)
        _, rel64 = _errors(fused64(x.double()), ref64(x.double()))
    print(f"logits (float64, exact Haar taps): rel err {rel64:.3e}")

    acc_ref, acc_fused = accuracy(model, x, labels), accuracy(fused, x, labels)
    print(f"accuracy on this batch: reference {acc_ref:.4f}, fused {acc_fused:.4f}")
    elapsed = time.perf_counter() - start
    if failures:
        print(f"\nFAIL: relative error above {args.tolerance:g} in {', '.join(failures)} ({elapsed:.1f} s)")
        return 1
    print(
        f"\nOK: reference and fused operator agree within {args.tolerance:g} relative error "
        f"in every layer and in the logits ({elapsed:.1f} s)"
    )
    if args.skip_onnx:
        return 0
    from wtconv_export.onnx_validate import export_and_validate_default

    print(
        f"\nONNX: export the default model (plugin fp32 / fp16, standard ops fp32) to {args.onnx_dir} "
        f"and validate each against PyTorch with Polygraphy (ONNX Runtime)"
    )
    outcomes = export_and_validate_default(args.onnx_dir)
    for exported, outcome in outcomes:
        print(exported.summary())
        print("  " + outcome.summary())
    if not all(outcome.passed for _, outcome in outcomes):
        print("\nFAIL: an ONNX export does not match PyTorch (see above)")
        return 1
    print(f"\nOK: every export matches PyTorch ({time.perf_counter() - start:.1f} s). {_next_step(args.onnx_dir)}")
    return 0
