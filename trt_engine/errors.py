"""Errors of the engine commands: one clear line and exit status 2 from ``wtconv-trt``.

EngineError is both the CLI's UserError and a ValueError: ``wtconv_export.cli.main`` catches either, and the
ValueError base keeps that true when the CLI runs as ``python -m wtconv_export.cli`` (where the module's own
UserError is a second class, ``__main__.UserError``)."""

from wtconv_export.cli import UserError


class EngineError(UserError, ValueError):
    """A problem with the user's input or environment, stated with its cause and fix."""
