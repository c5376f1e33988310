# The Generate tab's chat mode on the offscreen platform: the tiny test model with a ChatML template
# added, two turns, regenerate, edit and resend, the context policy, persistence across windows (and
# saved after every turn, with the window open), export, a model without a template, and the
# scripted two-turn preset.
servelab_add_qtest(test_generate_chat
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_generate_chat.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 300)
set_target_properties(test_generate_chat PROPERTIES AUTOMOC ON)
target_compile_definitions(test_generate_chat PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_generate_chat servelab)
