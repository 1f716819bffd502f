"""``wtconv-trt build-libs [--tensorrt-headers DIR]``: build the kernel library, the plugin libraries and the ONNX
Runtime custom-op library with CMake and install them where wtconv-trt looks for them (the per-user cache by
default; ``wtconv-trt doctor`` shows the lookup order). The job is wtconv_trt.api.libraries.build_libraries."""

from wtconv_trt import arguments

HELP = (
    "build the CUDA kernel library, (with TensorRT headers) the plugin libraries and (with ONNX Runtime's headers) "
    "libwtconv_ort.so, and install them"
)


def add_arguments(parser):
    parser.add_argument(
        "--tensorrt-headers",
        metavar="DIR",
        help="TensorRT install or its include/ folder (10.x for TensorRT 10, 11.x for TensorRT 11 and "
        "TensorRT-RTX); without it no plugin is built",
    )
    parser.add_argument(
        "--onnxruntime-headers",
        metavar="DIR",
        help="the include/ folder of ONNX Runtime's C API headers (1.17 or newer) for libwtconv_ort.so (default: "
        "$ONNXRUNTIME_INCLUDE_DIR, else a header set beside the checkout)",
    )
    parser.add_argument(
        "--no-cuda",
        action="store_true",
        help="build without nvcc even where it is found: libwtconv_ort.so with its CPU op alone (a C++ compiler is "
        "all it needs), no kernel library",
    )
    parser.add_argument(
        "--cuda-arch",
        metavar="LIST",
        help="CMAKE_CUDA_ARCHITECTURES, e.g. 90 or '80;86;89;90' or native (default: plugin/'s list)",
    )
    parser.add_argument(
        "--into-package",
        action="store_true",
        help="install into the package's own lib/ folder instead of the per-user cache",
    )
    parser.add_argument(
        "--source", metavar="DIR", help="the plugin/ folder of a checkout (default: beside the package)"
    )
    parser.add_argument("--build-dir", metavar="DIR", help="CMake build folder (default: in the per-user cache)")
    parser.add_argument(
        "--jobs", type=arguments.integer, metavar="N", help="parallel compile jobs, 1 to 1024 (default: CPU count)"
    )


def run(args) -> int:
    import sys

    from wtconv_trt.api.libraries import build_libraries

    built = build_libraries(
        args.tensorrt_headers,
        cuda_arch=args.cuda_arch,
        into_package=args.into_package,
        source=args.source,
        build_dir=args.build_dir,
        jobs=args.jobs,
        onnxruntime_headers=args.onnxruntime_headers,
        cuda=not args.no_cuda,
    )
    for kind, path in built.installed.items():
        what = built.describe(kind)
        print(f"{kind:14} {path}" + (f"  ({what})" if what else ""))
    for note in (built.ort_note, built.note, *built.shadowed):
        if note:
            print(f"({note})", file=sys.stderr)
    return 0
