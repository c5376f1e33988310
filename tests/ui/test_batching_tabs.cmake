# The Batching and Continuous batching tabs on the offscreen platform: the padded tensors of the
# course's prompts (built-in model), the batch sweep, the Gantt timeline against the scheduler's
# result, Stop, the course benchmark, exports and the scripted --tab/--run mode (the tiny test model).
servelab_add_qtest(test_batching_tabs
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_batching_tabs.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_batching_tabs PROPERTIES AUTOMOC ON)
target_compile_definitions(test_batching_tabs PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_batching_tabs servelab)
