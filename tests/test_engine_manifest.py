"""Engine manifest: round trip through its file, sha256, integrity and version checks (CPU only)."""

import hashlib
import json

import pytest
from engine_helpers import fake_engine

from trt_engine import manifest as mf
from trt_engine.profiles import parse_profile
from wtconv_core.errors import EngineError
from wtconv_core.files import atomic_write_json


def test_round_trip_and_sha256(tmp_path):
    engine, written = fake_engine(tmp_path)
    path = mf.manifest_path(engine)
    assert path.name == "model.fp16.engine.json"
    read = mf.read_manifest(engine)
    assert read == written
    on_disk = json.loads(path.read_text())
    assert on_disk["engine"]["sha256"] == hashlib.sha256(engine.read_bytes()).hexdigest() == read.engine_sha256
    assert mf.sha256_file(engine) == read.engine_sha256
    assert on_disk["tensorrt"] == {"version": "10.16.0.72", "major": 10, "backend": "tensorrt"}
    assert on_disk["plugin"]["name"] == "WTConv2d" and on_disk["plugin"]["version"] == "1"
    assert read.plugin.name == "WTConv2d" and read.plugin.tensorrt_major == 10
    assert read.profiles == [parse_profile("input:1x1x32x32/8x1x32x32/32x1x32x32")]
    assert {t["name"]: t["dtype"] for t in on_disk["io"]} == {"input": "float16", "output": "float16"}
    mf.check_engine_file(engine, read)


def test_truncated_and_corrupt_engines_are_caught(tmp_path):
    engine, manifest = fake_engine(tmp_path)
    data = engine.read_bytes()
    engine.write_bytes(data[:-10])
    with pytest.raises(EngineError, match="truncated, corrupt or was replaced; rebuild"):
        mf.check_engine_file(engine, manifest)
    engine.write_bytes(bytes([data[0] ^ 0xFF]) + data[1:])
    with pytest.raises(EngineError, match="sha256 .* corrupt or was replaced"):
        mf.check_engine_file(engine, manifest)
    engine.unlink()
    with pytest.raises(EngineError):
        mf.check_engine_file(engine, manifest)


def test_missing_and_malformed_manifests(tmp_path):
    engine = tmp_path / "x.engine"
    engine.write_bytes(b"123")
    with pytest.raises(EngineError, match="no manifest x.engine.json"):
        mf.read_manifest(engine)
    mf.manifest_path(engine).write_text("{not json")
    with pytest.raises(EngineError, match="not valid JSON"):
        mf.read_manifest(engine)
    mf.manifest_path(engine).write_text('{"format": "something else"}')
    with pytest.raises(EngineError, match="not a wtconv-trt engine manifest"):
        mf.read_manifest(engine)
    mf.manifest_path(engine).write_text(json.dumps({"format": mf.FORMAT, "format_version": 99}))
    with pytest.raises(EngineError, match="format version 99"):
        mf.read_manifest(engine)


def test_tensorrt_version_check(tmp_path):
    _, manifest = fake_engine(tmp_path, trt_version="10.16.0.72")
    mf.check_tensorrt_version(manifest, "10.16.0.72")
    with pytest.raises(
        EngineError,
        match=r"built with TensorRT 10\.16\.0\.72, this machine has TensorRT 11\.1\.0\.2.*"
        r"Rebuild it here.*TensorRT 11",
    ):
        mf.check_tensorrt_version(manifest, "11.1.0.2")
    with pytest.raises(EngineError, match="only load in the TensorRT version that built them"):
        mf.check_tensorrt_version(manifest, "10.15.1.1")


def test_parse_version():
    assert mf.parse_version("10.16.0.72") == (10, 16, 0, 72)
    assert mf.parse_version("11.1.0.post1") == (11, 1, 0)
    with pytest.raises(EngineError):
        mf.parse_version("dev")


