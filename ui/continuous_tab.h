#pragma once
// Continuous batching (lesson 3): one queue of short and long requests served by synchronous
// (static) batching and by continuous batching, shown live as a Gantt chart of the batch slots,
// a token stream per request, the batch occupancy per step and the latency per request (and, for
// paged KV, its block pool); then the methods side by side, and the course's benchmark table.
#include <QStringList>
#include <QVector>

#include "batch_timeline.h"
#include "experiment_tab.h"

class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTableWidget;
class QTextEdit;
class QTimer;

namespace servelab::ui {

class EngineJob;
class KvMemoryView;
class RequestQueueForm;
class RunProgressBar;

class ContinuousTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit ContinuousTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("continuous"); }
  QString title() const override { return tr("Continuous batching"); }
  ChartView* primaryChart() const override { return gantt_; }
  QList<ChartView*> charts() const override { return {gantt_, occupancy_, latency_, kvUsage_, itl_}; }
  // Serves the queue synchronously, then with continuous batching (and the course's merge/filter).
  bool run() override;
  // The course's benchmark: N queries one at a time, then continuously batched.
  bool runCourseBenchmark();
  // Experiment presets: each sets the queue's controls (left for the user to see and change) and
  // runs the Run button's job. FitInBudget: one budget of KV memory, slot KV vs paged KV (the
  // budget spin box's value, or kPresetBudgetMb when it is 0). SharedSystemPrompt: prompts that
  // share a long prefix, paged KV without and with prefix caching.
  enum class Preset { FitInBudget, SharedSystemPrompt };
  // Chunked prefill: streams decoding when a long prompt arrives, served without and with the
  // queue's token budget (vLLM's 128 when it is 0); the streams' inter-token latency both ways.
  bool runLongPrompt();
  bool hasLongPromptResult() const { return hasLongPrompt_; }
  const servelab::ChunkedPrefillResult& longPromptResult() const { return longPrompt_; }
  const ChartView& itlChart() const { return *itl_; }
  static constexpr double kPresetBudgetMb = 12;
  void applyPreset(Preset preset);
  bool runPreset(Preset preset);
  // "fit-in-budget", "shared-system-prompt", "long-prompt".
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
  void setRequests(int n);
  void setMaxBatch(int n);
  void setTokenBudget(int tokens);  // chunked prefill (0: off)
  void setLongEvery(int n);
  void setLongTokens(int n);
  void setShortTokens(int n);
  void setPromptTokens(int min, int max);  // 0, 0: the prompt as typed
  void setArrivalRate(double perSecond);   // 0: all requests at the start
  void setSeed(int seed);
  void setNaive(bool on);
  void setPaged(bool on, int blockSize = 16, double budgetMb = 0, bool prefixCaching = true);
  void setSlotsInBudget(bool on);
  void setPagedUncachedToo(bool on);
  void setCourseQueries(int n);
  void setCourseNewTokens(int n);
  void setCourseMaxBatch(int n);
  servelab::SyncVsContinuousParams params() const;
  servelab::CourseBenchmarkParams courseParams() const;

  bool hasResult() const { return hasResult_; }
  const servelab::SyncVsContinuousResult& result() const { return result_; }
  bool hasCourseResult() const { return hasCourseResult_; }
  const servelab::CourseBenchmarkResult& courseResult() const { return courseResult_; }
  // The timelines the selector offers after a run (one per method), and the one drawn.
  QStringList timelineNames() const;
  int shownTimeline() const;
  void showTimeline(int index);
  const BatchTimeline& drawnTimeline() const { return drawn_; }
  QString summaryText() const;
  // Paged KV's block pool: live during a paged run (kept on Stop), else the shown run's fullest step.
  const KvMemoryView& kvMemoryView() const { return *kvView_; }
  QString streamText() const;
  // KV memory per scheduler step of each continuous run (the runs' BatchStep snapshots): MiB held
  // for requests (slots, or blocks) and MiB holding real positions; the gap is fragmentation.
  const ChartView& kvUsageChart() const { return *kvUsage_; }
  // The utilisation chart's series for a run's method: its held or its used KV memory.
  static QString kvUsageSeries(const QString& method, bool used);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  enum class Job { None, Compare, Course, LongPrompt };
  struct Shown {
    QString name;
    BatchTimeline timeline;
    QStringList texts;  // generated text per request
    bool hasKvBlocks = false;
    servelab::BatchStep kvStep;  // paged: the pool at its fullest step (most blocks held)
  };

  bool startJob(Job job, EngineJob* engineJob);
  void onRunStarted(const QString& method, qint64 requests, qint64 slots);
  void onAdmitted(qint64 request, qint64 slot, qint64 step);
  void onToken(qint64 request, const QString& piece, qint64 step);
  void onRetired(const servelab::RequestResult& request);
  void onStep(const servelab::BatchStep& step);
  void onCompareFinished(const servelab::SyncVsContinuousResult& result);
  void onCourseFinished(const servelab::CourseBenchmarkResult& result);
  void onLongPromptFinished(const servelab::ChunkedPrefillResult& result);
  // The timelines of finished runs on offer in the selector (each with its texts and fullest step).
  static Shown shownOf(const servelab::BatchRunResult& run);
  void onFailed(const QString& kind, const QString& message);
  void finishJob(bool ok, const QString& message);
  void scheduleFlush();
  void flush();
  void drawTimeline(const BatchTimeline& timeline, const QString& title);
  void resetStream(const QStringList& texts);
  void flushStream();
  QString seriesFor(const QString& method) const;
  int ensureSeries(ChartView* chart, const QString& name);
  void rebuildSelector(int select);
  void appendKvUsage(const QString& method, const servelab::BatchStep& step);

  // Request queue.
  RequestQueueForm* queue_;
  RunProgressBar* progress_;
  QLabel* summary_;
  // Course benchmark.
  QSpinBox* courseQueries_;
  QSpinBox* courseNewTokens_;
  QSpinBox* courseMaxBatch_;
  QPushButton* courseRun_;
  // Views.
  QComboBox* selector_;
  ChartView* gantt_;
  QTextEdit* stream_;
  ChartView* occupancy_;
  ChartView* latency_;
  KvMemoryView* kvView_;
  ChartView* kvUsage_;
  ChartView* itl_;
  QTabWidget* resultTabs_;
  QTabWidget* chartTabs_;
  QTableWidget* comparison_;
  QTableWidget* courseTable_;
  QTimer* flushTimer_;

  ModelSummary model_;
  Job job_ = Job::None;
  Job ended_ = Job::None;  // the job of the last run to end (runReport)
  BatchTimeline live_;
  QStringList liveTexts_;
  QVector<QString> pendingText_;  // per request, not yet in the stream view
  bool pendingAny_ = false;
  bool timelineDirty_ = false;
  BatchTimeline drawn_;
  QVector<Shown> shown_;  // compare runs first, then the course benchmark's batched run
  int compareShown_ = 0;  // how many of shown_ are compare runs
  servelab::SyncVsContinuousResult result_;
  bool hasResult_ = false;
  servelab::CourseBenchmarkResult courseResult_;
  bool hasCourseResult_ = false;
  servelab::ChunkedPrefillResult longPrompt_;
  bool hasLongPrompt_ = false;
  QString lastError_;
};

}  // namespace servelab::ui
