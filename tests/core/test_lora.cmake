# LoRA and multi-LoRA: the layer against x (W + s A B), loop = gathered = segmented on mixed
# batches, PEFT adapters against peft's own logits (a Python oracle, run first as a CTest
# fixture), merge/unmerge, adapters per request in continuous batching, bad adapter folders, the
# experiment and the CLI's lora commands.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME lora_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_lora_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/lora_oracle")
set_tests_properties(lora_oracle_fixtures PROPERTIES FIXTURES_SETUP lora_oracle TIMEOUT 300)

servelab_add_qtest(test_lora
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora.cpp
  LIBS servelab_core FIXTURES lora_oracle TIMEOUT 900)
set_target_properties(test_lora PROPERTIES AUTOMOC ON)
set_property(TEST test_lora APPEND PROPERTY ENVIRONMENT "SERVELAB_LORA_ORACLE_DIR=${CMAKE_BINARY_DIR}/lora_oracle")
target_compile_definitions(test_lora PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_lora servelab-cli)
