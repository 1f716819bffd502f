"""CUDA implementation of ``wtconv::fused_wtconv2d`` from our kernel library (plugin/kernels), via ctypes.

    from wtconv_torch import cuda_kernels
    cuda_kernels.register()       # fused_wtconv2d on CUDA tensors now runs the fused CUDA kernels

The shared library ``libwtconv_kernels_capi.so`` is found in the lookup order of wtconv_libs.lookup (the
environment variable ``WTCONV_KERNELS_LIB``, the package, the per-user cache, the build tree).

Layouts: NCHW-contiguous and channels-last (``torch.channels_last``) tensors are read in place, and the
output has the input's layout. Any other strides cost one copy to NCHW.

Per-call cost: a launch goes through a cached *plan* (sizes, layout and weight pointers validated once in
the C library), so a call passes only the two tensor pointers, the workspace and the stream to C.
"""

import ctypes
import os
from collections import OrderedDict
from pathlib import Path

import torch

from wtconv_libs import lookup
from wtconv_libs.contract import MAX_KERNEL_SIZE as _MAX_KERNEL_SIZE
from wtconv_libs.contract import MAX_WT_LEVELS as _MAX_LEVELS

ENV_LIBRARY = lookup.ENV_VARS["kernels"]
BUILD_HINT = (
    "build it with: cmake -S plugin -B build/plugin -DCMAKE_CUDA_ARCHITECTURES=native && "
    "cmake --build build/plugin -j   (from the repository root), or set "
    f"{ENV_LIBRARY}=/path/to/libwtconv_kernels_capi.so"
)

# wtconv::DataType and wtconv::Layout (plugin/kernels/wtconvKernel.h)
DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
NCHW, NHWC = 0, 1
_MESSAGE_BYTES = 512
_PLAN_CACHE_SIZE = 256

_library = None
_registered = False
_plans: "OrderedDict[tuple, Plan]" = OrderedDict()
# Written by the C library only when a call fails (the message is read right after); shared by all calls.
_message = ctypes.create_string_buffer(_MESSAGE_BYTES)


def library_path() -> Path:
    """The library to load: the first found in the package's lookup order (wtconv_libs.lookup: environment
    variable, package, per-user cache, build tree), else the path the environment variable or the build tree names."""
    build_tree = lookup.build_tree_dir() / lookup.build_subdir("kernels") / lookup.FILE_NAMES["kernels"]
    return lookup.find("kernels") or Path(os.environ.get(ENV_LIBRARY) or build_tree)


def find_library() -> Path | None:
    """Path of the built C API library, or None when it is not built (tests skip on None)."""
    path = library_path()
    return path if path.is_file() else None


def load_library() -> ctypes.CDLL:
    """The C API library (loaded once); FileNotFoundError saying how to build it when it is missing."""
    global _library
    if _library is not None:
        return _library
    path = library_path()
    if not path.is_file():
        raise FileNotFoundError(f"wtconv CUDA kernels library not found at {path}; {BUILD_HINT}")
    _library = open_library(path)
    return _library


def open_library(path: Path) -> ctypes.CDLL:
    """Load the C API library at ``path`` with its functions declared. Each call loads that file on its own
    handle, so two builds can be timed side by side in one process (benchmarks/ab_kernels.py); the op uses
    load_library()'s one."""
    lib = ctypes.CDLL(str(path))
    i32, i64, size, ptr, text = ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
    shape = [i32, i64, i64, i64, i64, i32, i32, i32, i32, i64]  # dtype, B, C, H, W, k, L, stride, layout, pitch
    lib.wtconv_workspace_bytes.argtypes = shape
    lib.wtconv_workspace_bytes.restype = size
    lib.wtconv_check_shape.argtypes = shape + [text, size]
    lib.wtconv_check_shape.restype = ctypes.c_int
    lib.wtconv_forward.argtypes = shape + [ptr] * 6 + [size, ptr, text, size]
    lib.wtconv_forward.restype = ctypes.c_int
    lib.wtconv_plan_create.argtypes = shape + [ptr] * 3 + [text, size]
    lib.wtconv_plan_create.restype = ptr
    lib.wtconv_plan_workspace_bytes.argtypes = [ptr]
    lib.wtconv_plan_workspace_bytes.restype = size
    lib.wtconv_plan_forward.argtypes = [ptr, ptr, ptr, ptr, size, ptr, text, size]
    lib.wtconv_plan_forward.restype = ctypes.c_int
    lib.wtconv_plan_destroy.argtypes = [ptr]
    lib.wtconv_plan_destroy.restype = None
    lib.wtconv_error_name.argtypes = [ctypes.c_int]
    lib.wtconv_error_name.restype = ctypes.c_char_p
    return lib


