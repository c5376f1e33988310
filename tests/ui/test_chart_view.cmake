# ChartView (servelab_chart): data round trips, CSV, PNG/SVG/PDF export and failures, hover readout,
# log2 axis, themes, auto-fit vs user zoom. Offscreen platform, no libtorch.
servelab_add_qtest(test_chart_view
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chart_view.cpp
  LIBS servelab_chart Qt6::Widgets TIMEOUT 120)
# The test class is a QObject declared in the .cpp (it includes test_chart_view.moc).
set_target_properties(test_chart_view PROPERTIES AUTOMOC ON)
