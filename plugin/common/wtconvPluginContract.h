// wtconvPluginContract.h — the ONNX <-> TensorRT plugin contract, C++ side (docs/design.md §4).
//
// Defined once here; the Python side is wtconv_libs/contract.py and tests/test_plugin_contract.py
// parses this header and checks the two agree. TensorRT's ONNX parser finds the creator by
// op_type == kPLUGIN_NAME plus the node attributes plugin_version / plugin_namespace, and turns every
// other attribute into a plugin field of the same name: INT -> kINT32 (one element), FLOATS -> kFLOAT32.
#pragma once

#include <cstdint>

namespace wtconv
{
namespace contract
{

constexpr char const* kPLUGIN_NAME = "WTConv2d";
// The ONNX domain of the node (TensorRT ignores it; ONNX Runtime finds the custom op by domain and name).
constexpr char const* kONNX_DOMAIN = "wtconv";
constexpr char const* kPLUGIN_VERSION = "1";
constexpr char const* kPLUGIN_NAMESPACE = "";

// Attribute / plugin-field names (same as the ONNX attributes).
constexpr char const* kFIELD_KERNEL_SIZE = "kernel_size";       // int32, odd, 1..kMAX_KERNEL_SIZE
constexpr char const* kFIELD_WT_LEVELS = "wt_levels";           // int32, 1..kMAX_WT_LEVELS
constexpr char const* kFIELD_STRIDE = "stride";                 // int32, >= 1
constexpr char const* kFIELD_BASE_WEIGHT = "base_weight";       // float32 (or float16), C*k*k
constexpr char const* kFIELD_BASE_BIAS = "base_bias";           // float32 (or float16), C — defines C
constexpr char const* kFIELD_WAVELET_WEIGHT = "wavelet_weight"; // float32 (or float16), L*4C*k*k
// Optional, default 0: the layout of x and y. 0: (N, C, H, W); 1: channels-last, x (N, H, W, C) and y
// (N, ceil(H/s), ceil(W/s), C), both dense (docs/design.md §4).
constexpr char const* kFIELD_CHANNELS_LAST = "channels_last"; // int32, 0 or 1
// Consumed by the ONNX parser to find the creator; ignored when passed on to createPlugin.
constexpr char const* kFIELD_PLUGIN_VERSION = "plugin_version";
constexpr char const* kFIELD_PLUGIN_NAMESPACE = "plugin_namespace";

// Limits of the CUDA kernels (plugin/kernels/wtconvKernel.h: kMaxKernelSize, kMaxLevels).
constexpr int32_t kMAX_KERNEL_SIZE = 15;
constexpr int32_t kMAX_WT_LEVELS = 8;

// Engine-only fields: written by getFieldsToSerialize, required when an engine is deserialized
// (TensorRTPhase::kRUNTIME), never produced by the ONNX parser. Bump kSERIALIZATION_VERSION whenever
// the serialized field set changes meaning; an engine with another version is rejected.
constexpr char const* kFIELD_SERIALIZATION_VERSION = "wtconv_serialization_version"; // int32
constexpr char const* kFIELD_WEIGHTS_CHECKSUM = "wtconv_weights_checksum"; // int32, FNV-1a of the fp32 weights
constexpr int32_t kSERIALIZATION_VERSION = 1;

} // namespace contract
} // namespace wtconv
