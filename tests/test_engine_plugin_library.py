"""Plugin library inspection without loading it (trt_engine.plugins, pyelftools): which kind (getCreators or
static registration), which TensorRT it links, which ABI its record names; the refusals built on that (build,
validate and bench through load_plugin, triton-repo through check_static_library); the library lookup order
(wtconv_libs.lookup). Real shared libraries are built with the C compiler."""

import re
import shutil
import subprocess
import types
from pathlib import Path

import pytest
from engine_helpers import fake_engine

from wtconv_core.errors import PluginError
from wtconv_libs import lookup
from wtconv_libs.abi import check_library_for_tensorrt
from wtconv_libs.lookup import default_plugin
from wtconv_libs.plugin_elf import inspect_library, parse_abi_record


def _record(abi, library="dynamic", tensorrt=None):
    version = tensorrt or {"trt10": "10.16.0", "trt11": "11.1.0"}[abi]
    return (
        f"wtconv_trt_plugin format=1 library={library} abi={abi} tensorrt={version} "
        f"tensorrt_rtx_abi={'yes' if abi == 'trt11' else 'no'} plugin=WTConv2d plugin_version=1 "
        f"package_version=0.1.0 future_key=ignored"
    )


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build test shared libraries")
    d = tmp_path_factory.mktemp("libs")

    def build(name, source, *extra):
        (d / f"{name}.c").write_text(source)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / name), str(d / f"{name}.c"), *extra], check=True)
        return d / name

    def abi_section(text):
        # As plugin/trt/wtconvPluginAbi.h defines it: a NUL-terminated line in its own ELF section.
        return f'__attribute__((section(".wtconv_trt_abi"), used)) const char wtconvTrtAbiRecord[] = "{text}";\n'

    dynamic_source = "void* getCreators(int* n) { *n = 0; return 0; }\nvoid setLoggerFinder(void* f) { (void)f; }\n"
    # Stand-in libnvinfer.so.10 / .so.11 (only their sonames matter: they become the plugin's DT_NEEDED entry).
    for major in (10, 11):
        build(
            f"libnvinfer.so.{major}", "int getPluginRegistry(void) { return 0; }", f"-Wl,-soname,libnvinfer.so.{major}"
        )
    static_source = (
        "extern int getPluginRegistry(void);\n"
        "__attribute__((constructor)) static void reg(void) { getPluginRegistry(); }\n"
    )
    libc = ("-Wl,--no-as-needed", "-lc")  # a DT_NEEDED entry, as every real library has
    return {
        "dynamic": build("libdyn.so", dynamic_source, *libc),
        "dynamic10": build("libdyn10.so", dynamic_source + abi_section(_record("trt10")), *libc),
        "dynamic11": build("libdyn11.so", dynamic_source + abi_section(_record("trt11")), *libc),
        "static": build("libstatic.so", static_source, f"-L{d}", "-l:libnvinfer.so.10"),
        "static10": build(
            "libstatic10.so", static_source + abi_section(_record("trt10", "static")), f"-L{d}", "-l:libnvinfer.so.10"
        ),
        "static_unlinked": build("libstatic_unlinked.so", static_source + abi_section(_record("trt10", "static"))),
        # Built from headers alone, as the binary wheel's: it finds libnvinfer.so.10 when loaded, and says so.
        "static_at_load": build(
            "libstatic_at_load.so", abi_section(_record("trt10", "static") + " libnvinfer=load"), *libc
        ),
        "dir": d,
    }


def test_dynamic_library(libs):
    info = inspect_library(libs["dynamic"])
    assert info.exports_get_creators and "setLoggerFinder" in info.defined_symbols
    assert "getPluginRegistry" not in info.defined_symbols
    assert info.kind == "dynamic"
    assert info.nvinfer_major is None and info.abi is None and info.abi_record is None
    check_library_for_tensorrt(info, 10)  # no record, no libnvinfer: nothing to refuse
    check_library_for_tensorrt(info, 11)


def test_abi_record_is_read_without_loading(libs):
    info = inspect_library(libs["dynamic11"])
    assert info.abi == "trt11" and info.kind == "dynamic"
    assert info.abi_record["tensorrt"] == "11.1.0" and info.abi_record["plugin"] == "WTConv2d"
    assert info.abi_record["future_key"] == "ignored"  # unknown keys are kept, not an error
    assert parse_abi_record("something else abi=trt11") is None
    assert parse_abi_record(_record("trt10") + "\0")["abi"] == "trt10"


