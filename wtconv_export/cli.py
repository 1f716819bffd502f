"""The ``wtconv-trt`` command: one subcommand per module.

Each subcommand module defines HELP (one line), add_arguments(parser) and run(args) -> exit status.
Heavy imports (torch, onnx, tensorrt) happen inside run(), so ``wtconv-trt --help`` stays fast.
"""

import argparse
import importlib
import sys

# (subcommand, module). Keep in the order of the user workflow.
SUBCOMMANDS = [
    ("demo", "wtconv_export.commands.demo"),
    ("export", "wtconv_export.commands.export"),
    ("validate", "wtconv_export.commands.validate"),
    ("bench-layer", "wtconv_export.commands.bench_layer"),
    ("build", "trt_engine.commands.build"),
    ("bench", "trt_engine.commands.bench"),
    ("triton-repo", "trt_engine.commands.triton_repo"),
]


class UserError(Exception):
    """An error caused by the user's input: printed as one clear line, exit status 2."""


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
    except (UserError, ValueError, FileNotFoundError, PermissionError) as error:
        print(f"wtconv-trt {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # Run through the package's module so ``python -m wtconv_export.cli`` catches the same UserError class
    # the subcommands raise (this file's __main__ copy would define a second one).
    from wtconv_export.cli import main as package_main
    sys.exit(package_main())
