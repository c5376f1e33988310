# The Lessons panel on the offscreen platform: every lesson file parses and names only what its tab
# has (a broken lesson is refused), a real step on the tiny test model fills its notice from the
# tab's result values, progress persists, and the scripted --lesson/--step mode (needs servelab).
servelab_add_qtest(test_lessons
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lessons.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 900)
set_target_properties(test_lessons PROPERTIES AUTOMOC ON)
target_compile_definitions(test_lessons PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_lessons servelab)
