"""Would packed half2 / bfloat162 FMA keep the fused kernels inside their fp16/bf16 accuracy contract?

The fused kernels (plugin/kernels/wtconvWholePlane.cuh) read fp16/bf16, compute everything in fp32 and round the
output once (docs/design.md). This script emulates, exactly and vectorised over tensors, what a kernel doing
(part of) the k x k convolutions with packed half FMA (HFMA2: one rounding of a*b + c) would compute, and measures
it with the GPU tests' contract (tests/test_kernels_gpu.py, check_case):

    error = max|ours - float64 spec| / max|float64 spec|,   ratio = error / max(reference error, unit roundoff)

where the reference error is the PyTorch reference module (wtconv_torch.WTConv2d) run in the same dtype, and the
contract asks ratio <= 1.0. Schemes (the rest of the arithmetic stays fp32, output rounded once to the I/O dtype):

    fp32        today's kernels: every operation in fp32.
    base-half   the base k x k depthwise convolution in half FMA: weights rounded to the dtype, one accumulator
                per pixel starting at 0, rounded after every FMA, taps dy-major / dx-minor (the kernels' order);
                the result converted to fp32 and added to the fp32 rest (bias, wavelet levels).
    bands-half  the 4 band convolutions of every level likewise (the band values, from the Haar analysis in fp32,
                rounded to the dtype first; the next level's analysis still reads the fp32 LL band); synthesis
                in fp32.
    all-half    both.
    row-split   every convolution (base and bands) with one half accumulator per row of k taps (k FMAs each);
                the k row sums converted and added in fp32.
    bands-row-split  row-split for the band convolutions only, the base convolution in fp32.

Rounding is round-to-nearest-even computed directly from float64 (``round_to_dtype``): torch's float64 -> fp16/bf16
cast goes through float32 and so rounds twice. The fp32 parts run in float32 in the executable spec's order
(wtconv_torch/fused_spec.py); the kernels' fp32 order differs only at float32 rounding (~1e-7 relative).

Usage (repository root): python3 -m benchmarks.half_arithmetic_study [--device cuda] [--seeds 5]
                             [--groups stages awkward] [--json docs/bench/half_arithmetic.json]
                             [--markdown docs/bench/half_arithmetic.md]
docs/bench/half_arithmetic.md is the committed run (docs/bench/README.md, "Packed half arithmetic").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from wtconv_bench.layers import STAGES_T
from wtconv_torch.folding import FoldedWTConv, fold_wtconv
from wtconv_torch.fused_spec import fused_wtconv2d_spec, haar_analysis
from wtconv_torch.wtconv2d import WTConv2d, random_wtconv2d

# scheme -> arithmetic of (the base convolution, the band convolutions): fp32, half (one accumulator of k*k FMAs),
# row-split (one half accumulator per row of k FMAs, rows added in fp32)
MODES = {
    "fp32": ("fp32", "fp32"),
    "base-half": ("half", "fp32"),
    "bands-half": ("fp32", "half"),
    "all-half": ("half", "half"),
    "row-split": ("row-split", "row-split"),
    "bands-row-split": ("fp32", "row-split"),
}
SCHEMES = tuple(MODES)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# unit roundoff: the floor of the contract's bound (tests/test_kernels_gpu.py, UNIT_ROUNDOFF)
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
# (significand bits incl. the implicit one, smallest normal exponent, largest finite value)
_FORMATS = {
    torch.float16: (11, -14, 65504.0),
    torch.bfloat16: (8, -126, float.fromhex("0x1.fep127")),
}


def round_to_dtype(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``v`` rounded once, to nearest even, to fp16 or bf16 (subnormals and overflow to inf included),
    returned as float64."""
    bits, emin, largest = _FORMATS[dtype]
    _, e = torch.frexp(v)  # |v| = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
    ulp = torch.ldexp(torch.ones_like(v), torch.clamp(e - 1, min=emin) - (bits - 1))
    r = torch.round(v / ulp) * ulp  # exact scaling by a power of two; torch.round rounds half to even
    return torch.where(r.abs() > largest, torch.copysign(torch.full_like(v, float("inf")), v), r)


