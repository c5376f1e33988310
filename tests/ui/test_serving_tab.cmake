# The Serving tab on the offscreen platform (the GPT-2 small shape with random weights: the text
# does not matter here): the server started in-process, load-generator runs against it filling the
# request table, the live charts and the counters, Stop, a restart on another port, a port already
# in use shown as the start's error, a load run against a server that is gone, and one against
# another server whose own figures come from its /metrics.
servelab_add_qtest(test_serving_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serving_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_serving_tab PROPERTIES AUTOMOC ON)
# The remote case runs tests/serve/loadgen_test_server.py (standard library only) with the venv's python.
target_compile_definitions(test_serving_tab PRIVATE SERVELAB_TEST_PYTHON="${SERVELAB_PYTHON}")
