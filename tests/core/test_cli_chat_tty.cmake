# servelab-cli chat at a terminal (tests/core/test_cli_chat_tty.py, standard library only): keys
# typed on a pseudo-terminal into GNU readline (Backspace, Ctrl-A, Ctrl-E, Up), the edited line as
# the model's turn, the history file across runs, an unwritable one as a warning, NO_COLOR. The
# built-in model, greedy, 4 tokens an answer; skipped without the model.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
add_test(NAME test_cli_chat_tty
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_CURRENT_LIST_DIR}/test_cli_chat_tty.py"
          --cli "$<TARGET_FILE:servelab-cli>" --model "${SERVELAB_BUILTIN_MODEL}" -v)
set_tests_properties(test_cli_chat_tty PROPERTIES TIMEOUT 600 SKIP_REGULAR_EXPRESSION "skipped '")
