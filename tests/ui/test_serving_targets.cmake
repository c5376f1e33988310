# The Serving tab's load targets and saved runs on the offscreen platform, against
# tests/serve/loadgen_test_server.py (no model loaded): API keys kept out of the settings file (the
# session-only path where no keychain answers, said in the form), Fetch of /v1/models, the selected
# target's URL, API, model, headers, key and TLS choice in the run, the client-side TTFT and
# inter-token distributions of a remote run, runs saved, reopened and compared, bad files refused.
servelab_add_qtest(test_serving_targets
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serving_targets.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_serving_targets PROPERTIES AUTOMOC ON)
target_compile_definitions(test_serving_targets PRIVATE SERVELAB_TEST_PYTHON="${SERVELAB_PYTHON}")
