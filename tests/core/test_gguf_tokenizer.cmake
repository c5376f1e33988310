# A GGUF file's SentencePiece vocabulary: trained by SentencePiece's trainer, written into crafted
# GGUF files, loaded by our GGUF tokenizer against libsentencepiece; inconsistent vocabularies
# refused (servelab_base only, no libtorch).
servelab_add_qtest(test_gguf_tokenizer
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf_tokenizer.cpp
  LIBS servelab_base PkgConfig::SENTENCEPIECE)
set_target_properties(test_gguf_tokenizer PROPERTIES AUTOMOC ON)
