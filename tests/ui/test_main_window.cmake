# The desktop app on the offscreen platform (needs libtorch, the built-in model's tokenizer, and
# the servelab and servelab-cli binaries for the scripted and CLI-parity checks).
servelab_add_qtest(test_main_window
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_main_window.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 1200)
set_target_properties(test_main_window PROPERTIES AUTOMOC ON)
target_compile_definitions(test_main_window PRIVATE
  SERVELAB_CLI="$<TARGET_FILE:servelab-cli>" SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_main_window servelab servelab-cli)
