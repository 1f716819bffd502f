"""Find, prepare, start, watch and stop a ``tritonserver`` (the one shipped in the ``nvidia-pytriton`` wheel).

The wheel carries a complete server (``pytriton/tritonserver/bin/tritonserver``) with the Python backend
(``backends/python/libtriton_python.so``) and one backend *stub* per Python version
(``python_backend_stubs/3.X/triton_python_backend_stub``). The wheel pins ``numpy<2``, so it is installed with
``pip install --no-deps nvidia-pytriton`` and only its binaries are used; the client side is ``tritonclient``
(docs/serving.md says why). Three things make it run outside PyTriton:

- the stub for the running Python is copied beside ``libtriton_python.so`` (a per-user cache folder holds that
  backend directory, so a read-only site-packages works too);
- the server, the backend and the stub find their bundled libraries (``nvidia_pytriton.libs``) and this
  interpreter's ``libpython3.X.so`` through ``LD_LIBRARY_PATH``; the stub embeds that libpython with an
  isolated ``sys.path`` (``PYTHONPATH`` is ignored), so the model's ``model.py`` adds the environment's
  site-packages itself, from a config parameter (wtconv_serving/repositories/python_backend.py);
- the server runs in its own process group, so stopping it also stops the stubs, whatever state a test left.

The repository API stays closed without any secret: the server runs with model control "none" or "poll", under
which Triton refuses every load and unload request (HTTP 503, gRPC UNAVAILABLE: "explicit model load / unload is
not allowed if polling is enabled", checked with Triton 2.51), so nobody who reaches the port can unload the model or
load one with a ``model.py`` of their own. Triton reads its options from its command line only, which every local
user can read (``ps``): a key there, as ``--http-restricted-api`` would need, is no secret (docs/serving.md,
"Listening address"). A model whose backend died is reloaded the "poll" way: the launcher touches the model's version
folder and Triton's repository poll loads it again. Under "poll" Triton would load every model of the repository, so
a server given ``load_models`` serves a private view of the repository holding only those models (symbolic links).

Our launcher refuses, with one line naming the cause, a port already in use, a repository whose configs do not
parse, and a server that exits or fails to load a model before it is ready. ``stop`` drains: the server gets
SIGTERM and finishes the requests in flight (``drain_s``) before it exits, then whatever is left of its process group
is killed, the shared-memory regions of its backend stubs are removed, and so is the temporary log folder unless the
log is kept (a failed start keeps it and names it).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from wtconv_core.errors import ConfigurationError, InputError, ServingError
from wtconv_core.files import atomic_copy
from wtconv_core.options import RECOVERIES, ServerOptions
from wtconv_libs.lookup import ENV_CACHE, user_cache_dir

log = logging.getLogger(__name__)

ENV_HOME = "WTCONV_TRITON_HOME"  # a pytriton/tritonserver folder (bin/, backends/, python_backend_stubs/)
PYTRITON_VERSION = "0.7.0"  # the wheel this project was tested with (Triton server 2.51.0)
INSTALL_HINT = (
    f"install the server binary with: pip install --no-deps nvidia-pytriton=={PYTRITON_VERSION} "
    f"(only its tritonserver is used; --no-deps keeps its numpy<2 pin out of this environment), or set "
    f"{ENV_HOME} to an unpacked wheel's pytriton/tritonserver folder"
)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Triton's model control modes that keep its repository API (load, unload) closed to every client.
MODEL_CONTROLS = ("none", "poll")
POLL_S = 1  # how often a "poll" server looks for a model to reload (--repository-poll-secs)
SHM_PREFIX = "triton_python_backend_shm_region_"  # the Python backend's shared-memory regions in /dev/shm
DRAINED = "All models are stopped"  # Triton's log line once no request waits in a queue after SIGTERM (server.cc)
FINALIZED = ": finalized"  # our model's log line once its instance has run its last batch (python_model.py)
FLUSH_S = 1.0  # then time for the endpoints to send the last answers (0.85 s seen on a busy 2-core machine)
# How long after a reload the old version has to log its unload before it counts as not unloaded (a healthy one took
# 1-2 s on a CPU, its stubs finalizing; docs/serving.md, "The soak").
UNLOAD_WAIT_S = 60.0
# How long a restart waits for the old process's ports to be free again before it gives up (the same check as a first
# start; a port another program took meanwhile is refused after this).
PORTS_FREE_WAIT_S = 30.0
# How much longer than the server's start a model whose backend died may take to come back: the watch noticing the
# dead stub, the drain of the live instances and the ports' check come before a restart's wait for readiness.
RECOVERY_EXTRA_S = 60.0
# A read of /proc this slow is named on a restart's times (RestartTimes, SlowRead): a scan of /proc takes milliseconds.
SLOW_READ_S = 1.0
RESTART_LINE = "wtconv-trt: restarting tritonserver"  # written into the log between the old process's and the new's


@dataclass(frozen=True)
class ServerInstall:
    """Where the server's files are."""

    root: Path  # .../pytriton/tritonserver
    binary: Path  # root/bin/tritonserver
    library_dirs: tuple  # bundled shared libraries (nvidia_pytriton.libs)

    def stub_for(self, version=None) -> Path:
        major, minor = (version or sys.version_info)[:2]
        return self.root / "python_backend_stubs" / f"{major}.{minor}" / "triton_python_backend_stub"


def find_server() -> ServerInstall:
    """The tritonserver of an installed ``nvidia-pytriton`` wheel (or of ``$WTCONV_TRITON_HOME``)."""
    root = None
    if os.environ.get(ENV_HOME):
        root = Path(os.environ[ENV_HOME]).expanduser()
        if not (root / "bin" / "tritonserver").is_file():
            raise ConfigurationError(
                f"{ENV_HOME}={root} has no bin/tritonserver; point it at the "
                f"pytriton/tritonserver folder of an unpacked nvidia-pytriton wheel"
            )
    else:
        import importlib.util

        spec = importlib.util.find_spec("pytriton")  # finds the package without importing it (numpy<2 code)
        if spec is not None and spec.submodule_search_locations:
            root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
        if root is None or not (root / "bin" / "tritonserver").is_file():
            raise ConfigurationError(f"no tritonserver found; {INSTALL_HINT}")
    libs = tuple(p for p in (root.parent.parent / "nvidia_pytriton.libs", root / "lib") if p.is_dir())
    return ServerInstall(root.resolve(), (root / "bin" / "tritonserver").resolve(), libs)


