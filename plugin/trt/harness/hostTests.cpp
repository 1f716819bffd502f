// hostTests.cpp — the harness's host part: every build-time method, creation from parser-shaped fields, bad
// inputs, serialization round trips and static registration. Needs no CUDA device (the plugin's attempts to
// upload weights fail and are deferred).
#include "harnessSupport.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

namespace wtconv_harness
{
namespace
{

// ---------------------------------------------------------------------------------------------------
// Host part

void hostBuildMethods(IPluginCreatorV3One* creator, LayerConfig const& l, std::string const& tag)
{
    FieldSet fields = parserFields(l);
    PluginFieldCollection fc = fields.collection();
    gLogger.clear();
    IPluginV3* plugin = creator->createPlugin("wtconv_layer", &fc, TensorRTPhase::kBUILD);
    if (!check(plugin != nullptr, tag + "createPlugin(kBUILD) from ONNX-parser fields", gLogger.last()))
    {
        return;
    }
    check(std::string(plugin->getInterfaceInfo().kind) == "PLUGIN" && plugin->getInterfaceInfo().major == 1,
        tag + "IPluginV3 interface info");
    PluginHandles h = capabilities(plugin);
    check(h.core != nullptr && h.build != nullptr && h.runtime != nullptr, tag + "core/build/runtime capabilities");
    if (h.core == nullptr || h.build == nullptr || h.runtime == nullptr)
    {
        delete plugin;
        return;
    }
    check(std::string(h.core->getInterfaceInfo().kind) == "PLUGIN_V3ONE_CORE"
            && std::string(h.build->getInterfaceInfo().kind) == "PLUGIN_V3ONE_BUILD"
            && std::string(h.runtime->getInterfaceInfo().kind) == "PLUGIN_V3ONE_RUNTIME",
        tag + "capability interface kinds");
    check(std::string(h.core->getPluginName()) == contract::kPLUGIN_NAME
            && std::string(h.core->getPluginVersion()) == contract::kPLUGIN_VERSION
            && std::string(h.core->getPluginNamespace()) == contract::kPLUGIN_NAMESPACE,
        tag + "plugin name/version/namespace");
    check(h.build->getNbOutputs() == 1, tag + "getNbOutputs == 1");

    // Output data types: y has x's dtype; non-float inputs are refused.
    for (DataType t : {DataType::kFLOAT, DataType::kHALF})
    {
        DataType out = DataType::kINT8;
        int32_t const rc = h.build->getOutputDataTypes(&out, 1, &t, 1);
        check(rc == 0 && out == t,
            tag + "getOutputDataTypes keeps the input dtype " + std::to_string(static_cast<int>(t)));
    }
    {
        DataType in = DataType::kINT32;
        DataType out = DataType::kFLOAT;
        check(h.build->getOutputDataTypes(&out, 1, &in, 1) != 0, tag + "getOutputDataTypes refuses int32");
    }

    // Output shapes through the test IExprBuilder, symbolic N, H, W and constant C.
    {
        TestExprBuilder eb;
        DimsExprs in{};
        in.nbDims = 4;
        in.d[0] = eb.mBuilder.symbol("N");
        in.d[1] = eb.mBuilder.constant(l.channels);
        in.d[2] = eb.mBuilder.symbol("H");
        in.d[3] = eb.mBuilder.symbol("W");
        DimsExprs out{};
        int32_t const rc = h.build->getOutputShapes(&in, 1, nullptr, 0, &out, 1, eb);
        bool ok = rc == 0 && out.nbDims == 4;
        std::string detail;
        for (int64_t n : {1, 3})
        {
            for (int64_t hh = 1; ok && hh <= 70; hh += 3)
            {
                for (int64_t ww : {1, 2, 5, 64, 97})
                {
                    std::map<std::string, int64_t> env{{"N", n}, {"H", hh}, {"W", ww}};
                    bool const good = evaluate(out.d[0], env) == n && evaluate(out.d[1], env) == l.channels
                        && evaluate(out.d[2], env) == ceilDiv(hh, l.stride)
                        && evaluate(out.d[3], env) == ceilDiv(ww, l.stride);
                    if (!good)
                    {
                        detail = "wrong at N=" + std::to_string(n) + " H=" + std::to_string(hh)
                            + " W=" + std::to_string(ww);
                        ok = false;
                        break;
                    }
                }
            }
        }
        check(ok,
            tag + "getOutputShapes = (N, C, ceil(H/s), ceil(W/s)) for symbolic N, H, W (s=" + std::to_string(l.stride)
                + ")",
            detail);
        check(l.stride == 1 || eb.mBuilder.mOperations >= 2, tag + "getOutputShapes uses IExprBuilder operations");

        gLogger.clear();
        DimsExprs bad = in;
        bad.d[1] = eb.mBuilder.constant(l.channels + 1);
        check(h.build->getOutputShapes(&bad, 1, nullptr, 0, &out, 1, eb) != 0 && contains(gLogger.last(), "channel")
                && contains(gLogger.last(), std::to_string(l.channels))
                && contains(gLogger.last(), std::to_string(l.channels + 1)),
            tag + "getOutputShapes rejects a constant channel count != C, naming both", gLogger.last());
        gLogger.clear();
        DimsExprs three = in;
        three.nbDims = 3;
        check(h.build->getOutputShapes(&three, 1, nullptr, 0, &out, 1, eb) != 0 && contains(gLogger.last(), "4-D")
                && contains(gLogger.last(), "3-D"),
            tag + "getOutputShapes rejects a 3-D input", gLogger.last());
        DimsExprs symbolicC = in;
        symbolicC.d[1] = eb.mBuilder.symbol("C");
        check(h.build->getOutputShapes(&symbolicC, 1, nullptr, 0, &out, 1, eb) == 0,
            tag + "getOutputShapes accepts a symbolic channel dim (checked at configurePlugin)");
    }

    // supportsFormatCombination over every DataType x TensorFormat, for the input and then the output. Expected:
    // linear fp32 / fp16 (/ bf16 when the kernels have it) and, once the kernels accept channels-last I/O, the
    // channels-last formats TensorRT defines for those dtypes (channelsLastPitch).
    std::vector<std::pair<DataType, TensorFormat>> accepted;
    {
        int32_t const nbTypes = EnumMax<DataType>();
        int32_t const nbFormats = EnumMax<TensorFormat>();
        bool const nhwc = kernelsAcceptChannelsLast(l);
        std::printf("INFO %schannels-last I/O %s by the kernels\n", tag.c_str(), nhwc ? "accepted" : "not accepted");
        bool const bf16 = kernelsAccept(DataType::kBF16, l);
        std::printf("INFO %sbf16 %s by the kernels\n", tag.c_str(), bf16 ? "supported" : "not supported");
        bool asExpected = true;
        std::string detail;
        for (int32_t t = 0; t < nbTypes; ++t)
        {
            for (int32_t f = 0; f < nbFormats; ++f)
            {
                DataType const type = static_cast<DataType>(t);
                TensorFormat const format = static_cast<TensorFormat>(f);
                DynamicPluginTensorDesc io[2] = {};
                io[0].desc.type = type;
                io[0].desc.format = format;
                io[0].desc.dims = dims4(-1, l.channels, -1, -1);
                bool const yes = h.build->supportsFormatCombination(0, io, 1, 1);
                bool const typeOk = type == DataType::kFLOAT || type == DataType::kHALF
                    || (type == DataType::kBF16 && bf16);
                bool const expected = typeOk
                    && (format == TensorFormat::kLINEAR || (nhwc && channelsLastPitch(format, type, l.channels) > 0));
                if (yes != expected)
                {
                    asExpected = false;
                    detail += std::string(yes ? " accepted" : " refused") + " type " + std::to_string(t) + " format "
                        + std::to_string(f);
                }
                if (yes)
                {
                    accepted.emplace_back(type, format);
                }
            }
        }
        check(asExpected,
            tag + "supportsFormatCombination(pos 0): exactly linear fp32/fp16/bf16" + (nhwc ? " + channels-last" : "")
                + " over " + std::to_string(nbTypes) + "x" + std::to_string(nbFormats) + " pairs",
            detail);
        bool outputOk = true;
        for (auto const& in : accepted)
        {
            for (int32_t t = 0; t < nbTypes; ++t)
            {
                for (int32_t f = 0; f < nbFormats; ++f)
                {
                    DynamicPluginTensorDesc io[2] = {};
                    io[0].desc.type = in.first;
                    io[0].desc.format = in.second;
                    io[1].desc.type = static_cast<DataType>(t);
                    io[1].desc.format = static_cast<TensorFormat>(f);
                    bool const yes = h.build->supportsFormatCombination(1, io, 1, 1);
                    bool const expected = static_cast<DataType>(t) == in.first
                        && static_cast<TensorFormat>(f) == in.second;
                    outputOk = outputOk && yes == expected;
                }
            }
        }
        check(outputOk, tag + "supportsFormatCombination(pos 1): exactly the input's dtype and format");
        DynamicPluginTensorDesc io[2] = {};
        check(!h.build->supportsFormatCombination(2, io, 1, 1), tag + "supportsFormatCombination: pos 2 refused");
    }

    // configurePlugin in a channels-last format: accepted (with the kernels' workspace for that layout) exactly
    // when the kernels accept channels-last I/O; the output must have the input's format.
    {
        Dims const any = dims4(-1, l.channels, -1, -1);
        Dims const min = dims4(1, l.channels, 1, 1);
        Dims const max = dims4(2, l.channels, 40, 36);
        DynamicPluginTensorDesc in = dynDesc(DataType::kHALF, any, min, max);
        DynamicPluginTensorDesc out = dynDesc(DataType::kHALF, any, min, max);
        in.desc.format = TensorFormat::kHWC8;
        out.desc.format = TensorFormat::kHWC8;
        gLogger.clear();
        if (kernelsAcceptChannelsLast(l))
        {
            check(h.build->configurePlugin(&in, 1, &out, 1) == 0, tag + "configurePlugin (fp16 kHWC8)", gLogger.last());
            wtconv::WTConvParams p = kernelParams(DataType::kHALF, max, l);
            p.layout = wtconv::Layout::kNHWC;
            p.channelPitch = channelsLastPitch(TensorFormat::kHWC8, DataType::kHALF, l.channels);
            check(h.build->getWorkspaceSize(&in, 1, &out, 1) == wtconv::wtconvWorkspaceBytes(p),
                tag + "getWorkspaceSize (fp16 kHWC8) == wtconvWorkspaceBytes(NHWC, pitch round_up(C, 8))");
            DynamicPluginTensorDesc outLinear = dynDesc(DataType::kHALF, any, min, max);
            gLogger.clear();
            check(h.build->configurePlugin(&in, 1, &outLinear, 1) != 0 && contains(gLogger.last(), "format"),
                tag + "configurePlugin rejects output format != input format", gLogger.last());
        }
        else
        {
            check(h.build->configurePlugin(&in, 1, &out, 1) != 0 && contains(gLogger.last(), "kHWC8"),
                tag + "configurePlugin rejects kHWC8 while the kernels refuse channels-last I/O, naming it",
                gLogger.last());
        }
    }

    // configurePlugin + getWorkspaceSize with a dynamic profile.
    {
        Dims const any = dims4(-1, l.channels, -1, -1);
        Dims const min = dims4(1, l.channels, 1, 1);
        Dims const max = dims4(4, l.channels, 96, 80);
        DynamicPluginTensorDesc in = dynDesc(DataType::kHALF, any, min, max);
        DynamicPluginTensorDesc out = dynDesc(DataType::kHALF, dims4(-1, l.channels, -1, -1), min, max);
        gLogger.clear();
        check(
            h.build->configurePlugin(&in, 1, &out, 1) == 0, tag + "configurePlugin (dynamic N, H, W)", gLogger.last());
        size_t const ws = h.build->getWorkspaceSize(&in, 1, &out, 1);
        size_t const expected = wtconv::wtconvWorkspaceBytes(kernelParams(DataType::kHALF, max, l));
        check(ws == expected,
            tag + "getWorkspaceSize == wtconvWorkspaceBytes(profile max) = " + std::to_string(expected),
            "given " + std::to_string(ws));
        DynamicPluginTensorDesc in32 = dynDesc(DataType::kFLOAT, any, min, max);
        check(h.build->getWorkspaceSize(&in32, 1, &out, 1)
                == wtconv::wtconvWorkspaceBytes(kernelParams(DataType::kFLOAT, max, l)),
            tag + "getWorkspaceSize (fp32) == wtconvWorkspaceBytes");

        DynamicPluginTensorDesc badC = dynDesc(DataType::kHALF, dims4(-1, l.channels + 3, -1, -1), min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&badC, 1, &out, 1) != 0 && contains(gLogger.last(), "channel")
                && contains(gLogger.last(), std::to_string(l.channels + 3)),
            tag + "configurePlugin rejects channel mismatch, naming it", gLogger.last());
        DynamicPluginTensorDesc badProfile = dynDesc(DataType::kHALF, any, min, dims4(4, l.channels + 1, 96, 80));
        gLogger.clear();
        check(h.build->configurePlugin(&badProfile, 1, &out, 1) != 0 && contains(gLogger.last(), "profile"),
            tag + "configurePlugin rejects a profile whose channel range != C", gLogger.last());
        Dims three{};
        three.nbDims = 3;
        three.d[0] = l.channels;
        three.d[1] = 8;
        three.d[2] = 8;
        DynamicPluginTensorDesc bad3 = dynDesc(DataType::kHALF, three, three, three);
        gLogger.clear();
        check(h.build->configurePlugin(&bad3, 1, &out, 1) != 0 && contains(gLogger.last(), "4-D"),
            tag + "configurePlugin rejects a 3-D input", gLogger.last());
        DynamicPluginTensorDesc outF = dynDesc(DataType::kFLOAT, any, min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&in, 1, &outF, 1) != 0 && contains(gLogger.last(), "output 0"),
            tag + "configurePlugin rejects output dtype != input dtype", gLogger.last());
        DynamicPluginTensorDesc inInt = dynDesc(DataType::kINT8, any, min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&inInt, 1, &out, 1) != 0 && contains(gLogger.last(), "int8"),
            tag + "configurePlugin rejects int8 input", gLogger.last());
    }

    // Timing cache ID.
    char const* id = h.build->getTimingCacheID();
    check(id != nullptr && std::strlen(id) > 0, tag + "getTimingCacheID non-empty: " + std::string(id ? id : "(null)"));

    // clone keeps everything.
    IPluginV3* copy = plugin->clone();
    PluginHandles hc = capabilities(copy);
    std::string why;
    check(copy != nullptr && copy != plugin && hc.runtime != nullptr
            && sameFields(hc.runtime->getFieldsToSerialize(), h.runtime->getFieldsToSerialize(), why)
            && std::string(hc.build->getTimingCacheID()) == id,
        tag + "clone: a new object with the same fields and timing-cache ID", why);
    delete copy;

    // Serialize -> createPlugin(kRUNTIME) -> attachToContext.
    PluginFieldCollection const* serialized = h.runtime->getFieldsToSerialize();
    check(serialized != nullptr && serialized->nbFields == 9, tag + "getFieldsToSerialize: 9 fields");
    FieldSet engine = copyFields(serialized);
    delete plugin; // the engine bytes outlive the build-phase plugin
    PluginFieldCollection efc = engine.collection();
    gLogger.clear();
    IPluginV3* runtimePlugin = creator->createPlugin("wtconv_layer", &efc, TensorRTPhase::kRUNTIME);
    PluginHandles hr = capabilities(runtimePlugin);
    if (!check(runtimePlugin != nullptr && hr.runtime != nullptr, tag + "createPlugin(kRUNTIME) from serialized fields",
            gLogger.last()))
    {
        return;
    }
    check(sameFields(hr.runtime->getFieldsToSerialize(), &efc, why), tag + "serialize round trip is exact", why);

    TestErrorRecorder recorder;
    TestResourceContext context(&recorder);
    IPluginV3* attached = hr.runtime->attachToContext(&context);
    PluginHandles ha = capabilities(attached);
    check(attached != nullptr && attached != runtimePlugin && ha.runtime != nullptr,
        tag + "attachToContext returns a new clone");
    if (ha.runtime != nullptr)
    {
        // Validation in onShapeChange happens before any CUDA call: errors go to the context's recorder.
        PluginTensorDesc in = desc(DataType::kFLOAT, dims4(2, l.channels + 1, 8, 8));
        PluginTensorDesc out = desc(DataType::kFLOAT, dims4(2, l.channels + 1, 8, 8));
        recorder.clear();
        check(ha.runtime->onShapeChange(&in, 1, &out, 1) != 0 && recorder.getNbErrors() == 1
                && contains(recorder.getErrorDesc(0), "channel"),
            tag + "onShapeChange rejects a channel mismatch through the context's IErrorRecorder");
        PluginTensorDesc in2 = desc(DataType::kFLOAT, dims4(2, l.channels, 9, 9));
        PluginTensorDesc out2 = desc(DataType::kFLOAT, dims4(2, l.channels, 9, 9));
        recorder.clear();
        check(l.stride == 1 || (ha.runtime->onShapeChange(&in2, 1, &out2, 1) != 0 && recorder.getNbErrors() == 1),
            tag + "onShapeChange rejects an output shape that ignores the stride");
        PluginTensorDesc in3 = desc(DataType::kHALF, dims4(2, l.channels, 9, 9));
        PluginTensorDesc out3 = desc(
            DataType::kFLOAT, dims4(2, l.channels, ceilDiv(9, l.stride), ceilDiv(9, l.stride)));
        recorder.clear();
        check(ha.runtime->onShapeChange(&in3, 1, &out3, 1) != 0 && recorder.getNbErrors() == 1,
            tag + "onShapeChange rejects output dtype != input dtype");
        PluginTensorDesc in4 = desc(DataType::kHALF, dims4(2, l.channels, 9, 9));
        in4.format = TensorFormat::kHWC8;
        PluginTensorDesc out4 = desc(DataType::kHALF, dims4(2, l.channels, ceilDiv(9, l.stride), ceilDiv(9, l.stride)));
        recorder.clear();
        check(ha.runtime->onShapeChange(&in4, 1, &out4, 1) != 0 && recorder.getNbErrors() == 1
                && contains(recorder.getErrorDesc(0), "format"),
            tag + "onShapeChange rejects output format != input format");
    }
    // enqueue refuses, with an error code and no launch, before any device work is possible.
    {
        PluginTensorDesc in = desc(DataType::kFLOAT, dims4(1, l.channels, 8, 8));
        PluginTensorDesc out = desc(DataType::kFLOAT, dims4(1, l.channels, ceilDiv(8, l.stride), ceilDiv(8, l.stride)));
        void const* inputs[] = {nullptr};
        void* outputs[] = {nullptr};
        gLogger.clear();
        check(hr.runtime->enqueue(nullptr, &out, inputs, outputs, nullptr, nullptr) == -1
                && contains(gLogger.last(), "null"),
            tag + "enqueue with null descriptors returns -1", gLogger.last());
        PluginTensorDesc badIn = desc(DataType::kFLOAT, dims4(1, l.channels + 2, 8, 8));
        gLogger.clear();
        check(hr.runtime->enqueue(&badIn, &out, inputs, outputs, nullptr, nullptr) == -1
                && contains(gLogger.last(), std::to_string(l.channels + 2)),
            tag + "enqueue with a channel mismatch returns -1", gLogger.last());
        gLogger.clear();
        // Without a device the weights cannot be uploaded; with one, enqueue uploads them (not capturing) and the
        // kernels then refuse the null tensors. Either way: -1 and a message, nothing launched.
        check(hr.runtime->enqueue(&in, &out, inputs, outputs, nullptr, nullptr) == -1
                && (contains(gLogger.last(), "not on the current device") || contains(gLogger.last(), "null")),
            tag + "enqueue on a plugin whose weights were never uploaded, with null tensors, returns -1",
            gLogger.last());
        gLogger.clear();
        check(hr.plugin->getCapabilityInterface(static_cast<PluginCapabilityType>(7)) == nullptr
                && contains(gLogger.last(), "kCORE"),
            tag + "getCapabilityInterface of an unknown type returns null", gLogger.last());
    }
    delete attached;
    delete runtimePlugin;
}

