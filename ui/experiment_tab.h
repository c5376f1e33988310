#pragma once
// What every experiment tab offers the main window: run and stop, its main chart for export, its
// parameters in QSettings, and its last result as JSON for scripts.
#include <QJsonObject>
#include <QMap>
#include <QSettings>
#include <QStringList>
#include <QWidget>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine_types.h"

class QHBoxLayout;
class QLabel;
class QPushButton;
class QTableWidget;

namespace servelab::ui {

class ChartView;
class EngineController;

// A result table as the session report shows it: the cells' text, the headers, and which columns
// hold numbers (right-aligned, as the tab shows them).
struct ReportTable {
  QString caption;
  QStringList headers;
  QVector<QStringList> rows;  // the first kReportRows of the table's rows
  QVector<bool> numeric;      // per column
  bool rowHeaders = false;    // the first column names the rows (the table's vertical header)
  int totalRows = 0;          // the rows the table had
  static constexpr int kReportRows = 40;
};

// What the session report keeps of a run beyond its settings: its summary as HTML fragments (as
// the tab shows it), its result tables, and the charts that show its results.
struct RunReport {
  QStringList html;
  QList<ReportTable> tables;
  QList<ChartView*> charts;
};

class ExperimentTab : public QWidget {
  Q_OBJECT
 public:
  ExperimentTab(EngineController* engine, QWidget* parent) : QWidget(parent), engine_(engine) {}

  // Stable id used by --tab and QSettings ("generate", "kv-cache", ...).
  virtual QString tabId() const = 0;
  virtual QString title() const = 0;
  // The chart that Export (Ctrl+E) and --export-chart save.
  virtual ChartView* primaryChart() const = 0;
  virtual QList<ChartView*> charts() const = 0;
  // Starts the tab's experiment with its current parameters; false (with a message emitted
  // through runFailed) when it cannot start.
  virtual bool run() = 0;
  // Named experiment presets (scripted mode's --preset): each sets the tab's controls for a
  // question and runs. None by default.
  virtual QStringList presetIds() const { return {}; }
  // Runs the preset; false (refusal() says why) when it is unknown or cannot start.
  virtual bool runPresetId(const QString& id) {
    return refuseRun(QStringLiteral("this tab has no preset \"%1\"").arg(id));
  }
  virtual void loadSettings(QSettings& settings) = 0;
  virtual void saveSettings(QSettings& settings) const = 0;
  virtual QJsonObject lastResult() const = 0;
  // Lessons (ui/lessons/): the named numbers of the tab's last finished run that a lesson's "what to
  // notice" line may quote, e.g. kv-cache's decode_speedup. resultValueNames() is the tab's whole,
  // fixed set (a lesson naming another is refused when it loads); resultValues() holds those the
  // last finished run produced: nothing before a run or while one is in progress, and only the
  // values of the kind of run that finished (a tab with several kinds of run clears each kind's
  // values when one of its kind starts).
  virtual QStringList resultValueNames() const { return {}; }
  virtual QMap<QString, double> resultValues() const { return {}; }
  // Model, device, dtype and threads for chart footnotes and captions.
  virtual void setModel(const ModelSummary& model) = 0;
  // What the session report keeps of the run that has just ended (read when it ends): by default
  // the charts that hold data, without text.
  virtual RunReport runReport() const;
  bool isRunning() const { return running_; }
  // Why the last run() returned false, in plain words (empty when the engine refused the job: the
  // controller's rejected() says why then).
  const QString& refusal() const { return refusal_; }

 Q_SIGNALS:
  // The run this tab started has ended: ok, or the reason it did not finish.
  void runFinished(bool ok, const QString& message);
  // A run has started, whatever started it (the session log reads the tab's settings then).
  void runBegan();
  // What the tab keeps (saveSettings) has changed in a way that should be saved now rather than
  // when the window closes, so that a crash does not lose it: a chat turn, for one.
  void saveRequested();

 protected:
  // The Run and Stop buttons every tab has, in a row; objectNames are <prefix>Run / <prefix>Stop.
  QHBoxLayout* makeRunButtons(const QString& prefix, const QString& runToolTip);
  // Bookkeeping shared by every tab when its run starts and ends.
  void runStarted();
  void runEnded(bool ok, const QString& message);

  // Records why run() cannot start and returns false, for `return refuseRun(...)`.
  bool refuseRun(const QString& why) {
    refusal_ = why;
    return false;
  }

  EngineController* engine_;
  bool running_ = false;
  QString refusal_;
  QPushButton* runButton_ = nullptr;
  QPushButton* stopButton_ = nullptr;
};

// A core result's JSON as a Qt object, for --report.
QJsonObject toQJsonObject(const nlohmann::json& json);

// The median of values (the mean of the middle two for an even count); 0 for none.
double medianValue(std::vector<double> values);

// "model · device dtype · N threads" under every chart.
QString chartFootnote(const ModelSummary& model);

// For runReport(): a label's text as an HTML fragment (empty when it is hidden or blank); a
// table's headers and cells (empty rows when it has none); the charts that hold data.
QString reportHtml(const QLabel* label);
ReportTable reportTable(const QTableWidget* table, const QString& caption);
QList<ChartView*> chartsWithData(const QList<ChartView*>& charts);

}  // namespace servelab::ui
