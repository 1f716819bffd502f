"""The ``wtconv-trt`` command: one subcommand module per job, each a thin shell over the Python API
(wtconv_trt.api); errors a user can fix end in one line and exit status 2, Ctrl-C in one line and 130, a bug keeps
its traceback (docs/design.md §1, "Errors")."""

import argparse
import importlib
import os
import re
import signal
import sys

from wtconv_core.errors import WtconvTrtError
from wtconv_core.interrupt import check_interrupt, interrupt_pending, note_interrupt
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
        p.set_defaults(_run=module.run, _options=options_of(p))
    return parser


# API parameters set by an option of another name (the others: the option whose destination is the parameter).
OPTION_OF_PARAMETER = {
    "json_path": "json",
    "preferred_batch_sizes": "preferred_batch",
    "repository": "repo",
    "requests": "load_test",
    "sample_every_s": "sample_every",
    "shapes": "shape",  # bench's --shape; build's own --shapes is found first
    "soak_s": "soak",
    "warmup_ms": "warmup",
    "window_s": "window",
    "workspace_mib": "workspace",
}


def options_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{argparse destination: the option that sets it} of a subcommand."""
    return {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"}


def command_line_message(error: WtconvTrtError, options: dict[str, str]) -> str:
    """The error's one line in the command line's words: the API parameter it is about, and every ``name=value``
    of advice, named by the subcommand's option (``instances: ...`` -> ``argument --instances: ...``,
    ``pass force=True`` -> ``pass --force``). Names no option sets stay as they are."""

    def option(name: str) -> str | None:
        return options.get(name) or options.get(OPTION_OF_PARAMETER.get(name, ""))

    text = _one_line(error)
    name = error.parameter
    if name and option(name) and text.startswith(name) and text[len(name) : len(name) + 1] in (":", " "):
        rest = text[len(name) :]
        text = (f"argument {option(name)}" if rest.startswith(":") else option(name)) + rest
    text = re.sub(
        r"(?<![\w.-])([a-z][a-z0-9_]*)=(True|False)\b",
        lambda m: (option(m.group(1)) if m.group(2) == "True" else options.get("no_" + m.group(1))) or m.group(0),
        text,
    )
    return re.sub(
        r"(?<![\w.-])([a-z][a-z0-9_]*)=(?=[^\s=,)])",
        lambda m: f"{option(m.group(1))} " if option(m.group(1)) else m.group(0),
        text,
    )


def main(argv=None) -> int:
    command, options = "wtconv-trt", {}
    try:
        args = build_parser().parse_args(argv)
        options = args._options
        show_progress((*LIBRARY_PACKAGES, "wtconv_trt.api"))  # the jobs' INFO records on stderr
        command = f"wtconv-trt {args.command}"
        code = int(args._run(args) or 0)
        check_interrupt()  # a Ctrl-C Python dropped after the job's last check point still ends in 130
        sys.stdout.flush()  # a reader that went away (`... | head -1`) surfaces here, inside the handlers
        return code
    except BrokenPipeError:
        # The reader of our output went away: no error to report; stdout to the null device keeps the final flush
        # quiet (the Python documentation's advice for SIGPIPE).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except UsageError as error:
        print(f"{error.prog}: error: {' '.join(error.message.split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(command)
    except Exception as error:
        if interrupt_pending():
            # Ctrl-C was pressed and the error is its consequence: a library caught the KeyboardInterrupt and raised
            # its own (torch.onnx, interrupted while it imports torch._dynamo, reports a TorchExportError).
            return _interrupted(command)
        if isinstance(error, WtconvTrtError):
            print(f"{command}: error: {command_line_message(error, options)}", file=sys.stderr)
            return 2
        raise


def _interrupted(command: str) -> int:
    print(f"\n{command}: interrupted", file=sys.stderr)
    return INTERRUPTED


def run_command() -> None:
    """The process entry point (the ``wtconv-trt`` script, ``python -m wtconv_trt``): main()'s status is the exit
    status. Ctrl-C is taken once and later presses are ignored while the command winds down; after it the process
    leaves with os._exit(130), so an interrupted exit cannot end in a death by SIGINT (docs/design.md §1,
    "Errors"). main() changes no signal handling, so in-process callers keep theirs."""
    signal.signal(signal.SIGINT, _interrupt_once)
    sys.unraisablehook = _quiet_dropped_interrupt(sys.unraisablehook)
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
    """SIGINT handler of the command's process: the first Ctrl-C interrupts, the ones after it are ignored. The
    interrupt is also noted, so that one Python drops (raised in a weakref callback) is raised again at the job's
    next check point (wtconv_core.interrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    note_interrupt()
    raise KeyboardInterrupt


def _quiet_dropped_interrupt(default):
    """sys.unraisablehook that says nothing of the KeyboardInterrupt Python drops after our handler noted it (its
    "Exception ignored in ..." traceback); any other unraisable exception goes to ``default``."""

    def hook(unraisable):
        if issubclass(unraisable.exc_type, KeyboardInterrupt) and interrupt_pending():
            return
        default(unraisable)

    return hook


def _one_line(error: BaseException) -> str:
    """The error's message on one line (a message quoting a multi-line library error keeps its words)."""
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