def half_fma_conv(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype, row_split: bool = False) -> torch.Tensor:
    """Depthwise k x k 'same' convolution of x (B, C, H, W; values representable in ``dtype``) with weight
    (C, k, k) as packed half FMA would compute it: weights rounded to ``dtype``, each pixel's accumulator starts at
    0 and is rounded after every FMA, taps dy-major, dx-minor. ``row_split``: a fresh accumulator per row of k
    taps, the row sums added in float32. Returns float32 (the value the kernel would convert and carry on with)."""
    k = weight.shape[-1]
    r = k // 2
    h, w = x.shape[-2:]
    xp = F.pad(x.to(torch.float64), (r, r, r, r))
    wq = round_to_dtype(weight.to(device=x.device, dtype=torch.float64), dtype)[None, :, :, :, None, None]
    acc = torch.zeros(xp.shape[:2] + (h, w), dtype=torch.float64, device=x.device)
    total = torch.zeros(acc.shape, dtype=torch.float32, device=x.device)
    for dy in range(k):
        for dx in range(k):
            # a*b of two fp16/bf16 values is exact in float64; + c rounds at most in rare extreme exponent gaps
            acc = round_to_dtype(wq[:, :, dy, dx] * xp[..., dy : dy + h, dx : dx + w] + acc, dtype)
        if row_split:
            total = total + acc.to(torch.float32)  # float32 + float32: one float32 rounding, as in the kernel
            acc = torch.zeros_like(acc)
    return total if row_split else acc.to(torch.float32)