// A node with channels_last = 1 (docs/design.md §4): the tensors are logical (N, H, W, C) in kLINEAR, which the
// kernels run as NHWC with pitch C. The oracle is the contract: shapes, formats, the workspace of that layout, and
// the field's serialization; an engine without the field (older plugin) still loads, as NCHW.
void hostChannelsLast(IPluginCreatorV3One* creator, LayerConfig const& l, std::string const& tag)
{
    FieldSet fields = parserFields(l);
    fields.addInt(contract::kFIELD_CHANNELS_LAST, 1);
    PluginFieldCollection fc = fields.collection();
    gLogger.clear();
    std::unique_ptr<IPluginV3> plugin(creator->createPlugin("wtconv_nhwc", &fc, TensorRTPhase::kBUILD));
    PluginHandles h = capabilities(plugin.get());
    if (!check(h.build != nullptr && h.runtime != nullptr, tag + "createPlugin(kBUILD) with channels_last = 1",
            gLogger.last()))
    {
        return;
    }
    // Output shape: (N, H, W, C) -> (N, ceil(H/s), ceil(W/s), C), symbolic N, H, W.
    {
        TestExprBuilder eb;
        DimsExprs in{};
        in.nbDims = 4;
        in.d[0] = eb.mBuilder.symbol("N");
        in.d[1] = eb.mBuilder.symbol("H");
        in.d[2] = eb.mBuilder.symbol("W");
        in.d[3] = eb.mBuilder.constant(l.channels);
        DimsExprs out{};
        bool ok = h.build->getOutputShapes(&in, 1, nullptr, 0, &out, 1, eb) == 0 && out.nbDims == 4;
        for (int64_t hh = 1; ok && hh <= 40; hh += 3)
        {
            for (int64_t ww : {1, 2, 7, 64, 97})
            {
                std::map<std::string, int64_t> env{{"N", 3}, {"H", hh}, {"W", ww}};
                ok = ok && evaluate(out.d[0], env) == 3 && evaluate(out.d[1], env) == ceilDiv(hh, l.stride)
                    && evaluate(out.d[2], env) == ceilDiv(ww, l.stride) && evaluate(out.d[3], env) == l.channels;
            }
        }
        check(ok, tag + "getOutputShapes = (N, ceil(H/s), ceil(W/s), C) for symbolic N, H, W", gLogger.last());
        DimsExprs bad = in;
        bad.d[3] = eb.mBuilder.constant(l.channels + 1);
        gLogger.clear();
        check(h.build->getOutputShapes(&bad, 1, nullptr, 0, &out, 1, eb) != 0 && contains(gLogger.last(), "dim 3")
                && contains(gLogger.last(), std::to_string(l.channels + 1)),
            tag + "getOutputShapes rejects a last dimension != C, naming dim 3", gLogger.last());
    }
    // Formats: kLINEAR only (the vectorised channels-last formats would vectorise W of an (N, H, W, C) tensor),
    // for the dtypes the kernels run channels-last.
    {
        bool const nhwc = kernelsAcceptChannelsLast(l);
        bool const bf16 = kernelsAccept(DataType::kBF16, l);
        bool asExpected = true;
        std::string detail;
        for (int32_t t = 0; t < EnumMax<DataType>(); ++t)
        {
            for (int32_t f = 0; f < EnumMax<TensorFormat>(); ++f)
            {
                DataType const type = static_cast<DataType>(t);
                DynamicPluginTensorDesc io[2] = {};
                io[0].desc.type = type;
                io[0].desc.format = static_cast<TensorFormat>(f);
                io[0].desc.dims = dims4(-1, -1, -1, l.channels);
                bool const yes = h.build->supportsFormatCombination(0, io, 1, 1);
                bool const expected = nhwc && static_cast<TensorFormat>(f) == TensorFormat::kLINEAR
                    && (type == DataType::kFLOAT || type == DataType::kHALF || (type == DataType::kBF16 && bf16));
                if (yes != expected)
                {
                    asExpected = false;
                    detail += std::string(yes ? " accepted" : " refused") + " type " + std::to_string(t) + " format "
                        + std::to_string(f);
                }
            }
        }
        check(asExpected, tag + "supportsFormatCombination(pos 0): kLINEAR only, as NHWC", detail);
    }
    // configurePlugin and the workspace of an NHWC launch with pitch C, sized from (H, W) at dims 1 and 2.
    {
        Dims const any = dims4(-1, -1, -1, l.channels);
        Dims const min = dims4(1, 1, 1, l.channels);
        Dims const max = dims4(2, 150, 97, l.channels);
        DynamicPluginTensorDesc in = dynDesc(DataType::kHALF, any, min, max);
        DynamicPluginTensorDesc out = dynDesc(DataType::kHALF, any, min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&in, 1, &out, 1) == 0, tag + "configurePlugin (fp16, (N, H, W, C) kLINEAR)",
            gLogger.last());
        wtconv::WTConvParams p = kernelParams(DataType::kHALF, dims4(2, l.channels, 150, 97), l);
        p.layout = wtconv::Layout::kNHWC;
        p.channelPitch = l.channels;
        size_t const expected = wtconv::wtconvWorkspaceBytes(p);
        size_t const given = h.build->getWorkspaceSize(&in, 1, &out, 1);
        check(given == expected && expected > 0,
            tag + "getWorkspaceSize == wtconvWorkspaceBytes(NHWC, pitch C) of the profile max",
            std::to_string(given) + " vs " + std::to_string(expected));
        DynamicPluginTensorDesc badC = dynDesc(DataType::kHALF, dims4(-1, -1, -1, l.channels + 2), min, max);
        gLogger.clear();
        check(h.build->configurePlugin(&badC, 1, &out, 1) != 0 && contains(gLogger.last(), "dim 3"),
            tag + "configurePlugin rejects a last dimension != C", gLogger.last());
        DynamicPluginTensorDesc hwc8 = in;
        hwc8.desc.format = TensorFormat::kHWC8;
        DynamicPluginTensorDesc hwc8Out = hwc8;
        gLogger.clear();
        check(h.build->configurePlugin(&hwc8, 1, &hwc8Out, 1) != 0 && contains(gLogger.last(), "kHWC8"),
            tag + "configurePlugin rejects kHWC8", gLogger.last());
    }
    // Timing cache: not shared with the NCHW node of the same (k, L, stride, C).
    {
        FieldSet nchw = parserFields(l);
        PluginFieldCollection nfc = nchw.collection();
        std::unique_ptr<IPluginV3> other(creator->createPlugin("wtconv_nchw", &nfc, TensorRTPhase::kBUILD));
        PluginHandles ho = capabilities(other.get());
        check(ho.build != nullptr && std::string(ho.build->getTimingCacheID()) != h.build->getTimingCacheID(),
            tag + "getTimingCacheID differs from the NCHW node's");
    }
    // Serialization: channels_last = 1 is written and read back; an engine without the field is NCHW.
    {
        PluginFieldCollection const* serialized = h.runtime->getFieldsToSerialize();
        FieldSet engine = copyFields(serialized);
        PluginField const* field = engine.find(contract::kFIELD_CHANNELS_LAST);
        int32_t value = -1;
        if (field != nullptr && field->type == PluginFieldType::kINT32 && field->length == 1)
        {
            std::memcpy(&value, field->data, sizeof(value));
        }
        check(value == 1, tag + "getFieldsToSerialize writes channels_last = 1 (kINT32)");
        PluginFieldCollection efc = engine.collection();
        std::unique_ptr<IPluginV3> runtime(creator->createPlugin("wtconv_nhwc", &efc, TensorRTPhase::kRUNTIME));
        PluginHandles hr = capabilities(runtime.get());
        std::string why;
        check(hr.runtime != nullptr && sameFields(hr.runtime->getFieldsToSerialize(), &efc, why),
            tag + "serialize round trip keeps channels_last", why + gLogger.last());
        if (hr.runtime != nullptr)
        {
            // onShapeChange checks the NHWC output dims.
            PluginTensorDesc in = desc(DataType::kFLOAT, dims4(2, 9, 11, l.channels));
            PluginTensorDesc out = desc(
                DataType::kFLOAT, dims4(2, ceilDiv(9, l.stride), ceilDiv(11, l.stride), l.channels));
            gLogger.clear();
            check(hr.runtime->onShapeChange(&in, 1, &out, 1) == 0, tag + "onShapeChange (N, H, W, C)", gLogger.last());
            PluginTensorDesc wrong = desc(
                DataType::kFLOAT, dims4(2, l.channels, ceilDiv(9, l.stride), ceilDiv(11, l.stride)));
            gLogger.clear();
            check(hr.runtime->onShapeChange(&in, 1, &wrong, 1) != 0, tag + "onShapeChange rejects NCHW output dims",
                gLogger.last());
        }
        FieldSet old = copyFields(serialized);
        old.remove(contract::kFIELD_CHANNELS_LAST);
        PluginFieldCollection ofc = old.collection();
        gLogger.clear();
        std::unique_ptr<IPluginV3> legacy(creator->createPlugin("wtconv_old", &ofc, TensorRTPhase::kRUNTIME));
        PluginHandles hl = capabilities(legacy.get());
        int32_t legacyValue = -1;
        if (hl.runtime != nullptr)
        {
            FieldSet again = copyFields(hl.runtime->getFieldsToSerialize());
            PluginField const* f = again.find(contract::kFIELD_CHANNELS_LAST);
            if (f != nullptr && f->length == 1)
            {
                std::memcpy(&legacyValue, f->data, sizeof(legacyValue));
            }
        }
        check(legacyValue == 0, tag + "an engine serialized without channels_last loads as channels_last = 0",
            gLogger.last());
    }
    // Out-of-range values: one line naming the field and what it takes.
    for (int32_t bad : {2, -1})
    {
        FieldSet f = parserFields(l);
        f.addInt(contract::kFIELD_CHANNELS_LAST, bad);
        PluginFieldCollection bfc = f.collection();
        gLogger.clear();
        expectRejected(creator->createPlugin("x", &bfc, TensorRTPhase::kBUILD),
            tag + "channels_last = " + std::to_string(bad),
            {"WTConv2d plugin: field 'channels_last': expected 0", "given " + std::to_string(bad)});
        check(gLogger.last().find('\n') == std::string::npos, tag + "the channels_last message is one line");
    }
}

