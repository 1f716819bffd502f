// wtconvCpuKernel.cpp — picks the instruction set for the CPU kernel (see wtconvCpuKernel.h). The per-plane code is
// wtconvCpuPlanes.cpp, compiled once per instruction set into the namespaces declared here; CMake defines
// WTCONV_CPU_HAVE_AVX2 / WTCONV_CPU_HAVE_AVX512 when it compiled those variants (x86-64 with GCC or Clang).
#include "wtconvCpuKernel.h"
#include "wtconvCpuGeometry.h"

namespace wtconv
{
namespace cpu
{

#define WTCONV_DECLARE_ISA(ns)                                                                                         \
    namespace ns                                                                                                       \
    {                                                                                                                  \
    void forwardPlanes(Layer const& layer, Tensors const& t, int64_t begin, int64_t end, float* scratch);              \
    }
WTCONV_DECLARE_ISA(baseline)
#if defined(WTCONV_CPU_HAVE_AVX2)
WTCONV_DECLARE_ISA(avx2)
#endif
#if defined(WTCONV_CPU_HAVE_AVX512)
WTCONV_DECLARE_ISA(avx512)
#endif
#undef WTCONV_DECLARE_ISA

size_t scratchFloats(Layer const& layer, int64_t height, int64_t width)
{
    return PlaneGeometry(layer, height, width).total;
}

bool isaAvailable(Isa isa)
{
    switch (isa)
    {
    case Isa::kBASELINE: return true;
    case Isa::kAVX2:
#if defined(WTCONV_CPU_HAVE_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")
            && __builtin_cpu_supports("bmi2");
#else
        return false;
#endif
    case Isa::kAVX512:
#if defined(WTCONV_CPU_HAVE_AVX512)
        return isaAvailable(Isa::kAVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
        return false;
#endif
    }
    return false;
}

Isa bestIsa()
{
    if (isaAvailable(Isa::kAVX512))
    {
        return Isa::kAVX512;
    }
    return isaAvailable(Isa::kAVX2) ? Isa::kAVX2 : Isa::kBASELINE;
}

char const* isaName(Isa isa)
{
    switch (isa)
    {
    case Isa::kBASELINE: return "baseline";
    case Isa::kAVX2: return "avx2";
    case Isa::kAVX512: return "avx512";
    }
    return "unknown";
}

void forwardPlanes(Isa isa, Layer const& layer, Tensors const& t, int64_t begin, int64_t end, float* scratch)
{
    switch (isa)
    {
#if defined(WTCONV_CPU_HAVE_AVX512)
    case Isa::kAVX512: avx512::forwardPlanes(layer, t, begin, end, scratch); return;
#endif
#if defined(WTCONV_CPU_HAVE_AVX2)
    case Isa::kAVX2: avx2::forwardPlanes(layer, t, begin, end, scratch); return;
#endif
    default: baseline::forwardPlanes(layer, t, begin, end, scratch); return;
    }
}

} // namespace cpu
} // namespace wtconv
