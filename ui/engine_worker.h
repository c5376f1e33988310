#pragma once
// The background core thread. EngineWorker lives in its own QThread and owns the Engine; jobs
// arrive as queued slot calls and report back through queued signals. EngineController is the
// GUI-thread side: it starts the thread, tracks the busy state and turns Stop into a flag the
// engine checks before every step. The GUI thread never waits on the engine.
#include <QObject>
#include <QThread>
#include <atomic>
#include <memory>

#include "engine_types.h"

namespace servelab {
class Engine;
}

namespace servelab::ui {

class EngineWorker : public QObject {
  Q_OBJECT
 public:
  explicit EngineWorker(std::atomic<bool>* cancel);
  ~EngineWorker() override;

 public Q_SLOTS:
  void loadModel(const servelab::ui::ModelRequest& request);
  void generate(const servelab::ui::GenerateRequest& request);
  void runKvCacheTiming(const servelab::KvCacheTimingParams& params);
  void runBatchSweep(const servelab::BatchSweepParams& params);
  void runSyncVsContinuous(const servelab::SyncVsContinuousParams& params);
  void runSeedBenchmark(const servelab::SeedBenchmarkParams& params);
  void runQuantization(const servelab::QuantizationParams& params);
  void runMultiLora(const servelab::MultiLoraParams& params);
  // Continuous batching of a queue whose requests name adapters (batch signals live, then
  // adapterServingFinished).
  void serveWithAdapters(const servelab::ui::AdapterServeParams& params);
  // Not a run: loads (or makes) an adapter for the loaded model and describes it, answered through
  // adapterDescribed.
  void describeAdapter(quint64 ticket, const servelab::AdapterSource& source);
  // Not a run: the padded tensors of a static batch, answered through promptsPadded.
  void padPrompts(quint64 ticket, const QStringList& prompts);

 Q_SIGNALS:
  void modelLoaded(const servelab::ui::ModelSummary& summary);
  void modelLoadFailed(const QString& message);
  void token(const servelab::ui::TokenInfo& token);
  void point(const QString& series, double x, double y);
  void seriesReset(const QString& series);
  void progress(double fraction, const QString& stage);
  void generateFinished(const servelab::ui::GenerateSummary& summary);
  void kvCacheTimingFinished(const servelab::KvCacheTimingResult& result);
  void batchSweepFinished(const servelab::BatchSweepResult& result);
  void syncVsContinuousFinished(const servelab::SyncVsContinuousResult& result);
  void seedBenchmarkFinished(const servelab::SeedBenchmarkResult& result);
  // Each quantization mode's result as soon as it is measured (fp32 first), then the whole result.
  // Their greedy pieces are readable tokens (a leading space as "\u2423"), not vocabulary spellings.
  void quantizationMode(const servelab::QuantModeResult& mode);
  void quantizationFinished(const servelab::QuantizationResult& result);
  // Its outputs' pieces are readable tokens, as the quantization's greedy pieces are.
  void multiLoraFinished(const servelab::MultiLoraResult& result);
  void adapterServingFinished(const servelab::BatchRunResult& result);
  // The answer to describeAdapter: the adapter, or why it cannot be used (error not empty).
  void adapterDescribed(quint64 ticket, const servelab::AdapterInfo& info, const QString& error);
  // Live scheduler events of the batching experiments (see servelab::BatchSink).
  void batchRunStarted(const QString& method, qint64 requests, qint64 slots);
  void batchAdmitted(qint64 request, qint64 slot, qint64 step, double ms);
  void batchToken(qint64 request, int id, const QString& piece, qint64 step, double ms);
  void batchRetired(const servelab::RequestResult& request);
  void batchStep(const servelab::BatchStep& step);
  // The answer to padPrompts: the tensors, or why there are none (error not empty).
  void promptsPadded(quint64 ticket, const servelab::PaddedPrompts& padded, const QString& error);
  // A run ended early: the kind ("input", "out of memory", "cancelled", ...) and a readable line.
  void failed(const QString& kind, const QString& message);
  void log(const QString& line);