def python_library_dir() -> str | None:
    """The folder of this interpreter's shared libpython, which the backend stub loads (None: not shared)."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return None
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    return libdir if libdir and (Path(libdir) / soname).exists() else None


def cache_dir() -> Path:
    """Where the prepared backend directories go: under the package's one per-user cache (wtconv_libs.lookup,
    ``$WTCONV_TRT_CACHE``)."""
    return user_cache_dir() / "triton"


def prepare_backends(install: ServerInstall) -> Path:
    """A backend directory whose python/ holds the backend library, its utilities and the stub for this Python
    (what PyTriton does inside its own package), under the per-user cache. Returns the backend directory."""
    stub = install.stub_for()
    if not stub.is_file():
        have = sorted(p.name for p in (install.root / "python_backend_stubs").iterdir())
        raise ConfigurationError(
            f"the server has no Python backend stub for Python "
            f"{sys.version_info[0]}.{sys.version_info[1]} (it has {', '.join(have)}); "
            f"run the server from one of those Python versions"
        )
    source = install.root / "backends" / "python"
    key = f"{install.binary.stat().st_size}-{sys.version_info[0]}.{sys.version_info[1]}"
    target_root = cache_dir() / f"triton-backends-{key}"
    target = target_root / "python"
    files = [
        (source / "libtriton_python.so", target / "libtriton_python.so"),
        (source / "triton_python_backend_utils.py", target / "triton_python_backend_utils.py"),
        (stub, target / "triton_python_backend_stub"),
    ]
    if all(dst.is_file() and dst.stat().st_size == src.stat().st_size for src, dst in files):
        return target_root
    try:
        target.mkdir(parents=True, exist_ok=True)
        for src, dst in files:
            atomic_copy(src, dst, mode=0o755)
    except OSError as error:
        raise ConfigurationError(
            f"cannot prepare the Triton Python backend in {target_root}: {error}; set {ENV_CACHE} to a writable folder"
        ) from error
    return target_root


def server_environment(install: ServerInstall) -> dict:
    env = dict(os.environ)
    dirs = [d for d in [python_library_dir(), *map(str, install.library_dirs)] if d]
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs)
    env.pop("PYTHONHOME", None)
    return env


def listen_addresses(host: str) -> list[tuple]:
    """The (family, socket address) pairs a server told to listen on ``host`` would bind; ServingError (parameter
    "host") when ``host`` is neither an IP address nor a name this machine resolves."""
    try:
        # An empty host is every interface, as 0.0.0.0 (getaddrinfo's passive wildcard for None).
        found = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ServingError(
            f"host {host}: not an IP address or a name this machine resolves ({reason}); give an address of this "
            "machine: 127.0.0.1 (this machine only, the default) or 0.0.0.0 (every interface)",
            parameter="host",
        ) from None
    return [(family, address) for family, _, _, _, address in found]


def check_host(host: str) -> None:
    """ServingError (parameter "host") unless the server can listen on ``host``: a resolvable name or an IP address
    that belongs to this machine (a socket binds to it)."""
    reasons = []
    for family, address in listen_addresses(host):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((address[0], 0, *address[2:]))
                return
            except OSError as error:
                if error.errno == errno.EADDRNOTAVAIL:
                    reasons.append(f"{address[0]} is not an address of this machine")
                else:
                    reasons.append(f"{address[0]}: {error.strerror or error}")
    raise ServingError(
        f"host {host}: the server cannot listen there ({'; '.join(dict.fromkeys(reasons))}); give an address of "
        "this machine: 127.0.0.1 (this machine only, the default) or 0.0.0.0 (every interface)",
        parameter="host",
    )


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on ``port`` of ``host`` (an address check_host accepted); any other
    reason the port cannot be bound raises ServingError with the system's words."""
    family, address = listen_addresses(host)[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address[0], port, *address[2:]))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise ServingError(
                f"port {port} on {host}: cannot listen there ({error.strerror or error}); choose another port"
                + (" (ports below 1024 need administrator rights)" if error.errno == errno.EACCES else ""),
            ) from None
    return False


def check_ports(host: str, ports: dict) -> None:
    """The host must be an address of this machine (check_host), and the ports given ({"http": 8080, "grpc": 8081,
    "metrics": 8082}, say; 0: any free one, chosen later; None: that endpoint is off) must differ from each other and
    be free on ``host``; ServingError naming the options otherwise."""
    given = {what: port for what, port in ports.items() if port}
    for what, port in given.items():
        same = [other for other, p in given.items() if p == port and other != what]
        if same:
            raise ServingError(f"{what}_port={port} and {same[0]}_port={port}: each endpoint needs its own port")
    check_host(host)
    for what, port in given.items():
        if port_in_use(host, port):
            raise ServingError(
                f"port {port} on {host} ({what}) is already in use: stop what listens "
                f"there or choose another with {what}_port=PORT"
            )


def visible_gpus() -> int:
    """How many CUDA GPUs a server started from this process sees (it inherits CUDA_VISIBLE_DEVICES): the CUDA
    driver's count, 0 without a driver or a GPU."""
    from wtconv_libs.build import cuda_gpu_count

    return cuda_gpu_count()


