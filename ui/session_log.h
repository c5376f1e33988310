#pragma once
// The session's runs as the session report tells them (File → Export report…, --report x.html or
// x.pdf): for each run of any tab, in the order they ran, what it was asked when it began (the
// tab's settings as saved, the model) and what it showed when it ended (its summary, tables and
// charts, kept as SVG and as a recorded drawing, so that a later run of the tab does not replace
// them).
#include <QDateTime>
#include <QHash>
#include <QList>
#include <QObject>
#include <QString>
#include <QTemporaryDir>
#include <memory>

#include "chart_view.h"
#include "engine_types.h"
#include "experiment_tab.h"

namespace servelab::ui {

class EngineController;

struct RunRecord {
  int number = 0;  // 1, 2, ... in the order the runs began
  QString tabId, title;
  QDateTime started, finished;
  bool ok = true;
  QString message;  // why it did not finish (stopped, failed), empty when it did
  ModelSummary model;
  Facts settings;  // the tab's settings as saved, keys without the tab's group ("newTokens")
  QStringList html;
  QList<ReportTable> tables;
  QList<ChartView::Snapshot> charts;
};

class SessionLog : public QObject {
  Q_OBJECT
 public:
  explicit SessionLog(EngineController* engine, QObject* parent = nullptr);
  ~SessionLog() override;

  // Records the tab's runs from now on (its runBegan and runFinished).
  void watch(ExperimentTab* tab);
  // The runs that have ended, in the order they began.
  const QList<RunRecord>& runs() const { return runs_; }
  QDateTime started() const { return started_; }

  // The settings a tab saves, read back as text: keys without the tab's group, lists joined with
  // ", ", in the order QSettings lists them.
  Facts settingsOf(const ExperimentTab& tab) const;

 Q_SIGNALS:
  void recorded(int index);

 private:
  void begin(ExperimentTab* tab);
  void end(ExperimentTab* tab, bool ok, const QString& message);

  EngineController* engine_;
  QDateTime started_;
  // settingsOf() saves the tab's settings to a file there (made when first needed) and reads them back.
  mutable std::unique_ptr<QTemporaryDir> scratch_;
  int begun_ = 0;
  QHash<ExperimentTab*, RunRecord> open_;  // runs that have begun and not ended
  QList<RunRecord> runs_;
};

// "maxNumBatchedTokens" -> "max num batched tokens", "adapters/1/name" -> "adapters 1 name", with
// the acronyms the settings use in capitals (KV, MB, API, URL, EOS, PEFT, LoRA).
QString settingLabel(const QString& key);

}  // namespace servelab::ui
