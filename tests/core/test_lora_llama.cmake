# LoRA on the Llama family: PEFT adapters on a tiny LlamaForCausalLM against peft's logits and
# greedy tokens (the Llama half of make_lora_fixtures.py's output, the lora_oracle fixture), mixed
# batches under every strategy, merging, adapters per request in continuous batching, random
# adapters from the projection table and the CLI's lora commands on a Llama folder.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_lora_llama
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora_llama.cpp
  LIBS servelab_core FIXTURES lora_oracle TIMEOUT 600)
set_target_properties(test_lora_llama PROPERTIES AUTOMOC ON)
set_property(TEST test_lora_llama APPEND PROPERTY ENVIRONMENT "SERVELAB_LORA_ORACLE_DIR=${CMAKE_BINARY_DIR}/lora_oracle")
target_compile_definitions(test_lora_llama PRIVATE SERVELAB_CLI="$<TARGET_FILE:servelab-cli>")
add_dependencies(test_lora_llama servelab-cli)
