# GGUF Llama parity against HF transformers loading the same files: tiny random Llamas written as
# llama.cpp's converter writes them, one tensor type per file (tests/oracle/make_gguf_llama_fixtures.py,
# a CTest fixture: about 10 CPU seconds, 25 MB under the build folder).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME gguf_llama_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_gguf_llama_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle-gguf-llama")
set_tests_properties(gguf_llama_oracle_fixtures PROPERTIES FIXTURES_SETUP gguf_llama_oracle TIMEOUT 120)

servelab_add_qtest(test_gguf_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_oracle.cpp
  LIBS servelab_core FIXTURES gguf_llama_oracle TIMEOUT 180)
set_target_properties(test_gguf_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_gguf_oracle APPEND PROPERTY ENVIRONMENT
             "SERVELAB_GGUF_LLAMA_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-gguf-llama")
