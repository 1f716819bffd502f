"""A private NVIDIA MPS (Multi-Process Service) control daemon for one server's processes (``serve --mps``;
docs/serving.md, "Sharing a GPU between instances: MPS").

Triton's Python backend runs each model instance in a process of its own (a backend stub), and without MPS the GPU
gives the processes' contexts turns: one context's kernels run while the others wait. Under MPS the processes are
clients of one MPS server, which holds a single context on each GPU, so their kernels run side by side.

``MpsDaemon.start`` starts ``nvidia-cuda-mps-control -d`` with its pipe and log folders in a private temporary
folder; a process is its client when ``CUDA_MPS_PIPE_DIRECTORY`` names that pipe folder as CUDA starts in it
(``environment``: what the launcher adds to tritonserver's environment, which its stubs inherit). Nothing else on the
machine is its client: processes without that variable, the load generator's included, use the GPU as before. The
control daemon starts an MPS server when its first client connects. ``clients`` asks the daemon (its
``get_server_list`` and ``get_client_list`` commands) which processes are connected: a CUDA program that cannot reach
the daemon runs without MPS and says nothing, so the launcher checks that the stubs did connect. ``stop`` tells the
daemon to quit (it shuts its server down first), waits until its processes have exited (``processes``: found by
their program and the pipe folder in their environment; killed when they outlast QUIT_WAIT_S) and removes the
folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from wtconv_core.errors import ConfigurationError, ServingError

log = logging.getLogger(__name__)

__all__ = ["CONTROL", "MpsDaemon", "find_control", "mps_of", "reachable_daemon"]

CONTROL = "nvidia-cuda-mps-control"  # the NVIDIA driver's MPS control program
# The name the kernel gives the control daemon's and its servers' processes (nvidia-cuda-mps-control and
# nvidia-cuda-mps-server, cut to 15 characters, as /proc/PID/comm holds it).
COMM = CONTROL[:15]
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"  # where a CUDA program looks for the control daemon's pipes
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"  # where a CUDA program looks without PIPE_VARIABLE: a daemon for the whole machine
START_WAIT_S = 10.0  # how long the daemon may take to open its control pipe
QUIT_WAIT_S = 30.0  # how long it may take to shut its server down and exit after "quit"
COMMAND_TIMEOUT_S = 10.0


def reachable_daemon() -> str | None:
    """Whose MPS daemon a CUDA program started from this process reaches: "environment" (one PIPE_VARIABLE names),
    "machine" (one at DEFAULT_PIPE_DIR, which every CUDA program of the machine reaches), or None."""
    if os.environ.get(PIPE_VARIABLE):
        return "environment"
    if (Path(DEFAULT_PIPE_DIR) / "control").exists():
        return "machine"
    return None


def find_control() -> str:
    """The path of nvidia-cuda-mps-control; ConfigurationError naming the fix when it is not there, or when the
    server's processes would be clients of an MPS daemon already (reachable_daemon)."""
    already = reachable_daemon()
    if already == "environment":
        raise ConfigurationError(
            f"mps: this environment already names an MPS control daemon ({PIPE_VARIABLE}="
            f"{os.environ[PIPE_VARIABLE]}), so the server's processes are its clients already; leave out mps=True, or "
            "unset the variable to give the server one of its own"
        )
    if already == "machine":
        raise ConfigurationError(
            f"mps: this machine already runs an MPS control daemon ({DEFAULT_PIPE_DIR}), whose clients every CUDA "
            "program here is, the server's processes included; leave out mps=True"
        )
    found = shutil.which(CONTROL)
    if not found:
        raise ConfigurationError(
            f"mps: {CONTROL} is not on PATH (it comes with the NVIDIA driver's utilities); install them, or leave "
            "out mps=True"
        )
    return found


def mps_of(environment: dict) -> str | None:
    """Which MPS daemon a server started with ``environment`` added to this process's has its processes as clients,
    in words for a report: its own (serve --mps), one the environment names, one at the default place, or None."""
    if environment.get(PIPE_VARIABLE):
        return "a daemon of the server's own (serve --mps)"
    already = reachable_daemon()
    if already == "environment":
        return f"the daemon the environment names ({PIPE_VARIABLE})"
    if already == "machine":
        return f"the machine's daemon ({DEFAULT_PIPE_DIR})"
    return None


