"""Progress of long jobs (exports, benchmarks) reported through ``logging``.

Libraries do not print; a job that takes more than a few seconds reports each finished step on its module's
logger at INFO ("bench 3/12 (8.1 s, about 24 s left): ..."), and the command line decides whether and where
the records are shown. The same records end up in a log file when a caller configures one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from wtconv_core.interrupt import check_interrupt

T = TypeVar("T")

__all__ = ["Progress", "show_progress", "track"]


class Progress:
    """Counts the steps of one job and logs each with the elapsed time and, for steps of similar length
    (``estimate``), an estimate of the time left."""

    def __init__(self, logger: logging.Logger, what: str, total: int | None = None, estimate: bool = True) -> None:
        self.logger = logger
        self.estimate = estimate
        self.what = what
        self.total = total
        self.done = 0
        self.start = time.monotonic()

    def step(self, message: str = "") -> None:
        """One step finished; ``message`` says what it produced. A check point for Ctrl-C (wtconv_core.interrupt)."""
        check_interrupt()
        self.done += 1
        elapsed = time.monotonic() - self.start
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        left = ""
        if self.estimate and self.total and self.done < self.total:
            left = f", about {elapsed / self.done * (self.total - self.done):.0f} s left"
        self.logger.info("%s %s (%.1f s%s)%s", self.what, count, elapsed, left, f": {message}" if message else "")


def track(items: Iterable[T], logger: logging.Logger, what: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items`` and log a step after each one has been processed (when the consumer asks for the next)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    progress = Progress(logger, what, total)
    for item in items:
        yield item
        progress.step()


class _CurrentStderrHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted (not the stream of the moment
    the handler was made), so redirections made later (tests capturing output, a caller's redirect) apply."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201 (a text stream)
        import sys

        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001 (StreamHandler.__init__ assigns it; the property wins)
        pass


# The library packages whose loggers show_progress shows by default (docs/design.md §1).
LIBRARY_PACKAGES = (
    "wtconv_core",
    "wtconv_libs",
    "wtconv_torch",
    "wtconv_export",
    "wtconv_ort",
    "trt_engine",
    "wtconv_validate",
    "wtconv_serving",
    "wtconv_bench",
)


def show_progress(packages: tuple[str, ...] = LIBRARY_PACKAGES) -> None:
    """Show the INFO records of the project's libraries (progress, summaries) on stderr, one message per line.

    For command-line programs; idempotent. Libraries never call it: a program embedding them configures logging
    its own way."""
    for package in packages:
        package_logger = logging.getLogger(package)
        if not any(isinstance(h, _CurrentStderrHandler) for h in package_logger.handlers):
            handler = _CurrentStderrHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            package_logger.addHandler(handler)
        if package_logger.level == logging.NOTSET or package_logger.level > logging.INFO:
            package_logger.setLevel(logging.INFO)
