#pragma once
// Each run reports through its own EngineJob. These follow a signal of every job the engine starts
// from now on, the way a QSignalSpy or a connection on the engine itself used to.
#include <QList>
#include <QSignalSpy>
#include <QVariant>
#include <memory>
#include <vector>

#include "engine_controller.h"

namespace servelab::ui {

// Connects f to signal of every job started after this call; disconnecting the returned connection
// stops following new jobs.
template <typename Signal, typename F>
QMetaObject::Connection onEveryJob(EngineController* engine, Signal signal, QObject* context, F f) {
  return QObject::connect(
      engine, &EngineController::jobStarted, context,
      [signal, context, f](EngineJob* job) { QObject::connect(job, signal, context, f); });
}

// A QSignalSpy over the jobs started after it is made: their emissions, in order.
class JobSpy {
 public:
  template <typename Signal>
  JobSpy(EngineController* engine, Signal signal) {
    connection_ = QObject::connect(
        engine, &EngineController::jobStarted, engine,
        [this, signal](EngineJob* job) { spies_.push_back(std::make_unique<QSignalSpy>(job, signal)); });
  }
  ~JobSpy() { QObject::disconnect(connection_); }
  JobSpy(const JobSpy&) = delete;
  JobSpy& operator=(const JobSpy&) = delete;

  qsizetype size() const {
    qsizetype n = 0;
    for (const auto& s : spies_) n += s->size();
    return n;
  }
  QList<QVariant> at(qsizetype i) const {
    for (const auto& s : spies_) {
      if (i < s->size()) return s->at(i);
      i -= s->size();
    }
    return {};
  }
  QList<QVariant> front() const { return at(0); }
  QList<QVariant> last() const { return at(size() - 1); }

 private:
  QMetaObject::Connection connection_;
  std::vector<std::unique_ptr<QSignalSpy>> spies_;
};

}  // namespace servelab::ui
