"""How a served model runs (wtconv_serving.tuning, wtconv_serving.runners.batch_runner): the buckets and their
defaults, the
settings a config carries to the model, a batch made of several requests padded up to its bucket and split back,
the ONNX Runtime runner on the CPU, and a repository write interrupted half-way.

Oracles: sizes worked out by hand; a runner whose output is a known function of each row; ONNX Runtime's Relu
against np.maximum; a snapshot of the repository's files before and after.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_serving_repository import snapshot, tiny_onnx, write

from wtconv_core.errors import InputError
from wtconv_serving.repositories import python_backend
from wtconv_serving.runners.batch_runner import BatchRunner
from wtconv_serving.tuning import (
    Tuning,
    bucket_for,
    check_tuning,
    default_buckets,
    default_max_batch,
)


def test_default_buckets_and_batch_limit():
    # Below 64 powers of two; from 64 on, above a quarter of max_batch_size, steps of an eighth of it.
    assert default_buckets(32) == (1, 2, 4, 8, 16, 32)
    assert default_buckets(63) == (1, 2, 4, 8, 16, 32, 63)
    assert default_buckets(64) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert default_buckets(128) == (1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128)
    assert default_buckets(100) == (1, 2, 4, 8, 16, 25, 38, 50, 62, 75, 88, 100)
    assert default_buckets(1) == (1,)
    assert default_max_batch(3 * 224 * 224 * 4) == 128  # 77 MB at 128 images: within 128 MiB
    assert default_max_batch(3 * 1024 * 1024 * 4) == 8  # 12.6 MB an image: 10.7 fit, so 8
    assert default_max_batch(2**30) == 1
    assert [bucket_for(n, (1, 2, 4, 8)) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert bucket_for(7, ()) == 7
    with pytest.raises(ValueError, match="exceeds the largest bucket 8"):
        bucket_for(9, (1, 2, 4, 8))


def test_tuning_is_checked_and_travels_in_the_config():
    tuning = check_tuning(buckets=[8, 1, 32], cudnn_search="HEURISTIC", max_queue_size=0).with_max_batch(32)
    assert tuning.buckets == (1, 8, 32) and tuning.max_queue_size == 0
    back = Tuning.from_parameters(tuning.parameters())
    assert (back.buckets, back.cuda_graphs, back.cudnn_search, back.session_per_bucket) == (
        (1, 8, 32),
        True,
        "HEURISTIC",
        False,
    )
    assert Tuning(cuda_graphs=False).cudnn_search_for(False) == "HEURISTIC"  # eager, one session: re-plans cheaply
    assert Tuning().cudnn_search_for(True) == "EXHAUSTIVE"  # searched once per bucket
    assert Tuning(cudnn_search="DEFAULT").cudnn_search_for(True) == "DEFAULT"
    with pytest.raises(InputError, match=r"^buckets \[1, 8\]: the largest must be max_batch_size \(32\)"):
        Tuning(buckets=(1, 8)).with_max_batch(32)
    for bad, message in [
        (dict(buckets=[0, 4]), "buckets: expected an integer from 1"),
        (dict(buckets=[4, 4]), r"buckets \[4, 4\]: each batch size once"),
        (dict(buckets=[]), "buckets: expected at least one batch size"),
        (dict(cudnn_search="FAST"), "cudnn_search: invalid choice: 'FAST'"),
        (dict(max_queue_size=-1), "max_queue_size: expected an integer from 0"),
        (dict(queue_timeout_ms=10**9), "queue_timeout_ms: expected an integer from 0 to 3600000"),
    ]:
        with pytest.raises(InputError, match=message):
            check_tuning(**bad)


class RowRunner(BatchRunner):
    """A runner whose output row is 2 * input row + 1, with the batch sizes it ran recorded (stale rows beyond the
    batch's rows are kept in its buffer, as a GPU runner's padding)."""

    name = "rows"

    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.buffer = np.full((max(buckets), 3), np.nan, np.float32)
        self.ran = []

    def _run(self, parts, rows, size):
        start = 0
        for part in parts:
            self.buffer[start : start + len(part)] = part
            start += len(part)
        self.ran.append((rows, size))
        return 2 * self.buffer[:size] + 1


def test_a_batch_of_several_requests_is_padded_to_its_bucket_and_split_back():
    runner = RowRunner((1, 2, 4, 8))
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 1, 2)]
    outputs = runner.run(parts)
    assert runner.ran == [(5, 8)]
    assert [o.shape for o in outputs] == [(2, 3), (1, 3), (2, 3)]
    for part, out in zip(parts, outputs, strict=True):
        assert np.array_equal(out, 2 * part + 1)
    kept = outputs[0].copy()
    runner.run([parts[1]])  # the next batch reuses the buffer: an answer already given must not change
    assert runner.ran[-1] == (1, 1) and np.array_equal(outputs[0], kept)
    with pytest.raises(ValueError, match="exceeds the largest bucket 8"):
        runner.run([rng.standard_normal((9, 3)).astype(np.float32)])


def test_onnxruntime_runner_runs_several_requests_as_one_batch(tmp_path):
    """On the CPU there is no padding: the requests' rows are copied into one buffer and run at their own size."""
    from wtconv_serving.runners.ort_runner import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(tiny_onnx(tmp_path / "relu.onnx"))
    assert runner.buckets == () and runner.description == "ONNX Runtime CPU EP"
    rng = np.random.default_rng(1)
    for sizes in [(3,), (1, 4, 2), (5, 5)]:
        parts = [rng.standard_normal((n, 1, 8, 8)).astype(np.float32) for n in sizes]
        outputs = runner.run(parts)
        for part, out in zip(parts, outputs, strict=True):
            assert np.array_equal(out, np.maximum(part, 0))


@pytest.mark.parametrize("existing", [False, True])
def test_an_interrupted_write_leaves_the_repository_as_it_was(tmp_path, monkeypatch, existing):
    """Ctrl-C while the model's files are copied (the second copy here): no half-written model folder, the previous
    one (written with force) intact, no staging folder, and a repository folder the write created removed."""
    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    repo = tmp_path / "repo"
    if existing:
        write(onnx_path, repo, name="m")
    before = snapshot(tmp_path)
    plan = python_backend.check_python_repository(onnx_path, repo, name="m", force=True)
    from wtconv_serving.repositories import repository

    copies = []
    real_copy = repository.atomic_copy

    def interrupted(*args, **kwargs):
        copies.append(args)
        if len(copies) == 2:
            raise KeyboardInterrupt
        return real_copy(*args, **kwargs)

    monkeypatch.setattr(repository, "atomic_copy", interrupted)  # write_model_folder's copies
    with pytest.raises(KeyboardInterrupt):
        python_backend.write_python_repository(plan)
    assert len(copies) == 2
    assert snapshot(tmp_path) == before
