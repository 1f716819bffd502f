"""Memory benchmark of the fused WTConv layer and the WTConvNeXt models on a CUDA GPU (benchmarks/memory.py
says what is measured). Writes bench_memory.json and bench_memory.md into --out.

    python -m benchmarks.bench_memory --out docs/bench --official third_party/WTConv [--quick]
"""

import argparse
import logging
import sys
from pathlib import Path

from benchmarks.memory import run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_memory.json and .md")
    parser.add_argument("--official", type=Path, help="a checkout of BGU-CS-VIL/WTConv (published code, fast_wtconv)")
    parser.add_argument("--quick", action="store_true", help="WTConvNeXt-T only, fp16 layers, a smaller sweep")
    parser.add_argument("--parts", nargs="+", choices=["models", "layers"], default=["models", "layers"])
    parser.add_argument("--no-paper", action="store_true", help="without the paper's kernels (they compile first)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    words = ["python -m benchmarks.bench_memory --out OUT"] + (["--official OFFICIAL"] if args.official else [])
    words += (["--quick"] if args.quick else []) + ["--parts", *args.parts] + (["--no-paper"] if args.no_paper else [])
    run(args.out, args.official, quick=args.quick, command=" ".join(words), parts=args.parts, paper=not args.no_paper)
    return 0


if __name__ == "__main__":
    sys.exit(main())
