# FLOPs and bytes of a forward pass (model/step_cost) against hand-computed values for GPT-2
# small's and SmolLM2-135M's shapes. Torch-free: it links servelab_base only.
servelab_add_qtest(test_step_cost
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_step_cost.cpp
  LIBS servelab_base TIMEOUT 60)
set_target_properties(test_step_cost PROPERTIES AUTOMOC ON)
