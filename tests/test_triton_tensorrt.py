"""The repository for Triton's TensorRT backend (wtconv_serving.repositories.tensorrt_backend): the engine's batching
plan from its
profiles, its config against Triton's schema (test_triton_config.parse), the repository's layout and serve.sh."""

import shutil
import subprocess

import pytest
from engine_helpers import fake_engine
from test_triton_config import model_config_pb2, parse  # the schema check (skips without tritonclient[grpc])

from wtconv_core.options import RepositoryOptions
from wtconv_serving.repositories.tensorrt_backend import plan_batching, tensorrt_config, write_tensorrt_repository
from wtconv_serving.tuning import Tuning


def make_config(manifest, **options):
    return tensorrt_config(manifest, **options).render()


def write(engine, out, **options):
    return write_tensorrt_repository(engine, out, RepositoryOptions(**options))


def test_fp16_config_against_the_schema(tmp_path):
    _, manifest = fake_engine(tmp_path)
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\n")
    config = parse(make_config(manifest, name="wtconvnext", instances=2, gpus=[0, 1], labels=labels))
    assert config.name == "wtconvnext" and config.platform == "tensorrt_plan"
    assert config.max_batch_size == 32
    assert config.default_model_filename == "model.plan"
    [inp] = config.input
    assert inp.name == "input" and inp.data_type == model_config_pb2.TYPE_FP16 and list(inp.dims) == [1, 32, 32]
    [out] = config.output
    assert out.name == "output" and out.data_type == model_config_pb2.TYPE_FP16 and list(out.dims) == [10]
    assert out.label_filename == "labels.txt"
    # The buckets (powers of two up to max_batch_size): preferred sizes, warm-up, one CUDA graph each, every graph
    # also serving the sizes above the bucket below (Triton pads the batch up to it).
    buckets = [1, 2, 4, 8, 16, 32]
    assert list(config.dynamic_batching.preferred_batch_size) == buckets
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert not config.dynamic_batching.HasField("default_queue_policy")  # Triton's batcher keeps its prefetching
    assert [w.batch_size for w in config.model_warmup] == buckets
    assert all(list(w.inputs["input"].dims) == [1, 32, 32] for w in config.model_warmup)
    cuda = config.optimization.cuda
    assert cuda.graphs and [g.batch_size for g in cuda.graph_spec] == buckets
    assert [g.graph_lower_bound.batch_size for g in cuda.graph_spec] == [0, 0, 3, 5, 9, 17]
    assert all(list(g.input["input"].dim) == [1, 32, 32] for g in cuda.graph_spec)
    [group] = config.instance_group
    assert group.count == 2 and group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert list(group.gpus) == [0, 1] and list(group.profile) == []
    eager = parse(make_config(manifest, name="m", tuning=Tuning(cuda_graphs=False, buckets=(1, 8, 32))))
    assert not eager.optimization.HasField("cuda") and list(eager.dynamic_batching.preferred_batch_size) == [1, 8, 32]


def test_fp32_engine_has_fp32_io(tmp_path):
    _, manifest = fake_engine(tmp_path, precision="fp32", dtype="float32")
    config = parse(make_config(manifest, name="m"))
    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert config.output[0].data_type == model_config_pb2.TYPE_FP32


def test_several_profiles_and_dynamic_resolution(tmp_path):
    _, manifest = fake_engine(
        tmp_path,
        input_shape=(-1, 3, -1, -1),
        profiles=["input:1x3x224x224/4x3x224x224/8x3x224x224", "input:8x3x224x224/32x3x224x224/64x3x256x256"],
    )
    plan = plan_batching(manifest)
    assert plan.max_batch_size == 64 and plan.profiles == [0, 1] and plan.input_dims == [3, -1, -1]
    config = parse(make_config(manifest, name="m"))
    assert list(config.input[0].dims) == [3, -1, -1]
    assert list(config.instance_group[0].profile) == ["0", "1"]
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    # Height and width are dynamic: no shape to capture a graph or send a warm-up request with.
    assert not config.optimization.HasField("cuda") and not config.model_warmup


def test_gap_between_profiles_limits_max_batch(tmp_path):
    _, manifest = fake_engine(
        tmp_path, profiles=["input:1x1x32x32/4x1x32x32/8x1x32x32", "input:16x1x32x32/32x1x32x32/64x1x32x32"]
    )
    plan = plan_batching(manifest)
    assert plan.max_batch_size == 8 and plan.profiles == [0] and "gap" in plan.note
    assert list(parse(make_config(manifest, name="m")).instance_group[0].profile) == ["0"]


