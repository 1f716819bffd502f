"""The served model's path through the backend, on the CPU (wtconv_serving.runners.batch_runner, python_model):

- a batch's staging: inputs that came on the GPU go into the batch buffer directly, never through the host staging
  buffer; host inputs are copied into it once, then one copy to the device per run of consecutive host parts;
- the answers go back where the inputs came from: on the GPU for a batch whose every input came there (views of one
  copy of the batch's rows, which the next batch does not overwrite), on the host otherwise;
- the one load-time check of a CUDA graph every runner uses (a replay at a new input into a NaN-filled output,
  against an eager run): it passes a faithful graph and refuses one that misses work or answers its capture's input;
- the instance's GPU taken from the arguments Triton gives the model, and handed to the runtime.

On the CPU, "device" memory is a PyTorch CPU tensor and there is no stream: DeviceBuffers runs the same steps on plain
memory (its module docstring). What only a GPU shows (pinned memory, streams, CUDA tensors through DLPack, CUDA
graphs) runs in tests/test_serving_runners_gpu.py and tests/test_serving_shared_memory_gpu.py.

Oracles: the rows each request sent, placed by index arithmetic written here; NaN sentinels in the staging buffer.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from wtconv_core.errors import ServingError
from wtconv_serving.runners import python_model
from wtconv_serving.runners.batch_runner import (
    BatchRunner,
    DeviceBuffers,
    check_graph_replay,
    outputs_on_device,
    staging_plan,
)
from wtconv_serving.runners.bucket_plan import BucketPlan

DIMS = (2, 3)
CPU = torch.device("cpu")


def part(rows, seed, on_device):
    """A request's input of ``rows`` rows: a NumPy array (it came on the host) or a tensor (it came on the GPU)."""
    x = np.random.default_rng(seed).standard_normal((rows, *DIMS)).astype(np.float32)
    return torch.from_numpy(x) if on_device else x


def test_staging_plan_groups_consecutive_host_rows():
    parts = [part(2, 0, False), part(3, 1, False), part(1, 2, True), part(4, 3, False)]
    host, device, runs = staging_plan(parts)
    assert host == [(0, 0, 2), (1, 2, 3), (3, 6, 4)]
    assert device == [(2, 5, 1)]
    assert runs == [(0, 5), (6, 10)]  # two copies to the device, not three
    assert staging_plan([part(2, 4, True)]) == ([], [(0, 0, 2)], [])


@pytest.mark.parametrize("placement", [(False, False), (True, True), (False, True, False)], ids=str)
def test_stage_puts_each_part_in_its_rows_and_device_parts_skip_the_host(placement):
    parts = [part(count, seed, on) for seed, (count, on) in enumerate(zip((3, 1, 2), placement, strict=False))]
    buffers = DeviceBuffers(torch, CPU, None, 8, DIMS, np.float32)
    buffers.host_input.fill_(float("nan"))  # the staging buffer's rows no host part wrote stay NaN
    buffers.device_input.fill_(float("nan"))
    rows = sum(len(p) for p in parts)
    buffers.stage(parts, rows)
    start = 0
    for p in parts:
        count, want = len(p), np.asarray(p)
        assert np.array_equal(buffers.device_input[start : start + count].numpy(), want)
        staged = buffers.host_input_array[start : start + count]
        if isinstance(p, np.ndarray):
            assert np.array_equal(staged, want)
        else:
            assert np.isnan(staged).all(), "an input that came on the GPU went through the host staging buffer"
        start += count
    assert np.isnan(buffers.device_input[rows:].numpy()).all()  # nothing past the batch


class Doubling(BatchRunner):
    """A GPU-shaped runner on the CPU: buffers made once, the 'model' doubling its input into an output buffer that
    the next batch reuses (as a CUDA graph's output is)."""

    name = "doubling"
    buckets = (4, 8)

    def __init__(self):
        self.buffers = DeviceBuffers(torch, CPU, None, 8, DIMS, np.float32)
        self.output = torch.empty((8, *DIMS))
        self.ran: list[int] = []  # the buckets run, in order

    def _run_bucket(self, size):
        self.ran.append(size)
        torch.mul(self.buffers.device_input[:size], 2, out=self.output[:size])
        return self.output


