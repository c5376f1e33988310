#pragma once
// KV cache (lesson 1): the same tokens generated without and with the KV cache, per-token latency
// of both drawn live on one chart with the prefill step marked, the KV memory the cache holds,
// the steps of both ways on the roofline, and a summary of totals, speed-up and time to first token.
#include "experiment_tab.h"
#include "roofline_chart.h"

class QLineEdit;
class QSpinBox;
class QSlider;
class QCheckBox;
class QLabel;

namespace servelab::ui {

class RunProgressBar;

class KvCacheTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit KvCacheTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("kv-cache"); }
  QString title() const override { return tr("KV cache"); }
  ChartView* primaryChart() const override { return latencyChart_; }
  QList<ChartView*> charts() const override { return {latencyChart_, memoryChart_, rooflineChart_}; }
  bool run() override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // For tests and scripts.
  void setPrompt(const QString& prompt);
  void setNewTokens(int n);
  void setRepeats(int n);
  void setPromptTokens(int n);  // 0: the prompt as typed
  bool hasResult() const { return hasResult_; }
  const servelab::KvCacheTimingResult& result() const { return result_; }
  QString summaryText() const;

 private:
  void onPoint(const QString& series, double x, double y);
  void onReset(const QString& series);
  void onFinished(const servelab::KvCacheTimingResult& result, const servelab::MachineLimits& limits);
  void onFailed(const QString& kind, const QString& message);
  void updatePromptLengthEnabled();

  QLineEdit* prompt_;
  QCheckBox* repeatPrompt_;
  QSlider* promptTokens_;
  QSpinBox* promptTokensSpin_;
  QSpinBox* newTokens_;
  QSpinBox* repeats_;
  RunProgressBar* progress_;
  QLabel* summary_;
  ChartView* latencyChart_;
  ChartView* memoryChart_;
  // Beside the memory chart: the prefill, the cached and the recomputing steps under this machine's roof.
  RooflineChart* rooflineChart_;

  ModelSummary model_;
  servelab::KvCacheTimingResult result_;
  bool hasResult_ = false;
  qint64 promptLength_ = 0;
  QString lastError_;
};

}  // namespace servelab::ui
