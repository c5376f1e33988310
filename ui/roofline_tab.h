#pragma once
// Roofline: why the other tabs' charts look as they do, in one picture. This machine's measured
// limits (read bandwidth with the engine's threads, peak fp32 FLOP/s) as a slope and a roof on a
// log-log chart of arithmetic intensity (FLOP per byte moved) against achieved FLOP/s, the ridge
// point where they meet marked, and a short workload's steps on the loaded model as points:
// decode sits on the slope (memory-bound), prefill climbs towards the roof (compute-bound).
#include "experiment_tab.h"
#include "experiments/roofline.h"
#include "roofline_chart.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace servelab::ui {

class RunProgressBar;

class RooflineTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit RooflineTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("roofline"); }
  QString title() const override { return tr("Roofline"); }
  ChartView* primaryChart() const override { return chart_; }
  QList<ChartView*> charts() const override { return {chart_}; }
  bool run() override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // For tests and scripts.
  void setWorkload(const QString& prefillLengths, const QString& decodeBatches, int decodeContext,
                   int decodeSteps);
  void setRemeasure(bool on);
  // The machine-limits cache (default: machine_limits.json in the app's cache folder).
  void setLimitsCachePath(const QString& path) { cachePath_ = path; }
  QString limitsCachePath() const { return cachePath_; }
  bool hasResult() const { return hasResult_; }
  const servelab::RooflineResult& result() const { return result_; }
  QString summaryText() const;
  // This machine's limits as the probe measured them: this session's last run's, else the cache's
  // when it describes the loaded model's machine (CPU, ISA, device, threads); empty when neither.
  Facts measuredLimits() const;
  // The chart's series a step is drawn in: its kind, and its quantization when the weights are
  // quantized ("decode batch 8", "prefill · int8-channel").
  static QString seriesFor(const servelab::RooflinePoint& point);
  static QString roofSeriesName();
  static QString int8RoofSeriesName();

 private:
  void onPoint(const QString& label, double intensity, double flopPerSecond);
  void onFinished(const servelab::RooflineResult& result);
  void onFailed(const QString& kind, const QString& message);

  QLineEdit* prefillLengths_;
  QLineEdit* decodeBatches_;
  QSpinBox* decodeContext_;
  QSpinBox* decodeSteps_;
  QCheckBox* remeasure_;
  RunProgressBar* progress_;
  QLabel* machine_;
  QLabel* summary_;
  RooflineChart* chart_;

  ModelSummary model_;
  QString cachePath_;
  QString quant_ = QStringLiteral("none");  // of the run in progress
  servelab::RooflineResult result_;
  bool hasResult_ = false;
  QString lastError_;
};

}  // namespace servelab::ui
