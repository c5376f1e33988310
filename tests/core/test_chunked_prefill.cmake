# The multi-token forward of every KV layout (extend), chunked prefill through the scheduler and
# the one token picker's sampling parameters, on tiny random models (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_chunked_prefill
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chunked_prefill.cpp
  LIBS servelab_core servelab_serve TIMEOUT 600)
set_target_properties(test_chunked_prefill PROPERTIES AUTOMOC ON)
target_compile_definitions(test_chunked_prefill PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_chunked_prefill servelab-cli)