 private:
  // Runs a job, turning every exception into failed(); returns whether it succeeded.
  template <typename F>
  bool guarded(const QString& what, F&& job);
  ModelSummary summarize(const QString& folder) const;

  std::unique_ptr<servelab::Engine> engine_;
  QString folder_;
  std::atomic<bool>* cancel_;
};

class EngineController : public QObject {
  Q_OBJECT
 public:
  enum class State { NoModel, Loading, Idle, Running };
  Q_ENUM(State)

  explicit EngineController(QObject* parent = nullptr);
  ~EngineController() override;

  State state() const { return state_; }
  bool isBusy() const { return state_ == State::Loading || state_ == State::Running; }
  QString stateText() const;
  const ModelSummary& model() const { return model_; }

  // Each returns false (and emits rejected) when the engine is busy or has no model.
  bool loadModel(const ModelRequest& request);
  bool generate(const GenerateRequest& request);
  bool runKvCacheTiming(const servelab::KvCacheTimingParams& params);
  bool runBatchSweep(const servelab::BatchSweepParams& params);
  bool runSyncVsContinuous(const servelab::SyncVsContinuousParams& params);
  bool runSeedBenchmark(const servelab::SeedBenchmarkParams& params);
  bool runQuantization(const servelab::QuantizationParams& params);
  bool runMultiLora(const servelab::MultiLoraParams& params);
  bool serveWithAdapters(const AdapterServeParams& params);
  // Describes an adapter on the engine thread without making the engine busy (it waits behind a
  // run); the answer comes through adapterDescribed with the returned ticket. 0 when no model is
  // loaded.
  quint64 describeAdapter(const servelab::AdapterSource& source);
  // Pads prompts on the engine thread without making the engine busy (it waits behind a run);
  // the answer comes through promptsPadded with the returned ticket. 0 when no model is loaded.
  quint64 padPrompts(const QStringList& prompts);
  // Takes effect before the engine's next step; the run ends with failed("cancelled", ...).
  void stop();

 Q_SIGNALS:
  void stateChanged(servelab::ui::EngineController::State state);
  void modelLoaded(const servelab::ui::ModelSummary& summary);
  void modelLoadFailed(const QString& message);
  void token(const servelab::ui::TokenInfo& token);
  void point(const QString& series, double x, double y);
  void seriesReset(const QString& series);
  void progress(double fraction, const QString& stage);
  void generateFinished(const servelab::ui::GenerateSummary& summary);
  void kvCacheTimingFinished(const servelab::KvCacheTimingResult& result);
  void batchSweepFinished(const servelab::BatchSweepResult& result);
  void syncVsContinuousFinished(const servelab::SyncVsContinuousResult& result);
  void seedBenchmarkFinished(const servelab::SeedBenchmarkResult& result);
  void quantizationMode(const servelab::QuantModeResult& mode);
  void quantizationFinished(const servelab::QuantizationResult& result);
  void multiLoraFinished(const servelab::MultiLoraResult& result);
  void adapterServingFinished(const servelab::BatchRunResult& result);
  void adapterDescribed(quint64 ticket, const servelab::AdapterInfo& info, const QString& error);
  void batchRunStarted(const QString& method, qint64 requests, qint64 slots);
  void batchAdmitted(qint64 request, qint64 slot, qint64 step, double ms);
  void batchToken(qint64 request, int id, const QString& piece, qint64 step, double ms);
  void batchRetired(const servelab::RequestResult& request);
  void batchStep(const servelab::BatchStep& step);
  void promptsPadded(quint64 ticket, const servelab::PaddedPrompts& padded, const QString& error);
  void failed(const QString& kind, const QString& message);
  void rejected(const QString& message);
  void log(const QString& line);

 private:
  bool begin(State next, const QString& what);
  void setState(State s);

  QThread thread_;
  EngineWorker* worker_;
  std::atomic<bool> cancel_{false};
  State state_ = State::NoModel;
  bool hadModel_ = false;
  QString running_;
  ModelSummary model_;
  quint64 lastTicket_ = 0;
};

}  // namespace servelab::ui
