"""The memory of a served model's processes, every few seconds, beside a soak or a load (docs/serving.md, "The
soak"): where the soak samples once a minute and only while the whole server is up, this watches the kill and the
restart as well, and splits each process's resident memory by kind.

``watch`` writes one JSON line per sample: for each process whose name is tritonserver, a Python backend stub or an
MPS daemon or server, its resident memory (VmRSS) and its parts from /proc/PID/status (proc(5)): RssAnon (what the
process allocated), RssFile (the files it maps: its libraries) and RssShmem (shared memory: the Python backend's
regions, which the server and each stub both map), with its thread count; every ``maps_every_s`` seconds also the
server's largest mappings (/proc/PID/smaps, grouped by what they map). ``summary`` prints a table of those lines.

    python -m benchmarks.process_memory_watch watch memory.jsonl --seconds 840 &   # beside the soak
    python -m benchmarks.process_memory_watch summary memory.jsonl --every 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

NAMES = ("tritonserver", "triton_python_b", "nvidia-cuda-mps")  # /proc/PID/comm: the first 15 characters
KINDS = ("tritonserver", "triton_python", "nvidia-cuda-mps")  # the summary's columns: servers, stubs, MPS
FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads")


def processes():
    """(pid, name) of the processes this watch follows."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith(NAMES):
            yield int(entry.name), name


def status(pid: int) -> dict:
    """FIELDS of /proc/PID/status (kB; Threads a count); empty when the process is gone."""
    values = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in FIELDS:
                values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values


def largest_mappings(pid: int, top: int = 12) -> list:
    """[(what, MiB)]: the resident memory of the process's mappings grouped by what they map (a file's name, a
    region in /dev/shm cut to its prefix, a device by its path, [heap], [anon] for anonymous ones), the largest
    ``top``."""
    sizes: dict = {}
    name = None
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's header line
            name = parts[5] if len(parts) > 5 else "[anon]"
            if name.startswith("/dev/shm/"):
                name = "/dev/shm/" + Path(name).name[:24]
            elif not name.startswith("/dev/"):  # a device keeps its path (/dev/zero: the pinned memory pool)
                name = Path(name).name or name
        elif parts and parts[0] == "Rss:":
            sizes[name] = sizes.get(name, 0) + int(parts[1])
    return sorted(((k, v // 1024) for k, v in sizes.items()), key=lambda kv: -kv[1])[:top]


def watch(out: Path, seconds: float, every_s: float = 2.0, maps_every_s: float = 30.0) -> None:
    t0, last_maps = time.monotonic(), -maps_every_s
    with open(out, "w") as f:
        while (t := time.monotonic() - t0) < seconds:
            rows = [{"pid": pid, "comm": name, **status(pid)} for pid, name in processes()]
            record = {"t": round(t, 1), "time": time.strftime("%H:%M:%S"), "procs": rows}
            if t - last_maps >= maps_every_s:
                last_maps = t
                record["server_maps_mib"] = {
                    r["pid"]: largest_mappings(r["pid"]) for r in rows if r["comm"] == "tritonserver"
                }
            f.write(json.dumps(record) + "\n")
            f.flush()
            time.sleep(every_s)


def _named(procs: list, prefix: str) -> list:
    return [p for p in procs if p["comm"].startswith(prefix)]


def summary(log: Path, every_s: float = 10.0) -> str:
    """A table of the log, a row every ``every_s`` seconds: each server's memory and its parts (MiB), the stubs'
    together, the MPS processes' together; then each server's largest mappings at its first and last look."""
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    mib = lambda kib: round(kib / 1024)  # noqa: E731
    out = [
        "| s | server pid: RSS, anon, file, shmem MiB, threads | stubs: n, RSS, anon, shmem MiB | MPS: n, RSS MiB |",
        "|---|---|---|---|",
    ]
    last = -every_s
    for r in records:
        if r["t"] - last < every_s:
            continue
        last = r["t"]
        servers, stubs, mps = (_named(r["procs"], prefix) for prefix in KINDS)
        server = (
            "; ".join(
                f"{p['pid']}: {mib(p.get('VmRSS', 0))}, {mib(p.get('RssAnon', 0))}, {mib(p.get('RssFile', 0))}, "
                f"{mib(p.get('RssShmem', 0))}, {p.get('Threads')}"
                for p in servers
            )
            or "–"
        )
        total = lambda procs, key: mib(sum(p.get(key, 0) for p in procs))  # noqa: E731
        out.append(
            f"| {r['t']} | {server} | {len(stubs)}, {total(stubs, 'VmRSS')}, {total(stubs, 'RssAnon')}, "
            f"{total(stubs, 'RssShmem')} | {len(mps)}, {total(mps, 'VmRSS')} |"
        )
    maps: dict = {}
    for r in records:
        for pid, top in (r.get("server_maps_mib") or {}).items():
            maps.setdefault(pid, []).append((r["t"], top))
    out.append("")
    for pid, looks in maps.items():
        for t, top in looks[:1] + looks[-1:] if len(looks) > 1 else looks:
            out.append(f"- server {pid} at {t} s: " + ", ".join(f"{name} {size}" for name, size in top[:8]))
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    w = commands.add_parser("watch", help="sample until --seconds have passed")
    w.add_argument("out", type=Path, help="the JSON-lines log to write")
    w.add_argument("--seconds", type=float, required=True)
    w.add_argument("--every", type=float, default=2.0, help="seconds between samples (default 2)")
    w.add_argument("--maps-every", type=float, default=30.0, help="seconds between looks at the server's mappings")
    s = commands.add_parser("summary", help="a markdown table of a log")
    s.add_argument("log", type=Path)
    s.add_argument("--every", type=float, default=10.0, help="seconds between the table's rows (default 10)")
    args = parser.parse_args(argv)
    if args.command == "watch":
        watch(args.out, args.seconds, args.every, args.maps_every)
    else:
        print(summary(args.log, args.every))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
