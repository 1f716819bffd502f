"""``wtconv-trt build-libs [--tensorrt-headers DIR]``: build the kernel library and the plugin libraries with CMake
and install them where wtconv-trt looks for them (the per-user cache by default; ``wtconv-trt doctor`` shows
the lookup order)."""

from wtconv_trt import arguments

HELP = "build the CUDA kernel library and (with TensorRT headers) the plugin libraries, and install them"


def add_arguments(parser):
    parser.add_argument(
        "--tensorrt-headers",
        metavar="DIR",
        help="TensorRT install or its include/ folder (10.x for TensorRT 10, 11.x for TensorRT 11 and "
        "TensorRT-RTX); without it only the kernel library is built",
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
        "--jobs", type=arguments.int_range(1, 1024), metavar="N", help="parallel compile jobs (default: CPU count)"
    )


def run(args) -> int:
    import sys

    from wtconv_export import libraries
    from wtconv_export.library_build import build_libraries, headers_abi, tensorrt_root
    from wtconv_export.paths import check_output_dir

    # What the user gave, checked before the (long) build starts and before anything is printed.
    if args.tensorrt_headers:
        headers_abi(tensorrt_root(args.tensorrt_headers))
    if args.build_dir:
        check_output_dir(args.build_dir, option="--build-dir", force=True)
    root = libraries.package_lib_dir() if args.into_package else None
    print("building with CMake (a few minutes for several GPU architectures) ...", file=sys.stderr)
    installed = build_libraries(
        tensorrt_headers=args.tensorrt_headers,
        source=args.source,
        build_dir=args.build_dir,
        install_root=root,
        cuda_architectures=args.cuda_arch,
        jobs=args.jobs,
    )
    for kind, path in installed.items():
        print(f"{kind:14} {path}")
    if "plugin" not in installed:
        print("(no plugin: pass --tensorrt-headers DIR to build it)", file=sys.stderr)
    return 0
