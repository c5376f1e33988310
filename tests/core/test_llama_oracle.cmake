# Llama-family parity against HF transformers' LlamaForCausalLM on tiny random checkpoints written
# by a Python script before the suite runs (a CTest fixture).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME llama_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_llama_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle-llama")
set_tests_properties(llama_oracle_fixtures PROPERTIES FIXTURES_SETUP llama_oracle TIMEOUT 300)

servelab_add_qtest(test_llama_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_llama_oracle.cpp
  LIBS servelab_core FIXTURES llama_oracle TIMEOUT 600)
set_target_properties(test_llama_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_llama_oracle APPEND PROPERTY ENVIRONMENT "SERVELAB_LLAMA_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-llama")
