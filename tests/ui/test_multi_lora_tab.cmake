# The Multi-LoRA tab on the offscreen platform (the built-in model): the LoRA arithmetic panel
# against hand-computed ratios, the adapter list (random adapters, adapters peft wrote, refused
# PEFT folders), the strategy sweep on the course's toy model and on GPT-2 against its result, the
# text per adapter, Stop, serving with per-request adapters and a one-adapter cache, settings and
# the scripted mode.
servelab_add_qtest(test_multi_lora_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_multi_lora_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 900 FIXTURES lora_oracle)
# Adapter folders written by peft itself (tests/core/test_lora.cmake's fixture).
set_property(TEST test_multi_lora_tab APPEND PROPERTY ENVIRONMENT
  "SERVELAB_LORA_ORACLE_DIR=${CMAKE_BINARY_DIR}/lora_oracle")
set_target_properties(test_multi_lora_tab PROPERTIES AUTOMOC ON)
target_compile_definitions(test_multi_lora_tab PRIVATE SERVELAB_GUI="$<TARGET_FILE:servelab>")
add_dependencies(test_multi_lora_tab servelab)
