# Paged KV bookkeeping alone (generate/block_manager): a randomized property test over
# allocate/append/fork/free, prefix-cache hits, adapters and eviction order. No model, no tensors.
if(SERVELAB_BASE_ONLY)
  return()  # lives in servelab_core
endif()
servelab_add_qtest(test_block_manager
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_block_manager.cpp
  LIBS servelab_core TIMEOUT 300)
set_target_properties(test_block_manager PROPERTIES AUTOMOC ON)