def check_visible_gpus(gpus) -> int:
    """InputError (parameter "gpus") naming the first of ``gpus`` (GPU indices, as Triton's instance group numbers
    them: among the GPUs the server sees) that a server started here would not see; returns how many it sees."""
    count = visible_gpus()
    for gpu in gpus or ():
        if gpu >= count:
            seen = f"{count} are visible: 0 to {count - 1}" if count else "no GPU is visible"
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            note = f", CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
            raise InputError(
                f"gpus {','.join(map(str, gpus))}: GPU {gpu} is not one the server would see here ({seen}{note}); "
                "give visible GPUs, or leave gpus out to use every visible GPU",
                parameter="gpus",
            )
    return count


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


_ERROR_LINE = re.compile(r"^E\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] (.*)$")
_LOADING = re.compile(r'"loading: ([^:"]+):\d+"')
# The line our Python backend logs once its runtime is loaded (wtconv_serving/runners/python_model.py).
_RUNTIME_LOADED = re.compile(r'"([^":]+): runtime ([\w-]+),.*\(loaded in ([\d.]+) s\)"')
_LOADED = re.compile(r"successfully loaded '([^']+)'")
# Triton's line once a version of a model is unloaded: written when the version's model object is destroyed, which is
# only after every request and instance holding it has let it go (Triton 2.51, model_lifecycle.cc; docs/serving.md,
# "The soak"). After a stub that died with requests in flight the line never comes: the Python backend does not delete
# those requests' response factories, each holding a reference to the version (its python_be.cc, ProcessRequests
# returning when the stub's answer fails; docs/serving.md, "The soak"), so only a restart of the server frees it.
# Its log lines begin with the level, the date and the time of day: I1206 08:23:11.051506.
_UNLOADED = "successfully unloaded '{model}' version "
_LINE_TIME = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d(?:\.\d+)?) ")


def _time_of_day(line: str) -> float | None:
    match = _LINE_TIME.match(line)
    return None if match is None else int(match[1]) * 3600 + int(match[2]) * 60 + float(match[3])


def _seconds_after(earlier: float, later: float) -> float:
    """Seconds from one time of day to a later one (seconds since midnight, as _time_of_day gives), across midnight
    when the day turned in between; never below 0 (a "later" line timed a moment before the earlier one)."""
    after = later - earlier
    if after < -43200:  # the day turned in between
        after += 86400
    return round(max(0.0, after), 2)


def old_version_unload(log_since_reload: str, model: str) -> tuple[bool, float | None]:
    """Whether the server log written since a reload of ``model`` began says a version of it was unloaded, and how
    many seconds after the reload's "successfully loaded" line (by the lines' own times; 0 when the unload came first,
    None when either line has no time). The reload loads the new version beside the old one and then lets the old one
    go, so an unload line after the reload began is the old version's."""
    loaded_line = unloaded_line = None
    unloaded = _UNLOADED.format(model=model)
    loaded = f"successfully loaded '{model}'"
    for line in log_since_reload.splitlines():
        if loaded_line is None and loaded in line:
            loaded_line = line
        if unloaded_line is None and unloaded in line:
            unloaded_line = line
    if unloaded_line is None:
        return False, None
    loaded_at, unloaded_at = _time_of_day(loaded_line or ""), _time_of_day(unloaded_line)
    if loaded_at is None or unloaded_at is None:
        return True, None
    return True, _seconds_after(loaded_at, unloaded_at)


@dataclass
class SlowRead:
    """The slowest read of a /proc/<pid>/stat in group_states' scans: how long it took, whose it was (its pid, and
    its name and state once read). A restart's wait for the old process group is bounded between scans, not within a
    read, and a read of a process the kernel is tearing down may block until the teardown ends (docs/serving.md,
    "The soak"): this says which process held it."""

    seconds: float = 0.0
    pid: int | None = None
    name: str = ""
    state: str = ""

    def note(self, seconds: float, pid: int, stat: str | None) -> None:
        if seconds <= self.seconds:
            return
        self.seconds, self.pid = seconds, pid
        self.name, self.state = "", ""
        if stat and "(" in stat and ")" in stat:  # "pid (name) state ppid pgrp ...": the name may hold spaces
            name, rest = stat[stat.index("(") + 1 :].rsplit(")", 1)
            self.name, self.state = name, (rest.split() or [""])[0]

    def words(self) -> str:
        whose = f"pid {self.pid}" + (f" ({self.name}, state {self.state})" if self.name else "")
        return f"the slowest read of /proc: {whose}'s stat, {self.seconds:.1f} s"


@dataclass
class RestartTimes:
    """Where the time of one restart went, in seconds (TritonServer.restart; docs/serving.md, "The soak"): the old
    process's drain (SIGTERM until its live instances had finished, or the grace ran out), its kill (SIGKILL of its
    process group until the server was reaped), the wait for the rest of the group to go (``still_ending``: the
    members left when that wait gave up, as "pid (state)": "D" is a process the kernel is still tearing down, e.g. the
    driver releasing its GPU context; ``slowest_read``: that wait's slowest read of /proc, named in ``words`` when it
    took SLOW_READ_S or more), the wait for the ports; then, from the new process's launch, its first log line
    with a time (Triton's first line comes once CUDA has started: its pinned memory pool) and its readiness."""

    drain_s: float = 0.0
    kill_s: float = 0.0
    gone_s: float = 0.0
    still_ending: tuple = ()
    slowest_read: SlowRead = field(default_factory=SlowRead)
    ports_s: float = 0.0
    launched_at: float = 0.0  # time.time() of the launch
    first_line_s: float | None = None
    ready_s: float | None = None

    def note_first_line(self, log_text: str) -> None:
        """first_line_s from the new process's log (its output only): the first line with a time of day, against
        the launch's local time of day (Triton writes local time)."""
        launched = time.localtime(self.launched_at)
        launched_of_day = launched.tm_hour * 3600 + launched.tm_min * 60 + launched.tm_sec
        launched_of_day += self.launched_at % 1
        for line in log_text.splitlines():
            seen = _time_of_day(line)
            if seen is not None:
                self.first_line_s = _seconds_after(launched_of_day, seen)
                return

    def words(self) -> str:
        """The times in a phrase for a log line or a report."""
        parts = [f"drain {self.drain_s:.1f} s", f"kill {self.kill_s:.1f} s", f"group gone {self.gone_s:.1f} s"]
        if self.still_ending:
            parts.append(f"still ending then: {', '.join(self.still_ending)}")
        if self.slowest_read.seconds >= SLOW_READ_S:
            parts.append(self.slowest_read.words())
        parts.append(f"ports {self.ports_s:.1f} s")
        if self.first_line_s is not None:
            parts.append(f"the new process's first log line {self.first_line_s:.1f} s after its launch")
        if self.ready_s is not None:
            parts.append(f"ready {self.ready_s:.1f} s after its launch")
        return ", ".join(parts)

    def as_dict(self) -> dict:
        return {
            "drain_s": round(self.drain_s, 2),
            "kill_s": round(self.kill_s, 2),
            "gone_s": round(self.gone_s, 2),
            "still_ending": list(self.still_ending),
            "slowest_read": {
                "seconds": round(self.slowest_read.seconds, 3),
                "pid": self.slowest_read.pid,
                "name": self.slowest_read.name,
                "state": self.slowest_read.state,
            },
            "ports_s": round(self.ports_s, 2),
            "launched_at": time.strftime("%H:%M:%S", time.localtime(self.launched_at)),
            "first_line_s": self.first_line_s,
            "ready_s": None if self.ready_s is None else round(self.ready_s, 2),
            "words": self.words(),
        }


