"""The GPU-machine scripts' shared library (tools/device_lib.sh) on the CPU: its stages, notes, log packing and the
one CMake configure of plugin/, run in bash with real commands (a recording ``cmake`` on PATH stands in for CMake,
which would need nvcc and a GPU's toolchain to configure the kernels). The scripts themselves run only on a GPU
machine; here they are parsed (``bash -n``) and held to the library: none configures CMake or runs a stage of its
own. tools/device_kernels.sh's stages are followed under DRY_RUN, each stage's log holding the command it would
run."""

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
        "SERVE_ARGS": "--mps --instances 3",  # serve's own options, for every server of the run
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
    for stage in stages:
        assert " --mps --instances 3" in (logs / f"{stage}.log").read_text(), stage
    assert (tmp_path / "out" / "serving_results.md").is_file()


def dry_run_session(tmp_path: Path, *step: str, **env: str) -> subprocess.CompletedProcess:
    """tools/device_session.sh STEP under DRY_RUN on the CPU (onnxruntime's device cpu: no CUDA provider here), its
    state, temporary folders and results under tmp_path."""
    import sys

    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TMPDIR": str(tmp_path),
        "OUT": str(tmp_path / "out"),
        "SESSION_STATE": str(tmp_path / "state"),
        "DRY_RUN": "1",
        "DEVICE": "cpu",
        **env,
    }
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "device_session.sh"), *step],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


def ran(result: subprocess.CompletedProcess) -> list:
    """The stages the summary says ran, in order."""
    summary = result.stdout.split("===== summary\n", 1)[1].split("=====")[0].splitlines()
    return [line.split(":")[0] for line in summary if ": rc=" in line]


def test_the_session_rounds_step_plans_both_runtimes_rounds_and_the_gpus_run(tmp_path):
    """`rounds`: each runtime once, its sweep coming round three times to 16 and 256 in flight, both request mixes,
    full-length windows, clients on CUDA shared memory; then --gpus 0 at 256 for each; the exports kept in the
    session's state for the soak; Triton's split compared with the committed figures."""
    result = dry_run_session(tmp_path, "rounds")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ran(result) == [
        "serve_torch-cuda_tiny_shm-cuda",
        "serve_onnxruntime_tiny_shm-cuda",
        "serve_torch-cuda_tiny_shm-cuda_gpus0",
        "serve_onnxruntime_tiny_shm-cuda_gpus0",
    ]
    [logs] = list(tmp_path.glob("tmp.*/logs"))
    # DRY_RUN records the script's serve function with its arguments (serve --load-test CHECK --window WINDOW ...)
    rounds = (logs / "serve_onnxruntime_tiny_shm-cuda.log").read_text().split()
    assert rounds[1:5] == ["serve", "onnxruntime_tiny_shm-cuda", "onnxruntime", "tiny"]
    assert " ".join(rounds[5:]) == (
        "--sweep 16,256,16,256,16,256 --mix 1,2,4,8,16,32,64 --no-extra-process --shared-memory cuda"
    )
    gpus = (logs / "serve_torch-cuda_tiny_shm-cuda_gpus0.log").read_text()
    assert gpus.rstrip().endswith("--sweep 256 --mix 1,2,4,8,16,32,64 --gpus 0 --no-extra-process --shared-memory cuda")
    assert (tmp_path / "state" / "onnx").is_dir()  # the exports' folder, which the soak reuses
    assert (tmp_path / "out" / "rounds" / "serving_results.md").is_file()


def test_the_rounds_pass_more_serve_options_to_every_served_run(tmp_path):
    result = dry_run_session(tmp_path, "rounds", SERVE_ARGS="--buckets 1,2,4,8,16,32,64,96,128")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [logs] = list(tmp_path.glob("tmp.*/logs"))
    served = sorted(logs.glob("serve_*.log"))
    assert len(served) == 4
    for log in served:
        assert " --buckets 1,2,4,8,16,32,64,96,128 " in log.read_text(), log.name


