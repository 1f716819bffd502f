"""CUDA implementation of ``wtconv::fused_wtconv2d`` from our kernel library (plugin/kernels), via ctypes.

    from wtconv_export import cuda_kernels
    cuda_kernels.register()       # fused_wtconv2d on CUDA tensors now runs the fused CUDA kernels

The shared library ``libwtconv_kernels_capi.so`` is found through the environment variable
``WTCONV_KERNELS_LIB`` (a file path) or at ``build/plugin/libwtconv_kernels_capi.so`` under the repository
root (``cmake -S plugin -B build/plugin && cmake --build build/plugin -j``).
"""

import ctypes
import os
from pathlib import Path

import torch

ENV_LIBRARY = "WTCONV_KERNELS_LIB"
DEFAULT_LIBRARY = Path(__file__).resolve().parent.parent / "build" / "plugin" / "libwtconv_kernels_capi.so"
BUILD_HINT = ("build it with: cmake -S plugin -B build/plugin -DCMAKE_CUDA_ARCHITECTURES=native && "
              "cmake --build build/plugin -j   (from the repository root), or set "
              f"{ENV_LIBRARY}=/path/to/libwtconv_kernels_capi.so")

# wtconv::DataType (plugin/kernels/wtconvKernel.h)
DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_MESSAGE_BYTES = 512

_library = None
_registered = False


def library_path() -> Path:
    return Path(os.environ.get(ENV_LIBRARY) or DEFAULT_LIBRARY)


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
    lib = ctypes.CDLL(str(path))
    i32, i64, size, ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t, ctypes.c_void_p
    shape = [i32, i64, i64, i64, i64, i32, i32, i32]
    lib.wtconv_workspace_bytes.argtypes = shape
    lib.wtconv_workspace_bytes.restype = size
    lib.wtconv_check_shape.argtypes = shape + [ctypes.c_char_p, size]
    lib.wtconv_check_shape.restype = ctypes.c_int
    lib.wtconv_forward.argtypes = shape + [ptr] * 6 + [size, ptr, ctypes.c_char_p, size]
    lib.wtconv_forward.restype = ctypes.c_int
    lib.wtconv_error_name.argtypes = [ctypes.c_int]
    lib.wtconv_error_name.restype = ctypes.c_char_p
    _library = lib
    return lib


def workspace_bytes(x: torch.Tensor, kernel_size: int, wt_levels: int, stride: int) -> int:
    b, c, h, w = x.shape
    return int(load_library().wtconv_workspace_bytes(DTYPES[x.dtype], b, c, h, w, kernel_size, wt_levels, stride))


def forward_into(out: torch.Tensor, x: torch.Tensor, base_weight: torch.Tensor, base_bias: torch.Tensor,
                 wavelet_weight: torch.Tensor, kernel_size: int, wt_levels: int, stride: int,
                 workspace: torch.Tensor | None = None) -> None:
    """Launch the kernels on the current stream, writing ``out``; RuntimeError with the kernel's message."""
    lib = load_library()
    if x.dtype not in DTYPES:
        raise ValueError(f"wtconv CUDA kernels: x dtype must be one of {list(DTYPES)}, got {x.dtype}")
    if not (x.is_cuda and x.is_contiguous()):
        raise ValueError("wtconv CUDA kernels: x must be a contiguous (NCHW) CUDA tensor")
    b, c, h, w = x.shape
    dtype = DTYPES[x.dtype]
    need = int(lib.wtconv_workspace_bytes(dtype, b, c, h, w, kernel_size, wt_levels, stride))
    if workspace is None:
        workspace = torch.empty(max(need, 1), dtype=torch.uint8, device=x.device)
    message = ctypes.create_string_buffer(_MESSAGE_BYTES)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    code = lib.wtconv_forward(dtype, b, c, h, w, kernel_size, wt_levels, stride, x.data_ptr(), out.data_ptr(),
                              base_weight.data_ptr(), base_bias.data_ptr(), wavelet_weight.data_ptr(),
                              workspace.data_ptr() if need else None, workspace.numel() if need else 0,
                              stream, message, _MESSAGE_BYTES)
    if code != 0:
        name = lib.wtconv_error_name(code).decode()
        raise RuntimeError(f"wtconv CUDA kernels failed ({name}): {message.value.decode()}")


def fused_wtconv2d_cuda(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride):
    """The CUDA kernel of the custom op: same arguments and result as fused_spec.fused_wtconv2d_spec."""
    from .fused_spec import fused_wtconv2d_spec
    from .ops import check_arguments, plugin_can_run
    check_arguments(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
    if x.dtype not in DTYPES or plugin_can_run(kernel_size, wt_levels, stride) is not None:
        # float64, k > 15, levels > 8: outside the kernels' coverage, the spec computes it.
        return fused_wtconv2d_spec(x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
    x = x.contiguous()  # NCHW; a channels-last-strided input costs one copy here
    f32 = dict(device=x.device, dtype=torch.float32)
    base_weight = base_weight.to(**f32).contiguous()
    base_bias = base_bias.to(**f32).contiguous()
    wavelet_weight = wavelet_weight.to(**f32).contiguous()
    b, c, h, w = x.shape
    out = torch.empty((b, c, (h + stride - 1) // stride, (w + stride - 1) // stride), dtype=x.dtype, device=x.device)
    forward_into(out, x, base_weight, base_bias, wavelet_weight, kernel_size, wt_levels, stride)
    return out


def register() -> None:
    """Register the CUDA kernel of ``wtconv::fused_wtconv2d`` (idempotent). Loads the library now so a
    missing build fails here, with the build command, rather than inside a model's forward."""
    global _registered
    load_library()
    if _registered:
        return
    from .ops import fused_wtconv2d
    fused_wtconv2d.register_kernel("cuda")(fused_wtconv2d_cuda)
    _registered = True
