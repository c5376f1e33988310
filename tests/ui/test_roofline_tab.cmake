# The Roofline tab on the offscreen platform (the tiny test model): the roof drawn from the measured
# limits, each step a point at its intensity and FLOP/s named by the hover readout, the limits
# cached, bad sizes refused, settings.
servelab_add_qtest(test_roofline_tab
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_roofline_tab.cpp
  LIBS servelab_ui Qt6::Widgets TIMEOUT 600)
set_target_properties(test_roofline_tab PROPERTIES AUTOMOC ON)
