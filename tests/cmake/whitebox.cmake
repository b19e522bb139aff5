# White-box unit tests: they include a private header of a library (one kept
# beside its sources, not in its include/ folder) and so name that folder
# themselves. Every other test sees only the public headers of the libraries
# it links.
set(GPTD_WHITEBOX
    test_jobspec   ${CMAKE_SOURCE_DIR}/proto      # jobspec_int.h (the entry table)
    test_comm      ${CMAKE_SOURCE_DIR}/engine     # comm_shm.h
    test_cuda_plan ${CMAKE_SOURCE_DIR}/engine/ops # cuda/gpt_bf16.h (gptcuda's, host side)
    test_fmt_half  ${CMAKE_SOURCE_DIR}/engine/fmt # fmt_out.h (the half-float conversions)
    test_flash_tc  ${CMAKE_SOURCE_DIR}/engine/ops # cuda/gpt_bf16.h (the kernels' bf16 rounding)
    test_trainer_ddp ${CMAKE_SOURCE_DIR}/engine   # trainer_ddp.h (bucket and event order)
    test_snapshot_shard ${CMAKE_SOURCE_DIR}/engine # shard.h (sharded save and load paths)
    test_model_mem ${CMAKE_SOURCE_DIR}/engine      # shard.h (full sharding's unit buffers)
)
while(GPTD_WHITEBOX)
  list(POP_FRONT GPTD_WHITEBOX gptd_wb_test gptd_wb_dir)
  if(TARGET ${gptd_wb_test})
    target_include_directories(${gptd_wb_test} PRIVATE ${gptd_wb_dir})
  endif()
endwhile()
