# The Batching tab on the offscreen platform: the padded tensors of the course's prompts (built-in
# model), the batch sweep and its roofline, exports, settings and the scripted --tab batching --run
# mode (the tiny test model); both batching tabs registered. Helpers shared with test_continuous_tab
# in batching_tabs_fixture.h.
servelab_add_qtest(test_batching_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_batching_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 300)
set_target_properties(test_batching_tab PROPERTIES AUTOMOC ON)
target_compile_definitions(test_batching_tab PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_batching_tab servelab)
