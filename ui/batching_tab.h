#pragma once
// Batching (lesson 2): how a static batch is built from prompts of different lengths (the padded
// input_ids, attention_mask and position_ids, refreshed as the prompts change), and a sweep of
// batch sizes that draws throughput and latency per step live on one chart.
#include <QVector>

#include "experiment_tab.h"
#include "roofline_chart.h"

class QLineEdit;
class QPlainTextEdit;
class QSpinBox;
class QLabel;
class QScrollArea;
class QTableWidget;
class QTimer;

namespace servelab::ui {

class RunProgressBar;

class BatchingTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit BatchingTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("batching"); }
  QString title() const override { return tr("Batching"); }
  ChartView* primaryChart() const override { return chart_; }
  QList<ChartView*> charts() const override { return {chart_, rooflineChart_}; }
  bool run() override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // For tests and scripts.
  QStringList prompts() const;  // the editor's non-blank lines
  void setPrompts(const QStringList& prompts);
  void setBatchSizes(const QString& sizes);  // "1,2,4"
  void setNewTokens(int n);
  void setRepeats(int n);
  // The batch sizes typed, or an empty list with *error set when they are not valid.
  QVector<qint64> batchSizes(QString* error = nullptr) const;
  bool hasPadded() const { return hasPadded_; }
  const servelab::PaddedPrompts& padded() const { return padded_; }
  QString padError() const { return padError_; }
  bool hasResult() const { return hasResult_; }
  const servelab::BatchSweepResult& result() const { return result_; }
  QString summaryText() const;
  // Pads the editor's prompts again now (the editor does it by itself a moment after a change).
  void refreshPadding();

 Q_SIGNALS:
  // The tensor tables show the editor's current prompts (or why they cannot).
  void paddingUpdated();

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void onPadded(quint64 ticket, const servelab::PaddedPrompts& padded, const QString& error);
  void fillTables();
  void fillTable(QTableWidget* table, const std::vector<std::vector<int64_t>>& values);
  void onPoint(const QString& series, double x, double y);
  void onFinished(const servelab::BatchSweepResult& result, const servelab::MachineLimits& limits);
  void onFailed(const QString& kind, const QString& message);
  void validateSizes();

  QPlainTextEdit* prompts_;
  QTimer* padTimer_;
  QTableWidget* inputIds_;
  QTableWidget* attentionMask_;
  QTableWidget* positionIds_;
  QScrollArea* tensorScroll_;
  QLabel* padStatus_;
  QLineEdit* sizes_;
  QSpinBox* newTokens_;
  QSpinBox* repeats_;
  RunProgressBar* progress_;
  QLabel* summary_;
  ChartView* chart_;
  // Behind the sweep's chart: each batch size's prefill and decode steps under this machine's roof.
  RooflineChart* rooflineChart_;
  QTableWidget* points_;

  ModelSummary model_;
  quint64 padTicket_ = 0;
  servelab::PaddedPrompts padded_;
  bool hasPadded_ = false;
  QString padError_;
  servelab::BatchSweepResult result_;
  bool hasResult_ = false;
  QString lastError_;
};

}  // namespace servelab::ui
