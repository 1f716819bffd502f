"""Inspect a plugin shared library without loading it (CPU only, no TensorRT), with pyelftools.

Two kinds of plugin library exist (docs/engines.md, "Plugin libraries"):
- dynamic: exports ``extern "C" getCreators`` and ``setLoggerFinder``; loaded with
  ``IPluginRegistry.load_library`` (C++ ``IPluginRegistry::loadLibrary``) or ``trtexec --dynamicPlugins``;
  need not link libnvinfer.
- static registration: registers its creators from a static initialiser (``REGISTER_TENSORRT_PLUGIN``) when
  the library is dlopen'ed: ``polygraphy --plugins`` (a plain ``ctypes.CDLL``), Triton's LD_PRELOAD or
  ``--backend-config=tensorrt,plugins=...``; links libnvinfer.so.<major> (or resolves it from the process).

Each library built from plugin/trt carries an ABI record, one line of ``key=value`` words in its ELF section
``.wtconv_trt_abi`` (plugin/README.md, "ABI record"): which TensorRT ABI its headers were (``abi=trt10`` /
``abi=trt11``; TensorRT-RTX 1.7 uses the TensorRT 11 ABI), which header version, which kind. A library built
for another ABI than the TensorRT in use calls the wrong vtable slots (TensorRT 11 made ``ILoggerFinder`` a
versioned interface), so it is refused here, by name, before anything loads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from wtconv_export import libraries
from wtconv_export.errors import PluginError

ABI_SECTION = ".wtconv_trt_abi"
ABI_RECORD_TAG = "wtconv_trt_plugin"

# The section names the library kind "dynamic" or "static"; LibraryInfo.kind says "static-registration".
_RECORD_KINDS = {"dynamic": "dynamic", "static": "static-registration"}


@dataclass
class LibraryInfo:
    path: str
    needed: list = field(default_factory=list)  # DT_NEEDED entries, e.g. ["libnvinfer.so.10", "libcudart.so.13"]
    defined_symbols: set = field(default_factory=set)  # dynamic symbols the library defines (exports)
    abi_record: dict | None = None  # the .wtconv_trt_abi record's key=value words, if present

    @property
    def exports_get_creators(self) -> bool:
        return "getCreators" in self.defined_symbols

    @property
    def nvinfer_major(self) -> int | None:
        """TensorRT major version the library links against (libnvinfer.so.N), or None if it does not link it."""
        for name in self.needed:
            m = re.fullmatch(r"libnvinfer\.so\.(\d+)(\..*)?", name)
            if m:
                return int(m.group(1))
        return None

    @property
    def links_tensorrt_rtx(self) -> bool:
        return any(re.fullmatch(r"libtensorrt_rtx\.so(\.\d+)*", name) for name in self.needed)

    @property
    def abi(self) -> str | None:
        """'trt10' / 'trt11' from the ABI record, or None for a library without one (not built from plugin/trt)."""
        return (self.abi_record or {}).get("abi")

    @property
    def kind(self) -> str:
        recorded = _RECORD_KINDS.get((self.abi_record or {}).get("library", ""))
        if recorded:
            return recorded
        return "dynamic" if self.exports_get_creators else "static-registration"

    def describe_abi(self) -> str:
        record = self.abi_record
        if not record:
            return "no ABI record (not built from plugin/trt, or built before the record existed)"
        return f"ABI {record.get('abi', '?')} (TensorRT {record.get('tensorrt', '?')} headers)"


def parse_abi_record(text: str) -> dict | None:
    """The record's words as a dict; None when the text is not a wtconv_trt_plugin record. Unknown keys are kept
    (readers must ignore keys they do not know)."""
    words = text.strip("\0 \n").split()
    if not words or words[0] != ABI_RECORD_TAG:
        return None
    record = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep:
            record[key] = value
    return record


def inspect_library(path) -> LibraryInfo:
    """The dynamic section, exported symbols and ABI record of ``path``.

    Raises PluginError (with the fix) when the file is absent or is not a 64-bit ELF shared library."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    path = Path(path)
    if not path.exists():
        raise PluginError(
            f"plugin library {path} does not exist; build it (wtconv-trt build-libs, or cmake -S plugin "
            f"-B build/plugin -DTensorRT_ROOT=<TensorRT> && cmake --build build/plugin) and pass its "
            f"path with --plugin"
        )
    if not path.is_file():
        raise PluginError(f"plugin library {path} is not a file; pass the .so built from plugin/")
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            raise PluginError(f"plugin library {path} is not an ELF shared library; pass the .so built from plugin/")
        f.seek(0)
        try:
            elf = ELFFile(f)
            if elf.elfclass != 64:
                raise PluginError(f"plugin library {path} is a 32-bit ELF file; TensorRT needs a 64-bit library")
            if elf["e_type"] != "ET_DYN":
                raise PluginError(
                    f"plugin library {path} is an ELF file but not a shared library "
                    f"(e_type {elf['e_type']}); pass the .so built from plugin/"
                )
            info = LibraryInfo(str(path))
            dynamic = elf.get_section_by_name(".dynamic")
            if dynamic is not None:
                info.needed = [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is not None:
                info.defined_symbols = {
                    s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] != "SHN_UNDEF"
                }
            section = elf.get_section_by_name(ABI_SECTION)
            if section is not None:
                info.abi_record = parse_abi_record(section.data().decode("ascii", "replace"))
        except (ELFError, ValueError, OSError, EOFError) as error:  # pyelftools on cut or damaged files
            raise PluginError(
                f"plugin library {path} is a truncated or damaged ELF file ({error}); rebuild it"
            ) from None
        except Exception as error:  # noqa: BLE001 -- pyelftools raises struct/construct errors on bad offsets
            if type(error).__module__.split(".")[0] in ("construct", "struct", "elftools"):
                raise PluginError(f"plugin library {path} is a truncated or damaged ELF file; rebuild it") from None
            raise
    return info


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
            f"({libraries.FILE_NAMES['plugin']}) built against TensorRT 11 headers"
        )


# Environment variables naming the two libraries (first step of the lookup order, wtconv_export.libraries).
ENV_DYNAMIC = libraries.ENV_VARS["plugin"]
ENV_STATIC = libraries.ENV_VARS["plugin-static"]


def _record_matches(abi: str | None):
    if abi is None:
        return None

    def accept(path: Path) -> bool:
        try:
            return inspect_library(path).abi in (abi, None)
        except PluginError:
            return False

    return accept


def default_plugin(static: bool = False, abi: str | None = None) -> Path | None:
    """The plugin library found in the package's lookup order (environment variable, package, per-user cache,
    build tree; wtconv_export.libraries), for ABI ``abi`` when given; None when none is found."""
    kind = "plugin-static" if static else "plugin"
    return libraries.find(kind, abi, accept=_record_matches(abi))
