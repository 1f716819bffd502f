"""Per-activity instruction counts of a whole-plane kernel: its SASS split by what the source line does.

    nvdisasm -gi -c wtconvKernel_f16.sm_90.cubin > f16.sass        # cuobjdump -xelf all <object> gives the cubin
    python -m benchmarks.sass_phases --sass f16.sass --kernel 'smallPlaneKernelI6__halfLi5ELb0E' \\
        [--counts source.csv --launch 3 --pixels 19267584]

Every SASS instruction carries the source line it came from and, when inlined, the line it was inlined at
(nvdisasm -gi, from the -lineinfo the kernels are built with). A rule table maps (file, line range) to an activity
(band convolutions, base convolution, synthesis, load, ...): the innermost location that a rule names decides, else
the line it was inlined at. The static count is the SASS histogram. With --counts (an `ncu --page source --csv
--print-source sass` export of the same binary, SourceCounters section: tools/device_kernels.sh's profile:<name>
stage leaves it in its logs as source_<name>.log) the executed warp instructions of one profiled launch are added
per activity, per output pixel with --pixels (B * C * H * W), and where the launch's sampled warp stalls fall (the
export's stall_* columns). The export's SASS must be the one disassembled: the opcodes are compared instruction by
instruction.
"""

import argparse
import collections
import csv
import io
import re
import sys
from pathlib import Path

# (file name, first line, last line, activity), first match wins. Line numbers of the files as committed with this
# tool; check them against the sources when those change (the phase banners in the kernels).
RULES = {
    "smallPlaneKernel": [
        ("wtconvWholePlane.cuh", 356, 356, "band convolutions"),
        ("wtconvWholePlane.cuh", 144, 229, "band convolutions"),
        ("wtconvWholePlane.cuh", 232, 305, "base convolution"),
        ("wtconvWholePlane.cuh", 310, 366, "synthesis (+ D)"),
        ("wtconvWholePlane.cuh", 368, 425, "cluster I/O helpers"),
        ("wtconvWholePlane.cuh", 427, 461, "block setup, index split"),
        ("wtconvWholePlane.cuh", 462, 520, "0: zero X and bands, weights"),
        ("wtconvWholePlane.cuh", 521, 636, "1: load x, level-1 analysis"),
        ("wtconvWholePlane.cuh", 637, 668, "2: deep analysis"),
        ("wtconvWholePlane.cuh", 669, 702, "3: deep levels (control, D stores)"),
        ("wtconvWholePlane.cuh", 703, 803, "4: level 1 + output (control, stores)"),
        ("wtconvWholePlane.cuh", 804, 831, "5: cluster output"),
    ],
    "groupPlaneKernel": [
        ("wtconvGroupPlane.cuh", 136, 174, "halos"),
        ("wtconvGroupPlane.cuh", 190, 216, "analysis, every level"),
        ("wtconvGroupPlane.cuh", 234, 234, "level 1: band convolutions"),
        ("wtconvGroupPlane.cuh", 218, 259, "level 1: synthesis (+ D_1)"),
        ("wtconvGroupPlane.cuh", 261, 290, "levels 2..L: convolutions, synthesis"),
        ("wtconvGroupPlane.cuh", 292, 355, "load x (block)"),
        ("wtconvGroupPlane.cuh", 357, 393, "store y (block)"),
        ("wtconvWholePlane.cuh", 144, 305, "base convolution"),
        ("wtconvGroupPlane.cuh", 402, 471, "setup, weights, item loop"),
        ("wtconvGroupPlane.cuh", 472, 531, "level 1: strip control, output"),
    ],
    "tinyPlaneKernel": [
        ("wtconvTinyPlane.cuh", 56, 93, "level 1: band convolutions"),
        ("wtconvTinyPlane.cuh", 95, 184, "levels 2..L: analysis, convolutions, synthesis"),
        ("wtconvTinyPlane.cuh", 186, 212, "level 1: analysis (x from staging)"),
        ("wtconvTinyPlane.cuh", 215, 237, "weights"),
        ("wtconvTinyPlane.cuh", 240, 256, "setup"),
        ("wtconvTinyPlane.cuh", 257, 281, "load x (staging)"),
        ("wtconvTinyPlane.cuh", 282, 282, "x from staging"),
        ("wtconvTinyPlane.cuh", 283, 349, "level 1: synthesis (+ D_1)"),
        ("wtconvTinyPlane.cuh", 350, 386, "base convolution"),
        ("wtconvTinyPlane.cuh", 387, 412, "store y"),
    ],
}


def parse_sass(path: Path, kernel: str) -> list[dict]:
    """The instructions of the first function whose name contains `kernel`: offset, opcode, innermost
    (file, line) and the (file, line) it was inlined at."""
    out, inside, loc, in_group = [], False, (None, None, None, None), False
    for line in path.read_text().splitlines():
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            if inside:
                break
            inside = kernel in m.group(1)
            continue
        if not inside:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?', line)
        if m:
            # a group of comments precedes an instruction: "line a inlined at line b" (the callee's line of the
            # call chain one level below the kernel), then "line b"; the inlined one is the more specific
            f, n, f2, n2 = m.groups()
            here = (Path(f).name, int(n), Path(f2).name if f2 else None, int(n2) if n2 else None)
            if not in_group or here[2] is not None:
                loc = here
            in_group = True
            continue
        in_group = False
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            out.append(dict(offset=int(m.group(1), 16), opcode=m.group(3), loc=loc))
    return out


def activity(loc, rules) -> str:
    f, n, f2, n2 = loc
    for file, a, b, name in rules:
        if f == file and a <= n <= b:
            return name
    for file, a, b, name in rules:
        if f2 == file and n2 is not None and a <= n2 <= b:
            return name
    return "other"


