// The Serving tab's saved runs: Save run writes the last run as servelab-cli loadgen --save-result
// does (load_report_json, indented); Open run reads such a file (or the tab's script --report) back
// as the current run; Compare with… draws a second run beside it. A file that is not a saved run is
// refused with the reason, and the runs shown stay as they were.
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QLabel>
#include <QPushButton>
#include <QSaveFile>
#include <QTabWidget>
#include <nlohmann/json.hpp>

#include "chart_view.h"
#include "serve/load_report_io.h"
#include "serving/load_result_charts.h"
#include "serving_tab.h"
#include "util/errors.h"

namespace servelab::ui {

namespace {

QString errorText(const QString& text) {
  return QStringLiteral("<span style='color:#c0392b'>%1</span>").arg(text.toHtmlEscaped());
}

const QString kRunFilter = QStringLiteral("Load runs (*.json);;All files (*)");

}  // namespace

QLayout* ServingTab::makeRunButtons() {
  runNote_ = new QLabel(tr("Save a run, reopen one, or compare two."), this);
  runNote_->setObjectName(QStringLiteral("servingRunNote"));
  runNote_->setWordWrap(true);
  runNote_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto button = [this](const QString& name, const QString& text, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(name);
    b->setToolTip(tip);
    return b;
  };
  auto* open = button(QStringLiteral("servingOpenRun"), tr("Open run…"),
                      tr("Reopen a saved load run (Save run, or servelab-cli loadgen --save-result)"));
  auto* save = button(QStringLiteral("servingSaveRun"), tr("Save run…"),
                      tr("Save the last run as servelab-cli loadgen --save-result does"));
  auto* compare = button(QStringLiteral("servingCompareRun"), tr("Compare with…"),
                         tr("Draw a saved run beside the current one"));
  auto* clear =
      button(QStringLiteral("servingClearCompare"), tr("Stop comparing"), tr("Draw the current run alone"));
  connect(open, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open a saved load run"), QString(), kRunFilter);
    if (!f.isEmpty()) openRun(f);
  });
  connect(compare, &QPushButton::clicked, this, [this] {
    const QString f =
        QFileDialog::getOpenFileName(this, tr("Compare with a saved load run"), QString(), kRunFilter);
    if (!f.isEmpty()) compareWith(f);
  });
  connect(save, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Save the load run"),
                                                   QStringLiteral("loadgen.json"), kRunFilter);
    if (!f.isEmpty()) saveRun(f);
  });
  connect(clear, &QPushButton::clicked, this, [this] { clearComparison(); });
  auto* grid = new QGridLayout;
  grid->addWidget(open, 0, 0);
  grid->addWidget(save, 0, 1);
  grid->addWidget(compare, 1, 0);
  grid->addWidget(clear, 1, 1);
  return grid;
}

QString ServingTab::runNote() const { return runNote_->text(); }

bool ServingTab::saveRun(const QString& path) {
  if (report_.scenario.empty()) {
    runNote_->setText(errorText(tr("No load run to save yet.")));
    return false;
  }
  if (loadRunning_) {
    runNote_->setText(errorText(tr("The load run is still going: save it when it has ended.")));
    return false;
  }
  QSaveFile f(path);
  const std::string text = nlohmann::json::parse(servelab::load_report_json(report_)).dump(2) + "\n";
  if (!f.open(QIODevice::WriteOnly) || f.write(text.data(), static_cast<qint64>(text.size())) < 0 ||
      !f.commit()) {
    runNote_->setText(errorText(tr("Cannot write %1: %2").arg(path, f.errorString())));
    return false;
  }
  runNote_->setText(tr("Saved to %1.").arg(path));
  return true;
}

bool ServingTab::openRun(const QString& path) {
  if (loadRunning_) {
    runNote_->setText(errorText(tr("A load run is in progress: open a saved one when it has ended.")));
    return false;
  }
  servelab::LoadReport r;
  try {
    r = servelab::read_load_report_file(path.toStdString());
  } catch (const servelab::InputError& e) {
    runNote_->setText(errorText(tr("Cannot open it: %1").arg(QString::fromUtf8(e.what()))));
    return false;
  }
  report_ = std::move(r);
  runName_ = QFileInfo(path).completeBaseName();
  int64_t failed = 0, total = 0;
  const QStringList lines = servelab::ui::runSummaryLines(report_, &failed, &total);
  loadSummary_->setText(tr("%1: %2 against %3 (%4%5), %6\n")
                            .arg(runName_, QString::fromStdString(report_.scenario),
                                 QString::fromStdString(report_.url), QString::fromStdString(report_.api),
                                 report_.model.empty()
                                     ? QString()
                                     : QStringLiteral(", ") + QString::fromStdString(report_.model),
                                 QString::fromStdString(report_.started_at)) +
                        lines.join(QLatin1Char('\n')));
  runNote_->setText(tr("Opened %1.").arg(path));
  drawRuns();
  views_->setCurrentIndex(1);
  return true;
}

bool ServingTab::compareWith(const QString& path) {
  servelab::LoadReport r;
  try {
    r = servelab::read_load_report_file(path.toStdString());
  } catch (const servelab::InputError& e) {
    runNote_->setText(errorText(tr("Cannot compare with it: %1").arg(QString::fromUtf8(e.what()))));
    return false;
  }
  compared_ = std::move(r);
  comparedName_ = QFileInfo(path).completeBaseName();
  if (runName_.isEmpty()) runName_ = tr("this run");
  if (comparedName_ == runName_) comparedName_ += tr(" (compared)");
  runNote_->setText(tr("Comparing %1 with %2 (%3 against %4).")
                        .arg(runName_, comparedName_, QString::fromStdString(compared_.scenario),
                             QString::fromStdString(compared_.url)));
  drawRuns();
  views_->setCurrentIndex(1);
  return true;
}

void ServingTab::clearComparison() {
  compared_ = servelab::LoadReport();
  comparedName_.clear();
  runNote_->setText(tr("Drawing %1 alone.").arg(runName_.isEmpty() ? tr("the current run") : runName_));
  drawRuns();
}

void ServingTab::drawRuns() {
  QVector<NamedRun> runs;
  const bool two = !comparedName_.isEmpty();
  if (!report_.scenario.empty()) runs.append({two ? runName_ : QString(), &report_});
  if (two) runs.append({comparedName_, &compared_});
  setupTtftDistribution(ttftDistChart_, runs);
  setupItlDistribution(itlDistChart_, runs);
  setupGoodput(goodputChart_, runs);
  // The load chart: the sweeps' latency against throughput, else the current run's per-token times.
  QVector<NamedRun> sweeps;
  for (const NamedRun& r : runs)
    if (r.report->scenario == "sweep") sweeps.append(r);
  if (!sweeps.isEmpty()) {
    setupLatencyThroughput(loadChart_, sweeps);
  } else if (!report_.scenario.empty()) {
    setupTokenTimes(loadChart_, QString::fromStdString(report_.scenario));
    for (const servelab::StreamTiming& s : report_.streams) addStreamTimes(loadChart_, s);
  }
}

}  // namespace servelab::ui