// Without a usable CUDA device (an engine built on a machine with no GPU), configurePlugin cannot upload the
// weights. That is expected there and said once per process, not once per layer (a WTConvNeXt-T build used to
// print one warning per layer and tactic); with a device the upload succeeds and nothing is said.
void hostDeferredUploadMessage(IPluginCreatorV3One* creator)
{
    int devices = 0;
    bool const noDevice = cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0;
    cudaGetLastError();
    LayerConfig const l = syntheticLayer(4, 3, 2, 1);
    Dims const d = dims4(2, l.channels, 16, 16);
    gLogger.clear();
    bool configured = true;
    for (int i = 0; i < 3; ++i)
    {
        FieldSet fields = parserFields(l);
        PluginFieldCollection fc = fields.collection();
        IPluginV3* plugin = creator->createPlugin("upload_message", &fc, TensorRTPhase::kBUILD);
        PluginHandles h = capabilities(plugin);
        DynamicPluginTensorDesc in = dynDesc(DataType::kFLOAT, d, d, d);
        DynamicPluginTensorDesc out = dynDesc(DataType::kFLOAT, d, d, d);
        configured = configured && h.build != nullptr && h.build->configurePlugin(&in, 1, &out, 1) == 0;
        delete plugin;
    }
    size_t perLayer = 0, once = 0;
    for (std::string const& m : gLogger.messages())
    {
        perLayer += contains(m, "weights not uploaded yet") ? 1 : 0;
        once += contains(m, "without a GPU") ? 1 : 0;
    }
    check(configured && perLayer == 0 && once <= 1 && (noDevice || once == 0),
        std::string("configurePlugin ") + (noDevice ? "without a CUDA device" : "with a CUDA device")
            + ": no per-layer upload warning, the no-GPU case said at most once per process",
        std::to_string(perLayer) + " per-layer warnings, " + std::to_string(once) + " no-GPU lines: " + gLogger.last());
}

