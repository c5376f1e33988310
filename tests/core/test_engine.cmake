# The engine through its public API: demo model, generation, errors (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_engine
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine.cpp
  LIBS servelab_core TIMEOUT 900)
set_target_properties(test_engine PROPERTIES AUTOMOC ON)
