"""Real TensorRT: TensorRT-RTX's ONNX parser and builder over our exports and our plugin, on a machine without a GPU.

Each test builds an engine with ``trt_engine.build.build_engine`` (backend tensorrt-rtx, default target compute
capabilities) and checks it against oracles that do not come from TensorRT or from the code under test:

- the engine builds and its manifest records the backend, the plugin library's ABI and the plugin layer count;
- the number of plugin layers in TensorRT's network equals the number of WTConv2d layers of the PyTorch model;
- the output shapes TensorRT derives (through every layer, our plugin's getOutputShapes included) for the
  profile's min, opt and max input shapes equal PyTorch's for the same inputs (run on the meta device);
- the plan carries the plugin's serialized fields: every WTConv2d node's weight attributes, as float32 bytes,
  are found inside the plan.

Running the engines needs a GPU of TensorRT-RTX's compute capabilities; that part is covered by the plugin
harness on a GPU (docs/engines.md, "What ran where"). The plugin is built once per source hash by conftest's
``rtx_plugin`` fixture; build times are printed in the terminal summary.
"""

import copy
import time

import numpy as np
import pytest
import torch
from random_layers import random_wtconv

pytestmark = pytest.mark.slow  # real TensorRT-RTX builds with the plugin built once: minutes; CI runs them

PLUGIN_FIELDS = ("base_weight", "base_bias", "wavelet_weight")
# export_dir, shipped_model, shipped_exports: conftest's (shared with the rendering and activation tests)


def wtconv_node_fields(onnx_path) -> list[dict]:
    """{field: float32 bytes} of every WTConv2d node, read from the ONNX file (what the plugin was given)."""
    import onnx
    from onnx import helper

    fields = []
    for node in onnx.load(str(onnx_path)).graph.node:
        if node.op_type == "WTConv2d":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            fields.append({name: np.asarray(attrs[name], dtype=np.float32).tobytes() for name in PLUGIN_FIELDS})
    return fields


def torch_output_shape(model, shape, dtype=torch.float32) -> tuple:
    """PyTorch's output shape for an input of ``shape`` (meta device: shapes only, nothing computed), from a copy:
    the model may be a session fixture other modules run after this one."""
    with torch.no_grad():
        on_meta = copy.deepcopy(model).to("meta").eval()
        return tuple(on_meta(torch.empty(shape, device="meta", dtype=dtype)).shape)


def build_and_check(
    onnx_path, *, profile_text, precision, plugin, pytorch_model, wtconv_layers, tmp_path, build_times, label
):
    """Build with TensorRT-RTX and check everything the module docstring lists. Returns (manifest, plan)."""
    from trt_engine import tensorrt_api
    from trt_engine.build import BuildOptions, build_engine
    from trt_engine.profiles import parse_profile

    start = time.monotonic()
    result = build_engine(
        BuildOptions(
            onnx=str(onnx_path),
            precision=precision,
            plugin=str(plugin) if plugin else None,
            shapes=[profile_text],
            engine=str(tmp_path / f"{label}.engine"),
            progress=False,
            backend="tensorrt-rtx",
        )
    )
    build_times[label] = time.monotonic() - start
    manifest = result.manifest
    plan = result.engine_path.read_bytes()
    assert manifest.backend == "tensorrt-rtx"
    assert manifest.engine_bytes == len(plan) > 0
    assert manifest.build["plugin_layers"] == wtconv_layers
    assert manifest.compute_capabilities  # the default: every target this TensorRT-RTX has
    if plugin:
        assert manifest.plugin.abi == "trt11" and manifest.plugin.kind == "dynamic"

    network = tensorrt_api.NetworkBuilder(strongly_typed=True)
    network.parse(onnx_path)
    assert network.plugin_layer_count() == wtconv_layers
    profile = parse_profile(profile_text)
    for which in ("min", "opt", "max"):
        dims = tuple(getattr(profile.inputs["input"], which))
        derived = network.derived_output_shapes({"input": dims})
        expected = torch_output_shape(pytorch_model, dims)
        assert derived == {"output": expected}, f"{label}: {which} input {dims}"

    fields = wtconv_node_fields(onnx_path)
    assert len(fields) == wtconv_layers
    for index, node in enumerate(fields):
        for name, payload in node.items():
            assert payload in plan, f"{label}: layer {index}'s {name} ({len(payload)} bytes) is not in the plan"
    return manifest, plan


