#include "engine_controller.h"

#include <QDir>
#include <QElapsedTimer>
#include <memory>
#include <new>

#include "engine_session.h"
#include "util/errors.h"

namespace servelab::ui {

namespace {

QString firstLine(const char* what) {
  QString s = QString::fromUtf8(what);
  const qsizetype nl = s.indexOf(QLatin1Char('\n'));
  return nl < 0 ? s : s.left(nl);
}

}  // namespace

// --- EngineJob ------------------------------------------------------------------------------

void EngineJob::finish(std::any result) {
  result_ = std::move(result);
  finished_ = true;
  ok_ = true;
  if (ended_) ended_(this);
  Q_EMIT succeeded();
}

void EngineJob::fail(const QString& kind, const QString& message) {
  finished_ = true;
  ok_ = false;
  if (ended_) ended_(this);
  Q_EMIT failed(kind, message);
}

// --- JobContext: the core's callbacks as the job's signals ----------------------------------

namespace {

class ExperimentRelay : public servelab::ExperimentSink {
 public:
  explicit ExperimentRelay(const JobContext& c) : c_(c) {}
  void on_point(const std::string& series, double x, double y) override {
    c_.post([s = QString::fromStdString(series), x, y](EngineJob* j) { Q_EMIT j->point(s, x, y); });
  }
  void on_reset(const std::string& series) override {
    c_.post([s = QString::fromStdString(series)](EngineJob* j) { Q_EMIT j->seriesReset(s); });
  }
  void on_progress(double fraction, const std::string& stage) override {
    c_.post([fraction, s = QString::fromStdString(stage)](EngineJob* j) { Q_EMIT j->progress(fraction, s); });
  }

 private:
  const JobContext& c_;
};

class BatchRelay : public servelab::BatchSink {
 public:
  explicit BatchRelay(const JobContext& c) : c_(c) {}
  void on_run_start(const std::string& method, int64_t requests, int64_t slots) override {
    c_.post([m = QString::fromStdString(method), requests, slots](EngineJob* j) {
      Q_EMIT j->batchRunStarted(m, requests, slots);
    });
  }
  void on_admit(int64_t request, int64_t slot, int64_t step, double ms) override {
    c_.post([=](EngineJob* j) { Q_EMIT j->batchAdmitted(request, slot, step, ms); });
  }
  void on_token(int64_t request, int32_t id, const std::string& piece, int64_t step, double ms) override {
    c_.post([=, p = QString::fromStdString(piece)](EngineJob* j) {
      Q_EMIT j->batchToken(request, id, p, step, ms);
    });
  }
  void on_retire(const servelab::RequestResult& r) override {
    c_.post([r](EngineJob* j) { Q_EMIT j->batchRetired(r); });
  }
  void on_step(const servelab::BatchStep& s) override {
    c_.post([s](EngineJob* j) { Q_EMIT j->batchStep(s); });
  }
  void on_prefix_hit(int64_t request, int64_t cached_tokens, int64_t step) override {
    c_.post([=](EngineJob* j) { Q_EMIT j->batchPrefixHit(request, cached_tokens, step); });
  }

 private:
  const JobContext& c_;
};

class QuantRelay : public servelab::QuantizationSink {
 public:
  explicit QuantRelay(const JobContext& c) : c_(c) {}
  void on_mode(const servelab::QuantModeResult& mode) override {
    servelab::QuantModeResult m = mode;
    makeReadable(c_.engine(), m);
    c_.post([m = std::move(m)](EngineJob* j) { Q_EMIT j->quantizationMode(m); });
  }

 private:
  const JobContext& c_;
};

class TokenRelay : public servelab::GenerationSink {
 public:
  explicit TokenRelay(const JobContext& c) : c_(c) {}
  void on_token(const servelab::TokenEvent& e) override {
    TokenInfo t;
    t.step = e.step;
    t.id = e.id;
    t.piece = QString::fromStdString(e.piece);
    t.display = c_.readableToken(e.id);
    t.stepMs = e.step_ms;
    t.top.reserve(static_cast<qsizetype>(e.top.size()));
    for (const auto& c : e.top)
      t.top.push_back(
          {c.id, c_.readableToken(c.id), static_cast<double>(c.probability), static_cast<double>(c.logit)});
    c_.post([t = std::move(t)](EngineJob* j) { Q_EMIT j->token(t); });
  }

