"""Per-kernel profile of WTConvNeXt-T on our CUDA kernels against timm's ConvNeXt-T, on a CUDA GPU
(benchmarks/model_profile.py says what is measured). Writes profile_models.json and profile_models.md into --out.

    python -m benchmarks.profile_models --out docs/bench [--parts compile profile throughput latency] [--batch 256]
        [--quick]

Needs timm, and our kernel library built (build/plugin, or WTCONV_KERNELS_LIB naming it).
"""

import argparse
import logging
import sys
from pathlib import Path

from benchmarks.model_profile import PARTS, Options, run
from wtconv_core.errors import WtconvTrtError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for profile_models.json and .md")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), help=f"any of: {' '.join(PARTS)} (default: all)")
    parser.add_argument("--batch", type=int, default=256, help="batch of the profile and fp16 throughput (256)")
    parser.add_argument("--quick", action="store_true", help="small batches, few repeats: a smoke run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    words = ["python -m benchmarks.profile_models --out OUT", "--parts", *args.parts, "--batch", str(args.batch)]
    command = " ".join(words + (["--quick"] if args.quick else []))
    options = Options(out=args.out, parts=tuple(args.parts), batch=args.batch, quick=args.quick, command=command)
    try:
        run(options)
    except WtconvTrtError as error:
        print(f"profile_models: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
