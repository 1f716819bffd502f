"""Comparing a runtime with PyTorch: the comparison core (one PyTorch runner for Polygraphy, one comparison), the
ONNX Runtime validation and the engine validation (docs/onnx_export.md, "Tolerances"; docs/engines.md,
"Validation")."""
