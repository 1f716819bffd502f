"""A write that fails because the disk is full (or the file too large for it) ends in one line and exit status 2 in
every command that writes (build, serve --write-only, demo and the export inside it), with nothing half-written and
earlier files kept; the demo says which of its exports it kept.

The commands run in child processes with a limit on the size of a file they may write (RLIMIT_FSIZE): the kernel
then refuses the write with EFBIG, through the same write path a full disk fails with ENOSPC, and needs no privileges
(a small tmpfs would need a mount). The real ENOSPC comes from /dev/full, met by the atomic writer in this process.

Oracles: the exit status, the last line on stderr, and the folder's files before and after.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tensorrt_rtx_skip_reason
from engine_helpers import tiny_onnx

from wtconv_core.errors import ConfigurationError
from wtconv_core.files import atomic_path, atomic_write_bytes

pytest.importorskip("onnx")


def run_limited(tmp_path: Path, max_file_bytes: int, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``wtconv-trt ARGV`` in ``tmp_path``, no file it writes larger than ``max_file_bytes``."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "wtconv_trt", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=limit,
        timeout=timeout,
    )


def files_in(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_refused(done: subprocess.CompletedProcess, command: str, what: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = lines[-1]
    assert last.startswith(f"wtconv-trt {command}: error: cannot write "), last
    assert f"{what}: File too large (EFBIG); write to a file system that takes larger files; nothing was" in last
    return last


def test_serve_write_only_that_does_not_fit(tmp_path):
    """The model's folder is not written, nor the repository folder made; the staging folder is gone."""
    onnx_path = tiny_onnx(tmp_path / "relu.onnx")
    before = files_in(tmp_path)
    done = run_limited(tmp_path, 300, "serve", onnx_path, "--repo", "repo", "--write-only")
    check_refused(done, "serve", "repo/relu")
    assert files_in(tmp_path) == before and not (tmp_path / "repo").exists()


def test_build_that_does_not_fit(tmp_path):
    """TensorRT-RTX builds the engine (a Relu: seconds), which cannot be written: one line, no engine, no manifest."""
    reason = tensorrt_rtx_skip_reason()
    if reason:
        pytest.skip(reason)
    onnx_path = tiny_onnx(tmp_path / "relu.onnx")
    before = files_in(tmp_path)
    done = run_limited(tmp_path, 2000, "build", onnx_path)
    check_refused(done, "build", "relu.fp32.engine")
    assert files_in(tmp_path) == before


@pytest.mark.slow  # the demo's comparison and three exports with their validations: about 20 s
def test_demo_says_which_exports_it_kept(tmp_path):
    """Room for the two plugin exports (0.5 and 0.4 MB) but not the standard-op one (0.7 MB): the demo ends in one
    line naming the two it wrote, which are whole (each was validated). Its third export is export's own path (the
    export job and its atomic write), so no separate export is run here: each costs a trace of the model."""
    done = run_limited(tmp_path, 600_000, "demo", timeout=600)
    last = check_refused(done, "demo", "wtconv_trt_out/default_standard_fp32.onnx")
    assert last.endswith(
        "; wtconv_trt_out keeps this run's default_plugin_fp32.onnx, default_plugin_fp16.onnx, written before this "
        "failure"
    ), last
    assert sorted(os.listdir(tmp_path / "wtconv_trt_out")) == ["default_plugin_fp16.onnx", "default_plugin_fp32.onnx"]


def test_a_full_device_is_one_line_and_leaves_the_old_file(tmp_path):
    """The kernel's own ENOSPC (writing /dev/full) inside the atomic writer: a ConfigurationError naming the file,
    the reason and what to do; no temporary file; the old file as it was."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    target = tmp_path / "engine.plan"
    target.write_bytes(b"old")
    with pytest.raises(ConfigurationError) as caught, atomic_path(target) as tmp:
        tmp.write_bytes(b"new, partly")
        with open("/dev/full", "wb") as full:
            full.write(b"more than the device takes")
            full.flush()
    assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.ENOSPC
    assert str(caught.value).startswith(f"cannot write {target}: No space left on device (ENOSPC); free space")
    assert os.listdir(tmp_path) == ["engine.plan"] and target.read_bytes() == b"old"
    atomic_write_bytes(target, b"new")  # the writer itself is unharmed
    assert target.read_bytes() == b"new"
