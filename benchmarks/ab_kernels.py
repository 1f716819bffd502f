"""A/B of two builds of our kernels in one process, on the same inputs, interleaved.

    python3 -m benchmarks.ab_kernels --lib before=build/ref/libwtconv_kernels_capi.so \\
        --lib after=build/plugin/libwtconv_kernels_capi.so --json OUT/ab.json --markdown OUT/ab.md

The first build is the baseline and the second the build under test (ratio = second / first); further builds are
timed beside them (their own ratio to the first in the table). Results are written after every case, so a run
stopped early keeps what it measured.

Every kernel change is timed on the held set below (docs/bench/README.md, "A/B of a kernel change"): the
WTConvNeXt-T stage shapes in both layouts and dtypes, larger planes on the tiled path (odd sizes, k = 3/7/11,
stride 2, bf16, channels-last), small batches (latency), shapes beyond WTConvNeXt-T (beyond: other widths
and batches, the neighbours of the fixed-geometry shapes), and x.clone() as the control that must not move. Each
build's library is loaded on its own handle (cuda_kernels.open_library); each case is timed as a CUDA-graph
replay over buffers rotating through > 3x L2, the builds alternating for several rounds; the median over rounds
is reported, with after / before and a flag where the later build is more than 3 % slower. Beside each case: cuDNN's
depthwise 7 x 7 convolution (nn.Conv2d, groups = C) in the same dtype and layout, the layer WTConvNeXt replaces,
and each build's error against the float64 spec on the first batch item, with the PyTorch reference module's own
error in the dtype (the fp16 / bf16 contract's yardstick, docs/design.md §2.5).
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from wtconv_bench.layers import L2_BYTES, STAGES_T, gpu_info, time_graph
from wtconv_torch import cuda_kernels
from wtconv_torch.folding import fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec
from wtconv_torch.wtconv2d import WTConv2d

F16, F32, BF16 = torch.float16, torch.float32, torch.bfloat16
SLOWER = 1.03  # a change slower than this anywhere says so (docs/bench/README.md)


def held_cases() -> list[dict]:
    """The held A/B set: (group, B, C, H, W, k, levels, stride, dtype, layout)."""
    cases = []

    def add(group, b, c, h, w, k, levels, stride, dtype, layout):
        cases.append(
            dict(group=group, b=b, c=c, h=h, w=w, k=k, levels=levels, stride=stride, dtype=dtype, layout=layout)
        )

    for dtype in (F16, F32, BF16):
        for layout in ("nchw", "nhwc"):
            for c, hw, levels in STAGES_T:
                add("stage B=64", 64, c, hw, hw, 5, levels, 1, dtype, layout)
    for layout in ("nchw", "nhwc"):
        for c, hw, levels in STAGES_T:
            add("stage B=256", 256, c, hw, hw, 5, levels, 1, F16, layout)
    for layout in ("nchw", "nhwc"):
        add("latency", 1, 96, 56, 56, 5, 5, 1, F16, layout)
        add("latency", 8, 96, 56, 56, 5, 5, 1, F16, layout)
        add("latency", 1, 768, 7, 7, 5, 2, 1, F16, layout)
    tiled = [
        (8, 64, 256, 256, 5, 1, 1, F32),
        (8, 64, 256, 256, 5, 3, 1, F16),
        (8, 128, 512, 512, 5, 3, 1, F16),
        (2, 32, 1024, 1024, 5, 5, 1, F16),
        (8, 64, 128, 128, 3, 4, 1, F16),
        (8, 64, 128, 128, 5, 3, 2, F32),
        (8, 64, 256, 256, 7, 3, 1, F32),
        (8, 64, 256, 256, 7, 3, 1, F16),
        (8, 64, 256, 256, 5, 3, 2, F16),
        (1, 16, 129, 65, 5, 3, 1, F16),
        (3, 24, 257, 131, 7, 2, 1, F16),
        (8, 64, 128, 128, 11, 2, 1, F32),
        (8, 64, 256, 256, 5, 3, 1, BF16),
        (8, 32, 100, 100, 5, 2, 1, F32),
    ]
    for b, c, h, w, k, levels, stride, dtype in tiled:
        add("tiled", b, c, h, w, k, levels, stride, dtype, "nchw")
    for b, c, h, w, k, levels, stride, dtype in ((8, 64, 256, 256, 5, 3, 1, F16), (8, 64, 128, 128, 5, 3, 2, F32)):
        add("tiled", b, c, h, w, k, levels, stride, dtype, "nhwc")
    # Beyond WTConvNeXt-T: the stage resolutions at other widths and batches (WTConvNeXt-S / B channels, odd channel
    # counts), the 7 x 7 kernel on both sides of its warps-per-multiprocessor threshold, and the neighbours of the
    # fixed-geometry shapes they must not take (k = 3, one level fewer, stride 2), so a dispatch tuned on the stage
    # shapes shows what it does elsewhere.
    for layout in ("nchw", "nhwc"):
        for c, hw, levels in ((128, 56, 5), (256, 28, 4), (512, 14, 3), (1024, 7, 2)):
            add("beyond", 32, c, hw, hw, 5, levels, 1, F16, layout)
        add("beyond", 16, 96, 56, 56, 5, 5, 1, F32, layout)
        add("beyond", 128, 100, 56, 56, 5, 5, 1, F16, layout)
        add("beyond", 48, 200, 28, 28, 5, 4, 1, BF16, layout)
        add("beyond", 2, 768, 7, 7, 5, 2, 1, F16, layout)
        add("beyond", 16, 768, 7, 7, 5, 2, 1, F16, layout)
        add("beyond", 32, 768, 7, 7, 5, 2, 1, F32, layout)
        add("beyond", 128, 1536, 7, 7, 5, 2, 1, F16, layout)
        add("beyond", 64, 96, 56, 56, 3, 5, 1, F16, layout)
        add("beyond", 64, 96, 56, 56, 5, 4, 1, F16, layout)
        add("beyond", 64, 192, 28, 28, 5, 4, 2, F16, layout)
    return cases


def label(case: dict) -> str:
    s = f"{case['b']}x{case['c']}x{case['h']}x{case['w']} k{case['k']} L{case['levels']}"
    s += f" s{case['stride']}" if case["stride"] != 1 else ""
    return f"{s} {str(case['dtype'])[6:]} {case['layout']}"


def case_inputs(case: dict):
    """Inputs, outputs and fp32 weights on the GPU, enough buffers to rotate through > 3x L2."""
    b, c, h, w, dtype = case["b"], case["c"], case["h"], case["w"], case["dtype"]
    fmt = torch.channels_last if case["layout"] == "nhwc" else torch.contiguous_format
    layer = WTConv2d(c, c, case["k"], stride=case["stride"], wt_levels=case["levels"])
    weights = fold_wtconv(layer).tensors(device="cuda")
    nbuf = max(1, math.ceil(3 * L2_BYTES / (b * c * h * w * dtype.itemsize)))
    xs = [torch.randn(b, c, h, w, device="cuda", dtype=dtype).contiguous(memory_format=fmt) for _ in range(nbuf)]
    ho, wo = cuda_kernels.output_shape(xs[0], case["stride"])[2:]
    outs = [torch.empty(b, c, ho, wo, device="cuda", dtype=dtype, memory_format=fmt) for _ in xs]
    return xs, outs, weights, layer


def calls_for(lib, case: dict, xs, outs, weights):
    layout = cuda_kernels.NHWC if case["layout"] == "nhwc" else cuda_kernels.NCHW
    ptrs = tuple(t.data_ptr() for t in weights)
    plan = cuda_kernels.Plan(
        lib, cuda_kernels.DTYPES[case["dtype"]], xs[0].shape, case["k"], case["levels"], case["stride"], layout, ptrs
    )
    workspace = torch.empty(max(plan.need, 1), dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream

    def call(x, out):
        return lambda: plan.forward(x.data_ptr(), out.data_ptr(), workspace.data_ptr(), stream().cuda_stream)

    return [call(x, o) for x, o in zip(xs, outs, strict=True)], (plan, workspace)


def check_agree(libs, case, xs, outs, weights) -> float:
    """Largest |difference| between the builds' outputs on one input, relative to the output's size (both builds
    must compute the same operator; the GPU tests hold each to the float64 spec)."""
    results = []
    for lib in libs.values():
        out = torch.empty_like(outs[0])
        calls, keep = calls_for(lib, case, xs[:1], [out], weights)
        calls[0]()
        torch.cuda.synchronize()
        results.append(out.float())
        del keep
    scale = max(results[0].abs().max().item(), 1e-30)
    return max((r - results[0]).abs().max().item() for r in results[1:]) / scale


def errors(libs, case, x, weights, layer) -> dict:
    """Each build's error max |out - spec| / max |spec| on the first batch item against the float64 spec, and the
    PyTorch reference module's own error in the dtype (``reference``)."""
    x1 = x[:1]
    w64 = fold_wtconv(layer, torch.float64).tensors(device="cuda")
    spec = fused_wtconv2d_spec(x1.double(), *w64, case["k"], case["levels"], case["stride"])
    scale = max(spec.abs().max().item(), 1e-30)
    found = {}
    for name, lib in libs.items():
        fmt = torch.channels_last if case["layout"] == "nhwc" else torch.contiguous_format
        out = torch.empty(spec.shape, dtype=case["dtype"], device="cuda", memory_format=fmt)
        calls, keep = calls_for(lib, case, [x1], [out], weights)
        calls[0]()
        torch.cuda.synchronize()
        found[name] = (out.double() - spec).abs().max().item() / scale
        del keep
    with torch.no_grad():
        reference = layer.to("cuda", case["dtype"])(x1)
    found["reference"] = (reference.double() - spec).abs().max().item() / scale
    return found


