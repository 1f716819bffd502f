"""The ONNX Runtime custom-op library (libwtconv_ort.so, plugin/onnxruntime) on ONNX Runtime's CPU execution provider.

Oracle: the executable spec (wtconv_torch/fused_spec.py) in float64 on the float64-folded weights, and, for fp16,
the published PyTorch module run in fp16 (docs/design.md §2.5: fp32 within 1e-6 relative, fp16 within 1.0x the
reference module's own fp16 error). Each node is written from the folded layer's attributes exactly as the exporter
writes them (FoldedWTConv.attributes()); whole models go through export_onnx. The library is built once per source
hash by tests/conftest.py's ort_library fixture (which skips with the reason where it cannot be built).
"""

from __future__ import annotations

import itertools
import os
import threading

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from wtconv_libs import contract, lookup  # noqa: E402
from wtconv_torch.folding import fold_wtconv  # noqa: E402
from wtconv_torch.fused_spec import fused_wtconv2d_spec  # noqa: E402

# IR version 9 (ONNX 1.15): read by every ONNX Runtime the library supports (1.17 and newer); onnx.helper would
# stamp its own newest IR version, which an older runtime refuses ("Unsupported model IR version").
ORT_IR_VERSION = 9
from wtconv_ort.session import make_ort_session, resolve_wtconv_op  # noqa: E402
from wtconv_torch.wtconv2d import random_wtconv2d  # noqa: E402

ISA_ENV = "WTCONV_ORT_CPU_ISA"
UNIT_ROUNDOFF_FP16 = 2.0**-11
ELEM = {np.float32: onnx.TensorProto.FLOAT, np.float16: onnx.TensorProto.FLOAT16}


def node_model(folded, dtype=np.float32, name="wtconv_layer", channels=None, **overrides):
    """A one-node model: input x (B, C, H, W) with dynamic B/H/W -> WTConv2d -> y, attributes as exported."""
    attributes = dict(folded.attributes())
    attributes[contract.FIELD_PLUGIN_VERSION] = contract.PLUGIN_VERSION
    attributes[contract.FIELD_PLUGIN_NAMESPACE] = contract.PLUGIN_NAMESPACE
    attributes.update(overrides)
    attributes = {k: v for k, v in attributes.items() if v is not None}
    node = onnx.helper.make_node(contract.OP_TYPE, ["x"], ["y"], domain=contract.ONNX_DOMAIN, name=name, **attributes)
    c = folded.channels if channels is None else channels
    graph = onnx.helper.make_graph(
        [node],
        "wtconv",
        [onnx.helper.make_tensor_value_info("x", ELEM[dtype], ["B", c, "H", "W"])],
        [onnx.helper.make_tensor_value_info("y", ELEM[dtype], None)],
    )
    opsets = [onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid(contract.ONNX_DOMAIN, 1)]
    return onnx.helper.make_model(graph, opset_imports=opsets, ir_version=ORT_IR_VERSION)


def session(library, model, threads=1):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return make_ort_session(model, session_options=options, op="native", library=library)


def rel_error(value, expected) -> float:
    expected = np.asarray(expected, dtype=np.float64)
    scale = np.abs(expected).max() or 1.0
    return float(np.abs(np.asarray(value, dtype=np.float64) - expected).max() / scale)


def check_against_spec(run, b, c, h, w, k, levels, stride, dtype, seed, report, label="CPU", device="cpu"):
    """run(model, x) -> y for a random layer's node; fp32 within 1e-6 of the float64 spec (or 2x the float32 reference
    module's own error where cancellation puts float32 above that), fp16 within 1.0x the fp16 reference module's
    error (the reference modules run on `device`)."""
    layer = random_wtconv2d(c, k, levels, stride, seed)
    x = torch.randn((b, c, h, w), generator=torch.Generator().manual_seed(seed + 1))
    xd = x.to(torch.float16) if dtype == np.float16 else x
    expected = fused_wtconv2d_spec(
        xd.double(), *fold_wtconv(layer, dtype=torch.float64).tensors(), k, levels, stride
    ).numpy()
    y = run(node_model(fold_wtconv(layer), dtype), xd.numpy())
    assert y.dtype == dtype and y.shape == expected.shape, (y.dtype, y.shape, expected.shape)
    assert np.isfinite(y).all()
    err = rel_error(y, expected)
    where = f"{b}x{c}x{h}x{w} k={k} L={levels} s={stride}"
    if dtype == np.float32:
        report.add(f"ONNX Runtime {label} op fp32 relative error", err, where)
        bound = 1e-6
        if err > bound:
            saved = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = False
            try:
                with torch.no_grad():
                    ref32 = layer.to(device, torch.float32)(x.to(device)).cpu()
            finally:
                torch.backends.cudnn.allow_tf32 = saved
            bound = max(bound, 2 * rel_error(ref32.numpy(), expected))
        assert err <= bound, f"{where}: fp32 relative error {err:.3e} > {bound:.3e}"
        return
    with torch.no_grad():
        ref16 = layer.to(device, torch.float16)(xd.to(device)).float().cpu()
    ref_err = rel_error(ref16.numpy(), expected)
    bound = max(ref_err, UNIT_ROUNDOFF_FP16)
    report.add(f"ONNX Runtime {label} op fp16 error / reference error", err / bound, where)
    assert err <= bound, f"{where}: fp16 error {err:.3e} > 1.0x the fp16 reference's error {ref_err:.3e}"


