# Remote targets and saved runs (core/serve): GET /v1/models with a target's headers, and a load run's
# JSON (load_report_json) read back, corrupt and foreign files refused with the reason; against
# tests/serve/loadgen_test_server.py on 127.0.0.1. Torch-free: links servelab_loadgen only.
if(SERVELAB_BASE_ONLY)
  return()  # servelab_loadgen is defined with the serving libraries
endif()
servelab_add_qtest(test_load_targets
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_load_targets.cpp
  LIBS servelab_loadgen
  TIMEOUT 300)
set_target_properties(test_load_targets PROPERTIES AUTOMOC ON)
target_compile_definitions(test_load_targets PRIVATE SERVELAB_TEST_PYTHON="${SERVELAB_PYTHON}")
