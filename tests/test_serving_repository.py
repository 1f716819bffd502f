"""Serving without a server: the Python-backend repository, its config against Triton's schema, the launcher's
refusals, the load plan and the runtime choice.

Oracles: the ONNX graph read with onnx (I/O names, element types, dims), Triton's own ModelConfig protobuf
(tritonclient's model_config_pb2) parsing the config, a socket bound by the test.
"""

import socket
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("tritonclient.grpc")

from wtconv_core.errors import ConfigurationError, InputError, ServingError  # noqa: E402
from wtconv_serving.repositories import python_backend, repository
from wtconv_serving.repositories.triton_config import parse_config  # noqa: E402
from wtconv_serving.runners import runtimes
from wtconv_serving.server import launcher as server  # noqa: E402
from wtconv_serving.traffic import check as load


def tiny_onnx(path, dtype=TensorProto.FLOAT, batch="batch", metadata=None):
    """A one-node model (Relu) with the exporter's I/O names; ``batch`` None for a fixed batch of 4."""
    dim0 = batch if batch else 4
    x = helper.make_tensor_value_info("input", dtype, [dim0, 1, "height", "width"])
    y = helper.make_tensor_value_info("output", dtype, [dim0, 1, "height", "width"])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["input"], ["output"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    for key, value in (metadata or {"input_shape": "1,1,8,8"}).items():
        model.metadata_props.add(key=f"wtconv_trt.{key}", value=value)
    onnx.save(model, str(path))
    return path


def snapshot(folder) -> dict:
    """{relative path: bytes, or None for a folder} of everything under ``folder``: what a refused or interrupted
    command must leave as it was."""
    from pathlib import Path

    folder = Path(folder)
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


def write(onnx, out, **options):
    """check_python_repository then write_python_repository, as wtconv-trt serve --write-only does."""
    return python_backend.write_python_repository(python_backend.check_python_repository(onnx, out, **options))


def parsed(result):
    return parse_config(result.config_text)


@pytest.mark.parametrize("dtype, wire", [(TensorProto.FLOAT, "TYPE_FP32"), (TensorProto.FLOAT16, "TYPE_FP16")])
def test_config_follows_the_model(tmp_path, dtype, wire):
    """I/O names and types from the graph, dims from the metadata's native shape, batching, warm-up, the
    environment's site-packages for the stub; the written config parses as Triton's ModelConfig."""
    result = write(
        tiny_onnx(tmp_path / "m.onnx", dtype), tmp_path / "repo", name="tiny", runtime="onnxruntime", max_batch_size=16
    )
    config = parse_config((tmp_path / "repo" / "tiny" / "config.pbtxt").read_text())
    assert config == parsed(result)
    assert config.backend == "python" and config.name == "tiny" and config.max_batch_size == 16
    from tritonclient.grpc import model_config_pb2 as pb

    inputs = [(i.name, i.data_type, list(i.dims)) for i in config.input]
    assert inputs == [("input", pb.DataType.Value(wire), [1, 8, 8])]
    assert [(o.name, o.data_type) for o in config.output] == [("output", pb.DataType.Value(wire))]
    assert config.HasField("dynamic_batching")
    # The buckets: powers of two up to max_batch_size, Triton's preferred sizes, one warm-up request each.
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8, 16]
    assert sorted(w.batch_size for w in config.model_warmup) == [1, 2, 4, 8, 16]
    # No queue policy by default: with one, Triton 2.51's batcher stops prefetching and waits up to 500 ms for a busy
    # instance (docs/serving.md, "Tuning": p99 525 ms instead of 22 ms on the CPU at 16 requests in flight).
    assert not config.dynamic_batching.HasField("default_queue_policy")
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU and config.instance_group[0].count == 1
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["runtime"] == "onnxruntime" and params["onnx_file"] == "model.onnx"
    assert params["buckets"] == "1,2,4,8,16" and params["cuda_graphs"] == "1"
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in params  # CPU instances take host inputs only
    assert any(p.endswith("site-packages") for p in params["site_packages"].split(":"))
    version = tmp_path / "repo" / "tiny" / "1"
    assert (version / "model.py").read_text() == python_backend.MODEL_TEMPLATE.read_text()
    # Its bytecode too, so that the backend stub writes nothing into the folder a server polls.
    assert (version / "__pycache__" / f"model.{sys.implementation.cache_tag}.pyc").is_file()
    assert (version / "model.onnx").read_bytes() == (tmp_path / "m.onnx").read_bytes()


