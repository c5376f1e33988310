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
# The same parity under each ISA our kernels have below the best (issue 21): SERVELAB_ISA forces
# the JIT GEMV and tiles (Q4_0/Q4_1 as int4-g32, Q8_0, F16) and the fp32 GEMV to their AVX2 and
# portable paths; skipped where this CPU lacks the ISA (the engine then refuses to load and says so).
foreach(_isa avx2 generic)
  add_test(NAME test_gguf_oracle_${_isa} COMMAND test_gguf_oracle)
  set_tests_properties(test_gguf_oracle_${_isa} PROPERTIES TIMEOUT 180
    FIXTURES_REQUIRED gguf_llama_oracle
    SKIP_REGULAR_EXPRESSION "SERVELAB_ISA: this CPU"
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;SERVELAB_ISA=${_isa};SERVELAB_GGUF_LLAMA_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-gguf-llama")
endforeach()