def time_depthwise7(case: dict, xs, replays: int) -> float:
    """cuDNN's depthwise 7 x 7 convolution on the same inputs (the layer WTConvNeXt replaces)."""
    c = case["c"]
    conv = torch.nn.Conv2d(c, c, 7, stride=case["stride"], padding=3, groups=c, device="cuda", dtype=case["dtype"])
    if case["layout"] == "nhwc":
        conv = conv.to(memory_format=torch.channels_last)
    with torch.no_grad():
        return time_graph(torch, [lambda x=x: conv(x) for x in xs], replays)


def run(libs: dict, rounds: int, replays: int, groups: set | None, match: str | None = None, on_row=None) -> list[dict]:
    rows = []
    for case in held_cases():
        if groups and case["group"] not in groups:
            continue
        if match and not re.search(match, label(case)):
            continue
        xs, outs, weights, layer = case_inputs(case)
        times = {name: [] for name in libs}
        prepared = {name: calls_for(lib, case, xs, outs, weights) for name, lib in libs.items()}
        for _ in range(rounds):
            for name in libs:
                times[name].append(time_graph(torch, prepared[name][0], replays))
        clone_ms = time_graph(torch, [lambda x=x: x.clone(memory_format=torch.preserve_format) for x in xs], replays)
        row = dict(case=label(case), group=case["group"], clone_ms=clone_ms)
        row["dw7_ms"] = time_depthwise7(case, xs, replays)
        row.update({f"{name}_ms": statistics.median(t) for name, t in times.items()})
        row["agree"] = check_agree(libs, case, xs, outs, weights)
        row["errors"] = errors(libs, case, xs[0], weights, layer)
        names = list(libs)
        row["ratio"] = row[f"{names[1]}_ms"] / row[f"{names[0]}_ms"]
        for other in names[2:]:
            row[f"{other}_ratio"] = row[f"{other}_ms"] / row[f"{names[0]}_ms"]
        rows.append(row)
        if on_row is not None:
            on_row(rows)
        print(
            f"{row['case']:<42} " + " ".join(f"{n}={row[f'{n}_ms']:.4f}" for n in names) + f" ratio={row['ratio']:.3f}"
            f" dw7={row['dw7_ms']:.4f} clone={clone_ms:.4f} agree={row['agree']:.1e} "
            + " ".join(f"err_{n}={e:.1e}" for n, e in row["errors"].items()),
            flush=True,
        )
        del prepared, xs, outs
        torch.cuda.empty_cache()
    return rows