def test_gpu_instances_take_gpu_inputs_and_come_four_per_gpu(tmp_path):
    """A GPU runtime's config: four instances per GPU unless told (docs/serving.md, "Instances": the others copy their
    batches on the host while one computes), and inputs a client placed in GPU memory reach the runner there."""
    from tritonclient.grpc import model_config_pb2 as pb

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    config = parsed(write(onnx_path, tmp_path / "repo", name="g", runtime="torch-cuda"))
    [group] = config.instance_group
    assert (group.kind, group.count) == (pb.ModelInstanceGroup.KIND_GPU, 4)
    assert config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"
    config = parsed(write(onnx_path, tmp_path / "repo", name="h", runtime="torch-cuda", instances=3))
    assert config.instance_group[0].count == 3


def test_gpu_instances_go_on_every_gpu_or_on_those_named(tmp_path):
    """Instance groups per GPU: without gpus a GPU group names none, so Triton puts ``count`` instances on each GPU it
    sees; with gpus, on each of those (runtime auto included: naming GPUs makes GPU instances)."""
    from tritonclient.grpc import model_config_pb2 as pb

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    every = write(onnx_path, tmp_path / "repo", name="every", runtime="torch-cuda")
    [group] = parsed(every).instance_group
    assert (group.kind, group.count, list(group.gpus)) == (pb.ModelInstanceGroup.KIND_GPU, 4, [])
    assert every.placement(2) == "4 on each GPU the server sees (2 here: 0,1)"
    for name, runtime in (("named", "torch-cuda"), ("auto", "auto")):
        written = write(onnx_path, tmp_path / "repo", name=name, runtime=runtime, gpus=(1, 3), instances=2)
        [group] = parsed(written).instance_group
        assert (group.kind, group.count, list(group.gpus)) == (pb.ModelInstanceGroup.KIND_GPU, 2, [1, 3])
        assert written.placement() == "2 on each of GPU 1,3"
    cpu = write(onnx_path, tmp_path / "repo", name="cpu", runtime="onnxruntime", device="cpu")
    assert cpu.placement() == "1 on the CPU" and list(parsed(cpu).instance_group[0].gpus) == []


def test_gpus_are_refused_in_one_line_where_they_place_nothing(tmp_path, monkeypatch):
    """gpus empty, repeated, with CPU instances or KIND_MODEL ones, and (serving) a GPU the server would not see: one
    line naming gpus, nothing written. The GPUs a server started here sees are the CUDA driver's count."""
    from wtconv_trt.api.serving import plan_serving

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    out = tmp_path / "repo"
    cases = [
        ({"gpus": ()}, r"^gpus: expected distinct GPU indices from 0 to 1023, got \[\]$"),
        ({"gpus": (0, 0)}, "^gpus: expected distinct GPU indices"),
        ({"gpus": (0,), "runtime": "onnxruntime", "device": "cpu"}, "^gpus 0: places GPU instances, and they run on"),
        ({"gpus": (0,), "instance_kind": "cpu"}, "^gpus 0: places GPU instances, and they run on the CPU"),
        ({"gpus": (2,), "instance_kind": "model"}, "^gpus 2: places GPU instances, and instance_kind model"),
    ]
    for options, message in cases:
        with pytest.raises(InputError, match=message) as caught:
            write(onnx_path, out, **options)
        assert caught.value.parameter == "gpus" and len(str(caught.value).splitlines()) == 1
    monkeypatch.setattr(server, "visible_gpus", lambda: 2)
    monkeypatch.setattr("wtconv_trt.api.serving.runtime_choice", lambda *a, **k: ("torch-cuda", "torch-cuda"))
    assert server.check_visible_gpus((0, 1)) == 2
    with pytest.raises(InputError, match=r"^gpus 0,2: GPU 2 is not one the server would see here \(2 are visible: 0 "):
        plan_serving(onnx_path, out, gpus=(0, 2), http_port=0, grpc_port=0, metrics_port=0)
    monkeypatch.setattr(server, "visible_gpus", lambda: 0)
    with pytest.raises(InputError, match=r"GPU 0 is not one the server would see here \(no GPU is visible"):
        plan_serving(onnx_path, out, gpus=(0,), http_port=0, grpc_port=0, metrics_port=0)
    assert not out.exists()