def test_abi_refusals_name_both_sides(libs):
    trt10 = inspect_library(libs["dynamic10"])
    trt11 = inspect_library(libs["dynamic11"])
    check_library_for_tensorrt(trt10, 10, "tensorrt", "10.16.0.72")
    check_library_for_tensorrt(trt11, 11, "tensorrt", "11.1.0.2")
    check_library_for_tensorrt(trt11, 1, "tensorrt-rtx", "1.7.1.116")  # TensorRT-RTX 1.x uses the trt11 ABI
    with pytest.raises(
        PluginError,
        match=r"built for ABI trt10 \(TensorRT 10\.16\.0 headers\), but "
        r"TensorRT 11\.1\.0\.2 "
        r"needs a plugin built for ABI trt11",
    ):
        check_library_for_tensorrt(trt10, 11, "tensorrt", "11.1.0.2")
    with pytest.raises(
        PluginError,
        match=r"ABI trt10 .* but TensorRT-RTX 1\.7\.1\.116 needs a plugin built for "
        r"ABI trt11",
    ):
        check_library_for_tensorrt(trt10, 1, "tensorrt-rtx", "1.7.1.116")
    with pytest.raises(PluginError, match=r"ABI trt11 .* but TensorRT 10\.16\.0\.72 needs .* ABI trt10"):
        check_library_for_tensorrt(trt11, 10, "tensorrt", "10.16.0.72")


def test_static_registration_library_and_wrong_major(libs):
    info = inspect_library(libs["static"])
    assert not info.exports_get_creators
    assert info.kind == "static-registration"
    assert "libnvinfer.so.10" in info.needed and info.nvinfer_major == 10
    assert "getPluginRegistry" not in info.defined_symbols  # undefined: resolved from libnvinfer
    check_library_for_tensorrt(info, 10)
    with pytest.raises(
        PluginError,
        match=r"links libnvinfer.so.10 \(TensorRT 10\) but TensorRT 11 is in use: "
        r"rebuild the plugin against TensorRT 11",
    ):
        check_library_for_tensorrt(info, 11)
    with pytest.raises(PluginError, match="links libnvinfer.so.10 .* which TensorRT-RTX 1.7 does not provide"):
        check_library_for_tensorrt(info, 1, "tensorrt-rtx", "1.7")


def test_not_a_library(tmp_path):
    with pytest.raises(PluginError, match="does not exist; build it"):
        inspect_library(tmp_path / "missing.so")
    text = tmp_path / "lib.so"
    text.write_text("hello")
    with pytest.raises(PluginError, match="not an ELF shared library"):
        inspect_library(text)
    with pytest.raises(PluginError, match="not a file"):
        inspect_library(tmp_path)


def test_object_file_is_not_a_shared_library(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "o.c").write_text("int f(void) { return 1; }\n")
    subprocess.run([cc, "-c", "-fPIC", "-o", str(tmp_path / "o.o"), str(tmp_path / "o.c")], check=True)
    with pytest.raises(PluginError, match="not a shared library .*ET_REL"):
        inspect_library(tmp_path / "o.o")


@pytest.mark.parametrize("keep", [20, 64, 200, 2000])
def test_truncated_library(libs, tmp_path, keep):
    cut = tmp_path / "cut.so"
    cut.write_bytes(libs["dynamic11"].read_bytes()[:keep])
    with pytest.raises(PluginError, match="truncated or damaged"):
        inspect_library(cut)


def _stand_in_tensorrt(monkeypatch, version):
    """A TensorRT module without a plugin registry: reaching the loading step would fail differently."""
    from trt_engine import tensorrt_api

    monkeypatch.setattr(tensorrt_api, "import_tensorrt", lambda: types.SimpleNamespace(__version__=version))


def test_wrong_major_is_reported_before_tensorrt_loads_anything(libs, monkeypatch):
    """load_plugin (build, validate and bench all load through it) reads the library's ELF first: a plugin for
    another TensorRT is refused with the fix, before the plugin registry is touched."""
    from trt_engine import tensorrt_api

    _stand_in_tensorrt(monkeypatch, "11.1.0.5")
    with pytest.raises(PluginError, match="links libnvinfer.so.10 .* TensorRT 11.1.0.5 is in use"):
        tensorrt_api.load_plugin(libs["static"])
    with pytest.raises(PluginError, match="ABI trt10 .* TensorRT 11.1.0.5 needs a plugin built for ABI trt11"):
        tensorrt_api.load_plugin(libs["dynamic10"])


