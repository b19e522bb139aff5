# GPU tests (label gpu): built only when the CUDA target exists; each exits
# 77 (skipped) on a host without a GPU. tests/gpu/acceptance.sh runs them
# on a GPU machine together with the training benchmark.

# The acceptance run's profile summary reads Nsight Compute's CSV layouts:
# checked on samples here, where no GPU or ncu is needed.
add_test(NAME gpu_ncu_summary COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/gpu/ncu_summary.py --selftest)
set_tests_properties(gpu_ncu_summary PROPERTIES LABELS unit TIMEOUT 30)
# The run record's writer (tests/gpu/runs/<run>/summary.json), on a fake
# run folder.
add_test(NAME gpu_run_summary COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/gpu/run_summary.py --selftest)
set_tests_properties(gpu_run_summary PROPERTIES LABELS unit TIMEOUT 30)

if(NOT TARGET gptcuda)
  return()
endif()

file(GLOB GPTD_GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_*.c)
foreach(src ${GPTD_GPU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  gptd_target(${name})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE gptcuda gptengine Threads::Threads)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=4")
endforeach()

# test_gpu_ops is one program of three files, the attention checks and
# the helpers the checks share (gpu_ops_*.c, no tests of their own), and
# the op table test_ops_gradcheck runs on the CPU (unit/op_cases.c).
target_sources(test_gpu_ops PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_ops_common.c
                                    ${CMAKE_CURRENT_SOURCE_DIR}/gpu/gpu_ops_attn.c
                                    ${CMAKE_CURRENT_SOURCE_DIR}/unit/op_cases.c)

# test_gpu_step runs gpt_train, whose job spec defaults are in gptproto.
target_link_libraries(test_gpu_step PRIVATE gptproto)

# test_cuda_absent calls the CUDA backend directly (the daemon reaches it
# only through gptfactory, which keeps gptcuda and GPTD_HAVE_CUDA private).
target_link_libraries(test_cuda_absent PRIVATE gptcuda)
# ... and white-box the loader of cuBLAS (engine/ops/cuda/cuda_blas.h).
target_include_directories(test_cuda_absent PRIVATE ${CMAKE_SOURCE_DIR}/engine/ops/cuda)

# The daemon, linked with the CUDA target, must start on a host without a
# GPU or driver (a binary linked to libcuda would not even load there).
add_test(NAME gptd_starts_without_gpu COMMAND gptd run --help)
set_tests_properties(gptd_starts_without_gpu PROPERTIES LABELS unit TIMEOUT 30)

# The acceptance run's bundle for GPU machines without the build host's
# libraries: packed from this build, unpacked, every program loading.
add_test(NAME gpu_bundle COMMAND ${CMAKE_SOURCE_DIR}/tests/gpu/bundle.sh selftest ${CMAKE_BINARY_DIR})
set_tests_properties(gpu_bundle PROPERTIES LABELS unit TIMEOUT 120)

# The acceptance run's plumbing, every phase on a CPU at tiny shapes
# (acceptance.sh --dry): its folder committable, summary.json complete.
add_test(NAME gpu_acceptance_dry
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/acceptance_dry.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(gpu_acceptance_dry PROPERTIES LABELS "gpu;slow" TIMEOUT 360)
