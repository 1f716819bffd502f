"""The project's exception hierarchy: errors a user can fix, as opposed to bugs (docs/design.md §1, "Errors").

A message is one line in the API's own words: about a parameter, it starts with the parameter's name
(``instances: expected an integer from 1 to 64, got 0``) and names it in ``parameter``; advice naming another
parameter writes it as ``name=value`` (``pass force=True``). The command line maps both to its options."""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "EngineError",
    "ExportError",
    "InputError",
    "ModelError",
    "PluginError",
    "ServingError",
    "WtconvTrtError",
]


class WtconvTrtError(Exception):
    """Base of every user-facing error: the message is one line saying what was wrong and what to do;
    ``parameter``: the API parameter it is about (the message's first word), or None."""

    def __init__(self, message: str = "", *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class InputError(WtconvTrtError, ValueError):
    """A value given by the user (an option, a shape, an input array) is out of range or malformed."""


class ModelError(WtconvTrtError, ValueError):
    """A model, checkpoint or ONNX file does not fit what was asked of it (channels, sizes, keys)."""


class ExportError(WtconvTrtError):
    """The ONNX export could not be written (unsupported layer, unwritable path, existing file)."""


class ConfigurationError(WtconvTrtError):
    """The environment lacks something needed: a package, a compiled library, a GPU, a TensorRT install."""


class PluginError(WtconvTrtError):
    """A plugin library is missing, is not a plugin, or was built for another TensorRT ABI."""


class EngineError(WtconvTrtError):
    """An engine could not be built, loaded or run (parser or builder errors, foreign or corrupt plans)."""


class ServingError(WtconvTrtError):
    """The inference server could not be configured, started or reached."""