 private:
  const JobContext& c_;
};

}  // namespace

struct JobContext::Relays {
  explicit Relays(const JobContext& c) : experiment(c), batch(c), quant(c), tokens(c) {}
  ExperimentRelay experiment;
  BatchRelay batch;
  QuantRelay quant;
  TokenRelay tokens;
};

JobContext::JobContext(const servelab::Engine& engine, EngineJob* job, const std::atomic<bool>* cancel)
    : engine_(engine), job_(job), cancel_(cancel), relays_(std::make_unique<Relays>(*this)) {}
JobContext::~JobContext() = default;

servelab::ExperimentControl JobContext::control() {
  return servelab::ExperimentControl{&relays_->experiment, cancel_, &relays_->batch, &relays_->quant};
}

servelab::GenerationSink* JobContext::tokens() { return &relays_->tokens; }

QString JobContext::readableToken(int id) const { return servelab::ui::readableToken(engine_, id); }

const servelab::Engine& JobContext::engine() const {
  noteEngineCall();
  return engine_;
}

void JobContext::post(std::function<void(EngineJob*)> f) const {
  // The job lives on the GUI thread until the controller replaces it, which is after its last
  // event (finish or fail) has been delivered: every event posted here finds it.
  QMetaObject::invokeMethod(
      job_, [job = job_, f = std::move(f)] { f(job); }, Qt::QueuedConnection);
}

// --- EngineHost: the engine thread's side ---------------------------------------------------

class EngineHost : public QObject {
 public:
  EngineHost(EngineController* controller, const std::atomic<bool>* cancel)
      : controller_(controller), cancel_(cancel) {}

  // Runs on the engine thread; everything it reports goes to the GUI thread as posted calls.
  void load(const ModelRequest& r) {
    const QString what = r.folder.isEmpty()
                             ? QStringLiteral("loading the built-in model")
                             : QStringLiteral("loading %1").arg(QDir::toNativeSeparators(r.folder));
    toController([line = what + QStringLiteral(" on %1 %2").arg(r.device, r.dtype)](EngineController* c) {
      Q_EMIT c->log(line);
    });
    QElapsedTimer clock;
    clock.start();
    std::unique_ptr<servelab::Engine> next;
    QString error;
    try {
      next = loadEngine(r);
    } catch (const std::bad_alloc&) {
      error = what + QStringLiteral(": out of memory");
    } catch (const std::exception& e) {
      error = firstLine(e.what());
      toController([line = QStringLiteral("%1 failed: %2").arg(what, error)](EngineController* c) {
        Q_EMIT c->log(line);
      });
    }
    if (!next) {
      // The previous engine stays loaded and usable.
      toController([error](EngineController* c) { Q_EMIT c->modelLoadFailed(error); });
      return;
    }
    engine_ = std::move(next);
    const ModelSummary summary = summarize(*engine_, r.folder);
    toController(
        [summary, line = QStringLiteral("loaded %1 in %2 ms").arg(summary.name).arg(clock.elapsed())](
            EngineController* c) {
          Q_EMIT c->log(line);
          Q_EMIT c->modelLoaded(summary);
        });
  }

  void run(EngineJob* job, const std::function<std::any(JobContext&)>& body) {
    if (!engine_) {  // the controller refuses a job without a model; this is the last line
      QMetaObject::invokeMethod(
          job, [job] { job->fail(QStringLiteral("input"), QStringLiteral("no model is loaded")); },
          Qt::QueuedConnection);
      return;
    }
    JobContext context(*engine_, job, cancel_);
    QString kind, message;
    try {
      std::any result = body(context);
      context.post([result = std::move(result)](EngineJob* j) mutable { j->finish(std::move(result)); });
      return;
    } catch (const servelab::Error& e) {
      kind = QString::fromUtf8(servelab::error_kind_name(e.kind()));
      message = firstLine(e.what());
    } catch (const std::bad_alloc&) {
      kind = QStringLiteral("out of memory");
      message = job->what() + QStringLiteral(": out of memory");
    } catch (const std::exception& e) {
      kind = QStringLiteral("engine");
      message = firstLine(e.what());
    }
    context.post([kind, message](EngineJob* j) { j->fail(kind, message); });
  }

