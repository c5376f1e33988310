# The Quantization tab on the offscreen platform (the tiny test model): a run's memory, speed and
# error charts, table and greedy text against its result, the marking of differing greedy tokens,
# dequantize-once, Stop, a refused combination, settings and the scripted --tab/--run mode.
servelab_add_qtest(test_quantization_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quantization_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 900)
set_target_properties(test_quantization_tab PROPERTIES AUTOMOC ON)
target_compile_definitions(test_quantization_tab PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_quantization_tab servelab)