def markdown(rows: list[dict], names: list[str], meta: dict) -> str:
    before, after, others = names[0], names[1], names[2:]
    lines = [
        f"# A/B: {after} vs {before} — {meta['gpu']}",
        "",
        f"Command: `{meta['command']}`  ",
        f"torch {meta['torch']}, {meta['date']}. Median over {meta['rounds']} interleaved rounds of the median of "
        f"{meta['replays']} CUDA-graph replays (ms per call, buffers over > 3x L2). ratio = {after} ÷ {before} "
        f"(< 1: {after} faster); **bold**: more than {round((SLOWER - 1) * 100)} % slower. agree: max |difference| of "
        "the builds' outputs ÷ max |output|. dw7: cuDNN's depthwise 7 x 7 convolution, same dtype and layout; "
        f"÷ dw7 = {after} ÷ dw7. err: max |out - float64 spec| ÷ max |spec| on the first batch item, each build and "
        "the PyTorch reference module in the dtype."
        + (f" {', '.join(others)}: further builds timed beside them (÷ {before})." if others else ""),
        "",
        f"| group | case | {before} | {after} | ratio | "
        + "".join(f"{o} | ÷ {before} | " for o in others)
        + f"dw7 | ÷ dw7 | clone | agree | err {before} | err {after} | err reference |",
        "|---|---|---|---|---|" + "---|---|" * len(others) + "---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.3f}"
        ratio = f"**{ratio}**" if r["ratio"] > SLOWER else ratio
        e = r["errors"]
        extra = "".join(f"{r[f'{o}_ms']:.4f} | {r[f'{o}_ratio']:.3f} | " for o in others)
        lines.append(
            f"| {r['group']} | {r['case']} | {r[f'{before}_ms']:.4f} | {r[f'{after}_ms']:.4f} | {ratio} | {extra}"
            f"{r['dw7_ms']:.4f} | {r[f'{after}_ms'] / r['dw7_ms']:.2f} | {r['clone_ms']:.4f} | {r['agree']:.1e} | "
            f"{e[before]:.1e} | {e[after]:.1e} | {e['reference']:.1e} |"
        )
    for group in sorted({r["group"] for r in rows}):
        ratios = [r["ratio"] for r in rows if r["group"] == group]
        lines.append("")
        lines.append(
            f"- {group}: {len(ratios)} cases, ratio {min(ratios):.3f} … {max(ratios):.3f}, geometric mean "
            f"{math.exp(statistics.mean(math.log(x) for x in ratios)):.3f}"
        )
    return "\n".join(lines) + "\n"


def recorded_command(args: list[str]) -> str:
    """The command line as the results record it: the device run's output folder ($OUT) written as OUT."""
    line = "python3 -m benchmarks.ab_kernels " + " ".join(args)
    out = os.environ.get("OUT")
    return line.replace(out.rstrip("/"), "OUT") if out else line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lib",
        action="append",
        required=True,
        help="NAME=PATH of a build (at least two: the baseline, the build under test)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replays", type=int, default=15)
    parser.add_argument("--groups", help="comma-separated subset of: stage B=64, stage B=256, latency, tiled, beyond")
    parser.add_argument("--match", help="regular expression a case's label must contain (e.g. 'float16|bfloat16')")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("ab_kernels: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    libs = {}
    for item in args.lib:
        name, _, path = item.partition("=")
        if not path or not Path(path).is_file():
            print(f"ab_kernels: --lib wants NAME=PATH of a built library, got {item!r}", file=sys.stderr)
            return 2
        libs[name] = cuda_kernels.open_library(Path(path))
    if len(libs) < 2:
        print("ab_kernels: give at least two --lib (the baseline, then the build under test)", file=sys.stderr)
        return 2
    groups = set(args.groups.split(",")) if args.groups else None
    meta = dict(
        **gpu_info(torch),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        command=recorded_command(argv if argv is not None else sys.argv[1:]),
        rounds=args.rounds,
        replays=args.replays,
        libs={name: str(item.partition("=")[2]) for name, item in zip(libs, args.lib, strict=True)},
    )

    def write(rows):
        if args.json:
            args.json.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
        if args.markdown:
            args.markdown.write_text(markdown(rows, list(libs), meta))

    run(libs, args.rounds, args.replays, groups, args.match, on_row=write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
