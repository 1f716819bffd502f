"""wtconv_torch: the PyTorch side of wtconv-trt (docs/design.md §1).

Reference ``WTConv2d`` (published numerics and names), ``WTConvNeXt``, Haar, weight folding, the fused operator's
executable spec, its custom op and the ctypes loader of the CUDA kernels behind it (``cuda_kernels.py``), the
shipped default model and checkpoints, the published WTConv2d found in any model. Names are imported lazily
(PEP 562), so ``import wtconv_torch`` and ``wtconv-trt --help`` do not import torch.
"""

import importlib

from wtconv_core.version import __version__

_EXPORTS = {
    "WTConv2d": ".wtconv2d",
    "WTConvNeXt": ".wtconvnext",
    "create_wtconvnext": ".wtconvnext",
    "FoldedWTConv": ".folding",
    "fold_wtconv": ".folding",
    "fused_wtconv2d_spec": ".fused_spec",
    "FusedWTConv2d": ".fused_module",
    "fuse_wtconv_layers": ".fused_module",
    "load_checkpoint": ".models",
    "load_default_model": ".models",
    "convert_published_wtconv": ".published",
    "find_wtconv_layers": ".published",
    "is_published_wtconv": ".published",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
