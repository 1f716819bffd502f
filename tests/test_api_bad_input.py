"""The bad-input table's API twin: every case of tests/test_cli_bad_input.py that is not about the command line's
own syntax, run through the Python API (``import wtconv_trt``) with the values the command line would hand it.

Each call must raise a ``WtconvTrtError`` subclass and write nothing: the checks live in the jobs, not in the command
modules, so both callers meet the same check. The API's message is in the API's words (no command-line option in
it), and the command line's error line (after ``wtconv-trt CMD: error: ``, taken by running the same case through
``cli.main``) is exactly that message with the parameters named by their options (cli.command_line_message).

SYNTAX lists the cases left out, each for a reason that only exists on a command line (text that does not parse as
the option's type, a missing or unknown option, a choice argparse refuses, an option of another subcommand).
"""

from __future__ import annotations

import math
import re

import pytest
from test_cli_bad_input import CASES, _snapshot, files  # noqa: F401 (files: the shared module fixture)

import wtconv_trt
from wtconv_trt import ModelSource, cli

NAN, INF = math.nan, math.inf
TINY = "wtconvnext_tiny"

# case id -> the API call of that case (f: the fixture's paths).
TWINS = {
    # --- demo
    "demo/count-zero": lambda f: wtconv_trt.run_demo(count=0),
    "demo/count-negative": lambda f: wtconv_trt.run_demo(count=-3),
    "demo/tolerance-nan": lambda f: wtconv_trt.run_demo(tolerance=NAN),
    "demo/tolerance-inf": lambda f: wtconv_trt.run_demo(tolerance=INF),
    "demo/tolerance-negative": lambda f: wtconv_trt.run_demo(tolerance=-1.0),
    "demo/tolerance-zero": lambda f: wtconv_trt.run_demo(tolerance=0.0),
    "demo/onnx-dir-is-file": lambda f: wtconv_trt.run_demo(onnx_dir=f["existing"]),
    "demo/onnx-dir-unwritable": lambda f: wtconv_trt.run_demo(onnx_dir=f["ro"] / "out"),
    "demo/onnx-dir-existing": lambda f: wtconv_trt.run_demo(onnx_dir=f["demo_dir"]),
    # --- export
    "export/arch-without-weights": lambda f: wtconv_trt.export_onnx(f["new"], ModelSource(arch=TINY)),
    "export/checkpoint-without-arch": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(checkpoint=str(f["text_pth"]))
    ),
    "export/seed-huge": lambda f: wtconv_trt.export_onnx(f["new"], ModelSource(seed=99999999999999999999)),
    "export/seed-negative": lambda f: wtconv_trt.export_onnx(f["new"], ModelSource(seed=-1)),
    "export/opset-huge": lambda f: wtconv_trt.export_onnx(f["new"], opset=99999),
    "export/opset-old": lambda f: wtconv_trt.export_onnx(f["new"], opset=17),
    "export/layout-with-standard-ops": lambda f: wtconv_trt.export_onnx(
        f["new"], ops="standard", layout="channels_last"
    ),
    "export/shape-too-small": lambda f: wtconv_trt.export_onnx(f["new"], input_shape=(1, 1, 1, 1)),
    "export/shape-too-large": lambda f: wtconv_trt.export_onnx(f["new"], input_shape=(1, 1, 100000, 100000)),
    "export/shape-channels": lambda f: wtconv_trt.export_onnx(f["new"], input_shape=(1, 3, 32, 32)),
    "export/output-is-dir": lambda f: wtconv_trt.export_onnx(f["dir"]),
    "export/checkpoint-is-text": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, checkpoint=str(f["text_pth"]))
    ),
    "export/checkpoint-whole-model": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, checkpoint=str(f["whole_pth"]))
    ),
    "export/checkpoint-empty": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, checkpoint=str(f["empty"]))
    ),
    "export/checkpoint-missing": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, checkpoint=str(f["missing"]))
    ),
    "export/checkpoint-is-dir": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, checkpoint=str(f["dir"]))
    ),
    "export/num-classes-negative": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, random_weights=True, num_classes=-1)
    ),
    "export/in-chans-zero": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, random_weights=True, in_chans=0)
    ),
    "export/num-classes-without-arch": lambda f: wtconv_trt.export_onnx(f["new"], ModelSource(num_classes=10)),
    "export/num-classes-not-the-checkpoint-s": lambda f: wtconv_trt.export_onnx(
        f["new"], ModelSource(arch=TINY, checkpoint=str(f["ckpt10"]), num_classes=1000)
    ),
    "export/output-unwritable": lambda f: wtconv_trt.export_onnx(f["ro"] / "m.onnx"),
    "export/output-dir-missing": lambda f: wtconv_trt.export_onnx(f["missing_dir"] / "m.onnx"),
    "export/output-existing": lambda f: wtconv_trt.export_onnx(f["existing"]),
    # --- validate (ONNX)
    "validate/model-missing": lambda f: wtconv_trt.validate_onnx(f["missing"]),
    "validate/tolerance-negative": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], tolerance=-1.0),
    "validate/tolerance-zero": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], tolerance=0.0),
    "validate/tolerance-nan": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], tolerance=NAN),
    "validate/seed-huge": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], ModelSource(seed=99999999999999999999)),
    "validate/shape-channels": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], input_shape=(1, 3, 32, 32)),
    "validate/shape-too-small": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], input_shape=(1, 1, 4, 4)),
    "validate/inputs-channels": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], inputs=str(f["npy3"])),
    "validate/inputs-too-small": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], inputs=str(f["npy_small"])),
    "validate/static-batch": lambda f: wtconv_trt.validate_onnx(f["s_onnx"], input_shape=(2, 1, 32, 32)),
    "validate/onnx-other-channels": lambda f: wtconv_trt.validate_onnx(f["relu3"]),
    "validate/onnx-not-from-arch": lambda f: wtconv_trt.validate_onnx(
        f["relu1"], ModelSource(arch=TINY, random_weights=True)
    ),
    "validate/onnx-output-not-from-arch": lambda f: wtconv_trt.validate_onnx(
        f["relu3"], ModelSource(arch=TINY, random_weights=True)
    ),
    "validate/model-is-dir": lambda f: wtconv_trt.validate_onnx(f["dir"]),
    "validate/model-empty": lambda f: wtconv_trt.validate_onnx(f["empty"]),
    "validate/engine-as-model": lambda f: wtconv_trt.validate_onnx(f["engine"]),
    "validate/in-chans-default-model": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], ModelSource(in_chans=3)),
    "validate/model-is-text": lambda f: wtconv_trt.validate_onnx(f["existing"]),
    "validate/inputs-is-text": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], inputs=str(f["existing"])),
    "validate/engine-manifest-not-utf8": lambda f: wtconv_trt.validate_engine(f["engine_latin1"]),
    "validate/inputs-int": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], inputs=str(f["npy_int"])),
    "validate/inputs-missing": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], inputs=str(f["missing"])),
    "validate/device-unknown": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], device="tpu"),
    "validate/device-index-huge": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], device="cuda:4096"),
    "validate/device-cuda-without-the-ep": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], device=f["no_cuda_ep"]),
    "validate/ort-library-missing": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], ort_library=f["missing"]),
    "validate/ort-library-not-one": lambda f: wtconv_trt.validate_onnx(f["d_onnx"], ort_library=f["existing"]),
    # --- validate --engine
    "validate-engine/missing": lambda f: wtconv_trt.validate_engine(f["missing"]),
    "validate-engine/is-dir": lambda f: wtconv_trt.validate_engine(f["dir"]),
    "validate-engine/empty": lambda f: wtconv_trt.validate_engine(f["empty"]),
    "validate-engine/no-manifest": lambda f: wtconv_trt.validate_engine(f["engine_no_manifest"]),
    "validate-engine/model-not-from-engine": lambda f: wtconv_trt.validate_engine(
        f["engine"], ModelSource(arch=TINY, random_weights=True)
    ),
    "validate-engine/inputs-channels": lambda f: wtconv_trt.validate_engine(f["engine"], inputs=str(f["npy3"])),
    "validate-engine/iterations-zero": lambda f: wtconv_trt.validate_engine(f["engine"], iterations=0),
    "validate-engine/atol-negative": lambda f: wtconv_trt.validate_engine(f["engine"], atol=-1.0),
    "validate-engine/shape-outside": lambda f: wtconv_trt.validate_engine(f["engine"], input_shape=(64, 1, 32, 32)),
    "validate-engine/save-unwritable": lambda f: wtconv_trt.validate_engine(
        f["engine"], save_inputs=str(f["ro"] / "i.json")
    ),
    "validate-engine/save-existing": lambda f: wtconv_trt.validate_engine(f["engine"], save_outputs=str(f["existing"])),
    # --- build
    "build/model-missing": lambda f: wtconv_trt.build_engine(f["missing"]),
    "build/workspace-negative": lambda f: wtconv_trt.build_engine(f["d_onnx"], workspace_mib=-5),
    "build/workspace-zero": lambda f: wtconv_trt.build_engine(f["d_onnx"], workspace_mib=0),
    "build/level-out-of-range": lambda f: wtconv_trt.build_engine(f["d_onnx"], optimization_level=9),
    "build/max-batch-2^31": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], shapes="input:1x1x32x32/8x1x32x32/2147483648x1x32x32"
    ),
    "build/max-shape-elements": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], shapes=["input:1x1x32x32/8x1x32x32/2147483647x1x32x32"]
    ),
    "build/max-shape-layer-elements": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], shapes=["input:1x1x32x32/1000000x1x32x32/2000000x1x32x32"]
    ),
    "build/shapes-channels": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], shapes=["input:1x3x32x32/1x3x32x32/1x3x32x32"]
    ),
    "build/shapes-order": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], shapes=["input:4x1x32x32/2x1x32x32/8x1x32x32"]
    ),
    "build/shapes-rank": lambda f: wtconv_trt.build_engine(f["d_onnx"], shapes=["1x1x32/1x1x32/1x1x32"]),
    "build/shapes-two-shapes": lambda f: wtconv_trt.build_engine(f["d_onnx"], shapes=["input:1x1x32x32/8x1x32x32"]),
    "build/shapes-unknown-input": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], shapes=["images:1x1x32x32/1x1x32x32/1x1x32x32"]
    ),
    "build/model-is-dir": lambda f: wtconv_trt.build_engine(f["dir"]),
    "build/model-empty": lambda f: wtconv_trt.build_engine(f["empty"]),
    "build/model-is-text": lambda f: wtconv_trt.build_engine(f["existing"]),
    "build/plugin-is-text": lambda f: wtconv_trt.build_engine(f["d_onnx"], plugin=f["existing"], engine=f["new"]),
    "build/plugin-is-program": lambda f: wtconv_trt.build_engine(f["d_onnx"], plugin=f["ls"], engine=f["new"]),
    "build/plugin-missing": lambda f: wtconv_trt.build_engine(f["d_onnx"], plugin=f["missing"], engine=f["new"]),
    "build/output-unwritable": lambda f: wtconv_trt.build_engine(f["d_onnx"], engine=f["ro"] / "m.engine"),
    "build/output-is-dir": lambda f: wtconv_trt.build_engine(f["d_onnx"], engine=f["dir"]),
    "build/output-existing": lambda f: wtconv_trt.build_engine(f["d_onnx"], engine=f["existing"]),
    "build/default-output-existing": lambda f: wtconv_trt.build_engine(f["d_onnx"]),
    "build/engine-named-like-a-manifest": lambda f: wtconv_trt.build_engine(
        f["d_onnx"], engine=f"{f['engine']}.json", force=True
    ),
    "build/timing-cache-is-dir": lambda f: wtconv_trt.build_engine(f["d_onnx"], engine=f["new"], timing_cache=f["dir"]),
    # --- bench
    "bench/engine-missing": lambda f: wtconv_trt.benchmark_engine(f["missing"]),
    "bench/iterations-zero": lambda f: wtconv_trt.benchmark_engine(f["engine"], iterations=0),
    "bench/iterations-negative": lambda f: wtconv_trt.benchmark_engine(f["engine"], iterations=-4),
    "bench/warmup-negative": lambda f: wtconv_trt.benchmark_engine(f["engine"], warmup_ms=-1.0),
    "bench/warmup-huge": lambda f: wtconv_trt.benchmark_engine(f["engine"], warmup_ms=1e300),
    "bench/warmup-nan": lambda f: wtconv_trt.benchmark_engine(f["engine"], warmup_ms=NAN),
    "bench/shape-outside": lambda f: wtconv_trt.benchmark_engine(f["engine"], shapes=[(64, 1, 32, 32)]),
    "bench/shape-comma-outside": lambda f: wtconv_trt.benchmark_engine(f["engine"], shapes=["1,1,99,99"]),
    "bench/engine-is-dir": lambda f: wtconv_trt.benchmark_engine(f["dir"]),
    "bench/engine-is-onnx": lambda f: wtconv_trt.benchmark_engine(f["d_onnx"]),
    "bench/engine-manifest-not-utf8": lambda f: wtconv_trt.benchmark_engine(f["engine_latin1"]),
    "bench/json-unwritable": lambda f: wtconv_trt.benchmark_engine(f["engine"], json_path=f["ro"] / "r.json"),
    "bench/json-existing": lambda f: wtconv_trt.benchmark_engine(f["engine"], json_path=f["existing"]),
    # --- bench-layer
    "bench-layer/replays-zero": lambda f: wtconv_trt.benchmark_layers(replays=0),
    "bench-layer/dtypes": lambda f: wtconv_trt.benchmark_layers(dtypes=("fp64",)),
    "bench-layer/dtypes-empty": lambda f: wtconv_trt.benchmark_layers(dtypes=()),
    "bench-layer/out-is-file": lambda f: wtconv_trt.benchmark_layers(f["existing"]),
    "bench-layer/out-unwritable": lambda f: wtconv_trt.benchmark_layers(f["ro"] / "bench"),
    "bench-layer/out-existing": lambda f: wtconv_trt.benchmark_layers(f["bench_dir"]),
    # --- triton-repo
    "triton/engine-missing": lambda f: wtconv_trt.write_triton_repository(f["missing"], f["work"] / "repo2"),
    "triton/instances-huge": lambda f: wtconv_trt.write_triton_repository(
        f["engine"], f["work"] / "repo2", instances=100000000000
    ),
    "triton/instances-zero": lambda f: wtconv_trt.write_triton_repository(
        f["engine"], f["work"] / "repo2", instances=0
    ),
    "triton/delay-negative": lambda f: wtconv_trt.write_triton_repository(
        f["engine"], f["work"] / "repo2", max_queue_delay_us=-1
    ),
    "triton/preferred-batch-zero": lambda f: wtconv_trt.write_triton_repository(
        f["engine"], f["work"] / "repo2", preferred_batch_sizes=[0]
    ),
    "triton/preferred-batch-above-max": lambda f: wtconv_trt.write_triton_repository(
        f["engine_plain"], f["work"] / "repo2", preferred_batch_sizes=[64]
    ),
    "triton/out-is-file": lambda f: wtconv_trt.write_triton_repository(f["engine"], f["existing"]),
    "triton/labels-is-dir": lambda f: wtconv_trt.write_triton_repository(
        f["engine"], f["work"] / "repo2", labels=f["dir"]
    ),
    "triton/engine-is-dir": lambda f: wtconv_trt.write_triton_repository(f["dir"], f["work"] / "repo2"),
    "triton/plugin-static-missing": lambda f: wtconv_trt.write_triton_repository(f["engine"], f["work"] / "repo2"),
    "triton/out-unwritable": lambda f: wtconv_trt.write_triton_repository(f["engine"], f["ro"] / "repo"),
    "triton/out-existing": lambda f: wtconv_trt.write_triton_repository(f["engine_plain"], f["repo"], name="model"),
    "triton/onnx-missing": lambda f: wtconv_trt.write_onnxruntime_repository(f["missing"], f["work"] / "repo2"),
    "triton/onnx-is-an-engine": lambda f: wtconv_trt.write_onnxruntime_repository(f["engine"], f["work"] / "repo2"),
    "triton/onnx-server-path-relative": lambda f: wtconv_trt.write_onnxruntime_repository(
        f["d_onnx"], f["work"] / "repo2", server_path="models"
    ),
    "triton/onnx-ort-library-not-one": lambda f: wtconv_trt.write_onnxruntime_repository(
        f["d_onnx"], f["work"] / "repo2", ort_library=f["existing"]
    ),
    "triton/onnx-max-batch-zero": lambda f: wtconv_trt.write_onnxruntime_repository(
        f["d_onnx"], f["work"] / "repo2", max_batch_size=0
    ),
    "triton/onnx-out-existing": lambda f: wtconv_trt.write_onnxruntime_repository(f["relu1"], f["repo"], name="model"),
    # --- serve (the repository written for serving, or the whole serve)
    "serve/model-missing": lambda f: wtconv_trt.write_serving_repository(f["missing"], f["work"] / "served"),
    "serve/model-is-dir": lambda f: wtconv_trt.write_serving_repository(f["dir"], f["work"] / "served"),
    "serve/instances-zero": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", instances=0
    ),
    "serve/max-batch-negative": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", max_batch_size=-1
    ),
    "serve/port-out-of-range": lambda f: wtconv_trt.serve(f["d_onnx"], http_port=70000),
    "serve/timeout-nan": lambda f: wtconv_trt.serve(f["d_onnx"], timeout=NAN),
    "serve/timeout-zero": lambda f: wtconv_trt.serve(f["d_onnx"], timeout=0.0),
    "serve/concurrency-zero": lambda f: wtconv_trt.serve(f["d_onnx"], concurrency=0),
    "serve/port-taken": lambda f: wtconv_trt.serve(f["d_onnx"], f["work"] / "served", http_port=f["busy_port"]),
    "serve/runtime-impossible": lambda f: wtconv_trt.serve(f["d_onnx"], f["work"] / "served", runtime="tensorrt"),
    "serve/repo-is-file": lambda f: wtconv_trt.write_serving_repository(f["d_onnx"], f["existing"]),
    "serve/repo-unwritable": lambda f: wtconv_trt.write_serving_repository(f["d_onnx"], f["ro"] / "served"),
    "serve/device-with-a-gpu-runtime": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", runtime="torch-cuda", device="cpu"
    ),
    "serve/device-cuda-without-the-ep": lambda f: wtconv_trt.serve(
        f["d_onnx"], f["work"] / "served", runtime="onnxruntime", device=f["no_cuda_ep"]
    ),
    "serve/engine-manifest-not-utf8": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", engine=f["engine_latin1"]
    ),
    "serve/engine-of-another-model": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", engine=f["engine_tiny"]
    ),
    "serve/engine-of-another-onnx-file": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", engine=f["engine_other_onnx"]
    ),
    "serve/host-not-this-machine": lambda f: wtconv_trt.serve(f["d_onnx"], f["work"] / "served", host="192.0.2.1"),
    "serve/host-not-an-address": lambda f: wtconv_trt.serve(f["d_onnx"], f["work"] / "served", host="999.1.1.1"),
    "serve/host-unresolvable": lambda f: wtconv_trt.serve(
        f["d_onnx"], f["work"] / "served", host="no-such-host.invalid"
    ),
    "serve/soak-zero": lambda f: wtconv_trt.serve(f["d_onnx"], soak_s=0.0),
    "serve/sample-every-zero": lambda f: wtconv_trt.serve(f["d_onnx"], soak_s=5.0, sample_every_s=0.0),
    "serve/gpus-repeated": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", gpus=(0, 0)
    ),
    "serve/gpus-with-cpu-instances": lambda f: wtconv_trt.serve(
        f["d_onnx"], f["work"] / "served", gpus=(0,), runtime="onnxruntime", device="cpu"
    ),
    "serve/gpus-with-model-instances": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", gpus=(1,), instance_kind="model"
    ),
    "serve/gpus-not-visible": lambda f: wtconv_trt.serve(
        f["d_onnx"], f["work"] / "served", gpus=(int(f["gpu_not_visible"]),)
    ),
    "serve/mps-on-the-cpu": lambda f: wtconv_trt.serve(
        f["d_onnx"], f["work"] / "served", runtime="onnxruntime", device="cpu", mps=True
    ),
    "serve/ort-library-not-one": lambda f: wtconv_trt.write_serving_repository(
        f["d_onnx"], f["work"] / "served", ort_library=f["existing"]
    ),
    # --- build-libs
    "build-libs/jobs-zero": lambda f: wtconv_trt.build_libraries(jobs=0),
    "build-libs/headers-missing": lambda f: wtconv_trt.build_libraries(f["missing_dir"]),
    "build-libs/headers-not-tensorrt": lambda f: wtconv_trt.build_libraries(f["dir"]),
    "build-libs/build-dir-is-file": lambda f: wtconv_trt.build_libraries(build_dir=f["existing"]),
    "build-libs/onnxruntime-headers-missing": lambda f: wtconv_trt.build_libraries(
        onnxruntime_headers=f["missing_dir"]
    ),
    "build-libs/no-cuda-with-tensorrt": lambda f: wtconv_trt.build_libraries(f["dir"], cuda=False),
}

