"""serve --mps on the CPU: what plan_serving refuses, and the MPS daemon's lifecycle (wtconv_serving.server.mps).

The daemon here is a stand-in for nvidia-cuda-mps-control, a script put first on PATH under that name: it does what
the module relies on the real one for (``-d`` backgrounds a process that opens pipe/control under
CUDA_MPS_PIPE_DIRECTORY and writes control.log under CUDA_MPS_LOG_DIRECTORY; the front end reads commands on stdin:
get_server_list, get_client_list PID, quit). The tests check our side: the environment a client gets, the commands
sent, that stop leaves no process and no folder behind after a quit, after a daemon that ignores quit, and after a
start that failed. The real daemon with a real server and its clients is a GPU measurement (docs/serving.md,
"Sharing a GPU between instances: MPS").

Oracles: the process table (/proc), the file system, the stand-in's own record of the commands it was sent.
"""

import os
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("tritonclient.grpc")

from wtconv_core.errors import ConfigurationError, InputError, ServingError  # noqa: E402
from wtconv_serving.server import launcher as server  # noqa: E402
from wtconv_serving.server import mps  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_serving_repository import tiny_onnx  # noqa: E402

STAND_IN = r"""#!/bin/bash
# A stand-in for nvidia-cuda-mps-control (tests/test_serving_mps.py).
pipe=$CUDA_MPS_PIPE_DIRECTORY
if [ "${1:-}" = -d ]; then
    if [ -n "${STAND_IN_FAIL:-}" ]; then echo "cannot start: $STAND_IN_FAIL" >&2; exit 1; fi
    (
        touch "$pipe/control"
        echo "[stand-in Control $$] Starting control daemon" >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
        while [ ! -f "$pipe/quit" ] && [ -d "$pipe" ]; do sleep 0.05; done
        if [ -n "${STAND_IN_STUBBORN:-}" ]; then while :; do sleep 0.05; done; fi
        rm -f "$pipe/control"
    ) < /dev/null > /dev/null 2>&1 &
    exit 0
fi
[ -e "$pipe/control" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
while read -r command argument; do
    echo "$command $argument" >> "$pipe/commands"
    case $command in
        get_server_list) echo 4242 ;;
        get_client_list) if [ "$argument" = 4242 ]; then cat "$pipe/clients" 2> /dev/null; fi; true ;;
        quit) touch "$pipe/quit" ;;
        *) echo "invalid command" >&2; exit 1 ;;
    esac
done
"""


@pytest.fixture(autouse=True)
def _no_machine_wide_daemon(tmp_path, monkeypatch):
    """The tests' own default pipe folder: whatever this machine runs, the tests see no MPS daemon of its own."""
    monkeypatch.setattr(mps, "DEFAULT_PIPE_DIR", str(tmp_path / "no-machine-wide-daemon"))


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """The stand-in daemon first on PATH; returns its path."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / mps.CONTROL
    program.write_text(STAND_IN)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(mps.PIPE_VARIABLE, raising=False)
    return program


def commands(daemon) -> list:
    return (daemon.pipe_dir / "commands").read_text().splitlines()


def _the_stand_in(daemon, wait_s: float = 5.0) -> int:
    """The stand-in daemon's one process. Its loop forks a sleep every 50 ms, and until the child's exec it carries
    the daemon's name and environment: a look at that instant finds two, so this looks again until it finds one."""
    deadline = time.monotonic() + wait_s
    while len(found := daemon.processes()) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    [pid] = found
    return pid


