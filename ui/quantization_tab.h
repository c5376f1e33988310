#pragma once
// Quantization (lesson 4 and beyond): every chosen mode measured against the fp32 weights it came
// from, on the loaded model. Memory per mode (stored and resident while running), the
// reconstruction error (histogram and per block), logit drift (KL, top-1 agreement), the greedy text
// beside fp32's with the differing tokens marked, and decode latency and batched throughput, all
// filled in live as each mode's result arrives.
#include <QStringList>
#include <QVector>

#include "experiment_tab.h"
#include "roofline_chart.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QSpinBox;
class QTabWidget;
class QTableWidget;
class QTextBrowser;

namespace servelab::ui {

class RunProgressBar;

// The positions where a mode's greedy token differs from fp32's (a token only one side has counts
// as differing).
QVector<int> differingPositions(const servelab::GreedyComparison& g);

// fp32's and the mode's greedy continuation of one prompt as HTML, token by token, every text
// escaped; the tokens at differingPositions() are spans of class "diff" (in both rows), the others
// of class "tok", each titled "token <position>: id <id>". Pieces are shown as they are given
// (readable tokens, a leading space as an open box turned back into a space).
QString greedyComparisonHtml(const servelab::GreedyComparison& g, const QString& mode, bool dark);

class QuantizationTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit QuantizationTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("quantization"); }
  QString title() const override { return tr("Quantization"); }
  // The memory chart: the lesson's headline (how much smaller each mode is, and that dequantizing
  // once gives the memory back while the model runs).
  ChartView* primaryChart() const override { return memoryChart_; }
  QList<ChartView*> charts() const override;
  bool run() override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // For tests and scripts. Mode names as quant_spec.h spells them ("zp-uint8", "int4-g32", ...);
  // "none" is the reference and always measured.
  void setModes(const QStringList& modes);
  QStringList modes() const;
  void setExec(const QString& exec);  // auto, dequant-once, jit, native
  QString exec() const;
  void setNewTokens(int n);
  void setRepeats(int n);
  void setMeasureSpeed(bool on);
  // What Run sends to the engine (decode and batch workloads at the core's defaults unless set).
  servelab::QuantizationParams params() const;
  void setSpeedWorkload(int decodeTokens, int batch, int batchTokens);

  bool hasResult() const { return hasResult_; }
  const servelab::QuantizationResult& result() const { return result_; }
  // The modes measured so far in this run (fp32 first), filled as they arrive.
  const QVector<servelab::QuantModeResult>& modeResults() const { return modes_; }
  // The mode whose errors and greedy text are shown (index into modeResults()).
  int detailMode() const;
  void showDetailMode(int index);
  QString summaryText() const;
  QString greedyHtml() const;

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void onPoint(const QString& series, double x, double y);
  void onMode(const servelab::QuantModeResult& mode);
  void onFinished(const servelab::QuantizationResult& result, const servelab::MachineLimits& limits);
  void onFailed(const QString& kind, const QString& message);
  // Redraws the memory and speed charts and the table from modes_ (categories from labels_).
  void drawMemory();
  void drawSpeed();
  void fillTable();
  void drawDetails();
  // The speed runs' decode steps (fp32's once, then each mode's) under the machine's roof.
  void drawRoofline(const servelab::MachineLimits& limits);
  void resetView();
  QStringList requestedModes() const;  // the checked modes in a fixed order, without "none"

  QCheckBox* zp_;
  QCheckBox* int8_;
  QCheckBox* int4_;
  QComboBox* group_;
  QCheckBox* fp16_;
  QCheckBox* bf16_;
  QComboBox* exec_;
  QSpinBox* newTokens_;
  QSpinBox* repeats_;
  QCheckBox* speed_;
  RunProgressBar* progress_;
  QLabel* summary_;
  QLabel* caveat_;
  ChartView* memoryChart_;
  ChartView* speedChart_;
  ChartView* histogramChart_;
  ChartView* blockChart_;
  // Every mode's batch-1 decode step and fp32's under this machine's roof.
  RooflineChart* rooflineChart_;
  QTableWidget* table_;
  QComboBox* detail_;
  QTabWidget* detailTabs_;
  QTextBrowser* greedy_;

  ModelSummary model_;
  servelab::QuantizationParams workload_;  // the decode and batch sizes of the speed measurement
  QStringList labels_;                     // the run's modes, fp32 first: the charts' categories
  QVector<servelab::QuantModeResult> modes_;
  QVector<double> liveDecodeMs_, liveTokensPerS_;  // speed points that came before their mode
  servelab::QuantizationResult result_;
  bool hasResult_ = false;
  QString lastError_;
};

}  // namespace servelab::ui
