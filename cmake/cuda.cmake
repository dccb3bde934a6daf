# cuda.cmake - the optional CUDA device backend (issue 5), included by CMakeLists.txt.
#
# When a CUDA compiler that works with the host gcc is found, src/dev_cuda.cu joins the
# library sources with KVT_HAVE_CUDA defined and the CUDA runtime linked; at run time the
# "cuda" backend is used only where cudaGetDeviceCount() > 0 ("auto" falls back to emu).
# Without a toolkit this file does nothing and the build is the same as before.
# -DKVT_CUDA=OFF skips it explicitly.
option(KVT_CUDA "Build the CUDA device backend when a CUDA toolkit is found" ON)
if(NOT KVT_CUDA OR NOT EXISTS ${CMAKE_SOURCE_DIR}/src/dev_cuda.cu)
  message(STATUS "kvtier: cuda device backend disabled")
  return()
endif()

# Find nvcc where the toolkit usually lives even when it is not on PATH.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(KVT_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(KVT_NVCC)
    set(CMAKE_CUDA_COMPILER ${KVT_NVCC})
  endif()
endif()
# Architectures: data-center GPUs this is meant for (A100, H100/H200) plus PTX for newer
# ones; CUDA 13 no longer targets anything older than sm_75.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80-real 90-real 90-virtual)
endif()

include(CheckLanguage)
check_language(CUDA) # a trial compile: fails (quietly) if nvcc does not work with this gcc
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "kvtier: cuda device backend disabled (no working CUDA compiler)")
  return()
endif()
enable_language(CUDA)
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "kvtier: cuda device backend disabled (CUDA toolkit not found)")
  return()
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# The library links as C: nvcc-compiled objects need only the CUDA runtime.
set(CMAKE_CUDA_LINKER_PREFERENCE 0)
set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES 0)

# The directory's compile options are gcc flags for C (-Wstrict-prototypes, sanitizers):
# keep them for C, and hand nvcc only the host-compiler warnings that make sense for C++.
get_directory_property(_kvt_opts COMPILE_OPTIONS)
set(_kvt_new "")
foreach(o ${_kvt_opts})
  list(APPEND _kvt_new "$<$<COMPILE_LANGUAGE:C>:${o}>")
endforeach()
list(APPEND _kvt_new
     "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fvisibility=hidden>"
     "$<$<COMPILE_LANGUAGE:CUDA>:-D_GNU_SOURCE>")
if(KVT_WERROR)
  list(APPEND _kvt_new "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>")
endif()
set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_kvt_new}")

list(APPEND KVT_SRC ${CMAKE_SOURCE_DIR}/src/dev_cuda.cu)
list(APPEND KVT_DEFS KVT_HAVE_CUDA)
list(APPEND KVT_LIBS CUDA::cudart)
message(STATUS "kvtier: cuda device backend enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES})")

# The GPU check (bench/gpu_check.sh builds and runs it on a machine with a GPU).
if(EXISTS ${CMAKE_SOURCE_DIR}/bench/gpu_check.cu)
  add_executable(kvt_gpu_check ${CMAKE_SOURCE_DIR}/bench/gpu_check.cu)
  target_link_libraries(kvt_gpu_check PRIVATE kvtier_core CUDA::cudart)
endif()
