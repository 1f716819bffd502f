"""Where the jobs read and write, one rule for every job: inputs must be existing, non-empty regular files; outputs
are checked before any work starts (the directory takes a new file, tried for real; nothing existing is replaced
without force=True), and written atomically (wtconv_core.files). Messages name the parameter (docs/design.md §1)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable

from wtconv_core.errors import InputError

__all__ = ["check_input_file", "check_not_an_input", "check_output_dir", "check_output_file"]


def _refuse(subject: str, problem: str) -> InputError:
    first = subject.split()[0].rstrip(":")
    return InputError(f"{subject} {problem}", parameter=first if first.isidentifier() else None)


def _probe_writable(directory: str) -> str | None:
    """None when a file can be created in ``directory``, else why not."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".wtconv-trt-probe-", dir=directory)
    except OSError as error:
        return error.strerror or str(error)
    os.close(fd)
    os.unlink(probe)
    return None


def check_output_file(path, *, option: str, force: bool = False) -> str:
    """The absolute path of a file to write; InputError (one line, with the fix) when it cannot or may not be
    written. ``option``: the parameter that gave the path, named in the message."""
    shown = os.fspath(path)
    full = os.path.abspath(shown)
    directory = os.path.dirname(full)
    if os.path.isdir(full):
        raise _refuse(f"{option} {shown}", "is a directory; give a file name inside it")
    if not os.path.isdir(directory):
        raise _refuse(
            f"{option} {shown}:", f"directory {directory} does not exist; create it first or choose another path"
        )
    reason = _probe_writable(directory)
    if reason:
        raise _refuse(
            f"{option} {shown}:", f"cannot create files in {directory} ({reason}); choose a writable directory"
        )
    if os.path.lexists(full):
        if not force:
            raise _refuse(
                f"{option} {shown}", "already exists; pass force=True to overwrite it, or choose another name"
            )
        if not os.path.isfile(full):
            raise _refuse(f"{option} {shown}", "exists and is not a regular file; remove it or choose another name")
    return full


def check_output_dir(path, *, option: str, force: bool = False, will_write=()) -> str:
    """The absolute path of a directory to write into (created later by the command if missing); InputError when
    it is a file, cannot be created or written, or (without ``force``) already holds one of ``will_write``."""
    shown = os.fspath(path)
    full = os.path.abspath(shown)
    if os.path.exists(full) and not os.path.isdir(full):
        raise _refuse(f"{option} {shown}", "is a file, not a directory; give a directory (it is created if missing)")
    existing = full
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise _refuse(f"{option} {shown}:", f"{existing} is a file, so the directory cannot be created")
    reason = _probe_writable(existing)
    if reason:
        raise _refuse(
            f"{option} {shown}:", f"cannot create files in {existing} ({reason}); choose a writable directory"
        )
    if existing == full and not force:
        clashes = [name for name in will_write if os.path.lexists(os.path.join(full, name))]
        if clashes:
            raise _refuse(
                f"{option} {shown}",
                f"already holds {', '.join(clashes)}; pass force=True to overwrite, or choose another directory",
            )
    return full


def check_input_file(path, *, what: str, made_by: str) -> str:
    """``path`` must be an existing, non-empty regular file; InputError naming ``what`` it should be and the
    command that writes one (``made_by``) otherwise."""
    shown = os.fspath(path)
    if not os.path.exists(shown):
        raise _refuse(f"{what} {shown}", f"does not exist; {made_by}")
    if os.path.isdir(shown):
        raise _refuse(f"{what} {shown}", f"is a directory; give the file itself ({made_by})")
    if not os.path.isfile(shown):
        raise _refuse(f"{what} {shown}", f"is not a regular file; {made_by}")
    if os.path.getsize(shown) == 0:
        raise _refuse(f"{what} {shown}", f"is empty (0 bytes); {made_by}")
    return shown


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names, links followed; None when nothing is there."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino


def _spellings(path) -> set[str]:
    """``path`` as given and as the writers see it (absolute, '..' removed lexically, as check_output_file does)."""
    shown = os.fspath(path)
    return {shown, os.path.abspath(shown)}


def _same_file(output, given) -> str | None:
    """How the output ``output`` is the existing input ``given`` ('the same path', 'a symbolic link to it', 'a hard
    link to it'), or None when it is another file. An output that does not exist yet is the input when its path
    resolves to the input's (``new/../model.onnx``)."""
    target = _identity(os.fspath(given))
    if target is None:
        return None  # a missing input is refused by its own check
    real = os.path.realpath(given)
    for spelling in _spellings(output):
        found = _identity(spelling)
        if found == target or (found is None and os.path.realpath(spelling) == real):
            if os.path.abspath(spelling) == os.path.abspath(given):
                return "the same path"
            return "a symbolic link to it" if os.path.realpath(spelling) == real else "a hard link to it"
    return None


def _inside(folder, given) -> bool:
    """True when the existing input ``given`` is the folder ``folder`` or lies anywhere under it."""
    if _identity(os.fspath(given)) is None:
        return False
    spellings = _spellings(folder)
    ids = {_identity(s) for s in spellings} - {None}
    reals = {os.path.realpath(s) for s in spellings}
    path = os.path.realpath(given)
    while True:
        if path in reals or _identity(path) in ids:
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def check_not_an_input(
    inputs: Iterable[tuple[str, object]],
    *,
    files: Iterable[tuple[str, object]] = (),
    folders: Iterable[tuple[str, object]] = (),
) -> None:
    """InputError (one line, nothing touched) when a job's output would overwrite one of its inputs, so that no
    command can destroy what it reads (docs/design.md §1, "Errors").

    ``inputs``: (what it is, path) of every file or folder the job reads. ``files``: (parameter, path) of the files
    it writes: refused when one is the same file as an input: the same path, a symbolic link or a hard link to it
    (device and inode compared), or a path not yet existing that resolves to it. ``folders``: (parameter, path) of
    the folders it writes into: refused when an input is that folder or lies under it (writing there may replace or
    remove it). Entries that are not paths (None, arrays given in place of a file) are skipped."""

    def paths(pairs):
        return [(name, path) for name, path in pairs if isinstance(path, (str, os.PathLike))]

    given = paths(inputs)
    for option, path in paths(files):
        for what, source in given:
            how = _same_file(path, source)
            if how:
                raise _refuse(
                    f"{option} {os.fspath(path)}",
                    f"is the {what} {os.fspath(source)} ({how}): writing it would destroy the input; choose another "
                    "path",
                )
    for option, path in paths(folders):
        for what, source in given:
            if _inside(path, source):
                raise _refuse(
                    f"{option} {os.fspath(path)}",
                    f"holds the {what} {os.fspath(source)}: writing into it could replace or remove the input; "
                    f"choose another folder, or move the {what} out of it",
                )
