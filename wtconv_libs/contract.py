"""The ONNX <-> TensorRT plugin contract, defined once on the Python side (docs/design.md §4).

The C++ side defines the same names once in ``plugin/common/wtconvPluginContract.h``; a test reads that
header and checks the two agree, so a rename on one side cannot slip through.
"""

# ONNX node and TensorRT plugin identity. TensorRT's ONNX parser finds the plugin creator by
# op_type + the node attributes plugin_version / plugin_namespace; the domain is ignored by TensorRT.
OP_TYPE = "WTConv2d"
ONNX_DOMAIN = "wtconv"
PLUGIN_NAME = OP_TYPE
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = ""

# Attribute / plugin-field names (same on both sides).
FIELD_KERNEL_SIZE = "kernel_size"
FIELD_WT_LEVELS = "wt_levels"
FIELD_STRIDE = "stride"
FIELD_BASE_WEIGHT = "base_weight"  # C*k*k floats, W~b = sb * Wb
FIELD_BASE_BIAS = "base_bias"  # C floats,     b~b = sb * bb
FIELD_WAVELET_WEIGHT = "wavelet_weight"  # L*4C*k*k floats, W~l = sl * Wl, level-major
# Optional INT, default 0: 1 makes x (N, H, W, C) and y (N, ceil(H/s), ceil(W/s), C), dense (docs/design.md §4).
FIELD_CHANNELS_LAST = "channels_last"
FIELD_PLUGIN_VERSION = "plugin_version"
FIELD_PLUGIN_NAMESPACE = "plugin_namespace"

INT_FIELDS = (FIELD_KERNEL_SIZE, FIELD_WT_LEVELS, FIELD_STRIDE)
FLOAT_FIELDS = (FIELD_BASE_WEIGHT, FIELD_BASE_BIAS, FIELD_WAVELET_WEIGHT)

# Limits of the CUDA kernels and the plugin (plugin/kernels/wtconvKernel.h). The PyTorch reference
# has no such limits; the exporter checks them so a model the plugin cannot run fails at export.
MAX_KERNEL_SIZE = 15
MAX_WT_LEVELS = 8
MAX_DIM = 2**31 - 64  # largest batch, channels, height or width the kernels take (wtconvKernel.cu, kMaxDim)

# ONNX metadata_props keys written by the exporter and read by the engine builder ("wtconv_trt.source",
# "wtconv_trt.weights", "wtconv_trt.input_shape", "wtconv_trt.precision", ...): how a built engine finds the
# PyTorch model it came from.
METADATA_PREFIX = "wtconv_trt."


def count_wtconv_nodes(model_proto) -> int:
    """The WTConv2d nodes (op_type and domain above) in an ONNX ModelProto's main graph."""
    return sum(1 for n in model_proto.graph.node if n.op_type == OP_TYPE and n.domain == ONNX_DOMAIN)
