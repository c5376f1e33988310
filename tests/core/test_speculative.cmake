# Speculative decoding on the scheduler core (prompt lookup and a draft model, greedy equality, the
# rejection rule's distribution, KV rollback), on tiny random models (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_speculative
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_speculative.cpp
  LIBS servelab_core servelab_serve TIMEOUT 300)
set_target_properties(test_speculative PROPERTIES AUTOMOC ON)
target_compile_definitions(test_speculative PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_speculative servelab-cli)
