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

T = TypeVar("T")

__all__ = ["Progress", "track"]


class Progress:
    """Counts the steps of one job and logs each with the elapsed time and an estimate of the time left."""

    def __init__(self, logger: logging.Logger, what: str, total: int | None = None) -> None:
        self.logger = logger
        self.what = what
        self.total = total
        self.done = 0
        self.start = time.monotonic()

    def step(self, message: str = "") -> None:
        """One step finished; ``message`` says what it produced."""
        self.done += 1
        elapsed = time.monotonic() - self.start
        count = f"{self.done}/{self.total}" if self.total else f"{self.done}"
        left = ""
        if self.total and self.done < self.total:
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
