"""A Ctrl-C that cannot be lost (docs/design.md §1, "Errors").

Python raises KeyboardInterrupt wherever the main thread happens to be. When that is a weakref callback or a
finaliser (PyTorch runs some during garbage collection), Python prints "Exception ignored in ..." and drops it,
and the job goes on. The command line's SIGINT handler therefore also notes the interrupt here, and long jobs pass
check points (each progress step, the commit of every atomic write) that raise it again. ``deferred_interrupt`` holds
a press back until a step that must not be cut in two is done."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["check_interrupt", "deferred_interrupt", "interrupt_pending", "note_interrupt"]

_pending = False


def note_interrupt() -> None:
    """Remember that Ctrl-C was pressed (called by the command line's SIGINT handler)."""
    global _pending
    _pending = True


def interrupt_pending() -> bool:
    """True once Ctrl-C was pressed in this process (and noted)."""
    return _pending


def check_interrupt() -> None:
    """Raise KeyboardInterrupt when Ctrl-C was pressed, whether or not its first KeyboardInterrupt got through."""
    if _pending:
        raise KeyboardInterrupt


@contextmanager
def deferred_interrupt():
    """Ctrl-C arriving inside the block is taken when the block ends, for a step an interrupt must not cut in two:
    ONNX Runtime calls the onnxruntime-extensions Python op from C++, and a KeyboardInterrupt raised inside that call
    crosses C++ and aborts the process; a shared-memory region half removed stays registered or in /dev/shm. Only in
    the main thread with a Python handler installed (elsewhere nothing is changed)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    pending = []
    signal.signal(signal.SIGINT, lambda *received: pending.append(received))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            previous(*pending[0])  # raises KeyboardInterrupt, as the handler would have
