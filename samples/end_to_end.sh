#!/usr/bin/env bash
# End to end, the user workflow of docs/engines.md, on the shipped default model (a small WTConvNeXt trained on
# scikit-learn's digits):
#   ONNX with one WTConv2d node per layer (fp16) -> checked in ONNX Runtime -> TensorRT or TensorRT-RTX engine with
#   our plugin -> fp16 inference compared with PyTorch by Polygraphy (then replayed with the polygraphy command
#   line) -> benchmark -> Triton model repositories.
#
# Every step this machine can run, runs; a step it cannot run is named with what it needs ('wtconv-trt doctor' says
# the same), and the script goes on. Exit status 0 when every step that ran passed.
#   - export, ONNX Runtime check, Python-backend repository (wtconv-trt serve --write-only): any machine;
#   - engine build: TensorRT 10/11 on a GPU, or TensorRT-RTX (no GPU needed), and the plugin library for it:
#     wtconv-trt build-libs --tensorrt-headers DIR (TensorRT 11 headers for TensorRT-RTX; docs/engines.md);
#   - engine validation, the Polygraphy replay and the benchmark: a GPU the engine runs on (TensorRT 10/11: any
#     CUDA GPU; TensorRT-RTX: compute capability 7.5, 8.0, 8.6, 8.9 or 12.x);
#   - the TensorRT-backend repository (triton-repo): a TensorRT 10/11 engine (Triton cannot load TensorRT-RTX's).
# The plugin libraries are those 'wtconv-trt doctor' finds (WTCONV_TRT_PLUGIN / WTCONV_TRT_PLUGIN_STATIC override).
# Usage: samples/end_to_end.sh [OUT_DIR]            (default build/e2e)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${1:-build/e2e}
SHAPES=input:1x1x32x32/16x1x32x32/64x1x32x32
ONNX="$OUT/digits_fp16.onnx"
ENGINE="$OUT/digits_fp16.engine"

# Why this machine cannot do a step, from the Python API's doctor (empty: it can).
cannot() {
    python - "$@" <<'EOF'
import sys

import wtconv_trt

what, path = sys.argv[1], sys.argv[2]
machine = wtconv_trt.doctor()
print((machine.cannot_build(path) if what == "build" else machine.cannot_run(path)) or "")
EOF
}
skipped() { echo "   skipped: $1" >&2; }

mkdir -p "$OUT"
echo "== 1. export the trained default model to ONNX (fp16: what a strongly typed fp16 engine is built from)"
wtconv-trt export -o "$ONNX" --precision fp16 --input-shape 1,1,32,32 --force

echo "== 2. the export against PyTorch in ONNX Runtime (CPU)"
wtconv-trt validate "$ONNX"

echo "== 3. build the fp16 engine (profile batch 1/16/64), timing cache kept for rebuilds"
why=$(cannot build "$ONNX")
if [ -n "$why" ]; then
    skipped "engine build, and every engine step after it: $why"
    ENGINE=""
else
    wtconv-trt build "$ONNX" --shapes "$SHAPES" --timing-cache "$OUT/timing.cache" --engine "$ENGINE" --force
fi

if [ -n "$ENGINE" ]; then
    backend=$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["tensorrt"]["backend"])' "$ENGINE.json")
    why=$(cannot run "$ENGINE")
    if [ -n "$why" ]; then
        skipped "4-6, engine validation, Polygraphy replay and benchmark: $why"
    else
        echo "== 4. fp16 inference on held-out digits, compared with PyTorch by Polygraphy"
        wtconv-trt validate --engine "$ENGINE" --save-inputs "$OUT/inputs.json" \
            --save-outputs "$OUT/pytorch_outputs.json" --force | tee "$OUT/validate.txt"

        echo "== 5. the same comparison replayed with Polygraphy's command line (the line validate printed)"
        replay=$(grep -A1 "^replay with Polygraphy" "$OUT/validate.txt" | tail -n 1)
        if [ "$backend" = "tensorrt-rtx" ]; then
            # TensorRT-RTX in another process needs its loader environment (docs/engines.md).
            env POLYGRAPHY_USE_TENSORRT_RTX=1 $(wtconv-trt doctor --rtx-env) $replay
        else
            $replay
        fi

        echo "== 6. latency and throughput, with and without CUDA graphs"
        wtconv-trt bench --engine "$ENGINE" --json "$OUT/bench.json" --force
    fi

    echo "== 7. Triton model repository for Triton's TensorRT backend"
    if [ "$backend" = "tensorrt-rtx" ]; then
        skipped "triton-repo: Triton's TensorRT backend cannot load TensorRT-RTX engines (it needs a TensorRT 10/11 engine)"
    else
        wtconv-trt triton-repo --engine "$ENGINE" --out "$OUT/triton" --name digits --instances 2 --force
        echo "   serve it with the Triton release whose TensorRT built the engine: $OUT/triton/serve.sh"
    fi
fi

echo "== 8. Triton model repository for Triton's Python backend (serves the engine where it runs, else ONNX Runtime)"
wtconv-trt serve "$ONNX" ${ENGINE:+--engine "$ENGINE"} --repo "$OUT/served" --write-only --force > /dev/null
echo "   written: $OUT/served/digits; serve it and query it:"
echo "   wtconv-trt serve $ONNX ${ENGINE:+--engine $ENGINE }--repo $OUT/served --force"
echo "   python samples/triton_client.py --model digits --onnx $ONNX"
echo
echo "done."
