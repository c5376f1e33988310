# The model catalog (issue 35): a Hugging Face cache, LM Studio, Ollama and a user's folder built in a
# temporary folder (model_catalog_tree.h), every field of every entry, "why not" against loading.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch (the loads it compares with)
endif()
servelab_add_qtest(test_model_catalog SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_catalog.cpp
  LIBS servelab_core TIMEOUT 300)
set_target_properties(test_model_catalog PROPERTIES AUTOMOC ON)
