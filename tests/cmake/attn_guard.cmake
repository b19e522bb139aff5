# test_attn_guard white-boxes the attention guard's comparison
# (engine/ops/backend_guard.h, private to the engine).
target_include_directories(test_attn_guard PRIVATE ${CMAKE_SOURCE_DIR}/engine/ops)
