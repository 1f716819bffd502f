"""The only module that calls TensorRT: it turns decisions made in plain Python elsewhere into TensorRT Python API
calls, and TensorRT failures into errors with a cause and a fix (the calls it relies on: docs/engines.md,
"TensorRT API facts")."""

from __future__ import annotations

import ctypes
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trt_engine import backends
from trt_engine.manifest import PluginRecord, TensorIO, parse_version
from trt_engine.plugins import check_creator_source
from wtconv_core.errors import ConfigurationError, EngineError, PluginError
from wtconv_libs import contract
from wtconv_libs.abi import check_library_for_tensorrt, runtime_name
from wtconv_libs.plugin_elf import inspect_library

log = logging.getLogger(__name__)
tensorrt_log = logging.getLogger("trt_engine.tensorrt")  # TensorRT's own messages (its ILogger)

INSTALL_HINT = (
    "TensorRT is not installed: install TensorRT 10.x or 11.x for your CUDA version (pip install "
    "tensorrt, or NVIDIA's TensorRT container) on a machine with an NVIDIA GPU and driver, or "
    "TensorRT-RTX (pip install tensorrt-rtx-cu13), which also builds engines without a GPU"
)


class TensorRTUnavailable(ConfigurationError, EngineError):
    """TensorRT cannot be imported (not installed, or its libraries cannot be loaded)."""


_TRT = None
_BACKEND: str | None = None  # the backend chosen for this process (backends.TENSORRT / TENSORRT_RTX)
_LOGGER = None
_SEVERITY_LEVELS = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG}


def use_backend(requested: str | None = None) -> str:
    """Choose the backend for this process ('auto', 'tensorrt', 'tensorrt-rtx'); one per process, since both
    register plugins in their own global registry. Returns the backend's name."""
    global _BACKEND
    if _TRT is not None and requested not in (None, backends.AUTO) and requested != _BACKEND:
        raise ConfigurationError(
            f"{backends.display_name(_BACKEND)} is already in use in this process; "
            f"backend {requested} needs a new process",
            parameter="backend",
        )
    if _TRT is not None:
        return _BACKEND
    try:
        _BACKEND = backends.choose_backend(requested)
    except ConfigurationError as error:
        if requested in (None, backends.AUTO):
            raise TensorRTUnavailable(str(error)) from None
        raise
    return _BACKEND


def prefer_backend(name: str) -> None:
    """Use backend ``name`` if it is installed and nothing was imported yet (an engine's own backend, from its
    manifest); otherwise leave the choice as it is, so the version check names both backends."""
    global _BACKEND
    if _TRT is None and name in backends.installed_backends():
        _BACKEND = name


def backend_of(trt) -> str:
    """The backend a TensorRT module belongs to (TensorRT-RTX's modules are named tensorrt_rtx*)."""
    return backends.TENSORRT_RTX if getattr(trt, "__name__", "").startswith("tensorrt_rtx") else backends.TENSORRT


def import_tensorrt():
    """Import the chosen backend's module (``use_backend``; auto when none was chosen) or raise
    TensorRTUnavailable with the fix. Caches the module."""
    global _TRT
    if _TRT is not None:
        return _TRT
    try:
        backend = _BACKEND or backends.choose_backend(backends.AUTO)
    except ConfigurationError:
        backend = backends.TENSORRT  # nothing installed: report the import failure below
    info = backends.BACKENDS[backend]
    try:
        if backend == backends.TENSORRT_RTX:
            from trt_engine import rtx_libraries

            rtx_libraries.prepare()  # before the bindings load the wheel's libraries
        trt = __import__(info.module)
    except ImportError as error:
        raise TensorRTUnavailable(f"{INSTALL_HINT} (import {info.module}: {error})") from None
    except OSError as error:  # the bindings wheel is there but its libraries cannot be loaded
        raise TensorRTUnavailable(
            f"{INSTALL_HINT} (the {info.module} Python package is installed but its "
            f"libraries cannot be loaded: {error})"
        ) from None
    version = getattr(trt, "__version__", "0")
    if backend == backends.TENSORRT and parse_version(version)[0] < 10:
        raise ConfigurationError(
            f"TensorRT {version} is too old: the WTConv2d plugin is an IPluginV3 plugin and "
            f"needs TensorRT 10.x or 11.x; upgrade TensorRT"
        )
    _TRT = trt
    _set_backend(backend)
    return trt