def test_wrong_abi_refused_by_validate_and_bench_loading(libs, tmp_path, monkeypatch):
    """The engine-run path (validate, bench: engine_file.load_engine_for_run) refuses a plugin of another ABI by
    name, before deserializing anything."""
    from trt_engine import tensorrt_api
    from trt_engine.engine_file import load_engine_for_run, open_engine

    engine, _ = fake_engine(tmp_path, trt_version="11.1.0.5")
    _stand_in_tensorrt(monkeypatch, "11.1.0.5")
    monkeypatch.setattr(tensorrt_api, "prefer_backend", lambda name: None)
    with pytest.raises(
        PluginError, match="built for ABI trt10 .* TensorRT 11.1.0.5 needs a plugin built for ABI trt11"
    ):
        load_engine_for_run(open_engine(engine), plugin=libs["dynamic10"])


def test_triton_static_plugin_checks(libs, tmp_path):
    """triton-repo --plugin-static: the dynamic library is refused (it would register nothing under LD_PRELOAD),
    so is a static library that does not link libnvinfer or links another major."""
    from wtconv_libs.abi import check_static_library

    _, manifest10 = fake_engine(tmp_path, trt_version="10.16.0.72")
    check_static_library(libs["static10"], manifest10.tensorrt_version)
    check_static_library(libs["static"], manifest10.tensorrt_version)
    for dynamic in ("dynamic", "dynamic10"):  # with DT_NEEDED entries (libc) like every real library
        assert inspect_library(libs[dynamic]).needed
        with pytest.raises(PluginError, match="is the dynamic .* register nothing"):
            check_static_library(libs[dynamic], manifest10.tensorrt_version)
    with pytest.raises(PluginError, match="does not link libnvinfer: .* cannot find getPluginRegistry"):
        check_static_library(libs["static_unlinked"], manifest10.tensorrt_version)
    at_load = inspect_library(libs["static_at_load"])
    assert at_load.finds_nvinfer_at_load and at_load.nvinfer_major is None
    check_static_library(libs["static_at_load"], manifest10.tensorrt_version)
    _, manifest11 = fake_engine(tmp_path, name="b.engine", trt_version="11.1.0.2")
    with pytest.raises(PluginError, match=r"built for ABI trt10 \(TensorRT 10.16.0 headers\), but TensorRT 11.1.0.2"):
        check_static_library(libs["static_at_load"], manifest11.tensorrt_version)
    with pytest.raises(
        PluginError,
        match=r"links TensorRT 10 \(libnvinfer.so.10\) but the engine was built with "
        r"TensorRT 11.1.0.2",
    ):
        check_static_library(libs["static10"], manifest11.tensorrt_version)


def test_the_kernels_a_library_loads_are_found_through_its_runpath(libs, tmp_path):
    """A library of the binary wheel holds no GPU code and loads libwtconv_kernels.so through its RUNPATH
    ($ORIGIN/.. for a plugin in lib/<abi>/, then $ORIGIN): its GPU code is read there, and a copy of it takes the
    kernel library along (library_bundle)."""
    from wtconv_libs.plugin_elf import find_needed, library_bundle

    cc = shutil.which("cc") or shutil.which("gcc")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is needed to make a library with GPU code")
    lib = tmp_path / "lib"
    (lib / "trt11").mkdir(parents=True)
    (tmp_path / "k.cu").write_text(
        '__global__ void k(float* x) { x[0] = 1.0f; }\nextern "C" void launch(float* x) { k<<<1, 1>>>(x); }\n'
    )
    subprocess.run(
        [
            nvcc,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_80,code=[sm_80,compute_80]",
            "-o",
            str(lib / "libwtconv_kernels.so"),
            str(tmp_path / "k.cu"),
            "-Xlinker",
            "-soname,libwtconv_kernels.so",
        ],
        check=True,
    )
    (tmp_path / "p.c").write_text("void launch(float*); void entry(float* x) { launch(x); }\n")
    plugin = lib / "trt11" / "libplugin.so"
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-o",
            str(plugin),
            str(tmp_path / "p.c"),
            f"-L{lib}",
            "-l:libwtconv_kernels.so",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/..:$ORIGIN",
        ],
        check=True,
    )
    info = inspect_library(plugin)
    assert info.runpath == ["$ORIGIN/..", "$ORIGIN"] and "libwtconv_kernels.so" in info.needed
    assert info.kernels_library == str(lib / "libwtconv_kernels.so")
    assert info.cuda_code.cubins == {80} and info.cuda_code.ptx == {80}
    assert library_bundle(plugin) == (plugin, lib / "libwtconv_kernels.so")
    assert find_needed(plugin, "libabsent.so", info.runpath) is None
    # A copy elsewhere without the kernels beside it: no GPU code found, and nothing to take along.
    copy = tmp_path / "model" / "libplugin.so"
    copy.parent.mkdir()
    shutil.copy(plugin, copy)
    assert inspect_library(copy).cuda_code is None and library_bundle(copy) == (copy,)
    assert library_bundle(libs["dynamic"]) == (libs["dynamic"],)


