# Optional CUDA backend (engine/ops/cuda: the backend and the NCCL
# communicator). GPTD_CUDA=AUTO enables it when nvcc is found; ON requires it; OFF skips it. The target
# links cudart and NCCL, and loads cuBLAS(Lt) at its first backend (all loaded at run time by cudart
# and never the driver library libcuda), so binaries start on hosts with no
# driver and run CPU jobs there.
set(GPTD_HAVE_CUDA OFF)
if(NOT GPTD_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # Kernels at -O3 in every optimised build type (nvcc warns when -O is
    # given twice, so the per-config flags carry it, not the target).
    set(CMAKE_CUDA_FLAGS_RELWITHDEBINFO "-O3 -g")
    find_package(CUDAToolkit)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(GPTD_HAVE_CUDA ON)
    endif()
  endif()
  if(GPTD_CUDA STREQUAL "ON" AND NOT GPTD_HAVE_CUDA)
    message(FATAL_ERROR "GPTD_CUDA=ON but nvcc, the CUDA toolkit or NCCL was not found")
  endif()
endif()

if(GPTD_HAVE_CUDA)
  # engine/ops/cuda: cuda_backend.cu (memory, streams, GEMMs), cuda_kernels.cu,
  # cuda_layernorm.cu and cuda_xent.cu (our kernels), cuda_attention.cu and
  # cuda_attention_cc.cu (attention on tensor cores and CUDA cores), cuda_probe.c and
  # comm_nccl.c (plain C). Few .cu files on purpose: nvcc costs 10-20 s per
  # file on the build machines.
  file(GLOB GPTD_CUDA_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/ops/cuda/*.cu
       ${CMAKE_SOURCE_DIR}/engine/ops/cuda/*.c)
  if(NOT GPTD_CUDA_SRC)
    message(FATAL_ERROR "engine/ops/cuda has no sources")
  endif()
  # The warpgroup attention kernels (cuda_attention_wg.cu,
  # attention_forward/_backward wg) build for sm_90a where the rest builds for
  # sm_90 (90 -> sm_90a code and compute_90 PTX, so other GPUs still JIT
  # it): they use wgmma, which only the arch-specific target has.
  # Elsewhere they trap, and a probe kernel tells the backend which code
  # the driver loaded.
  set(GPTD_CUDA_ATTN_SRC ${CMAKE_SOURCE_DIR}/engine/ops/cuda/cuda_attention_wg.cu)
  list(REMOVE_ITEM GPTD_CUDA_SRC ${GPTD_CUDA_ATTN_SRC})
  set(gptd_attn_archs "")
  foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
    if(arch STREQUAL "90")
      list(APPEND gptd_attn_archs 90a-real 90-virtual)
    elseif(arch STREQUAL "90-real")
      list(APPEND gptd_attn_archs 90a-real)
    else()
      list(APPEND gptd_attn_archs ${arch})
    endif()
  endforeach()
  add_library(gptcuda_attn OBJECT ${GPTD_CUDA_ATTN_SRC})
  # Directory-wide options are gcc/clang flags (below): none for nvcc.
  set_target_properties(gptcuda_attn PROPERTIES COMPILE_OPTIONS "")
  add_library(gptcuda STATIC ${GPTD_CUDA_SRC} $<TARGET_OBJECTS:gptcuda_attn>)
  # Directory-wide options (sanitizers, fuzzing, -march=native) are gcc/clang
  # flags that nvcc rejects: keep them for the C sources only.
  get_target_property(gptd_cuda_inherited gptcuda COMPILE_OPTIONS)
  if(gptd_cuda_inherited)
    set(gptd_cuda_wrapped "")
    foreach(opt IN LISTS gptd_cuda_inherited)
      list(APPEND gptd_cuda_wrapped "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${opt}>")
    endforeach()
    set_target_properties(gptcuda PROPERTIES COMPILE_OPTIONS "${gptd_cuda_wrapped}")
  endif()
  # The engine's headers come with gptengine. gptcuda's public headers are in
  # engine/ops/cuda/include/cuda (callers include "cuda/..."); its private
  # ones and NCCL's stay private.
  target_include_directories(gptcuda PUBLIC ${CMAKE_SOURCE_DIR}/engine/ops/cuda/include
                             PRIVATE ${CMAKE_SOURCE_DIR}/engine/ops/cuda
                                     ${CMAKE_SOURCE_DIR}/engine/ops/cuda/include/cuda ${NCCL_INCLUDE_DIR})
  target_include_directories(gptcuda_attn PRIVATE ${CMAKE_SOURCE_DIR}/engine/ops/cuda/include
                                                  ${CMAKE_SOURCE_DIR}/engine/ops/cuda
                                                  ${CMAKE_SOURCE_DIR}/engine/ops/cuda/include/cuda)
  target_link_libraries(gptcuda_attn PRIVATE gptengine CUDA::cudart)
  set_target_properties(gptcuda_attn PROPERTIES CUDA_ARCHITECTURES "${gptd_attn_archs}"
                                                CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(gptcuda_attn PRIVATE GPTD_HAVE_CUDA=1)
  target_compile_options(gptcuda_attn PRIVATE -lineinfo -Xcompiler=-Wall,-Wextra
                                              $<$<BOOL:${GPTD_WERROR}>:-Werror=all-warnings>)
  # Runtime libraries only: cudart loads the driver (libcuda) itself, so the
  # binaries start on hosts without one. gptengine provides gpt_err_set and
  # the launch/padding plans (engine/ops/cuda_plan.c); linking it here
  # orders the static libraries correctly.
  # cuBLAS(Lt) is not linked: cuda_blas.c loads it when the first backend
  # is made (libcublasLt costs ~210 MB resident in every process that maps
  # it); its headers come with CUDA::cudart's include folder.
  target_link_libraries(gptcuda PUBLIC gptengine CUDA::cudart ${NCCL_LIBRARY} ${CMAKE_DL_LIBS})
  target_compile_definitions(gptcuda PUBLIC GPTD_HAVE_CUDA=1)
  target_compile_definitions(
    gptcuda PRIVATE GPTD_CUBLAS_SONAME="libcublas.so.${CUDAToolkit_VERSION_MAJOR}")
  set_target_properties(gptcuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF CUDA_STANDARD 17
                                           CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  # C sources get the project's warnings; kernels get line info (for
  # profilers, no effect on code). No --use_fast_math: the kernels are
  # memory-bound and tested against the CPU backend at a few ulp (tanhf,
  # expf and division keep their IEEE behaviour).
  target_compile_options(gptcuda PRIVATE $<$<COMPILE_LANGUAGE:C>:${GPTD_WARNINGS}>
                         $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xcompiler=-Wall,-Wextra>)
  if(GPTD_WERROR)
    target_compile_options(gptcuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  message(STATUS "gptd: CUDA backend ON (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "gptd: CUDA backend OFF")
endif()
