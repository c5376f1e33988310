# The fused decode program (model/llama_decode_program): bit-equal to the op-by-op forward for
# every JIT weight scheme, row count, padding, Qwen2 biases, Qwen3 QK norms, slot KV and both
# vector ISAs; the steps it refuses; the CLI switch and info (tiny random models, libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_decode_program
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_program.cpp
  LIBS servelab_core TIMEOUT 300)
set_target_properties(test_decode_program PROPERTIES AUTOMOC ON)
target_compile_definitions(test_decode_program PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_decode_program servelab-cli)
