"""End to end with TensorRT: export the shipped default model -> build fp32 and fp16 engines with the plugin ->
validate against PyTorch with Polygraphy -> benchmark -> Triton repository. Skips (with the reason) where
TensorRT or the built plugin library is missing (docs/design.md §5)."""

import json

import pytest

from wtconv_libs import lookup

pytestmark = pytest.mark.tensorrt


@pytest.fixture(scope="module")
def plugin_libs(require_tensorrt):
    from trt_engine import tensorrt_api

    tensorrt_api.use_backend("tensorrt")  # ConfigurationError if this process already uses TensorRT-RTX
    abi = f"trt{require_tensorrt.__version__.split('.')[0]}"
    dynamic = lookup.default_plugin(abi=abi)
    if dynamic is None:
        pytest.skip(
            f"TensorRT plugin library for ABI {abi} not found: wtconv-trt build-libs --tensorrt-headers "
            f"<TensorRT include dir>, or set {lookup.ENV_VARS['plugin']}"
        )
    return dynamic, lookup.default_plugin(static=True, abi=abi)


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory, require_tensorrt):
    from wtconv_export.onnx_export import export_onnx
    from wtconv_torch.models import load_default_model

    model, _ = load_default_model()
    out = tmp_path_factory.mktemp("onnx")
    paths = {}
    for precision in ("fp32", "fp16"):
        paths[precision] = out / f"digits_{precision}.onnx"
        export_onnx(
            model,
            paths[precision],
            ops="plugin",
            precision=precision,
            input_shape=(1, 1, 32, 32),
            metadata={"source": "default"},
        )
    return paths


@pytest.fixture(scope="module")
def engines(onnx_models, plugin_libs, tmp_path_factory):
    from trt_engine.build import BuildOptions, build_engine

    out = tmp_path_factory.mktemp("engines")
    cache = out / "timing.cache"
    built = {}
    for precision in ("fp32", "fp16"):
        result = build_engine(
            BuildOptions(
                onnx=str(onnx_models[precision]),
                precision=precision,
                plugin=str(plugin_libs[0]),
                shapes=["input:1x1x32x32/8x1x32x32/32x1x32x32", "input:1x1x32x32/64x1x32x32/128x1x32x32"],
                engine=str(out / f"digits.{precision}.engine"),
                timing_cache=str(cache),
                progress=False,
                backend="tensorrt",
            )
        )
        built[precision] = result
    assert cache.is_file() and cache.stat().st_size > 0
    return built


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_build_manifest(engines, precision):
    import tensorrt as trt

    from trt_engine import manifest as mf

    result = engines[precision]
    m = mf.read_manifest(result.engine_path)
    assert m == result.manifest
    mf.check_engine_file(result.engine_path, m)
    assert m.tensorrt_version == trt.__version__ and m.backend == "tensorrt"
    assert m.plugin.name == "WTConv2d" and m.plugin.version == "1"
    assert m.wtconv_nodes == m.build["plugin_layers"] > 0
    assert m.source_model["source"] == "default"
    assert len(m.profiles) == 2
    dtypes = {t.name: t.dtype for t in m.io}
    assert dtypes == (
        {"input": "float16", "output": "float16"} if precision == "fp16" else {"input": "float32", "output": "float32"}
    )


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_validate(engines, precision, tmp_path):
    from wtconv_validate.engine import validate_engine

    report = validate_engine(
        engines[precision].engine_path,
        iterations=2,
        save_inputs=tmp_path / "in.json",
        save_outputs=tmp_path / "out.json",
    )
    assert report.passed, report.format("TensorRT", "PyTorch")
    assert report.top1_agreement >= 0.99
    assert (tmp_path / "in.json").is_file() and (tmp_path / "out.json").is_file()
    report = validate_engine(engines[precision].engine_path, shape="100x1x32x32", iterations=1)
    assert report.passed


def test_shape_outside_profiles(engines):
    from wtconv_validate.engine import validate_engine

    with pytest.raises(ValueError, match="outside every optimisation profile"):
        validate_engine(engines["fp16"].engine_path, shape="256x1x32x32")


def test_corrupt_engine_deserialization(engines, tmp_path):
    """Bytes that match their manifest but are not an engine: TensorRT's deserialize returns None -> clear error."""
    import dataclasses

    from trt_engine import manifest as mf
    from wtconv_validate.engine import validate_engine

    source = engines["fp16"].engine_path
    bad = tmp_path / "bad.engine"
    data = bytearray(source.read_bytes())
    data[:64] = b"\0" * 64  # the plan's header: TensorRT must refuse it
    bad.write_bytes(bytes(data))
    m = dataclasses.replace(mf.read_manifest(source), engine_sha256=mf.sha256_bytes(bytes(data)))
    mf.write_manifest(bad, m)
    with pytest.raises(Exception, match="could not deserialize|rebuild"):
        validate_engine(bad, iterations=1)


def test_bench(engines, tmp_path):
    from trt_engine.bench import run_benchmark

    result = run_benchmark(engines["fp16"].engine_path, iterations=20, warmup_ms=20)
    cases = {(r["profile"], tuple(r["shape"]), r["cuda_graph"]) for r in result["results"]}
    assert (0, (8, 1, 32, 32), True) in cases and (1, (128, 1, 32, 32), False) in cases
    for r in result["results"]:
        lat = r["latency_ms"]
        assert 0 < lat["min"] <= lat["median"] <= lat["p99"] <= lat["max"]
        assert r["throughput_images_per_s"] > 0
    json.dumps(result)


def test_triton_repository(engines, plugin_libs, tmp_path):
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    from google.protobuf import text_format

    from wtconv_serving.repositories.tensorrt_backend import write_tensorrt_repository

    if plugin_libs[1] is None:
        pytest.skip("static-registration plugin library (libwtconv_trt_plugin.so) not built")
    from wtconv_core.options import RepositoryOptions

    options = RepositoryOptions(name="digits", plugin_static=plugin_libs[1])
    result = write_tensorrt_repository(engines["fp16"].engine_path, tmp_path / "repo", options)
    config = text_format.Parse(result.config_text, model_config_pb2.ModelConfig())
    assert config.max_batch_size == 128 and config.input[0].data_type == model_config_pb2.TYPE_FP16


def test_tensorrt10_fp16_from_fp32_export(onnx_models, plugin_libs, tmp_path):
    """TensorRT 10 only: --precision fp16 from the fp32 export uses the (deprecated) BuilderFlag.FP16 on a weakly
    typed network and keeps fp32 I/O; TensorRT 11 refuses it (no such flag), with the fix."""
    import tensorrt as trt

    from trt_engine.build import BuildOptions, build_engine
    from wtconv_validate.engine import validate_engine

    opts = BuildOptions(
        onnx=str(onnx_models["fp32"]),
        precision="fp16",
        plugin=str(plugin_libs[0]),
        shapes=["input:1x1x32x32/8x1x32x32/32x1x32x32"],
        engine=str(tmp_path / "weak.engine"),
        progress=False,
        backend="tensorrt",
    )
    if int(trt.__version__.split(".")[0]) >= 11:
        with pytest.raises(ValueError, match="export --precision fp16"):
            build_engine(opts)
        return
    result = build_engine(opts)
    m = result.manifest
    assert (m.strongly_typed, m.fp16_flag) == (False, True)
    assert {t.dtype for t in m.io} == {"float32"}
    assert validate_engine(result.engine_path, iterations=1).passed
