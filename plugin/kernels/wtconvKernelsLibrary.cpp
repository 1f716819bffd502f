// wtconvKernelsLibrary.cpp — the record of libwtconv_kernels.so, the kernels linked once for the libraries that load
// it (plugin/cmake/wtconvKernelsShared.cmake); the kernels themselves come whole from the static kernels library.

#ifndef WTCONV_PACKAGE_VERSION
#define WTCONV_PACKAGE_VERSION "0.0.0+unknown"
#endif

// One line of key=value words in its own section, read from the file without loading it (wtconv_libs.lookup),
// as libwtconv_ort.so's record is.
extern "C" __attribute__((used, section(".wtconv_kernels_info"))) char const wtconvKernelsInfo[]
    = "wtconv_kernels_info: package_version=" WTCONV_PACKAGE_VERSION "\n";
