"""The GPU-machine scripts' shared library (tools/device_lib.sh) on the CPU: its stages, notes, log packing and the
one CMake configure of plugin/, run in bash with real commands (a recording ``cmake`` on PATH stands in for CMake,
which would need nvcc and a GPU's toolchain to configure the kernels). The scripts themselves run only on a GPU
machine; here they are parsed (``bash -n``) and held to the library: none configures CMake or runs a stage of its
own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "tools" / "device_lib.sh"
SCRIPTS = [path for path in sorted((ROOT / "tools").glob("device_*.sh")) if path != LIBRARY] + [
    ROOT / "plugin" / "trt" / "harness" / "run_device.sh"
]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def bash(script: str, *, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"source {LIBRARY}\n{script}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_every_device_script_parses():
    assert len(SCRIPTS) >= 5
    for script in SCRIPTS:
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"


def test_every_device_script_uses_the_library_and_configures_no_cmake_itself():
    for script in SCRIPTS:
        text = script.read_text(encoding="utf-8")
        assert "device_lib.sh" in text, f"{script.name} does not source tools/device_lib.sh"
        assert "cmake -S plugin" not in text, f"{script.name} configures plugin/ itself (use configure_plugin)"
        runners = re.findall(r"^\s*(stage|run_stage|step|finish_logs)\s*\(\)", text, flags=re.M)
        assert runners == [], f"{script.name} defines its own stage runner {runners} (use the library's stage)"


def test_stages_are_noted_logged_and_packed(tmp_path):
    logs, archive = tmp_path / "logs", tmp_path / "logs.tgz"
    result = bash(
        f"""device_start {logs}
stage ok echo fine
stage bad bash -c 'echo broken; exit 3'
note "a note"
device_finish {archive}"""
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "===== ok rc=0" in out and "fine" in out
    assert "===== bad rc=3" in out and "broken" in out
    summary = out.split("===== summary\n", 1)[1].splitlines()
    assert summary[0].startswith("ok: rc=0 (") and summary[1].startswith("bad: rc=3 (") and summary[2] == "a note"
    assert (logs / "ok.rc").read_text().split()[0] == "0"
    assert (logs / "bad.rc").read_text().split()[0] == "3"
    assert (logs / "bad.log").read_text() == "broken\n"
    with tarfile.open(archive) as packed:
        names = {Path(name).name for name in packed.getnames()}
    assert {"ok.log", "bad.log", "ok.rc", "bad.rc"} <= names


def test_a_run_without_failures_exits_0_and_calls_after_summary(tmp_path):
    result = bash(
        f"""device_start {tmp_path / "logs"}
after_summary() {{ echo "after: $status"; }}
stage one true
device_finish {tmp_path / "a.tgz"}"""
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("after: 0")


def test_dry_run_records_the_command_instead_of_running_it(tmp_path):
    logs = tmp_path / "logs"
    result = bash(
        f"""device_start {logs}
stage build build_plugin build/plugin -DX=1 --target wtconv_ort
echo "status=$status" """,
        env={"DRY_RUN": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert (logs / "build.log").read_text() == "DRY_RUN: build_plugin build/plugin -DX=1 --target wtconv_ort\n"
    assert "status=0" in result.stdout


@pytest.fixture
def recording_cmake(tmp_path):
    """A ``cmake`` that appends its arguments, one call a line, to calls.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    fake = bin_dir / "cmake"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, calls


def test_configure_plugin_is_the_one_configure(tmp_path, recording_cmake):
    env, calls = recording_cmake
    build = tmp_path / "build"
    result = bash(f"configure_plugin {build} -DWTCONV_BUILD_PLUGIN_HARNESS=OFF", env={**env, "CUDA_ARCHS": "89"})
    assert result.returncode == 0, result.stderr
    words = calls.read_text().split()
    assert words[:4] == ["-S", "plugin", "-B", str(build)]
    assert "-DCMAKE_BUILD_TYPE=Release" in words and "-DCMAKE_CUDA_ARCHITECTURES=89" in words
    assert words[-1] == "-DWTCONV_BUILD_PLUGIN_HARNESS=OFF"
    # Ninja only for a new tree (a tree configured before keeps its generator) and only where ninja is installed.
    assert ("-G" in words) == (shutil.which("ninja") is not None)
    (build / "CMakeCache.txt").parent.mkdir(parents=True)
    (build / "CMakeCache.txt").write_text("")
    calls.unlink()
    bash(f"configure_plugin {build}", env=env)
    assert "-G" not in calls.read_text().split()
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in calls.read_text().split()  # the default


