# The Serving tab on the offscreen platform (the GPT-2 small shape with random weights: the text
# does not matter here): the server started in-process, load-generator runs against it filling the
# request table, the live charts and the counters, Stop, a restart on another port, a port already
# in use shown as the start's error, and a load run against a server that is gone.
servelab_add_qtest(test_serving_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serving_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_serving_tab PROPERTIES AUTOMOC ON)