def layout_of(x: torch.Tensor) -> int | None:
    """NCHW or NHWC when the kernels can read ``x`` in place (a tensor that is both, e.g. C = 1, counts as
    NCHW), else None."""
    if x.is_contiguous():
        return NCHW
    if x.is_contiguous(memory_format=torch.channels_last):
        return NHWC
    return None


def memory_format(layout: int) -> torch.memory_format:
    return torch.channels_last if layout == NHWC else torch.contiguous_format


def output_shape(x: torch.Tensor, stride: int) -> tuple[int, int, int, int]:
    b, c, h, w = x.shape
    return b, c, (h + stride - 1) // stride, (w + stride - 1) // stride


def workspace_bytes(x: torch.Tensor, kernel_size: int, wt_levels: int, stride: int) -> int:
    b, c, h, w = x.shape
    layout = layout_of(x)
    return int(
        load_library().wtconv_workspace_bytes(
            DTYPES[x.dtype], b, c, h, w, kernel_size, wt_levels, stride, NCHW if layout is None else layout, 0
        )
    )


def _raise(lib, code: int) -> None:
    name = lib.wtconv_error_name(code).decode()
    raise RuntimeError(f"wtconv CUDA kernels failed ({name}): {_message.value.decode()}")


class Plan:
    """A C plan of ``lib`` (sizes, layout, weight pointers, validated once) and what a call needs besides: the
    workspace size ``need`` in bytes."""

    __slots__ = ("handle", "need", "lib")

    def __init__(self, lib, dtype: int, shape, k: int, levels: int, stride: int, layout: int, weights):
        b, c, h, w = shape
        self.lib = lib
        self.handle = lib.wtconv_plan_create(
            dtype, b, c, h, w, k, levels, stride, layout, 0, *weights, _message, _MESSAGE_BYTES
        )
        if not self.handle:
            raise RuntimeError(f"wtconv CUDA kernels: {_message.value.decode()}")
        self.need = int(lib.wtconv_plan_workspace_bytes(self.handle))

    def forward(self, x_ptr: int, out_ptr: int, workspace_ptr: int, stream: int) -> None:
        """Launch on ``stream``; RuntimeError with the library's message when the launch fails."""
        code = self.lib.wtconv_plan_forward(
            self.handle, x_ptr, out_ptr, workspace_ptr or None, self.need, stream, _message, _MESSAGE_BYTES
        )
        if code:
            _raise(self.lib, code)

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.wtconv_plan_destroy(self.handle)
            self.handle = None


def _plan(x: torch.Tensor, layout: int, weights: tuple[int, int, int], k: int, levels: int, stride: int) -> Plan:
    key = (x.shape, x.dtype, layout, weights, k, levels, stride)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = Plan(load_library(), DTYPES[x.dtype], x.shape, k, levels, stride, layout, weights)
        if len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


def _current_stream(device_index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device_index)


_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


if not hasattr(torch._C, "_cuda_getCurrentRawStream"):  # pragma: no cover - older PyTorch

    def _current_stream(device_index: int) -> int:  # noqa: F811
        return torch.cuda.current_stream(device_index).cuda_stream


