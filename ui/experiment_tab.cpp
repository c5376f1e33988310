#include "experiment_tab.h"

namespace servelab::ui {

QString chartFootnote(const ModelSummary& m) {
  if (!m.valid()) return {};
  return QStringLiteral("%1 · %2 %3 · %4 threads")
      .arg(m.demo ? QStringLiteral("built-in model (random weights)") : m.name, m.device, m.dtype)
      .arg(m.threads);
}

}  // namespace servelab::ui
