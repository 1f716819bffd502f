"""The serving runners on a GPU, as a served model uses them (wtconv_serving.runners.torch_runner,
wtconv_serving.runners.ort_runner):
batches padded up to their bucket on preallocated buffers, each bucket replayed as a CUDA graph, several requests'
rows in one batch and split back; each bucket timed at load, and a batch run in pieces (a plan that splits it,
wtconv_serving.runners.bucket_plan) answering as the padded batch does. The oracle is the same exported model run
eagerly, request by request, without buckets (PyTorch on the GPU for torch-cuda; ONNX Runtime's CPU EP for
onnxruntime), within the fp16 contract. Skipped without a CUDA device (conftest decides)."""

import numpy as np
import pytest

from wtconv_serving.runners.bucket_plan import BucketPlan
from wtconv_serving.tuning import Tuning

BUCKETS = (1, 2, 4, 8)
DIMS = (1, 32, 32)  # the shipped model's input without its batch axis
REQUESTS = [(3,), (1, 4, 2), (8,), (5, 1), (1,)]  # batches: 3 -> bucket 4, 7 -> 8, 8, 6 -> 8, 1
# times at which batches of 3, 5, 6 and 7 run in pieces: 7 as 4 + 2 + 1
SPLITTING_TIMES = {1: 1.0, 2: 1.5, 4: 2.6, 8: 5.2}


def requests(sizes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *DIMS)).astype(np.float16) for n in sizes]


def check_runs_in_pieces(served, reference) -> None:
    """The plan measured at load (a time for every bucket), then a plan that splits most batches: every request's
    answer as ``reference`` gives it."""
    assert sorted(served.plan.seconds) == list(BUCKETS) and all(t > 0 for t in served.plan.seconds.values())
    served.plan = BucketPlan(BUCKETS, SPLITTING_TIMES)
    assert served.plan.buckets_for(7) == (4, 2, 1)
    for index, sizes in enumerate(REQUESTS):
        parts = requests(sizes, 20 + index)
        for part, out in zip(parts, served.run(parts), strict=True):
            assert_close(
                out, reference.run([part])[0], f"requests {sizes} in pieces {served.plan.buckets_for(sum(sizes))}"
            )


def assert_close(got, want, what):
    """fp16 outputs: within 1e-2 of the output's scale (the fp16 contract's order, docs/design.md §2.5), the same
    shape (no padded row returned)."""
    assert got.shape == want.shape, what
    scale = max(float(np.abs(want).max()), 1.0)
    error = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale
    assert error <= 1e-2, f"{what}: error {error:.2e} of the output's scale"


@pytest.mark.gpu
def test_torch_cuda_runner_replays_a_graph_per_bucket_and_matches_eager(shipped_export, require_cuda):
    from wtconv_serving.runners.torch_runner import TorchCudaRunner

    onnx_path = shipped_export("plugin", "fp16")
    served = TorchCudaRunner(onnx_path, buckets=BUCKETS, input_dims=DIMS, cuda_graphs=True)
    eager = TorchCudaRunner(onnx_path)
    assert sorted(served.graphs) == list(BUCKETS), served.description
    assert "CUDA graphs for batches" in served.description and "eager for" not in served.description
    for index, sizes in enumerate(REQUESTS):
        parts = requests(sizes, index)
        outputs = served.run(parts)
        assert len(outputs) == len(parts)
        for part, out in zip(parts, outputs, strict=True):
            assert_close(out, eager.run([part])[0], f"requests {sizes}")
    kept = [o.copy() for o in outputs]
    served.run(requests((2,), 99))  # the next batch reuses the buffers: answers already given must not change
    assert all(np.array_equal(a, b) for a, b in zip(outputs, kept, strict=True))
    check_runs_in_pieces(served, eager)


@pytest.mark.gpu
def test_onnxruntime_runner_replays_a_graph_per_bucket_and_matches_the_cpu(shipped_export, ort_cuda):
    from wtconv_serving.runners.ort_runner import OnnxRuntimeRunner

    onnx_path = shipped_export("plugin", "fp16")
    served = OnnxRuntimeRunner(
        onnx_path, ort_device="cuda", library=ort_cuda, buckets=BUCKETS, input_dims=DIMS, tuning=Tuning()
    )
    cpu = OnnxRuntimeRunner(onnx_path, ort_device="cpu", library=ort_cuda)
    assert served.mode.startswith("CUDA graphs") and not served.fallback_note, served.description
    for index, sizes in enumerate(REQUESTS):
        parts = requests(sizes, 10 + index)
        outputs = served.run(parts)
        assert len(outputs) == len(parts)
        for part, out in zip(parts, outputs, strict=True):
            assert_close(out, cpu.run([part])[0], f"requests {sizes}")
    check_runs_in_pieces(served, cpu)
