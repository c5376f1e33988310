# The built-in model (SmolLM2-135M-Instruct Q4_1) against HF transformers loading the same file in
# fp32, and the Engine's checks of it. The fixture loads the model in HF once (about 20 s on one
# thread, 1.5 GB; nothing when its stamp says the output is current) and writes about 10 MB; without
# the model or the memory both say why they skip.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME smollm2_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_smollm2_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle-smollm2"
          --model "${CMAKE_SOURCE_DIR}/.venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf")
set_tests_properties(smollm2_oracle_fixtures PROPERTIES FIXTURES_SETUP smollm2_oracle TIMEOUT 180)

# The opt-in Gemma 3 270M (scripts/install_gemma3_270m): HF's reference where it is installed, a
# one-line skip (before importing torch) where it is not.
add_test(NAME gemma3_270m_oracle_fixtures
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_gemma3_270m_fixtures.py"
          --out "${CMAKE_BINARY_DIR}/oracle-gemma3-270m")
set_tests_properties(gemma3_270m_oracle_fixtures PROPERTIES FIXTURES_SETUP smollm2_oracle TIMEOUT 300)

servelab_add_qtest(test_smollm2_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_smollm2_oracle.cpp
  LIBS servelab_core FIXTURES smollm2_oracle TIMEOUT 240)
set_target_properties(test_smollm2_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_smollm2_oracle APPEND PROPERTY ENVIRONMENT
             "SERVELAB_SMOLLM2_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-smollm2"
             "SERVELAB_GEMMA3_ORACLE_DIR=${CMAKE_BINARY_DIR}/oracle-gemma3-270m")
