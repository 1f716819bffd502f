"""Build the compiled libraries with CMake and install them where the lookup finds them (wtconv_libs.lookup).

Used by ``wtconv-trt build-libs`` and by the test suite's plugin fixture::

    from wtconv_libs.build import build_libraries
    installed = build_libraries(tensorrt_headers="TensorRT-11/include")   # -> {"kernels": Path, "plugin": ...}

CMake configures ``plugin/`` of the source checkout (the package's ``wtconv_libs`` sits beside it in an
editable install; pass ``source=`` otherwise), builds the kernel C API library (where nvcc is found), the two
plugin libraries (when TensorRT headers are given) and the ONNX Runtime custom-op library (when ONNX Runtime's C
API headers are found: :func:`onnxruntime_headers`; its CPU op needs only a C++ compiler, its CUDA op is added
where nvcc is found), then copies them into the per-user cache: ``lib/`` for the kernels and the ONNX Runtime
library, ``lib/<abi>/`` for the plugins, the ABI (``trt10`` / ``trt11``) read from the headers'
``NvInferVersion.h``. TensorRT-RTX uses plugins built against TensorRT 11 headers (plugin/README.md).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from wtconv_core.errors import ConfigurationError, InputError
from wtconv_core.files import atomic_copy
from wtconv_libs import lookup

log = logging.getLogger(__name__)

_TARGETS = {
    "kernels": "wtconv_kernels_capi",
    "plugin": "wtconv_trt_plugin_dynamic",
    "plugin-static": "wtconv_trt_plugin",
    "ort": "wtconv_ort",
}
_NEEDS_CUDA = ("kernels", "plugin", "plugin-static")
_SOURCE_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".c", ".txt", ".cmake", ".in", ".map"}
# Environment variable naming the folder with onnxruntime_c_api.h (the CMake cache variable of the same name).
ENV_ORT_HEADERS = "ONNXRUNTIME_INCLUDE_DIR"
_CUDA_DEFAULT = Path("/usr/local/cuda/bin/nvcc")


def default_source_dir() -> Path | None:
    """``plugin/`` of the checkout this package runs from, or None (an installed wheel has no sources)."""
    folder = lookup.build_tree_dir().parent.parent / "plugin"
    return folder if (folder / "CMakeLists.txt").is_file() else None


@functools.lru_cache(maxsize=1)
def cuda_gpu_count() -> int:
    """CUDA GPUs visible to this process, asked of the CUDA driver (libcuda) itself: 0 without a driver or a GPU.
    Needs neither PyTorch nor the CUDA toolkit."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def build_libs_command() -> str:
    """The ``build-libs`` command this machine needs for libwtconv_ort.so: with ``--no-cuda`` where no CUDA GPU is
    visible (the CUDA code would compile, for minutes, and never run here; docs/engines.md, "Compiled libraries")."""
    return "wtconv-trt build-libs" + ("" if cuda_gpu_count() else " --no-cuda")


