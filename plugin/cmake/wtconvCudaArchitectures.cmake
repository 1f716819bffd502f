# wtconvCudaArchitectures.cmake — the CUDA architecture list of a release build in one word.
#
# wtconv_supported_cuda_architectures(<nvcc> <out-var>) sets <out-var> to CMake's CUDA_ARCHITECTURES syntax for
# machine code (SASS) of every architecture <nvcc> can target (`nvcc --list-gpu-code`) from WTCONV_MIN_CUDA_ARCH up,
# plus PTX of the newest of them, which the driver compiles for GPUs newer than any in the list (CUDA C++
# Programming Guide, "Binary Compatibility" and "PTX Compatibility"). With nvcc 13.0:
#   80-real;86-real;87-real;88-real;89-real;90-real;100-real;103-real;110-real;120-real;121
# ("121" alone means machine code and PTX of 12.1). The floor is 8.0 because every launch plan uses up to 99 KB of
# shared memory per block, more than compute capability 7.5 gives (64 KB): the kernels refuse to compile below 8.0
# (plugin/kernels/wtconvKernelImpl.cuh).
include_guard(GLOBAL)

set(WTCONV_MIN_CUDA_ARCH 80)

function(wtconv_supported_cuda_architectures nvcc out)
    execute_process(COMMAND "${nvcc}" --list-gpu-code
        OUTPUT_VARIABLE _listing ERROR_VARIABLE _error RESULT_VARIABLE _result)
    if(NOT _result EQUAL 0)
        message(FATAL_ERROR "wtconv: '${nvcc} --list-gpu-code' failed (${_result}): ${_error}; give the architectures "
            "instead, e.g. -DWTCONV_CUDA_ARCHITECTURES=80;86;89;90")
    endif()
    string(REGEX MATCHALL "sm_[0-9]+" _codes "${_listing}")
    set(_archs)
    foreach(_code IN LISTS _codes)
        string(SUBSTRING "${_code}" 3 -1 _arch)
        if(_arch GREATER_EQUAL WTCONV_MIN_CUDA_ARCH)
            list(APPEND _archs ${_arch})
        endif()
    endforeach()
    list(REMOVE_DUPLICATES _archs)
    list(SORT _archs COMPARE NATURAL)
    if(NOT _archs)
        message(FATAL_ERROR "wtconv: ${nvcc} lists no architecture of compute capability 8.0 or newer "
            "(--list-gpu-code: ${_codes}); the kernels need 8.0")
    endif()
    list(POP_BACK _archs _newest)
    list(TRANSFORM _archs APPEND "-real")
    list(APPEND _archs ${_newest})
    set(${out} "${_archs}" PARENT_SCOPE)
endfunction()
