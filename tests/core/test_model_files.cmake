# Safetensors reader/writer and GPT-2 config.json parser (servelab_base only, no libtorch).
servelab_add_qtest(test_model_files
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_model_files.cpp
  LIBS servelab_base)
# The test class is a QObject declared in the .cpp (it includes test_model_files.moc).
set_target_properties(test_model_files PROPERTIES AUTOMOC ON)
