# Chat templates: family detection and ChatTemplate::format() against transformers'
# apply_chat_template (SmolLM2's template and one or more of each family). servelab_base only. The
# renderings come from a Python script run first (a CTest fixture); without the project Python the
# comparison skips, saying so, and the rest still runs.
servelab_add_qtest(test_chat_template
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chat_template.cpp
  LIBS servelab_base TIMEOUT 300)
set_target_properties(test_chat_template PROPERTIES AUTOMOC ON)
set_property(TEST test_chat_template APPEND PROPERTY ENVIRONMENT
             "SERVELAB_CHAT_ORACLE=${CMAKE_BINARY_DIR}/chat_oracle/chat_cases.json")
if(EXISTS "${SERVELAB_PYTHON}")
  add_test(NAME chat_oracle_fixtures
    COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/oracle/make_chat_fixtures.py"
            --out "${CMAKE_BINARY_DIR}/chat_oracle/chat_cases.json")
  set_tests_properties(chat_oracle_fixtures PROPERTIES FIXTURES_SETUP chat_oracle TIMEOUT 300)
  set_tests_properties(test_chat_template PROPERTIES FIXTURES_REQUIRED chat_oracle)
endif()
