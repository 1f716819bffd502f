"""Ctrl-C while TensorRT-RTX runs its own code (the ONNX parser, the builder), through ``wtconv-trt build`` in a
child process: the command stops there, with exit status 130 and one line.

TensorRT calls our logger and progress monitor from C++ and catches whatever they raise; a Ctrl-C, which Python
raises in the next Python code to run, landed in the logger, was printed as "Exception caught in log():
KeyboardInterrupt" and lost, and the build ran to its end. The child sends itself SIGINT from inside TensorRT's first
call of the logger during the parse, or as the build's first phase starts, so the press arrives while TensorRT's code
runs; the model is a Relu (standard operators, no plugin), whose build takes a second.

Oracles: the exit status, stderr (the one 'interrupted' line after the lines said before the press; nothing of
TensorRT's about the exception or the cancelled build), and no engine written.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from conftest import tensorrt_rtx_skip_reason
from engine_helpers import tiny_onnx
from test_cli_bad_input import interruptible

CHILD = """
import os, signal, sys

where, model = sys.argv[1:3]
if where == "parse":
    from trt_engine import tensorrt_api

    parse = tensorrt_api.NetworkBuilder.parse

    def parse_and_press(self, path):
        logger = type(self.logger)
        log = logger.log

        def log_and_press(instance, severity, msg):  # TensorRT's first call of the logger in the parse
            logger.log = log
            os.kill(os.getpid(), signal.SIGINT)
            return log(instance, severity, msg)

        logger.log = log_and_press
        return parse(self, path)

    tensorrt_api.NetworkBuilder.parse = parse_and_press
else:
    from trt_engine.progress_board import ProgressBoard

    phase_start = ProgressBoard.phase_start

    def start_and_press(self, *args):  # the monitor's first call, from the builder
        ProgressBoard.phase_start = phase_start
        os.kill(os.getpid(), signal.SIGINT)
        return phase_start(self, *args)

    ProgressBoard.phase_start = start_and_press
sys.argv = ["wtconv-trt", "build", model]
from wtconv_trt.cli import run_command

run_command()
"""


@pytest.mark.parametrize("where", ["parse", "build"])
def test_ctrl_c_inside_tensorrt_stops_the_build(where, tmp_path):
    reason = tensorrt_rtx_skip_reason()
    if reason:
        pytest.skip(reason)
    model = tiny_onnx(tmp_path / "relu.onnx")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, where, model],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=interruptible,
        timeout=300,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 130, (done.returncode, done.stderr[-3000:])
    assert lines[-1] == "wtconv-trt build: interrupted", lines
    assert not [line for line in lines if "Exception caught" in line or "Traceback" in line], lines
    assert not [line for line in lines if "Build canceled" in line or "Error Code" in line], lines
    if where == "parse":  # stopped before the build started
        assert not [line for line in lines if line.startswith("building ")], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relu.onnx"]
    assert done.returncode != -signal.SIGINT
