"""What is alive at the memory peak of a WTConvNeXt forward call on our kernels (needs a CUDA GPU).

Records PyTorch's allocator history over one forward call (torch.cuda.memory._record_memory_history, Python stacks),
replays its trace to the moment the allocated total is highest, and prints the allocations alive then, largest
first, each with the Python line that made it, in MiB and in stage-1 activations (A = B x C1 x 56 x 56 elements).
Only what the call allocates counts (the weights and the input were allocated before).

    python -m benchmarks.memory_snapshot --model wtconvnext_tiny --batch 128 [--layout channels_last] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def peak_allocations(trace: list[dict]) -> tuple[int, list[dict]]:
    """(peak bytes, the allocations alive at the peak) of an allocator trace (torch.cuda.memory._snapshot()'s
    device_traces[i]): 'alloc' adds a block, 'free_completed' (or 'free_requested' when the trace has no completions)
    removes it."""
    frees = {"free_completed"} if any(e["action"] == "free_completed" for e in trace) else {"free_requested"}
    live, total, peak, at_peak = {}, 0, 0, []
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += event["size"]
            if total > peak:
                peak, at_peak = total, list(live.values())
        elif event["action"] in frees and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
    return peak, at_peak


def made_by(event: dict) -> str:
    """The innermost Python line outside PyTorch that made an allocation."""
    for frame in event.get("frames", []):
        name = frame.get("filename", "")
        if name.endswith(".py") and "/torch/" not in name:
            return f"{Path(name).name}:{frame.get('line')} {frame.get('name')}"
    return "?"


def main() -> int:
    import torch

    from wtconv_torch import cuda_kernels
    from wtconv_torch.fused_module import fuse_wtconv_layers
    from wtconv_torch.wtconvnext import WTCONVNEXT_CONFIGS, create_wtconvnext

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="wtconvnext_tiny", choices=list(WTCONVNEXT_CONFIGS))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--layout", default="nchw", choices=["nchw", "channels_last"])
    parser.add_argument("--reference", action="store_true", help="the reference WTConv2d layers instead of ours")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    cuda_kernels.register()
    fmt = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format
    model = create_wtconvnext(args.model).eval().cuda().half()
    if not args.reference:
        model = fuse_wtconv_layers(model)
    model = model.to(memory_format=fmt)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=fmt)
    activation = args.batch * WTCONVNEXT_CONFIGS[args.model]["dims"][0] * 56 * 56 * 2
    with torch.inference_mode():
        model(x)  # plans, cuBLAS / cuDNN workspaces
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        y = model(x)
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        del y
    peak, alive = peak_allocations(snapshot["device_traces"][torch.cuda.current_device()])
    alive.sort(key=lambda e: -e["size"])
    which = "reference layers" if args.reference else "our kernels"
    print(
        f"{args.model} on {which}, fp16, {args.layout}, B={args.batch}: peak {peak / 2**20:.1f} MiB = "
        f"{peak / activation:.2f} A (A = one stage-1 activation, {activation / 2**20:.1f} MiB); alive at the peak:"
    )
    rows = [dict(mib=e["size"] / 2**20, activations=e["size"] / activation, made_by=made_by(e)) for e in alive]
    for row in rows[: args.top]:
        print(f"  {row['mib']:8.1f} MiB  {row['activations']:5.2f} A  {row['made_by']}")
    if args.json:
        args.json.write_text(
            json.dumps(dict(vars(args), json=None, peak=peak, activation=activation, alive=rows), indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
