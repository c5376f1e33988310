# The quantizers: the course's formula and the other quantizers on hand-made tensors, the course's
# uint8 values and HF's memory footprint (a Python oracle, run first as a CTest fixture), memory to
# the byte, every bad input, the experiment and the CLI's quantize command (libtorch). The kernels
# and quantized models generating are test_quant_kernels'; both share quant_fixture.h.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME quant_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_quant_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/quant_oracle")
set_tests_properties(quant_oracle_fixtures PROPERTIES FIXTURES_SETUP quant_oracle TIMEOUT 300)

servelab_add_qtest(test_quant
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.cpp
  LIBS servelab_core FIXTURES quant_oracle TIMEOUT 300)
set_target_properties(test_quant PROPERTIES AUTOMOC ON)
set_property(TEST test_quant APPEND PROPERTY ENVIRONMENT "SERVELAB_QUANT_ORACLE_DIR=${CMAKE_BINARY_DIR}/quant_oracle")
# The quantize command and --quant end to end through the CLI.
target_compile_definitions(test_quant PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_quant servelab-cli)
