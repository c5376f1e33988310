#include "experiment_tab.h"

#include <QHBoxLayout>
#include <QJsonDocument>
#include <QPushButton>
#include <algorithm>

#include "engine_controller.h"

namespace servelab::ui {

QString chartFootnote(const ModelSummary& m) {
  if (!m.valid()) return {};
  return QStringLiteral("%1 · %2 %3 · %4 threads")
      .arg(m.demo ? QStringLiteral("built-in model (random weights)") : m.name, m.device, m.dtype)
      .arg(m.threads);
}

double medianValue(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

QJsonObject toQJsonObject(const nlohmann::json& json) {
  return QJsonDocument::fromJson(QByteArray::fromStdString(json.dump())).object();
}

QHBoxLayout* ExperimentTab::makeRunButtons(const QString& prefix, const QString& runToolTip) {
  runButton_ = new QPushButton(tr("Run"), this);
  runButton_->setObjectName(prefix + QStringLiteral("Run"));
  runButton_->setToolTip(runToolTip);
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setObjectName(prefix + QStringLiteral("Stop"));
  stopButton_->setToolTip(tr("Stop before the engine's next step (Esc)"));
  stopButton_->setEnabled(false);
  connect(runButton_, &QPushButton::clicked, this, [this] { run(); });
  connect(stopButton_, &QPushButton::clicked, engine_, &EngineController::stop);
  auto* row = new QHBoxLayout;
  row->addWidget(runButton_);
  row->addWidget(stopButton_);
  return row;
}

void ExperimentTab::runStarted() {
  running_ = true;
  runButton_->setEnabled(false);
  stopButton_->setEnabled(true);
}

void ExperimentTab::runEnded(bool ok, const QString& message) {
  running_ = false;
  runButton_->setEnabled(true);
  stopButton_->setEnabled(false);
  Q_EMIT runFinished(ok, message);
}

}  // namespace servelab::ui
