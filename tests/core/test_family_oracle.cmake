# Sliding-window attention (Mistral, Qwen2), Gemma 2, Gemma 3 and Phi-3 parity against HF
# transformers on tiny random checkpoints written by a Python script before the suite runs (a CTest
# fixture), loaded through the architecture registry.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME family_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_family_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle-families")
set_tests_properties(family_oracle_fixtures PROPERTIES FIXTURES_SETUP family_oracle TIMEOUT 300)

servelab_add_qtest(test_family_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_family_oracle.cpp
  LIBS servelab_core FIXTURES family_oracle TIMEOUT 300)
set_target_properties(test_family_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_family_oracle APPEND PROPERTY ENVIRONMENT "SERVELAB_FAMILY_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-families")
