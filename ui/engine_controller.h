#pragma once
// The engine thread, seen from the GUI thread. EngineController owns a QThread on which the Engine
// lives; it loads models, runs one job at a time and answers small questions in between. Every
// refusal (busy, no model) and Stop live here, once. The GUI thread never waits on the engine.
//
//   EngineJob* job = engine->submit(tr("KV-cache timing"), [p](JobContext& c) {
//     return servelab::run_kv_cache_timing(c.engine(), p, c.control());
//   });
//   if (!job) return false;  // busy or no model: rejected() said why
//   connect(job, &EngineJob::point, this, ...);
//   job->onResult<servelab::KvCacheTimingResult>(this, [this](const auto& r) { ... });
#include <QObject>
#include <QPointer>
#include <QThread>
#include <any>
#include <atomic>
#include <functional>
#include <type_traits>

#include "engine_job.h"
#include "engine_types.h"

namespace servelab::ui {

class EngineHost;

class EngineController : public QObject {
  Q_OBJECT
 public:
  enum class State { NoModel, Loading, Idle, Running };
  Q_ENUM(State)

  explicit EngineController(QObject* parent = nullptr);
  // Stops the run in progress and waits for the engine thread (Mandelbrot's destructor).
  ~EngineController() override;

  State state() const { return state_; }
  bool isBusy() const { return state_ == State::Loading || state_ == State::Running; }
  QString stateText() const;
  const ModelSummary& model() const { return model_; }
  // The job in progress, or the last one (nullptr before the first).
  EngineJob* currentJob() const { return job_; }

  // False (and rejected emitted) while the engine is busy.
  bool loadModel(const ModelRequest& request);

  // Runs run(JobContext&) on the engine thread as the one job; its return value is the job's
  // result. nullptr (and rejected emitted) while the engine is busy or has no model.
  template <typename Run>
  EngineJob* submit(const QString& what, Run run) {
    return start(what, [run = std::move(run)](JobContext& c) mutable -> std::any { return run(c); });
  }

  // Not a run: run(const Engine&) on the engine thread without making the engine busy (it waits
  // behind a run), then done(result, error) on the GUI thread, error empty on success. Dropped when
  // context is gone. False when no model is loaded.
  template <typename Run, typename Done>
  bool ask(QObject* context, Run run, Done done) {
    using R = std::decay_t<std::invoke_result_t<Run&, const servelab::Engine&>>;
    return query(
        context, [run = std::move(run)](const servelab::Engine& e) mutable -> std::any { return run(e); },
        [done = std::move(done)](const std::any& r, const QString& error) {
          done(error.isEmpty() ? std::any_cast<const R&>(r) : R{}, error);
        });
  }

  // Takes effect before the engine's next step; the run ends with failed("cancelled", ...).
  void stop();

 Q_SIGNALS:
  void stateChanged(servelab::ui::EngineController::State state);
  void modelLoaded(const servelab::ui::ModelSummary& summary);
  void modelLoadFailed(const QString& message);
  // A job has started (the window follows its failure); tabs follow the jobs they submit.
  void jobStarted(servelab::ui::EngineJob* job);
  void rejected(const QString& message);
  void log(const QString& line);

 private:
  using Body = std::function<std::any(JobContext&)>;
  using Query = std::function<std::any(const servelab::Engine&)>;
  using Answer = std::function<void(const std::any&, const QString&)>;
  EngineJob* start(const QString& what, Body body);
  bool query(QObject* context, Query run, Answer done);
  bool begin(State next, const QString& what);
  void setState(State s);
  void jobEnded(EngineJob* job);

  QThread thread_;
  EngineHost* host_;  // lives on thread_
  std::atomic<bool> cancel_{false};
  State state_ = State::NoModel;
  bool hadModel_ = false;
  QString running_;
  ModelSummary model_;
  QPointer<EngineJob> job_;
};

}  // namespace servelab::ui