@dataclass
class Recovery:
    """One recovery of a model whose backend stub died (TritonServer.watch): ``way`` "restart" (the server process
    started again, ``server_pid`` the new one) or "reload" (the model loaded again beside its old version). Whether the
    old version is gone: after a restart True, its memory having gone with the old process; after a reload True once
    Triton's log says it unloaded it, False when it has not said so ``unload_wait_s`` after the reload, None until then.
    None too for a recovery that failed."""

    model: str
    killed_pid: int
    reload_s: float  # from noticing the dead stub to the model serving again (reloaded, or the server ready again)
    error: str | None  # why the recovery failed, None when it did not
    log_offset: int  # the server log's size in bytes when the recovery began
    reloaded_at: float  # time.monotonic() when the recovery ended
    old_version_unloaded: bool | None = None
    unloaded_after_s: float | None = None  # from the reload's "successfully loaded" line to the unload line
    way: str = "reload"  # one of RECOVERIES
    server_pid: int | None = None  # the server process serving the model afterwards
    restart_times: RestartTimes | None = None  # where a restart's time went

    @property
    def server_restarted(self) -> bool:
        return self.way == "restart" and self.error is None

    def as_dict(self) -> dict:
        return {
            "model": self.model,
            "killed_pid": self.killed_pid,
            "recovered_by": self.way,
            "server_pid": self.server_pid,
            "reload_s": round(self.reload_s, 2),
            "error": self.error,
            "old_version_unloaded": self.old_version_unloaded,
            "old_version_unloaded_after_s": self.unloaded_after_s,
            "restart_times": None if self.restart_times is None else self.restart_times.as_dict(),
        }


def loading_phase(log_text: str) -> str:
    """What a starting server is busy with, read from its log: starting, loading a model, warming it up (its
    runtime loaded, the config's warm-up requests running), or models loaded (the endpoints starting)."""
    loading = _LOADING.findall(log_text)
    loaded = set(_LOADED.findall(log_text))
    runtimes = {m[0]: m for m in _RUNTIME_LOADED.findall(log_text)}
    waiting = [name for name in dict.fromkeys(loading) if name not in loaded]
    if not loading:
        return "starting"
    if not waiting:
        return "models loaded, starting the endpoints"
    name = waiting[0]
    if name in runtimes:
        _, runtime, seconds = runtimes[name]
        return f"warming up '{name}' (runtime {runtime}, loaded in {seconds} s; the config's warm-up requests)"
    return f"loading '{name}' (its runtime and model files)"


def first_error(log_text: str) -> str | None:
    """The first error Triton logged (its 'E' lines; a model's "failed to load" line first), as one line, or its
    last 'error:' line."""
    found = []
    for line in log_text.splitlines():
        match = _ERROR_LINE.match(line)
        if match and "CudaDriverHelper" not in line and "NVML" not in line:
            found.append(match.group(1).strip().strip('"').replace("\\n", " ").split("At:")[0].strip())
    for message in found:
        if message.startswith("failed to load"):
            return message
    if found:
        return found[0]
    for line in reversed(log_text.splitlines()):
        if line.startswith("error:"):
            return line[len("error:") :].strip()
    return None