void hostBadInputs(IPluginCreatorV3One* creator)
{
    LayerConfig const l = syntheticLayer(4, 3, 2, 2);
    int32_t const c = l.channels;
    auto create = [&](FieldSet const& f, TensorRTPhase phase = TensorRTPhase::kBUILD)
    {
        PluginFieldCollection fc = f.collection();
        gLogger.clear();
        return creator->createPlugin("bad_layer", &fc, phase);
    };

    // Missing fields.
    for (char const* name : {contract::kFIELD_KERNEL_SIZE, contract::kFIELD_WT_LEVELS, contract::kFIELD_STRIDE,
             contract::kFIELD_BASE_WEIGHT, contract::kFIELD_BASE_BIAS, contract::kFIELD_WAVELET_WEIGHT})
    {
        FieldSet f = parserFields(l);
        f.remove(name);
        expectRejected(create(f), std::string("missing field ") + name, {"missing", name});
    }
    {
        FieldSet f = parserFields(l);
        f.addInt("kernel", 3);
        expectRejected(create(f), "an unknown field", {"unknown field 'kernel'"});
    }
    {
        FieldSet f = parserFields(l);
        f.addInt(contract::kFIELD_STRIDE, 1);
        expectRejected(create(f), "a field given twice", {"stride", "twice"});
    }
    {
        FieldSet f = parserFields(l);
        float const v = 3.0F;
        f.remove(contract::kFIELD_KERNEL_SIZE);
        f.add(contract::kFIELD_KERNEL_SIZE, &v, sizeof(v), PluginFieldType::kFLOAT32, 1);
        expectRejected(create(f), "kernel_size as kFLOAT32", {"kernel_size", "kINT32", "kFLOAT32"});
    }
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_WT_LEVELS);
        f.addString(contract::kFIELD_WT_LEVELS, "2");
        expectRejected(create(f), "wt_levels as kCHAR", {"wt_levels", "kINT32", "kCHAR"});
    }
    {
        FieldSet f = parserFields(l);
        std::vector<int32_t> ints(l.baseWeight.size(), 1);
        f.remove(contract::kFIELD_BASE_WEIGHT);
        f.add(contract::kFIELD_BASE_WEIGHT, ints.data(), ints.size() * 4, PluginFieldType::kINT32,
            static_cast<int32_t>(ints.size()));
        expectRejected(create(f), "base_weight as kINT32", {"base_weight", "kFLOAT32", "kINT32"});
    }
    {
        FieldSet f = parserFields(l);
        std::vector<double> d(l.waveletWeight.size(), 0.5);
        f.remove(contract::kFIELD_WAVELET_WEIGHT);
        f.add(contract::kFIELD_WAVELET_WEIGHT, d.data(), d.size() * 8, PluginFieldType::kFLOAT64,
            static_cast<int32_t>(d.size()));
        expectRejected(create(f), "wavelet_weight as kFLOAT64", {"wavelet_weight", "kFLOAT64"});
    }
    {
        FieldSet f = parserFields(l);
        int32_t two[2] = {3, 3};
        f.remove(contract::kFIELD_KERNEL_SIZE);
        f.add(contract::kFIELD_KERNEL_SIZE, two, sizeof(two), PluginFieldType::kINT32, 2);
        expectRejected(create(f), "kernel_size of length 2", {"kernel_size", "length 1", "given 2"});
    }
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_STRIDE);
        f.add(contract::kFIELD_STRIDE, nullptr, 0, PluginFieldType::kINT32, 0);
        expectRejected(create(f), "stride of length 0", {"stride", "length 1", "given 0"});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_WT_LEVELS)->data = nullptr;
        expectRejected(create(f), "wt_levels with null data", {"wt_levels", "null"});
    }
    // Values out of range.
    for (int32_t k : {4, 0, -1, 17, 16})
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_KERNEL_SIZE);
        f.addInt(contract::kFIELD_KERNEL_SIZE, k);
        expectRejected(create(f), "kernel_size " + std::to_string(k),
            {"kernel_size", "odd", "1..15", "given " + std::to_string(k)});
    }
    for (int32_t levels : {0, 9, -3})
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_WT_LEVELS);
        f.addInt(contract::kFIELD_WT_LEVELS, levels);
        expectRejected(
            create(f), "wt_levels " + std::to_string(levels), {"wt_levels", "1..8", "given " + std::to_string(levels)});
    }
    for (int32_t stride : {0, -2})
    {
        FieldSet f = parserFields(l);
        f.remove(contract::kFIELD_STRIDE);
        f.addInt(contract::kFIELD_STRIDE, stride);
        expectRejected(
            create(f), "stride " + std::to_string(stride), {"stride", ">= 1", "given " + std::to_string(stride)});
    }
    // Weights that do not fit the channel count (C = length of base_bias).
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_BASE_WEIGHT)->length -= 1;
        expectRejected(create(f), "base_weight one short of C*k*k",
            {"base_weight", "C*k*k", std::to_string(c * 9), "given " + std::to_string(c * 9 - 1)});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_WAVELET_WEIGHT)->length -= 9;
        expectRejected(create(f), "wavelet_weight not L*4C*k*k",
            {"wavelet_weight", "L*4C*k*k", std::to_string(2 * 4 * c * 9),
                "given " + std::to_string(2 * 4 * c * 9 - 9)});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_BASE_BIAS)->length = c + 1; // one more channel than the weights hold
        // (the storage has c floats; the weight checks fire before base_bias is read)
        f.storage.emplace_back((c + 1) * sizeof(float), 0);
        f.find(contract::kFIELD_BASE_BIAS)->data = f.storage.back().data();
        expectRejected(create(f), "base_bias implying C+1 channels", {"base_weight", "C=" + std::to_string(c + 1)});
    }
    {
        FieldSet f = parserFields(l);
        f.find(contract::kFIELD_BASE_BIAS)->length = 0;
        expectRejected(create(f), "empty base_bias", {"base_bias", "C >= 1", "given 0"});
    }
    // Collections that are malformed as a whole.
    {
        gLogger.clear();
        expectRejected(creator->createPlugin("x", nullptr, TensorRTPhase::kBUILD), "a null field collection", {"null"});
        PluginFieldCollection fc{};
        fc.nbFields = 3;
        fc.fields = nullptr;
        gLogger.clear();
        expectRejected(
            creator->createPlugin("x", &fc, TensorRTPhase::kBUILD), "nbFields 3 with null fields", {"nbFields 3"});
        fc.nbFields = -1;
        gLogger.clear();
        expectRejected(creator->createPlugin("x", &fc, TensorRTPhase::kBUILD), "nbFields -1", {"nbFields -1"});
        FieldSet f = parserFields(l);
        f.fields[2].name = nullptr;
        expectRejected(create(f), "a field without a name", {"#2", "no name"});
    }
    // fp16 weight fields are accepted and converted exactly (values representable in fp16).
    {
        LayerConfig h = l;
        for (auto* v : {&h.baseWeight, &h.baseBias, &h.waveletWeight})
        {
            for (size_t i = 0; i < v->size(); ++i)
            {
                (*v)[i] = static_cast<float>(static_cast<int32_t>(i % 17) - 8) * 0.125F;
            }
        }
        auto toHalf = [](float x)
        {
            // exact for the multiples of 1/8 in [-1, 1] used here
            if (x == 0.0F)
            {
                return static_cast<uint16_t>(0);
            }
            uint32_t bits;
            std::memcpy(&bits, &x, 4);
            uint32_t const sign = (bits >> 16) & 0x8000U;
            int32_t const exp = static_cast<int32_t>((bits >> 23) & 0xFFU) - 127 + 15;
            uint32_t const mant = (bits >> 13) & 0x3FFU;
            return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | mant);
        };
        FieldSet f;
        for (auto const& nv : {std::make_pair(contract::kFIELD_BASE_WEIGHT, &h.baseWeight),
                 std::make_pair(contract::kFIELD_BASE_BIAS, &h.baseBias),
                 std::make_pair(contract::kFIELD_WAVELET_WEIGHT, &h.waveletWeight)})
        {
            std::vector<uint16_t> half(nv.second->size());
            std::transform(nv.second->begin(), nv.second->end(), half.begin(), toHalf);
            f.add(nv.first, half.data(), half.size() * 2, PluginFieldType::kFLOAT16, static_cast<int32_t>(half.size()));
        }
        f.addInt(contract::kFIELD_KERNEL_SIZE, h.k);
        f.addInt(contract::kFIELD_WT_LEVELS, h.levels);
        f.addInt(contract::kFIELD_STRIDE, h.stride);
        IPluginV3* p = create(f);
        PluginHandles hp = capabilities(p);
        bool ok = p != nullptr && hp.runtime != nullptr;
        if (ok)
        {
            FieldSet s = copyFields(hp.runtime->getFieldsToSerialize());
            PluginField* w = s.find(contract::kFIELD_WAVELET_WEIGHT);
            ok = w != nullptr && w->type == PluginFieldType::kFLOAT32
                && std::memcmp(w->data, h.waveletWeight.data(), h.waveletWeight.size() * 4) == 0;
        }
        check(ok, "accepts kFLOAT16 weight fields and stores them as exact fp32", gLogger.last());
        delete p;
    }

    // Corrupted serialized (engine) field sets, each field's bytes ending at a PROT_NONE page.
    FieldSet good = parserFields(l);
    good.remove(contract::kFIELD_PLUGIN_VERSION);
    good.remove(contract::kFIELD_PLUGIN_NAMESPACE);
    PluginFieldCollection gfc = good.collection();
    IPluginV3* builder = creator->createPlugin("layer", &gfc, TensorRTPhase::kBUILD);
    PluginHandles hb = capabilities(builder);
    if (!check(hb.runtime != nullptr, "serialized field set for corruption tests"))
    {
        delete builder;
        return;
    }
    FieldSet engine = copyFields(hb.runtime->getFieldsToSerialize());
    delete builder;
    auto guarded = [&](std::function<void(FieldSet&)> const& corrupt, std::string const& what,
                       std::vector<std::string> const& needles)
    {
        FieldSet f = engine;
        for (size_t i = 0; i < f.fields.size(); ++i)
        {
            f.fields[i].name = f.names[i].c_str();
            f.fields[i].data = f.storage[i].empty() ? nullptr : f.storage[i].data();
        }
        corrupt(f);
        std::vector<std::unique_ptr<GuardedBytes>> pages;
        for (auto& field : f.fields)
        {
            size_t const elem = field.type == PluginFieldType::kFLOAT16 ? 2 : 4;
            size_t const bytes = field.length > 0 ? elem * static_cast<size_t>(field.length) : 0;
            if (field.data != nullptr)
            {
                pages.emplace_back(std::make_unique<GuardedBytes>(field.data, bytes));
                field.data = pages.back()->data();
            }
        }
        IPluginV3* p = create(f, TensorRTPhase::kRUNTIME);
        if (needles.empty())
        {
            check(p != nullptr, "serialized: " + what, gLogger.last());
            delete p;
        }
        else
        {
            expectRejected(p, "serialized: " + what, needles);
        }
    };
    guarded([](FieldSet&) {}, "(control) the uncorrupted field set, guarded, is accepted", {});
    guarded([](FieldSet& f) { f.remove(contract::kFIELD_SERIALIZATION_VERSION); }, "missing serialization version",
        {contract::kFIELD_SERIALIZATION_VERSION});
    guarded([](FieldSet& f) { f.remove(contract::kFIELD_WEIGHTS_CHECKSUM); }, "missing checksum",
        {contract::kFIELD_WEIGHTS_CHECKSUM});
    guarded(
        [](FieldSet& f)
        {
            int32_t const v = 2;
            std::memcpy(const_cast<void*>(f.find(contract::kFIELD_SERIALIZATION_VERSION)->data), &v, 4);
        },
        "serialization version 2", {contract::kFIELD_SERIALIZATION_VERSION, "expected 1", "given 2"});
    guarded(
        [](FieldSet& f)
        {
            float* w = static_cast<float*>(const_cast<void*>(f.find(contract::kFIELD_WAVELET_WEIGHT)->data));
            w[5] = std::nextafter(w[5], 2.0F);
        },
        "one weight flipped by an ulp", {contract::kFIELD_WEIGHTS_CHECKSUM, "corrupted"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_WAVELET_WEIGHT)->length -= 1; },
        "wavelet_weight truncated by one", {"wavelet_weight", "given"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_BASE_BIAS)->length -= 1; }, "base_bias truncated by one",
        {"base_weight"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_KERNEL_SIZE)->length = 0; }, "kernel_size with length 0",
        {"kernel_size", "length 1"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_STRIDE)->type = PluginFieldType::kFLOAT32; }, "stride retyped",
        {"stride", "kINT32"});
    guarded([](FieldSet& f) { f.find(contract::kFIELD_BASE_WEIGHT)->type = PluginFieldType::kINT8; },
        "base_weight retyped", {"base_weight", "kINT8"});
    guarded(
        [](FieldSet& f)
        {
            f.fields.resize(3); // truncated field list
        },
        "field list truncated to 3 fields", {"missing"});
}

