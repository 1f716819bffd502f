"""Whether a plugin library fits the TensorRT in use, from what its ELF file says (wtconv_libs.plugin_elf): its ABI
record and the libnvinfer it links against the TensorRT's version, and for a server that preloads it (Triton's
TensorRT backend) that it is the static-registration library (docs/engines.md, "Compiled libraries: one lookup
order")."""

from __future__ import annotations

from wtconv_core.errors import PluginError
from wtconv_libs import lookup
from wtconv_libs.plugin_elf import LibraryInfo, inspect_library

__all__ = ["check_library_for_tensorrt", "check_static_library", "expected_abi", "runtime_name"]


def expected_abi(backend: str, tensorrt_major: int) -> str:
    """The plugin ABI a TensorRT (``backend`` 'tensorrt', major 10 or 11) or TensorRT-RTX needs."""
    if backend == "tensorrt-rtx":
        return "trt11"  # TensorRT-RTX 1.x carries TensorRT 11's versioned ILogger / ILoggerFinder (plugin/README.md)
    return f"trt{tensorrt_major}"


def runtime_name(backend: str, version: str) -> str:
    return f"TensorRT-RTX {version}" if backend == "tensorrt-rtx" else f"TensorRT {version}"


def check_library_for_tensorrt(
    info: LibraryInfo, trt_major: int, backend: str = "tensorrt", version: str | None = None
) -> None:
    """PluginError when the library was built for another TensorRT ABI than the one in use, naming both."""
    runtime = runtime_name(backend, version or str(trt_major))
    want = expected_abi(backend, trt_major)
    if info.abi is not None and info.abi != want:
        raise PluginError(
            f"plugin library {info.path} was built for {info.describe_abi()}, but {runtime} needs a "
            f"plugin built for ABI {want}: rebuild it against TensorRT {want[3:]}.x headers "
            f"(wtconv-trt build-libs --tensorrt-headers <TensorRT {want[3:]} include dir>, or cmake "
            f"-S plugin -B build/plugin -DTensorRT_ROOT=<TensorRT {want[3:]}>)"
        )
    major = info.nvinfer_major
    if backend == "tensorrt" and major is not None and major != trt_major:
        raise PluginError(
            f"plugin library {info.path} links libnvinfer.so.{major} (TensorRT {major}) but "
            f"{runtime} is in use: rebuild the plugin against TensorRT {trt_major}'s headers and "
            f"libraries (cmake -S plugin -B build/plugin -DTensorRT_ROOT=<TensorRT {trt_major} install>)"
        )
    if backend == "tensorrt-rtx" and major is not None:
        raise PluginError(
            f"plugin library {info.path} links libnvinfer.so.{major} (TensorRT {major}), which "
            f"{runtime} does not provide: use the dynamic plugin library "
            f"({lookup.FILE_NAMES['plugin']}) built against TensorRT 11 headers"
        )


def check_static_library(plugin_static, tensorrt_version: str) -> None:
    """The library Triton will dlopen (LD_PRELOAD, or the TensorRT backend's ``plugins=``, RTLD_LOCAL) must
    register the creator from its static initialiser, which calls ``getPluginRegistry`` from libnvinfer: so it must
    be the static-registration library, and reach the engine's TensorRT major's libnvinfer by itself (nothing else
    provides the symbol at that point): link it, or find libnvinfer.so.<major> when loaded (its record's
    ``libnvinfer=load``: the binary wheel's, built from the headers alone). Its ABI record, when present, must be the
    engine's ABI too."""
    info = inspect_library(plugin_static)
    engine_trt = f"TensorRT {tensorrt_version}"
    if info.kind == "dynamic":
        raise PluginError(
            f"{plugin_static} is the dynamic (getCreators) plugin library: loaded by Triton it would "
            f"register nothing and the engine would not deserialize; pass the static-registration one, "
            f"libwtconv_trt_plugin.so"
        )
    major = int(tensorrt_version.split(".")[0])
    if info.nvinfer_major is None and info.finds_nvinfer_at_load:
        check_library_for_tensorrt(info, major, "tensorrt", tensorrt_version)
        return
    if info.nvinfer_major is None:
        raise PluginError(
            f"{plugin_static} does not link libnvinfer: under Triton (LD_PRELOAD or plugins=) its "
            f"static registration cannot find getPluginRegistry and the server fails. Build "
            f"libwtconv_trt_plugin.so against a TensorRT {major} install (cmake -S plugin -B "
            f"build/plugin -DTensorRT_ROOT=<TensorRT {major} with lib/libnvinfer.so>)"
        )
    if info.nvinfer_major != major:
        raise PluginError(
            f"{plugin_static} links TensorRT {info.nvinfer_major} (libnvinfer.so.{info.nvinfer_major}) "
            f"but the engine was built with {engine_trt}; use the plugin built for TensorRT {major}"
        )
    check_library_for_tensorrt(info, major, "tensorrt", tensorrt_version)