def test_answers_go_back_where_the_inputs_came_from():
    runner = Doubling()
    on_gpu = [part(2, 0, True), part(3, 1, True)]
    answers = runner.run(on_gpu)
    assert outputs_on_device(on_gpu) and all(isinstance(a, torch.Tensor) for a in answers)
    kept = [a.clone() for a in answers]
    for answer, p in zip(answers, on_gpu, strict=True):
        assert torch.equal(answer, 2 * p)
        assert answer.is_contiguous()  # what the backend's Tensor.from_dlpack requires
        assert answer.untyped_storage().data_ptr() != runner.output.untyped_storage().data_ptr()
    runner.run([part(4, 2, True)])  # the next batch overwrites the runner's output buffer, not these answers
    assert all(torch.equal(a, k) for a, k in zip(answers, kept, strict=True))
    for parts in ([part(2, 3, False)], [part(1, 4, True), part(2, 5, False)]):
        answers = runner.run(parts)
        assert not outputs_on_device(parts) and all(isinstance(a, np.ndarray) for a in answers)
        assert all(np.array_equal(a, 2 * np.asarray(p)) for a, p in zip(answers, parts, strict=True))


@pytest.mark.parametrize("on_gpu", [False, True], ids=["host inputs", "device inputs"])
def test_a_batch_split_into_pieces_answers_every_request_as_one_padded_batch_would(on_gpu):
    runner = Doubling()
    runner.buckets = (1, 2, 4, 8)
    # bucket times at which a batch of 7 is cheapest as 4 + 2 + 1 (5.12 against 5.2 padded to 8 and 5.21 for 4 + 4),
    # one of 5 as 4 + 1 (the last piece padded), one of 8 as itself
    runner.plan = BucketPlan(runner.buckets, {1: 1.0, 2: 1.5, 4: 2.6, 8: 5.2}, overhead_s=0.01)
    assert runner.plan.buckets_for(7) == (4, 2, 1) and runner.plan.buckets_for(8) == (8,)
    assert runner.plan.buckets_for(2) == (2,) and runner.plan.buckets_for(5) == (4, 1)
    for seed, sizes in enumerate([(3, 4), (2, 1, 2, 1), (7,), (8,), (1,)]):
        parts = [part(n, 10 * seed + i, on_gpu) for i, n in enumerate(sizes)]
        runner.ran.clear()
        runner.buffers.device_input.fill_(float("nan"))  # rows a piece's move would wrongly read are NaN
        answers = runner.run(parts)
        want_buckets = list(runner.plan.buckets_for(sum(sizes)))
        assert runner.ran == want_buckets, f"requests {sizes}"
        for answer, p in zip(answers, parts, strict=True):
            assert np.array_equal(np.asarray(answer), 2 * np.asarray(p)), f"requests {sizes}: buckets {want_buckets}"


class Graph:
    """A stand-in for a captured graph over an input and an output buffer: ``replay`` computes 3x + 1 from the input
    as it is now, from the input it was captured on (``stale``), or writes nothing (``missing``)."""

    def __init__(self, x, out, kind="faithful"):
        self.x, self.out, self.kind = x, out, kind
        self.captured = x.clone()

    def replay(self):
        if self.kind == "faithful":
            torch.add(3 * self.x, 1, out=self.out)
        elif self.kind == "stale":
            torch.add(3 * self.captured, 1, out=self.out)


@pytest.mark.parametrize("kind", ["faithful", "stale", "missing"])
def test_the_graph_check_refuses_a_graph_that_misses_work(kind):
    x, out = torch.zeros(4, 5), torch.zeros(4, 5)
    graph = Graph(x, out, kind)
    if kind == "faithful":
        assert check_graph_replay(torch, None, x, out, graph.replay, lambda: 3 * x + 1, np.float32, 4) == 0.0
        return
    with pytest.raises(ServingError, match=r"^batch 4: the CUDA graph's output differs from an eager run's"):
        check_graph_replay(torch, None, x, out, graph.replay, lambda: 3 * x + 1, np.float32, 4)


def test_the_graph_check_takes_an_output_made_in_inference_mode():
    """The PyTorch runner captures its forward under torch.inference_mode(), so the graph's output is an inference
    tensor, which PyTorch refuses to update in place outside that mode; the check's NaN fill must still reach it."""
    x = torch.zeros(4, 5)
    with torch.inference_mode():
        out = torch.zeros(4, 5)
    graph = Graph(x, out)

    def replay():
        with torch.inference_mode():
            graph.replay()

    assert check_graph_replay(torch, None, x, out, replay, lambda: 3 * x + 1, np.float32, 4) == 0.0


