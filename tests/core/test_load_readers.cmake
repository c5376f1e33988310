# The load generator's readers: servers' event streams cut anywhere and garbage, the prompts'
# datasets (random, prefix repetition, tokenizer prompts, JSONL and ShareGPT files), /metrics texts
# under each engine's names and scraped from tests/serve/loadgen_test_server.py on 127.0.0.1.
# Torch-free: links servelab_loadgen only.
if(SERVELAB_BASE_ONLY)
  return()  # servelab_loadgen is defined with the serving libraries
endif()
servelab_add_qtest(test_load_readers
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_load_readers.cpp
  LIBS servelab_loadgen
  TIMEOUT 120)
set_target_properties(test_load_readers PROPERTIES AUTOMOC ON)
target_compile_definitions(test_load_readers PRIVATE SERVELAB_TEST_PYTHON="${SERVELAB_PYTHON}")
