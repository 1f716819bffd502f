"""Where the compiled libraries built from plugin/ are found: one lookup order (the environment variable, the
package's lib/, the per-user cache, the build tree), per TensorRT ABI for the plugins (docs/engines.md, "Compiled
libraries: one lookup order")."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KINDS = ("kernels", "plugin", "plugin-static", "ort")
FILE_NAMES = {
    "kernels": "libwtconv_kernels_capi.so",
    "plugin": "libwtconv_trt_plugin_dynamic.so",
    "plugin-static": "libwtconv_trt_plugin.so",
    "ort": "libwtconv_ort.so",
}
ENV_VARS = {
    "kernels": "WTCONV_KERNELS_LIB",
    "plugin": "WTCONV_TRT_PLUGIN",
    "plugin-static": "WTCONV_TRT_PLUGIN_STATIC",
    "ort": "WTCONV_ORT_LIB",
}
# Kinds built once whatever the TensorRT ABI (installed in lib/ itself), and where CMake puts each kind.
ABI_FREE = ("kernels", "ort")
_BUILD_SUBDIR = {"kernels": ".", "plugin": "trt", "plugin-static": "trt", "ort": "onnxruntime"}
ENV_CACHE = "WTCONV_TRT_CACHE"
ABIS = ("trt10", "trt11")

_PACKAGE_DIR = Path(__file__).resolve().parent
_SOURCE_ROOT = _PACKAGE_DIR.parent  # the checkout, for an editable install; absent from an installed wheel


@dataclass(frozen=True)
class Candidate:
    """One place looked at: ``where`` says which step of the order it is."""

    where: str
    path: Path

    @property
    def exists(self) -> bool:
        return self.path.is_file()


def package_lib_dir() -> Path:
    return _PACKAGE_DIR / "lib"


def user_cache_dir() -> Path:
    """The per-user cache of this package (libraries built by ``wtconv-trt build-libs``, loader links)."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "wtconv-trt"


def user_lib_dir() -> Path:
    return user_cache_dir() / "lib"


def build_tree_dir() -> Path:
    return _SOURCE_ROOT / "build" / "plugin"


def _check_kind(kind: str, abi: str | None) -> None:
    if kind not in KINDS:
        raise ValueError(f"library kind {kind!r}: expected one of {', '.join(KINDS)}")
    if abi is not None and abi not in ABIS:
        raise ValueError(f"plugin ABI {abi!r}: expected one of {', '.join(ABIS)}")


def candidates(kind: str, abi: str | None = None) -> list[Candidate]:
    """Every place looked at for library ``kind``, in lookup order (existing or not)."""
    _check_kind(kind, abi)
    name = FILE_NAMES[kind]
    out = []
    env = os.environ.get(ENV_VARS[kind])
    if env:
        out.append(Candidate(f"environment {ENV_VARS[kind]}", Path(env).expanduser()))
    for where, base in (("package", package_lib_dir()), ("user cache", user_lib_dir())):
        if kind in ABI_FREE:
            out.append(Candidate(where, base / name))
        else:
            for one in [abi] if abi else list(ABIS):
                out.append(Candidate(f"{where} ({one})", base / one / name))
    out.append(Candidate("build tree", build_tree_dir() / _BUILD_SUBDIR[kind] / name))
    return out


def find(kind: str, abi: str | None = None, accept: Callable[[Path], bool] | None = None) -> Path | None:
    """The first existing library of ``kind`` in lookup order, or None. ``accept`` may refuse a file (the plugin
    lookup uses it to skip a build-tree library made for another ABI). A file named by the environment variable
    is returned as given, even when ``accept`` would refuse it, so the caller reports what is wrong with it."""
    for candidate in candidates(kind, abi):
        if not candidate.exists:
            continue
        if candidate.where.startswith("environment") or accept is None or accept(candidate.path):
            return candidate.path
    return None


def ort_library() -> Path | None:
    """The ONNX Runtime custom-op library (``libwtconv_ort.so``) in lookup order, or None when it is not built.

    Any ONNX Runtime session can use it::

        options = onnxruntime.SessionOptions()
        options.register_custom_ops_library(str(wtconv_libs.lookup.ort_library()))
    """
    return find("ort")


_ORT_INFO_MARK = b"wtconv_ort_info: "


def ort_library_info(path) -> dict[str, str]:
    """The record a ``libwtconv_ort.so`` carries (plugin/onnxruntime/wtconvOrtEntry.cpp), read from the file without
    loading it: {"package_version", "ort_api" (the C API version it asks for), "cuda" ("yes" when it has the CUDA
    op)}; empty when the file has no record (not built from plugin/onnxruntime)."""
    data = Path(path).read_bytes()
    start = data.find(_ORT_INFO_MARK)
    if start < 0:
        return {}
    end = data.find(b"\n", start)
    words = data[start + len(_ORT_INFO_MARK) : end if end > 0 else None].decode("ascii", "replace").split()
    return dict(word.split("=", 1) for word in words if "=" in word)


def _record_matches(abi: str | None):
    if abi is None:
        return None

    def accept(path: Path) -> bool:
        from wtconv_core.errors import PluginError
        from wtconv_libs.plugin_elf import inspect_library

        try:
            return inspect_library(path).abi in (abi, None)
        except PluginError:
            return False

    return accept


def default_plugin(static: bool = False, abi: str | None = None) -> Path | None:
    """The plugin library found in the package's lookup order (environment variable, package, per-user cache,
    build tree), for ABI ``abi`` when given; None when none is found."""
    kind = "plugin-static" if static else "plugin"
    return find(kind, abi, accept=_record_matches(abi))


def build_subdir(kind: str) -> str:
    """Where CMake puts library ``kind`` below its build folder."""
    _check_kind(kind, None)
    return _BUILD_SUBDIR[kind]


def install_dir(kind: str, abi: str | None = None, root: Path | None = None) -> Path:
    """Where ``wtconv-trt build-libs`` puts library ``kind`` under ``root`` (default: the per-user lib folder)."""
    _check_kind(kind, abi)
    root = user_lib_dir() if root is None else Path(root)
    if kind in ABI_FREE:
        return root
    if abi is None:
        raise ValueError("a plugin library is installed per TensorRT ABI: give abi='trt10' or 'trt11'")
    return root / abi


__all__ = [
    "ABIS",
    "ABI_FREE",
    "Candidate",
    "ENV_VARS",
    "FILE_NAMES",
    "KINDS",
    "build_subdir",
    "build_tree_dir",
    "candidates",
    "default_plugin",
    "find",
    "install_dir",
    "ort_library",
    "ort_library_info",
    "package_lib_dir",
    "user_cache_dir",
    "user_lib_dir",
]