@pytest.mark.parametrize(
    "precision, rendering", [("fp32", None), ("fp16", None), ("fp16", "tensorrt"), ("fp16", "channels_last")]
)
def test_shipped_model_plugin_export(
    precision, rendering, rtx_plugin, shipped_model, shipped_exports, tmp_path, build_times
):
    """Opset 20 (ONNX Gelu), fp16 LayerNorms reading fp16 (rendered for ONNX Runtime) or fp32 between Casts (for
    TensorRT), channels-last blocks around channels_last nodes: each parses and builds, with PyTorch's shapes."""
    from wtconv_export.onnx_export import find_wtconv_layers

    layers = len(find_wtconv_layers(shipped_model))
    assert layers == 5
    manifest, _ = build_and_check(
        shipped_exports[("plugin", precision, rendering) if rendering else ("plugin", precision)],
        profile_text="input:1x1x32x32/8x1x32x32/32x1x64x48",
        precision=precision,
        plugin=rtx_plugin["plugin"],
        pytorch_model=shipped_model,
        wtconv_layers=layers,
        tmp_path=tmp_path,
        build_times=build_times,
        label=f"shipped model, plugin {precision}" + (f" for {rendering}" if rendering else ""),
    )
    dtype = {"fp32": "float32", "fp16": "float16"}[precision]
    assert [t.dtype for t in manifest.io] == [dtype, dtype]
    assert manifest.io[0].shape == (-1, 1, -1, -1)


def test_shipped_model_standard_ops(rtx_plugin, shipped_model, shipped_exports, tmp_path, build_times):
    """The standard-op export builds without any plugin: no plugin layer, no plugin record."""
    from trt_engine.build import NoPluginNodesWarning

    with pytest.warns(NoPluginNodesWarning):
        manifest, _ = build_and_check(
            shipped_exports["standard", "fp32"],
            profile_text="input:1x1x32x32/8x1x32x32/16x1x48x40",
            precision="fp32",
            plugin=None,
            pytorch_model=shipped_model,
            wtconv_layers=0,
            tmp_path=tmp_path,
            build_times=build_times,
            label="shipped model, standard ops fp32",
        )
    assert manifest.plugin is None


# (label, channels, kernel_size, wt_levels, stride, profile): odd and non-square sizes, sizes below 2^L at min.
SINGLE_LAYERS = [
    ("k3", 6, 3, 2, 1, "input:1x6x5x5/2x6x16x16/3x6x23x17"),
    ("k7", 4, 7, 2, 1, "input:1x4x7x7/2x4x20x20/2x4x31x33"),
    ("stride2", 8, 5, 2, 2, "input:1x8x9x9/2x8x20x20/4x8x33x31"),
    ("deep L8", 4, 3, 8, 1, "input:1x4x16x16/1x4x64x64/2x4x300x257"),
]


@pytest.mark.parametrize(
    "label,channels,kernel_size,levels,stride,profile", SINGLE_LAYERS, ids=[case[0] for case in SINGLE_LAYERS]
)
def test_single_layer(
    label, channels, kernel_size, levels, stride, profile, rtx_plugin, export_dir, tmp_path, build_times
):
    from wtconv_export.onnx_export import export_onnx

    layer = torch.nn.Sequential(
        random_wtconv(channels, kernel_size, levels, stride=stride, seed=levels, dtype=torch.float32)
    )
    opt = tuple(int(d) for d in profile.split(":")[1].split("/")[1].split("x"))
    path = export_dir / f"layer_{label.replace(' ', '_')}.onnx"
    export_onnx(layer, path, ops="plugin", precision="fp32", input_shape=opt)
    build_and_check(
        path,
        profile_text=profile,
        precision="fp32",
        plugin=rtx_plugin["plugin"],
        pytorch_model=layer,
        wtconv_layers=1,
        tmp_path=tmp_path,
        build_times=build_times,
        label=f"single layer {label} (C={channels}, k={kernel_size}, L={levels}, s={stride})",
    )


