# The server's guard against clients that send a request too slowly (serve/slow_request_guard):
# real sockets on 127.0.0.1, the guard's clock passed in, so nothing depends on the machine's speed.
if(SERVELAB_BASE_ONLY)
  return()  # lives in servelab_serve
endif()
servelab_add_qtest(test_slow_request_guard
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_slow_request_guard.cpp
  LIBS servelab_serve TIMEOUT 120)
set_target_properties(test_slow_request_guard PROPERTIES AUTOMOC ON)
