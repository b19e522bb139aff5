# Reference checks against PyTorch: test_reference (auto-discovered as a unit
# test) reads the committed golden file; torch is only needed to regenerate it
# (see tests/reference/README.md).
if(TARGET test_reference)
  target_compile_definitions(test_reference PRIVATE
    GPTD_GOLDEN_PATH="${CMAKE_SOURCE_DIR}/tests/reference/golden_tiny.bin")
  set_property(TEST test_reference APPEND PROPERTY LABELS reference)
endif()