def fp32_conv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The same convolution in float32 (today's kernels)."""
    c, k = weight.shape[0], weight.shape[-1]
    w32 = weight.to(device=x.device, dtype=torch.float32).reshape(c, 1, k, k)
    return F.conv2d(x.to(torch.float32), w32, padding=k // 2, groups=c)


def _convolve(x: torch.Tensor, weight: torch.Tensor, mode: str, dtype: torch.dtype) -> torch.Tensor:
    if mode == "fp32":
        return fp32_conv(x, weight)
    return half_fma_conv(round_to_dtype(x.double(), dtype), weight, dtype, row_split=mode == "row-split")


def emulate(
    x: torch.Tensor, folded: FoldedWTConv, scheme: str, dtype: torch.dtype, cache: dict | None = None
) -> torch.Tensor:
    """The fused operator (fused_spec.py's formulation) under ``scheme``, before the output rounding: float32.
    ``x`` holds the layer input (values representable in ``dtype`` for the half schemes); ``dtype`` is the
    format of the half arithmetic (unused by ``fp32``). ``cache``: a dict shared by calls on the same x, folded
    and dtype, so each convolution is computed once per arithmetic mode."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    base_mode, band_mode = MODES[scheme]
    cache = {} if cache is None else cache

    def conv(key: int, inp: torch.Tensor, weight: torch.Tensor, mode: str) -> torch.Tensor:
        if (key, mode) not in cache:
            cache[key, mode] = _convolve(inp, weight, mode, dtype)
        return cache[key, mode]

    levels, stride = folded.wt_levels, folded.stride
    bw, bb, ww = folded.tensors(device=x.device, dtype=torch.float32)
    xc = x.to(torch.float32)
    _, c, h, w = xc.shape
    ys = torch.arange(0, h, stride, device=x.device)
    xs = torch.arange(0, w, stride, device=x.device)

    out = (conv(0, xc, bw, base_mode) + bb[None, :, None, None])[:, :, ys][:, :, :, xs]
    ll = xc
    for level in range(1, levels + 1):
        bands = haar_analysis(ll)  # fp32, from the fp32 LL band
        filtered = conv(level, bands, ww[level - 1], band_mode)
        filtered = filtered.reshape(filtered.shape[0], c, 4, filtered.shape[-2], filtered.shape[-1])
        ll = bands.reshape_as(filtered)[:, :, 0]
        iy, ix = ys >> level, xs >> level
        sy = (1 - 2 * ((ys >> (level - 1)) & 1)).to(torch.float32)[:, None]
        sx = (1 - 2 * ((xs >> (level - 1)) & 1)).to(torch.float32)[None, :]
        g = filtered[:, :, :, iy][:, :, :, :, ix]
        out = out + (g[:, :, 0] + sy * g[:, :, 1] + sx * g[:, :, 2] + (sy * sx) * g[:, :, 3]) * (0.5**level)
    return out


def rel_error(value: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.abs().max().item() or 1.0
    return (value.double() - expected).abs().max().item() / scale


@dataclass(frozen=True)
class Case:
    group: str
    b: int
    c: int
    h: int
    w: int
    k: int
    levels: int
    stride: int
    seed: int

    @property
    def label(self) -> str:
        size = f"{self.h}^2" if self.h == self.w else f"{self.h}x{self.w}"
        stride = f" s={self.stride}" if self.stride != 1 else ""
        return f"{self.b}x{self.c}x{size} k={self.k} L={self.levels}{stride}"


GROUPS = {
    "stages": "WTConvNeXt-T's stages at k = 5, and the second stage's shape at k = 3 and k = 7, batch {batch}",
    "awkward": "awkward sizes of the GPU tests' matrix (odd, thin, smaller than 2^L; strides 1 and 2), k = 3, 5, 7",
}


def cases(group: str, seeds: int, batch: int) -> list[Case]:
    """The shapes of ``group`` (GROUPS), ``seeds`` random layers and inputs each."""
    if group == "stages":
        shapes = [(batch, c, hw, hw, 5, lv, 1) for c, hw, lv in STAGES_T]
        c2, hw2, lv2 = STAGES_T[1]
        shapes += [(batch, c2, hw2, hw2, k, lv2, 1) for k in (3, 7)]
    else:  # sizes from tests/test_kernels_gpu.py's matrix
        sizes = [(2, 3, 37, 70), (1, 2, 8, 8), (2, 3, 5, 3), (2, 2, 200, 9), (1, 1, 129, 65)]
        shapes = [(*size, k, lv, s) for size in sizes for k in (3, 5, 7) for lv, s in ((1, 1), (3, 1), (3, 2))]
    offset = 1000 if group == "stages" else 100000
    return [Case(group, *shape, offset + 100 * i + s) for i, shape in enumerate(shapes) for s in range(seeds)]


@torch.no_grad()
def run_case(case: Case, dtype: torch.dtype, device: torch.device) -> dict:
    """Errors of the reference and of every scheme against the float64 spec (as check_case measures them)."""
    layer = random_wtconv2d(case.c, case.k, case.levels, case.stride, case.seed)
    gen = torch.Generator().manual_seed(case.seed + 1)
    xd = torch.randn((case.b, case.c, case.h, case.w), generator=gen).to(device).to(dtype)
    f64 = fold_wtconv(layer, dtype=torch.float64)
    folded = fold_wtconv(layer)  # before layer.to(dtype) below, which rounds the layer's weights in place
    expected = fused_wtconv2d_spec(xd.double(), *f64.tensors(device=device), case.k, case.levels, case.stride)
    ref_err = rel_error(layer.to(device, dtype)(xd), expected)
    bound = max(ref_err, UNIT_ROUNDOFF[dtype])
    row = dict(group=case.group, case=case.label, seed=case.seed, reference_error=ref_err, errors={}, ratios={})
    cache = {}
    for scheme in SCHEMES:
        err = rel_error(emulate(xd, folded, scheme, dtype, cache).to(dtype), expected)
        row["errors"][scheme] = err
        row["ratios"][scheme] = err / bound
    return row


def summarise(rows: list[dict]) -> dict:
    """Per scheme: the worst ratio (and its case), the median, and how many cases exceed 1.0x."""
    out = {}
    for scheme in SCHEMES:
        ratios = [r["ratios"][scheme] for r in rows]
        worst = max(range(len(rows)), key=lambda i: ratios[i])
        out[scheme] = dict(
            worst=ratios[worst],
            worst_case=f"{rows[worst]['case']} seed {rows[worst]['seed']}",
            median=statistics.median(ratios),
            over_1=sum(r > 1.0 for r in ratios),
            cases=len(ratios),
        )
    return out


def markdown_table(summary: dict, batch: int) -> str:
    """summary[group][dtype][scheme] -> one markdown table per group."""
    parts = []
    for group, per_dtype in summary.items():
        lines = [
            f"**{group}**: {GROUPS[group].format(batch=batch)}",
            "",
            "| scheme | dtype | worst ratio | median ratio | cases > 1.0x | worst case |",
            "|---|---|---|---|---|---|",
        ]
        for scheme in SCHEMES:
            for name, per_scheme in per_dtype.items():
                s = per_scheme[scheme]
                lines.append(
                    f"| {scheme} | {name} | {s['worst']:.2f}x | {s['median']:.2f}x | {s['over_1']} of {s['cases']} "
                    f"| {s['worst_case']} |"
                )
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def json_report(meta: dict, summary: dict, rows: dict) -> str:
    """meta and summary indented; every case one compact line: group, case, seed, reference error, the ratios
    (4 significant digits; error = ratio * max(reference error, unit roundoff))."""
    columns = ["group", "case", "seed", "reference_error", *(f"ratio {s}" for s in SCHEMES)]

    def line(r: dict) -> str:
        values = [r["group"], r["case"], r["seed"], float(f"{r['reference_error']:.4g}")]
        return json.dumps(values + [float(f"{r['ratios'][s]:.4g}") for s in SCHEMES])

    head = json.dumps(dict(meta=meta, summary=summary), indent=1)[: -len("\n}")]
    tables = [f'  "{name}": [\n' + ",\n".join("   " + line(r) for r in rs) + "\n  ]" for name, rs in rows.items()]
    cases = f'{{\n  "columns": {json.dumps(columns)},\n' + ",\n".join(tables) + "\n }"
    return f'{head},\n "cases": {cases}\n}}\n'


_LEGEND = """\
Ratio = error / max(reference error, unit roundoff), error = max|out - float64 spec| / max|float64 spec|, as the
GPU tests' contract measures it (tests/test_kernels_gpu.py, check_case); the contract asks <= 1.0x. The reference
is the PyTorch module `wtconv_torch.WTConv2d` run in the dtype. A ratio of exactly 1.0x (the reference's own error)
passes. Cases: the groups named before each table, each shape with several random layers and inputs (weights drawn
as the GPU tests draw them), labelled B x C x H x W (H^2: square), k, levels L, stride s (when not 1) and the seed.
Schemes (everything not named is fp32, the output is rounded once to the I/O dtype):

- `fp32`: today's kernels.
- `base-half`: the base k x k convolution with packed half FMA (weights rounded to the dtype, one accumulator per
  pixel rounded after every FMA, taps dy-major).
- `bands-half`: the 4 band convolutions of every level likewise (band values rounded to the dtype first).
- `all-half`: both.
- `row-split`: every convolution with one half accumulator per row of k taps, the k row sums added in fp32.
- `bands-row-split`: row-split for the band convolutions only, the base convolution in fp32.

The half arithmetic is emulated exactly (benchmarks/half_arithmetic_study.py: each FMA rounded once to nearest even,
from float64); the fp32 parts run in float32 in the executable spec's order, which differs from the kernels' order
only at float32 rounding.
"""


def markdown_report(meta: dict, table: str) -> str:
    """The markdown file: what was measured, the command, the table, and where the reference ran."""
    where = meta["device"]
    check = ", ".join(f"{name} {100 * share:.2f}%" for name, share in meta["reference_conv_rounds_once"].items())
    if where == "cpu":
        note = (
            "The reference ran on the CPU, with PyTorch's CPU convolutions in the dtype, not on the GPU as in the GPU "
            "tests. Each of its operations rounds its output to the dtype on either device, and the CPU "
            "convolutions accumulate in fp32 and round once, as cuDNN does (a depthwise 7 x 7 convolution in the "
            f"dtype equals the fp32 one rounded once at {check} of its outputs; the rest differ by the order of "
            "summation). The GPU's reference sums in another order, so its error, and with it every ratio, can "
            "differ somewhat there; the GPU tests hold the kernels to the GPU's reference."
        )
    else:
        note = (
            f"The reference ran on the GPU ({where}), as in the GPU tests (a depthwise 7 x 7 convolution in the "
            f"dtype equals the fp32 one rounded once at {check} of its outputs)."
        )
    note = textwrap.fill(note, width=118)
    skipped = "".join(f"\nSkipped: {name}: {reason}\n" for name, reason in meta["skipped"].items())
    return (
        f"# Packed half arithmetic: contract ratios\n\n{_LEGEND}\n{note}\n{skipped}\n"
        f"Command: `{meta['command']}` (torch {meta['torch']}, {where}, {meta['cpu_threads']} CPU threads, "
        f"{meta['seconds']} s).\n\n{table}\n"
    )


def reference_conv_rounds_once(dtype: torch.dtype, device: torch.device) -> float:
    """Fraction of a depthwise 7 x 7 convolution's outputs in ``dtype`` on ``device`` that equal the float32
    convolution rounded once to ``dtype``: near 1 when the backend accumulates in fp32 and rounds its output once
    (as cuDNN does), far below 1 if it accumulated in the dtype."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 64, 20, 20, generator=gen).to(device, dtype)
    w = (torch.randn(64, 1, 7, 7, generator=gen) / 7).to(device, dtype)
    with torch.no_grad():
        low = F.conv2d(x, w, padding=3, groups=64)
        once = F.conv2d(x.float(), w.float(), padding=3, groups=64).to(dtype)
    return (low == once).double().mean().item()


def dtype_supported(dtype: torch.dtype, device: torch.device) -> str | None:
    """None if the reference module runs in ``dtype`` on ``device``, else the reason."""
    try:
        with torch.no_grad():
            layer = WTConv2d(2, 2, kernel_size=3, wt_levels=2).to(device, dtype)
            layer(torch.zeros(1, 2, 4, 4, device=device, dtype=dtype))
    except (RuntimeError, NotImplementedError) as exc:
        return f"{dtype} WTConv2d does not run on {device}: {str(exc).splitlines()[0]}"
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: where the reference and emulation run")
    p.add_argument("--seeds", type=int, default=5, help="random layers and inputs per shape (default 5)")
    p.add_argument("--batch", type=int, default=2, help="batch of the stage cases (default 2; awkward: the tests')")
    p.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp16", "bf16"])
    p.add_argument("--groups", nargs="+", choices=list(GROUPS), default=list(GROUPS), help="case groups (default all)")
    p.add_argument("--json", type=Path, help="write every number here")
    p.add_argument("--markdown", type=Path, help="write the table, the command and the torch version here")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.batch < 1:
        p.error("--seeds and --batch must be >= 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible to torch; run on the CPU (the default)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    # fp32 parts of the emulation must be true fp32 (cuDNN would otherwise run them in TF32)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    start = time.perf_counter()
    rows, summary, skipped, conv_check = {}, {}, {}, {}
    for name in args.dtypes:
        dtype = DTYPES[name]
        reason = dtype_supported(dtype, device)
        if reason is not None:
            skipped[name] = reason
            print(f"skipping {name}: {reason}", file=sys.stderr)
            continue
        conv_check[name] = reference_conv_rounds_once(dtype, device)
        rows[name] = []
        for group in args.groups:
            for case in cases(group, args.seeds, args.batch):
                row = run_case(case, dtype, device)
                rows[name].append(row)
                ratios = "  ".join(f"{s} {row['ratios'][s]:.2f}" for s in SCHEMES)
                print(
                    f"{name} {case.label} seed {case.seed}: ref {row['reference_error']:.2e}  {ratios}", file=sys.stderr
                )
            summary.setdefault(group, {})[name] = summarise([r for r in rows[name] if r["group"] == group])
    seconds = time.perf_counter() - start
    table = markdown_table(summary, args.batch)
    print(table)
    print(f"\n{seconds:.0f} s on {device} ({torch.get_num_threads()} CPU threads)")
    command = "python3 -m benchmarks.half_arithmetic_study " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = dict(
        command=command.strip(),
        torch=torch.__version__,
        device=str(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"),
        cpu_threads=torch.get_num_threads(),
        seconds=round(seconds, 1),
        seeds=args.seeds,
        batch=args.batch,
        skipped=skipped,
        reference_conv_rounds_once=conv_check,
    )
    if args.json:
        args.json.write_text(json_report(meta, summary, rows))
    if args.markdown:
        args.markdown.write_text(markdown_report(meta, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
