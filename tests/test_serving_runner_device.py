"""The serving runners work on their instance's GPU (wtconv_serving.runners.tensorrt_runner): Triton gives each model
instance a
device id, and a backend process starts on device 0. TensorRT deserializes an engine and creates its execution
context on the *current* device (and our plugin uploads its weights there), so the runner must make the instance's
device current for all of that, not only for its stream and tensors.

CPU test: PyTorch's device switch, stream and TensorRT's objects are replaced by stand-ins that record which device
was current when each was used.
"""

import contextlib
import types

import numpy as np
import pytest
import torch

from wtconv_serving.runners import tensorrt_runner


class DeviceLog:
    """A stand-in for torch.cuda's current device: ``device(i)`` switches it (a context manager, as
    torch.cuda.device is), and every recorded event notes which device was current."""

    def __init__(self):
        self.current = 0
        self.events = []

    @contextlib.contextmanager
    def device(self, index):
        index = index.index if isinstance(index, torch.device) else int(index)
        previous, self.current = self.current, index
        try:
            yield
        finally:
            self.current = previous

    def record(self, what):
        self.events.append((what, self.current))


@pytest.fixture
def gpus(monkeypatch):
    log = DeviceLog()

    class Stream:
        def __init__(self, device):
            log.record("stream")
            self.cuda_stream = 0

        def synchronize(self):
            pass

    class Context:
        def set_optimization_profile_async(self, profile, stream):
            log.record("set profile")

        def set_input_shape(self, name, shape):
            self.shape = shape
            return True

        def get_tensor_shape(self, name):
            return self.shape

        def set_tensor_address(self, name, address):
            pass

        def execute_async_v3(self, stream):
            log.record("execute")
            return True

    class Engine:
        def create_execution_context(self):
            log.record("create context")
            return Context()

    class Loaded:
        engine = Engine()

        def io(self):
            return [
                TensorIO("input", "input", (-1, 1, 8, 8), "float32"),
                TensorIO("output", "output", (-1, 10), "float32"),
            ]

    def load_engine_for_run(engine, plugin):
        log.record("deserialize")  # where load_plugin + deserialize_cuda_engine run (and the plugin uploads)
        return Loaded()

    from trt_engine import engine_file, profiles
    from trt_engine.manifest import TensorIO

    monkeypatch.setattr(torch.cuda, "device", log.device)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(
        engine_file, "open_engine", lambda path: types.SimpleNamespace(manifest=types.SimpleNamespace(profiles=["p"]))
    )
    monkeypatch.setattr(engine_file, "load_engine_for_run", load_engine_for_run)
    monkeypatch.setattr(profiles, "find_profile", lambda profiles, shapes: 1)
    # The tensors: device transfers are the identity here (the tensors stay on the CPU).
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self)
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, **k: real_empty(*a, **k))
    return log


@pytest.mark.parametrize("device", [1, 3])
def test_tensorrt_runner_works_on_its_instance_device(gpus, device):
    runner = tensorrt_runner.TensorRTModel.load("model.engine", device=device).runner()
    assert dict(gpus.events) == {"deserialize": device, "create context": device, "stream": device}
    gpus.events.clear()
    out = runner(np.zeros((2, 3), dtype=np.float32))
    assert out.shape == (2, 3)
    assert gpus.events == [("set profile", device), ("execute", device)]
    assert gpus.current == 0  # the process's current device is left as it was
