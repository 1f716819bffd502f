"""Build a TensorRT engine from an exported ONNX model, with our plugin, and write its manifest.

The whole job, every check and default included (``wtconv-trt build`` only maps its options onto BuildOptions;
from Python, ``wtconv_trt.build_engine`` takes the same options as keyword arguments)::

    from trt_engine.build import BuildOptions, build_engine
    result = build_engine(BuildOptions(onnx="wtconvnext_fp16.onnx",
                                       plugin="build/plugin/trt/libwtconv_trt_plugin_dynamic.so",
                                       shapes=["input:1x1x32x32/8x1x32x32/32x1x32x32"]))
    print(result.engine_path, result.manifest_path, result.notes)

Everything but the TensorRT calls themselves (tensorrt_api.NetworkBuilder) is decided here in plain Python
and tested on the CPU, before TensorRT is imported (plan_build): the option values, the defaults taken from the
export (precision, profile), the profiles against the model (channels, smallest size, TensorRT's 2^31 elements
per tensor), the plugin library, where the engine and its manifest go, the source model record. Then the typing
mode per TensorRT major (decide_typing), the build, the progress display and the manifest.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from trt_engine import manifest as mf
from trt_engine.activations import MAX_TENSOR_ELEMENTS, check_activations, weightless_model
from trt_engine.profiles import check_profile_against_inputs, default_profile, parse_profile
from trt_engine.progress_board import ProgressBoard
from wtconv_core.errors import ConfigurationError, InputError, ModelError, PluginError
from wtconv_core.files import atomic_write_bytes
from wtconv_core.inputs import check_choice, check_int
from wtconv_export.exported import ExportedModel, parse_source_model
from wtconv_libs import contract

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16")
BACKENDS = ("auto", "tensorrt", "tensorrt-rtx")
# TensorRT indexes most tensors with 32-bit offsets: a profile whose largest input has more elements cannot build.
MAX_INPUT_ELEMENTS = MAX_TENSOR_ELEMENTS
MAX_WORKSPACE_MIB = 1 << 24  # 16 TiB: more than any GPU has
OPTIMIZATION_LEVELS = (0, 5)  # IBuilderConfig.builder_optimization_level; TensorRT's default is 3


class NoPluginNodesWarning(UserWarning):
    """The ONNX model has no WTConv2d node: the engine is built from standard operators only."""


# -------------------------------------------------------------------------------------------------------------
# Typing mode: which network flag and builder flag give the requested precision on this TensorRT
# -------------------------------------------------------------------------------------------------------------


def decide_typing(trt_major: int, precision: str, onnx_dtype: str, backend: str = "tensorrt") -> tuple[bool, bool]:
    """(strongly_typed, fp16_builder_flag) for TensorRT ``trt_major``, the requested ``precision`` ("fp32" /
    "fp16") and the ONNX model's input dtype ("float32" / "float16").

    - TensorRT-RTX (``backend="tensorrt-rtx"``, any version): as TensorRT 11 (always strongly typed, no FP16
      builder flag; its Python BuilderFlag has no FP16 member).

    - TensorRT 11: networks are always strongly typed and BuilderFlag.FP16 no longer exists (NvInfer.h v11.1:
      BuilderFlag starts at kDEBUG = 2; kSTRONGLY_TYPED "Deprecated in TensorRT 11.0. Strongly typed mode is
      always enabled"). The engine's precision is the ONNX model's: fp16 needs an fp16 export.
    - TensorRT 10: an fp16 ONNX model is built strongly typed (its types are kept exactly, as on 11); an fp32
      model with precision fp16 is built weakly typed with BuilderFlag.FP16 (NvInfer.h v10.16: kFP16 = 0,
      "Deprecated in TensorRT 10.12. Superseded by strong typing"), which lets TensorRT choose fp16 per layer
      and keeps fp32 I/O. fp32 is built strongly typed.
    """
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}", parameter="precision")
    if onnx_dtype not in ("float32", "float16"):
        raise ModelError(
            f"the ONNX model's input is {onnx_dtype}; expected float32 or float16 (export it with "
            f"wtconv-trt export --precision fp32|fp16)"
        )
    if backend == "tensorrt-rtx":
        trt_major = 11  # same typing rules as TensorRT 11
    if trt_major < 10:
        raise ConfigurationError(
            f"TensorRT {trt_major}.x is not supported: the WTConv2d plugin needs TensorRT 10 or 11"
        )
    if precision == "fp32" and onnx_dtype == "float16":
        raise ModelError(
            "precision fp32 was asked but the ONNX model is fp16: build it with precision=fp16, or "
            "build the fp32 export (wtconv-trt export --precision fp32)",
            parameter="precision",
        )
    if trt_major >= 11:
        if precision == "fp16" and onnx_dtype != "float16":
            runtime = "TensorRT-RTX" if backend == "tensorrt-rtx" else f"TensorRT {trt_major}"
            raise ModelError(
                f"{runtime} has no FP16 builder flag (networks are always strongly typed), "
                f"so an fp16 engine needs an fp16 ONNX model and this one is fp32: export with "
                f"'wtconv-trt export --precision fp16' and build that file"
            )
        return True, False
    # TensorRT 10
    if onnx_dtype == "float16":
        return True, False
    if precision == "fp16":
        return False, True
    return True, False


# -------------------------------------------------------------------------------------------------------------
# The build
# -------------------------------------------------------------------------------------------------------------


@dataclass
class BuildOptions:
    """What to build. Every field has the meaning of the ``wtconv-trt build`` option of the same name."""

    onnx: str
    precision: str | None = None  # "fp32" | "fp16"; default: the export's (fp16 for an fp16 export)
    plugin: str | None = None  # the dynamic plugin library; default: the one found for this TensorRT's ABI
    shapes: list = field(default_factory=list)  # "--shapes" strings, one per profile; default: default_shapes
    engine: str | None = None  # default: MODEL.<precision>.engine beside the ONNX model
    timing_cache: str | None = None
    workspace_mib: int | None = None
    optimization_level: int | None = None
    tf32: bool = True
    source_model: str | None = None  # "default" | "ARCH:CHECKPOINT" | JSON; default: ONNX metadata
    backend: str = "auto"  # "auto" | "tensorrt" | "tensorrt-rtx" (trt_engine.backends)
    compute_capabilities: list | None = None  # TensorRT-RTX targets ("8.9", "current"); default: all it has
    progress: bool = True
    verbose: bool = False
    force: bool = False  # replace an existing engine and manifest


@dataclass
class BuildResult:
    engine_path: Path
    manifest_path: Path
    manifest: mf.EngineManifest
    seconds: float
    notes: list = field(default_factory=list)  # the defaults taken (precision, profile), one line each

    def summary(self) -> str:
        """What was built, as ``wtconv-trt build`` prints it: the engine, its manifest and its I/O tensors."""
        m = self.manifest
        runtime = mf.RUNTIME_NAMES.get(m.backend, m.backend)
        lines = [
            f"engine:   {self.engine_path} ({m.engine_bytes / 2**20:.1f} MiB, {runtime} "
            f"{m.tensorrt_version}, {m.precision}, built in {self.seconds:.1f} s)",
            f"manifest: {self.manifest_path}",
        ]
        lines += [f"  {t.mode:6} {t.name}: {t.dtype} {list(t.shape)}" for t in m.io]
        return "\n".join(lines)


def default_engine_path(onnx_path, precision: str) -> Path:
    """MODEL.<precision>.engine beside the ONNX model; MODEL.engine when its name already ends with the precision
    (tiny_fp16.onnx -> tiny_fp16.engine, not tiny_fp16.fp16.engine)."""
    import re

    onnx_path = Path(onnx_path)
    if re.search(rf"(^|[._-]){precision}$", onnx_path.stem, re.IGNORECASE):
        return onnx_path.with_name(f"{onnx_path.stem}.engine")
    return onnx_path.with_name(f"{onnx_path.stem}.{precision}.engine")


def plan_profiles(shapes: list, onnx_inputs: dict) -> list:
    """Profiles from the --shapes strings (default: batch 1/8/32), checked against the model's inputs."""
    names = list(onnx_inputs)
    if not shapes:
        return [default_profile(onnx_inputs)]
    return [check_profile_against_inputs(parse_profile(s, names), onnx_inputs) for s in shapes]


def check_plugin_need(info: ExportedModel, plugin) -> None:
    """Warn when the model has no WTConv2d node; fail when it has some and no plugin library was given."""
    if info.wtconv_nodes == 0:
        warnings.warn(
            f"the ONNX model has no {contract.OP_TYPE} node: the engine is built from standard ONNX "
            f"operators only (the fused plugin is not used); export with --ops plugin to use it",
            NoPluginNodesWarning,
            stacklevel=3,
        )
    elif not plugin:
        raise InputError(
            f"the ONNX model has {info.wtconv_nodes} {contract.OP_TYPE} nodes, which need our TensorRT "
            f"plugin: pass --plugin PATH/libwtconv_trt_plugin_dynamic.so (none was found: build it with "
            f"wtconv-trt build-libs --tensorrt-headers DIR; 'wtconv-trt doctor' shows where it is "
            f"looked for), or export with --ops standard"
        )


# -------------------------------------------------------------------------------------------------------------
# Defaults taken from the export, and the checks made before TensorRT is imported
# -------------------------------------------------------------------------------------------------------------


def default_precision(info: ExportedModel) -> tuple[str, str]:
    """(precision, note): the export's precision (fp16 for an fp16 export, fp32 otherwise) and the line saying so."""
    if info.input_dtype == "float16":
        return "fp16", "precision: fp16 (the export's)"
    return "fp32", (
        "precision: fp32 (the export's; an fp16 engine needs 'wtconv-trt export --precision fp16', "
        "or --precision fp16 with TensorRT 10)"
    )


def rendering_note(info: ExportedModel) -> str | None:
    """The line saying that an fp16 export rendered for ONNX Runtime has fp16 LayerNorms, which a strongly typed
    TensorRT network computes in fp16 (docs/onnx_export.md, "Rendering for the runtime"); None otherwise."""
    if info.input_dtype != "float16" or info.metadata.get("runtime") != "onnxruntime":
        return None
    return (
        "rendering: this fp16 export was rendered for onnxruntime, its LayerNorms read fp16 and TensorRT computes "
        "them in fp16; 'wtconv-trt export --precision fp16 --runtime tensorrt' keeps them in fp32"
    )


def default_shapes(info: ExportedModel) -> tuple[list, str | None]:
    """(shapes, note) when none are given: for a single 4-D input with dynamic height and width, batch 1/8/32 at
    the export's example size (its ``input_shape`` metadata) and the line saying so; otherwise ([], None), which
    plan_profiles turns into batch 1/8/32 at the model's fixed size."""
    from wtconv_core.inputs import parse_shape

    if len(info.inputs) != 1:
        return [], None
    name, dims = next(iter(info.input_dims.items()))
    dynamic = [i for i, d in enumerate(dims) if not (isinstance(d, int) and d >= 0)]
    example = info.metadata.get("input_shape")
    if not example or len(dims) != 4 or not set(dynamic) - {0}:
        return [], None
    _, channels, height, width = parse_shape(example, "the export's input_shape metadata")
    shapes = "/".join(f"{b}x{channels}x{height}x{width}" for b in (1, 8, 32))
    note = f"profile: {name}:{shapes} (batch 1/8/32 at the export's {height}x{width}; give --shapes for other sizes)"
    return [f"{name}:{shapes}"], note


def check_profile_sizes(profiles: list) -> None:
    """No profile's max shape may exceed TensorRT's MAX_INPUT_ELEMENTS elements per tensor."""
    for profile in profiles:
        for name, r in profile.inputs.items():
            elements = 1
            for d in r.max:
                elements *= d
            if elements > MAX_INPUT_ELEMENTS:
                raise InputError(
                    f"shapes {name}: the max shape {'x'.join(map(str, r.max))} has {elements} "
                    f"elements, more than TensorRT's {MAX_INPUT_ELEMENTS} per tensor; give a smaller "
                    f"max batch or size",
                    parameter="shapes",
                )


def check_profiles_fit_model(info: ExportedModel, profiles: list) -> None:
    """Every profile's min, opt and max shape must fit the exported model (its channels, its smallest height and
    width), read from the architecture the ONNX metadata names: TensorRT would otherwise fail late or build an
    engine that cannot run those shapes."""
    from wtconv_export.model_checks import architecture_of, check_input_shape

    model = architecture_of(info.metadata) if len(info.inputs) == 1 else None
    if model is None:
        return
    for profile in profiles:
        for name, r in profile.inputs.items():
            if len(r.min) != 4:
                continue
            for which, shape in (("min", r.min), ("opt", r.opt), ("max", r.max)):
                check_input_shape(model, shape, f"shapes {name} {which}", limit_memory=False, suggest=False)


def check_dynamic_plugin(path) -> None:
    """``path`` must be the dynamic WTConv2d plugin library (it exports getCreators): TensorRT's
    loadLibrary registers nothing from the static-registration one or from another library."""
    from wtconv_libs.plugin_elf import inspect_library

    library = inspect_library(path)  # exists and is a shared library (PluginError otherwise)
    if not library.exports_get_creators:
        raise PluginError(
            f"plugin {path} is a shared library but not the dynamic WTConv2d plugin (it "
            f"exports no getCreators); pass build/plugin/trt/libwtconv_trt_plugin_dynamic.so",
            parameter="plugin",
        )


@dataclass
class BuildPlan:
    """Everything decided before TensorRT is imported: the options with their defaults filled in, the ONNX model's
    description, the profiles, where the engine goes, the source model record and the notes on the defaults."""

    opts: BuildOptions
    info: ExportedModel
    profiles: list
    engine_path: Path
    source: dict | None
    notes: list


def plan_build(opts: BuildOptions) -> BuildPlan:
    """The CPU side of a build: every option and file checked, every default taken, in the order a user fixes them
    (option values, the ONNX model, the profiles against it, the plugin library, the outputs). Nothing is written
    and TensorRT is not imported; WtconvTrtError subclasses say what to change."""
    from wtconv_core.paths import check_not_an_input, check_output_file

    if opts.precision is not None:
        check_choice(opts.precision, "precision", PRECISIONS)
    check_choice(opts.backend, "backend", BACKENDS)
    if opts.workspace_mib is not None:
        check_int(opts.workspace_mib, "workspace_mib", 1, MAX_WORKSPACE_MIB, " MiB")
    if opts.optimization_level is not None:
        check_int(opts.optimization_level, "optimization_level", *OPTIMIZATION_LEVELS)
    info = ExportedModel.read(opts.onnx)
    notes = []
    precision, shapes = opts.precision, list(opts.shapes or [])
    if precision is None:
        precision, note = default_precision(info)
        notes.append(note)
    if not shapes:
        shapes, note = default_shapes(info)
        notes += [note] if note else []
    notes += [note] if (note := rendering_note(info)) else []
    profiles = plan_profiles(shapes, info.input_dims)
    check_profile_sizes(profiles)
    # every layer's output at the max shapes, not only the input
    check_activations(weightless_model(info.proto), profiles)
    if opts.plugin:
        check_dynamic_plugin(opts.plugin)
    check_profiles_fit_model(info, profiles)
    engine = opts.engine or str(default_engine_path(opts.onnx, precision))
    if str(engine).lower().endswith(".json"):
        # ENGINE.json is the manifest beside ENGINE: an engine of that name would overwrite another engine's manifest.
        raise InputError(
            f"engine {engine}: an engine's name must not end in .json, the name of the manifest beside every engine "
            f"(ENGINE.json); choose a name such as {str(engine)[: -len('.json')] or 'model.engine'}",
            parameter="engine",
        )
    inputs = [("ONNX model", opts.onnx), ("plugin library", opts.plugin)]
    check_not_an_input(inputs, files=[("timing_cache", opts.timing_cache)])
    inputs.append(("timing cache", opts.timing_cache))
    check_not_an_input(inputs, files=[("engine", engine), ("engine", mf.manifest_path(engine))])
    check_output_file(engine, option="engine", force=opts.force)
    check_output_file(engine + ".json", option="engine (its manifest)", force=opts.force)
    if opts.timing_cache:
        check_output_file(opts.timing_cache, option="timing_cache", force=True)  # a cache is meant to be rewritten
    if info.wtconv_nodes == 0 or not opts.plugin:
        from wtconv_libs.lookup import default_plugin

        if info.wtconv_nodes == 0 or default_plugin() is None:
            check_plugin_need(info, opts.plugin)  # warns (standard operators only) or says how to get the plugin
    source = parse_source_model(opts.source_model) or info.source
    resolved = dataclasses.replace(opts, precision=precision, shapes=shapes, engine=engine)
    return BuildPlan(resolved, info, profiles, Path(engine), source, notes)


def build_engine(opts: BuildOptions) -> BuildResult:
    """Check the inputs and take the defaults (plan_build, CPU), then build with TensorRT or TensorRT-RTX and write
    the engine and its manifest atomically. The notes on the defaults taken are logged (INFO) before the build
    starts and returned in the result."""
    from trt_engine import backends, tensorrt_api
    from trt_engine.plugins import runnable_targets
    from wtconv_libs.abi import expected_abi, runtime_name
    from wtconv_libs.lookup import default_plugin

    start = time.monotonic()
    plan = plan_build(opts)
    for note in plan.notes:  # the defaults chosen, said once everything given is known to be usable
        log.info("%s", note)
    opts, info, profiles, engine_path, source = plan.opts, plan.info, plan.profiles, plan.engine_path, plan.source

    backend = tensorrt_api.use_backend(opts.backend)  # ConfigurationError when it is not installed
    if opts.compute_capabilities and backend != backends.TENSORRT_RTX:
        raise InputError(
            "compute_capabilities is a TensorRT-RTX setting; TensorRT builds for the GPU it runs on "
            "(leave it out, or pass backend=tensorrt-rtx)",
            parameter="compute_capabilities",
        )
    trt = tensorrt_api.import_tensorrt()
    trt_version = trt.__version__
    runtime = runtime_name(backend, trt_version)
    major = mf.parse_version(trt_version)[0]
    strongly_typed, fp16_flag = decide_typing(major, opts.precision, info.input_dtype, backend)
    if not opts.plugin and info.wtconv_nodes:
        abi = expected_abi(backend, major)
        found = default_plugin(abi=abi)
        if found is None:
            raise PluginError(
                f"the ONNX model has {info.wtconv_nodes} {contract.OP_TYPE} nodes and the plugin "
                f"libraries found are not built for {runtime} (ABI {abi}): build one with wtconv-trt "
                f"build-libs --tensorrt-headers <TensorRT {abi[3:]}.x include dir>, or pass plugin=LIBRARY"
            )
        log.info("using the plugin library %s", found)
        opts.plugin = str(found)
    compute_capabilities = None
    if backend == backends.TENSORRT_RTX:
        # Default: every GPU generation from Ampere up that this TensorRT-RTX compiles for, so the engine runs on
        # any of them (and the build needs no GPU); --compute-capability narrows or changes the list.
        known = tensorrt_api.compute_capability_names()
        compute_capabilities = list(opts.compute_capabilities or tensorrt_api.default_compute_capabilities())
        unknown = [c for c in compute_capabilities if c != "current" and c not in known]
        if unknown:
            raise InputError(
                f"compute_capabilities {', '.join(unknown)}: {runtime} compiles for "
                f"{', '.join(known)} (or 'current', the GPU of this machine)",
                parameter="compute_capabilities",
            )
        compute_capabilities = runnable_targets(opts.plugin, compute_capabilities, bool(opts.compute_capabilities))

    plugin_record = None
    if opts.plugin:
        plugin_record = tensorrt_api.load_plugin(opts.plugin)
        plugin_record = dataclasses.replace(plugin_record, library_sha256=mf.sha256_file(opts.plugin))
    builder = tensorrt_api.NetworkBuilder(strongly_typed, verbose=opts.verbose)
    builder.parse(opts.onnx)
    # The parser's view of the inputs is authoritative (it may fold shapes): re-check the profiles against it.
    profiles = [check_profile_against_inputs(p, builder.inputs()) for p in profiles]
    plugin_layers = builder.plugin_layer_count()
    if plugin_layers != info.wtconv_nodes:
        log.warning(
            "the ONNX model has %d %s nodes but the TensorRT network has %d plugin layers",
            info.wtconv_nodes,
            contract.OP_TYPE,
            plugin_layers,
        )
    typing = "strongly typed" if strongly_typed else "weakly typed, BuilderFlag.FP16"
    targets = f"; compute capabilities {', '.join(compute_capabilities)}" if compute_capabilities else ""
    log.info(
        "building %s engine with %s (%s; %d plugin layers%s; profiles: %s)",
        opts.precision,
        runtime,
        typing,
        plugin_layers,
        targets,
        "; ".join(p.describe() for p in profiles),
    )
    engine_bytes = builder.build(
        profiles=profiles,
        fp16_flag=fp16_flag,
        tf32=opts.tf32,
        timing_cache=opts.timing_cache,
        progress_board=ProgressBoard() if opts.progress else None,
        workspace_bytes=opts.workspace_mib * (1 << 20) if opts.workspace_mib else None,
        optimization_level=opts.optimization_level,
        compute_capabilities=compute_capabilities,
    )
    if backend == backends.TENSORRT_RTX:
        # A TensorRT-RTX engine deserializes only on a GPU of its target compute capabilities, which the building
        # machine need not have: the I/O tensors come from the network (dynamic dimensions as -1).
        io = builder.io()
    else:
        # Deserialize once here: catches a plugin that cannot deserialize itself before anyone ships the engine,
        # and gives the I/O tensors exactly as the engine has them.
        loaded = tensorrt_api.deserialize_engine(engine_bytes, "the engine just built")
        io = loaded.io()
        del loaded

    atomic_write_bytes(engine_path, engine_bytes)
    manifest = mf.EngineManifest(
        engine_file=engine_path.name,
        engine_sha256=mf.sha256_bytes(engine_bytes),
        engine_bytes=len(engine_bytes),
        onnx_file=os.path.abspath(opts.onnx),
        onnx_sha256=mf.sha256_file(opts.onnx),
        wtconv_nodes=info.wtconv_nodes,
        onnx_input_dtype=info.input_dtype,
        source_model=source,
        tensorrt_version=trt_version,
        plugin=plugin_record,
        precision=opts.precision,
        strongly_typed=strongly_typed,
        fp16_flag=fp16_flag,
        tf32=opts.tf32,
        profiles=profiles,
        io=io,
        build={
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "plugin_layers": plugin_layers,
            "timing_cache": opts.timing_cache,
            "workspace_mib": opts.workspace_mib,
            "optimization_level": opts.optimization_level,
            "compute_capabilities": compute_capabilities,
            "seconds": round(time.monotonic() - start, 1),
        },
        backend=backend,
    )
    manifest_file = mf.write_manifest(engine_path, manifest)
    return BuildResult(engine_path, manifest_file, manifest, time.monotonic() - start, plan.notes)
