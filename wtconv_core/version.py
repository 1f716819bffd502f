"""The version of wtconv-trt: one source, the ``VERSION`` file at the top of the repository.

setuptools reads it into the package metadata (pyproject.toml, ``[tool.setuptools.dynamic]``) and CMake reads it
for the compiled libraries; an installed package answers from its metadata, a source checkout from the file.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

__all__ = ["__version__"]


def _read_version() -> str:
    checkout = Path(__file__).resolve().parents[1] / "VERSION"
    if checkout.is_file():  # a source checkout (editable install or not installed): the file is the truth
        return checkout.read_text(encoding="utf-8").strip()
    try:
        return metadata.version("wtconv-trt")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _read_version()