def test_version_is_checked_before_deserialization(tmp_path, monkeypatch):
    """An engine from another TensorRT is refused from its manifest, before TensorRT is asked to deserialize it
    (the stand-in module has no Runtime: reaching deserialization would fail differently)."""
    import types

    from trt_engine import tensorrt_api
    from trt_engine.engine_file import load_engine_for_run, open_engine

    engine, _ = fake_engine(tmp_path, trt_version="10.16.0.72")
    monkeypatch.setattr(tensorrt_api, "import_tensorrt", lambda: types.SimpleNamespace(__version__="11.1.0.5"))
    with pytest.raises(EngineError, match="built with TensorRT 10.16.0.72, this machine has TensorRT 11.1.0.5"):
        load_engine_for_run(open_engine(engine))


def test_typed_manifest_round_trip(tmp_path):
    """The typed form (EngineManifest) and the file's JSON form carry the same content."""
    engine, written = fake_engine(tmp_path)
    info = mf.read_manifest(engine)
    assert info == written and info.to_json() == json.loads(mf.manifest_path(engine).read_text())
    assert mf.EngineManifest.from_json(info.to_json()) == info
    assert (info.precision, info.tensorrt_major, info.backend) == ("fp16", 10, "tensorrt")
    assert [t.name for t in info.inputs] == ["input"] and [t.name for t in info.outputs] == ["output"]
    assert info.inputs[0].shape == (-1, 1, 32, 32)
    assert info.profiles == [parse_profile("input:1x1x32x32/8x1x32x32/32x1x32x32")]
    from wtconv_export import __version__

    assert info.to_json()["wtconv_trt"] == {"version": __version__} and info.wtconv_trt_version == __version__


def test_manifest_written_before_the_version_and_backend_entries_still_reads(tmp_path):
    engine, written = fake_engine(tmp_path)
    older = written.to_json()
    del older["wtconv_trt"], older["tensorrt"]["backend"]
    atomic_write_json(mf.manifest_path(engine), older)
    info = mf.read_manifest(engine)
    assert info.backend == "tensorrt" and info.wtconv_trt_version is None
    assert info.to_json() == older | {"tensorrt": {**older["tensorrt"], "backend": "tensorrt"}}


def test_malformed_entries_are_named(tmp_path):
    engine, written = fake_engine(tmp_path)
    bad = written.to_json()
    bad["io"][0]["mode"] = "sideways"
    atomic_write_json(mf.manifest_path(engine), bad)
    with pytest.raises(EngineError, match="malformed entry.*io entry"):
        mf.read_manifest(engine)
    bad = written.to_json()
    del bad["engine"]["sha256"]
    atomic_write_json(mf.manifest_path(engine), bad)
    with pytest.raises(EngineError, match="malformed entry.*sha256"):
        mf.read_manifest(engine)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_take_the_user_s_umask(tmp_path, umask):
    """Engines, manifests, reports and repository files get the mode any file the user writes gets (0o666 less the
    umask), not mkstemp's 0o600: a Triton container running as another user must read the repository."""
    import os
    import stat

    from engine_helpers import fake_engine_of_tiny_onnx, tiny_onnx

    from wtconv_core.files import atomic_write_bytes
    from wtconv_serving.repositories.python_backend import check_python_repository, write_python_repository
    from wtconv_serving.repositories.tensorrt_backend import write_tensorrt_repository

    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "plan.engine", b"engine bytes")
        atomic_write_json(tmp_path / "bench.json", {"results": []})
        onnx_path = tiny_onnx(tmp_path / "m.onnx")
        # Its manifest written by write_manifest; built from m.onnx, as serving needs.
        engine, _ = fake_engine_of_tiny_onnx(tmp_path, onnx_path, plugin=False)
        triton = write_tensorrt_repository(engine, tmp_path / "triton")
        served = write_python_repository(check_python_repository(onnx_path, tmp_path / "served", engine=engine))
    finally:
        os.umask(old)
    expected = 0o666 & ~umask
    files = [tmp_path / "plan.engine", tmp_path / "bench.json", mf.manifest_path(engine)]
    files += [triton.model_dir / "1" / "model.plan", triton.model_dir / "engine.json", triton.config]
    files += [served.model_dir / "1" / "model.plan.json", served.config]
    modes = {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in files}
    assert modes == {path.name: oct(expected) for path in files}
    assert stat.S_IMODE(triton.serve_script.stat().st_mode) == expected | 0o111
