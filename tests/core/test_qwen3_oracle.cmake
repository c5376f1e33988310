# Qwen3 (and Qwen2) parity against HF transformers on tiny random checkpoints written by a Python
# script before the suite runs (a CTest fixture), loaded through the architecture registry.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME qwen3_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_qwen3_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle-qwen3")
set_tests_properties(qwen3_oracle_fixtures PROPERTIES FIXTURES_SETUP qwen3_oracle TIMEOUT 300)

servelab_add_qtest(test_qwen3_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qwen3_oracle.cpp
  LIBS servelab_core FIXTURES qwen3_oracle TIMEOUT 300)
set_target_properties(test_qwen3_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_qwen3_oracle APPEND PROPERTY ENVIRONMENT "SERVELAB_QWEN3_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-qwen3")
