#pragma once
// One run on the engine thread, as Qt's Mandelbrot example runs one render: EngineController::submit
// takes a callable, runs it on the engine thread and hands back an EngineJob that reports that run
// and nothing else. Its signals are emitted on the GUI thread, in the order the engine made them;
// the last one is succeeded() (the result is then in result<R>()) or failed().
#include <QObject>
#include <QString>
#include <any>
#include <atomic>
#include <functional>
#include <memory>

#include "engine_types.h"

namespace servelab {
class Engine;
}

namespace servelab::ui {

class EngineJob : public QObject {
  Q_OBJECT
 public:
  // What the run is, for the status bar and messages ("KV-cache timing").
  QString what() const { return what_; }
  bool isFinished() const { return finished_; }
  bool ok() const { return ok_; }
  // The callable's return value once succeeded() has been emitted.
  template <typename R>
  const R& result() const {
    return std::any_cast<const R&>(result_);
  }
  // Calls done(result) on the GUI thread when the job succeeds (dropped when context is gone).
  template <typename R, typename F>
  void onResult(QObject* context, F&& done) {
    connect(this, &EngineJob::succeeded, context,
            [this, done = std::forward<F>(done)] { done(result<R>()); });
  }

 Q_SIGNALS:
  void progress(double fraction, const QString& stage);
  // Live points of the experiment's series, and a series starting over.
  void point(const QString& series, double x, double y);
  void seriesReset(const QString& series);
  // Generation: each token as it is made.
  void token(const servelab::ui::TokenInfo& token);
  // Live scheduler events of the batching experiments (see servelab::BatchSink).
  void batchRunStarted(const QString& method, qint64 requests, qint64 slots);
  void batchAdmitted(qint64 request, qint64 slot, qint64 step, double ms);
  void batchToken(qint64 request, int id, const QString& piece, qint64 step, double ms);
  void batchRetired(const servelab::RequestResult& request);
  void batchStep(const servelab::BatchStep& step);
  // Paged KV: an admission whose first cachedTokens prompt positions came from the prefix cache.
  void batchPrefixHit(qint64 request, qint64 cachedTokens, qint64 step);
  // Speculative decoding: each verified step of the watched request (after its tokens).
  void speculativeStep(const servelab::ui::SpecStepInfo& step);
  // Each quantization mode as soon as it is measured; its greedy pieces are readable tokens.
  void quantizationMode(const servelab::QuantModeResult& mode);
  // The end: exactly one of these, after every other signal of the run.
  void succeeded();
  // kind: "input", "out of memory", "cancelled", ...; message: one readable line.
  void failed(const QString& kind, const QString& message);

 private:
  friend class EngineController;
  friend class EngineHost;
  friend class JobContext;
  EngineJob(const QString& what, QObject* parent) : QObject(parent), what_(what) {}
  // On the GUI thread, once: the controller's bookkeeping (ended), then the job's last signal.
  void finish(std::any result);
  void fail(const QString& kind, const QString& message);

  QString what_;
  std::any result_;
  bool finished_ = false;
  bool ok_ = false;
  std::function<void(EngineJob*)> ended_;  // set by the controller
};

// The engine thread's side of a job: the engine, sinks that turn the core's callbacks into the
// job's signals, and the Stop flag. Lives only while the job's callable runs.
class JobContext {
 public:
  JobContext(const servelab::Engine& engine, EngineJob* job, const std::atomic<bool>* cancel);
  ~JobContext();
  JobContext(const JobContext&) = delete;
  JobContext& operator=(const JobContext&) = delete;

  // The engine, for the job's body on the engine thread (each call noted: engine_session.h).
  const servelab::Engine& engine() const;
  const std::atomic<bool>* cancel() const { return cancel_; }
  // Every sink an experiment can report through, relayed to the job, and the Stop flag.
  servelab::ExperimentControl control();
  // Generation's sink: each token as the job's token() signal, with its top candidates readable.
  servelab::GenerationSink* tokens();
  // The token's own bytes as readable text (a leading space as an open box), as the tabs show them.
  QString readableToken(int id) const;

  // Runs f(job) on the GUI thread after everything posted before it.
  void post(std::function<void(EngineJob*)> f) const;

 private:
  struct Relays;
  const servelab::Engine& engine_;
  EngineJob* job_;
  const std::atomic<bool>* cancel_;
  std::unique_ptr<Relays> relays_;
};

}  // namespace servelab::ui