def test_profile_must_start_at_batch_one(tmp_path):
    _, manifest = fake_engine(tmp_path, profiles=["input:4x1x32x32/8x1x32x32/32x1x32x32"])
    with pytest.raises(
        ValueError,
        match="no optimisation profile starts at batch 1.*any batch from 1 to max_batch_size.*rebuild with --shapes",
    ):
        plan_batching(manifest)


def test_fixed_batch_engine_disables_triton_batching(tmp_path):
    _, manifest = fake_engine(
        tmp_path, input_shape=(4, 1, 32, 32), output_shape=(4, 10), profiles=["input:4x1x32x32/4x1x32x32/4x1x32x32"]
    )
    config = parse(make_config(manifest, name="m"))
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [4, 1, 32, 32] and list(config.output[0].dims) == [4, 10]
    assert not config.HasField("dynamic_batching")


def _static_plugin(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in plugin library")
    # A stand-in libnvinfer.so.10: Triton needs the static-registration library to link the engine's libnvinfer.
    nvinfer = tmp_path / "libnvinfer.so.10"
    (tmp_path / "nvinfer.c").write_text("int getPluginRegistry(void) { return 0; }\n")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(nvinfer), str(tmp_path / "nvinfer.c"), "-Wl,-soname,libnvinfer.so.10"],
        check=True,
    )
    src = tmp_path / "p.c"
    src.write_text(
        "extern int getPluginRegistry(void);\n"
        "__attribute__((constructor)) static void reg(void) { getPluginRegistry(); }\n"
    )
    lib = tmp_path / "libwtconv_trt_plugin.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(lib), str(src), f"-L{tmp_path}", "-l:libnvinfer.so.10"], check=True
    )
    return lib


def test_write_repository(tmp_path):
    engine, manifest = fake_engine(tmp_path)
    plugin = _static_plugin(tmp_path)
    repo = tmp_path / "repo"
    result = write(engine, repo, name="wtconvnext", plugin_static=plugin, instances=2)
    model = repo / "wtconvnext"
    assert (model / "1" / "model.plan").read_bytes() == engine.read_bytes()
    assert parse((model / "config.pbtxt").read_text()).max_batch_size == 32
    assert (model / "labels.txt").read_text().split() == [str(d) for d in range(10)]
    assert (model / "libwtconv_trt_plugin.so").is_file()
    serve = (repo / "serve.sh").read_text()
    assert 'LD_PRELOAD="$PLUGIN${LD_PRELOAD:+:$LD_PRELOAD}" exec tritonserver --model-repository="$HERE"' in serve
    assert '--backend-config=tensorrt,plugins="$PLUGIN"' in serve
    assert manifest.tensorrt_version in serve
    subprocess.run(["bash", "-n", str(repo / "serve.sh")], check=True)
    assert result.max_batch_size == 32 and result.serve_script == repo / "serve.sh"
    with pytest.raises(ValueError, match="already exists"):
        write(engine, repo, name="wtconvnext", plugin_static=plugin)
    (model / "stale.txt").write_text("from an earlier repository")
    write(engine, repo, name="wtconvnext", plugin_static=plugin, force=True)
    assert not (model / "stale.txt").exists()


def test_repository_refuses_a_corrupt_engine_and_a_missing_plugin(tmp_path, monkeypatch):
    from wtconv_core.errors import EngineError, PluginError
    from wtconv_libs import lookup

    monkeypatch.delenv(lookup.ENV_VARS["plugin-static"], raising=False)
    monkeypatch.setattr(lookup, "default_plugin", lambda **kwargs: None)  # none built anywhere
    engine, _ = fake_engine(tmp_path)
    with pytest.raises(PluginError, match="plugin_static="):
        write(engine, tmp_path / "repo")
    engine.write_bytes(b"x" + engine.read_bytes()[1:])
    with pytest.raises(EngineError, match="corrupt"):
        write(engine, tmp_path / "repo2", plugin_static=_static_plugin(tmp_path))


def test_repository_without_plugin(tmp_path):
    engine, _ = fake_engine(tmp_path, plugin=False, source={})
    write(engine, tmp_path / "repo", name="m")
    serve = (tmp_path / "repo" / "serve.sh").read_text()
    assert "LD_PRELOAD" not in serve and 'exec tritonserver --model-repository="$HERE"' in serve
    assert not (tmp_path / "repo" / "m" / "labels.txt").exists()
