# The built-in adapters (docs/adapters.md, core/lora/builtin_adapters.h): the shipped PEFT folders
# load and describe on the built-in model, the course's NER sentence through predibase/conllpp gives
# the right JSON (greedy: deterministic) where the base model does not, and the prompt formats are
# the course's. Reads the built-in model as test_smollm2_oracle does; skips without it.
if(SERVELAB_BASE_ONLY)
  return()  # needs the engine
endif()
servelab_add_qtest(test_builtin_adapters
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_builtin_adapters.cpp
  LIBS servelab_core TIMEOUT 600)
set_target_properties(test_builtin_adapters PROPERTIES AUTOMOC ON)
