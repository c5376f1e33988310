# servelab-cli models (issue 35) on the catalog's computer in miniature: the JSON is the catalog,
# field for field; the table; a bad --dir is one line and exit 1.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_cli_models SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_models.cpp
  LIBS servelab_core TIMEOUT 300)
set_target_properties(test_cli_models PROPERTIES AUTOMOC ON)
target_compile_definitions(test_cli_models PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_cli_models servelab-cli)