class MpsDaemon:
    """One MPS control daemon of our own (the module docstring): ``start``, ``environment``, ``clients``, ``stop``.
    ``control``: the nvidia-cuda-mps-control to run (default: find_control's)."""

    def __init__(self, control: str | None = None):
        self.control = control or find_control()
        self.folder: Path | None = None

    @property
    def pipe_dir(self) -> Path:
        return self.folder / "pipe"

    @property
    def log_dir(self) -> Path:
        return self.folder / "log"

    def environment(self) -> dict:
        """The variables that make a process started with them a client of this daemon."""
        return {PIPE_VARIABLE: str(self.pipe_dir), LOG_VARIABLE: str(self.log_dir)}

    def _run(self, args: list, **keywords) -> subprocess.CompletedProcess:
        """The control program with ``args``, addressed to this daemon (its pipe folder in the environment), its
        output captured as text."""
        return subprocess.run(
            [self.control, *args], env={**os.environ, **self.environment()}, capture_output=True, text=True, **keywords
        )

    def start(self) -> MpsDaemon:
        """Start the daemon and wait until its control pipe is there; ServingError in one line (with its log's last
        line) when it exits or does not open the pipe within START_WAIT_S."""
        self.folder = Path(tempfile.mkdtemp(prefix="wtconv-mps-"))  # mode 0700: this user's processes only
        self.pipe_dir.mkdir()
        self.log_dir.mkdir()
        try:
            # -d: the daemon forks into the background and this call returns once it has.
            done = self._run(["-d"], stdin=subprocess.DEVNULL, timeout=START_WAIT_S)
            if done.returncode != 0:
                raise ServingError(f"mps: {CONTROL} -d failed: {_said(done, self.log_tail())}")
            deadline = time.monotonic() + START_WAIT_S
            while not (self.pipe_dir / "control").exists():
                if time.monotonic() > deadline:
                    raise ServingError(
                        f"mps: the MPS control daemon opened no pipe in {START_WAIT_S:g} s ({self.log_tail()})"
                    )
                time.sleep(0.05)
        except (OSError, subprocess.TimeoutExpired) as error:
            self.stop()
            raise ServingError(f"mps: cannot start {CONTROL}: {error}") from error
        except BaseException:
            self.stop()
            raise
        log.info("MPS control daemon started (pipes in %s)", self.pipe_dir)
        return self

    def command(self, line: str) -> str:
        """Send one command to the daemon; its answer. ServingError when the daemon cannot be reached."""
        try:
            done = self._run([], input=line + "\n", timeout=COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ServingError(f"mps: {CONTROL} did not answer {line!r}: {error}") from error
        if done.returncode != 0:
            raise ServingError(f"mps: {CONTROL} refused {line!r}: {_said(done, self.log_tail())}")
        return done.stdout

    def clients(self) -> set[int]:
        """The pids of the processes connected to this daemon's MPS servers (none before the first client)."""
        pids: set[int] = set()
        for server in _numbers(self.command("get_server_list")):
            pids |= _numbers(self.command(f"get_client_list {server}"))
        return pids

    def stop(self) -> None:
        """Tell the daemon to quit (it shuts its server down once the server's clients are gone: stop tritonserver
        first), wait until the daemon and its server have exited (killed after QUIT_WAIT_S), and remove the folder.
        Safe to call twice, and after a failed start."""
        if self.folder is None:
            return
        try:
            if (self.pipe_dir / "control").exists() or self.processes():
                try:
                    self.command("quit")
                except ServingError as error:
                    log.warning("%s", error)
                deadline = time.monotonic() + QUIT_WAIT_S
                while self.processes() and time.monotonic() < deadline:
                    time.sleep(0.1)
                left = self.processes()
                if left:
                    log.warning("mps: the MPS daemon did not exit within %g s of 'quit'; killing %s", QUIT_WAIT_S, left)
                    for pid in left:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def processes(self) -> list[int]:
        """The pids of this daemon's own processes: the control daemon and the MPS servers it started, told from
        any other by their name (COMM) and the pipe folder in their environment."""
        if self.folder is None:
            return []
        mark = f"{PIPE_VARIABLE}={self.pipe_dir}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (entry / "comm").read_text().strip() != COMM:
                    continue
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def log_tail(self) -> str:
        """The last line of the daemon's control log, or a note that it has none."""
        try:
            lines = (self.log_dir / "control.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return f"its log: {lines[-1]}" if lines else "it wrote no log"


def _said(done: subprocess.CompletedProcess, fallback: str) -> str:
    text = (done.stderr or done.stdout or "").strip().splitlines()
    return text[-1] if text else f"exit status {done.returncode}, {fallback}"


def _numbers(text: str) -> set[int]:
    return {int(word) for word in text.split() if word.isdigit()}