# Cases that exist only on a command line, with why.
SYNTAX = {
    "no-subcommand": "no subcommand",
    "unknown-subcommand": "no such subcommand",
    "demo/missing-value": "an option without its value",
    "demo/count-type": "text that is not an integer",
    "export/missing-output": "a required option left out",
    "export/missing-value": "an option without its value",
    "export/unknown-arch": "a choice argparse refuses",
    "export/opset-type": "text that is not an integer",
    "export/seed-type": "text that is not an integer",
    "export/num-classes-type": "text that is not an integer",
    "export/ops-choice": "a choice argparse refuses",
    "export/precision-choice": "a choice argparse refuses",
    "export/runtime-choice": "a choice argparse refuses",
    "export/layout-choice": "a choice argparse refuses",
    "export/shape-zero": "shape text argparse parses",
    "export/shape-type": "shape text argparse parses",
    "export/shape-rank": "shape text argparse parses",
    "export/shape-mixed-separators": "shape text argparse parses",
    "validate/missing-target": "neither MODEL.onnx nor --engine",
    "validate/tolerance-type": "text that is not a number",
    "validate/iterations-negative": "an engine option given to the ONNX validation (no such API parameter)",
    "validate/iterations-on-onnx": "an engine option given to the ONNX validation (no such API parameter)",
    "build/missing-model": "a required argument left out",
    "build/workspace-type": "text that is not an integer",
    "build/level-type": "text that is not an integer",
    "build/precision-choice": "a choice argparse refuses",
    "bench/missing-engine-option": "a required option left out",
    "bench/iterations-type": "text that is not an integer",
    "bench/warmup-type": "text that is not a number",
    "bench/shape-type": "shape text argparse parses",
    "bench-layer/replays-type": "text that is not an integer",
    "triton/missing-out": "a required option left out",
    "triton/instances-type": "text that is not an integer",
    "triton/gpus-type": "text that is not a list of GPU indices",
    "triton/gpus-negative": "text that is not a list of GPU indices",
    "serve/missing-model": "a required argument left out",
    "serve/runtime-choice": "a choice argparse refuses",
    "doctor/extra-argument": "an argument doctor does not take",
    "doctor/ort-library-and-rtx-env": "two options argparse takes one of",
    "validate/device-with-engine": "an ONNX Runtime option given to the engine validation (no such API parameter)",
    "triton/onnx-and-engine": "two options argparse takes one of",
    "triton/onnx-with-plugin-static": "an option of the other backend's repository (no such API parameter)",
    "triton/engine-with-ort-library": "an option of the other backend's repository (no such API parameter)",
    "triton/onnx-instance-kind": "a choice argparse refuses",
    "serve/device-choice": "a choice argparse refuses",
    "serve/shared-memory-choice": "a choice argparse refuses",
    "serve/connections-choice": "a choice argparse refuses",
    "serve/gpus-empty": "text that is not a list of GPU indices",
}

