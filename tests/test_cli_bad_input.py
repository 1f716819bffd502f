"""Every subcommand with every kind of bad argument: missing, wrong type, out of range, wrong shape, wrong file
kind, unwritable output, existing output. Each case must end with exit status 2, exactly one non-empty line on
stderr (``wtconv-trt ...: error: ...``, naming what was expected), no traceback, and no file created, changed or
removed. The command line runs in-process (``wtconv_trt.cli.main``); Ctrl-C runs in a subprocess.

The model files are made once per module: the shipped default model exported (a few seconds), a static export, tiny
Relu-only ONNX models and a fake engine with its manifest (no TensorRT needed: every case fails before it).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import fake_engine, tiny_onnx

from wtconv_trt import cli

pytest.importorskip("onnx")


def _unwritable_dir(base: Path) -> Path | None:
    """A directory in which files cannot be created, even by root (permission bits do not stop root)."""
    ro = base / "read-only"
    ro.mkdir()
    ro.chmod(0o555)
    candidates = [ro, Path("/sys/kernel"), Path("/proc/self")]
    for directory in candidates:
        try:
            fd, probe = tempfile.mkstemp(dir=directory)
        except OSError:
            return directory
        os.close(fd)
        os.unlink(probe)
    return None


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    work = tmp_path_factory.mktemp("bad_input")
    f = {"work": work}
    f["d_onnx"] = work / "d.onnx"
    f["s_onnx"] = work / "s.onnx"
    assert cli.main(["export", "-o", str(f["d_onnx"])]) == 0
    # A static export's input as 'export --static' writes it (fixed 1,1,32,32): the cases using it fail on the input
    # dimensions before anything runs, so the graph itself need not be traced again.
    import onnx

    proto = onnx.load(str(f["d_onnx"]))
    for dim, value in zip(proto.graph.input[0].type.tensor_type.shape.dim, (1, 1, 32, 32), strict=False):
        dim.dim_value = value
    onnx.save(proto, str(f["s_onnx"]))
    f["relu1"] = Path(tiny_onnx(work / "relu1.onnx", dims=("batch", 1, 32, 32)))
    f["relu3"] = Path(tiny_onnx(work / "relu3.onnx", dims=("batch", 3, 32, 32)))
    f["empty"] = work / "empty.onnx"
    f["empty"].write_bytes(b"")
    f["dir"] = work / "a-directory"
    f["dir"].mkdir()
    f["existing"] = work / "precious.txt"
    f["existing"].write_text("keep me\n")
    f["text_pth"] = work / "notes.pth"
    f["text_pth"].write_text("these are my notes, not a checkpoint\n")
    # The head and stem of a 10-class checkpoint as torch.save writes them: the class count is read from these two
    # before the other weights are needed, so the case fails before them.
    import torch

    f["ckpt10"] = work / "ckpt10.pth"
    torch.save({"stem.0.weight": torch.zeros(96, 3, 4, 4), "head.fc.weight": torch.zeros(10, 768)}, f["ckpt10"])
    f["whole_pth"] = work / "whole_model.pth"  # torch.save(model): a pickled module, not a state_dict
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)), f["whole_pth"])
    f["npy3"] = work / "three_channels.npy"
    np.save(f["npy3"], np.zeros((2, 3, 32, 32), np.float32))
    f["npy_small"] = work / "small.npy"
    np.save(f["npy_small"], np.zeros((1, 1, 8, 8), np.float32))
    f["npy_int"] = work / "ints.npy"
    np.save(f["npy_int"], np.zeros((1, 1, 32, 32), np.int64))
    engines = work / "engines"
    engines.mkdir()
    f["engine"], _ = fake_engine(engines)
    plain = work / "engines-without-plugin"
    plain.mkdir()
    f["engine_plain"], _ = fake_engine(plain, plugin=False)
    # A WTConvNeXt-T engine (3x224x224 fp16 -> 1000) and an engine of the digits model's shapes built from another
    # ONNX file: neither may be served beside the digits export d.onnx.
    tiny = work / "engines-tiny"
    tiny.mkdir()
    f["engine_tiny"], _ = fake_engine(
        tiny,
        name="tiny.fp16.engine",
        input_shape=(-1, 3, 224, 224),
        output_shape=(-1, 1000),
        profiles=["input:1x3x224x224/8x3x224x224/32x3x224x224"],
    )
    other = work / "engines-other-onnx"
    other.mkdir()
    f["engine_other_onnx"], _ = fake_engine(other, name="d.fp32.engine", precision="fp32", dtype="float32")
    # An engine whose manifest is not UTF-8 (a file name written in Latin-1).
    latin1 = work / "engines-latin1"
    latin1.mkdir()
    f["engine_latin1"], _ = fake_engine(latin1)
    manifest = latin1 / (f["engine_latin1"].name + ".json")
    manifest.write_bytes(manifest.read_bytes().replace(b'"model.onnx"', '"modèle.onnx"'.encode("latin-1")))
    f["engine_no_manifest"] = work / "lonely.engine"
    f["engine_no_manifest"].write_bytes(b"plan bytes without a manifest")
    f["demo_dir"] = work / "demo_out"
    f["demo_dir"].mkdir()
    shutil.copy(f["d_onnx"], f["demo_dir"] / "default_plugin_fp32.onnx")
    f["bench_dir"] = work / "bench_out"
    f["bench_dir"].mkdir()
    (f["bench_dir"] / "bench_layer.json").write_text("{}\n")
    f["repo"] = work / "repo"
    (f["repo"] / "model").mkdir(parents=True)
    (f["repo"] / "model" / "config.pbtxt").write_text('name: "model"\n')
    (work / "d.fp32.engine").write_bytes(b"an engine built earlier")  # build's default output for d.onnx
    f["missing"] = work / "no-such-file.onnx"
    f["new"] = work / "new-output.onnx"
    f["missing_dir"] = work / "no-such-dir"
    f["cwd"] = work / "cwd"
    f["cwd"].mkdir()
    f["ro"] = _unwritable_dir(work)
    f["ls"] = Path("/usr/bin/ls") if Path("/usr/bin/ls").is_file() else None
    # "cuda" where this onnxruntime has no CUDA execution provider (the CPU wheel): the rows refusing --device cuda
    # for that reason run there and skip where onnxruntime-gpu offers it.
    import onnxruntime

    f["no_cuda_ep"] = None if "CUDAExecutionProvider" in onnxruntime.get_available_providers() else "cuda"
    from wtconv_serving.server.launcher import visible_gpus

    f["gpu_not_visible"] = str(visible_gpus())  # the first index past the GPUs a server started here would see
    busy = socket.socket()  # a port something listens on, for the whole module
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    f["busy_port"], f["busy_socket"] = busy.getsockname()[1], busy
    yield f
    busy.close()


# (id, argv, a phrase the one error line must contain). {name} is replaced by the fixture's path of that name.
CASES = [
    # --- any subcommand: unknown options, no subcommand
    ("no-subcommand", [], "required: COMMAND"),
    ("unknown-subcommand", ["deploy"], "invalid choice: 'deploy'"),
    # --- demo
    ("demo/missing-value", ["demo", "--count"], "expected one argument"),
    ("demo/count-type", ["demo", "--count", "many"], "expected an integer"),
    ("demo/count-zero", ["demo", "--count", "0"], "from 1 to"),
    ("demo/count-negative", ["demo", "--count", "-3"], "from 1 to"),
    ("demo/tolerance-nan", ["demo", "--tolerance", "nan"], "finite"),
    ("demo/tolerance-inf", ["demo", "--tolerance", "inf"], "finite"),
    ("demo/tolerance-negative", ["demo", "--tolerance", "-1"], "> 0"),
    ("demo/tolerance-zero", ["demo", "--tolerance", "0"], "> 0"),
    ("demo/onnx-dir-is-file", ["demo", "--onnx-dir", "{existing}"], "is a file, not a directory"),
    ("demo/onnx-dir-unwritable", ["demo", "--onnx-dir", "{ro}/out"], "cannot create files"),
    ("demo/onnx-dir-existing", ["demo", "--onnx-dir", "{demo_dir}"], "pass --force"),
    # --- export
    ("export/missing-output", ["export"], "required: -o"),
    ("export/missing-value", ["export", "-o"], "expected one argument"),
    (
        "export/arch-without-weights",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny"],
        "exactly one of --checkpoint FILE or --random-weights",
    ),
    ("export/checkpoint-without-arch", ["export", "-o", "{new}", "--checkpoint", "{text_pth}"], "need --arch"),
    ("export/unknown-arch", ["export", "-o", "{new}", "--arch", "resnet50"], "invalid choice"),
    ("export/opset-type", ["export", "-o", "{new}", "--opset", "eighteen"], "expected an integer"),
    ("export/seed-type", ["export", "-o", "{new}", "--seed", "1.5"], "expected an integer"),
    ("export/ops-choice", ["export", "-o", "{new}", "--ops", "fancy"], "invalid choice"),
    ("export/precision-choice", ["export", "-o", "{new}", "--precision", "int8"], "invalid choice"),
    ("export/runtime-choice", ["export", "-o", "{new}", "--runtime", "tvm"], "invalid choice"),
    ("export/layout-choice", ["export", "-o", "{new}", "--layout", "nhwc"], "invalid choice"),
    (
        "export/layout-with-standard-ops",
        ["export", "-o", "{new}", "--ops", "standard", "--layout", "channels_last"],
        "channels_last needs --ops plugin",
    ),
    ("export/seed-huge", ["export", "-o", "{new}", "--seed", "99999999999999999999"], "from 0 to"),
    ("export/seed-negative", ["export", "-o", "{new}", "--seed", "-1"], "from 0 to"),
    ("export/opset-huge", ["export", "-o", "{new}", "--opset", "99999"], "from 18 to"),
    ("export/opset-old", ["export", "-o", "{new}", "--opset", "17"], "from 18 to"),
    ("export/shape-too-small", ["export", "-o", "{new}", "--input-shape", "1,1,1,1"], "at least 16"),
    ("export/shape-too-large", ["export", "-o", "{new}", "--input-shape", "1,1,100000,100000"], "GiB"),
    ("export/shape-zero", ["export", "-o", "{new}", "--input-shape", "0,1,32,32"], "from 1 to"),
    ("export/shape-type", ["export", "-o", "{new}", "--input-shape", "a,b,c,d"], "positive integers"),
    ("export/shape-channels", ["export", "-o", "{new}", "--input-shape", "1,3,32,32"], "1 input channel"),
    ("export/shape-rank", ["export", "-o", "{new}", "--input-shape", "1,1,32"], "4 dimensions"),
    ("export/shape-mixed-separators", ["export", "-o", "{new}", "--input-shape", "1x1,32,32"], "separated by"),
    ("export/output-is-dir", ["export", "-o", "{dir}"], "is a directory"),
    (
        "export/checkpoint-is-text",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--checkpoint", "{text_pth}"],
        "not a PyTorch checkpoint",
    ),
    (
        "export/checkpoint-whole-model",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--checkpoint", "{whole_pth}"],
        "holds a whole model (a pickled torch.nn.modules.container.Sequential, as torch.save(model) writes)",
    ),
    (
        "export/checkpoint-empty",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--checkpoint", "{empty}"],
        "is empty",
    ),
    (
        "export/checkpoint-missing",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--checkpoint", "{missing}"],
        "does not exist",
    ),
    (
        "export/checkpoint-is-dir",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--checkpoint", "{dir}"],
        "not a file",
    ),
    (
        "export/num-classes-negative",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--random-weights", "--num-classes", "-1"],
        "--num-classes: expected an integer from 0 to 100000",
    ),
    (
        "export/in-chans-zero",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--random-weights", "--in-chans", "0"],
        "--in-chans: expected an integer from 1 to 1024",
    ),
    ("export/num-classes-type", ["export", "-o", "{new}", "--num-classes", "ten"], "expected an integer"),
    ("export/num-classes-without-arch", ["export", "-o", "{new}", "--num-classes", "10"], "need --arch"),
    (
        "export/num-classes-not-the-checkpoint-s",
        ["export", "-o", "{new}", "--arch", "wtconvnext_tiny", "--checkpoint", "{ckpt10}", "--num-classes", "1000"],
        "--num-classes 1000 was asked for, but checkpoint",
    ),
    ("export/output-unwritable", ["export", "-o", "{ro}/m.onnx"], "cannot create files"),
    ("export/output-dir-missing", ["export", "-o", "{missing_dir}/m.onnx"], "does not exist"),
    ("export/output-existing", ["export", "-o", "{existing}"], "already exists; pass --force"),
    # --- validate (ONNX)
    ("validate/missing-target", ["validate"], "one of the arguments"),
    ("validate/model-missing", ["validate", "{missing}"], "does not exist"),
    ("validate/tolerance-type", ["validate", "{d_onnx}", "--tolerance", "tight"], "expected a number"),
    ("validate/tolerance-negative", ["validate", "{d_onnx}", "--tolerance", "-1"], "> 0"),
    ("validate/tolerance-zero", ["validate", "{d_onnx}", "--tolerance", "0"], "> 0"),
    ("validate/tolerance-nan", ["validate", "{d_onnx}", "--tolerance", "nan"], "finite"),
    ("validate/iterations-negative", ["validate", "{d_onnx}", "--iterations", "-4"], "from 1 to"),
    ("validate/iterations-on-onnx", ["validate", "{d_onnx}", "--iterations", "4"], "only with --engine"),
    ("validate/seed-huge", ["validate", "{d_onnx}", "--seed", "99999999999999999999"], "from 0 to"),
    ("validate/shape-channels", ["validate", "{d_onnx}", "--input-shape", "1,3,32,32"], "1 input channel"),
    ("validate/shape-too-small", ["validate", "{d_onnx}", "--input-shape", "1,1,4,4"], "at least 16"),
    ("validate/inputs-channels", ["validate", "{d_onnx}", "--inputs", "{npy3}"], "1 input channel"),
    ("validate/inputs-too-small", ["validate", "{d_onnx}", "--inputs", "{npy_small}"], "at least 16"),
    ("validate/static-batch", ["validate", "{s_onnx}", "--input-shape", "2,1,32,32"], "fixed at 1,1,32,32"),
    ("validate/onnx-other-channels", ["validate", "{relu3}"], "does not say which PyTorch model"),
    (
        "validate/onnx-not-from-arch",
        ["validate", "{relu1}", "--arch", "wtconvnext_tiny", "--random-weights"],
        "input channels",
    ),
    (
        "validate/onnx-output-not-from-arch",
        ["validate", "{relu3}", "--arch", "wtconvnext_tiny", "--random-weights"],
        "do not match",
    ),
    ("validate/model-is-dir", ["validate", "{dir}"], "is a directory"),
    ("validate/model-empty", ["validate", "{empty}"], "is empty"),
    (
        "validate/engine-as-model",
        ["validate", "{engine}"],
        "is a TensorRT engine, not an ONNX model: validate it with --engine",
    ),
    ("validate/in-chans-default-model", ["validate", "{d_onnx}", "--in-chans", "3"], "need --arch"),
    ("validate/model-is-text", ["validate", "{existing}"], "cannot read"),
    ("validate/inputs-is-text", ["validate", "{d_onnx}", "--inputs", "{existing}"], "not a .npy or .npz file"),
    (
        "validate/engine-manifest-not-utf8",
        ["validate", "--engine", "{engine_latin1}"],
        "not UTF-8 text",
    ),
    ("validate/inputs-int", ["validate", "{d_onnx}", "--inputs", "{npy_int}"], "float"),
    ("validate/inputs-missing", ["validate", "{d_onnx}", "--inputs", "{missing}"], "does not exist"),
    ("validate/device-unknown", ["validate", "{d_onnx}", "--device", "tpu"], "expected cpu, cuda or cuda:N"),
    ("validate/device-index-huge", ["validate", "{d_onnx}", "--device", "cuda:4096"], "GPU index from 0 to 1023"),
    (
        "validate/device-cuda-without-the-ep",
        ["validate", "{d_onnx}", "--device", "{no_cuda_ep}"],
        "has no CUDAExecutionProvider",
    ),
    ("validate/device-with-engine", ["validate", "--engine", "{engine}", "--device", "cuda"], "only with MODEL.onnx"),
    ("validate/ort-library-missing", ["validate", "{d_onnx}", "--ort-library", "{missing}"], "does not exist"),
    (
        "validate/ort-library-not-one",
        ["validate", "{d_onnx}", "--ort-library", "{existing}"],
        "is not libwtconv_ort.so",
    ),
    # --- validate --engine
    ("validate-engine/missing", ["validate", "--engine", "{missing}"], "does not exist; build one"),
    ("validate-engine/is-dir", ["validate", "--engine", "{dir}"], "is a directory"),
    ("validate-engine/empty", ["validate", "--engine", "{empty}"], "is empty"),
    ("validate-engine/no-manifest", ["validate", "--engine", "{engine_no_manifest}"], "manifest"),
    (
        "validate-engine/model-not-from-engine",
        ["validate", "--engine", "{engine}", "--arch", "wtconvnext_tiny", "--random-weights"],
        "input channels",
    ),
    (
        "validate-engine/inputs-channels",
        ["validate", "--engine", "{engine}", "--inputs", "{npy3}"],
        "fixed at ?,1,32,32",
    ),
    ("validate-engine/iterations-zero", ["validate", "--engine", "{engine}", "--iterations", "0"], "from 1 to"),
    ("validate-engine/atol-negative", ["validate", "--engine", "{engine}", "--atol", "-1"], ">= 0"),
    (
        "validate-engine/shape-outside",
        ["validate", "--engine", "{engine}", "--input-shape", "64,1,32,32"],
        "outside every optimisation profile",
    ),
    (
        "validate-engine/save-unwritable",
        ["validate", "--engine", "{engine}", "--save-inputs", "{ro}/i.json"],
        "cannot create files",
    ),
    (
        "validate-engine/save-existing",
        ["validate", "--engine", "{engine}", "--save-outputs", "{existing}"],
        "already exists; pass --force",
    ),
    # --- build
    ("build/missing-model", ["build"], "required: MODEL.onnx"),
    ("build/model-missing", ["build", "{missing}"], "does not exist"),
    ("build/workspace-type", ["build", "{d_onnx}", "--workspace", "lots"], "expected an integer"),
    ("build/level-type", ["build", "{d_onnx}", "--optimization-level", "high"], "expected an integer"),
    ("build/precision-choice", ["build", "{d_onnx}", "--precision", "int8"], "invalid choice"),
    ("build/workspace-negative", ["build", "{d_onnx}", "--workspace", "-5"], "from 1 to"),
    ("build/workspace-zero", ["build", "{d_onnx}", "--workspace", "0"], "from 1 to"),
    ("build/level-out-of-range", ["build", "{d_onnx}", "--optimization-level", "9"], "from 0 to 5"),
    (
        "build/max-batch-2^31",
        ["build", "{d_onnx}", "--shapes", "input:1x1x32x32/8x1x32x32/2147483648x1x32x32"],
        "from 1 to 2147483647",
    ),
    (
        "build/max-shape-elements",
        ["build", "{d_onnx}", "--shapes", "input:1x1x32x32/8x1x32x32/2147483647x1x32x32"],
        "elements",
    ),
    (
        "build/max-shape-layer-elements",
        ["build", "{d_onnx}", "--shapes", "input:1x1x32x32/1000000x1x32x32/2000000x1x32x32"],
        "the output of layer 'stages.0.blocks.0.mlp.fc1' (MatMul) would be 2000000x16x16x64",
    ),
    ("build/shapes-channels", ["build", "{d_onnx}", "--shapes", "input:1x3x32x32/1x3x32x32/1x3x32x32"], "fixed at 1"),
    (
        "build/shapes-order",
        ["build", "{d_onnx}", "--shapes", "input:4x1x32x32/2x1x32x32/8x1x32x32"],
        "min <= opt <= max",
    ),
    ("build/shapes-rank", ["build", "{d_onnx}", "--shapes", "1x1x32/1x1x32/1x1x32"], "rank"),
    ("build/shapes-two-shapes", ["build", "{d_onnx}", "--shapes", "input:1x1x32x32/8x1x32x32"], "three shapes"),
    (
        "build/shapes-unknown-input",
        ["build", "{d_onnx}", "--shapes", "images:1x1x32x32/1x1x32x32/1x1x32x32"],
        "no input named 'images'",
    ),
    ("build/model-is-dir", ["build", "{dir}"], "is a directory"),
    ("build/model-empty", ["build", "{empty}"], "is empty"),
    ("build/model-is-text", ["build", "{existing}"], "ONNX"),
    ("build/plugin-is-text", ["build", "{d_onnx}", "--plugin", "{existing}", "-o", "{new}"], "not an ELF"),
    ("build/plugin-is-program", ["build", "{d_onnx}", "--plugin", "{ls}", "-o", "{new}"], "getCreators"),
    ("build/plugin-missing", ["build", "{d_onnx}", "--plugin", "{missing}", "-o", "{new}"], "does not exist"),
    ("build/output-unwritable", ["build", "{d_onnx}", "-o", "{ro}/m.engine"], "cannot create files"),
    ("build/output-is-dir", ["build", "{d_onnx}", "-o", "{dir}"], "is a directory"),
    ("build/output-existing", ["build", "{d_onnx}", "-o", "{existing}"], "already exists; pass --force"),
    ("build/default-output-existing", ["build", "{d_onnx}"], "already exists; pass --force"),
    ("build/engine-named-like-a-manifest", ["build", "{d_onnx}", "-o", "{engine}.json", "--force"], "end in .json"),
    ("build/timing-cache-is-dir", ["build", "{d_onnx}", "-o", "{new}", "--timing-cache", "{dir}"], "is a directory"),
    # --- bench
    ("bench/missing-engine-option", ["bench"], "required: --engine"),
    ("bench/engine-missing", ["bench", "--engine", "{missing}"], "does not exist; build one"),
    ("bench/iterations-type", ["bench", "--engine", "{engine}", "--iterations", "many"], "expected an integer"),
    ("bench/warmup-type", ["bench", "--engine", "{engine}", "--warmup", "soon"], "expected a number"),
    ("bench/shape-type", ["bench", "--engine", "{engine}", "--shape", "axb"], "positive integers"),
    ("bench/iterations-zero", ["bench", "--engine", "{engine}", "--iterations", "0"], "from 1 to"),
    ("bench/iterations-negative", ["bench", "--engine", "{engine}", "--iterations", "-4"], "from 1 to"),
    ("bench/warmup-negative", ["bench", "--engine", "{engine}", "--warmup", "-1"], "from 0 to 600000"),
    ("bench/warmup-huge", ["bench", "--engine", "{engine}", "--warmup", "1e300"], "from 0 to 600000"),
    ("bench/warmup-nan", ["bench", "--engine", "{engine}", "--warmup", "nan"], "finite"),
    (
        "bench/shape-outside",
        ["bench", "--engine", "{engine}", "--shape", "64x1x32x32"],
        "outside every optimisation profile",
    ),
    (
        "bench/shape-comma-outside",
        ["bench", "--engine", "{engine}", "--shape", "1,1,99,99"],
        "outside every optimisation profile",
    ),
    ("bench/engine-is-dir", ["bench", "--engine", "{dir}"], "is a directory"),
    ("bench/engine-is-onnx", ["bench", "--engine", "{d_onnx}"], "manifest"),
    ("bench/engine-manifest-not-utf8", ["bench", "--engine", "{engine_latin1}"], "not UTF-8 text"),
    ("bench/json-unwritable", ["bench", "--engine", "{engine}", "--json", "{ro}/r.json"], "cannot create files"),
    ("bench/json-existing", ["bench", "--engine", "{engine}", "--json", "{existing}"], "already exists"),
    # --- bench-layer (the checks come before any CUDA work)
    ("bench-layer/replays-type", ["bench-layer", "--replays", "many"], "expected an integer"),
    ("bench-layer/replays-zero", ["bench-layer", "--replays", "0"], "from 1 to"),
    ("bench-layer/dtypes", ["bench-layer", "--dtypes", "fp64"], "fp32, fp16, bf16"),
    ("bench-layer/dtypes-empty", ["bench-layer", "--dtypes", ","], "fp32, fp16, bf16"),
    ("bench-layer/out-is-file", ["bench-layer", "--out", "{existing}"], "is a file"),
    ("bench-layer/out-unwritable", ["bench-layer", "--out", "{ro}/bench"], "cannot create files"),
    ("bench-layer/out-existing", ["bench-layer", "--out", "{bench_dir}"], "pass --force"),
    # --- triton-repo
    ("triton/missing-out", ["triton-repo", "--engine", "{engine}"], "required: --out"),
    (
        "triton/engine-missing",
        ["triton-repo", "--engine", "{missing}", "--out", "{work}/repo2"],
        "does not exist; build one",
    ),
    (
        "triton/instances-type",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--instances", "two"],
        "expected an integer",
    ),
    (
        "triton/instances-huge",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--instances", "100000000000"],
        "from 1 to 64",
    ),
    (
        "triton/instances-zero",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--instances", "0"],
        "from 1 to 64",
    ),
    (
        "triton/gpus-type",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--gpus", "a"],
        "GPU indices",
    ),
    (
        "triton/gpus-negative",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--gpus", "-1"],
        "GPU indices",
    ),
    (
        "triton/delay-negative",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--max-queue-delay-us", "-1"],
        "from 0 to",
    ),
    (
        "triton/preferred-batch-zero",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--preferred-batch", "0"],
        "from 1 to",
    ),
    (
        "triton/preferred-batch-above-max",
        ["triton-repo", "--engine", "{engine_plain}", "--out", "{work}/repo2", "--preferred-batch", "64"],
        "max_batch_size",
    ),
    ("triton/out-is-file", ["triton-repo", "--engine", "{engine}", "--out", "{existing}"], "is a file"),
    (
        "triton/labels-is-dir",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--labels", "{dir}"],
        "is a directory",
    ),
    ("triton/engine-is-dir", ["triton-repo", "--engine", "{dir}", "--out", "{work}/repo2"], "is a directory"),
    (
        "triton/plugin-static-missing",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2"],
        "--plugin-static",
    ),
    ("triton/out-unwritable", ["triton-repo", "--engine", "{engine}", "--out", "{ro}/repo"], "cannot create files"),
    (
        "triton/out-existing",
        ["triton-repo", "--engine", "{engine_plain}", "--out", "{repo}", "--name", "model"],
        "pass --force",
    ),
    # --- triton-repo --onnx (the onnxruntime backend)
    ("triton/onnx-missing", ["triton-repo", "--onnx", "{missing}", "--out", "{work}/repo2"], "does not exist"),
    (
        "triton/onnx-is-an-engine",
        ["triton-repo", "--onnx", "{engine}", "--out", "{work}/repo2"],
        "give the exported ONNX model",
    ),
    (
        "triton/onnx-and-engine",
        ["triton-repo", "--onnx", "{d_onnx}", "--engine", "{engine}", "--out", "{work}/repo2"],
        "not allowed with argument",
    ),
    (
        "triton/onnx-with-plugin-static",
        ["triton-repo", "--onnx", "{d_onnx}", "--out", "{work}/repo2", "--plugin-static", "{existing}"],
        "applies only with --engine",
    ),
    (
        "triton/engine-with-ort-library",
        ["triton-repo", "--engine", "{engine}", "--out", "{work}/repo2", "--ort-library", "{existing}"],
        "applies only with --onnx",
    ),
    (
        "triton/onnx-server-path-relative",
        ["triton-repo", "--onnx", "{d_onnx}", "--out", "{work}/repo2", "--server-path", "models"],
        "absolute path",
    ),
    (
        "triton/onnx-ort-library-not-one",
        ["triton-repo", "--onnx", "{d_onnx}", "--out", "{work}/repo2", "--ort-library", "{existing}"],
        "is not libwtconv_ort.so",
    ),
    (
        "triton/onnx-max-batch-zero",
        ["triton-repo", "--onnx", "{d_onnx}", "--out", "{work}/repo2", "--max-batch-size", "0"],
        "--max-batch-size: expected an integer from 1 to",
    ),
    (
        "triton/onnx-instance-kind",
        ["triton-repo", "--onnx", "{d_onnx}", "--out", "{work}/repo2", "--instance-kind", "tpu"],
        "invalid choice",
    ),
    (
        "triton/onnx-out-existing",
        ["triton-repo", "--onnx", "{relu1}", "--out", "{repo}", "--name", "model"],
        "pass --force",
    ),
]

# serve: the checks made before a repository is written or a server started.
SERVE = [
    ("serve/missing-model", ["serve"], "required: MODEL.onnx"),
    ("serve/model-missing", ["serve", "{missing}", "--repo", "{work}/served", "--write-only"], "does not exist"),
    ("serve/model-is-dir", ["serve", "{dir}", "--repo", "{work}/served", "--write-only"], "MODEL.onnx"),
    (
        "serve/instances-zero",
        ["serve", "{d_onnx}", "--instances", "0", "--repo", "{work}/served", "--write-only"],
        "--instances",
    ),
    (
        "serve/max-batch-negative",
        ["serve", "{d_onnx}", "--max-batch-size", "-1", "--repo", "{work}/served", "--write-only"],
        "--max-batch-size",
    ),
    ("serve/runtime-choice", ["serve", "{d_onnx}", "--runtime", "tpu"], "invalid choice"),
    ("serve/port-out-of-range", ["serve", "{d_onnx}", "--http-port", "70000"], "from 0 to 65535"),
    ("serve/timeout-nan", ["serve", "{d_onnx}", "--timeout", "nan"], "finite"),
    ("serve/timeout-zero", ["serve", "{d_onnx}", "--timeout", "0"], "from 1 to 86400"),
    ("serve/concurrency-zero", ["serve", "{d_onnx}", "--concurrency", "0"], "from 1 to"),
    ("serve/repo-is-file", ["serve", "{d_onnx}", "--repo", "{existing}", "--write-only"], "is a file"),
    ("serve/repo-unwritable", ["serve", "{d_onnx}", "--repo", "{ro}/served", "--write-only"], "cannot create files"),
    # Refused before the repository is written (nothing to --force on the rerun): a taken port, a runtime that
    # cannot run here.
    (
        "serve/port-taken",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--http-port", "{busy_port}"],
        "is already in use",
    ),
    (
        "serve/runtime-impossible",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--runtime", "tensorrt"],
        "runtime tensorrt cannot run here",
    ),
    ("serve/device-choice", ["serve", "{d_onnx}", "--device", "tpu"], "invalid choice"),
    # MPS shares a GPU between processes: refused for CPU instances (and where no GPU is visible).
    (
        "serve/mps-on-the-cpu",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--runtime", "onnxruntime", "--device", "cpu", "--mps"],
        "and MPS shares a GPU between processes; leave out --mps, or serve on a GPU",
    ),
    (
        "serve/device-with-a-gpu-runtime",
        ["serve", "{d_onnx}", "--runtime", "torch-cuda", "--device", "cpu", "--repo", "{work}/served", "--write-only"],
        "applies with --runtime onnxruntime",
    ),
    (
        "serve/device-cuda-without-the-ep",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--runtime", "onnxruntime", "--device", "{no_cuda_ep}"],
        "--runtime onnxruntime cannot run here: device cuda: onnxruntime",
    ),
    (
        "serve/engine-manifest-not-utf8",
        ["serve", "{d_onnx}", "--engine", "{engine_latin1}", "--repo", "{work}/served", "--write-only"],
        "not UTF-8 text",
    ),
    (
        "serve/engine-of-another-model",
        ["serve", "{d_onnx}", "--engine", "{engine_tiny}", "--repo", "{work}/served", "--write-only"],
        "input 3x224x224 float16, this model's 1x32x32 float32",
    ),
    (
        "serve/engine-of-another-onnx-file",
        ["serve", "{d_onnx}", "--engine", "{engine_other_onnx}", "--repo", "{work}/served", "--write-only"],
        "was built from model.onnx, not from d.onnx (its sha256",
    ),
    # An address no machine has (TEST-NET-1, RFC 5737), one that is not an address, a name that never resolves
    # (RFC 6761): refused as such, not as a busy port.
    (
        "serve/host-not-this-machine",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--host", "192.0.2.1"],
        "--host 192.0.2.1: the server cannot listen there (192.0.2.1 is not an address of this machine)",
    ),
    (
        "serve/host-not-an-address",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--host", "999.1.1.1"],
        "not an IP address or a name this machine resolves",
    ),
    (
        "serve/host-unresolvable",
        ["serve", "{d_onnx}", "--repo", "{work}/served", "--host", "no-such-host.invalid"],
        "not an IP address or a name this machine resolves",
    ),
    (
        "serve/ort-library-not-one",
        ["serve", "{d_onnx}", "--ort-library", "{existing}", "--repo", "{work}/served", "--write-only"],
        "is not libwtconv_ort.so",
    ),
    ("serve/shared-memory-choice", ["serve", "{d_onnx}", "--shared-memory", "rdma"], "invalid choice"),
    ("serve/connections-choice", ["serve", "{d_onnx}", "--sweep", "8", "--connections", "shared"], "invalid choice"),
    ("serve/soak-zero", ["serve", "{d_onnx}", "--soak", "0"], "--soak: expected a number from 1 to"),
    ("serve/sample-every-zero", ["serve", "{d_onnx}", "--soak", "5", "--sample-every", "0"], "--sample-every"),
    ("serve/gpus-empty", ["serve", "{d_onnx}", "--gpus", "", "--repo", "{work}/served", "--write-only"], "GPU indices"),
    (
        "serve/gpus-repeated",
        ["serve", "{d_onnx}", "--gpus", "0,0", "--repo", "{work}/served", "--write-only"],
        "--gpus: expected distinct GPU indices",
    ),
    (
        "serve/gpus-with-cpu-instances",
        ["serve", "{d_onnx}", "--gpus", "0", "--runtime", "onnxruntime", "--device", "cpu", "--repo", "{work}/served"],
        "--gpus 0: places GPU instances, and they run on the CPU",
    ),
    (
        "serve/gpus-with-model-instances",
        ["serve", "{d_onnx}", "--gpus", "1", "--instance-kind", "model", "--repo", "{work}/served", "--write-only"],
        "--gpus 1: places GPU instances, and instance_kind model lets the runtime place them",
    ),
    (
        "serve/gpus-not-visible",
        ["serve", "{d_onnx}", "--gpus", "{gpu_not_visible}", "--repo", "{work}/served"],
        "is not one the server would see here",
    ),
]
BUILD_LIBS = [
    ("build-libs/jobs-zero", ["build-libs", "--jobs", "0"], "from 1 to"),
    ("build-libs/headers-missing", ["build-libs", "--tensorrt-headers", "{missing_dir}"], "NvInferRuntime.h"),
    ("build-libs/headers-not-tensorrt", ["build-libs", "--tensorrt-headers", "{dir}"], "NvInferRuntime.h"),
    ("build-libs/build-dir-is-file", ["build-libs", "--build-dir", "{existing}"], "is a file"),
    (
        "build-libs/onnxruntime-headers-missing",
        ["build-libs", "--onnxruntime-headers", "{missing_dir}"],
        "no onnxruntime_c_api.h there",
    ),
    ("build-libs/no-cuda-with-tensorrt", ["build-libs", "--no-cuda", "--tensorrt-headers", "{dir}"], "--no-cuda"),
]
DOCTOR = [
    ("doctor/extra-argument", ["doctor", "extra"], "unrecognized arguments"),
    ("doctor/ort-library-and-rtx-env", ["doctor", "--ort-library", "--rtx-env"], "not allowed with argument"),
]
_REGISTERED = {name for name, _ in cli.SUBCOMMANDS}
CASES += [
    case
    for group, name in ((SERVE, "serve"), (BUILD_LIBS, "build-libs"), (DOCTOR, "doctor"))
    if name in _REGISTERED
    for case in group
]

# Every registered subcommand refuses an unknown option and a missing option value in one line.
GENERIC = [(f"{name}/unknown-option", [name, "--no-such-option"], "error:") for name, _ in cli.SUBCOMMANDS]


def _snapshot(root: Path) -> dict:
    """Every file under ``root`` with its sha256 and modification time, every symbolic link with its target, and
    every folder (a new, changed or removed one shows; a folder's own time is left out: checking that a folder is
    writable touches it)."""
    found = {}
    for directory, folders, names in os.walk(root):
        for name in folders + names:
            path = Path(directory) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = "folder"
            else:
                found[key] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.lstat().st_mtime_ns)
    return found


@pytest.mark.parametrize("case_id, argv, phrase", CASES + GENERIC, ids=[c[0] for c in CASES + GENERIC])
def test_bad_input_is_one_line_and_exit_2(case_id, argv, phrase, files, capsys, monkeypatch):
    needs = {name for arg in argv for name in re.findall(r"{(\w+)}", arg)}
    missing = sorted(n for n in needs if files.get(n) is None)
    if missing:
        pytest.skip(f"this machine has no {', '.join(missing)} for this case (e.g. no unwritable directory)")
    argv = [a.format(**{k: v for k, v in files.items() if v is not None}) for a in argv]
    monkeypatch.chdir(files["cwd"])
    before = _snapshot(files["work"])
    capsys.readouterr()
    status = cli.main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, f"exit status {status} for {argv}; stderr: {err!r}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err!r}"
    assert "Traceback" not in err + out
    assert "allow_pickle" not in err, "advice to load a file unsafely"
    assert lines[0].startswith("wtconv-trt") and ": error: " in lines[0], lines[0]
    assert phrase in lines[0], f"{phrase!r} not in {lines[0]!r}"
    assert _snapshot(files["work"]) == before, "a file was created, changed or removed"


# Cases that once ended otherwise than in one line with status 2 (a traceback with status 1, a wrong pairing accepted
# with status 0, a bad address reported as a busy port, NumPy's advice to load a file unsafely): run as a user runs
# them, in a process of their own.
IN_A_PROCESS = (
    "validate/engine-manifest-not-utf8",
    "serve/engine-of-another-model",
    "serve/host-not-this-machine",
    "validate/inputs-is-text",
)


@pytest.mark.parametrize("case_id", IN_A_PROCESS)
def test_bad_input_in_a_process_of_its_own(case_id, files):
    _, argv, phrase = next(case for case in CASES if case[0] == case_id)
    argv = [a.format(**{k: v for k, v in files.items() if v is not None}) for a in argv]
    before = _snapshot(files["work"])
    done = subprocess.run(
        [sys.executable, "-m", "wtconv_trt", *argv], capture_output=True, text=True, cwd=files["cwd"], timeout=120
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert phrase in lines[0] and "Traceback" not in done.stderr + done.stdout, lines[0]
    assert _snapshot(files["work"]) == before, "a file was created, changed or removed"


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy-format"])
def test_a_whole_model_checkpoint_is_one_plain_line_saying_what_to_do(legacy, tmp_path, capsys):
    """torch.save(model) instead of its state_dict, in either of torch.save's formats: one line naming what the file
    holds and the two ways on (save the state_dict, or export from Python), without PyTorch's advice to load it with
    weights_only=False or its terminal colour codes; the API raises the same line."""
    import torch

    import wtconv_trt
    from wtconv_core.errors import ModelError

    path = tmp_path / "whole.pth"
    torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2)), path, _use_new_zipfile_serialization=not legacy)
    capsys.readouterr()
    status = cli.main(
        ["export", "-o", str(tmp_path / "m.onnx"), "--arch", "wtconvnext_tiny", "--checkpoint", str(path)]
    )
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "\x1b" not in err and "weights_only" not in err and "Traceback" not in err, err
    assert "a pickled torch.nn.modules.container.Sequential" in err
    assert "torch.save(model.state_dict(), 'weights.pth')" in err and "wtconv_trt.export_onnx(" in err
    with pytest.raises(ModelError, match=r"^checkpoint .* holds a whole model") as caught:
        wtconv_trt.export_onnx(tmp_path / "m.onnx", wtconv_trt.ModelSource(arch="wtconvnext_tiny", checkpoint=path))
    assert caught.value.parameter == "checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["whole.pth"]


def test_every_subcommand_has_bad_input_cases():
    """The table covers every registered subcommand (a new command needs its rows here)."""
    covered = {argv[0] for _, argv, _ in CASES if argv}
    registered = {name for name, _ in cli.SUBCOMMANDS}
    assert registered <= covered, f"no bad-input cases for {sorted(registered - covered)}"


def interruptible() -> None:
    """preexec_fn: the child starts with SIGINT at its default, so Python turns it into KeyboardInterrupt. A test
    run started in the background by a non-interactive shell (``pytest &``) ignores SIGINT, and a child inherits
    an ignored signal: Ctrl-C would then never reach the command under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def running_export(tmp_path) -> subprocess.Popen:
    """An export started in a child process and running: PyTorch loaded, so inside wtconv_trt.cli.main."""
    process = subprocess.Popen(
        [sys.executable, "-m", "wtconv_trt", "export", "-o", str(tmp_path / "m.onnx"), "--arch", "wtconvnext_tiny"]
        + ["--random-weights"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if "libtorch_cpu" in maps.read_text() or "libtorch_cuda" in maps.read_text():
                break
        except OSError:
            pass
        time.sleep(0.1)
    time.sleep(1.0)
    assert process.poll() is None, "the export ended before it could be interrupted"
    return process


def assert_interrupted_cleanly(process: subprocess.Popen, tmp_path) -> None:
    """Exit status 130, the one line on stderr (after the progress lines of the steps that finished), no output file
    or temporary left."""
    out, err = process.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip() and not re.match(r"export m\.onnx [1-4]/4 ", line)]
    assert process.returncode == 130, (process.returncode, err[-2000:])
    assert lines == ["wtconv-trt export: interrupted"], err[-2000:]
    assert list(tmp_path.iterdir()) == [], "the interrupted export left a file behind"


# A real 'wtconv-trt export' of the shipped model (its process entry point, run_command) in which one step first runs
# a weakref callback that waits: a Ctrl-C then arrives inside the callback, where Python prints "Exception ignored
# in ..." and drops the KeyboardInterrupt, as it did inside PyTorch's WeakIdKeyDictionary during the export's write.
DROPPED_INTERRUPT_CHILD = """
import sys, time, weakref

def in_a_callback(function):
    def step(*args, **kwargs):
        class Thing:
            pass

        thing = Thing()
        waiting = weakref.ref(thing, lambda _: (print("in the callback", flush=True), time.sleep(30)))
        del thing
        return function(*args, **kwargs)

    return step

if sys.argv[1] == "write":
    import onnx
    onnx.save_model = in_a_callback(onnx.save_model)
else:
    import wtconv_export.onnx_export as exporter
    exporter.prepare_for_export = in_a_callback(exporter.prepare_for_export)
sys.argv = ["wtconv-trt", "export", "-o", sys.argv[2]]
from wtconv_trt.cli import run_command
run_command()
"""


@pytest.mark.parametrize("step", ["fold", "write"])
def test_ctrl_c_that_python_drops_still_ends_the_export(step, tmp_path):
    """Ctrl-C while a weakref callback runs, during the first step (folding) and during the last (writing the file
    after '3/4'): exit status 130, one line (no "Exception ignored" traceback), no file; before, the export went on
    and exited 0."""
    process = subprocess.Popen(
        [sys.executable, "-c", DROPPED_INTERRUPT_CHILD, step, str(tmp_path / "m.onnx")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert process.stdout.readline().strip() == "in the callback"
    time.sleep(0.25)
    process.send_signal(signal.SIGINT)
    assert_interrupted_cleanly(process, tmp_path)


# A real 'wtconv-trt export' of the shipped model in which Ctrl-C arrives while torch.onnx imports torch._dynamo (the
# import hook sends the signal as the import of one of its modules starts): torch.onnx catches the KeyboardInterrupt
# and raises its own TorchExportError, as it did for a Ctrl-C about 3-4 s into an export.
INTERRUPTED_IMPORT_CHILD = """
import importlib.abc, os, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch._dynamo.variables.functions":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["wtconv-trt", "export", "-o", sys.argv[1]]
from wtconv_trt.cli import run_command
run_command()
"""


def test_ctrl_c_that_a_library_turns_into_its_error_still_ends_the_export(tmp_path):
    """Ctrl-C inside torch.onnx's import of torch._dynamo, which torch.onnx reports as its own error: exit status 130
    and one line, as for any Ctrl-C (before: its 80-160-line traceback and status 1)."""
    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_IMPORT_CHILD, str(tmp_path / "m.onnx")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert_interrupted_cleanly(process, tmp_path)


def test_ctrl_c_while_tracing_exits_130_with_one_line(tmp_path):
    """Ctrl-C 0.25 s after the export's first step, while torch.onnx traces the shipped model."""
    process = subprocess.Popen(
        [sys.executable, "-m", "wtconv_trt", "export", "-o", str(tmp_path / "m.onnx")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    seen = []
    for line in process.stderr:
        seen.append(line)
        if " 1/4 " in line:
            break
    time.sleep(0.25)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    process.stderr = None
    lines = [line for line in "".join(seen).splitlines() + err.splitlines() if line.strip()]
    assert process.returncode == 130, (process.returncode, lines)
    assert lines[-1] == "wtconv-trt export: interrupted" and "Traceback" not in err, lines
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_export_exits_130_with_one_line(tmp_path):
    """SIGINT while the export runs: exit status 130, one line on stderr, no output file or temporary left."""
    process = running_export(tmp_path)
    process.send_signal(signal.SIGINT)
    assert_interrupted_cleanly(process, tmp_path)


def test_repeated_ctrl_c_still_exits_130_with_one_line(tmp_path):
    """Ctrl-C pressed again and again (a user waiting for the command to stop): still exit status 130, one line, no
    traceback and nothing left behind. The first interrupt is handled; the ones after it, arriving while the
    command winds down and the interpreter shuts down (PyTorch's exit handlers), must not end it a second time."""
    process = running_export(tmp_path)
    while process.poll() is None:
        process.send_signal(signal.SIGINT)
        time.sleep(0.002)
    assert_interrupted_cleanly(process, tmp_path)


def test_static_export_then_validate_passes_quietly(tmp_path, capsys):
    """'export --static' then 'validate' (both documented): the default inputs are cut to the fixed batch, and
    validate prints one verdict line (Polygraphy's report only with -v)."""
    model = tmp_path / "static.onnx"
    assert cli.main(["export", "-o", str(model), "--static"]) == 0
    capsys.readouterr()
    assert cli.main(["validate", str(model)]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(out) == 1 and out[0].startswith("PASSED: ") and "(1, 1, 32, 32)" in out[0], out


# doctor: our handler (exit 1); --help: argparse itself ignores a failed write and exits 0.
@pytest.mark.parametrize("argv,status", [(["doctor"], 1), (["--help"], 0)], ids=["doctor", "help"])
def test_closed_output_pipe_is_quiet(argv, status):
    """The reader of our standard output is gone before we write (`wtconv-trt doctor | head -0`): nothing on
    stderr (no BrokenPipeError traceback, neither from the command nor at interpreter exit)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "wtconv_trt", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.stdout.close()  # no reader left: the first write that reaches the pipe fails with EPIPE
    err = process.stderr.read()
    process.wait(timeout=120)
    assert process.returncode == status, (process.returncode, err[-2000:])
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]