void hostStaticRegistration(std::string const& path)
{
    TestPluginRegistry* registry = testRegistry();
    size_t const before = registry->mRegistered.size();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!check(handle != nullptr, "static library: dlopen", handle ? "" : dlerror()))
    {
        return;
    }
    check(registry->mRegistered.size() == before + 1, "static library: registers exactly one creator when loaded");
    check(dlsym(handle, "getCreators") == nullptr && dlsym(handle, "setLoggerFinder") == nullptr,
        "static library: no loadLibrary entry points (cannot be registered twice through loadLibrary)");
    if (registry->mRegistered.size() != before + 1)
    {
        return;
    }
    auto const& entry = registry->mRegistered.back();
    check(entry.second == contract::kPLUGIN_NAMESPACE, "static library: registered in namespace \"\"");
    InterfaceInfo const info = entry.first->getInterfaceInfo();
    if (!check(std::string(info.kind) == "PLUGIN CREATOR_V3ONE", "static library: creator is an IPluginCreatorV3One"))
    {
        return;
    }
    auto* creator = static_cast<IPluginCreatorV3One*>(entry.first);
    check(std::string(creator->getPluginName()) == contract::kPLUGIN_NAME
            && std::string(creator->getPluginVersion()) == contract::kPLUGIN_VERSION,
        "static library: creator name/version");
    hostBuildMethods(creator, syntheticLayer(6, 5, 3, 2), "static library: ");
    // Its messages go to libnvinfer's getLogger() (here: this harness's logger).
    FieldSet f = parserFields(syntheticLayer(2, 3, 1, 1));
    f.remove(contract::kFIELD_STRIDE);
    PluginFieldCollection fc = f.collection();
    gLogger.clear();
    expectRejected(creator->createPlugin("x", &fc, TensorRTPhase::kBUILD),
        "(static library) missing stride, logged via getLogger()", {"missing field 'stride'"});
}

} // namespace

