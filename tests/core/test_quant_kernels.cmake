# The quantized compute: JIT = dequantize-once for every scheme; the fused, GEMV, int8-activation,
# fp32 and blocked kernels under each ISA against dequantize-once or at::mm/addmm; native kernels;
# Llama quantized in every mode; quantized models generating and the engine's options (libtorch).
# Shares quant_fixture.h with test_quant.
if(SERVELAB_BASE_ONLY)
  return()  # needs libtorch
endif()
servelab_add_qtest(test_quant_kernels
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant_kernels.cpp
  LIBS servelab_core TIMEOUT 600)
set_target_properties(test_quant_kernels PROPERTIES AUTOMOC ON)