def test_serve_puts_runtime_auto_on_every_gpu_it_resolves_to(tmp_path, monkeypatch):
    """serve resolves --runtime auto as the server will: a GPU runtime gets GPU instances on every visible GPU (not
    KIND_MODEL's one device), ONNX Runtime on the CPU gets CPU instances; --write-only keeps KIND_MODEL for a
    server elsewhere."""
    from tritonclient.grpc import model_config_pb2 as pb

    from wtconv_trt.api.serving import plan_serving

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    monkeypatch.setattr(server, "visible_gpus", lambda: 2)
    monkeypatch.setattr("wtconv_trt.api.serving.runtime_choice", lambda *a, **k: ("torch-cuda", "torch-cuda"))
    plan = plan_serving(onnx_path, tmp_path / "repo", name="a", http_port=0, grpc_port=0, metrics_port=0)
    written = plan.write_repository()
    [group] = parsed(written).instance_group
    assert (group.kind, group.count, list(group.gpus)) == (pb.ModelInstanceGroup.KIND_GPU, 4, [])
    assert written.placement(plan.visible_gpus) == "4 on each GPU the server sees (2 here: 0,1)"
    monkeypatch.setattr("wtconv_trt.api.serving.runtime_choice", lambda *a, **k: ("onnxruntime", "onnxruntime"))
    monkeypatch.setattr("wtconv_trt.api.serving._ort_device_here", lambda plan, repo: "cpu")
    plan = plan_serving(onnx_path, tmp_path / "repo", name="b", http_port=0, grpc_port=0, metrics_port=0)
    assert parsed(plan.write_repository()).instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    kept = plan_serving(onnx_path, tmp_path / "repo", name="c", serving=False).write_repository()
    assert parsed(kept).instance_group[0].kind == pb.ModelInstanceGroup.KIND_MODEL


def test_the_backend_copy_lives_under_the_one_cache_root(tmp_path, monkeypatch):
    """WTCONV_TRT_CACHE moves every cache of the package, the Triton backend copy included."""
    from wtconv_libs import lookup

    try:
        install = server.find_server()
    except ConfigurationError:
        pytest.skip("tritonserver is not installed: " + server.INSTALL_HINT)
    monkeypatch.setenv(lookup.ENV_CACHE, str(tmp_path / "cache"))
    backends = server.prepare_backends(install)
    assert backends.parent == tmp_path / "cache" / "triton"
    assert (backends / "python" / "triton_python_backend_stub").is_file()


def test_fixed_batch_means_no_triton_batching(tmp_path):
    result = write(tiny_onnx(tmp_path / "m.onnx", batch=None), tmp_path / "repo", name="fixed")
    config = parsed(result)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [4, 1, 8, 8]
    assert not config.HasField("dynamic_batching")


def test_existing_model_folder_needs_force(tmp_path):
    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    write(onnx_path, tmp_path / "repo", name="m")
    with pytest.raises(InputError, match="already exists.*force=True"):
        write(onnx_path, tmp_path / "repo", name="m")
    write(onnx_path, tmp_path / "repo", name="m", force=True)


