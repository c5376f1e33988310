# servelab-cli serve against real clients (tests/serve/test_serve.py): the course's lesson-7 code on
# PyPI's lorax-client, the openai client, greedy parity of 40 concurrent requests with their solo
# runs, bad input, queue full, disconnects and SIGTERM. Python from the project venv, servers on
# 127.0.0.1 only.
if(SERVELAB_BASE_ONLY)
  return()  # needs the engine
endif()
add_test(NAME test_serve
  COMMAND "${SERVELAB_PYTHON}" "${CMAKE_SOURCE_DIR}/tests/serve/test_serve.py" --cli "$<TARGET_FILE:servelab-cli>" -v)
# 220-380 s on 2 cores (the 64-connection burst and the first-request wait included); the limit
# only stops a hang.
set_tests_properties(test_serve PROPERTIES TIMEOUT 900)
