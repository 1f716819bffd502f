"""Compatibility re-export: the engine errors live in ``wtconv_export.errors`` with the rest of the hierarchy."""

from wtconv_export.errors import EngineError, PluginError

__all__ = ["EngineError", "PluginError"]