def check_layer(library, b, c, h, w, k, levels, stride, dtype, seed, report, threads=1):
    def run(model, x):
        return session(library, model, threads).run(None, {"x": x})[0]

    check_against_spec(run, b, c, h, w, k, levels, stride, dtype, seed, report)


MATRIX = [
    pytest.param(*case, id="{}x{}x{}x{}-k{}-L{}-s{}".format(*case))
    for case in itertools.chain(
        # every k of the contract on an odd, non-square size
        ((2, 3, 37, 30, k, 2, 1) for k in (1, 3, 5, 7, 9, 11, 13, 15)),
        # every level count up to the contract's maximum, k in {3, 5, 7}
        ((1, 2, 45, 29, k, lv, 1) for k in (3, 5, 7) for lv in range(1, contract.MAX_WT_LEVELS + 1)),
        # strides, batches > 1, planes smaller than 2^L, 1x1, a single row or column
        ((3, 2, 33, 19, k, lv, s) for k in (3, 5, 7) for lv in (1, 4) for s in (2, 3)),
        ((2, 3, 1, 1, 5, 3, 1), (2, 1, 1, 9, 3, 5, 2), (1, 2, 7, 1, 7, 8, 1), (4, 2, 5, 3, 5, 8, 2)),
        # the WTConvNeXt-T stage shapes (C, H, L) at k = 5, batch 2
        ((2, c, hw, hw, 5, lv, 1) for c, hw, lv in ((96, 56, 5), (192, 28, 4), (384, 14, 3), (768, 7, 2))),
    )
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("b,c,h,w,k,levels,stride", MATRIX)
def test_matches_spec(ort_library, error_report, dtype, b, c, h, w, k, levels, stride):
    check_layer(
        ort_library, b, c, h, w, k, levels, stride, dtype, seed=k * 100 + levels * 10 + stride, report=error_report
    )


def available_isas():
    return ["baseline", "avx2", "avx512"]


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_every_instruction_set_matches_spec(ort_library, error_report, monkeypatch, isa, dtype):
    """Each compiled variant of the CPU kernel (picked by WTCONV_ORT_CPU_ISA), where this processor runs it."""
    monkeypatch.setenv(ISA_ENV, isa)
    try:
        session(ort_library, node_model(fold_wtconv(random_wtconv2d(2, 3, 1, 1, 0))))
    except Exception as error:  # noqa: BLE001 -- refused: the variant is missing here
        assert "lacks that instruction set" in str(error), error
        pytest.skip(f"{isa}: not available in this build or on this processor")
    for case in [(2, 3, 37, 30, 5, 3, 1), (1, 2, 45, 29, 15, 8, 1), (3, 2, 33, 19, 7, 4, 2)]:
        check_layer(ort_library, *case, dtype, seed=7, report=error_report)


@pytest.mark.parametrize("isa", available_isas())
def test_fp16_conversions_are_exact(ort_library, monkeypatch, isa):
    """A layer that computes y = w * x (base tap w at the centre, nothing else) over every finite fp16 value:
    loading must be exact and the output must be the fp32 product rounded once to nearest even, as NumPy rounds."""
    monkeypatch.setenv(ISA_ENV, isa)
    bits = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16)
    values = bits.view(np.float16)
    values = values[np.isfinite(values)]
    c, k = 1, 3
    folded = fold_wtconv(random_wtconv2d(c, k, 1, 1, 0))
    factor = np.float32(1.0 / 3.0)
    for w_center, name in ((np.float32(1.0), "identity"), (factor, "scaled")):
        base = np.zeros((c, k, k), np.float32)
        base[0, 1, 1] = w_center
        model = node_model(
            folded,
            np.float16,
            base_weight=base.ravel().tolist(),
            base_bias=[0.0],
            wavelet_weight=[0.0] * (4 * c * k * k),
        )
        try:
            sess = session(ort_library, model)
        except Exception as error:  # noqa: BLE001
            assert "lacks that instruction set" in str(error), error
            pytest.skip(f"{isa}: not available in this build or on this processor")
        x = np.zeros(256 * 256, np.float16)
        x[: values.size] = values
        y = sess.run(None, {"x": x.reshape(1, 1, 256, 256)})[0].ravel()[: values.size]
        expected = (values.astype(np.float32) * w_center).astype(np.float16)
        mismatch = np.flatnonzero(y.view(np.uint16) != expected.view(np.uint16))
        # Zeros may differ in sign only (-0 * w + 0 is +0 in the layer, -0 in NumPy's product).
        mismatch = mismatch[(expected[mismatch] != 0) | (y[mismatch] != 0)]
        assert mismatch.size == 0, f"{name}: {mismatch.size} values differ, e.g. {values[mismatch[:5]]}"