def nvcc_path() -> Path | None:
    """nvcc on PATH, else the CUDA toolkit's default place, else None (then only the ONNX Runtime CPU op builds)."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    return _CUDA_DEFAULT if _CUDA_DEFAULT.is_file() else None


def onnxruntime_headers(given=None, source: Path | None = None) -> Path | None:
    """The folder holding ONNX Runtime's ``onnxruntime_c_api.h``: ``given`` (InputError when it has none), else the
    environment variable ``ONNXRUNTIME_INCLUDE_DIR``, else the newest header set beside a checkout
    (``../shared/onnxruntime-headers/<version>/include``, ``third_party/onnxruntime-headers/<version>/include``),
    else None."""
    if given is not None:
        path = Path(given).expanduser().resolve()
        for folder in (path, path / "include"):
            if (folder / "onnxruntime_c_api.h").is_file():
                return folder
        raise InputError(
            f"onnxruntime_headers {given}: no onnxruntime_c_api.h there; give the include/ folder of ONNX "
            "Runtime's C API headers (1.17 or newer)",
            parameter="onnxruntime_headers",
        )
    env = os.environ.get(ENV_ORT_HEADERS)
    if env and (Path(env) / "onnxruntime_c_api.h").is_file():
        return Path(env).resolve()
    source = Path(source) if source else default_source_dir()
    if source is None:
        return None
    repo = source.resolve().parent
    for base in (repo.parent / "shared" / "onnxruntime-headers", repo / "third_party" / "onnxruntime-headers"):
        sets = [p for p in base.glob("*/include") if (p / "onnxruntime_c_api.h").is_file()]
        if sets:
            return max(sets, key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.name.split(".")])
    return None


def tensorrt_root(headers) -> Path:
    """The TensorRT_ROOT CMake wants (the folder holding ``include/NvInferRuntime.h``), from either that folder
    or its ``include/``; InputError when no TensorRT headers are there."""
    path = Path(headers).expanduser().resolve()
    for root in (path, path.parent):
        if (root / "include" / "NvInferRuntime.h").is_file():
            return root
    raise InputError(
        f"tensorrt_headers {headers}: no include/NvInferRuntime.h there; give a TensorRT install or "
        f"the include/ folder of TensorRT's headers (TensorRT 10.x or 11.x; 11.x for TensorRT-RTX)",
        parameter="tensorrt_headers",
    )


def headers_abi(root: Path) -> str:
    """'trt10' / 'trt11' from NV_TENSORRT_MAJOR in the headers' NvInferVersion.h."""
    text = (Path(root) / "include" / "NvInferVersion.h").read_text(encoding="utf-8", errors="replace")
    match = re.search(r"#define\s+(?:NV_TENSORRT_MAJOR|TRT_MAJOR_ENTERPRISE)\s+(\d+)", text)
    if not match:
        raise InputError(f"{root}/include/NvInferVersion.h does not define NV_TENSORRT_MAJOR: not TensorRT headers?")
    abi = f"trt{match.group(1)}"
    if abi not in lookup.ABIS:
        raise InputError(f"TensorRT {match.group(1)} headers in {root}: the plugin supports TensorRT 10 and 11")
    return abi