def launch(
    out: torch.Tensor,
    x: torch.Tensor,
    layout: int,
    weights: tuple[int, int, int],
    kernel_size: int,
    wt_levels: int,
    stride: int,
    workspace: torch.Tensor | None = None,
) -> None:
    """Launch on the current stream: x and out CUDA tensors in ``layout`` (NCHW or NHWC, not checked here),
    weights the data pointers of the fp32 (base_weight, base_bias, wavelet_weight) on x's device.
    A workspace, when the shape needs one and none is given, comes from PyTorch's caching allocator."""
    plan = _plan(x, layout, weights, kernel_size, wt_levels, stride)
    need = plan.need
    ws_ptr = 0
    if need:
        if workspace is None or workspace.numel() < need:
            workspace = torch.empty(need, dtype=torch.uint8, device=x.device)
        ws_ptr = workspace.data_ptr()
    plan.forward(x.data_ptr(), out.data_ptr(), ws_ptr, _current_stream(x.get_device()))


def forward_into(
    out: torch.Tensor,
    x: torch.Tensor,
    base_weight: torch.Tensor,
    base_bias: torch.Tensor,
    wavelet_weight: torch.Tensor,
    kernel_size: int,
    wt_levels: int,
    stride: int,
    workspace: torch.Tensor | None = None,
) -> None:
    """Launch the kernels on the current stream, writing ``out`` (same layout as x: NCHW-contiguous or
    channels-last); ValueError for unsupported tensors, RuntimeError with the kernel's message."""
    if x.dtype not in DTYPES:
        raise ValueError(f"wtconv CUDA kernels: x dtype must be one of {list(DTYPES)}, got {x.dtype}")
    if not x.is_cuda or x.dim() != 4:
        raise ValueError(f"wtconv CUDA kernels: x must be a 4-D CUDA tensor, got {tuple(x.shape)} on {x.device}")
    layout = layout_of(x)
    if layout is None:
        raise ValueError(f"wtconv CUDA kernels: x must be NCHW-contiguous or channels_last, got strides {x.stride()}")
    if (
        tuple(out.shape) != output_shape(x, stride)
        or out.dtype != x.dtype
        or out.device != x.device
        or not out.is_contiguous(memory_format=memory_format(layout))
    ):
        raise ValueError(
            f"wtconv CUDA kernels: out must be a {x.dtype} tensor of shape {output_shape(x, stride)} on "
            f"{x.device} in x's layout ({'channels_last' if layout == NHWC else 'NCHW'}), got "
            f"{out.dtype} {tuple(out.shape)} strides {out.stride()} on {out.device}"
        )
    for name, t in (("base_weight", base_weight), ("base_bias", base_bias), ("wavelet_weight", wavelet_weight)):
        if t.dtype != torch.float32 or t.device != x.device or not t.is_contiguous():
            raise ValueError(
                f"wtconv CUDA kernels: {name} must be contiguous float32 on {x.device}, got {t.dtype} on {t.device}"
            )
    launch(
        out,
        x,
        layout,
        (base_weight.data_ptr(), base_bias.data_ptr(), wavelet_weight.data_ptr()),
        kernel_size,
        wt_levels,
        stride,
        workspace,
    )


