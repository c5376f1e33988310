# Imported target servelab::torch for the libtorch inside a pip-installed torch package.
#
# Why not find_package(Torch)? PyPI torch ships its CUDA libraries as separate pip packages
# (nvidia-*), while TorchConfig.cmake looks for a system CUDA toolkit and links that one's
# libcudart/libnccl, which do not match the wheel's (link errors, or two CUDA runtimes in one
# process). We need no CUDA compiler: the CUDA backend is a library libtorch loads. So we link
# libtorch's own .so files and let libtorch_cuda find its nvidia-* libraries through its RUNPATH.
#
# Input: SERVELAB_TORCH_ROOT, the torch package folder (…/site-packages/torch). Found from a
# python (SERVELAB_PYTHON, default .venv/bin/python then python3) when not given.
if(NOT SERVELAB_TORCH_ROOT)
  set(_candidates "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/.venv/bin/python" python3)
  foreach(_py ${_candidates})
    if(_py)
      execute_process(COMMAND "${_py}" -c "import os, torch; print(os.path.dirname(torch.__file__))"
                      OUTPUT_VARIABLE _root OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
      if(_rc EQUAL 0 AND EXISTS "${_root}/lib")
        set(SERVELAB_TORCH_ROOT "${_root}" CACHE PATH "torch package folder whose libtorch we link")
        break()
      endif()
    endif()
  endforeach()
endif()
if(NOT SERVELAB_TORCH_ROOT OR NOT EXISTS "${SERVELAB_TORCH_ROOT}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "libtorch not found. Run scripts/bootstrap (it installs PyPI torch into .venv), "
                      "or pass -DSERVELAB_TORCH_ROOT=/path/to/site-packages/torch.")
endif()

set(_lib "${SERVELAB_TORCH_ROOT}/lib")
add_library(servelab_torch INTERFACE)
add_library(servelab::torch ALIAS servelab_torch)
target_include_directories(servelab_torch SYSTEM INTERFACE
  "${SERVELAB_TORCH_ROOT}/include" "${SERVELAB_TORCH_ROOT}/include/torch/csrc/api/include")
# The ABI libtorch was built with (PyPI torch >= 2.7 uses the C++11 ABI).
execute_process(COMMAND nm -D --defined-only "${_lib}/libc10.so" OUTPUT_VARIABLE _syms ERROR_QUIET)
if(_syms MATCHES "__cxx11")
  target_compile_definitions(servelab_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
else()
  target_compile_definitions(servelab_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=0)
endif()
# SERVELAB_CUDA=OFF links only libtorch's CPU libraries (what a package ships): not libtorch.so,
# whose CUDA wheel build itself needs libtorch_cuda, and not libtorch_cuda.
option(SERVELAB_CUDA "Link libtorch's CUDA backend when the torch package has one" ON)
set(_libs "${_lib}/libtorch_cpu.so" "${_lib}/libc10.so")
set(SERVELAB_TORCH_HAS_CUDA OFF)
if(SERVELAB_CUDA)
  list(PREPEND _libs "${_lib}/libtorch.so")
endif()
if(SERVELAB_CUDA AND EXISTS "${_lib}/libtorch_cuda.so")
  set(SERVELAB_TORCH_HAS_CUDA ON)
  # --no-as-needed: nothing of ours calls into libtorch_cuda directly, but loading it is what
  # registers the CUDA backend.
  target_link_options(servelab_torch INTERFACE "LINKER:--no-as-needed,${_lib}/libtorch_cuda.so,--as-needed")
endif()
# CUDA graphs for decode steps (core/model/decode_graphs.cpp) call libtorch's CUDA classes directly,
# which needs the CUDA runtime's headers (the wheel's nvidia-*/include, or a toolkit's) and
# libc10_cuda. Without them, or without the CUDA backend, the engine decodes eagerly on a GPU.
set(SERVELAB_CUDA_GRAPHS OFF)
if(SERVELAB_TORCH_HAS_CUDA)
  file(GLOB _cuda_include_candidates LIST_DIRECTORIES true "${SERVELAB_TORCH_ROOT}/../nvidia/*/include"
       "${SERVELAB_TORCH_ROOT}/../nvidia/cuda_runtime/include")
  find_path(SERVELAB_CUDA_HEADERS crt/host_config.h
            HINTS ${_cuda_include_candidates} /usr/local/cuda/include /usr/include NO_DEFAULT_PATH)
  # The runtime libtorch_cuda itself loads (the wheel's), for the inline calls of libtorch's headers.
  file(GLOB _cudart_dirs LIST_DIRECTORIES true "${SERVELAB_TORCH_ROOT}/../nvidia/*/lib")
  find_library(SERVELAB_CUDART NAMES libcudart.so.13 libcudart.so.12 cudart NAMES_PER_DIR
               HINTS ${_cudart_dirs} "${_lib}" /usr/local/cuda/lib64 NO_DEFAULT_PATH)
  if(SERVELAB_CUDA_HEADERS AND SERVELAB_CUDART AND EXISTS "${_lib}/libc10_cuda.so")
    set(SERVELAB_CUDA_GRAPHS ON)
    add_library(servelab_torch_cuda INTERFACE)
    target_include_directories(servelab_torch_cuda SYSTEM INTERFACE "${SERVELAB_CUDA_HEADERS}")
    target_link_libraries(servelab_torch_cuda INTERFACE "${_lib}/libtorch_cuda.so" "${_lib}/libc10_cuda.so"
                                                        "${SERVELAB_CUDART}")
    target_compile_definitions(servelab_torch_cuda INTERFACE SERVELAB_CUDA_GRAPHS=1)
  endif()
endif()
message(STATUS "CUDA graphs for decode: ${SERVELAB_CUDA_GRAPHS} ${SERVELAB_CUDA_HEADERS} ${SERVELAB_CUDART}")
# The wheel's nvidia/*/lib folders: libtorch_cuda's libraries, and libcudart and libcupti, which a
# CUDA wheel's libtorch_cpu.so itself needs (cmake/ServeLabInstall.cmake installs those two beside it).
file(GLOB _nv_dirs LIST_DIRECTORIES true "${SERVELAB_TORCH_ROOT}/../nvidia/*/lib")
foreach(_d ${_nv_dirs} "${_lib}")
  target_link_options(servelab_torch INTERFACE "LINKER:-rpath-link,${_d}")
endforeach()
# The build tree's RUNPATH names ${_lib} (CMake adds the folders of libraries linked by full path);
# installed binaries get $ORIGIN/../lib/servelab instead (cmake/ServeLabInstall.cmake).
target_link_libraries(servelab_torch INTERFACE ${_libs})

# OpenMP for our own CPU kernels. libtorch's OpenMP backend of at::parallel_for is inline in
# ATen/Parallel.h: code compiled without -fopenmp runs the loop on the calling thread alone. The
# kernels that need the intra-op threads (servelab_enable_openmp) are compiled with -fopenmp and
# linked against the OpenMP runtime libtorch itself loads, so the process has one runtime and one
# thread pool (torch/lib/libgomp.so.1, or auditwheel's renamed copy in torch.libs); failing that,
# the compiler's own runtime.
file(GLOB _gomp "${_lib}/libgomp*.so*" "${SERVELAB_TORCH_ROOT}/../torch.libs/libgomp*.so*")
add_library(servelab_openmp INTERFACE)
set(SERVELAB_OPENMP ON)
if(_gomp)
  list(GET _gomp 0 _gomp)
  target_link_libraries(servelab_openmp INTERFACE "${_gomp}")
else()
  find_package(OpenMP COMPONENTS CXX)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(servelab_openmp INTERFACE OpenMP::OpenMP_CXX)
  else()
    set(SERVELAB_OPENMP OFF)
  endif()
endif()
message(STATUS "OpenMP for our kernels: ${SERVELAB_OPENMP} ${_gomp}")

# Compiles the given sources of target with -fopenmp (when available): their at::parallel_for loops
# then run on libtorch's intra-op threads. Precompiled headers are skipped for them (the PCH was
# built without _OPENMP, and ATen's parallel backend header must see it).
function(servelab_enable_openmp target)
  set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  if(SERVELAB_OPENMP)
    set_property(SOURCE ${ARGN} TARGET_DIRECTORY ${target} APPEND PROPERTY COMPILE_OPTIONS -fopenmp)
    target_link_libraries(${target} PRIVATE servelab_openmp)
  endif()
endfunction()
message(STATUS "libtorch: ${SERVELAB_TORCH_ROOT} (CUDA backend: ${SERVELAB_TORCH_HAS_CUDA})")
