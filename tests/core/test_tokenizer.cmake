# Tokenizers (GPT-2 BPE against Hugging Face ids, stream decoder, SentencePiece); servelab_base only.
# SentencePiece's trainer library comes in directly: the test trains a tiny model to load.
servelab_add_qtest(test_tokenizer
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.cpp
  LIBS servelab_base PkgConfig::SENTENCEPIECE)
# The test class is a QObject declared in the .cpp (it includes test_tokenizer.moc).
set_target_properties(test_tokenizer PROPERTIES AUTOMOC ON)
if(NOT SERVELAB_BASE_ONLY)
  target_sources(test_tokenizer PRIVATE ${CMAKE_CURRENT_LIST_DIR}/torch_probe.cpp)
  target_link_libraries(test_tokenizer PRIVATE servelab_core)
  target_compile_definitions(test_tokenizer PRIVATE SERVELAB_TEST_WITH_TORCH)
endif()