class TritonServer:
    """One tritonserver process serving a model repository.

        with TritonServer(repo, http_port=0, grpc_port=0) as server:   # 0: pick free ports
            server.http_url, server.grpc_url

    ``start`` checks the ports and the repository's configs first, then waits for ``/v2/health/ready``; any
    failure raises ServingError with one line (the server's own first error when it logged one). ``stop`` drains and
    cleans up (the module docstring). ``metrics_port``: 0 picks a free port, None turns the metrics endpoint off.
    ``log_file``: kept; without one the log goes to a temporary folder made at start and removed by stop, unless the
    server failed. ``drain_s``: how long the server may finish the requests in flight when stopped.
    ``model_control``: "none" or "poll" (``watch`` needs "poll"); either keeps the repository API closed (the
    module docstring). ``load_models``: the repository's models to serve (default: all of them). ``environment``:
    variables added to the server's environment, which its backend stubs inherit (e.g. an MPS daemon's pipe folder,
    wtconv_serving.server.mps).
    """

    def __init__(
        self,
        repository,
        *,
        host: str = "127.0.0.1",
        http_port: int = ServerOptions.http_port,
        grpc_port: int = ServerOptions.grpc_port,
        metrics_port: int | None = None,
        log_file=None,
        model_control: str = "none",
        load_models=(),
        extra_args=(),
        environment: dict | None = None,
        install: ServerInstall | None = None,
        drain_s: float = 10.0,
    ):
        self.repository = Path(repository).resolve()
        self.host = host
        self.ports = {"http": int(http_port), "grpc": int(grpc_port), "metrics": metrics_port}
        self.log_file = Path(log_file) if log_file else None
        self.log_dir: Path | None = None  # the temporary folder of a log not given, made by start
        if model_control not in MODEL_CONTROLS:
            raise ValueError(
                f"model_control {model_control!r}: expected one of {', '.join(MODEL_CONTROLS)} ('explicit' opens "
                "Triton's repository API to whoever reaches the port)"
            )
        self.model_control = model_control
        self.load_models = list(load_models)
        self.view: Path | None = None  # the private repository of load_models, made by start
        self.extra_args = list(extra_args)
        self.environment = dict(environment or {})
        self.install = install
        self.drain_s = float(drain_s)
        self.process: subprocess.Popen | None = None
        self.start_timeout = 120.0  # how long start waited for readiness; a restart waits as long
        self.log_start = 0  # where in the log the current process's output begins (after a restart, past the old's)
        self.recover = "restart"  # how the watch recovers a model whose backend died (RECOVERIES)
        self.recoveries: list[Recovery] = []  # the watch's recoveries of models whose backend died
        self.restart_times: RestartTimes | None = None  # where the last restart's time went
        self.unload_wait_s = UNLOAD_WAIT_S  # how long after a reload the old version may take to unload
        self.shm_regions: set = set()  # names in /dev/shm of this server's backend stubs
        self.ready = False  # it answered /v2/health/ready: stop drains its requests in flight
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._restarting = threading.Event()  # the watch is replacing the process: its end is no exit of the server
        self._lifecycle = threading.Lock()  # a restart starts no process once stop has begun

    @property
    def http_url(self) -> str:
        return f"{self._client_host()}:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host()}:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus metrics endpoint (None when off)."""
        port = self.ports["metrics"]
        return None if port is None else f"http://{self._client_host()}:{port}/metrics"

    def _client_host(self) -> str:
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    def command(self, backends: Path) -> list:
        """tritonserver's command line: nothing in it is secret (every local user can read it)."""
        cmd = [
            str(self.install.binary),
            f"--model-repository={self.view or self.repository}",
            f"--backend-directory={backends}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--http-port={self.ports['http']}",
            f"--grpc-port={self.ports['grpc']}",
            f"--model-control-mode={self.model_control}",
            *([f"--repository-poll-secs={POLL_S}"] if self.model_control == "poll" else []),
            f"--exit-timeout-secs={max(1, round(self.drain_s))}",
            "--log-verbose=0",
            # No auto-complete: it starts a short-lived stub per model, which the stub watch would take for a
            # crash; our configs are complete.
            "--disable-auto-complete-config",
        ]
        if self.ports["metrics"] is not None:
            cmd += [f"--metrics-address={self.host}", f"--metrics-port={self.ports['metrics']}"]
        else:
            cmd.append("--allow-metrics=false")
        return cmd + self.extra_args

    def _make_view(self) -> None:
        """The private repository of load_models: a folder only this user can open, with a link per model."""
        if not self.load_models:
            return
        self.view = Path(tempfile.mkdtemp(prefix="tritonserver-repository-"))
        for name in self.load_models:
            (self.view / name).symlink_to(self.repository / name, target_is_directory=True)

    def start(self, timeout: float = 120.0) -> TritonServer:
        self.start_timeout = timeout
        from wtconv_serving.repositories.repository import check_repository

        served = check_repository(self.repository)
        missing = [name for name in self.load_models if name not in served]
        if missing:
            raise ServingError(f"model repository {self.repository} has no model {', '.join(map(repr, missing))}")
        self.install = self.install or find_server()
        backends = prepare_backends(self.install)
        check_ports(self.host, self.ports)
        taken = {p for p in self.ports.values() if p}
        for what, port in self.ports.items():
            if port == 0:
                while port == 0 or port in taken:  # a free port, not one given to another endpoint
                    port = free_port(self._client_host())
                self.ports[what] = port
                taken.add(port)
        if self.log_file is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="tritonserver-"))
            self.log_file = self.log_dir / "server.log"
        try:
            self._make_view()
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            self._launch(backends, "wb")
            self.wait_ready(timeout)
        except ServingError:
            self.stop(keep_log=True)  # the message names the log
            raise
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, backends: Path, mode: str) -> None:
        """Start the tritonserver process in its own process group, its output into the log: a new one (``mode``
        "wb") or, for a restart, after what is there ("ab"; log_start marks where the new process's output begins)."""
        self.log_start = self.log_size() if mode == "ab" else 0
        log.debug("starting %s", " ".join(self.command(backends)))
        with open(self.log_file, mode) as out:
            self.process = subprocess.Popen(
                self.command(backends),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**server_environment(self.install), **self.environment},
                start_new_session=True,
            )

    def restart(self, timeout: float | None = None, why: str = "") -> None:
        """Stop the server process and start it again on the same host, ports, repository and log (continued, after a
        line saying so and ``why``), and wait until it is ready. The watch's recovery from a backend stub that died
        with requests in flight: the Python backend then never lets the model's old version go, and only the end of
        the process frees what it holds (docs/serving.md, "The soak"). What the live instances still have in flight
        is drained first, as stop drains; the other requests in flight fail, and the ports stay closed until the
        models have loaded and warmed up again. The regions the stubs leave in /dev/shm stay tracked for stop.
        ServingError when the server does not start again within ``timeout`` seconds (default: the first start's), or
        stop came first."""
        self._restarting.set()
        times = self.restart_times = RestartTimes()
        lap = _Laps()
        try:
            old = self.process
            self.note_shm_regions()
            if old.poll() is None and self.ready:
                self._drain(self.drain_s + 5)
            self.ready = False
            times.drain_s = lap()
            _kill_group(old, wait_gone=False)
            times.kill_s = lap()
            left = _wait_gone(old.pid, slowest=times.slowest_read)
            times.gone_s = lap()
            times.still_ending = tuple(f"{pid} ({state})" for pid, state in left.items())
            with self._lifecycle:
                if self._watch_stop.is_set():
                    raise ServingError("the server was stopped during its restart")
                self._wait_ports_free()
                times.ports_s = lap()
                times.launched_at = time.time()
                with open(self.log_file, "a") as out:
                    # the local time, as Triton's own lines give it: how long the new process takes to say its
                    # first line (CUDA's start) shows against it
                    now = time.strftime("%H:%M:%S", time.localtime(times.launched_at))
                    out.write(
                        f"{RESTART_LINE} at {now} (pid {old.pid} ended{': ' + why if why else ''}; {times.words()})\n"
                    )
                self._launch(prepare_backends(self.install), "ab")
            self.wait_ready(self.start_timeout if timeout is None else timeout)
            times.ready_s = time.time() - times.launched_at
        finally:
            if times.launched_at:
                times.note_first_line(self.log_text(self.log_start))
            self._restarting.clear()

    def _wait_ports_free(self, wait_s: float = PORTS_FREE_WAIT_S) -> None:
        """check_ports, the check of a first start, until it passes or ``wait_s`` has passed (then its ServingError):
        the old process's ports are free once it has gone (their connections' TIME_WAIT does not hold them: the
        check, as Triton, binds with SO_REUSEADDR), but a client's connection may hold one a moment."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                check_ports(self.host, self.ports)
                return
            except ServingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    @property
    def recovery_wait_s(self) -> float:
        """How long a model whose backend died may take to come back (watch): as long as the server's start may take,
        which a restart waits again, and RECOVERY_EXTRA_S more. What the soak and the load test's check wait for."""
        return self.start_timeout + RECOVERY_EXTRA_S

    @property
    def restarting(self) -> bool:
        """Whether the watch is restarting the server now (restart)."""
        return self._restarting.is_set()

    def exit_status(self) -> int | None:
        """The server's exit status once it has exited by itself; None while it runs or the watch restarts it."""
        if self.process is None or self._restarting.is_set():
            return None
        return self.process.poll()

    def log_text(self, since: int = 0, until: int | None = None) -> str:
        """The server's log, from byte ``since`` on, up to byte ``until`` (sizes log_size returned; None: its end)."""
        try:
            with open(self.log_file, "rb") as file:
                file.seek(since)
                return file.read(-1 if until is None else max(0, until - since)).decode(errors="replace")
        except (OSError, TypeError):  # TypeError: not started, no log file yet
            return ""

    def log_size(self) -> int:
        try:
            return self.log_file.stat().st_size
        except (OSError, AttributeError):
            return 0

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float, progress_s: float = 10.0) -> None:
        """Wait for /v2/health/ready; every ``progress_s`` seconds of waiting, log (INFO) what the server is doing,
        read from its log (loading_phase): a model on a slow runtime loads and warms up for tens of seconds."""
        start = time.monotonic()
        deadline, next_note = start + timeout, start + progress_s
        while time.monotonic() < deadline:
            self.note_shm_regions()
            if self.process.poll() is not None:
                cause = first_error(self.log_text(self.log_start)) or f"exit status {self.process.returncode}"
                raise ServingError(f"tritonserver stopped before it was ready: {cause} (log: {self.log_file})")
            if self.is_ready():
                self.ready = True
                return
            if time.monotonic() >= next_note:
                phase = loading_phase(self.log_text(self.log_start))
                log.info("tritonserver: %s (%.0f s)", phase, time.monotonic() - start)
                next_note += progress_s
            time.sleep(0.2)
        cause = first_error(self.log_text(self.log_start))
        raise ServingError(
            f"tritonserver was not ready within {timeout:.0f} s"
            + (f": {cause}" if cause else "")
            + f" (log: {self.log_file})"
        )

    def stub_pids(self) -> list:
        """Process ids of this server's Python backend stubs (children of the server process)."""
        return sorted(self.stubs())

    def stubs(self) -> dict:
        """{pid: model name} of this server's Python backend stubs (children of the server process; the stub's
        command line ends with the instance name, <model>_<group>_<index>)."""
        return {pid: model for pid, (model, _) in self._stub_processes().items()}

    def _stub_processes(self) -> dict:
        """{pid: (model name, shared-memory region)} of this server's backend stubs: their command line is the stub,
        the model file, the region's name, ..., the instance name <model>_<group>_<index>."""
        if self.process is None:
            return {}
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid != self.process.pid:
                    continue
                argv = (entry / "cmdline").read_text().split("\0")
                if argv and argv[0].endswith("triton_python_backend_stub"):
                    instance = next((a for a in argv[8:9] if a), "")
                    model = instance.rsplit("_", 2)[0] if instance.count("_") >= 2 else instance
                    region = next((a for a in argv[2:3] if a.startswith(SHM_PREFIX)), None)
                    found[int(entry.name)] = (model, region)
            except (OSError, ValueError, IndexError):
                continue
        return found

    def note_shm_regions(self) -> None:
        """Remember the shared-memory regions of this server's stubs (their command lines) and those the server maps,
        so that stop removes any the processes leave behind (a server or stub killed does not remove its own)."""
        regions = {region for _, region in self._stub_processes().values() if region}
        if self.process is not None:
            try:
                with open(f"/proc/{self.process.pid}/maps") as maps:
                    for line in maps:
                        name = line.rsplit("/", 1)[-1].strip()
                        if "/dev/shm/" in line and name.startswith(SHM_PREFIX):
                            regions.add(name)
            except OSError:
                pass
        self.shm_regions |= regions

    def reload(self, model: str, timeout: float = 300.0) -> None:
        """Load ``model`` again (needs model_control "poll"): its version folders get a new modification time, which
        Triton's repository poll takes for a new version of the model, so it starts new instances (new backend
        stubs, warmed up) and then unloads the old ones; returns once the server's log says the model loaded and the
        model is ready. Requests until then are answered with an error. ServingError when the load fails or takes
        longer than ``timeout`` seconds.

        The folders, not model.py: touching a Python file makes the stub write its bytecode anew when it imports it,
        a change the next poll would take for another new version."""
        if self.model_control != "poll":
            raise ServingError("reloading a model needs model_control='poll'")
        loaded = f"successfully loaded '{model}'"
        failed = f"failed to load '{model}'"
        text = self.log_text()
        before = (text.count(loaded), text.count(failed))
        folder = self.repository / model
        versions = [v for v in folder.iterdir() if v.is_dir() and v.name.isdigit()] if folder.is_dir() else []
        if not versions:
            raise ServingError(f"could not reload model {model}: {folder} holds no version folder")
        for version in versions:
            os.utime(version)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if text.count(failed) > before[1]:
                raise ServingError(f"could not reload model {model}: {first_error(text) or failed}")
            if text.count(loaded) > before[0] and self._model_ready(model):
                return
            if self.process is None or self.process.poll() is not None:
                raise ServingError(f"could not reload model {model}: the server exited")
            time.sleep(0.1)
        raise ServingError(f"could not reload model {model}: not loaded within {timeout:.0f} s")

    def _model_ready(self, model: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/models/{model}/ready", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def watch(self, interval: float = 0.5, recover: str = "restart") -> TritonServer:
        """Start a thread that notices a backend stub that died (killed, crashed, out of memory) and brings its model
        back: ``recover`` "restart" restarts the server (restart; the default, since after a stub that died with
        requests in flight Triton never frees the model's old version), "reload" loads the model again beside its old
        version (reload); each recovery is logged and kept in ``recoveries`` (a Recovery), where after a reload the
        thread then records whether Triton unloaded the old version (follow_unloads). docs/serving.md, "The soak"."""
        if self.model_control != "poll":
            raise ServingError("recovering a model whose backend died needs model_control='poll'")
        if recover not in RECOVERIES:
            raise ValueError(f"recover {recover!r}: expected one of {', '.join(RECOVERIES)}")
        self.recover = recover
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._watch, args=(interval,), name="triton-stub-watch", daemon=True
            )
            self._watcher.start()
        return self

    def _watch(self, interval: float) -> None:
        """The watch thread. A stub that ends is taken for a crash only when its model's log has no more finalize
        lines than its stubs that ended before without a crash: Triton stops stubs itself when it unloads or reloads
        a model (under "poll", whenever a file of the model changes), and each of those finalizes its model first
        (python_model.finalize logs FINALIZED), which a stub killed or crashed never does. After a restart the count
        begins again, with the new process's stubs and log."""
        known = self.stubs()
        ended: dict[str, int] = {}  # per model: its stubs seen to end
        crashed: dict[str, int] = {}  # per model: those of them taken for crashes
        while not self._watch_stop.wait(interval):
            if self.process is None or self.process.poll() is not None:
                return
            self.note_shm_regions()
            self.follow_unloads()
            now = self.stubs()
            gone = {pid: model for pid, model in known.items() if pid not in now and model}
            known = now
            for model in gone.values():
                ended[model] = ended.get(model, 0) + 1
            for model in dict.fromkeys(gone.values()):
                count = self._unfinalized(model, ended[model] - crashed.get(model, 0))
                if not count or self._watch_stop.is_set():
                    continue
                crashed[model] = crashed.get(model, 0) + count
                pid = next(p for p, m in gone.items() if m == model)
                self.recoveries.append(self._recover(model, pid))
                known = self.stubs()
                if self.recover == "restart":  # every stub ended with the old process: count anew
                    ended, crashed = {}, {}
                    break

    def _recover(self, model: str, pid: int) -> Recovery:
        """Bring back ``model``, whose stub ``pid`` died, the watch's way (restart or reload); the Recovery."""
        restart = self.recover == "restart"
        log.warning(
            "the backend stub of model %s (pid %d) died; %s",
            model,
            pid,
            "restarting the server (docs/serving.md, The soak)" if restart else "reloading the model",
        )
        start, offset = time.monotonic(), self.log_size()
        try:
            if restart:
                self.restart(why=f"the backend stub of model {model} (pid {pid}) died")
            else:
                self.reload(model)
            error = None
        except (ServingError, OSError) as failure:
            error = str(failure)
            log.error("%s failed: %s", "restarting the server" if restart else f"reloading model {model}", error)
        end = time.monotonic()
        recovery = Recovery(model, pid, end - start, error, offset, end, way=self.recover, server_pid=self.process.pid)
        if restart:
            recovery.restart_times = self.restart_times
        if recovery.server_restarted:
            recovery.old_version_unloaded = True  # it ended with the old process
            log.info(
                "tritonserver restarted (pid %d) in %.1f s: %s",
                self.process.pid,
                end - start,
                self.restart_times.words(),
            )
        return recovery

    def follow_unloads(self) -> None:
        """Record, for each reload whose old version is not known to be unloaded yet, whether the server's log since
        the reload (up to the model's next reload, whose own old version would log the same line) says it was
        (old_version_unload), or False once ``unload_wait_s`` has passed without it. The watch calls this every
        interval; it reads only the log written since such reloads."""
        for index, recovery in enumerate(self.recoveries):
            if recovery.error is not None or recovery.old_version_unloaded is not None or recovery.way != "reload":
                continue
            later = [r.log_offset for r in self.recoveries[index + 1 :] if r.model == recovery.model]
            text = self.log_text(recovery.log_offset, later[0] if later else None)
            unloaded, after_s = old_version_unload(text, recovery.model)
            if unloaded:
                recovery.old_version_unloaded, recovery.unloaded_after_s = True, after_s
                log.info("model %s: the old version was unloaded %s s after the reload", recovery.model, after_s)
            elif time.monotonic() - recovery.reloaded_at >= self.unload_wait_s:
                recovery.old_version_unloaded = False
                log.warning(
                    "model %s: the old version was not unloaded within %g s of the reload (its memory stays until "
                    "the server restarts: a stub that dies with requests in flight leaves it referenced)",
                    recovery.model,
                    self.unload_wait_s,
                )

    def _unfinalized(self, model: str, ended: int, wait_s: float = 2.0) -> int:
        """How many of ``ended`` stubs of ``model`` (those not already taken for crashes) ended without finalizing:
        the current process's finalize lines are counted until they account for all of them or ``wait_s`` has passed (a
        stub logs the line before it exits; the server may write it a moment later)."""
        finalized = re.compile(rf'"{re.escape(model)}_\d+_\d+{re.escape(FINALIZED)}"')
        deadline = time.monotonic() + wait_s
        while True:
            missing = ended - len(finalized.findall(self.log_text(self.log_start)))
            if missing <= 0 or time.monotonic() > deadline or self._watch_stop.is_set():
                return max(missing, 0)
            time.sleep(0.05)

    def stop(self, grace: float | None = None, keep_log: bool = False) -> int | None:
        """Drain and stop the server, then clean up (the module docstring); returns its exit status (None if it never
        started). A server that was ready gets SIGTERM and finishes its requests in flight (at most ``grace``
        seconds, default drain_s + 5); once its log says so, the rest of its shutdown (the backends' unloading, some
        seconds per Python model) is cut short with SIGKILL, since what it would release is released here. One never
        ready has nothing in flight and is killed at once. ``keep_log``: keep a temporary log folder (a failure's)."""
        self._watch_stop.set()
        status = None
        try:
            with self._lifecycle:  # a restart under way starts no process after this (it then fails)
                if self.process is not None:
                    self.note_shm_regions()
                    if self.process.poll() is None and self.ready:
                        self._drain(self.drain_s + 5 if grace is None else grace)
                    status = _kill_group(self.process)
            if self._watcher is not None and self._watcher is not threading.current_thread():
                self._watcher.join(10.0)  # a restart's wait for readiness ends with the process it waited for
        finally:
            for name in self.shm_regions:
                try:
                    os.unlink(f"/dev/shm/{name}")
                except OSError:
                    pass
            if self.log_dir is not None and not keep_log:
                shutil.rmtree(self.log_dir, ignore_errors=True)
            if self.view is not None:
                shutil.rmtree(self.view, ignore_errors=True)  # the links, not what they point to
                self.view = None
        return status

    def _drain(self, grace: float) -> None:
        """SIGTERM, then wait, at most ``grace`` seconds, until the server has finished its requests in flight: its
        log says the queues are empty (DRAINED; Triton does not count a batch already executing) and every backend
        stub has finalized its model, which the backend does only after the instance's last batch (FINALIZED), and
        the endpoints have had FLUSH_S to send the last answers; or until it exits by itself."""
        start = len(self.log_text())
        instances = len(self._stub_processes())
        try:
            self.process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while self.process.poll() is None:
            text = self.log_text()[start:]
            if DRAINED in text and (text.count(FINALIZED) >= instances or not self._stub_processes()):
                try:
                    self.process.wait(FLUSH_S)
                except subprocess.TimeoutExpired:
                    pass
                return
            if time.monotonic() > deadline:
                log.warning("tritonserver did not finish its requests in flight within %.0f s; killing it", grace)
                return
            time.sleep(0.05)

    def __enter__(self) -> TritonServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


