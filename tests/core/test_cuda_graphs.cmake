# CUDA graphs for decode steps: buckets, reasons and the eager step everywhere; replay against
# eager decode (slot KV, continuous batching, generate) on a GPU, skipped elsewhere (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_cuda_graphs
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cuda_graphs.cpp
  LIBS servelab_core TIMEOUT 600)
set_target_properties(test_cuda_graphs PROPERTIES AUTOMOC ON)
