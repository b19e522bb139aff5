# Optional CUDA backend (engine/ops/cuda, engine/comm_nccl). GPTD_CUDA=AUTO
# enables it when nvcc is found; ON requires it; OFF skips it. The target
# links cudart, cuBLAS, cuBLASLt and NCCL (all loaded at run time by cudart
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
  file(GLOB GPTD_CUDA_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/engine/ops/cuda/*.cu
       ${CMAKE_SOURCE_DIR}/engine/ops/cuda/*.c)
  if(NOT GPTD_CUDA_SRC)
    # The backend proper arrives with the CUDA issue; until then the target
    # exists so the rest of the build can depend on it.
    message(FATAL_ERROR "engine/ops/cuda has no sources")
  endif()
  add_library(gptcuda STATIC ${GPTD_CUDA_SRC})
  target_include_directories(gptcuda PUBLIC ${CMAKE_SOURCE_DIR}/proto ${CMAKE_SOURCE_DIR}/engine
                                            ${CMAKE_SOURCE_DIR}/engine/ops ${NCCL_INCLUDE_DIR})
  target_link_libraries(gptcuda PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt ${NCCL_LIBRARY})
  target_compile_definitions(gptcuda PUBLIC GPTD_HAVE_CUDA=1)
  set_target_properties(gptcuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  message(STATUS "gptd: CUDA backend ON (architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "gptd: CUDA backend OFF")
endif()
