# The scheduler's decisions alone (generate/scheduler_core) over the paged block manager: token
# budgets, chunked prefill, preemption, prefix caching never offering unwritten positions. No model.
if(SERVELAB_BASE_ONLY)
  return()  # lives in servelab_core
endif()
servelab_add_qtest(test_scheduler_core
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scheduler_core.cpp
  LIBS servelab_core TIMEOUT 300)
set_target_properties(test_scheduler_core PROPERTIES AUTOMOC ON)
