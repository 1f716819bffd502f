"""The tools that tell where a served model's host memory goes: the soak's count of the server's client connections
(wtconv_serving.traffic.soak.client_connections) and memory by kind (process_memory_mib),
benchmarks/process_memory_watch.py and benchmarks/connection_memory.py's model and table (docs/serving.md, "The
soak").

Oracles: real sockets opened and closed here, an anonymous mapping of a known size touched here, numpy's float64 mean
of the inputs run through ONNX Runtime, and sums written out by hand for synthetic logs."""

from __future__ import annotations

import json
import mmap
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import connection_memory, process_memory_watch
from wtconv_serving.traffic.soak import client_connections, process_memory_mib


def test_client_connections_counts_the_established_connections_on_the_port():
    """A listening socket with three accepted connections counts 3 on its port (the connecting ends, on other ports,
    do not count), 2 once one is closed; another port counts none."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    accepted = [server.accept()[0] for _ in clients]
    try:
        assert client_connections(os.getpid(), port) == 3
        accepted[0].close()
        clients[0].close()
        assert client_connections(os.getpid(), port) == 2
    finally:
        for s in [server, *clients, *accepted]:
            s.close()


def test_client_connections_of_a_process_gone_is_zero():
    """A pid that no process has counts 0 (the server gone between two samples)."""
    assert client_connections(2**22 + 12345, 80) == 0


MEASURE_A_BLOCK = """
import json, mmap, os
from wtconv_serving.traffic.soak import process_memory_mib
before = process_memory_mib([os.getpid()])
block = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
block.write(b"\\1" * (64 << 20))
print(json.dumps([before, process_memory_mib([os.getpid()])]))
"""


def test_memory_by_kind_sees_an_anonymous_mapping_touched_here():
    """A fresh process (nothing else allocating in it meanwhile) that touches a 64 MiB anonymous mapping sees its
    allocated (anon) and whole resident memory rise by about 64 MiB and its shared memory not; the parts never
    exceed the whole; a process gone counts 0."""
    done = subprocess.run([sys.executable, "-c", MEASURE_A_BLOCK], capture_output=True, text=True, check=True)
    before, after = json.loads(done.stdout)
    assert 60 <= after["anon"] - before["anon"] <= 70, (before, after)
    assert 60 <= after["rss"] - before["rss"] <= 70, (before, after)
    assert abs(after["shmem"] - before["shmem"]) < 4, (before, after)
    assert after["anon"] + after["shmem"] <= after["rss"] + 0.1
    assert 60 <= after["pss"] - before["pss"] <= 70, (before, after)  # private pages: all of them, as in RSS
    assert process_memory_mib([2**22 + 12345]) == {"rss": 0, "anon": 0, "shmem": 0, "pss": 0}


SHARE_A_BLOCK = """
import json, mmap, os
from wtconv_serving.traffic.soak import process_memory_mib
block = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
block.write(b"\1" * (64 << 20))
(ready_r, ready_w), (measured_r, measured_w) = os.pipe(), os.pipe()
child = os.fork()
if child == 0:  # map the same pages in: read one byte of each page, then wait to be measured
    sum(block[i] for i in range(0, 64 << 20, mmap.PAGESIZE))
    os.write(ready_w, b"x")
    os.read(measured_r, 1)
    os._exit(0)