def _set_backend(backend: str) -> None:
    global _BACKEND
    _BACKEND = backend


def tensorrt_available() -> bool:
    try:
        import_tensorrt()
        return True
    except ConfigurationError:
        return False


def tensorrt_version() -> str:
    return import_tensorrt().__version__


def current_backend() -> str:
    """The backend of the imported module ('tensorrt' / 'tensorrt-rtx'); imports it when needed."""
    return backend_of(import_tensorrt())


def get_logger(verbose: bool = False):
    """One ILogger for the process (TensorRT keeps a single global logger). It forwards TensorRT's messages to
    the ``trt_engine.tensorrt`` logging logger (errors and warnings always; info and verbose with ``verbose``)
    and keeps the last errors so they can be quoted in our own error messages."""
    global _LOGGER
    trt = import_tensorrt()
    if _LOGGER is None:

        class _Logger(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)
                self.min_severity = int(trt.ILogger.Severity.WARNING)
                self.errors = []
                self.messages = []  # every message at or above min_severity, for tests and error reports
                self.interrupted = False  # Ctrl-C pressed during a TensorRT call (keeping_ctrl_c)

            def log(self, severity, msg):
                if self.interrupted:
                    return  # what TensorRT says while a Ctrl-C cancels its work ("Build canceled") is its echo
                level = int(severity)
                if level <= int(trt.ILogger.Severity.ERROR):
                    self.errors.append(msg)
                    del self.errors[:-20]
                if level <= self.min_severity:
                    self.messages.append(msg)
                    del self.messages[:-200]
                    tensorrt_log.log(_SEVERITY_LEVELS.get(level, logging.INFO), "[TensorRT] %s", msg)

        _LOGGER = _Logger()
    _LOGGER.min_severity = int(trt.ILogger.Severity.VERBOSE if verbose else trt.ILogger.Severity.WARNING)
    return _LOGGER


