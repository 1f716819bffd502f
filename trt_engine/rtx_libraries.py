"""TensorRT-RTX's libraries loaded from a per-user folder of links that adds the unversioned name its ONNX parser
dlopens, so the parser does not abort the process (docs/engines.md, "TensorRT-RTX's missing libtensorrt_rtx.so")."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

from wtconv_core.errors import ConfigurationError
from wtconv_libs import lookup

log = logging.getLogger(__name__)

LIBS_MODULE = "tensorrt_rtx_libs"
CORE = "libtensorrt_rtx.so.1"
PARSER = "libtensorrt_onnxparser_rtx.so.1"
UNVERSIONED = "libtensorrt_rtx.so"

_prepared: Path | None = None
_handles: list = []


def wheel_lib_dir() -> Path | None:
    """The folder of the tensorrt-rtx-*-libs wheel (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(LIBS_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).resolve().parent
    return folder if (folder / CORE).is_file() else None


def link_dir(wheel_dir: Path) -> Path:
    """The per-user folder of links for this wheel (one per installation, as links point at its files)."""
    tag = hashlib.sha256(str(wheel_dir).encode()).hexdigest()[:12]
    return lookup.user_cache_dir() / "tensorrt-rtx-links" / tag


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target)
    os.replace(tmp, link)  # atomic: a concurrent process sees the old link or the new one


def make_links(wheel_dir: Path) -> Path:
    folder = link_dir(wheel_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _link(wheel_dir / CORE, folder / CORE)
        _link(wheel_dir / CORE, folder / UNVERSIONED)
        if (wheel_dir / PARSER).is_file():
            _link(wheel_dir / PARSER, folder / PARSER)
    except OSError as error:
        raise ConfigurationError(
            f"cannot create TensorRT-RTX's loader links in {folder} ({error}); set "
            f"{lookup.ENV_CACHE} to a writable folder"
        ) from None
    return folder


def _already_loaded() -> bool:
    if any(name in sys.modules for name in (LIBS_MODULE, "tensorrt_rtx_bindings", "tensorrt_rtx")):
        return True
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any(CORE in line for line in maps)
    except OSError:
        return False


def _found_elsewhere(wheel_dir: Path) -> bool:
    """Would dlopen("libtensorrt_rtx.so") from the wheel's parser succeed without our folder?"""
    places = [wheel_dir] + [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    return any((p / UNVERSIONED).exists() for p in places)


def prepare() -> Path | None:
    """Make TensorRT-RTX's parser able to load plugins in this process; call before importing its bindings.
    Returns the links folder (None when the wheel already has the unversioned name). Idempotent."""
    global _prepared
    if _prepared is not None:
        return _prepared
    wheel_dir = wheel_lib_dir()
    if wheel_dir is None or (wheel_dir / UNVERSIONED).exists():
        return None
    folder = make_links(wheel_dir)
    if _already_loaded():
        if _found_elsewhere(wheel_dir):
            return None
        raise ConfigurationError(
            f"TensorRT-RTX was imported before wtconv-trt could prepare its lookup, and its ONNX parser would "
            f"abort the process on the first plugin node (it loads {UNVERSIONED}, which the wheel lacks). Import "
            f"trt_engine (or call trt_engine.tensorrt_api.import_tensorrt('tensorrt-rtx')) before tensorrt_rtx, or "
            f"start the process with LD_LIBRARY_PATH={folder}"
        )
    for name in (CORE, PARSER):
        if (folder / name).exists():
            # RTLD_GLOBAL: a static-registration plugin resolves getPluginRegistry / getLogger from it.
            _handles.append(ctypes.CDLL(str(folder / name), mode=ctypes.RTLD_GLOBAL))
    log.debug("TensorRT-RTX libraries loaded from %s (links to %s)", folder, wheel_dir)
    _prepared = folder
    return folder


def shell_environment() -> str | None:
    """The environment line that gives another process (e.g. ``polygraphy``) the same effect, or None."""
    wheel_dir = wheel_lib_dir()
    if wheel_dir is None or (wheel_dir / UNVERSIONED).exists():
        return None
    folder = make_links(wheel_dir)
    return f"LD_LIBRARY_PATH={folder}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} LD_PRELOAD={folder / CORE}"
