# Oracle parity against HF transformers. The fixtures are made by a Python script from .venv before
# the suite runs (a CTest fixture); without .venv the setup step fails and says why.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_gpt2_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle")
set_tests_properties(oracle_fixtures PROPERTIES FIXTURES_SETUP oracle TIMEOUT 300)

servelab_add_qtest(test_gpt2_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_oracle.cpp
  LIBS servelab_core FIXTURES oracle TIMEOUT 600)
set_target_properties(test_gpt2_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_gpt2_oracle APPEND PROPERTY ENVIRONMENT "SERVELAB_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle")
# The same parity with our fp32 kernels forced to their AVX2 and portable paths (issue 21; the
# blocked GEMV/GEMM of packed_gemms_match_hf); skipped where this CPU lacks the ISA.
foreach(_isa avx2 generic)
  add_test(NAME test_gpt2_oracle_${_isa} COMMAND test_gpt2_oracle)
  set_tests_properties(test_gpt2_oracle_${_isa} PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED oracle
    SKIP_REGULAR_EXPRESSION "SERVELAB_ISA: this CPU"
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;SERVELAB_ISA=${_isa};SERVELAB_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle")
endforeach()