@contextmanager
def keeping_ctrl_c(logger) -> Iterator[None]:
    """Around a TensorRT call that runs our Python callbacks (the logger, the progress monitor). TensorRT catches what
    a callback raises and prints it ("Exception caught in log(): KeyboardInterrupt"), so a Ctrl-C, which Python
    raises in whatever Python code runs next, would be lost and the parse or build would go on. Inside the block the
    SIGINT handler only notes the press on ``logger`` (the progress monitor then cancels a build, and the logger falls
    silent); once TensorRT has returned, the handler the process had is put back and the signal raised again, so that
    handler acts on it as it would have (the command line's: interrupted, exit status 130; Python's:
    KeyboardInterrupt). Outside the main thread, where no handler runs, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    logger.interrupted = False
    previous = signal.signal(signal.SIGINT, lambda signum, frame: setattr(logger, "interrupted", True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        pressed, logger.interrupted = logger.interrupted, False
        if pressed:
            signal.raise_signal(signal.SIGINT)


def _recent_errors(logger) -> str:
    errors, logger.errors[:] = list(logger.errors), []
    return ("; TensorRT said: " + " | ".join(errors[-5:])) if errors else ""


# -------------------------------------------------------------------------------------------------------------
# Plugin library
# -------------------------------------------------------------------------------------------------------------


def registered_creators():
    """[(name, version, namespace)] of every creator in the global plugin registry."""
    trt = import_tensorrt()
    out = []
    # all_creators is None when the bindings cannot wrap a creator (pyPlugin.cpp getCreatorsUtil).
    for creator in trt.get_plugin_registry().all_creators or []:
        out.append(
            (
                str(getattr(creator, "name", "?")),
                str(getattr(creator, "plugin_version", "?")),
                str(getattr(creator, "plugin_namespace", "")),
            )
        )
    return out


def has_wtconv_creator() -> bool:
    key = (contract.PLUGIN_NAME, contract.PLUGIN_VERSION, contract.PLUGIN_NAMESPACE)
    return key in registered_creators()


_LOADED_LIBRARIES = {}  # resolved path -> (ctypes handle, registry handle); keeps them loaded


def load_plugin(path) -> PluginRecord:
    """Load our plugin library into TensorRT's global plugin registry and check that the WTConv2d creator is
    there. Returns the plugin's record for the manifest.

    The library's ABI record is read first, without loading it: a library built for another TensorRT ABI is
    refused by name (PluginError). A dynamic library (exports getCreators) goes through
    IPluginRegistry.load_library; a static-registration library registers itself when dlopen'ed (ctypes.CDLL, as
    ``polygraphy --plugins`` does). If the creator is already registered nothing is loaded twice (load_library
    would fail): fine when this same file registered it, else PluginError naming the library that did."""
    trt = import_tensorrt()
    backend = backend_of(trt)
    version = str(trt.__version__)
    trt_major = parse_version(version)[0]
    runtime = runtime_name(backend, version)
    info = inspect_library(path)  # PluginError with the fix
    check_library_for_tensorrt(info, trt_major, backend, version)
    resolved = str(Path(path).resolve())
    result = PluginRecord(
        name=contract.PLUGIN_NAME,
        version=contract.PLUGIN_VERSION,
        namespace=contract.PLUGIN_NAMESPACE,
        library=resolved,
        kind=info.kind,
        tensorrt_major=trt_major,
        abi=info.abi,
    )
    if resolved in _LOADED_LIBRARIES:
        return result
    if has_wtconv_creator():  # registered before: by this very file, or refused naming the one that did
        check_creator_source(resolved, _LOADED_LIBRARIES)
        return result
    logger = get_logger()
    try:
        # dlopen first: a missing dependency (libcudart.so.N, libnvinfer.so.N) is reported by the dynamic
        # loader with its name, which IPluginRegistry.load_library would reduce to a null handle.
        handle = ctypes.CDLL(resolved)
    except OSError as error:
        raise PluginError(
            f"could not load plugin library {path}: {error}. Check its dependencies with "
            f"'ldd {path}' (for the static-registration library, {runtime}'s library must be "
            f"loadable), or rebuild the plugin for {runtime}"
        ) from None
    registry_handle = None
    if info.exports_get_creators and not has_wtconv_creator():
        registry_handle = trt.get_plugin_registry().load_library(resolved)
        if registry_handle is None:
            raise PluginError(
                f"{runtime} could not load plugin library {path} (IPluginRegistry.load_library "
                f"returned null{_recent_errors(logger)}). Causes: it is not a TensorRT plugin library, "
                f"or one of its creators is already registered (another copy of the library was "
                f"loaded, e.g. through LD_PRELOAD)"
            )
    _LOADED_LIBRARIES[resolved] = (handle, registry_handle)
    if not has_wtconv_creator():
        listing = ", ".join(f"{n} v{v}" + (f" ns {ns!r}" if ns else "") for n, v, ns in registered_creators())
        raise PluginError(
            f"plugin library {path} loaded, but {runtime}'s registry has no creator "
            f"{contract.PLUGIN_NAME!r} version {contract.PLUGIN_VERSION!r} namespace "
            f"{contract.PLUGIN_NAMESPACE!r}{_recent_errors(logger)}. Registered: {listing or 'none'}. "
            f"Is it the WTConv2d plugin library (plugin/trt), built for {runtime}'s ABI?"
        )
    return result


# -------------------------------------------------------------------------------------------------------------
# Build
# -------------------------------------------------------------------------------------------------------------


def make_progress_monitor(board, logger=None):
    """A trt.IProgressMonitor (TensorRT >= 10.0, TensorRT-RTX) that forwards to ``board``
    (progress_board.ProgressBoard) and cancels the build once a Ctrl-C was noted on ``logger`` (keeping_ctrl_c)."""
    trt = import_tensorrt()

    class _Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name, parent_phase, num_steps):
            board.phase_start(phase_name, parent_phase, num_steps)

        def step_complete(self, phase_name, step):
            if logger is not None and logger.interrupted:
                board.cancelled = True
            return board.step_complete(phase_name, step)

        def phase_finish(self, phase_name):
            board.phase_finish(phase_name)

    return _Monitor()


def compute_capability_names() -> list[str]:
    """TensorRT-RTX's target compute capabilities as 'major.minor' ('8.9', '12.0'), from trt.ComputeCapability."""
    trt = import_tensorrt()
    names = []
    for member in trt.ComputeCapability.__members__:
        if member.startswith("SM") and member[2:].isdigit():
            digits = member[2:]
            names.append(f"{digits[:-1]}.{digits[-1]}")
    return names


