// wtconvOrtNode.cpp — reading a WTConv2d node's attributes and checking its input (see wtconvOrtNode.h).
//
// ONNX Runtime's C API (the version-17 table this library asks for) reads an attribute by asking for one type; the
// wrong type or a missing attribute both fail. So each contract field is asked for as every type an attribute can
// have, and the first that answers says what the node holds: the decoder then refuses a wrong type by name, exactly as for TensorRT, whose ONNX parser turns INT /
// INTS into kINT32 fields, FLOAT / FLOATS and float tensors into kFLOAT32 (docs/design.md §4). A field none of the
// readers finds is absent. The C API cannot list a node's attributes, so unknown extra attributes go unnoticed here
// (TensorRT's parser passes them on and the plugin refuses them).
#include "wtconvOrtNode.h"

#include "wtconvPluginContract.h"

#include <cstring>
#include <deque>
#include <memory>
#include <vector>

namespace wtconv
{
namespace ort
{

namespace
{

// Owns the values the FieldViews point at.
struct AttributeValues
{
    std::deque<int64_t> ints;
    std::deque<std::vector<int64_t>> intArrays;
    std::deque<std::vector<float>> floatArrays;
    std::deque<std::vector<uint16_t>> halfArrays;
};

struct ValueDeleter
{
    void operator()(OrtValue* v) const noexcept
    {
        api().ReleaseValue(v);
    }
};

// A TENSOR attribute: float and float16 become weight fields, any other element type is named and refused.
bool readTensorAttribute(OrtKernelInfo const* info, char const* name, AttributeValues& store, FieldView& view)
{
    OrtAllocator* allocator = nullptr;
    if (!succeeded(api().GetAllocatorWithDefaultOptions(&allocator)))
    {
        return false;
    }
    OrtValue* raw = nullptr;
    if (!succeeded(api().KernelInfoGetAttribute_tensor(info, name, allocator, &raw)) || raw == nullptr)
    {
        return false;
    }
    std::unique_ptr<OrtValue, ValueDeleter> const value(raw);
    TensorDescription const d = describe(value.get());
    int64_t count = 1;
    for (int64_t dim : d.dims)
    {
        count *= dim;
    }
    void* data = nullptr;
    check(api().GetTensorMutableData(value.get(), &data), std::string("WTConv2d: reading attribute '") + name + "'");
    view.length = count;
    if (d.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
    {
        float const* f = static_cast<float const*>(data);
        store.floatArrays.emplace_back(f, f + count);
        view.data = store.floatArrays.back().data();
        view.type = FieldType::kFLOAT32;
        view.typeName = "TENSOR(float32)";
    }
    else if (d.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16)
    {
        uint16_t const* h = static_cast<uint16_t const*>(data);
        store.halfArrays.emplace_back(h, h + count);
        view.data = store.halfArrays.back().data();
        view.type = FieldType::kFLOAT16;
        view.typeName = "TENSOR(float16)";
    }
    else
    {
        view.type = FieldType::kOTHER;
        view.typeName = "a TENSOR of another element type";
    }
    return true;
}

// The attribute `name` as a FieldView; false when the node has no attribute of that name. ONNX Runtime's scalar and
// tensor readers check the attribute's type, so they are asked first: one call answers for an INT, FLOAT, STRING
// or TENSOR attribute. Its list readers do not check the type (they return the list of the type asked for, empty
// for an attribute of another type, and fail only when the attribute is absent): a list is judged by which of the
// two finds values. An empty list of any type reads as FLOATS of length 0 (refused by its length).
bool readAttribute(OrtKernelInfo const* info, char const* name, AttributeValues& store, FieldView& view)
{
    OrtApi const& a = api();
    view = FieldView{};
    view.name = name;
    int64_t integer = 0;
    if (succeeded(a.KernelInfoGetAttribute_int64(info, name, &integer)))
    {
        store.ints.push_back(integer);
        view = FieldView{name, &store.ints.back(), FieldType::kINT64, 1, "INT"};
        return true;
    }
    float single = 0.0F;
    if (succeeded(a.KernelInfoGetAttribute_float(info, name, &single)))
    {
        store.floatArrays.emplace_back(1, single);
        view = FieldView{name, store.floatArrays.back().data(), FieldType::kFLOAT32, 1, "FLOAT"};
        return true;
    }
    size_t bytes = 0;
    if (succeeded(a.KernelInfoGetAttribute_string(info, name, nullptr, &bytes)))
    {
        view = FieldView{name, nullptr, FieldType::kOTHER, 1, "STRING"};
        return true;
    }
    if (readTensorAttribute(info, name, store, view))
    {
        return true;
    }
    size_t intCount = 0;
    size_t floatCount = 0;
    if (!succeeded(a.KernelInfoGetAttributeArray_int64(info, name, nullptr, &intCount)))
    {
        return false; // absent
    }
    if (intCount > 0)
    {
        store.intArrays.emplace_back(intCount);
        std::vector<int64_t>& values = store.intArrays.back();
        check(a.KernelInfoGetAttributeArray_int64(info, name, values.data(), &intCount),
            std::string("WTConv2d: reading attribute '") + name + "'");
        view = FieldView{name, values.data(), FieldType::kINT64, static_cast<int64_t>(intCount), "INTS"};
        return true;
    }
    check(a.KernelInfoGetAttributeArray_float(info, name, nullptr, &floatCount),
        std::string("WTConv2d: reading attribute '") + name + "'");
    store.floatArrays.emplace_back(floatCount);
    std::vector<float>& values = store.floatArrays.back();
    if (floatCount > 0)
    {
        check(a.KernelInfoGetAttributeArray_float(info, name, values.data(), &floatCount),
            std::string("WTConv2d: reading attribute '") + name + "'");
    }
    view = FieldView{name, values.data(), FieldType::kFLOAT32, static_cast<int64_t>(floatCount),
        floatCount > 0 ? "FLOATS" : "an empty list"};
    return true;
}

// plugin_version / plugin_namespace select the TensorRT creator; here they must name this library's op.
void checkLookupAttribute(OrtKernelInfo const* info, std::string const& who, char const* name, char const* expected)
{
    size_t bytes = 0;
    if (!succeeded(api().KernelInfoGetAttribute_string(info, name, nullptr, &bytes)))
    {
        AttributeValues store;
        FieldView view;
        if (readAttribute(info, name, store, view))
        {
            throw OrtError(
                ORT_INVALID_GRAPH, who + ": field '" + name + "': expected type STRING, given " + view.typeName);
        }
        return; // absent: the defaults are this op's
    }
    std::string value(bytes, '\0');
    check(api().KernelInfoGetAttribute_string(info, name, &value[0], &bytes), who + ": reading '" + name + "'");
    value.resize(bytes > 0 ? bytes - 1 : 0);
    if (value != expected)
    {
        throw OrtError(ORT_INVALID_GRAPH,
            who + ": field '" + name + "': expected \"" + expected
                + "\" (the WTConv2d this library implements), given \"" + value + "\"");
    }
}

// Where C, H and W are in the node's tensors: (B, C, H, W), or (B, H, W, C) with channels_last = 1.
int channelAxis(NodeConfig const& node)
{
    return node.fields.channelsLast ? 3 : 1;
}

char const* layoutName(NodeConfig const& node)
{
    return node.fields.channelsLast ? "(B, H, W, C) (channels_last = 1)" : "(B, C, H, W)";
}

bool supportedType(ONNXTensorElementDataType type)
{
    return type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
}

std::string typeMessage(std::string const& who, ONNXTensorElementDataType type)
{
    return who + ": input 0: expected float32 or float16, given " + elementTypeName(type)
        + " (export with --precision fp32 or fp16)";
}

// The input's type and shape as far as the graph gives them (declared in the model, or inferred by ONNX Runtime from
// the nodes before, ours included: wtconvOrtShape.cpp), checked at session creation.
ONNXTensorElementDataType checkDeclaredInput(OrtKernelInfo const* info, NodeConfig const& node)
{
    OrtTypeInfo* typeInfo = nullptr;
    if (!succeeded(api().KernelInfo_GetInputTypeInfo(info, 0, &typeInfo)) || typeInfo == nullptr)
    {
        return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED; // undeclared: checked at run time
    }
    std::unique_ptr<OrtTypeInfo, void (*)(OrtTypeInfo*)> const owner(
        typeInfo, [](OrtTypeInfo* t) { api().ReleaseTypeInfo(t); });
    OrtTensorTypeAndShapeInfo const* tensor = nullptr;
    if (!succeeded(api().CastTypeInfoToTensorInfo(typeInfo, &tensor)) || tensor == nullptr)
    {
        throw OrtError(ORT_INVALID_GRAPH, node.who + ": input 0: expected a tensor (B, C, H, W)");
    }
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    check(api().GetTensorElementType(tensor, &type), node.who + ": reading the input type");
    if (type != ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED && !supportedType(type))
    {
        throw OrtError(ORT_INVALID_GRAPH, typeMessage(node.who, type));
    }
    size_t rank = 0;
    check(api().GetDimensionsCount(tensor, &rank), node.who + ": reading the input shape");
    // Rank 0 also stands for "no shape declared": only a declared rank other than 4 is refused here.
    if (rank != 0 && rank != 4)
    {
        throw OrtError(ORT_INVALID_GRAPH,
            node.who + ": input 0: expected a 4-D tensor " + layoutName(node) + ", the graph gives it rank "
                + std::to_string(rank));
    }
    if (rank == 4)
    {
        int64_t dims[4] = {0, 0, 0, 0};
        check(api().GetDimensions(tensor, dims, 4), node.who + ": reading the input shape");
        int64_t const channels = static_cast<int64_t>(node.fields.baseBias.size());
        int64_t const declared = dims[channelAxis(node)];
        if (declared > 0 && declared != channels)
        {
            throw OrtError(ORT_INVALID_GRAPH,
                node.who + ": input 0: the graph gives it C = " + std::to_string(declared) + " channels (dim "
                    + std::to_string(channelAxis(node)) + " of " + layoutName(node) + "), the field '"
                    + contract::kFIELD_BASE_BIAS + "' gives C = " + std::to_string(channels));
        }
    }
    return type;
}

} // namespace

NodeConfig readNode(OrtKernelInfo const* info)
{
    NodeConfig node;
    std::string const name = nodeName(info);
    node.who = std::string(contract::kPLUGIN_NAME) + " node" + (name.empty() ? "" : " '" + name + "'");
    checkLookupAttribute(info, node.who, contract::kFIELD_PLUGIN_VERSION, contract::kPLUGIN_VERSION);
    checkLookupAttribute(info, node.who, contract::kFIELD_PLUGIN_NAMESPACE, contract::kPLUGIN_NAMESPACE);

    char const* const names[] = {contract::kFIELD_KERNEL_SIZE, contract::kFIELD_WT_LEVELS, contract::kFIELD_STRIDE,
        contract::kFIELD_BASE_WEIGHT, contract::kFIELD_BASE_BIAS, contract::kFIELD_WAVELET_WEIGHT,
        contract::kFIELD_CHANNELS_LAST};
    AttributeValues store;
    std::vector<FieldView> views;
    for (char const* field : names)
    {
        FieldView view;
        if (readAttribute(info, field, store, view))
        {
            views.push_back(view);
        }
    }
    FieldVocabulary const words{node.who, "attributes", "INT (one integer)", "FLOATS (or a float32/float16 TENSOR)"};
    try
    {
        node.fields = decodeLayerFields(views.data(), static_cast<int64_t>(views.size()), false, words);
    }
    catch (FieldError const& e)
    {
        throw OrtError(ORT_INVALID_GRAPH, e.what());
    }
    node.type = checkDeclaredInput(info, node);
    return node;
}

RunShape checkInput(NodeConfig const& node, TensorDescription const& input)
{
    if (!supportedType(input.type))
    {
        throw OrtError(ORT_INVALID_ARGUMENT, typeMessage(node.who, input.type));
    }
    if (input.dims.size() != 4)
    {
        throw OrtError(ORT_INVALID_ARGUMENT,
            node.who + ": input 0: expected a 4-D tensor " + layoutName(node) + ", given rank "
                + std::to_string(input.dims.size()));
    }
    int64_t const channels = static_cast<int64_t>(node.fields.baseBias.size());
    bool const last = node.fields.channelsLast;
    if (input.dims[channelAxis(node)] != channels)
    {
        throw OrtError(ORT_INVALID_ARGUMENT,
            node.who + ": input 0: expected C = " + std::to_string(channels) + " channels (the length of '"
                + contract::kFIELD_BASE_BIAS + "') in dim " + std::to_string(channelAxis(node)) + " of "
                + layoutName(node) + ", given a tensor of shape (" + std::to_string(input.dims[0]) + ", "
                + std::to_string(input.dims[1]) + ", " + std::to_string(input.dims[2]) + ", "
                + std::to_string(input.dims[3]) + ")");
    }
    RunShape shape;
    shape.type = input.type;
    shape.batch = input.dims[0];
    shape.height = input.dims[last ? 1 : 2];
    shape.width = input.dims[last ? 2 : 3];
    int64_t const s = node.fields.stride;
    shape.outHeight = (shape.height + s - 1) / s;
    shape.outWidth = (shape.width + s - 1) / s;
    return shape;
}

RunTensors prepareRun(NodeConfig const& node, OrtKernelContext* context)
{
    OrtApi const& a = api();
    RunTensors run;
    check(a.KernelContext_GetInput(context, 0, &run.inputValue), node.who + ": reading input 0");
    run.shape = checkInput(node, describe(run.inputValue));
    int64_t const c = static_cast<int64_t>(node.fields.baseBias.size());
    int64_t const nchw[4] = {run.shape.batch, c, run.shape.outHeight, run.shape.outWidth};
    int64_t const nhwc[4] = {run.shape.batch, run.shape.outHeight, run.shape.outWidth, c};
    int64_t const* dims = node.fields.channelsLast ? nhwc : nchw;
    OrtValue* output = nullptr;
    check(a.KernelContext_GetOutput(context, 0, dims, 4, &output), node.who + ": allocating the output");
    if (run.shape.elements() == 0)
    {
        return run;
    }
    void* in = nullptr;
    check(a.GetTensorMutableData(const_cast<OrtValue*>(run.inputValue), &in), node.who + ": reading input 0");
    check(a.GetTensorMutableData(output, &run.output), node.who + ": reading the output");
    run.input = in;
    return run;
}

} // namespace ort
} // namespace wtconv
