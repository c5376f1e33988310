# Continuous batching: scheduler, KV memory managers, static baseline, experiments (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_scheduler
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler.cpp
  LIBS servelab_core servelab_serve TIMEOUT 900)
set_target_properties(test_scheduler PROPERTIES AUTOMOC ON)
# The HTTP server's loading state is checked with cpp-httplib's client, built with its pkg-config
# flags (they select its TLS support, part of its ABI).
pkg_check_modules(HTTPLIB_CLIENT REQUIRED IMPORTED_TARGET cpp-httplib)
target_link_libraries(test_scheduler PRIVATE PkgConfig::HTTPLIB_CLIENT)