def default_compute_capabilities() -> list[str]:
    """The targets a TensorRT-RTX build uses unless told otherwise: every one from 8.0 (Ampere) up. Turing (7.5) is
    left out because TensorRT-RTX 1.7 cannot compile fp32 matrix products for it ("FP32 GEMM is not supported"),
    which every fp32 export has; ask for it with --compute-capability 7.5 (fp16 exports build for it)."""
    return [name for name in compute_capability_names() if tuple(int(p) for p in name.split(".")) >= (8, 0)]


class NetworkBuilder:
    """Builder + network + ONNX parser for one model. Use: parse(), inputs(), then build()."""

    def __init__(self, strongly_typed: bool, verbose: bool = False):
        trt = self.trt = import_tensorrt()
        self.backend = backend_of(trt)
        self.major = parse_version(trt.__version__)[0]
        self.logger = get_logger(verbose)
        self.builder = trt.Builder(self.logger)
        flags = 0
        if strongly_typed and self.backend == backends.TENSORRT and self.major == 10:
            # TensorRT 10: strong typing is opt-in. TensorRT 11 and TensorRT-RTX: always on (the flag is
            # deprecated and ignored on 11; TensorRT-RTX networks report STRONGLY_TYPED without it).
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        self.strongly_typed = strongly_typed or self.major >= 11 or self.backend == backends.TENSORRT_RTX
        self.network = self.builder.create_network(flags)
        self.parser = trt.OnnxParser(self.network, self.logger)

    def parse(self, onnx_path) -> None:
        # parse_from_file resolves external weight files relative to the model (parse(bytes) would not).
        with keeping_ctrl_c(self.logger):
            parsed = self.parser.parse_from_file(str(onnx_path))
        if parsed:
            return
        lines = []
        plugin_missing = False
        for i in range(self.parser.num_errors):
            err = self.parser.get_error(i)
            node_op = err.node_operator()
            plugin_missing |= node_op == contract.OP_TYPE
            lines.append(f"node {err.node()} {err.node_name()!r} ({node_op}): {err.desc()} [{err.code()}]")
        hint = ""
        if plugin_missing and not has_wtconv_creator():
            hint = (
                f" -- the {contract.OP_TYPE} nodes need our plugin: pass --plugin with "
                f"libwtconv_trt_plugin_dynamic.so built for {runtime_name(self.backend, self.trt.__version__)}"
            )
        elif plugin_missing and any("Plugin not found" in line for line in lines):
            hint = (
                f" -- our plugin is registered as {contract.PLUGIN_NAME!r} version {contract.PLUGIN_VERSION!r} "
                f"namespace {contract.PLUGIN_NAMESPACE!r}: the node's plugin_version / plugin_namespace attributes "
                f"must match (re-export the model with wtconv-trt export)"
            )
        # Our plugin prefixes its messages with "WTConv2d plugin:" (plugin/trt); quote the last ones.
        plugin_said = [m for m in self.logger.errors if m.startswith(f"{contract.PLUGIN_NAME} plugin:")]
        if plugin_said:
            hint += " -- the plugin said: " + " | ".join(plugin_said[-3:])
        self.logger.errors.clear()
        raise EngineError(
            f"TensorRT's ONNX parser rejected {onnx_path}: " + " | ".join(lines or ["(no details)"]) + hint
        )

    def inputs(self) -> dict:
        return {
            t.name: tuple(int(d) for d in t.shape)
            for t in (self.network.get_input(i) for i in range(self.network.num_inputs))
        }

    def plugin_layer_count(self) -> int:
        trt = self.trt
        kinds = {getattr(trt.LayerType, n) for n in ("PLUGIN_V3", "PLUGIN_V2", "PLUGIN") if hasattr(trt.LayerType, n)}
        return sum(1 for i in range(self.network.num_layers) if self.network.get_layer(i).type in kinds)

    def io(self) -> list[TensorIO]:
        """The network's I/O tensors as the manifest records them (-1 for a dynamic dimension): used when the engine
        cannot be deserialized on this machine (TensorRT-RTX without one of its GPUs)."""
        trt = self.trt
        out = []
        for mode, count, get in (
            ("input", self.network.num_inputs, self.network.get_input),
            ("output", self.network.num_outputs, self.network.get_output),
        ):
            for i in range(count):
                t = get(i)
                out.append(
                    TensorIO(
                        name=t.name,
                        mode=mode,
                        shape=tuple(int(d) for d in t.shape),
                        dtype=_dtype_name(trt, t.dtype),
                    )
                )
        return out

    def derived_output_shapes(self, input_shapes: dict) -> dict:
        """{output name: shape} that TensorRT derives for fixed ``input_shapes`` ({input name: dims}) through every
        layer, our plugin's getOutputShapes included; the inputs' shapes are restored afterwards."""
        saved = {}
        try:
            for i in range(self.network.num_inputs):
                t = self.network.get_input(i)
                if t.name in input_shapes:
                    saved[t.name] = (t, tuple(t.shape))
                    t.shape = tuple(int(d) for d in input_shapes[t.name])
            return {
                self.network.get_output(i).name: tuple(int(d) for d in self.network.get_output(i).shape)
                for i in range(self.network.num_outputs)
            }
        finally:
            for t, shape in saved.values():
                t.shape = shape

    def build(
        self,
        *,
        profiles,
        fp16_flag: bool,
        tf32: bool,
        timing_cache=None,
        progress_board=None,
        workspace_bytes=None,
        optimization_level=None,
        compute_capabilities=None,
    ) -> bytes:
        trt = self.trt
        config = self.builder.create_builder_config()
        if fp16_flag:
            if not hasattr(trt.BuilderFlag, "FP16"):  # TensorRT 11 / RTX removed it; decide_typing never asks there
                raise EngineError(
                    f"{runtime_name(self.backend, trt.__version__)} has no FP16 builder flag: export "
                    f"the model with --precision fp16 and build that ONNX model"
                )
            config.set_flag(trt.BuilderFlag.FP16)
        if not tf32:
            config.clear_flag(trt.BuilderFlag.TF32)
        if compute_capabilities:
            self._set_compute_capabilities(config, compute_capabilities)
        if workspace_bytes:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
        if optimization_level is not None:
            config.builder_optimization_level = int(optimization_level)
        for index, profile in enumerate(profiles):
            p = self.builder.create_optimization_profile()
            for name, r in profile.inputs.items():
                p.set_shape(name, r.min, r.opt, r.max)
            if config.add_optimization_profile(p) < 0:
                raise EngineError(
                    f"TensorRT rejected optimisation profile {index} ({profile.describe()})"
                    f"{_recent_errors(self.logger)}"
                )
        cache = None
        if timing_cache is not None:
            path = Path(timing_cache)
            blob = path.read_bytes() if path.is_file() else b""
            cache = config.create_timing_cache(blob)
            if cache is None and blob:
                log.warning("timing cache %s is unreadable (another TensorRT version?); starting a new one", path)
                cache = config.create_timing_cache(b"")
            if not config.set_timing_cache(cache, ignore_mismatch=False):
                # A cache from another GPU or TensorRT version is refused (ignore_mismatch=False): start afresh.
                log.warning("timing cache %s was made on another device or TensorRT version; starting a new one", path)
                cache = config.create_timing_cache(b"")
                config.set_timing_cache(cache, ignore_mismatch=False)
        monitor = None
        if progress_board is not None:
            monitor = make_progress_monitor(progress_board, self.logger)
            config.progress_monitor = monitor
        with keeping_ctrl_c(self.logger):
            serialized = self.builder.build_serialized_network(self.network, config)
        if progress_board is not None:
            progress_board.close()
        if serialized is None:
            raise EngineError(
                f"TensorRT could not build the engine{_recent_errors(self.logger)}; rerun with verbose=True "
                f"for TensorRT's log"
            )
        if timing_cache is not None:
            from wtconv_core.files import atomic_write_bytes

            atomic_write_bytes(timing_cache, config.get_timing_cache().serialize())
        del monitor
        return bytes(memoryview(serialized))

    def _set_compute_capabilities(self, config, targets) -> None:
        """TensorRT-RTX: the GPUs the engine is compiled for ('8.9', '12.0', or 'current')."""
        trt = self.trt
        if not hasattr(trt, "ComputeCapability"):
            raise ConfigurationError(
                f"{runtime_name(self.backend, trt.__version__)} has no target compute "
                f"capabilities (a TensorRT-RTX setting); drop --compute-capability"
            )
        members = [_compute_capability_member(trt, t) for t in targets]
        config.num_compute_capabilities = len(members)
        for index, member in enumerate(members):
            if not config.set_compute_capability(member, index):
                raise EngineError(
                    f"TensorRT-RTX refused target compute capability {targets[index]}{_recent_errors(self.logger)}"
                )


