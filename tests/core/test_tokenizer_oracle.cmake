# Byte-level BPE beyond GPT-2 against Hugging Face: SmolLM2's tokenizer (its GGUF metadata through
# from_parts, and HF's tokenizer.json made from the same GGUF with the pre-tokenizer fixed) and tiny
# Llama 3 / Qwen2 / custom-regex tokenizers trained by the fixture script. servelab_base only, so
# SERVELAB_BASE_ONLY builds run it too. The fixtures come from a Python script run first (a CTest
# fixture); without the project Python the suite still runs and skips the HF comparisons, saying so.
servelab_add_qtest(test_tokenizer_oracle
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_oracle.cpp
  LIBS servelab_base TIMEOUT 300)
set_target_properties(test_tokenizer_oracle PROPERTIES AUTOMOC ON)
set_property(TEST test_tokenizer_oracle APPEND PROPERTY ENVIRONMENT
             "SERVELAB_TOKENIZER_ORACLE_DIR=${CMAKE_BINARY_DIR}/tokenizer_oracle")
if(EXISTS "${SERVELAB_PYTHON}")
  add_test(NAME tokenizer_oracle_fixtures
    COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_bpe_fixtures.py"
            --out "${CMAKE_BINARY_DIR}/tokenizer_oracle")
  set_tests_properties(tokenizer_oracle_fixtures PROPERTIES FIXTURES_SETUP tokenizer_oracle TIMEOUT 300)
  set_tests_properties(test_tokenizer_oracle PROPERTIES FIXTURES_REQUIRED tokenizer_oracle)
endif()