def test_a_binary_wheels_libraries_are_used_where_they_are(tmp_path):
    """Prebuilt libraries named by WTCONV_KERNELS_LIB / WTCONV_ORT_LIB are used, no build; the folder of a wheel's
    libwtconv_ort.so, which loads libwtconv_kernels.so beside it, goes on LD_LIBRARY_PATH for the op library's copy
    in the model folder; a build tree's (no libwtconv_kernels.so beside it) does not."""
    for wheel in (True, False):
        lib = tmp_path / ("wheel" if wheel else "build") / "lib"
        lib.mkdir(parents=True)
        for name in ("libwtconv_kernels_capi.so", "libwtconv_ort.so") + (("libwtconv_kernels.so",) if wheel else ()):
            (lib / name).write_bytes(b"")
        run = tmp_path / ("a" if wheel else "b")
        run.mkdir()
        result = dry_run_session(
            run,
            "rounds",
            WTCONV_KERNELS_LIB=str(lib / "libwtconv_kernels_capi.so"),
            WTCONV_ORT_LIB=str(lib / "libwtconv_ort.so"),
            LD_LIBRARY_PATH="/elsewhere",
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "build" not in ran(result)
        [environment] = list(run.glob("tmp.*/logs/environment.log"))
        line = next(x for x in environment.read_text().splitlines() if x.startswith("libraries: "))
        assert line.startswith(f"libraries: {lib}/libwtconv_kernels_capi.so {lib}/libwtconv_ort.so; ")
        assert line.endswith(f"LD_LIBRARY_PATH={lib}:/elsewhere" if wheel else "LD_LIBRARY_PATH=/elsewhere")


def test_carried_prebuilt_libraries_are_unpacked_once_and_used(tmp_path):
    """Libraries packed elsewhere (pack-libs) and carried are unpacked into the session's state by the first call
    that has them and are the ones the later steps load, with no build."""
    import tarfile

    packed = tmp_path / "packed"
    packed.mkdir()
    for name in ("libwtconv_kernels_capi.so", "libwtconv_ort.so"):
        (packed / name).write_bytes(b"")
    carried = tmp_path / "libs.tar.xz"
    with tarfile.open(carried, "w:xz") as archive:
        for name in ("libwtconv_kernels_capi.so", "libwtconv_ort.so"):
            archive.add(packed / name, arcname=name)
    no_libs = {"WTCONV_KERNELS_LIB": "", "WTCONV_ORT_LIB": "", "CARRIED_LIBS": str(carried)}
    result = dry_run_session(tmp_path, "rounds", **no_libs)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "build" not in ran(result)
    libs = tmp_path / "state" / "libs"
    assert (libs / "unpacked.stamp").is_file()
    [environment] = list(tmp_path.glob("tmp.*/logs/environment.log"))
    line = next(x for x in environment.read_text().splitlines() if x.startswith("libraries: "))
    assert line.startswith(f"libraries: {libs}/libwtconv_kernels_capi.so {libs}/libwtconv_ort.so; ")


def test_the_rounds_fall_back_to_system_memory_and_stop_at_the_budget(tmp_path):
    # a cuda run whose check failed (here: no report) is run again on system shared memory, and so are the later runs
    result = dry_run_session(tmp_path / "a", "rounds", DRY_RUN_FAIL="serve_torch-cuda_tiny_shm-cuda")
    assert ran(result) == [
        "serve_torch-cuda_tiny_shm-cuda",
        "serve_torch-cuda_tiny_shm-system",
        "serve_onnxruntime_tiny_shm-system",
        "serve_torch-cuda_tiny_shm-system_gpus0",
        "serve_onnxruntime_tiny_shm-system_gpus0",
    ]
    assert "serve_torch-cuda_tiny_shm-cuda: the check failed with cuda shared memory" in result.stdout
    # a budget already spent: every served stage is skipped, and says why
    result = dry_run_session(tmp_path / "b", "rounds", BUDGET="0")
    assert ran(result) == []
    assert "serve_torch-cuda_tiny_shm-cuda: skipped (time budget of 0 s:" in result.stdout


def test_the_soak_starts_detached_and_a_later_call_collects_it(tmp_path):
    assert dry_run_session(tmp_path, "soak-wait", "1").returncode == 1  # nothing started yet
    libs = {}
    for variable, name in (("WTCONV_KERNELS_LIB", "libwtconv_kernels_capi.so"), ("WTCONV_ORT_LIB", "libwtconv_ort.so")):
        libs[variable] = str(tmp_path / "lib" / name)
    # no libraries and no build under way: nothing to start, and it says so
    refused = dry_run_session(tmp_path, "soak-start", "60", **libs)
    assert refused.returncode == 1 and "call soak-start again" in refused.stdout
    (tmp_path / "lib").mkdir()
    for path in libs.values():
        Path(path).write_bytes(b"")
    started = dry_run_session(tmp_path, "soak-start", "60", **libs)
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    assert (
        "soak started: 600 s of torch-cuda" in started.stdout and "the soak is done (exit status 0)" in started.stdout
    )
    state = tmp_path / "state" / "soak"
    [soak] = list(state.glob("tmp.*/logs/soak_torch-cuda_tiny.log"))
    command = soak.read_text()
    assert f"{state}/repo" not in command  # run from its own copy, relative paths
    assert f" {tmp_path}/state/onnx/tiny_fp16.onnx " in command
    assert "--soak 600 --concurrency 256 --batch-sizes 1,2,4,8,16,32,64 --kill-backend --sample-every 60" in command
    assert (state / "repo" / "tools" / "device_session.sh").is_file()
    # collected into $OUT/soak by this call and again by a later one; a second start starts nothing
    assert (tmp_path / "out" / "soak" / "serving_results.md").is_file()
    again = dry_run_session(tmp_path, "soak-start", **libs)
    assert "the soak was already started" in again.stdout and "the soak is done" in again.stdout
    assert "the soak is done" in dry_run_session(tmp_path, "soak-wait", "1").stdout


KERNELS_SCRIPT = ROOT / "tools" / "device_kernels.sh"


def dry_run(script: Path, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    """A GPU-machine script under DRY_RUN: each stage writes the command it would run into its log in LOGS."""
    logs = tmp_path / "logs"
    result = subprocess.run(
        ["bash", str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DRY_RUN": "1", "LOGS": str(logs), "OUT": str(tmp_path / "out"), **env},
    )
    return result, logs


def dry_run_kernels(tmp_path: Path, stages: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    return dry_run(KERNELS_SCRIPT, tmp_path, STAGES=stages, **env)


def logged(logs: Path, name: str) -> str:
    text = (logs / f"{name}.log").read_text()
    assert text.startswith("DRY_RUN: "), text
    return text[len("DRY_RUN: ") :].strip()


def test_kernels_script_named_builds_tests_sanitizer_profiles_and_ab(tmp_path):
    stages = "build:ref:-DWTCONV_FIXED_PLANES=0 build:new:-DWTCONV_FIXED_PLANES=1 test sanitize profile:ref profile:new"
    stages += " ab"
    result, logs = dry_run_kernels(
        tmp_path, stages, PYTEST_K="fixed", TEST_S="240", AB_GROUPS="stage B=64,latency", AB_BUILDS="build/x"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # each named build: this tree with its flags, the library and the sanitizer's runner, under AB_BUILDS
    for name, knob in (("ref", 0), ("new", 1)):
        assert logged(logs, f"build_{name}") == (
            f"build_plugin build/x/{name} -DWTCONV_PTXAS_VERBOSE=ON -DCMAKE_CUDA_FLAGS=-DWTCONV_FIXED_PLANES={knob} "
            "--target wtconv_kernels_capi --target wtconv_sanitize_runner"
        )
    under_test = ROOT / "build" / "x" / "new"
    # the tests and the sanitizer run on the second named build (the build under test), under their time limits
    pytest = logged(logs, "pytest")
    library = f"{under_test}/libwtconv_kernels_capi.so"
    assert pytest.startswith(f"limit 240 env WTCONV_KERNELS_LIB={library} python3 -m pytest")
    assert pytest.endswith("tests/test_kernels_gpu.py tests/test_model_gpu.py -k fixed")
    for tool in ("memcheck", "racecheck"):
        assert logged(logs, f"sanitize_{tool}").split()[-4:] == [
            tool,
            "--error-exitcode",
            "3",
            f"{under_test}/wtconv_sanitize_runner",
        ]
    # profile:<name> profiles that build's whole-plane kernels and keeps both CSV pages in the logs, summarised
    for name in ("ref", "new"):
        ncu = logged(logs, f"ncu_{name}")
        assert f"WTCONV_KERNELS_LIB={ROOT / 'build' / 'x' / name}/libwtconv_kernels_capi.so ncu " in ncu
        assert "--section SourceCounters" in ncu and ncu.endswith("python3 -m benchmarks.profile_kernels --stages")
        report = ncu.split(" -o ")[1].split()[0]
        assert logged(logs, f"details_{name}") == f"ncu -i {report}.ncu-rep --page details --csv"
        assert logged(logs, f"source_{name}").startswith(f"ncu -i {report}.ncu-rep --page source --csv")
        assert logged(logs, f"profile_{name}") == f"python3 -m benchmarks.ncu_summary {logs}/details_{name}.log"
    # ab times every named build in order (the first is the baseline), with the groups asked for
    ab = logged(logs, "ab").split()
    assert ab[ab.index("--lib") + 1] == f"ref={ROOT / 'build' / 'x' / 'ref'}/libwtconv_kernels_capi.so"
    assert ab[ab.index("--lib", ab.index("--lib") + 1) + 1] == f"new={library}"
    assert " --groups stage B=64,latency " in logged(logs, "ab")
    # stages ran in the order given, and every one is in the summary
    order = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("===== ") and " rc=" in line]
    assert order[:5] == ["build_ref", "build_new", "pytest", "sanitize_memcheck", "sanitize_racecheck"]
    assert order[-1] == "ab" and order.index("ncu_ref") < order.index("ncu_new")
    summary = result.stdout.split("===== summary\n", 1)[1]
    assert "build new (-DWTCONV_FIXED_PLANES=1)" in summary and "ab: " in summary


def test_kernels_script_named_build_with_several_flags(tmp_path):
    result, logs = dry_run_kernels(tmp_path, "build:old:-DWTCONV_FIXED_PLANES=1,-DWTCONV_GROUP_ITEMS=1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert logged(logs, "build_old") == (
        "build_plugin build/ab/old -DWTCONV_PTXAS_VERBOSE=ON "
        "-DCMAKE_CUDA_FLAGS=-DWTCONV_FIXED_PLANES=1 -DWTCONV_GROUP_ITEMS=1 "
        "--target wtconv_kernels_capi --target wtconv_sanitize_runner"
    )


def test_kernels_script_libs_from_elsewhere_and_the_default_build(tmp_path):
    # named builds made elsewhere (LIBS, no build stage): the third is timed beside the first two
    result, logs = dry_run_kernels(tmp_path / "a", "test ab", LIBS="ref new other", AB_BUILDS="prebuilt")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"WTCONV_KERNELS_LIB={ROOT / 'prebuilt' / 'new'}/" in logged(logs, "pytest")
    libs = [w.split("=")[0] for w in logged(logs, "ab").split() if w.endswith("libwtconv_kernels_capi.so")]
    assert libs == ["ref", "new", "other"]
    # no named build: build/plugin is built and tested, the plain profile covers every kernel family
    result, logs = dry_run_kernels(tmp_path / "b", "build test profile")
    assert result.returncode == 0, result.stdout + result.stderr
    assert logged(logs, "build") == "build_plugin build/plugin -DWTCONV_PTXAS_VERBOSE=ON"
    assert f"WTCONV_KERNELS_LIB={ROOT / 'build' / 'plugin'}/libwtconv_kernels_capi.so" in logged(logs, "pytest")
    assert "groupPlaneKernel" in logged(logs, "ncu") and "levelKernel" in logged(logs, "ncu")


def test_kernels_script_refuses_an_unknown_stage_and_an_ab_without_builds(tmp_path):
    result, _ = dry_run_kernels(tmp_path, "tset ab")
    assert result.returncode == 1
    summary = result.stdout.split("===== summary\n", 1)[1]
    assert "unknown stage tset" in summary
    assert "ab: not run: it needs named builds" in summary


WHEEL_SCRIPT = ROOT / "tools" / "device_wheel.sh"


def dry_run_wheel(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    return dry_run(WHEEL_SCRIPT, tmp_path, **env)


def test_wheel_script_runs_the_gpu_tests_on_the_installed_wheels_libraries(tmp_path):
    wheel = tmp_path / "wtconv_trt-0.1.0-py3-none-manylinux_2_34_x86_64.whl"
    wheel.write_bytes(b"")
    result, logs = dry_run_wheel(tmp_path, WHEEL=str(wheel), PYTEST_N="4")
    assert result.returncode == 0, result.stdout + result.stderr
    site = (tmp_path / "out").resolve() / "wheel_site"
    lib = site / "wtconv_libs" / "lib"
    assert logged(logs, "install") == f"python3 -m pip install --no-deps --no-index --target {site} {wheel}"
    assert logged(logs, "architectures") == f"cuobjdump --list-elf --list-ptx {lib}/libwtconv_kernels.so"
    doctor = logged(logs, "doctor")  # the installed package's doctor, run from its folder
    assert f"cd '{site}' && PYTHONPATH=." in doctor and doctor.endswith("python3 -m wtconv_trt doctor")
    # every GPU test file in one run, on the wheel's libraries: the ONNX Runtime op and the PyTorch op's kernels
    words = logged(logs, "pytest").split()
    assert words[:5] == [
        "env",
        "-u",  # a caller's WTCONV_ORT_LIB would take precedence over WTCONV_TEST_ORT_LIB in the tests
        "WTCONV_ORT_LIB",
        f"WTCONV_TEST_ORT_LIB={lib}/libwtconv_ort.so",
        f"WTCONV_KERNELS_LIB={lib}/libwtconv_kernels_capi.so",
    ]
    assert words[-4:] == [
        "tests/test_ort_gpu.py",
        "tests/test_kernels_gpu.py",
        "tests/test_model_gpu.py",
        "tests/test_serving_runners_gpu.py",
    ]
    assert all((ROOT / name).is_file() for name in words[-4:])
    # side by side where the python3 the script runs has pytest-xdist
    xdist = subprocess.run(["python3", "-c", "import xdist"], capture_output=True).returncode == 0
    assert (words[words.index("-n") + 1] == "4") if xdist else "-n" not in words
    assert f"--junitxml={logs}/pytest.xml" in words
    # one process when asked
    result, logs = dry_run_wheel(tmp_path / "one", WHEEL=str(wheel), PYTEST_N="1")
    assert result.returncode == 0 and "-n" not in logged(logs, "pytest").split()


def test_wheel_script_without_a_wheel_says_how_to_give_one(tmp_path):
    result, logs = dry_run_wheel(tmp_path, WHEEL=str(tmp_path / "missing.whl"))
    assert result.returncode == 1
    assert "wheel: none (give WHEEL=path" in result.stdout.split("===== summary\n", 1)[1]
    assert not (logs / "install.log").exists()


def test_wheel_script_fails_a_test_file_whose_tests_all_skipped(tmp_path):
    """The per-file counts come from pytest's JUnit report: a file with no test passed (every ONNX Runtime GPU test
    skipped where onnxruntime-gpu offers no CUDA execution provider) fails the run, though pytest itself passed."""
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"")
    logs = tmp_path / "logs"
    logs.mkdir()
    cases = [("tests.test_ort_gpu", "skipped"), ("tests.test_ort_gpu", "skipped"), ("tests.test_kernels_gpu", "")]
    cases += [("tests.test_kernels_gpu.TestShapes", ""), ("tests.test_model_gpu", "failure")]
    cases += [("tests.test_serving_runners_gpu", "")]
    body = "".join(
        f'<testcase classname="{classname}" name="t{i}">' + (f"<{outcome}/>" if outcome else "") + "</testcase>"
        for i, (classname, outcome) in enumerate(cases)
    )
    (logs / "pytest.xml").write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
    result, _ = dry_run_wheel(tmp_path, WHEEL=str(wheel))
    assert result.returncode == 1, result.stdout + result.stderr
    summary = result.stdout.split("===== summary\n", 1)[1].splitlines()
    assert "  tests/test_ort_gpu.py: 0 passed, 0 failed, 2 skipped" in summary
    assert "  tests/test_kernels_gpu.py: 2 passed, 0 failed, 0 skipped" in summary
    assert "  tests/test_model_gpu.py: 0 passed, 1 failed, 0 skipped" in summary
    assert "  tests/test_serving_runners_gpu.py: 1 passed, 0 failed, 0 skipped" in summary


def test_the_sessions_background_tests_and_sanitizes_the_named_builds_it_is_told(tmp_path):
    """BACKGROUND with ab: the A/B's named builds are those AB_BUILD_STAGES lists; ALSO_TEST runs the kernel tests
    and both sanitizers on each named build as well as on build/plugin."""
    stages = "build:ref:-DWTCONV_FIXED_PLANES=0 build:default build:all:-DWTCONV_FIXED_PLANES=1"
    started = dry_run_session(
        tmp_path, "start", BACKGROUND="ab kernel_tests sanitize", AB_BUILD_STAGES=stages, ALSO_TEST="all"
    )
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    waited = dry_run_session(tmp_path, "wait", "60")
    assert waited.returncode == 0, waited.stdout[-3000:] + waited.stderr[-3000:]
    logs = tmp_path / "state" / "logs"
    assert f"STAGES={stages} ab" in logged(logs, "kernels_ab")
    tests = logged(logs, "kernel_tests_all")
    assert tests.startswith("env WTCONV_KERNELS_LIB=build/ab/all/libwtconv_kernels_capi.so python3 -m pytest")
    for tool in ("memcheck", "racecheck"):
        assert logged(logs, f"{tool}_all").endswith(
            f"--tool {tool} --error-exitcode 3 build/ab/all/wtconv_sanitize_runner"
        )
        assert logged(logs, tool).endswith("build/plugin/wtconv_sanitize_runner")
    assert logged(logs, "kernel_tests").endswith("tests/test_kernels_gpu.py tests/test_model_gpu.py")


def test_the_sessions_timed_steps_run_after_the_build_and_before_the_harness_and_the_soak(tmp_path):
    """BACKGROUND with models and profile: the whole-model profile and ncu of build/plugin run once the build is done,
    before the harness starts; soak-start then finds them done (timed.done) and starts."""
    started = dry_run_session(
        tmp_path,
        "start",
        BACKGROUND="models profile harness kernel_tests",
        MODELS_ARGS="--batch 128",
        KERNEL_TEST_ARGS="-n 8",
    )
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    waited = dry_run_session(tmp_path, "wait", "60")
    assert waited.returncode == 0, waited.stdout[-3000:] + waited.stderr[-3000:]
    state = tmp_path / "state"
    logs = state / "logs"
    assert logged(logs, "models") == f"python3 -m benchmarks.profile_models --out {state}/models --batch 128"
    profile = logged(logs, "kernels_profile")
    assert "AB_BUILDS=build LIBS=plugin STAGES=profile:plugin" in profile and "PROFILE_ARGS=--stages" in profile
    assert (state / "timed.done").is_file()
    timed_end = max((logs / f"{name}.rc").stat().st_mtime for name in ("build", "models", "kernels_profile"))
    assert (logs / "harness.rc").stat().st_mtime >= timed_end
    assert logged(logs, "kernel_tests").endswith("-n 8 tests/test_kernels_gpu.py tests/test_model_gpu.py")