def _compute_capability_member(trt, text: str):
    if text == "current":
        return trt.ComputeCapability.CURRENT
    name = "SM" + text.replace(".", "")
    member = getattr(trt.ComputeCapability, name, None) if "." in text else None
    if member is None:
        known = ", ".join(compute_capability_names())
        raise ConfigurationError(
            f"compute_capabilities {text}: {runtime_name(backend_of(trt), trt.__version__)} "
            f"targets {known} (or 'current', the GPU of this machine)",
            parameter="compute_capabilities",
        )
    return member


def _dtype_name(trt, dtype) -> str:
    try:
        import numpy as np

        return np.dtype(trt.nptype(dtype)).name
    except TypeError:
        return str(dtype).rsplit(".", 1)[-1].lower()


# -------------------------------------------------------------------------------------------------------------
# Runtime
# -------------------------------------------------------------------------------------------------------------


class LoadedEngine:
    """A deserialized engine; keeps its runtime alive (the runtime must outlive the engine)."""

    def __init__(self, runtime, engine):
        self.runtime = runtime
        self.engine = engine

    def io(self) -> list[TensorIO]:
        """The engine's I/O tensors in its I/O order (dtype as a NumPy name)."""
        trt = import_tensorrt()
        out = []
        for i in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(i)
            mode = "input" if self.engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "output"
            out.append(
                TensorIO(
                    name=name,
                    mode=mode,
                    shape=tuple(int(d) for d in self.engine.get_tensor_shape(name)),
                    dtype=_dtype_name(trt, self.engine.get_tensor_dtype(name)),
                )
            )
        return out

    def num_profiles(self) -> int:
        return int(self.engine.num_optimization_profiles)


