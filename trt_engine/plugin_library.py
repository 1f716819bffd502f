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

import hashlib
import logging
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wtconv_export import libraries
from wtconv_export.errors import PluginError

log = logging.getLogger(__name__)

ABI_SECTION = ".wtconv_trt_abi"
ABI_RECORD_TAG = "wtconv_trt_plugin"

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
# architecture at byte 28) followed by its payload. A section holds one container per translation unit.
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_CUBIN = 1, 2


def parse_fatbin(data: bytes) -> CudaCode:
    """The architectures of every container in a ``.nv_fatbin`` section's bytes (padding may separate the
    containers). Raises ValueError on a container whose entries do not fit it."""
    cubins, ptx = set(), set()
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
            if kind == _FATBIN_CUBIN:
                cubins.add(arch)
            elif kind == _FATBIN_PTX:
                ptx.add(arch)
            entry += entry_size + payload_size
        offset = data.find(magic_bytes, end)
    return CudaCode(frozenset(cubins), frozenset(ptx))


@dataclass
class LibraryInfo:
    path: str
    needed: list = field(default_factory=list)  # DT_NEEDED entries, e.g. ["libnvinfer.so.10", "libcudart.so.13"]
    defined_symbols: set = field(default_factory=set)  # dynamic symbols the library defines (exports)
    abi_record: dict | None = None  # the .wtconv_trt_abi record's key=value words, if present
    cuda_code: CudaCode | None = None  # the GPU code in its .nv_fatbin section; None when it has none

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
            fatbin = elf.get_section_by_name(".nv_fatbin")
            if fatbin is not None:
                info.cuda_code = parse_fatbin(fatbin.data())
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


def static_plugin_for(manifest: dict) -> Path | None:
    """The static-registration library for an engine whose manifest records a plugin (for Polygraphy's --plugins
    and Triton's LD_PRELOAD): libwtconv_trt_plugin.so beside the dynamic library the manifest names (build-libs
    installs both together), else the one default_plugin finds for the manifest's ABI; None when neither exists or
    the engine uses no plugin."""
    plugin = manifest.get("plugin")
    if not plugin:
        return None
    beside = Path(plugin["library"]).with_name("libwtconv_trt_plugin.so")
    return beside if beside.is_file() else default_plugin(static=True, abi=plugin.get("abi"))


# -------------------------------------------------------------------------------------------------------------
# GPU targets: the code a plugin library carries vs the compute capabilities a TensorRT-RTX engine is built for
# -------------------------------------------------------------------------------------------------------------


def _capability_number(text: str) -> int:
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor or 0)


def runnable_targets(plugin, targets: list | None, requested: bool) -> list | None:
    """The TensorRT-RTX targets (``"8.9"``, ``"12.0"``, ``"current"``) an engine using ``plugin`` can be built for.

    TensorRT-RTX builds for GPUs the building machine need not have, so nothing at build time runs the plugin's
    kernels: a target the library has no code for would build and then fail at the first enqueue ("no kernel
    image"). Targets ``requested`` by the user (--compute-capability) that the library cannot run on are refused
    (PluginError naming them, the library's code and the fix); from the default targets they are left out, with a
    warning (PluginError when none is left). ``current`` (this machine's GPU, known only to TensorRT) and a library
    without GPU code (not built by nvcc) pass unchecked."""
    if not plugin or not targets:
        return targets
    code = inspect_library(plugin).cuda_code
    if code is None:
        return targets
    unable = [t for t in targets if t != "current" and not code.runs_on(_capability_number(t))]
    if not unable:
        return targets
    fix = (
        "rebuild the plugin library with code for them (wtconv-trt build-libs, whose default is "
        "CMAKE_CUDA_ARCHITECTURES=80;86;89;90: machine code for 8.x and 9.0, PTX for newer GPUs; the kernels need "
        "compute capability 8.0 or newer)"
    )
    if requested:
        raise PluginError(
            f"--compute-capability {', '.join(unable)}: plugin library {plugin} has code for {code.describe()}, "
            f"which GPUs of compute capability {', '.join(unable)} cannot run (the engine would fail at its first "
            f"inference there): drop {'it' if len(unable) == 1 else 'them'} from --compute-capability, or {fix}"
        )
    kept = [t for t in targets if t not in unable]
    if not kept:
        raise PluginError(
            f"plugin library {plugin} has code for {code.describe()}, which none of the default TensorRT-RTX "
            f"targets ({', '.join(targets)}) can run: {fix}"
        )
    log.warning(
        "plugin library %s has code for %s: the engine is built for %s only, not for %s (%s)",
        plugin,
        code.describe(),
        ", ".join(kept),
        ", ".join(unable),
        fix,
    )
    return kept


# -------------------------------------------------------------------------------------------------------------
# Which library registered the WTConv2d creator this process already has
# -------------------------------------------------------------------------------------------------------------


def mapped_libraries(maps_text: str | None = None) -> list[Path]:
    """The shared libraries mapped into this process (``/proc/self/maps``; ``maps_text`` for tests), in order."""
    if maps_text is None:
        try:
            maps_text = Path("/proc/self/maps").read_text()
        except OSError:
            return []
    paths = []
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/") and ".so" in Path(fields[5]).name:
            path = Path(fields[5])
            if path not in paths:
                paths.append(path)
    return paths


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


def check_creator_source(requested, loaded_here=(), maps_text: str | None = None) -> None:
    """PluginError unless the WTConv2d creator already registered in this process came from the file ``requested``.

    A creator registers once per process, by whichever library was loaded first (an LD_PRELOADed static-registration
    library, an earlier load_plugin of another build): loading ``requested`` then registers nothing, so an engine
    built or run now would use the other library's code while its manifest records ``requested``. The libraries
    that can have registered it are those this process loaded through load_plugin (``loaded_here``) and those
    mapped into it carrying our ABI record; one of them identical to ``requested`` (same file or same bytes) is
    fine."""
    requested = Path(requested).resolve()
    candidates = [Path(p) for p in loaded_here]
    for path in mapped_libraries(maps_text):
        if path not in candidates and read_abi_record(path) is not None:
            candidates.append(path)
    digest = None
    for path in candidates:
        try:
            if path.resolve() == requested or path.samefile(requested):
                return
            digest = digest or hashlib.sha256(requested.read_bytes()).hexdigest()
            if hashlib.sha256(path.read_bytes()).hexdigest() == digest:
                log.info("the WTConv2d creator was registered by %s, identical to %s", path, requested)
                return
        except OSError:
            continue
    others = ", ".join(str(p) for p in candidates) or (
        "a library not found among this process's mapped files (linked into the program?)"
    )
    raise PluginError(
        f"a WTConv2d plugin creator is already registered in this process, by {others}; plugin library "
        f"{requested} was not loaded (a creator registers once per process), so the engine would run the other "
        f"library's code while its manifest names {requested}. Load one plugin library per process: remove the "
        f"other from LD_PRELOAD or --plugins, or pass it as --plugin"
    )
