# Paged KV memory and prefix caching through the scheduler: tokens equal solo runs and slot KV,
# logits equal a full forward, preemption under small budgets, prefix hits, adapters (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_paged_kv
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_paged_kv.cpp
  LIBS servelab_core TIMEOUT 900)
set_target_properties(test_paged_kv PROPERTIES AUTOMOC ON)
target_compile_definitions(test_paged_kv PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_paged_kv servelab-cli)
