# servelab-cli bench roofline on the demo model with a short workload: the JSON's shape, intensity =
# FLOPs / bytes for every point, the cached machine limits, quantized weights' fewer bytes.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_cli_roofline SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_roofline.cpp TIMEOUT 600)
set_target_properties(test_cli_roofline PROPERTIES AUTOMOC ON)
target_compile_definitions(test_cli_roofline PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_cli_roofline servelab-cli)