class _Laps:
    """A stopwatch of consecutive phases: each call returns the seconds since the previous one (or since it was
    made)."""

    def __init__(self):
        self.last = time.monotonic()

    def __call__(self) -> float:
        now = time.monotonic()
        spent, self.last = now - self.last, now
        return spent


def _kill_group(process: subprocess.Popen, wait_gone: bool = True) -> int:
    """SIGKILL the server ``process``'s process group (the server and the stubs it leaves behind), wait until none
    of them is left (unless not ``wait_gone``: the caller waits, _wait_gone), and return the server's exit status."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    status = process.wait()
    if wait_gone:
        _wait_gone(process.pid)
    return status


def _wait_gone(group: int, timeout: float = 5.0, slowest: SlowRead | None = None) -> dict:
    """Wait until no live process of process group ``group`` is left (zombies, which init reaps, do not count);
    returns those still there when ``timeout`` ran out, {pid: state} (group_states). The timeout is checked between
    scans of /proc, so a read that blocks holds the wait past it: ``slowest`` keeps the slowest read seen."""
    deadline = time.monotonic() + timeout
    while True:
        left = group_states(group, slowest)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def _read_stat(pid: str) -> str:
    return Path("/proc", pid, "stat").read_text()


def group_states(group: int, slowest: SlowRead | None = None) -> dict:
    """{pid: state letter of /proc/<pid>/stat} of the live (not zombie) processes of process group ``group``;
    ``slowest`` notes the slowest of the reads (SlowRead)."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        began, stat = time.monotonic(), None
        try:
            stat = _read_stat(entry.name)
            fields = stat.rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        finally:
            if slowest is not None:
                slowest.note(time.monotonic() - began, int(entry.name), stat)
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == group:
            members[int(entry.name)] = fields[0]
    return members


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


__all__ = [
    "Recovery",
    "RestartTimes",
    "ServerInstall",
    "TritonServer",
    "find_server",
    "prepare_backends",
    "check_host",
    "check_ports",
    "free_port",
    "port_in_use",
    "first_error",
    "loading_phase",
    "old_version_unload",
    "is_loopback",
    "INSTALL_HINT",
    "MODEL_CONTROLS",
    "PYTRITON_VERSION",
    "RECOVERIES",
]
