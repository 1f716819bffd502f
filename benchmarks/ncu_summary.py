"""One line per profiled launch of an ncu details export: time, instructions, issue rate, occupancy and limits.

    ncu -i prof.ncu-rep --page details --csv > details.csv
    python -m benchmarks.ncu_summary details.csv

tools/device_kernels.sh's profile:<name> stage prints it after exporting. Fields missing from the export (a section
not collected) print empty; the busiest pipe comes from ncu's HighPipeUtilization rule, which names it only when some
pipe is well used.
"""

import argparse
import csv
import re
import sys
from pathlib import Path

FIELDS = (
    "Duration",
    "Executed Instructions",
    "Executed Ipc Active",
    "Issue Slots Busy",
    "Theoretical Occupancy",
    "Achieved Occupancy",
    "Warp Cycles Per Issued Instruction",
    "Registers Per Thread",
    "Dynamic Shared Memory Per Block",
    "Block Size",
    "Grid Size",
    "L1/TEX Cache Throughput",
    "DRAM Throughput",
)


def launches(path: Path) -> list[dict]:
    """Per launch (ncu's ID order): the kernel name, the metrics by name (value and unit) and the busiest pipe."""
    out: dict[str, dict] = {}
    for row in csv.DictReader(path.open(newline="", errors="replace")):
        launch = out.setdefault(row["ID"], dict(kernel=row["Kernel Name"], metrics={}, pipe=""))
        if row.get("Metric Name"):
            launch["metrics"][row["Metric Name"]] = f"{row['Metric Value']} {row.get('Metric Unit') or ''}".strip()
        if row.get("Rule Name") == "HighPipeUtilization":
            m = re.search(r"(\w+) is the highest-utilized pipeline \(([\d.]+)%\)", row.get("Rule Description", ""))
            launch["pipe"] = f"{m.group(1)} {m.group(2)} %" if m else "none well used"
    return [out[key] for key in sorted(out, key=int)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("details", type=Path, help="ncu --page details --csv export")
    args = parser.parse_args(argv)
    for i, launch in enumerate(launches(args.details)):
        fields = "; ".join(f"{name}={launch['metrics'].get(name, '')}" for name in FIELDS)
        print(f"{i} {launch['kernel'][:90]} | {fields}; busiest pipe={launch['pipe']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
