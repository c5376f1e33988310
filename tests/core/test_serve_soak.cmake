# The server under sustained load (tests/serve/soak.py): 160 requests from 32 connections, then
# 480 from 64, against --demo with peft-made adapters; every answer equal to its request alone,
# none lost, /metrics counting each, resident memory back near its level after the warm-up.
if(SERVELAB_BASE_ONLY)
  return()
endif()
add_test(NAME test_serve_soak
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/serve/soak.py" --cli "$<TARGET_FILE:servelab-cli>")
set_tests_properties(test_serve_soak PROPERTIES TIMEOUT 1200)
