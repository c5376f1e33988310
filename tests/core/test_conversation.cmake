# Multi-turn chat without a model (generate/conversation): a byte-per-token tokenizer with SmolLM2's
# chat template; the server's chat formatting, the context policy, OpenAI-messages and Markdown
# export, and malformed conversations refused by name.
if(SERVELAB_BASE_ONLY)
  return()  # lives in servelab_core
endif()
servelab_add_qtest(test_conversation
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_conversation.cpp
  LIBS servelab_serve servelab_core TIMEOUT 300)
set_target_properties(test_conversation PROPERTIES AUTOMOC ON)
