"""The ``wtconv-trt`` command: one subcommand per module, each a thin shell over the Python API (wtconv_trt.api).

Each subcommand module defines HELP (one line), add_arguments(parser) and run(args) -> exit status; run() maps
the options onto one API call and prints its result (the job makes every check and takes every default).
Heavy imports (torch, onnx, tensorrt) happen inside the jobs, so ``wtconv-trt --help`` stays fast.

Errors a user can fix end in one line on stderr and exit status 2: argument errors (argparse, through
OneLineParser), and every ``wtconv_core.errors.WtconvTrtError`` the libraries raise. Ctrl-C ends in one line and
exit status 130 (128 + SIGINT, as shells report it). Any other exception is a bug and keeps its traceback.
"""

import argparse
import importlib
import os
import signal
import sys

from wtconv_core.errors import WtconvTrtError
from wtconv_core.progress import LIBRARY_PACKAGES, show_progress
from wtconv_trt.arguments import UsageError

INTERRUPTED = 130  # exit status after Ctrl-C: 128 + SIGINT, as shells report it

# (subcommand, module). Keep in the order of the user workflow.
SUBCOMMANDS = [
    ("demo", "wtconv_trt.commands.demo"),
    ("export", "wtconv_trt.commands.export"),
    ("validate", "wtconv_trt.commands.validate"),
    ("bench-layer", "wtconv_trt.commands.bench_layer"),
    ("build", "wtconv_trt.commands.build"),
    ("bench", "wtconv_trt.commands.bench"),
    ("triton-repo", "wtconv_trt.commands.triton_repo"),
    ("build-libs", "wtconv_trt.commands.build_libs"),
    ("doctor", "wtconv_trt.commands.doctor"),
    ("serve", "wtconv_trt.commands.serve"),
]


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (argparse prints the usage block first by default) and
    reach ``main`` as an exception, so that ``main`` returns 2 for them as for every other user error."""

    def error(self, message: str):
        raise UsageError(self.prog, f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="wtconv-trt",
        description="Deploy WTConv / WTConvNeXt models: export to ONNX, build TensorRT engines, validate, serve.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv=None) -> int:
    command = "wtconv-trt"
    try:
        args = build_parser().parse_args(argv)
        show_progress((*LIBRARY_PACKAGES, "wtconv_trt.api"))  # the jobs' INFO records on stderr
        command = f"wtconv-trt {args.command}"
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a reader that went away (`... | head -1`) surfaces here, inside the handlers
        return code
    except BrokenPipeError:
        # Whoever read our standard output closed it: not a mistake to report, and no traceback. Point stdout at
        # the null device so that the interpreter's own final flush stays quiet too (the Python documentation's
        # advice for SIGPIPE, which Python ignores, turning it into this exception).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except UsageError as error:
        print(f"{error.prog}: error: {' '.join(error.message.split())}", file=sys.stderr)
        return 2
    except WtconvTrtError as error:
        print(f"{command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted", file=sys.stderr)
        return INTERRUPTED


def run_command() -> None:
    """The process entry point (the ``wtconv-trt`` script, ``python -m wtconv_trt``): main()'s status becomes the
    exit status. Ctrl-C is taken once: the first raises KeyboardInterrupt, which main() reports; later presses are
    ignored while the command winds down (they would interrupt the interpreter's shutdown, PyTorch's and
    threading's exit handlers, with a traceback and a death by SIGINT). After Ctrl-C the process leaves with
    os._exit(130) once the output is flushed: an export interrupted once was seen to print its line and then die
    by SIGINT instead of exiting with 130. CPython kills itself with SIGINT at exit when its "unhandled
    KeyboardInterrupt" flag is set, and it sets that flag when the interrupt passes through code run by
    ``PyRun_*`` (as PyTorch's C++ can) even if main() catches it later; that is our reading, not a traced cause.
    The command has cleaned up by then (its ``finally`` blocks ran before main() returned). main() itself changes
    no signal handling, so in-process callers keep theirs."""
    signal.signal(signal.SIGINT, _interrupt_once)
    code = main()
    if code == INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


def _interrupt_once(signum, frame):
    """SIGINT handler of the command's process: the first Ctrl-C interrupts, the ones after it are ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _one_line(error: BaseException) -> str:
    """The error's message on one line (a message quoting a multi-line library error keeps its words)."""
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