def test_empty_batch_gives_empty_output(ort_library):
    folded = fold_wtconv(random_wtconv2d(3, 5, 2, 2, 0))
    y = session(ort_library, node_model(folded)).run(None, {"x": np.zeros((0, 3, 9, 8), np.float32)})[0]
    assert y.shape == (0, 3, 5, 4)


def check_threads_agree(shared, alone, shapes, repeats):
    """Four threads call shared.run() at once, each on its own input of one of `shapes`, `repeats` times: every
    output must equal, bit for bit, what the session `alone` (used by one thread) gives for that input."""
    gen = np.random.default_rng(0)
    inputs = [gen.standard_normal(shape).astype(np.float32) for shape in shapes]
    expected = [alone.run(None, {"x": x})[0] for x in inputs]
    failures = []

    def worker(i):
        try:
            for _ in range(repeats):
                y = shared.run(None, {"x": inputs[i]})[0]
                if not np.array_equal(y, expected[i]):
                    failures.append(f"thread {i}: max difference {np.abs(y - expected[i]).max()}")
        except Exception as error:  # noqa: BLE001 -- reported by the main thread
            failures.append(f"thread {i}: {error!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def test_four_threads_running_one_session_agree(ort_library):
    """Four threads run one session (two intra-op threads) at once: the same bits as a single-threaded session."""
    folded = fold_wtconv(random_wtconv2d(96, 5, 5, 1, 3))
    shared = session(ort_library, node_model(folded), threads=2)
    alone = session(ort_library, node_model(folded), threads=1)
    check_threads_agree(shared, alone, [(1, 96, 56, 56), (2, 96, 31, 31), (1, 96, 57, 57), (3, 96, 20, 20)], 5)


@pytest.fixture(scope="module")
def small_exports(tmp_path_factory):
    """A small WTConvNeXt (random weights, every stage, odd-size stage planes at 72x88) exported in fp32 and fp16."""
    from wtconv_export.onnx_export import export_onnx
    from wtconv_export.onnx_models import randomize_weights
    from wtconv_torch.wtconvnext import create_wtconvnext

    model = randomize_weights(create_wtconvnext("wtconvnext_tiny", depths=(1, 1, 1, 1), num_classes=10), 0).eval()
    out = tmp_path_factory.mktemp("ort_exports")
    paths = {}
    for precision in ("fp32", "fp16"):
        paths[precision] = out / f"small_{precision}.onnx"
        export_onnx(model, paths[precision], precision=precision, input_shape=(1, 3, 64, 64))
    return model, paths


def test_plugin_export_matches_pytorch(ort_library, small_exports, error_report):
    """The exporter's nodes run on the native op: fp32 against PyTorch fp32, fp16 within 2x PyTorch fp16's own
    error (docs/onnx_export.md, "Tolerances"), at batch 3 and an odd input size."""
    model, paths = small_exports
    x = torch.randn((3, 3, 72, 88), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref64 = model.double()(x.double()).numpy()
        ref32 = model.float()(x).numpy()
        ref16 = model.half()(x.half()).float().numpy()
        model.float()
    y32 = make_ort_session(paths["fp32"], op="native", library=ort_library).run(None, {"input": x.numpy()})[0]
    err32 = rel_error(y32, ref32)
    error_report.add("ONNX Runtime CPU op, small WTConvNeXt fp32 vs PyTorch fp32", err32, "3x3x72x88")
    assert err32 <= 1e-5
    y16 = make_ort_session(paths["fp16"], op="native", library=ort_library).run(
        None, {"input": x.numpy().astype(np.float16)}
    )[0]
    assert y16.dtype == np.float16
    err16, own = rel_error(y16, ref64), rel_error(ref16, ref64)
    assert err16 <= 2.0 * own, (err16, own)


def test_default_model_heldout_accuracy_unchanged(ort_library, tmp_path):
    """The shipped default model, exported with WTConv2d nodes and run on the native op, classifies the held-out
    digits exactly as the PyTorch model does (same predictions, so the same recorded accuracy)."""
    from wtconv_export.onnx_export import export_onnx
    from wtconv_torch.models import load_default_model, load_heldout_digits

    model, config = load_default_model()
    x, labels = load_heldout_digits(config)
    path = tmp_path / "default.onnx"
    export_onnx(model, path, input_shape=(1, *x.shape[1:]))
    sess = make_ort_session(path, op="native", library=ort_library)
    logits = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        expected = model(x)
    predictions = logits.argmax(1)
    assert np.array_equal(predictions, expected.argmax(1).numpy())
    accuracy = float((predictions == labels.numpy()).mean())
    assert abs(accuracy - config["heldout_accuracy"]) <= 0.005, (accuracy, config["heldout_accuracy"])
    assert rel_error(logits, expected.numpy()) <= 1e-5


def test_library_exports_only_its_entry_point_and_needs_no_onnxruntime(ort_library):
    """RegisterCustomOps is the one exported symbol; libonnxruntime is not linked (ONNX Runtime hands over its API)."""
    import shutil
    import subprocess

    if shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("binutils (nm, readelf) not on PATH")
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(ort_library)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [s for s in symbols[2::3]] == ["RegisterCustomOps"], symbols
    needed = subprocess.run(["readelf", "-d", str(ort_library)], capture_output=True, text=True, check=True).stdout
    assert "onnxruntime" not in needed
    info = lookup.ort_library_info(ort_library)
    assert info["ort_api"] == "17" and info["cuda"] in ("yes", "no")


def test_registration_asks_for_api_17_first(ort_library):
    """RegisterCustomOps asks ONNX Runtime for C API version 17 (the lowest with every function it needs) and,
    refused, for version 1 to report the error (a newer table only where the version string says it exists:
    docs/onnx_runtime.md, "Versions")."""
    import ctypes

    asked = []
    version = ctypes.create_string_buffer(b"1.16.3")
    get_api_type = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
    get_version_type = ctypes.CFUNCTYPE(ctypes.c_void_p)  # a char* into `version`, which outlives the call

    def get_api(version):
        asked.append(version)
        return None  # an ONNX Runtime too old for everything

    class ApiBase(ctypes.Structure):
        _fields_ = [("GetApi", get_api_type), ("GetVersionString", get_version_type)]

    keep = (get_api_type(get_api), get_version_type(lambda: ctypes.addressof(version)))
    base = ApiBase(*keep)
    lib = ctypes.CDLL(str(ort_library))
    lib.RegisterCustomOps.restype = ctypes.c_void_p
    lib.RegisterCustomOps.argtypes = [ctypes.c_void_p, ctypes.POINTER(ApiBase)]
    assert lib.RegisterCustomOps(None, ctypes.byref(base)) is None  # no table to create a status from
    assert asked == [17, 1]


def test_make_ort_session_prefers_the_native_library(ort_library, monkeypatch, caplog):
    """op='auto': the library found through WTCONV_ORT_LIB runs the model as it is; without any library the
    Python op runs it and the log says so; op='native' without a library is a one-line ConfigurationError."""
    from wtconv_core.errors import ConfigurationError

    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(ort_library))
    assert resolve_wtconv_op("auto") == ("native", ort_library)
    folded = fold_wtconv(random_wtconv2d(2, 3, 2, 1, 0))
    x = np.random.default_rng(0).standard_normal((1, 2, 9, 7)).astype(np.float32)
    native = make_ort_session(node_model(folded)).run(None, {"x": x})[0]
    monkeypatch.setenv(lookup.ENV_VARS["ort"], str(ort_library) + ".missing")
    monkeypatch.setattr(lookup, "ort_library", lambda: None)
    with pytest.raises(ConfigurationError, match="libwtconv_ort.so"):
        resolve_wtconv_op("native")
    monkeypatch.delenv(lookup.ENV_VARS["ort"])
    pytest.importorskip("onnxruntime_extensions")
    from wtconv_ort import session

    monkeypatch.setattr(session, "_fallback_said", False)  # said once per process: maybe already, by another test
    with caplog.at_level("WARNING", logger="wtconv_ort.session"):
        python = make_ort_session(node_model(folded)).run(None, {"x": x})[0]
    assert "Python op" in caplog.text and "build-libs" in caplog.text
    assert rel_error(native, python) <= 1e-6


def test_isa_variable_is_checked(ort_library, monkeypatch):
    monkeypatch.setenv(ISA_ENV, "sse9")
    with pytest.raises(Exception, match="WTCONV_ORT_CPU_ISA=sse9: expected baseline, avx2 or avx512"):
        session(ort_library, node_model(fold_wtconv(random_wtconv2d(2, 3, 1, 1, 0))))


def test_threads_do_not_change_results(ort_library):
    """One, two and four intra-op threads (so different chunkings over the pool) give the same bits."""
    folded = fold_wtconv(random_wtconv2d(384, 5, 3, 1, 9))
    x = np.random.default_rng(1).standard_normal((2, 384, 14, 15)).astype(np.float32)
    outputs = [session(ort_library, node_model(folded), threads=n).run(None, {"x": x})[0] for n in (1, 2, 4)]
    assert all(np.array_equal(outputs[0], o) for o in outputs[1:])
    assert os.environ.get(ISA_ENV) is None  # no forced instruction set leaks between tests


def test_tensor_attributes_are_read_as_the_tensorrt_parser_reads_them(ort_library):
    """A float32 or float16 TENSOR attribute is a weight field like FLOATS (TensorRT's parser turns both into
    kFLOAT32 / kFLOAT16 fields): the same node with its weights as tensors gives exactly the output of the node
    with those (fp16-rounded) values as FLOATS."""
    folded = fold_wtconv(random_wtconv2d(3, 5, 2, 1, 4))
    base16 = folded.base_weight.to(torch.float16).numpy()
    wavelet = folded.wavelet_weight.to(torch.float32).numpy()

    def tensor(array):
        attribute = onnx.AttributeProto()
        attribute.type = onnx.AttributeProto.TENSOR
        attribute.t.CopyFrom(onnx.numpy_helper.from_array(array.reshape(-1)))
        return attribute

    as_tensors = node_model(folded, base_weight=None, wavelet_weight=None)
    node = as_tensors.graph.node[0]
    for name, array in ((contract.FIELD_BASE_WEIGHT, base16), (contract.FIELD_WAVELET_WEIGHT, wavelet)):
        attribute = tensor(array)
        attribute.name = name
        node.attribute.append(attribute)
    as_floats = node_model(folded, base_weight=base16.astype(np.float32).ravel().tolist())
    x = np.random.default_rng(2).standard_normal((2, 3, 11, 13)).astype(np.float32)
    y = session(ort_library, as_tensors).run(None, {"x": x})[0]
    assert np.array_equal(y, session(ort_library, as_floats).run(None, {"x": x})[0])


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider':UserWarning")  # CPU-only ONNX Runtime
def test_a_library_without_its_cuda_op_is_named_when_cuda_is_asked_for(ort_library, caplog):
    """Asking for the CUDA EP with a library built without its CUDA op still runs (ONNX Runtime places the nodes on
    the CPU), and the log says why and how to fix it."""
    if lookup.ort_library_info(ort_library).get("cuda") == "yes":
        pytest.skip("this library has its CUDA op")
    folded = fold_wtconv(random_wtconv2d(2, 3, 1, 1, 0))
    with caplog.at_level("WARNING", logger="wtconv_ort.session"):
        sess = make_ort_session(
            node_model(folded), ["CUDAExecutionProvider", "CPUExecutionProvider"], op="native", library=ort_library
        )
    assert "built without its CUDA op" in caplog.text
    assert sess.run(None, {"x": np.zeros((1, 2, 5, 5), np.float32)})[0].shape == (1, 2, 5, 5)