def channels_last_node(path, out_path):
    """The one-layer export at ``path`` rewritten as a node with channels_last = 1 (docs/design.md §4): the same
    attributes with channels_last set, input and output declared (N, H, W, C) with the export's own dimensions."""
    import onnx

    from wtconv_libs import contract

    model = onnx.load(str(path))
    (node,) = [n for n in model.graph.node if n.op_type == contract.OP_TYPE]
    (flag,) = [a for a in node.attribute if a.name == contract.FIELD_CHANNELS_LAST]  # the exporter writes 0
    flag.i = 1
    for value in (model.graph.input[0], model.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        n, c, h, w = (onnx.TensorShapeProto.Dimension.FromString(d.SerializeToString()) for d in dims)
        del dims[:]
        dims.extend([n, h, w, c])
    onnx.save(model, str(out_path))
    return out_path


@pytest.mark.parametrize("label,channels,kernel_size,levels,stride,profile", [SINGLE_LAYERS[0], SINGLE_LAYERS[2]])
def test_single_layer_channels_last(
    label, channels, kernel_size, levels, stride, profile, rtx_plugin, export_dir, tmp_path, build_times
):
    """A node with channels_last = 1: TensorRT-RTX's parser and builder accept it with our plugin, and the output
    shape TensorRT derives through getOutputShapes for (N, H, W, C) inputs is PyTorch's NCHW output shape in
    (N, H', W', C) order."""
    from trt_engine import tensorrt_api
    from trt_engine.build import BuildOptions, build_engine
    from trt_engine.profiles import parse_profile
    from wtconv_export.onnx_export import export_onnx

    layer = torch.nn.Sequential(
        random_wtconv(channels, kernel_size, levels, stride=stride, seed=levels, dtype=torch.float32)
    )
    nchw = parse_profile(profile).inputs["input"]
    opt = tuple(nchw.opt)
    path = export_dir / f"layer_{label.replace(' ', '_')}_for_nhwc.onnx"
    export_onnx(layer, path, ops="plugin", precision="fp32", input_shape=opt)
    nhwc_path = channels_last_node(path, tmp_path / "nhwc.onnx")
    to_nhwc = lambda d: (d[0], d[2], d[3], d[1])  # noqa: E731
    nhwc_profile = "input:" + "/".join(
        "x".join(str(v) for v in to_nhwc(tuple(getattr(nchw, which)))) for which in ("min", "opt", "max")
    )
    start = time.monotonic()
    result = build_engine(
        BuildOptions(
            onnx=str(nhwc_path),
            precision="fp32",
            plugin=str(rtx_plugin["plugin"]),
            shapes=[nhwc_profile],
            engine=str(tmp_path / "nhwc.engine"),
            progress=False,
            backend="tensorrt-rtx",
        )
    )
    build_times[f"single layer {label}, channels_last = 1"] = time.monotonic() - start
    assert result.manifest.build["plugin_layers"] == 1
    assert result.engine_path.stat().st_size > 0
    network = tensorrt_api.NetworkBuilder(strongly_typed=True)
    network.parse(nhwc_path)
    assert network.plugin_layer_count() == 1
    for which in ("min", "opt", "max"):
        dims = tuple(getattr(nchw, which))
        derived = network.derived_output_shapes({"input": to_nhwc(dims)})
        assert derived == {"output": to_nhwc(torch_output_shape(layer, dims))}, f"{label}: {which} input {dims}"


@pytest.mark.slow
def test_wtconvnext_tiny_fp16_dynamic_batch_and_resolution(rtx_plugin, export_dir, tmp_path, build_times):
    """WTConvNeXt-T with random weights, fp16, one profile over batch 1-4 and resolution 64-224."""
    from wtconv_export.onnx_export import export_onnx, find_wtconv_layers
    from wtconv_torch.wtconvnext import wtconvnext_tiny

    torch.manual_seed(0)
    model = wtconvnext_tiny().eval()
    layers = len(find_wtconv_layers(model))
    assert layers == 18
    path = export_dir / "wtconvnext_tiny_fp16.onnx"
    export_onnx(model, path, ops="plugin", precision="fp16", input_shape=(1, 3, 224, 224))
    manifest, _ = build_and_check(
        path,
        profile_text="input:1x3x64x64/2x3x128x128/4x3x224x224",
        precision="fp16",
        plugin=rtx_plugin["plugin"],
        pytorch_model=model,
        wtconv_layers=layers,
        tmp_path=tmp_path,
        build_times=build_times,
        label="WTConvNeXt-T fp16, batch 1-4, 64-224 px",
    )
    assert manifest.io[0].shape == (-1, 3, -1, -1) and manifest.io[1].shape == (-1, 1000)


def test_plugin_library_abi_record(rtx_plugin):
    """The libraries built for TensorRT-RTX say so in their ABI record, read without loading them."""
    from wtconv_libs.plugin_elf import inspect_library

    dynamic, static = (inspect_library(rtx_plugin[k]) for k in ("plugin", "plugin-static"))
    assert dynamic.abi == static.abi == "trt11"
    assert dynamic.abi_record["tensorrt_rtx_abi"] == "yes" and dynamic.abi_record["tensorrt"].startswith("11.")
    assert dynamic.kind == "dynamic" and static.kind == "static-registration"
    assert {"getCreators", "setLoggerFinder"} <= dynamic.defined_symbols


def test_polygraphy_convert_with_plugins(rtx_plugin, shipped_exports, tmp_path, build_times):
    """``polygraphy convert --plugins`` as docs/engines.md gives it: POLYGRAPHY_USE_TENSORRT_RTX=1 and the loader
    environment ``wtconv-trt doctor`` prints, with the static-registration library."""
    import os
    import shutil
    import subprocess

    from trt_engine import rtx_libraries

    polygraphy = shutil.which("polygraphy")
    if polygraphy is None:
        pytest.skip("the polygraphy command is not on PATH")
    env = dict(os.environ, POLYGRAPHY_USE_TENSORRT_RTX="1")
    line = rtx_libraries.shell_environment()
    if line:
        folder = rtx_libraries.link_dir(rtx_libraries.wheel_lib_dir())
        env["LD_LIBRARY_PATH"] = f"{folder}:{env['LD_LIBRARY_PATH']}" if env.get("LD_LIBRARY_PATH") else str(folder)
        env["LD_PRELOAD"] = str(folder / rtx_libraries.CORE)
    engine = tmp_path / "polygraphy.engine"
    start = time.monotonic()
    done = subprocess.run(
        [
            polygraphy,
            "convert",
            str(shipped_exports["plugin", "fp32"]),
            "--plugins",
            str(rtx_plugin["plugin-static"]),
            "-o",
            str(engine),
            "--trt-min-shapes",
            "input:[1,1,32,32]",
            "--trt-opt-shapes",
            "input:[4,1,32,32]",
            "--trt-max-shapes",
            "input:[8,1,32,32]",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    build_times["polygraphy convert --plugins (shipped model fp32)"] = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    plan = engine.read_bytes()
    for node in wtconv_node_fields(shipped_exports["plugin", "fp32"]):
        assert node["base_weight"] in plan


def test_engine_commands_on_a_tensorrt_rtx_engine(rtx_plugin, shipped_exports, tmp_path):
    """What the other engine commands do with a TensorRT-RTX engine on a machine without one of its GPUs: loading it
    to run (validate, bench) says that no GPU here can, before deserialization; Triton's TensorRT backend is
    refused."""
    from trt_engine.build import BuildOptions, build_engine
    from trt_engine.engine_file import load_engine_for_run, open_engine
    from wtconv_core.errors import ConfigurationError, ServingError
    from wtconv_serving.repositories.tensorrt_backend import write_tensorrt_repository

    result = build_engine(
        BuildOptions(
            onnx=str(shipped_exports["plugin", "fp16"]),
            precision="fp16",
            plugin=str(rtx_plugin["plugin"]),
            engine=str(tmp_path / "m.engine"),
            shapes=["input:1x1x32x32/2x1x32x32/4x1x32x32"],
            progress=False,
            backend="tensorrt-rtx",
            compute_capabilities=["8.9"],
        )
    )
    assert result.manifest.compute_capabilities == ["8.9"]
    with pytest.raises(ServingError, match="built by TensorRT-RTX, whose engines Triton's TensorRT backend cannot"):
        write_tensorrt_repository(result.engine_path, tmp_path / "repo")
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (8, 9):
        pytest.skip("a GPU this engine runs on is present")
    with pytest.raises(ConfigurationError, match="no GPU that can run (TensorRT-RTX )?engines|built for compute"):
        load_engine_for_run(open_engine(result.engine_path))
