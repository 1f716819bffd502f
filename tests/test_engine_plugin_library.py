"""Plugin library inspection without loading it (trt_engine.plugin_library): which kind (getCreators or static
registration) and which TensorRT major it links. Real shared libraries are built with the C compiler."""

import shutil
import subprocess

import pytest

from trt_engine.plugin_library import check_library_for_tensorrt, inspect_library


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

    # A stand-in libnvinfer.so.10 (only its soname matters: it becomes the plugin's DT_NEEDED entry).
    build("libnvinfer.so.10", "int getPluginRegistry(void) { return 0; }", "-Wl,-soname,libnvinfer.so.10")
    dynamic = build("libdyn.so", 'void* getCreators(int* n) { *n = 0; return 0; }\n'
                                 'void setLoggerFinder(void* f) { (void)f; }\n')
    static = build("libstatic.so", "extern int getPluginRegistry(void);\n"
                                   "__attribute__((constructor)) static void reg(void) { getPluginRegistry(); }\n",
                   f"-L{d}", "-l:libnvinfer.so.10")
    return {"dynamic": dynamic, "static": static, "dir": d}


def test_dynamic_library(libs):
    info = inspect_library(libs["dynamic"])
    assert info.exports_get_creators and "setLoggerFinder" in info.defined_symbols
    assert info.kind == "dynamic"
    assert info.nvinfer_major is None
    check_library_for_tensorrt(info, 10)
    check_library_for_tensorrt(info, 11)


def test_static_registration_library_and_wrong_major(libs):
    info = inspect_library(libs["static"])
    assert not info.exports_get_creators
    assert info.kind == "static-registration"
    assert "libnvinfer.so.10" in info.needed and info.nvinfer_major == 10
    check_library_for_tensorrt(info, 10)
    with pytest.raises(ValueError, match=r"links libnvinfer.so.10 \(TensorRT 10\) but TensorRT 11 is installed: "
                                         r"rebuild the plugin against TensorRT 11"):
        check_library_for_tensorrt(info, 11)


def test_not_a_library(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; build it"):
        inspect_library(tmp_path / "missing.so")
    text = tmp_path / "lib.so"
    text.write_text("hello")
    with pytest.raises(ValueError, match="not an ELF shared library"):
        inspect_library(text)
    with pytest.raises(ValueError, match="not a file"):
        inspect_library(tmp_path)


def test_truncated_library(libs, tmp_path):
    cut = tmp_path / "cut.so"
    cut.write_bytes(libs["dynamic"].read_bytes()[:200])
    with pytest.raises(ValueError, match="truncated or damaged"):
        inspect_library(cut)



def test_wrong_major_is_reported_before_tensorrt_loads_anything(libs, monkeypatch):
    """load_plugin reads the library's ELF first: a plugin linked against TensorRT 10 on a TensorRT 11 machine is
    refused with the fix, before the plugin registry is touched (the stand-in module has no registry at all)."""
    import types

    from trt_engine import tensorrt_api
    monkeypatch.setattr(tensorrt_api, "import_tensorrt", lambda: types.SimpleNamespace(__version__="11.1.0.5"))
    with pytest.raises(ValueError, match="links libnvinfer.so.10 .* TensorRT 11 is installed"):
        tensorrt_api.load_plugin(libs["static"])