def deserialize_engine(engine_bytes, what: str = "engine") -> LoadedEngine:
    trt = import_tensorrt()
    logger = get_logger()
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise EngineError(
            f"{runtime_name(backend_of(trt), trt.__version__)} could not deserialize {what}"
            f"{_recent_errors(logger)}. Causes: no supported GPU here; the file is corrupt; it was "
            f"built by another TensorRT version or for another GPU; or the {contract.PLUGIN_NAME} plugin "
            f"is not loaded (pass --plugin). Fix: rebuild it here with wtconv-trt build"
        )
    return LoadedEngine(runtime, engine)


class ExecutionSession:
    """One execution context bound to device buffers (torch CUDA tensors) for fixed input shapes.

    Used by the benchmark: set_input_shape for each input, then outputs are sized from
    context.get_tensor_shape, addresses set once with set_tensor_address, and execute_async_v3 enqueues on
    ``torch_stream``."""

    def __init__(self, loaded: LoadedEngine, shapes: dict, profile_index: int, torch_stream):
        import numpy as np
        import torch

        self.context = loaded.engine.create_execution_context()
        if self.context is None:
            raise EngineError("TensorRT could not create an execution context (out of GPU memory?)")
        self.stream = torch_stream
        if profile_index:
            self.context.set_optimization_profile_async(profile_index, torch_stream.cuda_stream)
        self.buffers = {}
        io = loaded.io()
        for t in io:
            if t.mode == "input":
                if not self.context.set_input_shape(t.name, tuple(shapes[t.name])):
                    raise EngineError(f"TensorRT rejected shape {shapes[t.name]} for input {t.name!r}")
        fill_stream = torch.cuda.current_stream()
        for t in io:
            shape = tuple(self.context.get_tensor_shape(t.name))
            torch_dtype = getattr(torch, np.dtype(t.dtype).name)
            if t.mode == "input":
                buf = torch.randn(shape, device="cuda").to(torch_dtype)  # filled on PyTorch's current stream
            else:
                buf = torch.empty(shape, dtype=torch_dtype, device="cuda")
            buf.record_stream(torch_stream)  # used on torch_stream: keep the caching allocator from reusing it early
            self.buffers[t.name] = buf
            self.context.set_tensor_address(t.name, buf.data_ptr())
        # The inputs were written on the current stream; every enqueue on torch_stream must see them.
        torch_stream.wait_stream(fill_stream)

    def enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise EngineError("TensorRT execute_async_v3 failed (see TensorRT's messages above)")
