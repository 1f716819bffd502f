"""The memory benchmark's bookkeeping on the CPU: the allocator-trace replay that finds what is alive at the peak
(benchmarks/memory_snapshot.py), the replacement of published layers and the report's arithmetic
(benchmarks/memory.py). The
measurements themselves need a GPU (benchmarks/bench_memory.py, benchmarks/memory_snapshot.py)."""

import published_wtconv
import torch.nn as nn

from benchmarks import memory as mb
from benchmarks import memory_snapshot as snapshot
from wtconv_torch.wtconv2d import WTConv2d


def _event(action, addr, size, line=1):
    return dict(action=action, addr=addr, size=size, frames=[dict(filename="/m/model.py", line=line, name="f")])


def test_peak_is_found_by_replaying_the_trace():
    trace = [
        _event("alloc", 1, 10),
        _event("alloc", 2, 20),
        _event("free_requested", 1, 10),
        _event("free_completed", 1, 10),
        _event("alloc", 3, 30, line=7),
        _event("free_completed", 2, 20),
        _event("alloc", 4, 5),
    ]
    peak, alive = snapshot.peak_allocations(trace)
    assert peak == 50 and sorted(e["addr"] for e in alive) == [2, 3]
    # a trace without completions frees on the request
    requested_only = [e for e in trace if e["action"] != "free_requested"]
    requested_only = [
        dict(e, action="free_requested") if e["action"] == "free_completed" else e for e in requested_only
    ]
    assert snapshot.peak_allocations(requested_only)[0] == 50


def test_published_layers_are_replaced_by_class_name():
    published = published_wtconv.WTConv2d(8, 8, kernel_size=5, stride=2, wt_levels=1)
    model = nn.Sequential(nn.Conv2d(4, 4, 1), nn.Sequential(WTConv2d(4, 4, kernel_size=3, wt_levels=2)), published)
    made = []
    mb.with_layers_replaced(model, lambda c, k, lv, s: made.append((c, k, lv, s)) or nn.Identity())
    assert made == [(4, 3, 2, 1), (8, 5, 1, 2)]
    assert isinstance(model[1][0], nn.Identity) and isinstance(model[2], nn.Identity)


def test_report_ratios():
    mib = 2**20
    a = mb.stage1_activation_bytes("t", 32)
    layer = dict(b=8, c=64, h=256, w=256, levels=3, k=5, stride=1, dtype="fp16", input_bytes=64 * mib)
    layer.update(ours_nchw_extra=0, ours_cl_extra=8 * mib, published_nchw_extra=40 * mib, published_cl_extra=32 * mib)
    layer.update(
        paper_nchw_extra=16 * mib, paper_cl_extra=16 * mib, plugin_workspace_nchw=0, plugin_workspace_cl=8 * mib
    )
    models = [
        dict(size="t", model="ours", layout="nchw", batch=32, peak=11 * a, left=0),
        dict(size="t", model="ours", layout="cl", batch=32, peak=11 * a, left=0),
        dict(size="t", model="published", layout="nchw", batch=32, peak=11 * a, left=0),
    ]
    text = mb.markdown(dict(meta={}, layers=[layer], models=models))
    model_row = next(line for line in text.splitlines() if line.startswith("| WTConvNeXt-T | 32 |"))
    assert model_row.split("|")[8].strip() == "1.00" and model_row.split("|")[9].strip() == "11.00"
    layer_row = next(line for line in text.splitlines() if line.startswith("| fp16 | 8×64×256² L3"))
    cells = [c.strip() for c in layer_row.split("|")]
    assert cells[10] == "0.25" and cells[11] == "0.50"  # worst layout: channels-last 8 / 32 and 8 / 16
