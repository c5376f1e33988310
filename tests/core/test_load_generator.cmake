# The load generator (core/serve/load_*) against tests/serve/loadgen_test_server.py on 127.0.0.1 (a
# server that streams as vLLM does with a stream interval, and as TGI does): token counts, metrics,
# goodput, warm-up, arrivals, reports, refusals. Its readers are test_load_readers'. Torch-free:
# links servelab_loadgen only.
if(SERVELAB_BASE_ONLY)
  return()  # servelab_loadgen is defined with the serving libraries
endif()
servelab_add_qtest(test_load_generator
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_load_generator.cpp
  LIBS servelab_loadgen
  TIMEOUT 300)
set_target_properties(test_load_generator PROPERTIES AUTOMOC ON)
target_compile_definitions(test_load_generator PRIVATE SERVELAB_TEST_PYTHON="${SERVELAB_PYTHON}")