def test_a_daemon_started_answers_for_its_clients_and_leaves_nothing_when_stopped(stand_in):
    daemon = mps.MpsDaemon().start()
    folder = daemon.folder
    try:
        assert daemon.control == str(stand_in)
        assert daemon.environment() == {
            "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(folder / "log"),
        }
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # this user's only
        pid = _the_stand_in(daemon)  # the backgrounded stand-in, told by its name and its pipe folder
        assert daemon.clients() == set()
        (daemon.pipe_dir / "clients").write_text("101\n102\n")
        assert daemon.clients() == {101, 102}
        assert commands(daemon)[-2:] == ["get_server_list ", "get_client_list 4242"]
        assert "Starting control daemon" in daemon.log_tail()
    finally:
        daemon.stop()
    assert daemon.folder is None and not folder.exists()
    assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
    daemon.stop()  # twice is harmless


def test_a_daemon_that_ignores_quit_is_killed(stand_in, monkeypatch):
    monkeypatch.setenv("STAND_IN_STUBBORN", "1")
    monkeypatch.setattr(mps, "QUIT_WAIT_S", 0.5)
    daemon = mps.MpsDaemon().start()
    pid = _the_stand_in(daemon)
    folder = daemon.folder
    start = time.monotonic()
    daemon.stop()
    assert time.monotonic() - start < 10
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and not _zombie(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
    assert not folder.exists()


def test_a_daemon_that_fails_to_start_is_one_line_and_leaves_no_folder(stand_in, monkeypatch, tmp_path):
    monkeypatch.setenv("STAND_IN_FAIL", "no GPU for you")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    with pytest.raises(ServingError, match=r"^mps: nvidia-cuda-mps-control -d failed: cannot start: no GPU for you$"):
        mps.MpsDaemon().start()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_control_program_must_be_there_and_not_already_in_use(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(mps.PIPE_VARIABLE, raising=False)
    with pytest.raises(ConfigurationError, match=r"^mps: nvidia-cuda-mps-control is not on PATH \(it comes with"):
        mps.find_control()
    monkeypatch.setenv(mps.PIPE_VARIABLE, "/tmp/nvidia-mps")
    with pytest.raises(ConfigurationError, match=r"already names an MPS control daemon \(CUDA_MPS_PIPE_DIRECTORY="):
        mps.find_control()
    monkeypatch.delenv(mps.PIPE_VARIABLE)
    machine_wide = tmp_path / "nvidia-mps"
    machine_wide.mkdir()
    (machine_wide / "control").touch()
    monkeypatch.setattr(mps, "DEFAULT_PIPE_DIR", str(machine_wide))
    with pytest.raises(ConfigurationError, match=r"^mps: this machine already runs an MPS control daemon \("):
        mps.find_control()


def test_serve_mps_asks_for_gpu_instances_and_the_control_program(tmp_path, monkeypatch, stand_in):
    """plan_serving refuses --mps where the instances would not be on a GPU, and without nvidia-cuda-mps-control;
    --write-only starts no server, so it has no daemon either."""
    from wtconv_trt.api.serving import plan_serving

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    ports = {"http_port": 0, "grpc_port": 0, "metrics_port": 0}
    monkeypatch.setattr(server, "visible_gpus", lambda: 0)
    with pytest.raises(InputError, match=r"^mps: no GPU is visible here, and MPS shares a GPU between processes"):
        plan_serving(onnx_path, tmp_path / "repo", mps=True, **ports)
    monkeypatch.setattr(server, "visible_gpus", lambda: 1)
    monkeypatch.setattr("wtconv_trt.api.serving.runtime_choice", lambda *a, **k: ("onnxruntime", "onnxruntime"))
    monkeypatch.setattr("wtconv_trt.api.serving._ort_device_here", lambda plan, repo: "cpu")
    with pytest.raises(InputError, match=r"^mps: the instances run on the CPU, and MPS") as caught:
        plan_serving(onnx_path, tmp_path / "repo", mps=True, **ports)
    assert caught.value.parameter == "mps" and len(str(caught.value).splitlines()) == 1
    monkeypatch.setattr("wtconv_trt.api.serving.runtime_choice", lambda *a, **k: ("torch-cuda", "torch-cuda"))
    assert plan_serving(onnx_path, tmp_path / "repo", mps=True, **ports).mps is True
    assert plan_serving(onnx_path, tmp_path / "repo", **ports).mps is False
    assert plan_serving(onnx_path, tmp_path / "repo", mps=True, serving=False).mps is False
    monkeypatch.setenv("PATH", str(tmp_path))  # no control program
    with pytest.raises(ConfigurationError, match=r"^mps: nvidia-cuda-mps-control is not on PATH"):
        plan_serving(onnx_path, tmp_path / "repo", mps=True, **ports)
    assert not (tmp_path / "repo").exists()


def test_a_stub_that_did_not_connect_is_an_error(stand_in):
    """A CUDA program that cannot reach the daemon runs without MPS and says nothing: the launcher asks the daemon
    for its clients and names any stub missing."""
    from wtconv_trt.api.serving import _check_mps_clients

    class Server:
        @staticmethod
        def stub_pids():
            return [101, 102, 103]

    daemon = mps.MpsDaemon().start()
    try:
        (daemon.pipe_dir / "clients").write_text("100 101 102 103\n")
        assert _check_mps_clients(Server(), daemon) == (
            "MPS: the 3 backend stub(s) share each GPU through an MPS server of their own"
        )
        (daemon.pipe_dir / "clients").write_text("100 101\n")
        with pytest.raises(ServingError, match=r"^mps: backend stub\(s\) 102, 103 did not connect to the MPS server"):
            _check_mps_clients(Server(), daemon)
    finally:
        daemon.stop()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_load_tests_report_says_which_mps_daemon_the_server_used(tmp_path, monkeypatch):
    monkeypatch.delenv(mps.PIPE_VARIABLE, raising=False)
    assert mps.mps_of({}) is None
    assert mps.mps_of({mps.PIPE_VARIABLE: "/x/pipe"}) == "a daemon of the server's own (serve --mps)"
    machine_wide = tmp_path / "nvidia-mps"
    machine_wide.mkdir()
    (machine_wide / "control").touch()
    monkeypatch.setattr(mps, "DEFAULT_PIPE_DIR", str(machine_wide))
    assert mps.mps_of({}) == f"the machine's daemon ({machine_wide})"
    monkeypatch.setenv(mps.PIPE_VARIABLE, "/y/pipe")
    assert mps.mps_of({}) == "the daemon the environment names (CUDA_MPS_PIPE_DIRECTORY)"


def test_a_server_whose_stubs_are_not_clients_is_stopped_with_its_daemon(install, tmp_path, stand_in, monkeypatch):
    """The whole start with mps on a real tritonserver: the daemon's environment reaches the server, whose CPU stubs
    never connect (no CUDA in them), so the start fails in one line and leaves no process with that environment (the
    server, its stubs, the daemon) and no folder."""
    from wtconv_trt.api.serving import plan_serving

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    plan = plan_serving(
        onnx_path, tmp_path / "repo", runtime="onnxruntime", device="cpu", http_port=0, grpc_port=0, metrics_port=0
    )
    plan.mps = True  # past plan_serving's refusal of CPU instances: the check after the start is what is tested
    started = []
    start = mps.MpsDaemon.start

    def noted(daemon):
        started.append((daemon, start(daemon).environment()[mps.PIPE_VARIABLE]))
        return daemon

    monkeypatch.setattr(mps.MpsDaemon, "start", noted)
    with pytest.raises(ServingError, match=r"^mps: backend stub\(s\) \d+(, \d+)* did not connect to the MPS") as caught:
        plan.start()
    assert len(str(caught.value).splitlines()) == 1
    [(daemon, pipe)] = started
    assert daemon.folder is None and not Path(pipe).parent.exists()
    assert _processes_with(f"{mps.PIPE_VARIABLE}={pipe}") == []


def _processes_with(variable: str) -> list:
    """The live processes whose environment holds ``variable`` (NAME=value)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or _zombie(int(entry.name)):
                continue
            if variable.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
