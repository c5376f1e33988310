#pragma once
// Multi-LoRA (lessons 5 and 6 and beyond): the LoRA arithmetic of one matrix made visible, a list
// of adapters (PEFT folders or seeded random ones), a batch whose rows use different adapters timed
// with the seed's loop, the seed's gathered matmul and segmented (SGMV) products against the base
// model, the same prompt's text through every adapter, and a queue served by continuous batching
// with an adapter per request and a bounded adapter cache.
#include <QMap>
#include <QStringList>
#include <QVector>
#include <optional>

#include "experiment_tab.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableWidget;
class QTextBrowser;

namespace servelab::ui {

// The LoRA arithmetic of one in x out matrix at rank r: |W| = in * out, |A| + |B| = r * (in + out).
struct LoraMath {
  qint64 in = 0, out = 0, rank = 0;
  qint64 wParameters() const { return in * out; }
  qint64 abParameters() const { return rank * (in + out); }
  double ratio() const {
    return wParameters() > 0 ? static_cast<double>(abParameters()) / static_cast<double>(wParameters()) : 0;
  }
};

// A parameter ratio as a percentage: "0.39%", "1.39%", "0.049%".
QString loraPercent(double ratio);

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
  void setModel(const ModelSummary& model) override;

  // Views: "strategies" (the sweep, its outputs) or "serve" (continuous batching with adapters).
  void showView(const QString& view);
  QString currentView() const;

  // The math panel. module: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj, or "seed-1024" (the
  // seed's example, a 1024 x 1024 matrix).
  void setMathModule(const QString& module);
  void setMathRank(int rank);
  void setMathAlpha(double alpha);
  LoraMath math() const;
  QString mathText() const;  // the panel as plain text

  // The adapter list. Adapters join once the engine has described them (a PEFT folder that cannot
  // be read is refused with the engine's message and the list stays as it was).
  void loadPeftFolder(const QString& dir);
  void addRandomAdapters(int rank, double alpha, int count);
  void removeAdapter(int row);
  void clearAdapters();
  int adapterCount() const { return static_cast<int>(entries_.size()); }
  QVector<servelab::AdapterSource> adapterSources() const;
  // The description of row's adapter (empty while it is being described or when it failed).
  std::optional<servelab::AdapterInfo> adapterInfo(int row) const;
  int pendingAdapters() const { return static_cast<int>(pending_.size()); }
  QString adapterError() const;  // the adapter list's error area (empty when hidden)

  // The batch composer and the sweep.
  void setWorkload(const QString& workload);      // gpt2, toy
  void setAssignment(const QString& assignment);  // distinct, shared, mixed, rows
  void setSharedAdapters(int n);
  void setRowAdapters(const QStringList& names);  // for "rows": an adapter name or "" per row
  QStringList rowAdapters() const;
  void setBatchSizes(const QString& sizes);  // "1,2,4"
  QVector<qint64> batchSizes(QString* error = nullptr) const;
  void setStrategies(const QStringList& strategies);
  QStringList strategies() const;
  void setRandomAdapters(int count, int rank);  // what the experiment makes when the list is empty
  void setContext(int tokens);
  void setDecodeSteps(int steps);
  void setRepeats(int repeats);
  void setToySamples(int samples);
  void setPrompt(const QString& prompt);
  void setNewTokens(int n);
  servelab::MultiLoraParams params() const;

  // Serving with adapters.
  void setServeRequests(int n);
  void setServeMaxBatch(int n);
  void setServeNewTokens(int n);
  void setCacheCapacity(int n);  // 0: every adapter stays loaded
  void setServeStrategy(const QString& strategy);
  AdapterServeParams serveParams() const;

  bool hasResult() const { return hasResult_; }
  const servelab::MultiLoraResult& result() const { return result_; }
  bool hasServeResult() const { return hasServeResult_; }
  const servelab::BatchRunResult& serveResult() const { return serveResult_; }
  // The adapter-cache counters as last reported (live during a serve run).
  const servelab::AdapterCacheStats& liveCache() const { return liveCache_; }
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
  enum class Job { None, Sweep, Serve };
  struct Entry {
    int id = 0;
    servelab::AdapterSource source;
    std::optional<servelab::AdapterInfo> info;
    QString error;  // it no longer fits the loaded model
  };
  struct Pending {
    bool refresh = false;  // an entry described again for a new model (id), else a new adapter
    int id = 0;
    servelab::AdapterSource source;
  };

  QWidget* buildAdapterBox();
  QWidget* buildMathBox();
  QWidget* buildComposer();
  QWidget* buildStrategiesPage();
  QWidget* buildServePage();

