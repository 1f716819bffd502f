"""A Triton Inference Server model repository for an engine (``wtconv-trt triton-repo``).

Layout written under ``--out DIR`` (DIR is the model repository)::

    DIR/<name>/config.pbtxt               platform "tensorrt_plan", max_batch_size = the profiles' batch range,
                                          dynamic batching, instance groups, I/O types of the engine (fp16 I/O
                                          for an fp16 export)
    DIR/<name>/1/model.plan               the engine
    DIR/<name>/engine.json                its manifest (Triton ignores it; the client sample reads the dtypes)
    DIR/<name>/labels.txt                 class labels when known (label_filename: classification results)
    DIR/<name>/libwtconv_trt_plugin.so    the static-registration plugin library, when given
    DIR/serve.sh                          the exact tritonserver command that loads the plugin

Triton loads TensorRT plugins with LD_PRELOAD of a library that registers its creators statically
(triton-inference-server/server docs/user_guide/custom_operations.md) or with
``--backend-config=tensorrt,plugins="a.so;b.so"`` (tensorrt_backend README); both are a plain dlopen, so it must
be the static-registration library (libwtconv_trt_plugin.so), not the getCreators one. The server's TensorRT
must be exactly the engine's version: pick the Triton release whose TensorRT matches (Triton's release notes /
framework support matrix list it).

config.pbtxt is plain text written here; a CPU test parses it into tritonclient's ModelConfig protobuf
(tritonclient.grpc.model_config_pb2, Triton's model_config.proto) with google.protobuf.text_format.Parse.
"""

from __future__ import annotations

import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from trt_engine import manifest as mf
from wtconv_core.errors import InputError, ModelError, PluginError, ServingError
from wtconv_core.files import atomic_write_bytes, atomic_write_json
from wtconv_core.inputs import MAX_INT32, check_int

# NumPy dtype name -> Triton DataType (model_config.proto).
TRITON_DTYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "bfloat16": "TYPE_BF16",
    "int8": "TYPE_INT8",
    "uint8": "TYPE_UINT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "bool": "TYPE_BOOL",
}
# Triton wire types used by clients (tritonclient InferInput datatype).
CLIENT_DTYPES = {
    "float32": "FP32",
    "float16": "FP16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "int8": "INT8",
    "bool": "BOOL",
}
MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a model name Triton takes (fullmatch)
# Each instance holds its own execution context and activation memory on every GPU it runs on; beyond a few the
# instances only queue behind each other, and a large count exhausts GPU memory when Triton loads the model.
MAX_INSTANCES = 64
MAX_GPU_INDEX = 1023
MAX_QUEUE_DELAY_US = 10**8  # dynamic batching's longest wait: 100 s


@dataclass
class BatchPlan:
    max_batch_size: int  # 0: no Triton batching (the engine's batch dimension is fixed)
    profiles: list  # profile indices the instances may use (all of them when the engine has one)
    input_dims: list  # dims without the batch dimension (-1 where the profiles allow a range)
    note: str = ""


def plan_batching(manifest: dict) -> BatchPlan:
    """max_batch_size from the optimisation profiles. Triton sends any batch from 1 to max_batch_size, so the
    profiles' batch ranges must cover 1..max_batch_size without a gap; a profile that does not start at 1 is
    refused with the explanation."""
    profiles = mf.profiles_of(manifest)
    inputs = [t for t in manifest["io"] if t["mode"] == "input"]
    if len(inputs) != 1:
        raise ModelError(f"the engine has {len(inputs)} inputs; triton-repo handles single-input models")
    name, engine_shape = inputs[0]["name"], inputs[0]["shape"]
    if engine_shape[0] != -1:
        # The batch dimension is fixed in the engine: Triton must not add its own.
        dims = [int(d) for d in engine_shape]
        return BatchPlan(
            0,
            list(range(len(profiles))),
            dims,
            f"the engine's batch dimension is fixed at {engine_shape[0]}: max_batch_size 0 (no batching)",
        )
    ranges = sorted((p.inputs[name].min[0], p.inputs[name].max[0], i) for i, p in enumerate(profiles))
    if not ranges or ranges[0][0] != 1:
        raise ModelError(
            "no optimisation profile starts at batch 1 ("
            + "; ".join(f"profile {i}: batch {lo}..{hi}" for lo, hi, i in ranges)
            + "). Triton batches requests dynamically and may send any batch from 1 to max_batch_size, so the "
            "engine must accept batch 1; rebuild with --shapes NAME:1x.../OPTx.../MAXx..."
        )
    covered, used = 0, []
    for lo, hi, i in ranges:
        if lo > covered + 1:
            break
        covered = max(covered, hi)
        used.append(i)
    rank = len(engine_shape)
    dims = []
    for axis in range(1, rank):
        values = {(profiles[i].inputs[name].min[axis], profiles[i].inputs[name].max[axis]) for i in used}
        fixed = engine_shape[axis] if engine_shape[axis] != -1 else None
        if fixed is None and len(values) == 1 and next(iter(values))[0] == next(iter(values))[1]:
            fixed = next(iter(values))[0]
        dims.append(int(fixed) if fixed is not None else -1)
    note = ""
    if len(used) < len(profiles):
        note = (
            f"profiles {sorted(set(range(len(profiles))) - set(used))} leave a gap above batch {covered} and "
            f"are not used by Triton"
        )
    return BatchPlan(covered, sorted(used), dims, note)


