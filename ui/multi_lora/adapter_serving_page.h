#pragma once
// "Serve with adapters": a queue served by continuous batching, request i with adapter i mod n of
// the list, through a bounded adapter cache (servelab::run_adapter_serving). Live counters of the
// cache, its chart over the scheduler's steps, and each request's row.
#include <QJsonObject>
#include <QSettings>
#include <QWidget>

#include "engine_types.h"

class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace servelab::ui {

class AdapterList;
class BatchComposer;
class ChartView;
class EngineController;
class RunProgressBar;

class AdapterServingPage : public QWidget {
  Q_OBJECT
 public:
  // The queue's adapters come from adapters (or, when it is empty, the composer's random ones),
  // its prompt from the composer.
  AdapterServingPage(EngineController* engine, const AdapterList* adapters, const BatchComposer* composer,
                     QWidget* parent = nullptr);

  void setRequests(int n);
  void setMaxBatch(int n);
  void setNewTokens(int n);
  void setCacheCapacity(int n);  // 0: every adapter stays loaded
  void setStrategy(const QString& strategy);
  servelab::AdapterServingParams params() const;

  // Starts serving; false (with the reason in the summary, or rejected by the engine) when it
  // cannot. started() comes first, finished() when the run ends.
  bool serve();

  bool hasResult() const { return hasResult_; }
  const servelab::BatchRunResult& result() const { return result_.run; }
  // The adapter-cache counters as last reported (live during a run).
  const servelab::AdapterCacheStats& liveCache() const { return liveCache_; }
  QString summaryText() const;
  // The last run for --report ("serve" of the tab's result); empty without one.
  QJsonObject report() const;
  ChartView* chart() const { return cacheChart_; }

  void setModel(const ModelSummary& model);
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 Q_SIGNALS:
  void started();
  void finished(bool ok, const QString& message);

 private:
  void resetChart();
  void onRunStarted(qint64 requests, qint64 slots);
  void onAdmitted(qint64 request, qint64 slot, qint64 step);
  void onRetired(const servelab::RequestResult& request);
  void onStep(const servelab::BatchStep& step);
  void onFinished(const servelab::AdapterServingResult& result);
  void onFailed(const QString& kind, const QString& message);
  void showCache(const servelab::AdapterCacheStats& cache, qint64 step, qint64 adaptersInStep);
  void setRequestRow(int row, const QStringList& cells);
  void setRunning(bool running);

  EngineController* engine_;
  const AdapterList* adapters_;
  const BatchComposer* composer_;
  QSpinBox* requests_;
  QSpinBox* maxBatch_;
  QSpinBox* newTokens_;
  QSpinBox* cacheCapacity_;
  QComboBox* strategy_;
  QPushButton* run_;
  QPushButton* stop_;
  RunProgressBar* progress_;
  QLabel* summary_;
  QLabel* adapterLine_;
  QLabel* loads_;
  QLabel* hits_;
  QLabel* evictions_;
  QLabel* resident_;
  QLabel* inStep_;
  ChartView* cacheChart_;
  QTableWidget* requestTable_;

  ModelSummary model_;
  servelab::AdapterServingParams serving_;  // what the run in progress (or the last one) asked for
  servelab::AdapterServingResult result_;
  bool hasResult_ = false;
  servelab::AdapterCacheStats liveCache_;
  qint64 requestsTotal_ = 0, retired_ = 0;
};

}  // namespace servelab::ui
