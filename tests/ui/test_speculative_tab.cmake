# The Speculative decoding tab on the offscreen platform (the tiny test model): a prompt-lookup run's
# steps in the text view and charts against the run's SpecDecodeStats, the k sweep, presets,
# settings and the scripted --tab/--run mode.
servelab_add_qtest(test_speculative_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_speculative_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 300)
set_target_properties(test_speculative_tab PROPERTIES AUTOMOC ON)
target_compile_definitions(test_speculative_tab PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_speculative_tab servelab)