def make_config(
    manifest: dict,
    *,
    name: str,
    instances: int = 1,
    kind: str = "KIND_GPU",
    gpus=None,
    preferred_batch_sizes=None,
    max_queue_delay_us: int = 100,
    labels: bool = False,
) -> str:
    """config.pbtxt text for the engine described by ``manifest``."""
    if not MODEL_NAME.fullmatch(name):
        raise InputError(f"model name {name!r}: use letters, digits, '_', '-', '.' only")
    if instances < 1:
        raise InputError(f"--instances must be >= 1, got {instances}")
    if kind not in ("KIND_GPU",):
        raise InputError("a TensorRT plan runs on the GPU only: instance kind must be KIND_GPU")
    plan = plan_batching(manifest)
    inputs = [t for t in manifest["io"] if t["mode"] == "input"]
    outputs = [t for t in manifest["io"] if t["mode"] == "output"]

    def dtype(t):
        if t["dtype"] not in TRITON_DTYPES:
            raise ModelError(
                f"tensor {t['name']!r} has dtype {t['dtype']}, which Triton's TensorRT backend does not take"
            )
        return TRITON_DTYPES[t["dtype"]]

    def dims_list(d):
        return "[ " + ", ".join(str(int(x)) for x in d) + " ]"

    lines = [
        f'name: "{name}"',
        'platform: "tensorrt_plan"',
        f"max_batch_size: {plan.max_batch_size}",
        'default_model_filename: "model.plan"',
        "input [",
    ]
    for i, t in enumerate(inputs):
        lines += [
            "  {",
            f'    name: "{t["name"]}"',
            f"    data_type: {dtype(t)}",
            f"    dims: {dims_list(plan.input_dims)}",
            "  }" + ("," if i < len(inputs) - 1 else ""),
        ]
    lines.append("]")
    lines.append("output [")
    for i, t in enumerate(outputs):
        shape = t["shape"][1:] if plan.max_batch_size > 0 else t["shape"]
        lines += ["  {", f'    name: "{t["name"]}"', f"    data_type: {dtype(t)}", f"    dims: {dims_list(shape)}"]
        if labels and i == 0:
            lines.append('    label_filename: "labels.txt"')
        lines.append("  }" + ("," if i < len(outputs) - 1 else ""))
    lines.append("]")
    if plan.max_batch_size > 0:
        preferred = preferred_batch_sizes
        if preferred is None:
            opts = sorted({int(mf.profiles_of(manifest)[i].inputs[inputs[0]["name"]].opt[0]) for i in plan.profiles})
            preferred = [b for b in opts + [plan.max_batch_size] if 1 < b <= plan.max_batch_size]
        preferred = sorted(set(int(b) for b in preferred))
        bad = [b for b in preferred if not 1 <= b <= plan.max_batch_size]
        if bad:
            raise InputError(f"preferred batch sizes {bad} are outside 1..{plan.max_batch_size} (max_batch_size)")
        lines.append("dynamic_batching {")
        if preferred:
            lines.append(f"  preferred_batch_size: {dims_list(preferred)}")
        lines.append(f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}")
        lines.append("}")
    group = ["  {", f"    count: {int(instances)}", f"    kind: {kind}"]
    if gpus:
        group.append(f"    gpus: {dims_list(gpus)}")
    if len(mf.profiles_of(manifest)) > 1:
        group.append("    profile: [ " + ", ".join(f'"{i}"' for i in plan.profiles) + " ]")
    group.append("  }")
    lines += ["instance_group ["] + group + ["]"]
    return "\n".join(lines) + "\n"