def sources_digest(source: Path, *extra: str) -> str:
    """sha256 over the CMake sources under ``source`` (and ``extra`` words): a build made from the same sources
    with the same options can be reused."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(source).rglob("*") if p.is_file() and p.suffix in _SOURCE_SUFFIXES):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes() + b"\0")
    version = Path(source).parent / "pyproject.toml"
    if version.is_file():  # the package version is compiled into the libraries (plugin/CMakeLists.txt)
        match = re.search(r'(?m)^version\s*=\s*"([^"]+)"', version.read_text(encoding="utf-8"))
        digest.update((match.group(1) if match else "").encode() + b"\0")
    for word in extra:
        digest.update(word.encode() + b"\0")
    return digest.hexdigest()


def default_build_dir(source: Path, abi: str | None) -> Path:
    """CMake's build folder in the per-user cache, one per source tree and ABI: CMake refuses a build folder
    configured from another source folder ("does not match the source ... used to generate cache"), so a second
    clone, or a checkout that moved, gets its own."""
    tree = hashlib.sha256(str(Path(source).resolve()).encode()).hexdigest()[:12]
    return lookup.user_cache_dir() / "build" / f"{abi or 'kernels'}-{tree}"


# CMake's progress lines ("[ 42%] Building CUDA object ...", "[100%] Linking CXX shared library ..."), shown as
# the build goes; everything it prints goes to the log file.
_PROGRESS = re.compile(r"^\[\s*\d+%\]\s")


def _run(command: list[str], what: str, log_file: Path) -> None:
    log.info("%s: %s", what, " ".join(command))
    with open(log_file, "a", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
        )
        with process:
            for line in process.stdout:
                out.write(line)
                if _PROGRESS.match(line):
                    log.info("%s", line.rstrip())
        returncode = process.wait()
    if returncode != 0:
        tail = log_file.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise ConfigurationError(
            f"{what} failed (exit {returncode}); full log in {log_file}; last lines: "
            + " | ".join(line.strip() for line in tail if line.strip())
        )


def build_libraries(
    *,
    tensorrt_headers=None,
    source=None,
    build_dir=None,
    install_root=None,
    cuda_architectures: str | None = None,
    jobs: int | None = None,
    kinds=None,
    onnxruntime_include=None,
    with_cuda: bool = True,
    kernels_prebuilt=None,
) -> dict:
    """Configure, build and install the libraries; returns {kind: installed path}.

    ``kinds``: which of "kernels", "plugin", "plugin-static", "ort" (default: every one this machine can build:
    the kernels where nvcc is found, both plugins when ``tensorrt_headers`` is given, the ONNX Runtime library when
    its headers are found). ``onnxruntime_include``: the folder with ``onnxruntime_c_api.h`` (default:
    :func:`onnxruntime_headers`). ``with_cuda=False`` builds without nvcc even where it is found (the ONNX Runtime
    library then has its CPU op only). ``install_root``: default the per-user lib folder. ``cuda_architectures``:
    CMake's list ("90", "80;86;89;90", "native"); default plugin/CMakeLists.txt's. ``kernels_prebuilt``: the static
    kernels library (libwtconv_kernels.a) of another build of the same sources and architectures, linked instead of
    compiling the kernels again (plugin/README.md, WTCONV_KERNELS_PREBUILT)."""
    root = tensorrt_root(tensorrt_headers) if tensorrt_headers else None
    abi = headers_abi(root) if root else None
    source = Path(source) if source else default_source_dir()
    if source is None or not (source / "CMakeLists.txt").is_file():
        raise ConfigurationError(
            "the CMake sources (plugin/) are not beside this package: run from a checkout of "
            "the repository, or pass source=PATH/TO/plugin"
        )
    if shutil.which("cmake") is None:
        raise ConfigurationError("cmake is not on PATH: building the libraries needs CMake >= 3.24")
    nvcc = nvcc_path() if with_cuda else None
    ort_headers = onnxruntime_headers(onnxruntime_include, source)
    if kinds is None:
        kinds = (["kernels"] if nvcc else []) + (["plugin", "plugin-static"] if root else [])
        kinds += ["ort"] if ort_headers else []
        if not kinds:
            raise ConfigurationError(
                "nothing to build here: no CUDA toolkit (nvcc) for the kernels and plugins, and no ONNX Runtime C API "
                f"headers for libwtconv_ort.so (set {ENV_ORT_HEADERS} to the folder with onnxruntime_c_api.h)"
            )
    unknown = [k for k in kinds if k not in _TARGETS]
    if unknown:
        raise ValueError(f"library kinds {unknown}: expected some of {', '.join(_TARGETS)}")
    if any(k.startswith("plugin") for k in kinds) and root is None:
        raise InputError("the plugin libraries need TensorRT headers: pass tensorrt_headers=DIR")
    if any(k in _NEEDS_CUDA for k in kinds) and nvcc is None:
        raise ConfigurationError(
            f"nvcc is not on PATH: the {', '.join(k for k in kinds if k in _NEEDS_CUDA)} libraries need the CUDA "
            "toolkit (the ONNX Runtime library's CPU op builds without it)"
        )
    if "ort" in kinds and ort_headers is None:
        raise ConfigurationError(
            f"libwtconv_ort.so needs ONNX Runtime's C API headers (1.17 or newer): set {ENV_ORT_HEADERS} to the folder "
            "with onnxruntime_c_api.h"
        )
    build_dir = Path(build_dir) if build_dir else default_build_dir(source, abi)
    build_dir.mkdir(parents=True, exist_ok=True)
    log_file = build_dir / "build-libs.log"
    configure = [
        "cmake",
        "-S",
        str(source),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DWTCONV_BUILD_PLUGIN_HARNESS=OFF",
    ]
    if cuda_architectures:
        configure.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_architectures}")
    configure.append(f"-DWTCONV_KERNELS_PREBUILT={Path(kernels_prebuilt).resolve() if kernels_prebuilt else ''}")
    if root:
        configure.append(f"-DTensorRT_ROOT={root}")
    if ort_headers:
        configure.append(f"-DONNXRUNTIME_INCLUDE_DIR={ort_headers}")
    configure.append(f"-DWTCONV_WITH_CUDA={'ON' if nvcc else 'OFF'}")  # explicit: the option is cached
    if nvcc is not None and shutil.which("nvcc") is None:
        configure.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    _run(configure, "CMake configure", log_file)
    jobs = jobs or max(os.cpu_count() or 1, 1)
    _run(
        ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *(_TARGETS[k] for k in kinds)],
        "CMake build",
        log_file,
    )
    installed = {}
    for kind in kinds:
        built = build_dir / lookup.build_subdir(kind) / lookup.FILE_NAMES[kind]
        if not built.is_file():
            raise ConfigurationError(f"CMake did not produce {built}; see {log_file}")
        target_dir = lookup.install_dir(kind, None if kind in lookup.ABI_FREE else abi, install_root)
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / built.name
        atomic_copy(built, target)  # a process that loaded the old file keeps its mapping
        installed[kind] = target
    return installed


__all__ = [
    "ENV_ORT_HEADERS",
    "build_libraries",
    "build_libs_command",
    "cuda_gpu_count",
    "default_build_dir",
    "default_source_dir",
    "headers_abi",
    "nvcc_path",
    "onnxruntime_headers",
    "sources_digest",
    "tensorrt_root",
]
