"""Where the jobs read and write: one rule for every job, from Python and from the command line alike.

Inputs (an ONNX model, an engine): the file must exist, be a regular file and not be empty, or the message says
which of these it is not and which command makes the file.

Outputs:
checked before any work starts, so a long export or build never ends in "cannot write": the directory must exist
and accept a new file (tried for real: permission bits say nothing for root or read-only mounts), a path that
should be a file must not be a directory, and an existing output is never replaced unless the caller passed
``force=True`` (``--force``). Writers themselves write atomically (temporary file, then rename), so nothing
half-written is left.

The messages name the command-line option (``option``), so a job called from Python and the same job run from
``wtconv-trt`` fail with the same line.
"""

from __future__ import annotations

import os
import tempfile

from wtconv_core.errors import InputError


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
    written. ``option``: how the user gave the path (e.g. "-o"), named in the message."""
    shown = os.fspath(path)
    full = os.path.abspath(shown)
    directory = os.path.dirname(full)
    if os.path.isdir(full):
        raise InputError(f"{option} {shown} is a directory; give a file name inside it")
    if not os.path.isdir(directory):
        raise InputError(
            f"{option} {shown}: directory {directory} does not exist; create it first or choose another path"
        )
    reason = _probe_writable(directory)
    if reason:
        raise InputError(
            f"{option} {shown}: cannot create files in {directory} ({reason}); choose a writable directory"
        )
    if os.path.lexists(full):
        if not force:
            raise InputError(f"{option} {shown} already exists; pass --force to overwrite it, or choose another name")
        if not os.path.isfile(full):
            raise InputError(f"{option} {shown} exists and is not a regular file; remove it or choose another name")
    return full


def check_output_dir(path, *, option: str, force: bool = False, will_write=()) -> str:
    """The absolute path of a directory to write into (created later by the command if missing); InputError when
    it is a file, cannot be created or written, or (without ``force``) already holds one of ``will_write``."""
    shown = os.fspath(path)
    full = os.path.abspath(shown)
    if os.path.exists(full) and not os.path.isdir(full):
        raise InputError(f"{option} {shown} is a file, not a directory; give a directory (it is created if missing)")
    existing = full
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InputError(f"{option} {shown}: {existing} is a file, so the directory cannot be created")
    reason = _probe_writable(existing)
    if reason:
        raise InputError(f"{option} {shown}: cannot create files in {existing} ({reason}); choose a writable directory")
    if existing == full and not force:
        clashes = [name for name in will_write if os.path.lexists(os.path.join(full, name))]
        if clashes:
            raise InputError(
                f"{option} {shown} already holds {', '.join(clashes)}; pass --force to overwrite, or "
                f"choose another directory"
            )
    return full


def check_input_file(path, *, what: str, made_by: str) -> str:
    """``path`` must be an existing, non-empty regular file; InputError naming ``what`` it should be and the
    command that writes one (``made_by``) otherwise."""
    shown = os.fspath(path)
    if not os.path.exists(shown):
        raise InputError(f"{what} {shown} does not exist; {made_by}")
    if os.path.isdir(shown):
        raise InputError(f"{what} {shown} is a directory; give the file itself ({made_by})")
    if not os.path.isfile(shown):
        raise InputError(f"{what} {shown} is not a regular file; {made_by}")
    if os.path.getsize(shown) == 0:
        raise InputError(f"{what} {shown} is empty (0 bytes); {made_by}")
    return shown
