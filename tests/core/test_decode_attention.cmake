# The CPU decode attention kernel (model/decode_attention) on every ISA, paged and dense layouts,
# against a softmax reference and libtorch's SDPA (libtorch).
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_decode_attention
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_attention.cpp
  LIBS servelab_core TIMEOUT 300)
set_target_properties(test_decode_attention PROPERTIES AUTOMOC ON)