def test_build_plugin_sends_targets_to_the_build_and_options_to_the_configure(tmp_path, recording_cmake):
    env, calls = recording_cmake
    build = tmp_path / "b"
    result = bash(f"build_plugin {build} -DA=1 --target wtconv_kernels_capi -DB=2 --target wtconv_ort", env=env)
    assert result.returncode == 0, result.stderr
    configure, build_call = calls.read_text().splitlines()
    assert configure.endswith("-DA=1 -DB=2") and "--target" not in configure
    assert build_call == f"--build {build} -j --target wtconv_kernels_capi --target wtconv_ort"


def test_a_failed_configure_stops_the_build(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    (bin_dir / "cmake").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit 1\n')
    (bin_dir / "cmake").chmod(0o755)
    result = bash(f"build_plugin {tmp_path / 'b'}", env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert result.returncode == 1
    assert len(calls.read_text().splitlines()) == 1


def test_ort_headers_finds_the_newest_version(tmp_path):
    for version in ("1.17", "1.29", "1.9"):
        folder = tmp_path / "third_party" / "onnxruntime-headers" / version / "include"
        folder.mkdir(parents=True)
    result = bash("ort_headers", cwd=tmp_path)
    assert result.stdout.strip() == str(tmp_path / "third_party" / "onnxruntime-headers" / "1.29" / "include")
    assert bash("ort_headers", cwd=tmp_path / "third_party").stdout.strip() == ""


def test_the_serving_script_plans_the_measurements_of_its_knobs(tmp_path):
    """tools/device_serving.sh in DRY_RUN (nothing installed, exported or served): the client modes, rounds, the
    --gpus run and the soak each become the stages docs/serving.md names, with serve's options for them."""
    import sys

    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TMPDIR": str(tmp_path),
        "OUT": str(tmp_path / "out"),
        "DRY_RUN": "1",
        "DEVICE": "cpu",
        "MODELS": "tiny",
        "RUNTIMES": "torch-cuda",
        "ROUNDS": "2",
        "SHARED_MEMORY": "none cuda",
        "GPUS": "0,1",
        "SOAK": "600",
        "ALTERNATIVES": "0",
        "SKIP_BUILD": "1",
        "BUDGET": "100000",
    }
    result = subprocess.run(
        ["bash", str(ROOT / "tools" / "device_serving.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.split("===== summary\n", 1)[1].split("=====")[0].splitlines()
    stages = [line.split(":")[0] for line in summary if ": rc=0" in line]
    assert stages == [
        "serve_torch-cuda_tiny",
        "serve_torch-cuda_tiny_round2",
        "serve_torch-cuda_tiny_shm-cuda",
        "serve_torch-cuda_tiny_shm-cuda_round2",
        "serve_torch-cuda_tiny_gpus0-1",
        "soak_torch-cuda_tiny",
    ]
    [logs] = list(tmp_path.glob("tmp.*/logs"))
    assert (logs / "serve_torch-cuda_tiny_shm-cuda_round2.log").read_text().split()[-2:] == ["--shared-memory", "cuda"]
    assert "--gpus 0,1 --no-extra-process" in (logs / "serve_torch-cuda_tiny_gpus0-1.log").read_text()
    soak = (logs / "soak_torch-cuda_tiny.log").read_text()
    assert "--soak 600 --concurrency 256 --batch-sizes 1,2,4,8,16,32,64 --kill-backend" in soak
    assert (tmp_path / "out" / "serving_results.md").is_file()
