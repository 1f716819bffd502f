# cmake -DREADELF=<readelf> -DLIB=<plugin library> -DLIBRARY=dynamic|static -DTENSORRT_MAJOR=<N>
#       -DPACKAGE_VERSION=<version> -P check_abi_record.cmake
# Fails unless the library's .wtconv_trt_abi section holds the record wtconvPluginAbi.h describes, for this
# library kind, TensorRT major and package version.
if(NOT READELF)
    message(FATAL_ERROR "FAIL no readelf (CMAKE_READELF is empty)")
endif()
execute_process(COMMAND ${READELF} -p .wtconv_trt_abi ${LIB} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(REGEX MATCH "wtconv_trt_plugin [^\n]*" record "${out}")
if(NOT rc EQUAL 0 OR NOT record)
    message(FATAL_ERROR "FAIL ${LIB} has no .wtconv_trt_abi record: ${err}${out}")
endif()
string(STRIP "${record}" record)
if(TENSORRT_MAJOR GREATER_EQUAL 11)
    set(rtx yes)
else()
    set(rtx no)
endif()
# The statically registering library also says how it reaches libnvinfer: linked, or found when loaded.
if(LIBRARY STREQUAL "static")
    set(extra " libnvinfer=(linked|load)")
else()
    set(extra "")
endif()
set(expected "^wtconv_trt_plugin format=1 library=${LIBRARY} abi=trt${TENSORRT_MAJOR} tensorrt=${TENSORRT_MAJOR}\\.[0-9]+\\.[0-9]+ tensorrt_rtx_abi=${rtx} plugin=WTConv2d plugin_version=1 package_version=${PACKAGE_VERSION}${extra}$")
if(NOT record MATCHES "${expected}")
    message(FATAL_ERROR "FAIL ABI record of ${LIB}: expected ${expected}, given '${record}'")
endif()
message(STATUS "PASS ABI record of ${LIB}: ${record}")
