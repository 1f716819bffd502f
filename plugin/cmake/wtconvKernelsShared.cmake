# wtconvKernelsShared.cmake — the kernels linked once, as libwtconv_kernels.so, for the libraries that load it
# (WTCONV_KERNELS_SHARED, the binary wheel: docs/design.md, "The binary wheel").
#
# Each of our libraries otherwise holds its own copy of the kernels: for the wheel's six libraries and a dozen CUDA
# architectures that is most of a gigabyte. Linked once, the kernel C API, the ONNX Runtime op and both TensorRT
# plugins of each ABI load the same file, found through their RPATH ($ORIGIN, or $ORIGIN/.. for the plugins in
# lib/<abi>/), so one process holds one copy of the kernels and of their per-kernel records (each kernel's raised
# shared-memory limit, plugin/README.md "Run time").
#
# libwtconv_kernels.so exports only the C++ functions of plugin/kernels/wtconvKernel.h, under a symbol version named
# after the package version: a library built from other sources asks for another version and fails to load with the
# loader's "version ... not found" instead of binding to the wrong kernels, and no other library's symbols (another
# copy of the kernels, left exported) can stand in for them.
include_guard(GLOBAL)

# wtconv_add_kernels_shared(<name> <static kernels target> <kernels source dir>): <name> is the shared library
# libwtconv_kernels.so holding the whole static kernels library (compiled here, or WTCONV_KERNELS_PREBUILT).
function(wtconv_add_kernels_shared name kernels kernels_dir)
    string(REGEX REPLACE "[^0-9A-Za-z_.]" "_" _version "${WTCONV_PACKAGE_VERSION}")
    set(WTCONV_KERNELS_SYMBOL_VERSION "WTCONV_KERNELS_${_version}" PARENT_SCOPE)
    set(_map "${CMAKE_CURRENT_BINARY_DIR}/wtconv_kernels_shared.map")
    file(CONFIGURE OUTPUT "${_map}" CONTENT [=[
/* libwtconv_kernels.so: the functions of wtconvKernel.h, nothing else (plugin/cmake/wtconvKernelsShared.cmake) */
WTCONV_KERNELS_@_version@ {
  global:
    extern "C++" {
      wtconv::wtconvWorkspaceBytes*;
      wtconv::checkShape*;
      wtconv::wtconvForward*;
      wtconv::wtconvLaunchInfo*;
      wtconv::setSharedMemoryLimitForTesting*;
    };
  local:
    *;
};
]=] @ONLY)
    add_library(${name} SHARED ${kernels_dir}/wtconvKernelsLibrary.cpp)
    target_compile_definitions(${name} PRIVATE WTCONV_PACKAGE_VERSION="${WTCONV_PACKAGE_VERSION}")
    target_link_libraries(${name} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,${kernels}>" CUDA::cudart_static)
    target_include_directories(${name} INTERFACE $<BUILD_INTERFACE:${kernels_dir}>
        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/wtconv_trt>)
    # -Bsymbolic: the library's own calls of its exported functions stay inside it.
    target_link_options(${name} PRIVATE "LINKER:--version-script=${_map}" "LINKER:-Bsymbolic" "LINKER:--no-undefined")
    set_target_properties(${name} PROPERTIES OUTPUT_NAME wtconv_kernels LINK_DEPENDS "${_map}")
endfunction()

# wtconv_load_kernels_from(<target> <relative dir>): <target> finds libwtconv_kernels.so at run time in
# $ORIGIN/<relative dir> once installed, else beside itself: a copy of the library made with the kernels beside it
# (a Triton model folder, wtconv_serving/repositories/repository.py) loads them there. The build tree keeps CMake's
# absolute build RPATH.
function(wtconv_load_kernels_from target relative)
    if(relative STREQUAL ".")
        set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN")
    else()
        set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${relative};$ORIGIN")
    endif()
endfunction()
