"""``wtconv-trt doctor``: where the compiled libraries are looked for and found, which TensorRT / TensorRT-RTX /
ONNX Runtime / CUDA / GPU this machine has, and what can and cannot be done with them (the jobs:
wtconv_trt.api.libraries.doctor; ``--ort-library``: wtconv_trt.api.libraries.ort_library)."""

HELP = (
    "show the libraries found (in lookup order), TensorRT / TensorRT-RTX / ONNX Runtime / CUDA / GPU, and what works "
    "here"
)


def add_arguments(parser):
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--ort-library",
        action="store_true",
        help="print only the path of libwtconv_ort.so, the ONNX Runtime custom-op library, for "
        "SessionOptions.register_custom_ops_library(...) in any code (exit status 2 with the reason when none is "
        "built)",
    )
    only.add_argument(
        "--rtx-env",
        action="store_true",
        help="print only the environment line another process (e.g. polygraphy) needs to load "
        "plugins into TensorRT-RTX, for: env $(wtconv-trt doctor --rtx-env) polygraphy ...",
    )


def run(args) -> int:
    from wtconv_trt.api.libraries import doctor, ort_library

    if args.ort_library:
        print(ort_library())
        return 0
    report = doctor()
    found = report.survey
    if args.rtx_env:
        line = report.rtx_environment_words()
        if line:
            print(line)
        return 0

    mark = {True: "yes", False: "no ", None: "   "}
    print(
        "Compiled libraries, in lookup order (first existing one is used; "
        + report.cache_variable
        + f" moves the per-user cache, now {report.cache_dir}):"
    )
    for kind, rows in found.libraries.items():
        print(f"  {kind} ({report.file_names[kind]}):")
        for candidate, note in rows:
            print(
                f"    [{'found' if candidate.exists else '  -  '}] {candidate.where:22} {candidate.path}"
                + (f"  ({note})" if note and note != "found" else "")
            )
    print("\nSoftware and hardware:")
    for f in found.software:
        print(f"  [{mark[f.ok]}] {f.what:14} {f.detail}")
    if found.rtx_environment:
        print(
            "\nTensorRT-RTX's parser needs libtensorrt_rtx.so, which its wheel lacks: wtconv-trt links it in the "
            "per-user cache by itself; another process (polygraphy convert --plugins) needs:\n  "
            + found.rtx_environment
        )
    print("\nWhat works here:")
    for f in found.can:
        print(f"  [{mark[f.ok]}] {f.what}: {f.detail}")
    return 0