int runHost(std::string const& dynamicLib, std::string const& staticLib)
{
    std::printf("INFO TensorRT headers %d.%d, harness mode host (no CUDA device needed)\n", NV_TENSORRT_MAJOR,
        NV_TENSORRT_MINOR);
    PluginLibrary lib = loadDynamicLibrary(dynamicLib);
    if (lib.creator != nullptr)
    {
        IPluginCreatorV3One* creator = lib.creator;
        check(std::string(creator->getPluginName()) == contract::kPLUGIN_NAME
                && std::string(creator->getPluginVersion()) == contract::kPLUGIN_VERSION
                && std::string(creator->getPluginNamespace()) == contract::kPLUGIN_NAMESPACE,
            "creator name/version/namespace match the contract");
        PluginFieldCollection const* names = creator->getFieldNames();
        bool ok = names != nullptr && names->nbFields == 7;
        std::map<std::string, PluginFieldType> expected{{contract::kFIELD_KERNEL_SIZE, PluginFieldType::kINT32},
            {contract::kFIELD_WT_LEVELS, PluginFieldType::kINT32}, {contract::kFIELD_STRIDE, PluginFieldType::kINT32},
            {contract::kFIELD_BASE_WEIGHT, PluginFieldType::kFLOAT32},
            {contract::kFIELD_BASE_BIAS, PluginFieldType::kFLOAT32},
            {contract::kFIELD_WAVELET_WEIGHT, PluginFieldType::kFLOAT32},
            {contract::kFIELD_CHANNELS_LAST, PluginFieldType::kINT32}};
        for (int32_t i = 0; ok && i < names->nbFields; ++i)
        {
            auto it = expected.find(names->fields[i].name);
            ok = it != expected.end() && it->second == names->fields[i].type;
        }
        check(ok, "getFieldNames lists the seven contract fields with their types");
        // Several configurations: stride 1/2/3, k 1..15, levels 1..8.
        hostBuildMethods(creator, syntheticLayer(4, 3, 2, 2), "");
        hostBuildMethods(creator, syntheticLayer(8, 5, 3, 1), "[k5 L3 s1] ");
        hostBuildMethods(creator, syntheticLayer(3, 15, 8, 3), "[k15 L8 s3] ");
        hostBuildMethods(creator, syntheticLayer(5, 1, 1, 1), "[k1 L1 s1] ");
        // Distinct configurations get distinct timing-cache IDs.
        {
            std::vector<std::string> ids;
            for (auto const& cfg : {syntheticLayer(4, 3, 2, 2), syntheticLayer(4, 5, 2, 2), syntheticLayer(4, 3, 3, 2),
                     syntheticLayer(4, 3, 2, 1), syntheticLayer(5, 3, 2, 2)})
            {
                FieldSet f = parserFields(cfg);
                PluginFieldCollection fc = f.collection();
                IPluginV3* p = creator->createPlugin("id", &fc, TensorRTPhase::kBUILD);
                PluginHandles hp = capabilities(p);
                ids.push_back(hp.build != nullptr ? hp.build->getTimingCacheID() : "");
                delete p;
            }
            std::vector<std::string> sorted = ids;
            std::sort(sorted.begin(), sorted.end());
            check(std::unique(sorted.begin(), sorted.end()) == sorted.end() && !ids[0].empty(),
                "getTimingCacheID differs across (k, L, stride, C)");
        }
        hostChannelsLast(creator, syntheticLayer(6, 5, 3, 2), "[channels_last s2] ");
        hostChannelsLast(creator, syntheticLayer(16, 3, 2, 1), "[channels_last s1] ");
        hostBadInputs(creator);
        hostDeferredUploadMessage(creator);
    }
    hostStaticRegistration(staticLib);
    std::printf("host: %d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}

} // namespace wtconv_harness
