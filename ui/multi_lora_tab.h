#pragma once
// Multi-LoRA (lessons 5 and 6 and beyond): the LoRA arithmetic of one matrix made visible, a list
// of adapters (PEFT folders or seeded random ones), a batch whose rows use different adapters timed
// with the course's loop, the course's gathered matmul and segmented (SGMV) products against the base
// model, the same prompt's text through every adapter, and a queue served by continuous batching
// with an adapter per request and a bounded adapter cache.
//
// The tab is made of small widgets (ui/multi_lora/): AdapterList, LoraMathPanel, BatchComposer and
// AdapterServingPage; it owns the strategy sweep and its result views, and forwards the pieces'
// setters so that scripts and tests drive the tab as one.
#include <QMap>
#include <QStringList>
#include <QVector>
#include <optional>

#include "experiment_tab.h"
#include "multi_lora/lora_math_panel.h"

class QLabel;
class QTabWidget;
class QTableWidget;
class QSplitter;
class QTextBrowser;

namespace servelab::ui {

class AdapterList;
class AdapterServingPage;
class BatchComposer;
class RunProgressBar;

class MultiLoraTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit MultiLoraTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("multi-lora"); }
  QString title() const override { return tr("Multi-LoRA"); }
  // The chart of the view in front: decode-step latency per strategy against batch size (the
  // lesson's headline), or the adapter cache over the serving run's steps.
  ChartView* primaryChart() const override;
  QList<ChartView*> charts() const override;
  // Runs what the view in front shows: the strategy sweep, or serving the queue with adapters.
  bool run() override;
  bool runSweep();
  bool serve();
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // Views: "strategies" (the sweep, its outputs) or "serve" (continuous batching with adapters).
  void showView(const QString& view);
  QString currentView() const;

  // The math panel (LoraMathPanel).
  void setMathModule(const QString& module);
  void setMathRank(int rank);
  void setMathAlpha(double alpha);
  LoraMath math() const;
  QString mathText() const;

  // The adapter list (AdapterList).
  void loadPeftFolder(const QString& dir);
  void addRandomAdapters(int rank, double alpha, int count);
  void removeAdapter(int row);
  void clearAdapters();
  int adapterCount() const;
  QVector<servelab::AdapterSource> adapterSources() const;
  std::optional<servelab::AdapterInfo> adapterInfo(int row) const;
  int pendingAdapters() const;
  QString adapterError() const;

  // The batch composer (BatchComposer) and the sweep.
  void setWorkload(const QString& workload);
  void setAssignment(const QString& assignment);
  void setSharedAdapters(int n);
  void setRowAdapters(const QStringList& names);
  QStringList rowAdapters() const;
  void setBatchSizes(const QString& sizes);
  QVector<qint64> batchSizes(QString* error = nullptr) const;
  void setStrategies(const QStringList& strategies);
  QStringList strategies() const;
  void setRandomAdapters(int count, int rank);
  void setContext(int tokens);
  void setDecodeSteps(int steps);
  void setRepeats(int repeats);
  void setToySamples(int samples);
  void setPrompt(const QString& prompt);
  void setNewTokens(int n);
  servelab::MultiLoraParams params() const;

  // Serving with adapters (AdapterServingPage).
  void setServeRequests(int n);
  void setServeMaxBatch(int n);
  void setServeNewTokens(int n);
  void setCacheCapacity(int n);
  void setServeStrategy(const QString& strategy);
  servelab::AdapterServingParams serveParams() const;

  bool hasResult() const { return hasResult_; }
  const servelab::MultiLoraResult& result() const { return result_; }
  bool hasServeResult() const;
  const servelab::BatchRunResult& serveResult() const;
  const servelab::AdapterCacheStats& liveCache() const;
  QString summaryText() const;
  QString agreementText() const;
  QString outputsHtml() const;
  QString serveSummaryText() const;

 Q_SIGNALS:
  // The adapter list changed, or an adapter was refused (adapterError() says why).
  void adaptersChanged();

 protected:
  void changeEvent(QEvent* event) override;

 private:
  QWidget* buildSweepBox();
  QWidget* buildStrategiesPage();

  void startRun();
  void endRun(bool ok, const QString& message);
  void onPoint(const QString& series, double x, double y);
  void onReset(const QString& series);
  void onFinished(const servelab::MultiLoraResult& result);
  void onFailed(const QString& kind, const QString& message);
  void drawLive();
  void fillPointsTable(const servelab::MultiLoraResult& r);
  void fillShapes(const servelab::MultiLoraResult& r);
  void drawOutputs();
  void setAgreement(const servelab::MultiLoraResult& r);

  AdapterList* adapters_;
  LoraMathPanel* math_;
  BatchComposer* composer_;
  AdapterServingPage* serving_;
  RunProgressBar* progress_;
  QLabel* summary_;
  QLabel* agreement_;
  QTabWidget* views_;
  ChartView* latencyChart_;
  ChartView* ratioChart_;
  QTabWidget* detailTabs_;
  QSplitter* chartsSplit_ = nullptr;  // the charts over the detail tabs
  QLabel* caveat_;
  QTextBrowser* outputs_;
  QTableWidget* pointsTable_;
  QTableWidget* shapesTable_;

  ModelSummary model_;
  // Live medians per series ("base", "loop", ...) and batch size.
  QMap<QString, QMap<qint64, double>> live_;
  servelab::MultiLoraParams runParams_;  // what the sweep in progress (or the last one) asked for
  bool liveToy_ = false;
  QString resultPrompt_;  // the prompt of the run whose outputs are shown
  servelab::MultiLoraResult result_;
  bool hasResult_ = false;
  QString lastError_;
};

}  // namespace servelab::ui
