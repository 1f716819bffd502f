"""wtconv_core's shared helpers: the atomic writer (a failed write leaves the old file and no temporary file) and the
one percentile (against numpy's inverted-CDF percentile and an explicit count)."""

from __future__ import annotations

import json
import os
import stat
from fractions import Fraction

import numpy as np
import pytest

from wtconv_core.files import atomic_copy, atomic_path, atomic_write_bytes, atomic_write_json, user_file_mode
from wtconv_core.stats import median, percentile


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir())


def test_atomic_write_replaces_the_file_with_the_user_mode(tmp_path):
    target = tmp_path / "sub" / "out.json"
    atomic_write_json(target, {"a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2]}
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == user_file_mode()
    assert _leftovers(target.parent) == ["out.json"]


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, error):
    target = tmp_path / "engine.plan"
    target.write_bytes(b"old engine")
    with pytest.raises(type(error)):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half of a new eng")
            raise error
    assert target.read_bytes() == b"old engine"
    assert _leftovers(tmp_path) == ["engine.plan"]


def test_data_that_fails_while_written_leaves_the_old_file(tmp_path):
    target = tmp_path / "a.bin"
    atomic_write_bytes(target, b"old")

    class Boom:
        def __buffer__(self, flags):
            raise RuntimeError("disk full")

    with pytest.raises((RuntimeError, TypeError)):
        atomic_write_bytes(target, Boom())
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == ["a.bin"]


def test_a_write_that_cannot_start_leaves_nothing(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old\n")
    with pytest.raises(TypeError):
        atomic_write_json(target, {"not json": object()})
    assert target.read_text() == "old\n"
    assert _leftovers(tmp_path) == ["out.json"]


def test_atomic_copy_keeps_the_source_mode_or_takes_the_given_one(tmp_path):
    source = tmp_path / "lib.so"
    source.write_bytes(b"\x7fELF library")
    os.chmod(source, 0o750)
    atomic_copy(source, tmp_path / "a" / "lib.so")
    assert stat.S_IMODE((tmp_path / "a" / "lib.so").stat().st_mode) == 0o750
    atomic_copy(source, tmp_path / "b" / "lib.so", mode=0o755)
    assert stat.S_IMODE((tmp_path / "b" / "lib.so").stat().st_mode) == 0o755
    assert (tmp_path / "b" / "lib.so").read_bytes() == source.read_bytes()


def _nearest_rank(values, p):
    """The explicit definition: the smallest value at or below which at least p percent of the values lie."""
    for v in values:
        if Fraction(sum(1 for w in values if w <= v), len(values)) * 100 >= Fraction(str(p)):
            return v
    raise AssertionError("unreachable")


def test_percentile_is_the_nearest_rank():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 10, 20, 100, 997):
        values = sorted(rng.random(n).tolist())
        for p in (0, 1, 10, 25, 50, 90, 95, 99, 99.9, 100):
            assert percentile(values, p) == _nearest_rank(values, p), (n, p)
    values = sorted(rng.random(997).tolist())
    for p in (50, 90, 99, 100):
        assert percentile(values, p) == np.percentile(values, p, method="inverted_cdf")
    # The rank is exact: p90 of ten values is the ninth (float arithmetic gives the tenth: (1 - 0.9) * 10 < 1).
    assert percentile(list(range(1, 11)), 90) == 9


def test_percentile_and_median_edges():
    assert np.isnan(percentile([], 50)) and np.isnan(median([]))
    assert median([1.0, 2.0, 4.0, 10.0]) == 3.0 and median([3.0]) == 3.0
    with pytest.raises(ValueError, match="not in"):
        percentile([1.0], 101)


def test_a_noted_ctrl_c_stops_a_write_before_it_replaces_the_file(tmp_path, monkeypatch):
    """A Ctrl-C the command line's handler noted but whose KeyboardInterrupt Python dropped (wtconv_core.interrupt):
    the next atomic write raises it before the rename (old file kept, no temporary), and so does the next progress
    step."""
    import logging

    from wtconv_core import interrupt
    from wtconv_core.progress import Progress

    path = tmp_path / "report.json"
    path.write_bytes(b"old")
    monkeypatch.setattr(interrupt, "_pending", True)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    with pytest.raises(KeyboardInterrupt):
        Progress(logging.getLogger("test"), "job", 2).step("done")
    monkeypatch.setattr(interrupt, "_pending", False)
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
