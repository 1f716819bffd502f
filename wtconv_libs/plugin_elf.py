"""A plugin library read from its ELF file without loading it: DT_NEEDED, its RUNPATH, exported symbols, the ABI
record of section ``.wtconv_trt_abi`` and the GPU code in ``.nv_fatbin``, its own or that of the kernel library it
loads (``libwtconv_kernels.so``, the binary wheel's kernels linked once; docs/engines.md, "Compiled libraries: one
lookup order")."""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wtconv_core.errors import PluginError

ABI_SECTION = ".wtconv_trt_abi"
ABI_RECORD_TAG = "wtconv_trt_plugin"
# The kernels linked once (plugin/cmake/wtconvKernelsShared.cmake): the libraries of the binary wheel load it through
# their RUNPATH and hold no GPU code of their own.
KERNELS_LIBRARY = "libwtconv_kernels.so"

# The section names the library kind "dynamic" or "static"; LibraryInfo.kind says "static-registration".
_RECORD_KINDS = {"dynamic": "dynamic", "static": "static-registration"}


@dataclass(frozen=True)
class CudaCode:
    """The GPU code a library carries (its ``.nv_fatbin`` section, written by nvcc): machine code (cubin) for these
    SM architectures, and PTX for these virtual ones (e.g. cubins {80, 86, 89, 90}, PTX {90} for
    ``-DCMAKE_CUDA_ARCHITECTURES=80;86;89;90``). Architectures are major * 10 + minor (120 for 12.0)."""

    cubins: frozenset
    ptx: frozenset

    def runs_on(self, capability: int) -> bool:
        """Whether a GPU of compute capability ``capability`` (major * 10 + minor) can run this code: a cubin of the
        same major and a minor not above its own, or PTX of a virtual architecture not above it, which the driver
        compiles when the library is loaded (CUDA C++ Programming Guide, "Binary Compatibility" and "PTX
        Compatibility")."""
        major, minor = divmod(capability, 10)
        return any(a // 10 == major and a % 10 <= minor for a in self.cubins) or any(a <= capability for a in self.ptx)

    def describe(self) -> str:
        cubins = ", ".join(f"sm_{a}" for a in sorted(self.cubins)) or "no machine code"
        ptx = ", ".join(f"compute_{a}" for a in sorted(self.ptx))
        return cubins + (f" (+ PTX {ptx})" if ptx else "")


# nvcc's fat binary container (not documented by NVIDIA; the layout cuobjdump reads): a 16-byte header (magic
# 0xBA55ED50, u16 version, u16 header size, u64 size of the entries that follow), then entries, each an entry
# header (u16 kind: 1 PTX, 2 cubin; u16; u32 entry header size; u32 payload size padded to 8 bytes; ...; u32 SM
# architecture at byte 28; u64 flags at byte 40, where 0x2000 (nvcc 12) or 0x8000 (nvcc 13's --compress-mode) marks a
# compressed payload; u64 size of the payload once decompressed at byte 56) followed by its payload. A section holds
# one container per translation unit.
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_CUBIN = 1, 2
_FATBIN_COMPRESSED = 0x2000 | 0x8000


@dataclass(frozen=True)
class FatbinEntry:
    """One entry of a fat binary: machine code or PTX for one architecture, as stored and as the driver loads it."""

    kind: str  # "cubin" or "ptx"
    arch: int  # major * 10 + minor
    stored_bytes: int  # its payload in the file (compressed where nvcc compressed it)
    code_bytes: int  # the cubin or PTX text once decompressed
    compressed: bool


def fatbin_entries(data: bytes) -> list[FatbinEntry]:
    """Every entry of every container in a ``.nv_fatbin`` section's bytes (padding may separate the containers).
    Raises ValueError on a container whose entries do not fit it."""
    entries = []
    magic_bytes = struct.pack("<I", _FATBIN_MAGIC)
    offset = data.find(magic_bytes)
    while 0 <= offset and offset + 16 <= len(data):
        _magic, _version, header_size, entries_size = struct.unpack_from("<IHHQ", data, offset)
        end = offset + header_size + entries_size
        if header_size < 16 or end > len(data):
            raise ValueError(f"fat binary container at {offset} overruns the section")
        entry = offset + header_size
        while entry + 32 <= end:
            kind, _, entry_size, payload_size = struct.unpack_from("<HHII", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if entry_size < 32:
                raise ValueError(f"fat binary entry at {entry} has a header of {entry_size} bytes")
            flags, _, decompressed = struct.unpack_from("<QQQ", data, entry + 40) if entry_size >= 64 else (0, 0, 0)
            compressed = bool(flags & _FATBIN_COMPRESSED) and decompressed > 0
            if kind in (_FATBIN_CUBIN, _FATBIN_PTX):
                name = "cubin" if kind == _FATBIN_CUBIN else "ptx"
                code = decompressed if compressed else payload_size
                entries.append(FatbinEntry(name, arch, payload_size, code, compressed))
            entry += entry_size + payload_size
        offset = data.find(magic_bytes, end)
    return entries


def parse_fatbin(data: bytes) -> CudaCode:
    """The architectures of every container in a ``.nv_fatbin`` section's bytes (fatbin_entries). Raises ValueError
    on a container whose entries do not fit it."""
    entries = fatbin_entries(data)
    cubins = frozenset(e.arch for e in entries if e.kind == "cubin")
    return CudaCode(cubins, frozenset(e.arch for e in entries if e.kind == "ptx"))


@dataclass
class LibraryInfo:
    path: str
    needed: list = field(default_factory=list)  # DT_NEEDED entries, e.g. ["libnvinfer.so.10", "libcudart.so.13"]
    defined_symbols: set = field(default_factory=set)  # dynamic symbols the library defines (exports)
    abi_record: dict | None = None  # the .wtconv_trt_abi record's key=value words, if present
    # The GPU code it runs: its own .nv_fatbin section's, else that of the kernel library it loads; None when neither
    # has any.
    cuda_code: CudaCode | None = None
    runpath: list = field(default_factory=list)  # DT_RUNPATH (or DT_RPATH) entries, $ORIGIN as written
    kernels_library: str | None = None  # the libwtconv_kernels.so it loads (found through runpath), if any

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
    def finds_nvinfer_at_load(self) -> bool:
        """The statically registering library built from TensorRT's headers alone: it looks for libnvinfer's
        getPluginRegistry when loaded, in the process or as libnvinfer.so.<major> (plugin/README.md)."""
        return (self.abi_record or {}).get("libnvinfer") == "load"

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
            f"-B build/plugin -DTensorRT_ROOT=<TensorRT> && cmake --build build/plugin) and pass it as "
            f"plugin=PATH"
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
                for tag in dynamic.iter_tags():
                    if tag.entry.d_tag == "DT_RUNPATH":
                        info.runpath = tag.runpath.split(":")
                    elif tag.entry.d_tag == "DT_RPATH" and not info.runpath:
                        info.runpath = tag.rpath.split(":")
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is not None:
                info.defined_symbols = {
                    s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] != "SHN_UNDEF"
                }
            section = elf.get_section_by_name(ABI_SECTION)
            if section is not None:
                info.abi_record = parse_abi_record(section.data().decode("ascii", "replace"))
            fatbin = elf.get_section_by_name(".nv_fatbin")
            if fatbin is not None:
                info.cuda_code = parse_fatbin(fatbin.data())
            elif KERNELS_LIBRARY in info.needed:
                kernels = find_needed(path, KERNELS_LIBRARY, info.runpath)
                if kernels is not None:
                    info.kernels_library = str(kernels)
                    info.cuda_code = read_cuda_code(kernels)
        except (ELFError, ValueError, OSError, EOFError) as error:  # pyelftools on cut or damaged files
            raise PluginError(
                f"plugin library {path} is a truncated or damaged ELF file ({error}); rebuild it"
            ) from None
        except Exception as error:  # noqa: BLE001 -- pyelftools raises struct/construct errors on bad offsets
            if type(error).__module__.split(".")[0] in ("construct", "struct", "elftools"):
                raise PluginError(f"plugin library {path} is a truncated or damaged ELF file; rebuild it") from None
            raise
    return info


def find_needed(path, name: str, runpath: list) -> Path | None:
    """Where the loader finds dependency ``name`` of library ``path`` through its RUNPATH entries (``$ORIGIN`` is the
    library's own folder; ld.so(8)), or None when no entry holds it."""
    origin = str(Path(path).resolve().parent)
    for entry in runpath:
        folder = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        candidate = Path(os.path.normpath(Path(folder) / name))
        if folder and candidate.is_file():
            return candidate
    return None


def library_bundle(path) -> tuple[Path, ...]:
    """The files a copy of library ``path`` needs beside it: the library, and the libwtconv_kernels.so it loads when
    it is one of the binary wheel's (whose RUNPATH also looks beside the library), so a copy made elsewhere (a Triton
    model folder) loads. Anything unreadable is the library alone."""
    path = Path(path)
    try:
        info = inspect_library(path)
    except PluginError:
        return (path,)
    return (path, Path(info.kernels_library)) if info.kernels_library else (path,)


def read_cuda_code(path) -> CudaCode | None:
    """The GPU code in the ``.nv_fatbin`` section of ``path``; None when it has none or cannot be read."""
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            section = ELFFile(f).get_section_by_name(".nv_fatbin")
            return parse_fatbin(section.data()) if section is not None else None
    except Exception:  # noqa: BLE001 -- an unreadable kernel library simply shows no GPU code
        return None


def read_abi_record(path) -> dict | None:
    """The ``.wtconv_trt_abi`` record of an ELF file, or None (no record, not ELF, unreadable)."""
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return None
            f.seek(0)
            section = ELFFile(f).get_section_by_name(ABI_SECTION)
            return parse_abi_record(section.data().decode("ascii", "replace")) if section is not None else None
    except Exception:  # noqa: BLE001 -- any unreadable or damaged file simply has no record for us
        return None
