"""The project's exception hierarchy: errors a user can fix, as opposed to bugs.

Libraries (``wtconv_export``, ``trt_engine``) raise these with a message that names what was expected and how
to fix it; only the command line (``wtconv_trt.cli``) catches them, prints the message as one line and exits
with status 2. Anything else (a bug) keeps its traceback. This module imports nothing from the project, so
every layer can use it.
"""

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
    """Base of every user-facing error: the message is one line saying what was wrong and what to do."""


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
