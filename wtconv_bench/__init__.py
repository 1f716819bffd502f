"""Benchmarks and profiles: the layer benchmark, the memory benchmark, the model profile (docs/bench/README.md)."""
