// wtconvOrtSupport.cpp — see wtconvOrtSupport.h.
#include "wtconvOrtSupport.h"

#include <atomic>
#include <exception>
#include <new>

namespace wtconv
{
namespace ort
{

namespace
{
std::atomic<OrtApi const*> gApi{nullptr};
std::atomic<OrtApi const*> gApi18{nullptr};
} // namespace

OrtApi const& api()
{
    return *gApi.load(std::memory_order_acquire);
}

void setApi(OrtApi const* table)
{
    gApi.store(table, std::memory_order_release);
}

OrtApi const* api18()
{
    return gApi18.load(std::memory_order_acquire);
}

void setApi18(OrtApi const* table)
{
    gApi18.store(table, std::memory_order_release);
}

void check(OrtStatus* status, std::string const& what)
{
    if (status == nullptr)
    {
        return;
    }
    OrtErrorCode const code = api().GetErrorCode(status);
    std::string const message = what + ": " + api().GetErrorMessage(status);
    api().ReleaseStatus(status);
    throw OrtError(code, message);
}

bool succeeded(OrtStatus* status) noexcept
{
    if (status == nullptr)
    {
        return true;
    }
    api().ReleaseStatus(status);
    return false;
}

OrtStatus* statusFromCurrentException() noexcept
{
    try
    {
        throw;
    }
    catch (OrtError const& e)
    {
        return api().CreateStatus(e.code(), e.what());
    }
    catch (std::bad_alloc const&)
    {
        return api().CreateStatus(ORT_RUNTIME_EXCEPTION, "WTConv2d: out of host memory");
    }
    catch (std::exception const& e)
    {
        return api().CreateStatus(ORT_RUNTIME_EXCEPTION, e.what());
    }
    catch (...)
    {
        return api().CreateStatus(ORT_RUNTIME_EXCEPTION, "WTConv2d: unknown exception");
    }
}

char const* elementTypeName(ONNXTensorElementDataType type) noexcept
{
    switch (type)
    {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return "int16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return "uint16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return "uint64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return "string";
    default: return "another element type";
    }
}

TensorDescription describe(OrtValue const* value)
{
    OrtTensorTypeAndShapeInfo* info = nullptr;
    check(api().GetTensorTypeAndShape(value, &info), "WTConv2d: reading a tensor's type and shape");
    TensorDescription out;
    OrtStatus* status = api().GetTensorElementType(info, &out.type);
    size_t rank = 0;
    if (status == nullptr)
    {
        status = api().GetDimensionsCount(info, &rank);
    }
    if (status == nullptr)
    {
        out.dims.resize(rank);
        status = api().GetDimensions(info, out.dims.data(), rank);
    }
    api().ReleaseTensorTypeAndShapeInfo(info);
    check(status, "WTConv2d: reading a tensor's type and shape");
    return out;
}

std::string nodeName(OrtKernelInfo const* info)
{
    size_t size = 0;
    if (!succeeded(api().KernelInfo_GetNodeName(info, nullptr, &size)) || size == 0)
    {
        return "";
    }
    std::string name(size, '\0');
    if (!succeeded(api().KernelInfo_GetNodeName(info, &name[0], &size)))
    {
        return "";
    }
    name.resize(size > 0 ? size - 1 : 0); // size counts the terminating NUL
    return name;
}

} // namespace ort
} // namespace wtconv