def server_command(repo: Path, plugin_file: str | None, use_backend_config: bool = False) -> str:
    """The tritonserver command line (paths relative to the repository's parent via $HERE in serve.sh)."""
    if plugin_file is None:
        return 'exec tritonserver --model-repository="$HERE" "$@"'
    if use_backend_config:
        return 'exec tritonserver --model-repository="$HERE" --backend-config=tensorrt,plugins="$PLUGIN" "$@"'
    return 'LD_PRELOAD="$PLUGIN${LD_PRELOAD:+:$LD_PRELOAD}" exec tritonserver --model-repository="$HERE" "$@"'


def serve_script(name: str, manifest: dict, plugin_rel: str | None) -> str:
    trt = manifest["tensorrt"]["version"]
    lines = [
        "#!/usr/bin/env bash",
        f"# Serve the '{name}' model repository with Triton Inference Server.",
        f"# The server's TensorRT must be exactly {trt} (the engine's): use the Triton release whose TensorRT",
        "# version matches (Triton release notes), e.g. inside its NGC container:",
        '#   docker run --gpus all --rm -p8000:8000 -p8001:8001 -p8002:8002 -v "$PWD":/models \\',
        "#     nvcr.io/nvidia/tritonserver:<release>-py3 /models/serve.sh",
        "# Extra tritonserver options may follow, e.g. ./serve.sh --http-port 8010",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
    ]
    if plugin_rel:
        lines += [
            "# The WTConv2d plugin: the static-registration library (a plain dlopen registers its creator).",
            f'PLUGIN="${{WTCONV_PLUGIN:-$HERE/{plugin_rel}}}"',
            "# Alternative to LD_PRELOAD: " + server_command(Path("."), plugin_rel, True),
            server_command(Path("."), plugin_rel),
        ]
    else:
        lines.append(server_command(Path("."), None))
    return "\n".join(lines) + "\n"