  void answer(const std::function<std::any(const servelab::Engine&)>& run,
              std::function<void(const std::any&, const QString&)> done) {
    std::any result;
    QString error;
    if (!engine_) {
      error = QStringLiteral("no model is loaded");
    } else {
      try {
        noteEngineCall();
        result = run(*engine_);
      } catch (const std::bad_alloc&) {
        error = QStringLiteral("out of memory");
      } catch (const std::exception& e) {
        error = firstLine(e.what());
      }
    }
    toController([done = std::move(done), result = std::move(result), error](EngineController*) {
      done(result, error);
    });
  }

 private:
  void toController(std::function<void(EngineController*)> f) {
    QMetaObject::invokeMethod(
        controller_, [c = controller_, f = std::move(f)] { f(c); }, Qt::QueuedConnection);
  }

  EngineController* controller_;
  const std::atomic<bool>* cancel_;
  std::unique_ptr<servelab::Engine> engine_;
};

// --- EngineController -----------------------------------------------------------------------

EngineController::EngineController(QObject* parent) : QObject(parent), host_(new EngineHost(this, &cancel_)) {
  thread_.setObjectName(QStringLiteral("servelab-engine"));
  host_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, host_, &QObject::deleteLater);
  connect(this, &EngineController::modelLoaded, this, [this](const ModelSummary& s) {
    model_ = s;
    hadModel_ = true;
    setState(State::Idle);
  });
  connect(this, &EngineController::modelLoadFailed, this,
          [this] { setState(hadModel_ ? State::Idle : State::NoModel); });
  thread_.start();
}

EngineController::~EngineController() {
  cancel_ = true;
  thread_.quit();
  thread_.wait();
}

QString EngineController::stateText() const {
  switch (state_) {
    case State::NoModel:
      return tr("no model");
    case State::Loading:
      return tr("loading model…");
    case State::Idle:
      return tr("ready");
    case State::Running:
      return tr("running %1 (Esc stops)").arg(running_);
  }
  return {};
}

void EngineController::setState(State s) {
  state_ = s;
  Q_EMIT stateChanged(s);
}

bool EngineController::begin(State next, const QString& what) {
  if (isBusy()) {
    Q_EMIT rejected(tr("The engine is busy with %1; stop it or wait before starting %2.")
                        .arg(state_ == State::Loading ? tr("loading a model") : running_, what));
    return false;
  }
  if (next == State::Running && !hadModel_) {
    Q_EMIT rejected(tr("No model is loaded yet."));
    return false;
  }
  // Only here, with nothing running, is it safe to clear a previous Stop.
  cancel_ = false;
  running_ = what;
  setState(next);
  return true;
}

bool EngineController::loadModel(const ModelRequest& request) {
  if (!begin(State::Loading, tr("loading a model"))) return false;
  QMetaObject::invokeMethod(
      host_, [h = host_, request] { h->load(request); }, Qt::QueuedConnection);
  return true;
}

EngineJob* EngineController::start(const QString& what, Body body) {
  if (!begin(State::Running, what)) return nullptr;
  if (job_) job_->deleteLater();  // the previous job has ended: nothing is posted to it any more
  auto* job = new EngineJob(what, this);
  job->ended_ = [this](EngineJob* j) { jobEnded(j); };
  job_ = job;
  connect(job, &EngineJob::failed, this, [this, what](const QString& kind, const QString& message) {
    Q_EMIT log(QStringLiteral("%1 failed (%2): %3").arg(what, kind, message));
  });
  Q_EMIT jobStarted(job);
  QMetaObject::invokeMethod(
      host_, [h = host_, job, body = std::move(body)] { h->run(job, body); }, Qt::QueuedConnection);
  return job;
}

void EngineController::jobEnded(EngineJob*) { setState(hadModel_ ? State::Idle : State::NoModel); }

bool EngineController::query(QObject* context, Query run, Answer done) {
  if (state_ == State::NoModel) return false;
  QPointer<QObject> guard(context);
  QMetaObject::invokeMethod(
      host_,
      [h = host_, run = std::move(run), guard, done = std::move(done)] {
        h->answer(run, [guard, done](const std::any& r, const QString& error) {
          if (guard) done(r, error);
        });
      },
      Qt::QueuedConnection);
  return true;
}

void EngineController::stop() {
  if (state_ == State::Running) {
    cancel_ = true;
    Q_EMIT log(tr("stop requested: the engine stops before its next step"));
  }
}

}  // namespace servelab::ui
