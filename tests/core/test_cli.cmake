# servelab-cli end to end through QProcess.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli.cpp TIMEOUT 900)
set_target_properties(test_cli PROPERTIES AUTOMOC ON)
target_compile_definitions(test_cli PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>"
  SERVELAB_BUILTIN_MODEL="${SERVELAB_BUILTIN_MODEL}")
add_dependencies(test_cli servelab-cli)
