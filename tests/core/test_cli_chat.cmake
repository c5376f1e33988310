# servelab-cli chat through QProcess on the built-in model, greedy and a few tokens per answer:
# turns piped in one per line, the earlier exchanges in each later prompt, /system and /reset, the
# JSON transcript, colour only on a terminal, and one-line errors.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_cli_chat SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_chat.cpp TIMEOUT 900)
set_target_properties(test_cli_chat PROPERTIES AUTOMOC ON)
target_compile_definitions(test_cli_chat PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>"
  SERVELAB_BUILTIN_MODEL="${SERVELAB_BUILTIN_MODEL}")
add_dependencies(test_cli_chat servelab-cli)
