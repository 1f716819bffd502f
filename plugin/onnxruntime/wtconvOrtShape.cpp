// wtconvOrtShape.cpp — see wtconvOrtShape.h.
//
// ONNX Runtime calls this while it resolves the graph (at session creation, and again after each graph rewrite),
// with the input's type and shape as far as it knows them. The C API (version 17) can read the node's INT and
// FLOATS attributes here (ReadOpAttr) but not a TENSOR attribute, so C comes from base_bias when it is FLOATS and
// from the input otherwise. ONNX Runtime ignores the status this function returns (custom_ops.cc, CreateSchema),
// so an input that does not fit is not reported here: y's shape is left unknown and kernel creation, which sees
// the inferred input shape, refuses the node with its one-line message (wtconvOrtNode.cpp).
#include "wtconvOrtShape.h"

#include "wtconvPluginContract.h"

#include <atomic>
#include <cstdint>
#include <string>

namespace wtconv
{
namespace ort
{

namespace
{

// One dimension: a number (value >= 0), a name (a symbolic dimension), or neither (unknown).
struct Size
{
    int64_t value{-1};
    std::string name;
};

OrtOpAttr const* attribute(OrtShapeInferContext* context, char const* name)
{
    OrtOpAttr const* attr = nullptr;
    return succeeded(api().ShapeInferContext_GetAttribute(context, name, &attr)) ? attr : nullptr;
}

// An INT attribute; false when the attribute is absent or of another type.
bool readInt(OrtOpAttr const* attr, int64_t& value)
{
    size_t bytes = 0;
    return attr != nullptr && succeeded(api().ReadOpAttr(attr, ORT_OP_ATTR_INT, &value, sizeof(value), &bytes));
}

// The length of a FLOATS attribute; 0 when it is absent, empty or of another type (a float TENSOR).
int64_t floatsLength(OrtOpAttr const* attr)
{
    size_t bytes = 0;
    if (attr != nullptr)
    {
        // Asked with no buffer, ReadOpAttr fails for a non-empty list and says how many bytes it needs.
        succeeded(api().ReadOpAttr(attr, ORT_OP_ATTR_FLOATS, nullptr, 0, &bytes));
    }
    return static_cast<int64_t>(bytes / sizeof(float));
}

// A dimension that is neither a number nor a name must still be written as one of the two (SetOutputTypeShape
// writes a number for every unnamed dimension, and -1 would then be taken for a real size). A name of its own,
// used once in the process, claims no equality with any other dimension.
Size named(Size const& x)
{
    static std::atomic<uint64_t> next{0};
    if (x.value >= 0 || !x.name.empty())
    {
        return x;
    }
    return Size{-1, "wtconv_unknown_" + std::to_string(next.fetch_add(1, std::memory_order_relaxed))};
}

// ceil(x / s) of a dimension (docs/design.md §2.1: y keeps the pixels s*i). A name becomes the name of the
// expression, so equal inputs give equal names.
Size strided(Size const& x, int64_t s)
{
    if (s == 1 || (x.value < 0 && x.name.empty()))
    {
        return named(x);
    }
    if (x.value >= 0)
    {
        return Size{(x.value + s - 1) / s, ""};
    }
    return Size{-1, "ceil(" + x.name + "/" + std::to_string(s) + ")"};
}

// Writes y's type and shape.
void setOutput(OrtShapeInferContext* context, ONNXTensorElementDataType type, Size const (&sizes)[4])
{
    OrtApi const& a = api();
    OrtTensorTypeAndShapeInfo* info = nullptr;
    check(a.CreateTensorTypeAndShapeInfo(&info), "WTConv2d: shape inference");
    int64_t values[4];
    char const* names[4];
    for (int i = 0; i < 4; ++i)
    {
        values[i] = sizes[i].value;
        names[i] = sizes[i].name.c_str();
    }
    OrtStatus* status = a.SetTensorElementType(info, type);
    if (status == nullptr)
    {
        status = a.SetDimensions(info, values, 4);
    }
    if (status == nullptr)
    {
        status = a.SetSymbolicDimensions(info, names, 4);
    }
    if (status == nullptr)
    {
        status = a.ShapeInferContext_SetOutputTypeShape(context, 0, info);
    }
    a.ReleaseTensorTypeAndShapeInfo(info);
    check(status, "WTConv2d: shape inference");
}

} // namespace

OrtStatus* ORT_API_CALL inferOutputShape(OrtCustomOp const* /*op*/, OrtShapeInferContext* context) noexcept
{
    try
    {
        OrtApi const& a = api();
        size_t inputs = 0;
        OrtTensorTypeAndShapeInfo* x = nullptr; // owned by the context
        if (!succeeded(a.ShapeInferContext_GetInputCount(context, &inputs)) || inputs != 1
            || !succeeded(a.ShapeInferContext_GetInputTypeShape(context, 0, &x)) || x == nullptr)
        {
            return nullptr;
        }
        ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
        size_t rank = 0;
        if (!succeeded(a.GetTensorElementType(x, &type)) || !succeeded(a.GetDimensionsCount(x, &rank)) || rank != 4)
        {
            return nullptr; // rank 0 also stands for an input of unknown shape
        }
        int64_t dims[4] = {-1, -1, -1, -1};
        char const* names[4] = {nullptr, nullptr, nullptr, nullptr};
        if (!succeeded(a.GetDimensions(x, dims, 4)) || !succeeded(a.GetSymbolicDimensions(x, names, 4)))
        {
            return nullptr;
        }
        int64_t stride = 0;
        if (!readInt(attribute(context, contract::kFIELD_STRIDE), stride) || stride < 1)
        {
            return nullptr;
        }
        int64_t channelsLast = 0;
        OrtOpAttr const* layout = attribute(context, contract::kFIELD_CHANNELS_LAST);
        if (layout != nullptr && (!readInt(layout, channelsLast) || (channelsLast != 0 && channelsLast != 1)))
        {
            return nullptr;
        }
        int const c = channelsLast != 0 ? 3 : 1;
        int const h = channelsLast != 0 ? 1 : 2;
        int const w = channelsLast != 0 ? 2 : 3;
        int64_t const channels = floatsLength(attribute(context, contract::kFIELD_BASE_BIAS));
        if (channels > 0 && dims[c] >= 0 && dims[c] != channels)
        {
            return nullptr;
        }
        Size in[4];
        for (int i = 0; i < 4; ++i)
        {
            in[i] = Size{dims[i], dims[i] >= 0 || names[i] == nullptr ? "" : names[i]};
        }
        Size out[4];
        out[0] = named(in[0]);
        out[c] = channels > 0 ? Size{channels, ""} : named(in[c]);
        out[h] = strided(in[h], stride);
        out[w] = strided(in[w], stride);
        setOutput(context, type, out);
    }
    catch (...)
    {
        // Nothing to report to (see above): y's shape stays unknown.
    }
    return nullptr;
}

} // namespace ort
} // namespace wtconv
