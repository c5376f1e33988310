#pragma once
// One load run of the Serving tab, as its suites run it: start it, wait for loadFinished.
#include <QSignalSpy>
#include <QString>

#include "serving_tab.h"

namespace servelab::ui::test {

// Whether the run ended well; *message is the tab's own message, or why the run did not start or end.
inline bool run_load(ServingTab& tab, int timeout_ms, QString* message) {
  QSignalSpy done(&tab, &ServingTab::loadFinished);
  if (!tab.startLoad()) {
    *message = QStringLiteral("the load run did not start");
    return false;
  }
  if (!done.wait(timeout_ms)) {
    *message = QStringLiteral("the load run did not end");
    return false;
  }
  *message = done.first().at(1).toString();
  return done.first().first().toBool();
}

}  // namespace servelab::ui::test