def load_launches(path: Path) -> list[dict]:
    """The profiled launches of an ncu source-page CSV export, in launch order: for each, the kernel name and per
    SASS instruction its opcode, executed warp instructions and stall samples by reason. A launch's table starts at
    a "Kernel Name" row (or its header row); ncu 2025.3 writes some launches' tables twice in a row, so a table
    equal to the one before it is the same launch."""
    tables, current, kernel = [], None, ""
    for row in csv.reader(io.StringIO(path.read_text(errors="replace"))):
        if row and row[0] == "Kernel Name":
            kernel, current = row[1] if len(row) > 1 else "", None
        elif any(c.strip() in COUNT_COLUMNS for c in row):
            current = dict(kernel=kernel, header=[c.strip() for c in row], rows=[])
            tables.append(current)
        elif current is not None and row:
            current["rows"].append(row)
    launches = []
    for t in tables:
        if launches and launches[-1]["kernel"] == t["kernel"] and launches[-1]["rows"] == t["rows"]:
            continue
        launches.append(t)
    return [_launch(t) for t in launches]


COUNT_COLUMNS = ("Instructions Executed", "Warp Instructions Executed")


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _launch(table: dict) -> dict:
    header = table["header"]
    count = next(i for i, c in enumerate(header) if c in COUNT_COLUMNS)
    source = header.index("Source") if "Source" in header else None
    stalls = {c[len("stall_") :]: i for i, c in enumerate(header) if c.startswith("stall_") and "(" not in c}
    out = dict(kernel=table["kernel"], opcodes=[], counts=[], stalls=[])
    for row in table["rows"]:
        row = row + [""] * (len(header) - len(row))  # a short row reads as empty cells
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", row[source]) if source is not None else None
        out["opcodes"].append(m.group(2) if m else None)
        out["counts"].append(_number(row[count]))
        out["stalls"].append({name: _number(row[i]) for name, i in stalls.items()})
    return out


def counts_for(sass: list[dict], launches: list[dict], index: int) -> dict:
    """Launch `index` of an export, checked against the disassembled SASS (same length, same opcodes)."""
    if not 0 <= index < len(launches):
        raise SystemExit(f"sass_phases: the export holds {len(launches)} launches, asked for index {index}")
    launch = launches[index]
    if len(launch["counts"]) != len(sass):
        raise SystemExit(
            f"sass_phases: launch {index} ({launch['kernel'][:80]}) has {len(launch['counts'])} SASS instructions, "
            f"the disassembly {len(sass)}: not the same kernel or build"
        )
    for i, (theirs, ins) in enumerate(zip(launch["opcodes"], sass, strict=True)):
        if theirs is not None and theirs.split(".")[0] != ins["opcode"].split(".")[0]:
            raise SystemExit(
                f"sass_phases: instruction {i} is {theirs} in the export and {ins['opcode']} in the disassembly: "
                "not the same build"
            )
    return launch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sass", type=Path, required=True)
    parser.add_argument("--kernel", required=True, help="a substring of the mangled kernel name")
    parser.add_argument("--rules", default="smallPlaneKernel", choices=sorted(RULES))
    parser.add_argument("--counts", type=Path, help="ncu --page source --csv --print-source sass export")
    parser.add_argument("--launch", type=int, default=0, help="which profiled launch of --counts (0-based)")
    parser.add_argument("--pixels", type=float, help="output pixels of that launch (B * C * H * W)")
    args = parser.parse_args(argv)
    sass = parse_sass(args.sass, args.kernel)
    if not sass:
        print(f"sass_phases: no function containing {args.kernel!r} in {args.sass}", file=sys.stderr)
        return 2
    launch = counts_for(sass, load_launches(args.counts), args.launch) if args.counts else None
    static, dynamic = collections.Counter(), collections.Counter()
    ops, stalls = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
    for i, ins in enumerate(sass):
        name = activity(ins["loc"], RULES[args.rules])
        static[name] += 1
        weight = launch["counts"][i] if launch else 1
        dynamic[name] += weight
        ops[name][ins["opcode"].split(".")[0]] += weight
        if launch:
            stalls[name].update(launch["stalls"][i])
    total = sum(dynamic.values())
    samples = sum(sum(c.values()) for c in stalls.values()) or 1
    if launch:
        print(f"launch {args.launch}: {launch['kernel']}")
        print(
            "| activity | SASS | executed | share | per pixel | stall samples (share of the launch's) | top opcodes |"
        )
        print("|---|---|---|---|---|---|---|")
    else:
        print("| activity | SASS | share | top opcodes |")
        print("|---|---|---|---|")
    for name, n in sorted(dynamic.items(), key=lambda kv: -kv[1]):
        top = ", ".join(f"{op} {c / n:.0%}" for op, c in ops[name].most_common(4)) if n else ""
        if launch:
            per = f"{n / args.pixels:.2f}" if args.pixels else ""
            where = sum(stalls[name].values())
            reasons = ", ".join(f"{r} {c / samples:.0%}" for r, c in stalls[name].most_common(2) if c)
            print(
                f"| {name} | {static[name]} | {n:.3g} | {n / total:.0%} | {per} | {where / samples:.0%}"
                f"{': ' + reasons if reasons else ''} | {top} |"
            )
        else:
            print(f"| {name} | {static[name]} | {n / total:.0%} | {top} |")
    if launch:
        per = f"{total / args.pixels:.2f}" if args.pixels else ""
        print(f"| all | {len(sass)} | {total:.3g} | 100% | {per} | 100% | |")
    else:
        print(f"| all | {len(sass)} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
