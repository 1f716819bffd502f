"""wtconv_export: a PyTorch model into ONNX (docs/design.md §1, docs/onnx_export.md).

Which model to export (``onnx_models.py``), what a model expects of its input (``model_checks.py``), the export
itself and its metadata (``onnx_export.py``), how the graph is rendered for its runtime (``onnx_render.py``), and
the one reader of an exported file (``exported.py``: ``ExportedModel.read``). The model, its layers and the custom
op are ``wtconv_torch``; the ONNX <-> plugin names are ``wtconv_libs.contract``.
"""

from wtconv_core.version import __version__

__all__ = ["__version__"]
