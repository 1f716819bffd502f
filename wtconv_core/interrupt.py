"""A Ctrl-C that cannot be lost (docs/design.md §1, "Errors").

Python raises KeyboardInterrupt wherever the main thread happens to be. When that is a weakref callback or a
finaliser (PyTorch runs some during garbage collection), Python prints "Exception ignored in ..." and drops it,
and the job goes on. The command line's SIGINT handler therefore also notes the interrupt here, and long jobs pass
check points (each progress step, the commit of every atomic write) that raise it again."""

from __future__ import annotations

__all__ = ["check_interrupt", "interrupt_pending", "note_interrupt"]

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