def write_repository(
    engine,
    out,
    *,
    name: str | None = None,
    plugin_static=None,
    instances: int = 1,
    gpus=None,
    preferred_batch_sizes=None,
    max_queue_delay_us: int = 100,
    labels=None,
    force: bool = False,
) -> dict:
    """Write the repository; returns {"config", "model_dir", "serve", "config_text", "plan", "name"}.

    Every option and file is checked before anything is written, with the messages of ``wtconv-trt triton-repo``:
    the counts and GPU indices, the engine, its manifest and its TensorRT backend, the plugin and labels files,
    the repository folder (a model folder that holds files is replaced only with ``force``)."""
    from trt_engine.engine_file import check_engine_request
    from wtconv_core.paths import check_input_file, check_output_dir

    instances = check_int(instances, "--instances", 1, MAX_INSTANCES)
    gpus = check_gpus(gpus)
    preferred_batch_sizes = (
        None
        if preferred_batch_sizes is None
        else [check_int(b, "--preferred-batch", 1, MAX_INT32) for b in preferred_batch_sizes]
    )
    max_queue_delay_us = check_int(max_queue_delay_us, "--max-queue-delay-us", 0, MAX_QUEUE_DELAY_US)
    if plugin_static:
        check_input_file(plugin_static, what="--plugin-static", made_by="give libwtconv_trt_plugin.so")
    if labels:
        check_input_file(labels, what="--labels", made_by="give a text file with one class name per line")
    check_input_file(engine, what="engine", made_by="build one with 'wtconv-trt build MODEL.onnx'")
    check_output_dir(out, option="--out", force=force)
    check = check_engine_request(engine)  # manifest + sha256: never ship a corrupt engine
    manifest = check.manifest
    if mf.backend_of(manifest) != "tensorrt":
        raise ServingError(
            f"{engine} was built by TensorRT-RTX, whose engines Triton's TensorRT backend cannot load "
            f"(it runs TensorRT engines): build the engine with --backend tensorrt for Triton"
        )
    name = name or Path(engine).name.split(".")[0]
    out = Path(out)
    model_dir = out / name
    if model_dir.exists() and any(model_dir.iterdir()) and not force:
        raise InputError(f"{model_dir} already exists and is not empty; pass --force to overwrite it")
    if manifest.get("plugin") and not plugin_static:
        from trt_engine.plugins import static_plugin_for

        guess = static_plugin_for(manifest)
        if guess is not None:
            plugin_static = str(guess)
        else:
            raise PluginError(
                "the engine uses the WTConv2d plugin: pass --plugin-static "
                "PATH/TO/libwtconv_trt_plugin.so "
                "(the static-registration library from plugin/, which Triton loads with LD_PRELOAD)"
            )
    if plugin_static:
        check_static_plugin(plugin_static, manifest)
    label_lines = _labels(manifest, labels)
    config = make_config(
        manifest,
        name=name,
        instances=instances,
        gpus=gpus,
        preferred_batch_sizes=preferred_batch_sizes,
        max_queue_delay_us=max_queue_delay_us,
        labels=label_lines is not None,
    )
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(model_dir / "1" / "model.plan", Path(engine).read_bytes())
    atomic_write_bytes(model_dir / "config.pbtxt", config.encode())
    atomic_write_json(model_dir / "engine.json", manifest)
    if label_lines is not None:
        atomic_write_bytes(model_dir / "labels.txt", ("\n".join(label_lines) + "\n").encode())
    plugin_rel = None
    if plugin_static:
        plugin_rel = f"{name}/{Path(plugin_static).name}"
        shutil.copyfile(plugin_static, out / plugin_rel)
    serve = out / "serve.sh"
    atomic_write_bytes(serve, serve_script(name, manifest, plugin_rel).encode())
    serve.chmod(serve.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {
        "config": model_dir / "config.pbtxt",
        "model_dir": model_dir,
        "serve": serve,
        "config_text": config,
        "plan": plan_batching(manifest),
        "name": name,
    }


def check_static_plugin(plugin_static, manifest: dict) -> None:
    """The library Triton will dlopen (LD_PRELOAD, or the TensorRT backend's ``plugins=``, RTLD_LOCAL) must
    register the creator from its static initialiser, which calls ``getPluginRegistry`` from libnvinfer: so it must
    be the static-registration library, link libnvinfer itself (nothing else provides the symbol at that point),
    and link the engine's TensorRT major. Its ABI record, when present, must be the engine's ABI too."""
    from trt_engine.plugins import check_library_for_tensorrt
    from wtconv_libs.plugin_elf import inspect_library

    info = inspect_library(plugin_static)
    engine_trt = f"TensorRT {manifest['tensorrt']['version']}"
    if info.kind == "dynamic":
        raise PluginError(
            f"{plugin_static} is the dynamic (getCreators) plugin library: loaded by Triton it would "
            f"register nothing and the engine would not deserialize; pass the static-registration one, "
            f"libwtconv_trt_plugin.so"
        )
    major = manifest["tensorrt"]["major"]
    if info.nvinfer_major is None:
        raise PluginError(
            f"{plugin_static} does not link libnvinfer: under Triton (LD_PRELOAD or plugins=) its "
            f"static registration cannot find getPluginRegistry and the server fails. Build "
            f"libwtconv_trt_plugin.so against a TensorRT {major} install (cmake -S plugin -B "
            f"build/plugin -DTensorRT_ROOT=<TensorRT {major} with lib/libnvinfer.so>)"
        )
    if info.nvinfer_major != major:
        raise PluginError(
            f"{plugin_static} links TensorRT {info.nvinfer_major} (libnvinfer.so.{info.nvinfer_major}) "
            f"but the engine was built with {engine_trt}; use the plugin built for TensorRT {major}"
        )
    check_library_for_tensorrt(info, major, "tensorrt", manifest["tensorrt"]["version"])


def _labels(manifest: dict, labels):
    if labels:
        path = Path(labels)
        if not path.is_file():
            raise InputError(f"labels file {labels} does not exist (one class name per line)")
        return path.read_text(encoding="utf-8").splitlines()
    source = (manifest.get("model") or {}).get("source") or {}
    if source.get("source") == "default":
        return [str(d) for d in range(10)]  # the shipped default model classifies the digits 0-9
    return None


def check_gpus(gpus) -> list[int] | None:
    """GPU indices for the instance group: distinct integers from 0 to MAX_GPU_INDEX (None: every visible GPU)."""
    if gpus is None:
        return None
    gpus = list(gpus)
    if (
        not gpus
        or any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= MAX_GPU_INDEX for g in gpus)
        or len(set(gpus)) != len(gpus)
    ):
        raise InputError(f"argument --gpus: expected distinct GPU indices from 0 to {MAX_GPU_INDEX}, got {gpus!r}")
    return gpus


__all__ = [
    "make_config",
    "plan_batching",
    "write_repository",
    "serve_script",
    "check_gpus",
    "MODEL_NAME",
    "TRITON_DTYPES",
    "CLIENT_DTYPES",
]
