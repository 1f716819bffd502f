"""The binary wheel measured: its size, each library's, the GPU code per architecture, the manylinux tag and the build.

    python -m benchmarks.wheel_size dist/wtconv_trt-*.whl --out docs/bench/wheel [--build-log build.log]

- the wheel's size against the public package index's default file limit (100 MB), and each library's size in the
  wheel (deflated) and installed;
- the GPU code of ``libwtconv_kernels.so`` per architecture, read from its ``.nv_fatbin`` section
  (``wtconv_libs.plugin_elf.fatbin_entries``): machine code and PTX as stored (compressed) and as the driver loads
  them; where ``cuobjdump`` is on PATH, its ``--list-elf --list-ptx`` listing, and the files ``cuobjdump -xelf all
  -xptx all`` extracts, summed per architecture, as an independent reading of the same sizes;
- ``auditwheel show`` of the wheel (the tag its name claims, docs/design.md §8);
- the build: nvcc's version and, given the build's log ending in ``/usr/bin/time -v`` output, its wall time, CPU time
  and peak memory.

Writes ``<out>.json`` and ``<out>.md`` (docs/bench/README.md lists the results).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path

from elftools.elf.elffile import ELFFile

from wtconv_libs.plugin_elf import fatbin_entries

PACKAGE_INDEX_LIMIT = 100 * 1000 * 1000  # the package index's default file limit, 100 MB
KERNELS = "wtconv_libs/lib/libwtconv_kernels.so"
MB = 1e6


def libraries(wheel: Path) -> list[dict]:
    """Each compiled library in the wheel: its path, size in the wheel (deflated) and installed, and the size of
    its GPU code section."""
    rows = []
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            if not info.filename.endswith(".so"):
                continue
            path = Path(archive.extract(info, tmp))
            with path.open("rb") as f:
                section = ELFFile(f).get_section_by_name(".nv_fatbin")
                fatbin = section.data_size if section is not None else 0
            rows.append(dict(path=info.filename, in_wheel=info.compress_size, installed=info.file_size, fatbin=fatbin))
    return rows


def architectures(kernels: Path) -> list[dict]:
    """Per (kind, architecture) of the kernels library's fat binary: translation units, stored and loaded bytes."""
    with kernels.open("rb") as f:
        data = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    sums: dict = defaultdict(lambda: dict(entries=0, stored=0, code=0, compressed=0))
    for entry in fatbin_entries(data):
        row = sums[(entry.kind, entry.arch)]
        row["entries"] += 1
        row["stored"] += entry.stored_bytes
        row["code"] += entry.code_bytes
        row["compressed"] += entry.compressed
    ordered = sorted(sums, key=lambda key: (key[0] != "cubin", key[1]))
    return [dict(kind=kind, arch=arch, **sums[(kind, arch)]) for kind, arch in ordered]


def cuobjdump_reading(kernels: Path) -> dict | None:
    """cuobjdump's listing and the sizes of the files it extracts, per architecture; None without cuobjdump."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-2:]
    listing = subprocess.run([tool, "--list-elf", "--list-ptx", str(kernels)], capture_output=True, text=True)
    extracted: dict = defaultdict(int)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool, "-xelf", "all", "-xptx", "all", str(kernels)], cwd=tmp, capture_output=True, check=True)
        for path in Path(tmp).iterdir():
            match = re.search(r"\.sm_(\d+)[a-z]?\.(cubin|ptx)$", path.name)
            if match:
                extracted[f"{match.group(2)} {match.group(1)}"] += path.stat().st_size
    return dict(version=" ".join(version), listing=listing.stdout.splitlines(), extracted=dict(extracted))


def auditwheel_show(wheel: Path) -> dict:
    show = [sys.executable, "-m", "auditwheel", "show"]
    text = subprocess.run([*show, str(wheel)], capture_output=True, text=True)
    report = subprocess.run([*show, "--json", str(wheel)], capture_output=True, text=True)
    parsed = json.loads(report.stdout) if report.returncode == 0 else {}
    return dict(
        text=" ".join(text.stdout.split()),
        returncode=text.returncode,
        overall_tag=parsed.get("overall_tag"),
        external_libs=parsed.get("external_libs"),
    )


def build_log(path: Path) -> dict:
    """What /usr/bin/time -v printed at the end of the build's log."""
    text = path.read_text(errors="replace")
    out = {}
    for key, label in (
        ("wall", r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)"),
        ("user_s", r"User time \(seconds\)"),
        ("system_s", r"System time \(seconds\)"),
        ("max_rss_kb", r"Maximum resident set size \(kbytes\)"),
        ("exit_status", r"Exit status"),
    ):
        match = re.search(rf"{label}: (.+)", text)
        if match:
            out[key] = match.group(1).strip().strip('"')
    if "wall" in out:
        seconds = 0.0
        for part in out["wall"].split(":"):
            seconds = seconds * 60 + float(part)
        out["wall_s"] = round(seconds, 1)
    return out


def nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "nvcc not on PATH"
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-2]


def measure(wheel: Path, log: Path | None, command: str | None, note: str | None = None) -> dict:
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        kernels = Path(archive.extract(KERNELS, tmp))
        arch_rows = architectures(kernels)
        reading = cuobjdump_reading(kernels)
    return dict(
        wheel=wheel.name,
        wheel_bytes=wheel.stat().st_size,
        limit_bytes=PACKAGE_INDEX_LIMIT,
        libraries=libraries(wheel),
        architectures=arch_rows,
        cuobjdump=reading,
        auditwheel=auditwheel_show(wheel),
        nvcc=nvcc_version(),
        cpus=os.cpu_count(),
        build=dict(command=command, **build_log(log)) if log else None,
        note=note,
    )


def markdown(result: dict) -> str:
    mb = result["wheel_bytes"] / MB
    lines = [
        "# The binary wheel: size, GPU code, manylinux tag, build time",
        "",
        f"`{result['wheel']}`: **{mb:.1f} MB** (limit {result['limit_bytes'] / MB:.0f} MB: "
        f"{'within' if result['wheel_bytes'] <= result['limit_bytes'] else 'OVER'}). Built with {result['nvcc']}.",
        "",
        "| library | in the wheel (MB, deflated) | installed (MB) | of it GPU code, `.nv_fatbin` (MB) |",
        "|---|---:|---:|---:|",
    ]
    for row in result["libraries"]:
        lines.append(
            f"| `{row['path'].removeprefix('wtconv_libs/lib/')}` | {row['in_wheel'] / MB:.2f} | "
            f"{row['installed'] / MB:.2f} | {row['fatbin'] / MB:.2f} |"
        )
    extracted = (result["cuobjdump"] or {}).get("extracted", {})
    lines += [
        "",
        "GPU code of `libwtconv_kernels.so` per architecture (one entry per translation unit, summed): as stored in "
        "the library (compressed) and as the driver loads it"
        + (", and the files `cuobjdump -xelf all -xptx all` extracts" if extracted else "")
        + ":",
        "",
        "| code | entries | stored (MB) | loaded (MB) | ratio |" + (" cuobjdump extracted (MB) |" if extracted else ""),
        "|---|---:|---:|---:|---:|" + ("---:|" if extracted else ""),
    ]
    for row in result["architectures"]:
        name = f"sm_{row['arch']}" if row["kind"] == "cubin" else f"compute_{row['arch']} (PTX)"
        line = (
            f"| {name} | {row['entries']} | {row['stored'] / MB:.2f} | {row['code'] / MB:.2f} | "
            f"{row['code'] / max(row['stored'], 1):.1f}x |"
        )
        if extracted:
            key = f"{row['kind']} {row['arch']}"
            line += f" {extracted.get(key, 0) / MB:.2f} |"
        lines.append(line)
    stored = sum(r["stored"] for r in result["architectures"])
    code = sum(r["code"] for r in result["architectures"])
    lines += ["", f"In all: {stored / MB:.2f} MB stored, {code / MB:.2f} MB loaded."]
    if result["cuobjdump"]:
        lines += ["", f"`cuobjdump --list-elf --list-ptx libwtconv_kernels.so` ({result['cuobjdump']['version']}):"]
        lines += ["", "```", *result["cuobjdump"]["listing"], "```"]
    audit = result["auditwheel"]
    lines += ["", "`auditwheel show`:", "", "```", audit["text"], "```"]
    build = result.get("build")
    if build:
        lines += [
            "",
            f"Build: `{build.get('command', '')}`, {build.get('wall_s', '?')} s wall on {result['cpus']} cores "
            f"(user {build.get('user_s', '?')} s, system {build.get('system_s', '?')} s, peak resident "
            f"{int(build.get('max_rss_kb', 0)) / 1e6:.2f} GB, exit status {build.get('exit_status', '?')}).",
        ]
    if result.get("note"):
        lines += ["", result["note"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    parser.add_argument("--build-log", type=Path, help="the build's log, ending in /usr/bin/time -v output")
    parser.add_argument("--build-command", help="the command that built the wheel, as the results should name it")
    parser.add_argument("--note", help="a line on how it was measured, added to the results")
    args = parser.parse_args(argv)
    result = measure(args.wheel, args.build_log, args.build_command, args.note)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0 if result["wheel_bytes"] <= PACKAGE_INDEX_LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