def test_invalid_repositories_are_refused_in_one_line(tmp_path):
    repo = tmp_path / "repo"
    with pytest.raises(ServingError, match="does not exist"):
        repository.check_repository(repo)
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\nmax_batch_size: eight\n')
    with pytest.raises(ServingError, match=r"config.pbtxt is not a valid Triton model config") as error:
        repository.check_repository(repo)
    assert "\n" not in str(error.value)
    (repo / "m" / "config.pbtxt").write_text('name: "other"\nbackend: "python"\n')
    with pytest.raises(ServingError, match="names the model 'other' but its folder is 'm'"):
        repository.check_repository(repo)
    (repo / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    assert repository.check_repository(repo) == ["m"]


def test_taken_port_is_refused_before_the_server_starts(tmp_path):
    write(tiny_onnx(tmp_path / "m.onnx"), tmp_path / "repo", name="m")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert server.port_in_use("127.0.0.1", port)
        try:
            install = server.find_server()
        except ConfigurationError:
            pytest.skip("tritonserver is not installed: " + server.INSTALL_HINT)
        launcher = server.TritonServer(tmp_path / "repo", http_port=port, grpc_port=0, install=install)
        with pytest.raises(ServingError, match=f"port {port} on 127.0.0.1 \\(http\\) is already in use"):
            launcher.start()
        assert launcher.process is None


def test_first_error_reads_tritons_log():
    text = (
        'I1201 06:14:57.297370 10650 pb_stub.cc:298] "loading"\n'
        "E1201 06:14:57.299593 10642 model_lifecycle.cc:642] \"failed to load 'echo' version 1: Internal: "
        "ModuleNotFoundError: No module named 'numpy'\\n\\nAt:\\n  x.py(30): <module>\"\n"
        "error: creating server: Internal - failed to load all models\n"
    )
    assert server.first_error(text) == (
        "failed to load 'echo' version 1: Internal: ModuleNotFoundError: No module named 'numpy'"
    )
    assert server.first_error("error: creating server: bad\n") == "creating server: bad"


def test_request_plan_is_distinct_and_cycles_batch_sizes():
    plan = load.request_plan(2000, 600, [1, 2, 4, 8])
    assert len(set(plan)) == 2000
    assert [b for _, b in plan[:8]] == [1, 2, 4, 8, 1, 2, 4, 8]
    assert all(0 <= start < 600 for start, _ in plan)
    with pytest.raises(ValueError, match="pool of at least"):
        load.request_plan(2000, 100, [1, 2])


def test_runtime_choice_on_this_machine(tmp_path):
    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only choice")
    assert runtimes.select_runtime("auto", onnx_path=onnx_path) == "onnxruntime"
    with pytest.raises(ConfigurationError, match="runtime torch-cuda cannot run here: no CUDA GPU"):
        runtimes.select_runtime("torch-cuda", onnx_path=onnx_path)
    with pytest.raises(ConfigurationError, match="runtime tensorrt cannot run here"):
        runtimes.select_runtime("tensorrt", onnx_path=onnx_path)
    runner = runtimes.make_runner(runtimes.load_runtime("auto", onnx_path=onnx_path))
    x = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)
    assert np.array_equal(runner(x), np.maximum(x, 0))


