# The OpenAI routes' request fields without a model (serve/openai_fields, serve/request_parser):
# every field OpenAI or vLLM defines that the server does not implement is refused by name unless
# set to its no-op value, fields neither defines are ignored, guided_json is a JSON Schema, and
# docs/serving.md lists every refused field.
if(SERVELAB_BASE_ONLY)
  return()  # lives in servelab_serve
endif()
servelab_add_qtest(test_openai_fields
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_openai_fields.cpp
  LIBS servelab_serve servelab_core TIMEOUT 120)
set_target_properties(test_openai_fields PROPERTIES AUTOMOC ON)
target_compile_definitions(test_openai_fields PRIVATE SERVELAB_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
