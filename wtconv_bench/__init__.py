"""The benchmarks the package ships: the layer benchmark behind ``wtconv-trt bench-layer`` (``layers.py``,
docs/bench/README.md). Research benchmarks and profiles live outside the package, in the repository's benchmarks/."""
