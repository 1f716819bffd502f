#!/usr/bin/env bash
# End to end, the user workflow of docs/engines.md:
#   trained WTConvNeXt (the shipped default digits model) -> ONNX with one WTConv2d node per layer
#   -> TensorRT fp16 engine with our plugin -> fp16 inference compared with PyTorch by Polygraphy (Python API,
#   then replayed with the polygraphy command line) -> benchmark -> Triton model repository.
#
# Needs TensorRT 10.x or 11.x (python -c "import tensorrt"), an NVIDIA GPU, PyTorch with CUDA, and the plugin:
#   cmake -S plugin -B build/plugin -DTensorRT_ROOT=/path/to/TensorRT -DCMAKE_CUDA_ARCHITECTURES=native
#   cmake --build build/plugin -j
# Usage: samples/end_to_end.sh [OUT_DIR]            (default build/e2e)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${1:-build/e2e}
PLUGIN=${WTCONV_TRT_PLUGIN:-build/plugin/trt/libwtconv_trt_plugin_dynamic.so}   # getCreators: loadLibrary
PLUGIN_STATIC=${WTCONV_TRT_PLUGIN_STATIC:-build/plugin/trt/libwtconv_trt_plugin.so}  # static registration
SHAPES=input:1x1x32x32/16x1x32x32/64x1x32x32

if ! python -c "import tensorrt" 2>/dev/null; then
    echo "TensorRT is not installed: install TensorRT 10.x or 11.x (pip install tensorrt, or NVIDIA's TensorRT" >&2
    echo "container) on a machine with an NVIDIA GPU; this machine cannot build or run engines." >&2
    exit 2
fi
for lib in "$PLUGIN" "$PLUGIN_STATIC"; do
    if [ ! -f "$lib" ]; then
        echo "plugin library $lib is missing: build it with cmake -S plugin -B build/plugin -DTensorRT_ROOT=... &&" >&2
        echo "cmake --build build/plugin -j (or set WTCONV_TRT_PLUGIN / WTCONV_TRT_PLUGIN_STATIC)" >&2
        exit 2
    fi
done
mkdir -p "$OUT"

echo "== 1. export the trained default model to ONNX (fp16: what TensorRT 11 needs for an fp16 engine)"
wtconv-trt export -o "$OUT/digits_fp16.onnx" --precision fp16 --input-shape 1,1,32,32 --force

echo "== 2. build the fp16 engine (profile batch 1/16/64), timing cache kept for rebuilds"
wtconv-trt build "$OUT/digits_fp16.onnx" --precision fp16 --plugin "$PLUGIN" --shapes "$SHAPES" \
    --timing-cache "$OUT/timing.cache" --engine "$OUT/digits.fp16.engine" --force

echo "== 3. fp16 inference on held-out digits, compared with PyTorch by Polygraphy"
wtconv-trt validate --engine "$OUT/digits.fp16.engine" --plugin "$PLUGIN" \
    --save-inputs "$OUT/inputs.json" --save-outputs "$OUT/pytorch_outputs.json" --force

echo "== 4. the same comparison replayed with Polygraphy's command line"
polygraphy run "$OUT/digits.fp16.engine" --model-type engine --trt --plugins "$PLUGIN_STATIC" \
    --load-inputs "$OUT/inputs.json" --load-outputs "$OUT/pytorch_outputs.json" --atol 0.05 --rtol 0.05

echo "== 5. latency and throughput, with and without CUDA graphs"
wtconv-trt bench --engine "$OUT/digits.fp16.engine" --plugin "$PLUGIN" --json "$OUT/bench.json" --force

echo "== 6. Triton model repository"
wtconv-trt triton-repo --engine "$OUT/digits.fp16.engine" --out "$OUT/triton" --name digits \
    --plugin-static "$PLUGIN_STATIC" --instances 2 --force

echo
echo "done. Serve it:   $OUT/triton/serve.sh"
echo "then classify:    python samples/triton_client.py --model digits --url localhost:8001"
