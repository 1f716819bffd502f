"""How much host memory tritonserver holds under the same load from clients that share one gRPC connection and
from clients with a connection each (docs/serving.md, "The soak": why a restarted server held more).

One server (wtconv_trt.api.serving.plan_serving; ``--serve key=value`` passes its options, e.g. ``runtime=torch-cuda
mps=1``), then three phases of ``--phase`` seconds at ``--concurrency`` in flight with requests of 1-64 images
(check.run_load): the clients on their process's one connection, each on a connection of its own
(``own_connections``), and on one connection again, each followed by a few idle seconds. Every 2 s: the server's
resident memory (VmRSS), what it allocated (RssAnon) and the shared memory it maps (RssShmem), and its open sockets.
The answers are not checked (the inputs are noise; a soak checks them): the load is what matters here. Run the
server's processes with jemalloc preloaded (LD_PRELOAD) to see memory in use rather than what malloc keeps.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python -m benchmarks.connection_memory MODEL.onnx \\
        --out connection_memory.json --serve runtime=torch-cuda --serve mps=1
    LD_PRELOAD=... python -m benchmarks.connection_memory averaging --out cpu.json --serve runtime=onnxruntime \\
        --serve device=cpu      # without a GPU: a model that only averages its input (averaging_model)
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import numpy as np

PHASES = (("shared", False), ("own", True), ("shared_again", False))  # (name, each client on its own connection)
IDLE_S = 8.0


def averaging_model(path: Path) -> Path:
    """An ONNX model that averages each image of a (batch, 3, 224, 224) float16 input over its pixels: the requests
    of WTConvNeXt-T with next to no work, for the server's request path on a machine without a GPU."""
    import onnx
    from onnx import TensorProto, helper

    image = helper.make_tensor_value_info("input", TensorProto.FLOAT16, ["batch", 3, 224, 224])
    means = helper.make_tensor_value_info("output", TensorProto.FLOAT16, ["batch", 3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    node = helper.make_node("ReduceMean", ["input", "axes"], ["output"], keepdims=0)
    graph = helper.make_graph([node], "averaging", [image], [means], [axes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def server_memory(pid: int) -> dict:
    """The server's VmRSS, RssAnon and RssShmem (whole MiB; the soak's process_memory_mib) and its open sockets."""
    from wtconv_serving.traffic.soak import MEMORY_FIELDS, process_memory_mib

    memory = process_memory_mib([pid])
    values = {field_name: int(memory[name]) for field_name, name in MEMORY_FIELDS.items()}
    fds = Path(f"/proc/{pid}/fd")
    values["sockets"] = sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("socket:"))
    return values


def measure(onnx: str, serve: dict, phase_s: float, concurrency: int, batch_sizes) -> dict:
    from wtconv_serving.repositories.repository import onnx_batching
    from wtconv_serving.traffic.check import run_load
    from wtconv_trt.api.serving import plan_serving

    plan = plan_serving(
        onnx,
        Path(os.environ.get("TMPDIR", "/tmp")) / "connection_memory_repo",
        force=True,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        **serve,
    )
    served = plan.start()
    pid = served.server.process.pid
    description = served.repository.description
    _, dims, out_dims = onnx_batching(description, None)
    pool = np.random.default_rng(0).standard_normal((512, *dims)).astype(description["input"]["dtype"])
    expected = np.zeros((512, *out_dims), description["output"]["dtype"])
    samples, phase, stop = [], ["idle"], threading.Event()

    def sampler():
        t0 = time.monotonic()
        while not stop.wait(2.0):
            try:
                samples.append({"t": round(time.monotonic() - t0, 1), "phase": phase[0], **server_memory(pid)})
            except OSError:
                pass

    threading.Thread(target=sampler, daemon=True).start()
    rates = {}
    try:
        for name, own in PHASES:
            phase[0] = name
            report = run_load(
                served.grpc_url,
                served.name,
                pool,
                expected,
                concurrency=concurrency,
                batch_sizes=batch_sizes,
                duration_s=phase_s,
                atol=np.inf,
                rtol=np.inf,
                input_name=description["input"]["name"],
                output_name=description["output"]["name"],
                own_connections=own,
            )
            rates[name] = round(report.images / max(report.wall_s, 1e-9), 1)
            phase[0] = f"{name}_idle"
            time.sleep(IDLE_S)
    finally:
        stop.set()
        served.stop()
    return {
        "onnx": onnx,
        "serve": serve,
        "phase_s": phase_s,
        "concurrency": concurrency,
        "preloaded": os.environ.get("LD_PRELOAD", ""),
        "images_per_s": rates,
        "samples": samples,
    }


def table(result: dict) -> str:
    """Per phase: the server's allocated memory (RssAnon, MiB) over the phase's second half and when idle after it,
    its shared memory, its sockets and the rate."""
    out = [
        "| phase | allocated MiB (2nd half: min–max) | idle after | shared MiB | sockets | images/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, _ in PHASES:
        rows = [s for s in result["samples"] if s["phase"] == name]
        idle = [s for s in result["samples"] if s["phase"] == f"{name}_idle"]
        half = rows[len(rows) // 2 :] or rows
        anon = [s["RssAnon"] for s in half]
        out.append(
            f"| {name} | {min(anon)}–{max(anon)} | {idle[-1]['RssAnon'] if idle else '–'} | "
            f"{half[-1]['RssShmem']} | {max(s['sockets'] for s in half)} | {result['images_per_s'][name]} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("onnx", help="the exported model to serve, or 'averaging' (averaging_model)")
    parser.add_argument("--out", type=Path, required=True, help="the JSON results (a markdown table beside it)")
    parser.add_argument(
        "--serve",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a serve option (plan_serving's keyword; 1/0 for true/false)",
    )
    parser.add_argument("--phase", type=float, default=60.0, help="seconds of each phase (default 60)")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    args = parser.parse_args(argv)
    serve = {}
    for item in args.serve:
        key, _, value = item.partition("=")
        serve[key] = {"1": True, "0": False}.get(value, value)
    onnx = args.onnx
    if onnx == "averaging":
        onnx = str(averaging_model(args.out.with_name("averaging.onnx")))
    result = measure(onnx, serve, args.phase, args.concurrency, [int(b) for b in args.batch_sizes.split(",")])
    args.out.write_text(json.dumps(result, indent=1))
    text = table(result)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
