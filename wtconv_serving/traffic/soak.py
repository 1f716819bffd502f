"""The soak: a long load on a served model with every answer checked, its backend killed once midway, and the memory
of the server watched (docs/serving.md, "The soak").

``run_soak`` keeps ``concurrency`` requests in flight for ``duration_s`` seconds (check.run_load's duration mode:
request sizes cycled, every response compared with the expected rows of its own input, a failed request retried),
while two threads watch:

- the memory sampler, every ``sample_every_s`` seconds (and at both ends): the resident memory of the server and of
  every backend stub (VmRSS in /proc; the server's also split into what it allocated and the shared-memory regions
  it maps), the clients' connections the server holds, and the memory in use on each GPU
  (nvidia-smi; none without one);
- with ``kill_backend``, the killer: halfway through, SIGKILL to the model's backend stubs; the server's watch
  (wtconv_serving.server.launcher) restarts the server (or, asked to, reloads the model), and the requests that met
  the dead stub or the restart are retried (the load's clients register their shared-memory regions again with a
  restarted server).

The clients hold a gRPC connection each from the start, as independent clients do (check.run_load's
``own_connections``). Clients sharing one connection would move to connections of their own when the kill refuses
them (check.FRESH_CLIENT_EVERY_S), and the restarted server would serve hundreds of connections where the first
served one, and hold about 1 GB more memory in use (a GPU soak; docs/serving.md, "The soak"): a growth that comes
with the load's connections, not from the server.

What it reports besides: the errors that were not the killed backend's (how many before the kill and after the
recovery's grace, the first OTHER_ERRORS_KEPT with their times and messages, how many of each kind), how the model
was recovered (restart or reload) and whether its old version went (wtconv_serving.server.launcher.Recovery): after
a restart it went with the old process; after a reload, a version Triton did not unload keeps its memory in the
server.

What passes (SoakReport.passed): no request lost, failed or mismatched; no error but those of the killed backend's
own requests (seen between the kill and a few seconds after the recovery, the restarted server ready or the model
reloaded; or later, of a request first sent before the recovery and retried since, whose client was slow to
reconnect); the backend back when it was killed; and the memory grown by at most MEMORY_GROWTH from the first sample
at ``settle_s`` (minute 2, or a fifth of a shorter soak) to the last: the summed resident memory, its proportional
figure and the GPU's each.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = [
    "MEMORY_GROWTH",
    "SoakReport",
    "client_connections",
    "gpu_memory_mib",
    "growth_by_process_words",
    "kill_errors_end_words",
    "kill_backend",
    "other_errors_split",
    "process_memory_mib",
    "recovery_words",
    "run_soak",
]

MEMORY_GROWTH = 0.02  # the most the memory may grow from the settled sample to the last
KILL_GRACE_S = 5.0  # after the recovery, errors still count as the killed backend's for this long
SETTLE_S = 120.0  # the sample growth is measured from (a fifth of a shorter soak)
OTHER_ERRORS_KEPT = 20  # the errors not of the killed backend kept with their times and messages, the first ones
ERROR_KINDS_KEPT = 10  # the most frequent kinds of those errors counted (a message without its request number)
_REQUEST = re.compile(r"^request \d+: ")  # how check.run_load begins an error's message
MEMORY_FIELDS = {"VmRSS": "rss", "RssAnon": "anon", "RssShmem": "shmem"}  # /proc/PID/status: the sample's names
PROPORTIONAL_FIELD = "Pss"  # /proc/PID/smaps_rollup: a shared page's size divided among the processes mapping it
TCP_ESTABLISHED = "01"  # the state column of /proc/net/tcp for an established connection (include/net/tcp_states.h)


def process_memory_mib(pids) -> dict:
    """The resident memory of the processes ``pids`` together, in MiB (/proc/PID/status, proc(5)): all of it
    (``rss``, VmRSS), its anonymous part (``anon``, RssAnon: what the processes allocated, requests in flight among
    it) and its shared-memory part (``shmem``, RssShmem: here the Python backend's regions, which the server and each
    stub both map, so that they count in both); ``pss`` (smaps_rollup's Pss) is the resident memory with each shared
    page divided among the processes that map it, so that a region the server and a stub share counts once in the
    sum. A process gone meanwhile counts 0."""
    total_kib = dict.fromkeys([*MEMORY_FIELDS.values(), "pss"], 0)
    for pid in pids:
        try:
            status = Path(f"/proc/{int(pid)}/status").read_text()
            rollup = Path(f"/proc/{int(pid)}/smaps_rollup").read_text()
        except (OSError, ValueError):
            continue
        for line in status.splitlines():
            field_name, _, value = line.partition(":")
            if field_name in MEMORY_FIELDS:
                total_kib[MEMORY_FIELDS[field_name]] += int(value.split()[0])
        for line in rollup.splitlines():
            field_name, _, value = line.partition(":")
            if field_name == PROPORTIONAL_FIELD:
                total_kib["pss"] += int(value.split()[0])
    return {name: kib / 1024 for name, kib in total_kib.items()}


def client_connections(pid: int, port: int) -> int:
    """How many TCP connections the process ``pid`` holds open on its local ``port`` (the clients connected to a
    server listening there): its sockets (/proc/PID/fd) that /proc/PID/net/tcp and tcp6 list as established on that
    port; 0 when the process is gone."""
    try:
        inodes = set()
        for fd in os.scandir(f"/proc/{pid}/fd"):
            target = os.readlink(fd.path)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    except OSError:
        return 0
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:  # sl local_address rem_address st ... inode: "0100007F:1F41 ... 01 ..."
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == TCP_ESTABLISHED and fields[9] in inodes:
                count += 1
    return count


def gpu_memory_mib() -> list[float] | None:
    """The memory in use on each GPU, in MiB (nvidia-smi); None where there is no nvidia-smi or it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        values = [float(line) for line in done.stdout.split()]
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return values if done.returncode == 0 and values else None


def kill_backend(server, model: str) -> list[int]:
    """SIGKILL the backend stubs of ``model`` on ``server`` (a wtconv_serving.server.launcher.TritonServer); returns
    their pids."""
    pids = [pid for pid, name in server.stubs().items() if name == model]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    log.info("killed the backend stubs %s of model %s", pids, model)
    return pids


@dataclass
class SoakReport:
    """What a soak saw: the load's counts (a check.LoadReport), the memory samples ({"t_s", "host_rss_mib" (the server
    and its stubs; "server_rss_mib" and "stubs_rss_mib" apart; "host_pss_mib" with their shared regions counted
    once), "gpu_memory_mib"}), when the backend was killed
    and was back (seconds from the start), how (``recovered_by``: "restart" or "reload", the server's pid before and
    after) and whether the model's old version then went (the server's Recovery: True after a restart, the version
    gone with the old process; after a reload None while not known, False when Triton's log did not say so within
    unload_wait_s of the reload) and how many seconds after the reload's load."""

    load: object  # check.LoadReport
    duration_s: float
    samples: list = field(default_factory=list)
    kill_asked: bool = False
    killed_at_s: float | None = None
    recovered_at_s: float | None = None
    recovery_error: str | None = None
    recovered_by: str | None = None  # "restart" or "reload" (wtconv_serving.server.launcher.RECOVERIES)
    server_pids: tuple = ()  # the server process before the kill and after the recovery
    restart_times: dict | None = None  # where a restart's time went (launcher.RestartTimes.as_dict)
    old_version_unloaded: bool | None = None
    old_version_unloaded_after_s: float | None = None
    unload_wait_s: float | None = None

    @property
    def settle_s(self) -> float:
        return min(SETTLE_S, self.duration_s / 5)

    def _phase(self, t: float) -> str:
        """When an error seen at ``t`` s was: "before" the kill (any time without one), "kill" (the killed backend's
        own: from the kill to KILL_GRACE_S after the recovery, a restart's window included) or "after"."""
        if self.killed_at_s is None or t < self.killed_at_s:
            return "before"
        end = (self.recovered_at_s if self.recovered_at_s is not None else float("inf")) + KILL_GRACE_S
        return "kill" if t <= end else "after"

    def _errors(self) -> list:
        """[(seen at, phase, message)] of the load's errors. An error after the kill's window whose request was first
        sent before the model was back is still the killed backend's: a request in flight at the kill, or sent while
        the backend was down, retried until answered (its client may take a while to reconnect)."""
        load = self.load
        first_sent = load.error_first_sent or [None] * len(load.error_times)
        out = []
        for t, sent, error in zip(load.error_times, first_sent, load.errors, strict=True):
            phase = self._phase(t)
            if phase == "after" and sent is not None and sent < self.recovered_at_s:
                phase = "kill"
            out.append((t, phase, error))
        return out

    def kill_errors(self) -> tuple[int, int]:
        """(errors of the killed backend's own requests, any other errors): by when each was seen and when its
        request was first sent (_errors)."""
        own = sum(phase == "kill" for _, phase, _ in self._errors())
        return own, len(self.load.error_times) - own

    def last_kill_error_s(self) -> float | None:
        """When the last error of the killed backend's requests was seen: how long its clients took to be answered
        again (None without one)."""
        return max((t for t, phase, _ in self._errors() if phase == "kill"), default=None)

    def other_errors(self) -> dict:
        """The errors not of the killed backend: how many were seen before the kill (all of them without one) and
        after the recovery's grace; the first OTHER_ERRORS_KEPT as {"t_s" (the soak's clock), "error"}; and
        {message without its request number: count} of the ERROR_KINDS_KEPT most frequent."""
        others = [(t, phase, e) for t, phase, e in self._errors() if phase != "kill"]
        kinds = Counter(_REQUEST.sub("", e) for _, _, e in others)
        return {
            "before_kill": sum(phase == "before" for _, phase, _ in others),
            "after_recovery": sum(phase == "after" for _, phase, _ in others),
            "first": [{"t_s": round(t, 2), "error": e} for t, _, e in others[:OTHER_ERRORS_KEPT]],
            "kinds": dict(kinds.most_common(ERROR_KINDS_KEPT)),
        }

    def memory_growth(self) -> dict:
        """{"host": growth, "host_pss": growth or None, "gpu": growth or None}: from the first sample at settle_s or
        later to the last, as a fraction of the first (None where not sampled). "host" sums the processes' resident
        memory, where a region the server and a stub share counts in both; "host_pss" counts it once."""
        settled = [s for s in self.samples if s["t_s"] >= self.settle_s]
        growth = {"host": None, "host_pss": None, "gpu": None}
        if len(settled) < 2:
            return growth
        first, last = settled[0], settled[-1]
        if first["host_rss_mib"]:
            growth["host"] = last["host_rss_mib"] / first["host_rss_mib"] - 1
        if first.get("host_pss_mib") and last.get("host_pss_mib"):
            growth["host_pss"] = last["host_pss_mib"] / first["host_pss_mib"] - 1
        if first["gpu_memory_mib"] and last["gpu_memory_mib"]:
            growth["gpu"] = sum(last["gpu_memory_mib"]) / sum(first["gpu_memory_mib"]) - 1
        return growth

    def memory_growth_by_process(self) -> list:
        """The host memory's growth within each server process, apart from the target's figure (memory_growth),
        which compares samples across a restart: [{"server_pid", "from_s", "to_s", "host"}] from the process's first
        sample at settle_s or later (a restarted one: its first, taken once it was ready) to its last; a process with
        fewer than two such samples is left out."""
        spans: dict = {}
        for sample in self.samples:
            if sample["t_s"] >= self.settle_s and sample.get("server_pid") is not None:
                spans.setdefault(sample["server_pid"], []).append(sample)
        growth = []
        for pid, samples in spans.items():
            first, last = samples[0], samples[-1]
            if len(samples) < 2 or not first["host_rss_mib"]:
                continue
            host = last["host_rss_mib"] / first["host_rss_mib"] - 1
            growth.append({"server_pid": pid, "from_s": first["t_s"], "to_s": last["t_s"], "host": round(host, 4)})
        return growth

    @property
    def passed(self) -> bool:
        load = self.load
        _, others = self.kill_errors()
        growth = [g for g in self.memory_growth().values() if g is not None]
        recovered = not self.kill_asked or (self.recovered_at_s is not None and self.recovery_error is None)
        return (
            load.lost == load.failed == load.mismatched == others == 0
            and load.completed > 0
            and recovered
            and all(g <= MEMORY_GROWTH for g in growth)
        )

    def summary(self) -> dict:
        own, others = self.kill_errors()
        other = self.other_errors()
        growth = self.memory_growth()
        return {
            **self.load.summary(),
            "duration_s": self.duration_s,
            "backend_killed_at_s": _round(self.killed_at_s),
            "backend_back_at_s": _round(self.recovered_at_s),
            "recovery_error": self.recovery_error,
            "recovered_by": self.recovered_by,
            "server_pids": list(self.server_pids),
            "restart_times": self.restart_times,
            "errors_of_the_killed_backend": own,
            "last_error_of_the_killed_backend_s": _round(self.last_kill_error_s()),
            "other_errors": others,
            "other_errors_before_kill": other["before_kill"],
            "other_errors_after_recovery": other["after_recovery"],  # after the recovery and KILL_GRACE_S
            "first_other_errors": other["first"],
            "other_error_kinds": other["kinds"],
            "old_version_unloaded": self.old_version_unloaded,
            "old_version_unloaded_after_s": self.old_version_unloaded_after_s,
            "old_version_unload_wait_s": self.unload_wait_s,
            "memory_samples": self.samples,
            "memory_settle_s": round(self.settle_s, 1),
            "memory_growth": {k: None if v is None else round(v, 4) for k, v in growth.items()},
            "memory_growth_by_process": self.memory_growth_by_process(),
            "passed": self.passed,
        }

    def line(self) -> str:
        s = self.summary()
        growth = ", ".join(f"{k} {v:+.1%}" for k, v in s["memory_growth"].items() if v is not None) or "not sampled"
        killed = (
            f"; backend killed at {s['backend_killed_at_s']} s, back at {s['backend_back_at_s']} s, "
            f"{s['errors_of_the_killed_backend']} errors of its requests (retried{kill_errors_end_words(s)})"
            f"{recovery_words(s)}"
            if self.kill_asked
            else ""
        )
        others = f"{s['other_errors']} other errors{other_errors_split(s)}"
        if s["other_errors"]:
            first = s["first_other_errors"][0]
            others += f" (the first at {first['t_s']} s: {first['error']})"
        return (
            f"soak: {s['duration_s']:g} s, {s['requests']} requests x batch {'/'.join(map(str, self.load.batch_sizes))}"
            f" from {self.load.concurrency} clients: {s['completed']} ok, {s['failed']} failed, {s['lost']} lost, "
            f"{s['mismatched']} mismatched, {others}{killed}; memory growth from "
            f"{s['memory_settle_s']:g} s: {growth}{growth_by_process_words(s)}"
        )


def kill_errors_end_words(s: dict) -> str:
    """When the killed backend's requests were last refused, against when the model was back, in words for a line,
    from a soak's summary (empty where it recorded neither)."""
    last, back = s.get("last_error_of_the_killed_backend_s"), s.get("backend_back_at_s")
    if last is None or back is None:
        return ""
    return f"; the last {last - back:.1f} s after it was back" if last > back else "; none after it was back"


def recovery_words(s: dict) -> str:
    """How the killed backend's model came back, in words for a line, from a soak's summary (SoakReport.summary, or
    the JSON of one; soaks that recorded less get fewer words): a restart took the old version with the old process;
    after a reload, whether Triton unloaded the old version (one it did not keeps its memory). Empty without a
    recovery."""
    if s.get("backend_back_at_s") is None or s.get("recovery_error") is not None or "old_version_unloaded" not in s:
        return ""
    if (s.get("recovered_by") or "reload") == "restart":
        pids = " to ".join(map(str, s.get("server_pids") or []))
        times = (s.get("restart_times") or {}).get("words")
        return (
            f"; the server restarted (pid {pids}{'; ' + times if times else ''}): the old version's memory went with "
            "the old process"
        )
    unloaded, after = s["old_version_unloaded"], s.get("old_version_unloaded_after_s")
    if unloaded:
        return "; the old version unloaded" + (f" {after:g} s after the reload" if after is not None else "")
    if unloaded is False:
        wait = s["old_version_unload_wait_s"]
        return f"; the old version NOT unloaded within {wait:g} s of the reload (its memory stays)"
    return "; whether the old version was unloaded is not known (the soak ended first)"


def growth_by_process_words(s: dict) -> str:
    """The host memory's growth within each server process of a soak (SoakReport.memory_growth_by_process), from its
    summary, in words after the target's figure; empty for a soak with one process or that did not record it."""
    spans = s.get("memory_growth_by_process") or []
    if len(spans) < 2:
        return ""
    words = ", ".join(f"pid {g['server_pid']} {g['host']:+.1%} ({g['from_s']:g}-{g['to_s']:g} s)" for g in spans)
    return f" (host within each server process: {words})"


def other_errors_split(s: dict) -> str:
    """When a soak's errors that were not the killed backend's came (before the kill, or after the recovery and
    KILL_GRACE_S), from its summary; empty when there were none, no kill, or the soak did not record it."""
    if not s.get("other_errors") or s.get("backend_killed_at_s") is None or s.get("other_errors_before_kill") is None:
        return ""
    recovery = s.get("recovered_by") or "reload"
    return (
        f" ({s['other_errors_before_kill']} before the kill, {s['other_errors_after_recovery']} after the {recovery}"
        f" + {KILL_GRACE_S:g} s)"
    )


def _round(value):
    return None if value is None else round(value, 2)


def run_soak(
    server,
    model: str,
    pool,
    expected,
    *,
    duration_s: float,
    concurrency: int = 256,
    batch_sizes=(1, 2, 4, 8, 16, 32, 64),
    protocol: str = "grpc",
    shared_memory: str = "none",
    kill: bool = True,
    sample_every_s: float = 60.0,
    input_name: str = "input",
    output_name: str = "output",
    atol: float = 1e-5,
    rtol: float = 1e-5,
    reload_timeout_s: float | None = None,
) -> SoakReport:
    """The soak of the module docstring against ``server`` (a started, watched TritonServer) serving ``model``;
    ``pool`` and ``expected``: the inputs and their outputs computed directly (check.input_pool,
    check.expected_outputs). ``reload_timeout_s``: how long the model may take to come back after the kill (default:
    the server's recovery_wait_s)."""
    from wtconv_serving.traffic.check import run_load

    if reload_timeout_s is None:
        reload_timeout_s = server.recovery_wait_s

    report = SoakReport(load=None, duration_s=float(duration_s), kill_asked=bool(kill))
    recovery = []  # the server's Recovery of the kill
    done = threading.Event()
    t0 = time.monotonic()

    def sample():
        if server.restarting or (report.killed_at_s is not None and not recovery and report.recovery_error is None):
            # no whole server to measure: from the kill until the recovery the stubs are gone (a sample then counts
            # the server alone), then the old process goes and the new one starts and warms up
            return
        server_pids = [server.process.pid] if server.process is not None else []
        stub_pids = list(server.stubs()) if server.process is not None else []
        server_memory, stubs_memory = process_memory_mib(server_pids), process_memory_mib(stub_pids)
        server_mib, stubs_mib = server_memory["rss"], stubs_memory["rss"]
        report.samples.append(
            {
                "t_s": round(time.monotonic() - t0, 2),
                "server_pid": server_pids[0] if server_pids else None,
                "host_rss_mib": round(server_mib + stubs_mib, 1),
                # the same processes with the regions they share counted once
                "host_pss_mib": round(server_memory["pss"] + stubs_memory["pss"], 1),
                "server_rss_mib": round(server_mib, 1),  # apart, to tell the server's growth from a new stub's
                # and what of it the server allocated (requests in flight among it) and the regions it maps
                "server_anon_mib": round(server_memory["anon"], 1),
                "server_shmem_mib": round(server_memory["shmem"], 1),
                "stubs_rss_mib": round(stubs_mib, 1),
                # the clients' connections the server holds: with more of them it takes in more requests at once
                "server_connections": client_connections(server_pids[0], server.ports[protocol]) if server_pids else 0,
                "gpu_memory_mib": gpu_memory_mib(),
            }
        )

    def sampler():
        while not done.wait(sample_every_s):
            sample()

    def killer():
        if done.wait(duration_s / 2):
            return
        before, pid = len(server.recoveries), server.process.pid
        report.killed_at_s = time.monotonic() - t0
        kill_backend(server, model)
        deadline = time.monotonic() + reload_timeout_s
        while len(server.recoveries) == before and time.monotonic() < deadline:
            time.sleep(0.1)
        if len(server.recoveries) > before:
            report.recovered_at_s = time.monotonic() - t0
            recovery.append(server.recoveries[-1])
            report.recovery_error = recovery[0].error
            report.recovered_by, report.server_pids = recovery[0].way, (pid, recovery[0].server_pid)
            if recovery[0].restart_times is not None:
                report.restart_times = recovery[0].restart_times.as_dict()
        else:
            report.recovery_error = f"the model was not back within {reload_timeout_s:g} s"

    sample()
    watchers = [threading.Thread(target=sampler, name="soak-memory", daemon=True)]
    if kill:
        watchers.append(threading.Thread(target=killer, name="soak-killer", daemon=True))
    for thread in watchers:
        thread.start()
    try:
        report.load = run_load(
            server.grpc_url if protocol == "grpc" else server.http_url,
            model,
            pool,
            expected,
            protocol=protocol,
            concurrency=concurrency,
            batch_sizes=batch_sizes,
            input_name=input_name,
            output_name=output_name,
            atol=atol,
            rtol=rtol,
            retries=10**6,  # a request is retried for as long as the soak lasts: none is given up
            retry_wait_s=0.25,
            shared_memory=shared_memory,
            duration_s=duration_s,
            own_connections=True,  # the restarted server meets the connections the first one met
            clock_origin=t0,  # the kill's clock: requests failing at the kill are its own
        )
    finally:
        done.set()
        for thread in watchers:
            thread.join(reload_timeout_s if thread.name == "soak-killer" else 5.0)
    sample()
    if recovery:
        server.follow_unloads()  # the watch's last look may be an interval old
        report.old_version_unloaded = recovery[0].old_version_unloaded
        report.old_version_unloaded_after_s = recovery[0].unloaded_after_s
        report.unload_wait_s = server.unload_wait_s
    return report
