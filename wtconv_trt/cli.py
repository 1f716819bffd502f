"""The ``wtconv-trt`` command: one subcommand per module.

Each subcommand module defines HELP (one line), add_arguments(parser) and run(args) -> exit status.
Heavy imports (torch, onnx, tensorrt) happen inside run(), so ``wtconv-trt --help`` stays fast.
"""

import argparse
import importlib
import sys

from wtconv_export.errors import WtconvTrtError

# (subcommand, module). Keep in the order of the user workflow.
SUBCOMMANDS = [
    ("demo", "wtconv_trt.commands.demo"),
    ("export", "wtconv_trt.commands.export"),
    ("validate", "wtconv_trt.commands.validate"),
    ("bench-layer", "wtconv_trt.commands.bench_layer"),
    ("build", "wtconv_trt.commands.build"),
    ("bench", "wtconv_trt.commands.bench"),
    ("triton-repo", "wtconv_trt.commands.triton_repo"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wtconv-trt",
        description="Deploy WTConv / WTConvNeXt models: export to ONNX, build TensorRT engines, validate, serve.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    # Built-in ValueError / OSError are still caught while the libraries move their user errors onto
    # WtconvTrtError; once they have, only WtconvTrtError is caught and every other exception is a bug.
    except (WtconvTrtError, ValueError, FileNotFoundError, PermissionError) as error:
        print(f"wtconv-trt {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