def test_cli_write_only_and_missing_model(tmp_path, capsys):
    from wtconv_trt.cli import main

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    assert main(["serve", str(onnx_path), "--repo", str(tmp_path / "repo"), "--write-only"]) == 0
    assert 'backend: "python"' in capsys.readouterr().out
    assert (tmp_path / "repo" / "m" / "config.pbtxt").is_file()
    assert main(["serve", str(tmp_path / "absent.onnx"), "--repo", str(tmp_path / "r2"), "--write-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent.onnx does not exist" in err[0]


def test_environment_paths_cover_this_interpreter():
    paths = python_backend.environment_paths()
    assert any(p.startswith(sys.prefix) for p in paths)


def test_engine_sets_the_batch_limit_and_travels_with_its_manifest(tmp_path):
    """With --engine, max_batch_size comes from the engine's profiles (Triton may send any batch up to it) and
    the engine is copied with its manifest, which still checks out (sha256) in the repository."""
    from engine_helpers import fake_engine_of_tiny_onnx

    from trt_engine.engine_file import open_engine

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    engine, _ = fake_engine_of_tiny_onnx(tmp_path, onnx_path)
    result = write(onnx_path, tmp_path / "repo", name="m", engine=engine)
    config = parsed(result)
    assert config.max_batch_size == 16
    assert {k: v.string_value for k, v in config.parameters.items()}["engine_file"] == "model.plan"
    copied = tmp_path / "repo" / "m" / "1" / "model.plan"
    assert copied.read_bytes() == engine.read_bytes()
    assert open_engine(copied).manifest == open_engine(engine).manifest


def test_the_runtime_line_says_what_serves_and_why(tmp_path, monkeypatch):
    """serve resolves --runtime auto as the server will, before anything is written: the runtime, each better one
    that cannot run here with its reason, and an --engine that goes unused on this machine."""
    from wtconv_trt.api.serving import runtime_choice

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    reasons = {"tensorrt": "no CUDA GPU visible to PyTorch", "torch-cuda": "no CUDA GPU visible to PyTorch"}
    monkeypatch.setattr(runtimes, "unavailable_reason", lambda runtime, **_: reasons.get(runtime))
    # Where ONNX Runtime runs: the CPU, as on a machine whose onnxruntime has no CUDA execution provider.
    monkeypatch.setattr(runtimes, "resolve_ort_device", lambda device, *_: ("cpu", "no CUDA EP"))
    chosen, note = runtime_choice("auto", onnx_path, "tiny.engine")
    assert chosen == "onnxruntime"
    assert note == (
        "runtime onnxruntime (--runtime auto; tensorrt cannot run here: no CUDA GPU visible to PyTorch; torch-cuda "
        "cannot run here: no CUDA GPU visible to PyTorch): ONNX Runtime CPU EP (not on a GPU: no CUDA EP); the "
        "engine tiny.engine goes into the repository but does not run on this machine"
    )
    assert runtime_choice("auto", onnx_path, None)[1] == (
        "runtime onnxruntime (--runtime auto; torch-cuda cannot run here: no CUDA GPU visible to PyTorch): ONNX "
        "Runtime CPU EP (not on a GPU: no CUDA EP)"
    )
    del reasons["tensorrt"]
    assert runtime_choice("auto", onnx_path, "tiny.engine") == ("tensorrt", "runtime tensorrt (--runtime auto)")
    assert runtime_choice("onnxruntime", onnx_path, None, device="cpu") == (
        "onnxruntime",
        "runtime onnxruntime (--runtime onnxruntime): ONNX Runtime CPU EP",
    )
    with pytest.raises(ConfigurationError, match="runtime torch-cuda cannot run here: no CUDA GPU"):
        runtime_choice("torch-cuda", onnx_path, None)


def test_loading_phase_reads_the_server_log():
    """The progress serve logs while the server loads and warms up a model, from Triton's and our model's lines."""
    start = 'I1201 16:36:43.210669 6879 model_lifecycle.cc:472] "loading: tiny_fp16:1"\n'
    ours = (
        'I1201 16:36:44.489690 6879 python_model.py:56] "tiny_fp16: runtime onnxruntime, input input float16, '
        'output output float16 (loaded in 1.2 s)"\n'
    )
    done = "I1201 16:37:24.598596 6879 model_lifecycle.cc:839] \"successfully loaded 'tiny_fp16'\"\n"
    assert server.loading_phase("") == "starting"
    assert server.loading_phase(start) == "loading 'tiny_fp16' (its runtime and model files)"
    assert server.loading_phase(start + ours).startswith("warming up 'tiny_fp16' (runtime onnxruntime, loaded in 1.2 s")
    assert server.loading_phase(start + ours + done) == "models loaded, starting the endpoints"


# Triton 2.51's lines when the stub watch reloaded a model whose stub was killed, as a CPU run wrote them: the reload's
# load, then the old version's unload.
RELOADED = (
    'I1206 08:23:14.180156 16072 model_lifecycle.cc:472] "loading: digits_std:1"\n'
    "I1206 08:23:16.074747 16072 model_lifecycle.cc:839] \"successfully loaded 'digits_std'\"\n"
)
UNLOADED = "I1206 08:23:17.077625 16072 model_lifecycle.cc:624] \"successfully unloaded 'digits_std' version 1\"\n"


def test_the_watch_records_whether_the_old_version_was_unloaded(tmp_path):
    """After a reload, the server's log written since it began says whether Triton unloaded the old version: its
    unload line gives True and the seconds from the reload's load line (by the lines' own times); without one it is
    not known until unload_wait_s has passed, then False. An unload line from before the reload, of another model, or
    after the model's next reload (that one's old version) is not this reload's."""
    import time

    log_file = tmp_path / "server.log"
    log_file.write_text(UNLOADED.replace("08:23:17", "08:20:00"))  # an earlier reload's
    launcher = server.TritonServer(tmp_path, log_file=log_file)
    launcher.unload_wait_s = 60.0

    def reloaded(text, seconds_ago=0.0):
        offset = log_file.stat().st_size
        with open(log_file, "a") as log:
            log.write(text)
        recovery = server.Recovery("digits_std", 4321, 2.0, None, offset, time.monotonic() - seconds_ago)
        launcher.recoveries.append(recovery)
        return recovery

    first = reloaded(RELOADED + UNLOADED.replace("digits_std", "digits"))
    launcher.follow_unloads()
    assert first.old_version_unloaded is None and first.unloaded_after_s is None  # not yet, and not for long
    with open(log_file, "a") as log:
        log.write(UNLOADED)
    launcher.follow_unloads()
    assert first.old_version_unloaded is True and first.unloaded_after_s == pytest.approx(1.0)  # 17.08 - 16.07
    assert first.as_dict() == {
        "model": "digits_std",
        "killed_pid": 4321,
        "recovered_by": "reload",
        "server_pid": None,
        "reload_s": 2.0,
        "error": None,
        "old_version_unloaded": True,
        "old_version_unloaded_after_s": 1.0,
        "restart_times": None,
    }
    stuck = reloaded(RELOADED, seconds_ago=61.0)  # its unload line never came within the wait
    failed = reloaded(RELOADED)
    failed.error = "could not reload model digits_std: not loaded within 300 s"
    later = reloaded(RELOADED + UNLOADED)  # the next reload's old version
    launcher.follow_unloads()
    assert stuck.old_version_unloaded is False and stuck.unloaded_after_s is None
    assert failed.old_version_unloaded is None  # a failed reload has no old version to follow
    assert later.old_version_unloaded is True
    # A reload across midnight, and the unload logged before the load line (the old version let go first).
    assert server.old_version_unload(
        RELOADED.replace("08:23:16", "23:59:59") + UNLOADED.replace("08:23:17", "00:00:00"), "digits_std"
    ) == (True, 1.0)
    first_unloaded = UNLOADED.replace("08:23:17.077625", "08:23:16.074001")
    assert server.old_version_unload(first_unloaded + RELOADED, "digits_std") == (True, 0.0)
    assert server.old_version_unload(RELOADED, "digits_std") == (False, None)
    # A restart's old version went with the old process: no unload line to wait for, none looked for.
    restarted = server.Recovery("digits_std", 4321, 9.0, None, log_file.stat().st_size, time.monotonic() - 61.0)
    restarted.way, restarted.server_pid, restarted.old_version_unloaded = "restart", 5678, True
    launcher.recoveries.append(restarted)
    launcher.follow_unloads()
    assert restarted.old_version_unloaded is True and restarted.server_restarted
    assert restarted.as_dict()["recovered_by"] == "restart" and restarted.as_dict()["server_pid"] == 5678


def test_the_watch_recovers_by_restart_or_reload_only(tmp_path):
    """The watch's recovery is a restart (default) or a reload; anything else is refused before a thread starts."""
    launcher = server.TritonServer(tmp_path, model_control="poll")
    assert launcher.recover == "restart"
    with pytest.raises(ValueError, match="recover 'respawn': expected one of restart, reload"):
        launcher.watch(recover="respawn")
    assert launcher._watcher is None


def test_a_restart_waits_for_its_ports_within_a_bound(tmp_path):
    """A restart starts the new process on the old one's ports once the check of a first start passes: a port still
    taken (a listening socket here) is waited for, then refused with that check's line when it stays taken."""
    import threading

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    launcher = server.TritonServer(tmp_path, http_port=port, grpc_port=0)
    try:
        with pytest.raises(ServingError, match=f"port {port} on 127.0.0.1 \\(http\\) is already in use"):
            launcher._wait_ports_free(0.5)
        threading.Timer(0.5, taken.close).start()
        launcher._wait_ports_free(10.0)  # passes once the port is free
    finally:
        taken.close()
    assert not server.port_in_use("127.0.0.1", port)


def test_a_refused_start_leaves_no_temporary_folder(tmp_path, monkeypatch):
    """A server refused before it starts (here: a repository without a model) makes no tritonserver-* folder for
    its log; one that starts makes it then."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "empty-repo").mkdir()
    launcher = server.TritonServer(tmp_path / "empty-repo", http_port=0, grpc_port=0)
    with pytest.raises(ServingError, match="holds no model folder"):
        launcher.start()
    assert not list(tmp_path.glob("tritonserver-*")) and launcher.log_file is None


def test_a_module_exported_from_python_is_not_served_by_torch_cuda(tmp_path, monkeypatch):
    """torch-cuda rebuilds the PyTorch model from the ONNX metadata, which a module exported from Python does not
    hold: where that runtime could run (a GPU and the kernel library, stood in here), auto takes ONNX Runtime for
    such a model, and asking for torch-cuda says why not, instead of a model that fails to load in the server."""
    torch = pytest.importorskip("torch")
    from wtconv_torch import cuda_kernels

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda_kernels, "find_library", lambda: tmp_path / "libwtconv_kernels_capi.so")
    mine = tiny_onnx(tmp_path / "unet.onnx", metadata={"source": "module", "module_class": "my.UNet"})
    shipped = tiny_onnx(tmp_path / "digits.onnx", metadata={"source": "default", "weights": "shipped"})
    assert "exported from a Python module" in runtimes.unavailable_reason("torch-cuda", onnx_path=mine)
    assert runtimes.unavailable_reason("torch-cuda", onnx_path=shipped) is None
    assert runtimes.select_runtime("auto", onnx_path=mine) == "onnxruntime"
    assert runtimes.select_runtime("auto", onnx_path=shipped) == "torch-cuda"


def test_serve_refuses_before_it_writes_or_starts_anything(tmp_path, capsys):
    """Each refusal of ``serve``: exit status 2, one line naming the option, and the disk as it was (a snapshot of
    the folder the repository, the log and the report would go to). An output that cannot be written (/proc), two
    endpoints on one port, a port in use, a runtime that cannot run here, a repository that cannot be written."""
    from test_cli_bad_input import _unwritable_dir

    from wtconv_trt.cli import main

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    work = tmp_path / "work"
    work.mkdir()
    unwritable = _unwritable_dir(work)  # where even root cannot create files
    base = ["serve", str(onnx_path), "--repo", str(work / "repo"), "--http-port", "0", "--grpc-port", "0"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        cases = [
            (
                base + ["--json", "/proc/load.json", "--load-test", "10"],
                "--json /proc/load.json: cannot create files in /proc",
            ),
            (base + ["--log", "/proc/server.log"], "--log /proc/server.log: cannot create files in /proc"),
            (base + ["--log", str(work / "missing" / "server.log")], "does not exist; create it first"),
            (
                base[:-4] + ["--http-port", "8123", "--grpc-port", "0", "--metrics-port", "8123"],
                "--http-port 8123 and --metrics-port 8123: each endpoint needs its own port",
            ),
            (
                base[:-4] + ["--http-port", "0", "--grpc-port", busy],
                f"port {busy} on 127.0.0.1 (grpc) is already in use",
            ),
            (base + ["--metrics-port", busy], f"port {busy} on 127.0.0.1 (metrics) is already in use"),
            (base + ["--runtime", "tensorrt"], "runtime tensorrt cannot run here"),
        ]
        if unwritable is not None:
            cases.append((base[:3] + [str(unwritable / "repo"), *base[4:]], "cannot create files in"))
        for argv, phrase in cases:
            before = snapshot(tmp_path)
            capsys.readouterr()
            assert main(argv) == 2, argv
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("wtconv-trt serve: error: ") and phrase in err[0], (argv, err)
            assert snapshot(tmp_path) == before, argv
