# Tokenizers (GPT-2 BPE against Hugging Face ids, stream decoder, SentencePiece); servelab_base only.
# SentencePiece's trainer library comes in directly: the test trains a tiny model to load.
servelab_add_qtest(test_tokenizer
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.cpp
  LIBS servelab_base PkgConfig::SENTENCEPIECE)
# The test class is a QObject declared in the .cpp (it includes test_tokenizer.moc).
set_target_properties(test_tokenizer PROPERTIES AUTOMOC ON)
