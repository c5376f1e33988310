#pragma once
// One batching run as a timeline: which request held which slot at which scheduler step, built
// live from the engine's batch events or afterwards from a BatchRunResult, and drawn as the cells
// of a Gantt chart (one row per slot, one column per step).
#include <QColor>
#include <QString>
#include <QVector>

#include "chart_view.h"
#include "generate/continuous_batching.h"

namespace servelab::ui {

class BatchTimeline {
 public:
  struct Request {
    qint64 slot = -1;  // the batch place the engine reported at admission
    // The Gantt row: the slot, unless a request still running holds that row (the course's
    // merge/filter numbers its rows anew whenever one leaves); then the first free row.
    qint64 lane = -1;
    qint64 admitted = -1;   // the step of its prefill (and first tokens)
    qint64 lastToken = -1;  // the step of its latest token
    qint64 finished = -1;   // the step it left its slot (-1: still there)
    qint64 tokens = 0;
    // Paged KV: prompt positions its first admission found in the prefix cache (of promptTokens),
    // and its runs before each preemption (the blocks freed, its tokens recomputed on readmission).
    qint64 cachedTokens = 0, promptTokens = 0;
    // Chunked prefill: the pieces its prompt (since its last admission) was computed in, one per
    // step; the last of them gave its first token. Empty: the whole prompt at admission.
    struct Chunk {
      qint64 step = 0, start = 0, count = 0;
    };
    QVector<Chunk> chunks;
    struct Interrupted {
      qint64 lane = -1, admitted = -1, preempted = -1, lastToken = -1, tokens = 0;
    };
    QVector<Interrupted> interrupted;
  };
  struct Step {
    double ms = 0;
    qint64 kvCopyBytes = 0;
    double kvCopyMs = 0;
    double prefillMs = 0;  // of ms: the admitted prompts' forward pass
  };
  // The cells of one request, in steps (inclusive); an empty span has last < first.
  struct Span {
    qint64 first = 0, last = -1;
    bool empty() const { return last < first; }
  };

  // Live: the events of servelab::BatchSink, in the order the engine sends them.
  void start(const QString& method, qint64 requests, qint64 slots);
  void admit(qint64 request, qint64 slot, qint64 step);
  void token(qint64 request, qint64 step);
  void retire(const servelab::RequestResult& result);
  void step(const servelab::BatchStep& step);
  // Paged KV: the live run's requests whose first admission hit the prefix cache.
  void prefixHit(qint64 request, qint64 cachedTokens);
  // After the run: the same timeline from its result.
  static BatchTimeline fromResult(const servelab::BatchRunResult& run);

  QString method() const { return method_; }
  qint64 slots() const { return slots_; }
  qint64 requestCount() const { return requests_.size(); }
  qint64 stepCount() const { return steps_.size(); }
  const QVector<Request>& requests() const { return requests_; }
  // Requests that got a token at each step (the useful rows of the batch).
  const QVector<int>& occupancy() const { return occupancy_; }

  // A request's prefill steps (one, or its chunks'), its decode steps, and the steps its slot
  // waited for the rest of its (synchronous) batch after its last token: padding.
  Span prefillSpan(qint64 request) const;
  Span decodeSpan(qint64 request) const;
  Span paddingSpan(qint64 request) const;

  // Gantt cells: x is the step (a cell spans step - 0.5 to step + 0.5), the row is the lane.
  QVector<ChartView::Cell> cells() const;
  QStringList rowLabels() const;
  static QVector<ChartView::CellKey> legend();
  // Each request's own colour (hue from its id), readable as text and as a cell fill.
  static QColor requestColor(qint64 request);

 private:
  Request* find(qint64 request);
  // Records the step's prompt chunks on their requests.
  void addChunks(const servelab::BatchStep& step);
  qint64 freeLane(qint64 preferred, qint64 step, qint64 self) const;
  qint64 currentStep() const { return static_cast<qint64>(steps_.size()) - 1; }

  QString method_;
  qint64 slots_ = 0;
  QVector<Request> requests_;
  QVector<Step> steps_;
  QVector<int> occupancy_;
};

}  // namespace servelab::ui