def test_the_graph_check_allows_the_output_precisions_rounding():
    """A replay that rounds differently from the eager run (another convolution algorithm) within the precision's
    rounding passes in fp16; the same difference fails in fp32."""
    x, out = torch.zeros(64), torch.zeros(64)

    def replay():
        torch.add(x, 0.005 * x.abs().max(), out=out)  # 0.5 % of the largest value: fp16's tolerance is 1 %

    assert check_graph_replay(torch, None, x, out, replay, lambda: x.clone(), np.float16, 8) <= 1e-2
    with pytest.raises(ServingError, match="at most 1e-03"):
        check_graph_replay(torch, None, x, out, replay, lambda: x.clone(), np.float32, 8)


@pytest.mark.parametrize(
    "args, device",
    [
        ({"model_instance_kind": "GPU", "model_instance_device_id": "3"}, 3),
        ({"model_instance_kind": "KIND_GPU", "model_instance_device_id": "1"}, 1),
        ({"model_instance_kind": "CPU", "model_instance_device_id": "0"}, None),
        ({"model_instance_kind": "MODEL", "model_instance_device_id": "0"}, 0),
    ],
)
def test_the_instance_device_comes_from_tritons_arguments(args, device):
    assert python_model.instance_device(args) == device


class FakeTensor:
    """pb_utils.Tensor's part the model uses: its place and DLPack."""

    def __init__(self, value):
        self.value = value

    def is_cpu(self):
        return isinstance(self.value, np.ndarray)

    def __dlpack__(self, *args, **kwargs):
        return self.value.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.value.__dlpack_device__()


def fake_pb_utils(log):
    class Tensor:
        def __init__(self, name, value):
            self.name, self.value = name, value

        @staticmethod
        def from_dlpack(name, producer):
            return Tensor(name, producer)

    def get_input_tensor_by_name(request, name):
        return FakeTensor(request[name])

    return types.SimpleNamespace(
        Tensor=Tensor,
        get_input_tensor_by_name=get_input_tensor_by_name,
        InferenceResponse=lambda output_tensors, error=None: types.SimpleNamespace(outputs=output_tensors, error=error),
        TritonError=str,
        Logger=types.SimpleNamespace(log_info=log.append, log_error=log.append),
    )


@pytest.mark.parametrize("kind, device_id, where", [("GPU", "2", "GPU 2"), ("CPU", "0", "the CPU")])
def test_the_served_model_runs_on_its_instances_device(monkeypatch, tmp_path, kind, device_id, where):
    """ServedModel hands the runtime the instance's GPU from Triton's arguments and says where it runs; a batch
    whose input came on the GPU is answered with the runner's tensor as it is (no host copy), and where inputs
    arrive is said once each."""
    loaded = {}

    def load_runtime(preference, **options):
        loaded.update(options)
        return "model"

    monkeypatch.setattr("wtconv_serving.runners.runtimes.load_runtime", load_runtime)
    monkeypatch.setattr("wtconv_serving.runners.runtimes.make_runner", lambda model, **kw: Doubling())
    config = {
        "max_batch_size": 8,
        "input": [{"name": "input", "dims": list(DIMS)}],
        "output": [{"name": "output"}],
        "parameters": {"runtime": {"string_value": "torch-cuda"}},
    }
    args = {
        "model_name": "m",
        "model_instance_name": "m_0_0",
        "model_instance_kind": kind,
        "model_instance_device_id": device_id,
        "model_repository": str(tmp_path),
        "model_version": "1",
        "model_config": json.dumps(config),
    }
    log: list = []
    parameters = {"runtime": "torch-cuda"}
    served = python_model.ServedModel(args, config, parameters, fake_pb_utils(log))
    assert loaded["device"] == (int(device_id) if kind == "GPU" else 0)
    assert f"instance m_0_0 on {where}" in log[0], log
    requests = [{"input": part(2, 0, True)}, {"input": part(1, 1, True)}]
    responses = served.execute(requests)
    for response, request in zip(responses, requests, strict=True):
        [tensor] = response.outputs
        assert isinstance(tensor.value, torch.Tensor) and torch.equal(tensor.value, 2 * request["input"])
    served.execute([{"input": part(1, 2, False)}, {"input": part(1, 3, True)}])
    said = [line for line in log if "inputs arrive on" in line]
    assert said == [
        "m_0_0: inputs arrive on cpu (DLPack into the runner, no host copy)",  # a CPU tensor stands for a CUDA one
        "m_0_0: inputs arrive on the host (one copy into the staging buffer)",
    ]
