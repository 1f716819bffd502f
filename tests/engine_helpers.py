"""Helpers for the trt_engine tests: tiny ONNX models and engine files with manifests (no TensorRT)."""

import os

import numpy as np


def tiny_onnx(path, *, dtype="float32", wtconv_nodes=0, dims=("batch", 1, 8, 8), metadata=None):
    """A small valid ONNX model: input (dims) -> Relu -> [WTConv2d nodes] -> output. ``dims`` entries that are
    strings are dynamic (dim_param)."""
    import onnx
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype]
    x = helper.make_tensor_value_info("input", elem, list(dims))
    y = helper.make_tensor_value_info("output", elem, list(dims))
    nodes = [helper.make_node("Relu", ["input"], ["t0"], name="relu")]
    for i in range(wtconv_nodes):
        nodes.append(
            helper.make_node(
                "WTConv2d",
                [f"t{i}"],
                [f"t{i + 1}"],
                name=f"wtconv{i}",
                domain="wtconv",
                kernel_size=5,
                wt_levels=1,
                stride=1,
                base_weight=[0.0] * 25,
                base_bias=[0.0],
                wavelet_weight=[0.0] * 100,
                plugin_version="1",
                plugin_namespace="",
            )
        )
    nodes.append(helper.make_node("Identity", [f"t{wtconv_nodes}"], ["output"], name="identity"))
    graph = helper.make_graph(nodes, "tiny", [x], [y])
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("wtconv", 1)] if wtconv_nodes else [])
    model = helper.make_model(graph, opset_imports=opsets)
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = "wtconv_trt." + key, value
    onnx.save(model, str(path))
    return str(path)


def fake_engine(
    tmp_path,
    *,
    name="model.fp16.engine",
    precision="fp16",
    dtype="float16",
    profiles=None,
    plugin=True,
    trt_version="10.16.0.72",
    source=None,
    payload=b"not really a TensorRT plan " * 40,
    input_shape=(-1, 1, 32, 32),
    output_shape=(-1, 10),
    onnx=None,
):
    """An 'engine' file (arbitrary bytes) with a valid manifest (returned as the EngineManifest written): enough for
    every check made before TensorRT. ``onnx``: the ONNX file it says it was built from (its name and sha256 go into
    the manifest; without it, a name and a hash no file has)."""
    from trt_engine import manifest as mf
    from trt_engine.profiles import parse_profile

    engine = tmp_path / name
    engine.write_bytes(payload)
    profiles = profiles or ["input:1x1x32x32/8x1x32x32/32x1x32x32"]
    plugin_record = (
        mf.PluginRecord(
            name="WTConv2d",
            version="1",
            namespace="",
            library=os.fspath(tmp_path / "libwtconv_trt_plugin_dynamic.so"),
            kind="dynamic",
            tensorrt_major=10,
        )
        if plugin
        else None
    )
    manifest = mf.EngineManifest(
        engine_file=engine.name,
        engine_sha256=mf.sha256_bytes(payload),
        engine_bytes=len(payload),
        onnx_file=os.path.basename(onnx) if onnx else "model.onnx",
        onnx_sha256=mf.sha256_file(onnx) if onnx else "0" * 64,
        wtconv_nodes=7 if plugin else 0,
        onnx_input_dtype=dtype,
        source_model=source if source is not None else {"source": "default", "weights": "shipped"},
        tensorrt_version=trt_version,
        plugin=plugin_record,
        precision=precision,
        strongly_typed=True,
        fp16_flag=False,
        tf32=True,
        profiles=[parse_profile(p) for p in profiles],
        io=[
            mf.TensorIO("input", "input", tuple(input_shape), dtype),
            mf.TensorIO("output", "output", tuple(output_shape), dtype),
        ],
    )
    mf.write_manifest(engine, manifest)
    return engine, manifest


def fake_engine_of_tiny_onnx(tmp_path, onnx_path, *, name="model.fp32.engine", plugin=True):
    """fake_engine for the model tiny_onnx writes with its default dims (an fp32 (batch, 1, 8, 8) Relu), recorded as
    built from ``onnx_path``, with profiles from batch 1 to 16."""
    return fake_engine(
        tmp_path,
        name=name,
        precision="fp32",
        dtype="float32",
        plugin=plugin,
        input_shape=(-1, 1, 8, 8),
        output_shape=(-1, 1, 8, 8),
        profiles=["input:1x1x8x8/4x1x8x8/16x1x8x8"],
        onnx=onnx_path,
    )


def random_array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
