"""Inspect a plugin shared library without loading it (CPU only, no TensorRT).

Two kinds of plugin library exist (shared/DESIGN.md §5):
- dynamic: exports ``extern "C" getCreators`` and ``setLoggerFinder``; loaded with
  ``IPluginRegistry.load_library`` (C++ ``IPluginRegistry::loadLibrary``) or ``trtexec --dynamicPlugins``;
  need not link libnvinfer.
- static registration: registers its creators from a static initialiser (``REGISTER_TENSORRT_PLUGIN``) when
  the library is dlopen'ed: ``polygraphy --plugins`` (a plain ``ctypes.CDLL``), Triton's LD_PRELOAD or
  ``--backend-config=tensorrt,plugins=...``; links libnvinfer.so.<major>.

Reading the ELF dynamic section tells which kind a file is (does it define ``getCreators``?) and, when it
links libnvinfer, for which TensorRT major version it was built (DT_NEEDED ``libnvinfer.so.10``), so a library
for the wrong TensorRT is reported as such instead of as an obscure load failure.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_DT_NEEDED = 1
_SHN_UNDEF = 0


@dataclass
class LibraryInfo:
    path: str
    needed: list = field(default_factory=list)        # DT_NEEDED entries, e.g. ["libnvinfer.so.10", "libcudart.so.13"]
    defined_symbols: set = field(default_factory=set)  # dynamic symbols the library defines (exports)

    @property
    def exports_get_creators(self) -> bool:
        return "getCreators" in self.defined_symbols

    @property
    def nvinfer_major(self):
        """TensorRT major version the library links against (libnvinfer.so.N), or None if it does not link it."""
        for name in self.needed:
            m = re.fullmatch(r"libnvinfer\.so\.(\d+)(\..*)?", name)
            if m:
                return int(m.group(1))
        return None

    @property
    def kind(self) -> str:
        return "dynamic" if self.exports_get_creators else "static-registration"


def inspect_library(path) -> LibraryInfo:
    """Parse the ELF dynamic section and dynamic symbol table of ``path``.

    Raises FileNotFoundError if absent, ValueError (with the fix) if it is not a 64-bit ELF shared library."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"plugin library {path} does not exist; build it (cmake -S plugin -B build && cmake "
                                f"--build build) and pass its path with --plugin")
    if not path.is_file():
        raise ValueError(f"plugin library {path} is not a file")
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"plugin library {path} is not an ELF shared library (first bytes {data[:4]!r}); pass the "
                         f".so built from plugin/")
    if data[4] != 2:
        raise ValueError(f"plugin library {path} is a 32-bit ELF file; TensorRT needs a 64-bit library")
    endian = "<" if data[5] == 1 else ">"
    try:
        return _parse_elf64(path, data, endian)
    except struct.error:
        raise ValueError(f"plugin library {path} is a truncated or damaged ELF file; rebuild it") from None


def _parse_elf64(path: Path, data: bytes, e: str) -> LibraryInfo:
    (e_type,) = struct.unpack_from(e + "H", data, 16)
    if e_type != 3:  # ET_DYN
        raise ValueError(f"plugin library {path} is an ELF file but not a shared library (e_type={e_type})")
    e_shoff, = struct.unpack_from(e + "Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from(e + "HH", data, 0x3A)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        # Elf64_Shdr: name I, type I, flags Q, addr Q, offset Q, size Q, link I, info I, addralign Q, entsize Q
        sh = struct.unpack_from(e + "IIQQQQIIQQ", data, off)
        sections.append({"type": sh[1], "offset": sh[4], "size": sh[5], "link": sh[6], "entsize": sh[9]})

    def string_at(section, index):
        start = section["offset"] + index
        end = data.index(b"\0", start)
        return data[start:end].decode("utf-8", "replace")

    info = LibraryInfo(str(path))
    for sec in sections:
        if sec["type"] == _SHT_DYNAMIC:
            strtab = sections[sec["link"]]
            for off in range(sec["offset"], sec["offset"] + sec["size"], 16):
                tag, val = struct.unpack_from(e + "qQ", data, off)
                if tag == 0:
                    break
                if tag == _DT_NEEDED:
                    info.needed.append(string_at(strtab, val))
        elif sec["type"] == _SHT_DYNSYM:
            strtab = sections[sec["link"]]
            entsize = sec["entsize"] or 24
            for off in range(sec["offset"], sec["offset"] + sec["size"], entsize):
                # Elf64_Sym: name I, info B, other B, shndx H, value Q, size Q
                st_name, st_info, _, st_shndx, _, _ = struct.unpack_from(e + "IBBHQQ", data, off)
                if st_name and st_shndx != _SHN_UNDEF:
                    info.defined_symbols.add(string_at(strtab, st_name))
    return info


def check_library_for_tensorrt(info: LibraryInfo, trt_major: int) -> None:
    """ValueError when the library links another TensorRT major version than the one installed."""
    major = info.nvinfer_major
    if major is not None and major != trt_major:
        raise ValueError(f"plugin library {info.path} links libnvinfer.so.{major} (TensorRT {major}) but TensorRT "
                         f"{trt_major} is installed: rebuild the plugin against TensorRT {trt_major}'s headers and "
                         f"libraries (cmake -S plugin -B build/plugin -DTensorRT_ROOT=<TensorRT {trt_major} install>)")


# Where 'cmake -S plugin -B build/plugin && cmake --build build/plugin' puts the two libraries (plugin/trt's
# CMakeLists.txt: targets wtconv_trt_plugin_dynamic and wtconv_trt_plugin), overridable by environment variables.
ENV_DYNAMIC = "WTCONV_TRT_PLUGIN"
ENV_STATIC = "WTCONV_TRT_PLUGIN_STATIC"
_BUILD_DIR = Path(__file__).resolve().parent.parent / "build" / "plugin" / "trt"
DEFAULT_DYNAMIC = _BUILD_DIR / "libwtconv_trt_plugin_dynamic.so"
DEFAULT_STATIC = _BUILD_DIR / "libwtconv_trt_plugin.so"


def default_plugin(static: bool = False):
    """The built plugin library (dynamic: getCreators; static: static registration), or None if not built."""
    import os
    env = os.environ.get(ENV_STATIC if static else ENV_DYNAMIC)
    path = Path(env) if env else (DEFAULT_STATIC if static else DEFAULT_DYNAMIC)
    return path if path.is_file() else None
