#pragma once
// Speculative decoding (issue 32): a drafter (prompt lookup, or a cheaper copy of the model)
// proposes k tokens, the model verifies them in one forward and keeps the longest agreeing prefix
// plus one token of its own. The tab shows each step's proposals live (accepted, rejected, the
// target's own token), the accepted length per step, tokens/s against plain decoding of the same
// prompt, where the time went (draft, verify), and a sweep of k.
#include <QStringList>

#include "experiment_tab.h"
#include "roofline_chart.h"

class QComboBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace servelab::ui {

class EngineJob;
class RunProgressBar;
class SpecTextView;

class SpeculativeTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit SpeculativeTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("speculative"); }
  QString title() const override { return tr("Speculative decoding"); }
  ChartView* primaryChart() const override { return acceptedChart_; }
  QList<ChartView*> charts() const override {
    return {acceptedChart_, throughputChart_, speedupChart_, timeChart_, rooflineChart_};
  }
  // The prompt decoded with speculation (live), then plainly for comparison.
  bool run() override;
  // The k sweep: plain decoding against the drafter at k = 1, 2, 4, 8 on the prompt.
  bool runSweep();
  // "grounded", "open", "draft": a prompt and drafter set, the live run, then the k sweep.
  QStringList presetIds() const override;
  bool runPresetId(const QString& id) override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // For tests and scripts.
  void setPrompt(const QString& prompt);
  QString prompt() const;
  void setMethod(servelab::SpeculativeMethod method);
  void setK(int k);
  void setNewTokens(int n);
  void setSweepKs(const QVector<int>& ks);
  servelab::SpeculativeDemoParams params() const;
  bool hasResult() const { return hasResult_; }
  const servelab::SpeculativeDemoResult& result() const { return result_; }
  bool hasSweep() const { return hasSweep_; }
  const servelab::SpeculativeBenchResult& sweep() const { return sweep_; }
  const SpecTextView& textView() const { return *text_; }
  QString summaryText() const;
  // The preset prompts: input-grounded ones (prompt lookup's best case), then open-ended ones.
  static QStringList groundedPrompts();
  static QStringList openPrompts();

 protected:
  void changeEvent(QEvent* event) override;

 private:
  enum class Job { None, Demo, Sweep };
  bool startDemo(bool sweepAfter);
  bool startSweep(bool chained);
  void follow(EngineJob* job);
  void onStep(const SpecStepInfo& step);
  void onDemoFinished(const servelab::SpeculativeDemoResult& result, const servelab::MachineLimits& limits);
  void onSweepFinished(const servelab::SpeculativeBenchResult& result);
  void onFailed(const QString& kind, const QString& message);
  void finish(bool ok, const QString& message);
  void applyPresetPrompt(int index);
  QString demoSummary(const servelab::SpeculativeDemoResult& r) const;

  QComboBox* presets_;
  QPlainTextEdit* prompt_;
  QComboBox* method_;
  QSpinBox* k_;
  QSpinBox* newTokens_;
  QPushButton* sweepButton_;
  RunProgressBar* progress_;
  QLabel* summary_;
  QLabel* legend_ = nullptr;
  SpecTextView* text_;
  ChartView* acceptedChart_;
  ChartView* throughputChart_;
  ChartView* speedupChart_;
  ChartView* timeChart_;
  // A page beside the four charts: plain decode steps and verify steps under this machine's roof.
  RooflineChart* rooflineChart_;

  ModelSummary model_;
  Job job_ = Job::None;
  bool sweepAfter_ = false;
  QVector<int> sweepKs_{1, 2, 4, 8};
  // Live: decode tokens and time after the first step, for the tokens/s curve.
  qint64 liveTokens_ = 0;
  double liveMs_ = 0;
  servelab::SpeculativeDemoResult result_;
  bool hasResult_ = false;
  servelab::SpeculativeBenchResult sweep_;
  bool hasSweep_ = false;
  QString lastError_;
};

}  // namespace servelab::ui