BY_ID = {case_id: argv for case_id, argv, _ in CASES}


def test_every_case_has_a_twin_or_a_reason():
    """A new row of the command-line table needs its API twin here (or a reason why it has none)."""
    ids = set(BY_ID)
    assert not set(TWINS) & set(SYNTAX)
    assert ids - set(SYNTAX) == set(TWINS), (sorted(ids - set(SYNTAX) - set(TWINS)), sorted(set(TWINS) - ids))


def _command_line_message(argv, capsys) -> str:
    capsys.readouterr()
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2, (argv, err)
    line = err.strip()
    return re.sub(r"^wtconv-trt [\w-]+: error: ", "", line)


@pytest.mark.parametrize("case_id", sorted(TWINS))
def test_api_raises_the_same_error_and_writes_nothing(case_id, files, capsys, monkeypatch):  # noqa: F811
    argv = BY_ID[case_id]
    needs = {name for arg in argv for name in re.findall(r"{(\w+)}", arg)}
    missing = sorted(n for n in needs if files.get(n) is None)
    if missing:
        pytest.skip(f"this machine has no {', '.join(missing)} for this case (e.g. no unwritable directory)")
    monkeypatch.chdir(files["cwd"])
    expected = _command_line_message(
        [a.format(**{k: v for k, v in files.items() if v is not None}) for a in argv], capsys
    )
    before = _snapshot(files["work"])
    with pytest.raises(wtconv_trt.WtconvTrtError) as error:
        TWINS[case_id](files)
    assert _snapshot(files["work"]) == before, "a file was created, changed or removed"
    api_message = " ".join(str(error.value).split())
    typed = [a for a in argv if re.fullmatch(r"--?[a-z][a-z-]*", a)]
    named = [o for o in typed if re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", _outside_commands(api_message))]
    assert not named, f"the API's message names the command-line option {named}: {api_message}"
    options = cli.build_parser().parse_args([a.format(**files) for a in argv])._options
    assert cli.command_line_message(error.value, options) == expected


def _outside_commands(message: str) -> str:
    """The message without the commands it quotes for the user to run ('wtconv-trt build-libs --tensorrt-headers ..."""
    return re.sub(r"'?wtconv-trt [a-z-]+[^;'()]*'?", "", message)


def test_the_command_line_and_the_api_word_the_same_refusal():
    """One refusal, two wordings: the API names its parameter, the command line the option that sets it."""
    with pytest.raises(wtconv_trt.WtconvTrtError) as error:
        wtconv_trt.write_triton_repository("model.engine", "repo", instances=0)
    assert str(error.value) == "instances: expected an integer from 1 to 64, got 0"
    assert error.value.parameter == "instances"
    options = cli.build_parser().parse_args(["triton-repo", "--engine", "m.engine", "--out", "r"])._options
    assert (
        cli.command_line_message(error.value, options)
        == "argument --instances: expected an integer from 1 to 64, got 0"
    )
    error = wtconv_trt.WtconvTrtError("out /x already exists; pass force=True to overwrite it", parameter="out")
    assert cli.command_line_message(error, options) == "--out /x already exists; pass --force to overwrite it"
    error = wtconv_trt.WtconvTrtError("cuda=False: needs nvcc; leave out tensorrt_headers or pass ort_library=LIB")
    libs = cli.build_parser().parse_args(["build-libs"])._options
    assert (
        cli.command_line_message(error, libs)
        == "--no-cuda: needs nvcc; leave out tensorrt_headers or pass ort_library=LIB"
    )