os.read(ready_r, 1)
print(json.dumps([process_memory_mib([os.getpid()]), process_memory_mib([child])]))
os.write(measured_w, b"x")
os.waitpid(child, 0)
"""


def test_a_region_two_processes_map_counts_twice_in_rss_and_once_in_pss():
    """A 64 MiB shared anonymous block (as a Python backend region between the server and a stub) that a parent and
    its child both have resident: their shared memory (RssShmem) counts it in each, 128 MiB together; their
    proportional figures (Pss) give each half of it, so that the sum is at least 60 MiB below the sum of their
    resident memory."""
    done = subprocess.run([sys.executable, "-c", SHARE_A_BLOCK], capture_output=True, text=True, check=True, timeout=60)
    parent, child = json.loads(done.stdout)
    assert 60 <= parent["shmem"] <= 70 and 60 <= child["shmem"] <= 70, (parent, child)
    assert parent["rss"] + child["rss"] - (parent["pss"] + child["pss"]) >= 60, (parent, child)
    assert parent["pss"] < parent["rss"] - 30 and child["pss"] < child["rss"] - 30, (parent, child)


def test_largest_mappings_name_the_anonymous_block():
    """The watch's look at a process's mappings finds a touched 48 MiB anonymous block among the largest, as [anon]
    (its size summed with the process's other anonymous mappings)."""
    block = mmap.mmap(-1, 48 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        block.write(b"\1" * (48 << 20))
        mappings = dict(process_memory_watch.largest_mappings(os.getpid()))
        assert mappings.get("[anon]", 0) >= 47
    finally:
        block.close()


def test_watch_summary_table(tmp_path):
    """The summary of a log written by hand: a row every 10 s (the samples between skipped), each server's MiB and
    threads, the stubs' count and sums, the MPS processes'; then each server's first and last look at its mappings."""
    kib = 1024
    records = []
    for t in (0.0, 5.0, 10.0):
        procs = [
            {
                "pid": 7,
                "comm": "tritonserver",
                "VmRSS": 300 * kib,
                "RssAnon": 100 * kib,
                "RssFile": 50 * kib,
                "RssShmem": 150 * kib,
                "Threads": 9,
            },
            {"pid": 8, "comm": "triton_python_b", "VmRSS": 1000 * kib, "RssAnon": 600 * kib, "RssShmem": 100 * kib},
            {"pid": 9, "comm": "triton_python_b", "VmRSS": 1100 * kib, "RssAnon": 650 * kib, "RssShmem": 100 * kib},
            {"pid": 10, "comm": "nvidia-cuda-mps", "VmRSS": 64 * kib},
        ]
        record = {"t": t, "time": "00:00:00", "procs": procs}
        if t != 5.0:
            record["server_maps_mib"] = {"7": [["[anon]", 100 + int(t)], ["/dev/zero", 64]]}
        records.append(record)
    log = tmp_path / "memory.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    lines = process_memory_watch.summary(log, every_s=10).splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| s ")]
    assert rows == [
        "| 0.0 | 7: 300, 100, 50, 150, 9 | 2, 2100, 1250, 200 | 1, 64 |",
        "| 10.0 | 7: 300, 100, 50, 150, 9 | 2, 2100, 1250, 200 | 1, 64 |",
    ]
    assert "- server 7 at 0.0 s: [anon] 100, /dev/zero 64" in lines
    assert "- server 7 at 10.0 s: [anon] 110, /dev/zero 64" in lines


def test_averaging_model_averages_each_image(tmp_path):
    """The CPU stand-in for WTConvNeXt-T's requests returns each image's channel means (numpy's float64 mean as the
    oracle, within float16's rounding)."""
    ort = pytest.importorskip("onnxruntime")
    model = connection_memory.averaging_model(tmp_path / "averaging.onnx")
    x = np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float16)
    (y,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    assert y.shape == (2, 3) and y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), x.astype(np.float64).mean(axis=(2, 3)), atol=2e-3)


def test_connection_memory_table():
    """Per phase: the allocated memory's range over the phase's second half, the last idle sample after it, the shared
    memory and most sockets of that half, and the rate."""
    samples = []
    for name, anon in (("shared", [100, 200, 300, 400]), ("own", [500, 900, 1000, 1100]), ("shared_again", [50, 60])):
        samples += [
            {"phase": name, "RssAnon": a, "RssShmem": 10, "sockets": 26 if "shared" in name else 281} for a in anon
        ]
        samples += [{"phase": f"{name}_idle", "RssAnon": a, "RssShmem": 10, "sockets": 25} for a in (90, 80)]
    result = {"samples": samples, "images_per_s": {"shared": 1.0, "own": 2.0, "shared_again": 3.0}}
    rows = connection_memory.table(result).splitlines()[2:]
    assert rows == [
        "| shared | 300–400 | 80 | 10 | 26 | 1.0 |",
        "| own | 1000–1100 | 80 | 10 | 281 | 2.0 |",
        "| shared_again | 60–60 | 80 | 10 | 26 | 3.0 |",
    ]
