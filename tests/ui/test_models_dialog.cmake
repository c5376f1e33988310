# File → Models on this computer (issue 35) on the offscreen platform: a temporary Hugging Face
# cache's models in the table, the scan on its own thread, a folder added and remembered, Open
# loading a model through File → Open's path, the scripted --dialog models --screenshot.
servelab_add_qtest(test_models_dialog
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_dialog.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_models_dialog PROPERTIES AUTOMOC ON)
target_compile_definitions(test_models_dialog PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_models_dialog servelab)
