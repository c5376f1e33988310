# The Continuous batching tab on the offscreen platform (the tiny test model): the Gantt timeline
# against the scheduler's result, the block pool against the block tables, the presets, preemption
# and prefix-hit marks, Stop, the course benchmark, exports, settings and the scripted
# --tab continuous --run mode. Helpers shared with test_batching_tab in batching_tabs_fixture.h.
servelab_add_qtest(test_continuous_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_continuous_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_continuous_tab PROPERTIES AUTOMOC ON)
target_compile_definitions(test_continuous_tab PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_continuous_tab servelab)
