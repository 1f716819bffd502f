"""Atomic file writes: a reader sees the old file or the whole new one, never a part, and a failed write leaves
the old file as it was and no temporary file behind (docs/design.md §1)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wtconv_core.errors import ConfigurationError
from wtconv_core.interrupt import check_interrupt

__all__ = [
    "atomic_copy",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "user_file_mode",
    "writing_error",
]

# Why a write can fail that the user, not the program, must fix: the file system is full, over quota, read-only, the
# file too large for it, the place not writable (after the checks made before the work started), the device failing.
_ADVICE = {
    errno.ENOSPC: "free space on its file system, or write elsewhere",
    errno.EDQUOT: "free space within your quota, or write elsewhere",
    errno.EFBIG: "write to a file system that takes larger files",
    errno.EROFS: "write to a file system that is not read-only",
    errno.EACCES: "write where you have permission",
    errno.EPERM: "write where you have permission",
    errno.EIO: "the device reported an I/O error: check it, or write elsewhere",
}


def writing_error(error: OSError, path: str | os.PathLike) -> ConfigurationError | None:
    """The one-line error for an OSError of writing ``path`` that the user must fix (a full disk, a read-only file
    system, ...), naming the path, the system's reason and what to do; None for any other (a bug keeps its traceback).
    The atomic writers leave nothing behind, so the message says so."""
    advice = _ADVICE.get(error.errno)
    if advice is None:
        return None
    reason = error.strerror or os.strerror(error.errno)
    return ConfigurationError(
        f"cannot write {path}: {reason} ({errno.errorcode.get(error.errno, error.errno)}); {advice}; nothing was "
        f"written (an existing {Path(path).name} is left as it was)"
    )


def user_file_mode() -> int:
    """The mode a new file gets from open() here: 0o666 less the process's umask (read from /proc, else set and
    restored). mkstemp's 0o600 would keep an engine or a report from every other user, such as a Triton container
    running as another user."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_path(path: str | os.PathLike, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` to write the new file to; when the block ends without an exception the file
    is flushed to disk, given ``mode`` (default user_file_mode) and renamed onto ``path``. On any exception, Ctrl-C
    included (also one Python dropped while the file was written: wtconv_core.interrupt), the temporary file is
    removed and ``path`` is left untouched."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, user_file_mode() if mode is None else mode)
        check_interrupt()
        os.replace(tmp, path)
    except OSError as error:  # the caller's write included: a full disk is said in one line (writing_error)
        user_error = writing_error(error, path)
        if user_error is None:
            raise
        raise user_error from error
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``path`` atomically (atomic_path)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(memoryview(data))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """``obj`` as indented JSON, written atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode("utf-8"))


def atomic_copy(source: str | os.PathLike, path: str | os.PathLike, mode: int | None = None) -> None:
    """Copy ``source`` to ``path`` atomically: a process that has the old file mapped (a loaded library) keeps it.
    ``mode``: default the source's permission bits."""
    with atomic_path(path, os.stat(source).st_mode & 0o777 if mode is None else mode) as tmp:
        shutil.copyfile(source, tmp)
