# GGUF reader and ggml block dequantization (servelab_base only, no libtorch): crafted corrupt
# files, files written by the PyPI `gguf` package with its numpy dequantization as the reference
# (tests/oracle/make_gguf_fixtures.py, a CTest fixture) and the shipped SmolLM2 file when present.
servelab_add_qtest(test_gguf
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf.cpp
  LIBS servelab_base)
# The test class is a QObject declared in the .cpp (it includes test_gguf.moc).
set_target_properties(test_gguf PROPERTIES AUTOMOC ON)
# The fixtures need only numpy, gguf and safetensors, so they run in base-only builds too; without
# the project's Python the suite skips the gguf-py cases and says so.
if(EXISTS "${SERVELAB_PYTHON}")
  add_test(NAME gguf_oracle_fixtures
    COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_gguf_fixtures.py"
            --out "${CMAKE_BINARY_DIR}/gguf_oracle")
  set_tests_properties(gguf_oracle_fixtures PROPERTIES FIXTURES_SETUP gguf_oracle TIMEOUT 120)
  set_tests_properties(test_gguf PROPERTIES FIXTURES_REQUIRED gguf_oracle)
  set_property(TEST test_gguf APPEND PROPERTY ENVIRONMENT "SERVELAB_GGUF_ORACLE_DIR=${CMAKE_BINARY_DIR}/gguf_oracle")
endif()