  bool startJob(Job job);
  void finishJob(bool ok, const QString& message);
  void onPoint(const QString& series, double x, double y);
  void onReset(const QString& series);
  void onFinished(const servelab::MultiLoraResult& result);
  void onFailed(const QString& kind, const QString& message);
  void onDescribed(quint64 ticket, const servelab::AdapterInfo& info, const QString& error);
  void resetCacheChart();
  void onServeStarted(qint64 requests, qint64 slots);
  void onServeAdmitted(qint64 request, qint64 slot, qint64 step);
  void onServeRetired(const servelab::RequestResult& request);
  void onServeStep(const servelab::BatchStep& step);
  void onServeFinished(const servelab::BatchRunResult& result);

  void requestDescription(const servelab::AdapterSource& source, bool refresh, int id);
  void describeAll();
  void fillAdapterTable();
  void showAdapterError(const QString& message);
  QStringList adapterNames() const;  // listed and joining, in order
  // Adapters asked for and not yet described (a run waits for them; described again for a new
  // model, listed ones do not hold a run up: the run needs their sources only).
  int joining() const;
  QString uniqueName(const QString& base) const;
  quint64 nextSeed() const;
  // The adapters a serve run uses: the list, or random ones when it is empty.
  std::vector<servelab::AdapterSource> serveAdapters() const;

  void updateMath();
  void updateComposer();  // which controls the workload and assignment use
  void rebuildRowCombos();
  void addRow(const QString& adapter);
  void drawLive();
  void fillPointsTable(const servelab::MultiLoraResult& r);
  void fillShapes(const servelab::MultiLoraResult& r);
  void drawOutputs();
  void setAgreement(const servelab::MultiLoraResult& r);
  void showCache(const servelab::AdapterCacheStats& cache, qint64 step, qint64 adaptersInStep);
  void setRequestRow(int row, const QStringList& cells);

  // Adapters.
  QTableWidget* adapterTable_;
  QLabel* adapterHint_;
  QLabel* adapterError_;
  QPushButton* loadPeft_;
  QPushButton* makeRandom_;
  QPushButton* remove_;
  // Math.
  QComboBox* mathModule_;
  QSpinBox* mathRank_;
  QDoubleSpinBox* mathAlpha_;
  QLabel* mathLabel_;
  // Composer.
  QComboBox* workload_;
  QComboBox* assignment_;
  QSpinBox* shared_;
  QWidget* sharedRow_;
  QWidget* rowsPanel_;
  QTableWidget* rowsTable_;
  QWidget* randomRow_;
  QSpinBox* randomCount_;
  QSpinBox* randomRank_;
  QLineEdit* sizes_;
  QCheckBox* loop_;
  QCheckBox* gathered_;
  QCheckBox* segmented_;
  QSpinBox* context_;
  QSpinBox* decodeSteps_;
  QSpinBox* repeats_;
  QSpinBox* toySamples_;
  QWidget* toyRow_;
  QWidget* gpt2Rows_;
  QLineEdit* prompt_;
  QSpinBox* newTokens_;
  QProgressBar* progress_;
  QLabel* summary_;
  QLabel* agreement_;
  // Views.
  QTabWidget* views_;
  ChartView* latencyChart_;
  ChartView* ratioChart_;
  QTabWidget* detailTabs_;
  QLabel* caveat_;
  QTextBrowser* outputs_;
  QTableWidget* pointsTable_;
  QTableWidget* shapesTable_;
  // Serve.
  QSpinBox* serveRequests_;
  QSpinBox* serveMaxBatch_;
  QSpinBox* serveNewTokens_;
  QSpinBox* cacheCapacity_;
  QComboBox* serveStrategy_;
  QPushButton* serveRun_;
  QPushButton* serveStop_;
  QProgressBar* serveProgress_;
  QLabel* serveSummary_;
  QLabel* serveAdapters_;
  QLabel* loadsLabel_;
  QLabel* hitsLabel_;
  QLabel* evictionsLabel_;
  QLabel* residentLabel_;
  QLabel* inStepLabel_;
  ChartView* cacheChart_;
  QTableWidget* requestTable_;

  ModelSummary model_;
  QVector<Entry> entries_;
  QMap<quint64, Pending> pending_;
  int nextEntryId_ = 1;
  Job job_ = Job::None;
  // Live medians per series ("base", "loop", ...) and batch size.
  QMap<QString, QMap<qint64, double>> live_;
  servelab::MultiLoraParams runParams_;  // what the sweep in progress (or the last one) asked for
  bool liveToy_ = false;
  QString resultPrompt_;  // the prompt of the run whose outputs are shown
  servelab::MultiLoraResult result_;
  bool hasResult_ = false;
  AdapterServeParams serving_;  // what the serve run in progress (or the last one) asked for
  servelab::BatchRunResult serveResult_;
  bool hasServeResult_ = false;
  servelab::AdapterCacheStats liveCache_;
  qint64 serveRequestsTotal_ = 0, serveRetired_ = 0;
  QString lastError_;
};

}  // namespace servelab::ui