def fused_wtconv2d_cuda(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride):
    """The CUDA kernel of the custom op: same arguments and result as fused_spec.fused_wtconv2d_spec; the
    output has x's layout (NCHW or channels-last)."""
    from wtconv_torch.fused_spec import fused_wtconv2d_spec
    from wtconv_torch.ops import check_arguments, output_memory_format, plugin_can_run

    check_arguments(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
    if x.dtype not in DTYPES or plugin_can_run(kernel_size, wt_levels, stride) is not None:
        # float64, k > 15, levels > 8: outside the kernels' coverage, the spec computes it.
        y = fused_wtconv2d_spec(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
        return y.contiguous(memory_format=output_memory_format(x))
    layout = layout_of(x)
    if layout is None:
        x, layout = x.contiguous(), NCHW  # arbitrary strides: one copy
    f32 = dict(device=x.device, dtype=torch.float32)
    base_weight = base_weight.to(**f32).contiguous()
    base_bias = base_bias.to(**f32).contiguous()
    wavelet_weight = wavelet_weight.to(**f32).contiguous()
    out = torch.empty(output_shape(x, stride), dtype=x.dtype, device=x.device, memory_format=memory_format(layout))
    launch(
        out,
        x,
        layout,
        (base_weight.data_ptr(), base_bias.data_ptr(), wavelet_weight.data_ptr()),
        kernel_size,
        wt_levels,
        stride,
    )
    return out


def is_registered() -> bool:
    return _registered


def register() -> None:
    """Register the CUDA kernel of ``wtconv::fused_wtconv2d`` (idempotent). Loads the library now so a
    missing build fails here, with the build command, rather than inside a model's forward."""
    global _registered
    load_library()
    if _registered:
        return
    from wtconv_torch.ops import fused_wtconv2d

    fused_wtconv2d.register_kernel("cuda")(fused_wtconv2d_cuda)
    _registered = True


class CallCache:
    """One module's last launch (input shape, dtype, layout, weight pointers -> plan), so that repeated
    calls skip the plan lookup. Copies and pickles start empty (a plan is never shared by two owners)."""

    __slots__ = ("key", "plan")

    def __init__(self):
        self.key = None
        self.plan = None

    def __deepcopy__(self, memo):
        return CallCache()

    def __reduce__(self):
        return CallCache, ()


if hasattr(torch.compiler, "is_dynamo_compiling"):
    _compiling = torch.compiler.is_dynamo_compiling  # False in eager code; True while dynamo traces
else:  # pragma: no cover - older PyTorch
    _compiling = torch.compiler.is_compiling


def module_call(
    x: torch.Tensor,
    base_weight: torch.Tensor,
    base_bias: torch.Tensor,
    wavelet_weight: torch.Tensor,
    kernel_size: int,
    wt_levels: int,
    stride: int,
    cache: CallCache | None = None,
) -> torch.Tensor | None:
    """FusedWTConv2d's eager fast path: the same kernels as the custom op, without the dispatcher's per-call
    cost. None when it does not apply (kernels not registered, not a plain CUDA tensor in an eager call,
    autograd wanted, unsupported dtype / layout / configuration, weights not fp32 on x's device); the
    caller then goes through the custom op."""
    if (
        not _registered
        or type(x) is not torch.Tensor
        or not x.is_cuda
        or x.requires_grad
        or _compiling()
        or torch._C._get_tracing_state() is not None
    ):
        return None
    layout = layout_of(x)
    device = x.get_device()
    if layout is None or device != _current_device():
        # The kernels launch on the current device; the custom op's dispatcher switches to x's, this path does not.
        return None
    weights = (base_weight.data_ptr(), base_bias.data_ptr(), wavelet_weight.data_ptr())
    key = (x.shape, x.dtype, layout, weights, device)
    if cache is not None and cache.key == key:
        plan = cache.plan
    else:
        if (
            x.dtype not in DTYPES
            or kernel_size > _MAX_KERNEL_SIZE
            or wt_levels > _MAX_LEVELS
            or any(
                t.dtype != torch.float32 or t.get_device() != device or not t.is_contiguous()
                for t in (base_weight, base_bias, wavelet_weight)
            )
        ):
            return None
        plan = _plan(x, layout, weights, kernel_size, wt_levels, stride)
        if cache is not None:
            cache.key, cache.plan = key, plan
    if stride == 1:
        out = torch.empty_like(x)  # keeps x's layout (NCHW-contiguous or channels-last)
    else:
        out = torch.empty(output_shape(x, stride), dtype=x.dtype, device=x.device, memory_format=memory_format(layout))
    workspace = torch.empty(plan.need, dtype=torch.uint8, device=x.device) if plan.need else None
    plan.forward(x.data_ptr(), out.data_ptr(), workspace.data_ptr() if plan.need else 0, _current_stream(device))
    return out