# ---------------------------------------------------------------------------------------------------------------
# Lookup order (wtconv_libs.lookup): environment variable, package, per-user cache, build tree
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Empty package, cache and build-tree folders standing in for the real ones."""
    package, cache, tree = tmp_path / "pkg" / "lib", tmp_path / "cache", tmp_path / "tree" / "build" / "plugin"
    monkeypatch.setattr(lookup, "package_lib_dir", lambda: package)
    monkeypatch.setenv(lookup.ENV_CACHE, str(cache))
    monkeypatch.setattr(lookup, "build_tree_dir", lambda: tree)
    for env in lookup.ENV_VARS.values():
        monkeypatch.delenv(env, raising=False)
    return {"package": package, "cache": cache / "lib", "tree": tree}


def _put(src, dst):
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def test_lookup_order(libs, places, monkeypatch):
    name = lookup.FILE_NAMES["plugin"]
    assert default_plugin(abi="trt11") is None
    tree = _put(libs["dynamic11"], places["tree"] / "trt" / name)
    assert default_plugin(abi="trt11") == tree
    assert default_plugin(abi="trt10") is None  # the build tree's library is for another ABI
    cached = _put(libs["dynamic11"], places["cache"] / "trt11" / name)
    assert default_plugin(abi="trt11") == cached  # the cache comes before the build tree
    packaged = _put(libs["dynamic11"], places["package"] / "trt11" / name)
    assert default_plugin(abi="trt11") == packaged  # the package before the cache
    monkeypatch.setenv(lookup.ENV_VARS["plugin"], str(libs["dynamic10"]))
    assert default_plugin(abi="trt11") == libs["dynamic10"]  # the environment variable wins, refused later by name
    wheres = [c.where for c in lookup.candidates("plugin", "trt11")]
    assert wheres == ["environment WTCONV_TRT_PLUGIN", "package (trt11)", "user cache (trt11)", "build tree"]


def test_the_docs_name_the_folders_the_lookup_searches():
    """docs/engines.md and docs/onnx_runtime.md name the package's library folder as the lookup has it (doctor
    lists the same places)."""
    repo = Path(__file__).resolve().parents[1]
    folder = lookup.package_lib_dir().relative_to(repo).as_posix() + "/"
    for doc in ("docs/engines.md", "docs/onnx_runtime.md"):
        text = (repo / doc).read_text(encoding="utf-8")
        named = set(re.findall(r"`(wtconv_\w+/lib/)", text))
        assert named == {folder}, (doc, named, folder)


def test_kernel_library_uses_the_same_order(libs, places, monkeypatch):
    kernels = lookup.FILE_NAMES["kernels"]
    assert lookup.find("kernels") is None
    tree = _put(libs["dynamic"], places["tree"] / kernels)
    assert lookup.find("kernels") == tree
    cached = _put(libs["dynamic"], places["cache"] / kernels)
    assert lookup.find("kernels") == cached
    cuda_kernels = pytest.importorskip("wtconv_torch.cuda_kernels")
    assert cuda_kernels.find_library() == cached


def test_doctor_shows_the_lookup_order_and_what_it_found(libs, places, capsys):
    from wtconv_trt import cli

    _put(libs["dynamic11"], places["cache"] / "trt11" / lookup.FILE_NAMES["plugin"])
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    found = [line for line in lines if "[found] user cache (trt11)" in line]
    assert len(found) == 1 and "dynamic, ABI trt11 (TensorRT 11.1.0 headers)" in found[0]
    # every place of the order is listed, in order, for each library
    plugin_block = out.split("plugin (libwtconv_trt_plugin_dynamic.so):")[1].split("plugin-static")[0]
    order = [
        w
        for w in ("package (trt10)", "package (trt11)", "user cache (trt10)", "user cache (trt11)", "build tree")
        if w in plugin_block
    ]
    assert order == sorted(order, key=plugin_block.index) and len(order) == 5
    assert "What works here:" in out and "TensorRT-RTX" in out


def test_build_libs_refuses_a_folder_without_headers(tmp_path, capsys):
    from wtconv_trt import cli

    status = cli.main(["build-libs", "--tensorrt-headers", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and "no include/NvInferRuntime.h there" in err.strip().splitlines()[-1]
