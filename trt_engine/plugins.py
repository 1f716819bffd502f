"""Which plugin library an engine takes: the static-registration library a server preloads for it, its GPU code
against the build targets, the creator already registered in this process (whether a library fits the TensorRT in
use: wtconv_libs.abi; docs/engines.md, "Compiled libraries: one lookup order")."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from wtconv_core.errors import PluginError
from wtconv_libs import lookup
from wtconv_libs.abi import check_static_library
from wtconv_libs.plugin_elf import inspect_library, read_abi_record

if TYPE_CHECKING:
    from trt_engine.manifest import EngineManifest

log = logging.getLogger(__name__)


def static_plugin_for(manifest: EngineManifest) -> Path | None:
    """The static-registration library for an engine whose manifest records a plugin (for Polygraphy's --plugins
    and Triton's LD_PRELOAD): libwtconv_trt_plugin.so beside the dynamic library the manifest names (build-libs
    installs both together), else the one the lookup finds for the manifest's ABI; None when neither exists or the
    engine uses no plugin."""
    plugin = manifest.plugin
    if plugin is None:
        return None
    beside = Path(plugin.library).with_name(lookup.FILE_NAMES["plugin-static"])
    return beside if beside.is_file() else lookup.default_plugin(static=True, abi=plugin.abi)


def preloaded_plugin(manifest: EngineManifest, given=None) -> Path | None:
    """The static-registration library a server preloads for the engine (Triton's TensorRT backend): ``given``, else
    static_plugin_for's; checked (wtconv_libs.abi.check_static_library). None when the engine uses no plugin and
    none is given; PluginError when it does and there is none."""
    if manifest.plugin is None and not given:
        return None
    plugin = Path(given) if given else static_plugin_for(manifest)
    if plugin is None:
        raise PluginError(
            "the engine uses the WTConv2d plugin: pass plugin_static=PATH/TO/libwtconv_trt_plugin.so "
            "(the static-registration library from plugin/, which Triton loads with LD_PRELOAD)",
            parameter="plugin_static",
        )
    check_static_library(plugin, manifest.tensorrt_version)
    return plugin


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
            f"compute_capabilities {', '.join(unable)}: plugin library {plugin} has code for {code.describe()}, "
            f"which GPUs of compute capability {', '.join(unable)} cannot run (the engine would fail at its first "
            f"inference there): drop {'it' if len(unable) == 1 else 'them'} from compute_capabilities, or {fix}",
            parameter="compute_capabilities",
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
