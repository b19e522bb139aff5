# test_cudnn_attn builds cuDNN's attention graph against a fake cuDNN
# table: cuda_dnn_attn.c needs neither CUDA nor cuDNN, so it is compiled
# into the test and the CPU build runs it too.
target_sources(test_cudnn_attn PRIVATE ${CMAKE_SOURCE_DIR}/engine/ops/cuda/cuda_dnn_attn.c)
target_include_directories(test_cudnn_attn PRIVATE ${CMAKE_SOURCE_DIR}/engine/ops/cuda)
