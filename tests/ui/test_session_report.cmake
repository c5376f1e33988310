# The session report (File → Export report…, --report x.html / x.pdf) on the offscreen platform,
# after two runs on the tiny test model: the HTML's sections, settings and inline SVG, the PDF's
# pages, the scripted report and an unwritable path (needs the servelab binary).
servelab_add_qtest(test_session_report
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_session_report.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 900)
set_target_properties(test_session_report PROPERTIES AUTOMOC ON)
target_compile_definitions(test_session_report PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>"
  SERVELAB_VERSION="${PROJECT_VERSION}")
add_dependencies(test_session_report servelab)
