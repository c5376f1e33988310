#include "batch_timeline.h"

#include <QCoreApplication>
#include <algorithm>
#include <cmath>
#include <vector>

#include "text_format.h"

namespace servelab::ui {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("BatchTimeline", text); }

}  // namespace

QColor BatchTimeline::requestColor(qint64 request) {
  // Golden-angle hues: neighbouring ids get clearly different colours.
  const double hue = std::fmod(static_cast<double>(request) * 137.508, 360.0) / 360.0;
  return QColor::fromHsvF(static_cast<float>(hue), 0.62f, 0.80f);
}

void BatchTimeline::start(const QString& method, qint64 requests, qint64 slots) {
  method_ = method;
  slots_ = slots;
  requests_ = QVector<Request>(requests);
  steps_.clear();
  occupancy_.clear();
}

BatchTimeline::Request* BatchTimeline::find(qint64 request) {
  return request >= 0 && request < requests_.size() ? &requests_[request] : nullptr;
}

qint64 BatchTimeline::freeLane(qint64 preferred, qint64 step, qint64 self) const {
  const auto busy = [&](qint64 lane) {
    for (qint64 id = 0; id < requests_.size(); ++id) {
      const Request& o = requests_[id];
      if (id != self && o.lane == lane && o.admitted >= 0 && o.admitted <= step &&
          (o.finished < 0 || o.finished >= step))
        return true;
      for (const Request::Interrupted& i : o.interrupted)
        if (i.lane == lane && i.admitted <= step && i.preempted >= step) return true;
    }
    return false;
  };
  if (preferred >= 0 && !busy(preferred)) return preferred;
  qint64 lane = 0;
  while (busy(lane)) ++lane;
  return lane;
}

void BatchTimeline::admit(qint64 request, qint64 slot, qint64 step) {
  if (Request* r = find(request)) {
    r->slot = slot;
    r->admitted = step;
    r->chunks.clear();
    r->lane = freeLane(slot, step, request);
    slots_ = std::max(slots_, r->lane + 1);
  }
}

void BatchTimeline::prefixHit(qint64 request, qint64 cachedTokens) {
  if (Request* r = find(request); r && r->interrupted.isEmpty()) r->cachedTokens = cachedTokens;
}

void BatchTimeline::token(qint64 request, qint64 step) {
  if (Request* r = find(request)) {
    r->lastToken = std::max(r->lastToken, step);
    ++r->tokens;
  }
}

void BatchTimeline::retire(const servelab::RequestResult& result) {
  if (Request* r = find(result.id)) r->finished = result.finished_step;
}

void BatchTimeline::step(const servelab::BatchStep& s) {
  if (s.step < 0) return;
  if (steps_.size() <= s.step) {
    steps_.resize(s.step + 1);
    occupancy_.resize(s.step + 1);
  }
  steps_[s.step] = Step{s.ms, s.kv_copy_bytes, s.kv_copy_ms, s.prefill_ms};
  addChunks(s);
  for (int64_t id : s.preempted)
    if (Request* r = find(id); r && r->admitted >= 0) {
      r->interrupted.push_back({r->lane, r->admitted, s.step, r->lastToken, r->tokens});
      r->admitted = -1;
      r->lane = -1;
    }
  int generating = 0;
  for (const Request& r : requests_) generating += r.lastToken == s.step ? 1 : 0;
  occupancy_[s.step] = generating;
}

void BatchTimeline::addChunks(const servelab::BatchStep& s) {
  // A whole prompt computed at admission is no chunk: only prompts split over steps are drawn so.
  for (const servelab::PrefillChunk& c : s.chunks)
    if (Request* r = find(c.request)) {
      if (!r->chunks.isEmpty() && r->chunks.back().start + r->chunks.back().count != c.start)
        r->chunks.clear();
      r->chunks.push_back({s.step, c.start, c.count});
    }
}

BatchTimeline BatchTimeline::fromResult(const servelab::BatchRunResult& run) {
  BatchTimeline t;
  t.method_ = QString::fromStdString(run.method);
  t.requests_ = QVector<Request>(static_cast<qsizetype>(run.requests.size()));
  // Paged KV: each admission and preemption of a request, in step order.
  QVector<QVector<qint64>> admissions(t.requests_.size()), preemptions(t.requests_.size());
  for (const servelab::BatchStep& s : run.steps) {
    for (int64_t id : s.admitted)
      if (id >= 0 && id < t.requests_.size()) admissions[id] << s.step;
    for (int64_t id : s.preempted)
      if (id >= 0 && id < t.requests_.size()) preemptions[id] << s.step;
  }
  for (const servelab::RequestResult& rr : run.requests) {
    Request* r = t.find(rr.id);
    if (!r) continue;
    r->slot = rr.slot;
    r->admitted = rr.admitted_step;
    r->finished = rr.finished_step;
    r->tokens = static_cast<qint64>(rr.generated_ids.size());
    r->cachedTokens = rr.cached_tokens;
    r->promptTokens = static_cast<qint64>(rr.prompt_ids.size());
    qint64 before = 0;  // tokens it had when last preempted
    const QVector<qint64>& in = admissions[rr.id];
    const QVector<qint64>& out = preemptions[rr.id];
    for (qsizetype k = 0; k < out.size() && k + 1 < in.size(); ++k) {
      // Admitted at a: a token from its prefill and one per decode until the step it was evicted
      // in, which decoded it no more.
      const qint64 a = in[k], p = out[k];
      Request::Interrupted i;
      i.admitted = a;
      i.preempted = p;
      i.tokens = std::min(r->tokens, before + (p - a) + 1);
      i.lastToken = std::max(a, p - 1);
      r->interrupted << i;
      before = i.tokens;
      r->admitted = in[k + 1];
    }
  }
  for (const servelab::BatchStep& s : run.steps) {
    for (int64_t id : s.admitted)
      if (Request* r = t.find(id)) r->chunks.clear();  // a readmission computes its prompt anew
    t.addChunks(s);
  }
  for (Request& r : t.requests_) {
    if (r.admitted >= 0 && r.tokens > 0) {
      // A request gets a token at every step from the end of its prompt on (continuous batching
      // without a budget gives it two in its first step) and leaves at its last one, unless its
      // synchronous batch holds it.
      const qint64 before = r.interrupted.isEmpty() ? 0 : r.interrupted.back().tokens;
      const qint64 first = r.admitted + std::max<qint64>(r.chunks.size(), 1) - 1;
      r.lastToken = first + std::max<qint64>(r.tokens - before, 1) - 1;
      if (r.finished >= 0) r.lastToken = std::min(r.lastToken, r.finished);
    }
  }
  // Rows in the order the runs were admitted, as the live timeline chose them: each run prefers
  // the slot the engine gave that admission (a readmission after a preemption may get another).
  QVector<QVector<qint64>> slotOfRun(t.requests_.size());
  for (const servelab::RequestResult& rr : run.requests)
    if (rr.id >= 0 && rr.id < t.requests_.size())
      for (const servelab::RequestAdmission& a : rr.admissions) slotOfRun[rr.id] << a.slot;
  const auto slotOf = [&](qint64 id, qsizetype run) {
    const QVector<qint64>& slots = slotOfRun[id];
    return run < slots.size() ? slots[run] : run == 0 ? t.requests_[id].slot : -1;
  };
  struct Admission {
    qint64 step, slot, id;
    qsizetype run;  // index in interrupted, or -1 for its last run
  };
  std::vector<Admission> admitted;
  for (qint64 id = 0; id < t.requests_.size(); ++id) {
    const Request& r = t.requests_[id];
    for (qsizetype k = 0; k < r.interrupted.size(); ++k)
      admitted.push_back({r.interrupted[k].admitted, slotOf(id, k), id, k});
    if (r.admitted >= 0) admitted.push_back({r.admitted, slotOf(id, r.interrupted.size()), id, -1});
  }
  std::stable_sort(admitted.begin(), admitted.end(), [](const Admission& a, const Admission& b) {
    return a.step != b.step ? a.step < b.step : a.slot < b.slot;
  });
  for (const Admission& a : admitted) {
    Request& r = t.requests_[a.id];
    qint64& lane = a.run < 0 ? r.lane : r.interrupted[a.run].lane;
    lane = t.freeLane(a.slot, a.step, -1);
    t.slots_ = std::max(t.slots_, lane + 1);
  }
  for (const servelab::BatchStep& s : run.steps) {
    if (s.step >= t.steps_.size()) t.steps_.resize(s.step + 1);
    if (s.step >= 0) t.steps_[s.step] = Step{s.ms, s.kv_copy_bytes, s.kv_copy_ms, s.prefill_ms};
  }
  t.occupancy_ = QVector<int>(t.steps_.size(), 0);
  for (const Request& r : t.requests_) {
    for (qint64 s = std::max<qint64>(r.admitted, 0); r.admitted >= 0 && s <= r.lastToken; ++s)
      if (s < t.occupancy_.size()) ++t.occupancy_[s];
    for (const Request::Interrupted& i : r.interrupted)
      for (qint64 s = i.admitted; s <= i.lastToken && s < i.preempted; ++s)
        if (s >= 0 && s < t.occupancy_.size()) ++t.occupancy_[s];
  }
  return t;
}

BatchTimeline::Span BatchTimeline::prefillSpan(qint64 request) const {
  if (request < 0 || request >= requests_.size()) return {};
  const Request& r = requests_[request];
  if (r.admitted < 0) return {};
  return Span{r.admitted, r.chunks.isEmpty() ? r.admitted : std::max(r.admitted, r.chunks.back().step)};
}

BatchTimeline::Span BatchTimeline::decodeSpan(qint64 request) const {
  if (request < 0 || request >= requests_.size()) return {};
  const Request& r = requests_[request];
  return r.admitted >= 0 ? Span{prefillSpan(request).last + 1, r.lastToken} : Span{};
}

BatchTimeline::Span BatchTimeline::paddingSpan(qint64 request) const {
  if (request < 0 || request >= requests_.size()) return {};
  const Request& r = requests_[request];
  if (r.admitted < 0) return {};
  const qint64 end = r.finished >= 0 ? r.finished : currentStep();
  return Span{std::max(r.lastToken, r.admitted) + 1, end};
}

QStringList BatchTimeline::rowLabels() const {
  QStringList labels;
  for (qint64 s = 0; s < std::max<qint64>(slots_, 1); ++s) labels << tr("slot %1").arg(s);
  return labels;
}

QVector<ChartView::CellKey> BatchTimeline::legend() {
  // Short names, one row under the chart: the caption and each cell's hover text say the rest.
  const QColor sample = requestColor(0);
  return {{tr("prefill + 1st token"), sample, ChartView::CellStyle::Solid},
          {tr("decode"), sample, ChartView::CellStyle::Tint},
          {tr("padding (batch wait)"), QColor(Qt::gray), ChartView::CellStyle::Muted},
          {tr("prefix-cache hit"), sample, ChartView::CellStyle::Cached},
          {tr("preempted"), sample, ChartView::CellStyle::Preempted}};
}

QVector<ChartView::Cell> BatchTimeline::cells() const {
  QVector<ChartView::Cell> out;
  out.reserve(requests_.size() * 2);
  for (qint64 id = 0; id < requests_.size(); ++id) {
    const Request& r = requests_[id];
    if (r.admitted < 0 || r.lane < 0) continue;
    const QColor color = requestColor(id);
    const int row = static_cast<int>(r.lane);
    const QString name = tr("request #%1 · slot %2").arg(id).arg(r.lane);
    const Span decode = decodeSpan(id);
    const Span padding = paddingSpan(id);

    QString prefillInfo =
        tr("%1\nstep %2: admitted, prefill of its prompt and its first token").arg(name).arg(r.admitted);
    if (r.admitted < steps_.size()) {
      const Step& s = steps_[r.admitted];
      prefillInfo += s.prefillMs > 0 ? tr("\nthe step took %1 ms, %2 ms of it for the admitted prompts")
                                           .arg(s.ms, 0, 'f', 2)
                                           .arg(s.prefillMs, 0, 'f', 2)
                                     : tr("\nthe step took %1 ms").arg(s.ms, 0, 'f', 2);
      if (s.kvCopyBytes > 0)
        prefillInfo +=
            tr("; %1 of KV cache copied (%2 ms)").arg(formatBytes(s.kvCopyBytes)).arg(s.kvCopyMs, 0, 'f', 2);
    }
    // Its first prefill, hatched where the prefix cache gave it part of its prompt.
    QString cacheNote;
    if (r.cachedTokens > 0)
      cacheNote = r.promptTokens > 0
                      ? tr("\n%1 of its %2 prompt tokens came from the prefix cache: only %3 computed")
                            .arg(r.cachedTokens)
                            .arg(r.promptTokens)
                            .arg(r.promptTokens - r.cachedTokens)
                      : tr("\n%1 of its prompt tokens came from the prefix cache").arg(r.cachedTokens);
    const ChartView::CellStyle firstPrefill =
        r.cachedTokens > 0 ? ChartView::CellStyle::Cached : ChartView::CellStyle::Solid;
    // The runs a preemption cut short, on the rows they held then.
    for (qsizetype k = 0; k < r.interrupted.size(); ++k) {
      const Request::Interrupted& i = r.interrupted[k];
      const int irow = static_cast<int>(i.lane);
      const QString iname = tr("request #%1 · slot %2").arg(id).arg(i.lane);
      // Evicted in the step that admitted it: the prefill and the mark share the step's cell.
      const double split = i.preempted == i.admitted ? static_cast<double>(i.admitted) : i.admitted + 0.5;
      out.push_back(
          {i.admitted - 0.5, split, irow, color, k == 0 ? firstPrefill : ChartView::CellStyle::Solid,
           QString(),
           tr("%1\nstep %2: admitted, prefill of its prompt and its first token").arg(iname).arg(i.admitted) +
               (k == 0 ? cacheNote : QString())});
      if (i.preempted - 1 > i.admitted)
        out.push_back({i.admitted + 0.5, i.preempted - 0.5, irow, color, ChartView::CellStyle::Tint,
                       QStringLiteral("#%1").arg(id),
                       tr("%1\ndecode, steps %2–%3").arg(iname).arg(i.admitted + 1).arg(i.preempted - 1)});
      out.push_back({std::max(split, i.preempted - 0.5), i.preempted + 0.5, irow, color,
                     ChartView::CellStyle::Preempted, QStringLiteral("✕"),
                     tr("%1\npreempted at step %2: the KV pool ran out, so this latest admitted request "
                        "gave its blocks back; its prompt and %3 tokens are recomputed when it is "
                        "admitted again")
                         .arg(iname)
                         .arg(i.preempted)
                         .arg(i.tokens)});
    }
    if (r.interrupted.isEmpty())
      prefillInfo += cacheNote;
    else
      prefillInfo += tr("\nreadmitted after %1 preemption(s): its prompt and tokens so far recomputed")
                         .arg(r.interrupted.size());
    if (r.chunks.size() > 1) {
      // Chunked prefill: a cell per piece of the prompt, each in the step that computed it.
      for (qsizetype k = 0; k < r.chunks.size(); ++k) {
        const Request::Chunk& c = r.chunks[k];
        QString info = tr("%1\nstep %2: chunk %3 of %4 of its prompt, positions %5–%6")
                           .arg(name)
                           .arg(c.step)
                           .arg(k + 1)
                           .arg(r.chunks.size())
                           .arg(c.start)
                           .arg(c.start + c.count - 1);
        if (k + 1 == r.chunks.size()) info += tr(", and its first token");
        if (c.step < steps_.size())
          info += tr("\nthe step took %1 ms, %2 ms of it for prompt chunks")
                      .arg(steps_[c.step].ms, 0, 'f', 2)
                      .arg(steps_[c.step].prefillMs, 0, 'f', 2);
        if (k == 0) info += r.interrupted.isEmpty() ? cacheNote : QString();
        out.push_back({c.step - 0.5, c.step + 0.5, row, color,
                       k == 0 && r.interrupted.isEmpty() ? firstPrefill : ChartView::CellStyle::Solid,
                       k == 0 ? QStringLiteral("%1").arg(r.chunks.size()) : QString(), info});
      }
    } else {
      out.push_back({r.admitted - 0.5, r.admitted + 0.5, row, color,
                     r.interrupted.isEmpty() ? firstPrefill : ChartView::CellStyle::Solid,
                     decode.empty() ? QStringLiteral("#%1").arg(id) : QString(), prefillInfo});
    }
    if (!decode.empty()) {
      out.push_back({decode.first - 0.5, decode.last + 0.5, row, color, ChartView::CellStyle::Tint,
                     QStringLiteral("#%1").arg(id),
                     tr("%1\ndecode, steps %2–%3 · %4 tokens so far")
                         .arg(name)
                         .arg(decode.first)
                         .arg(decode.last)
                         .arg(r.tokens)});
    }
    if (!padding.empty()) {
      out.push_back(
          {padding.first - 0.5, padding.last + 0.5, row, color, ChartView::CellStyle::Muted, QString(),
           tr("%1\nits last token came at step %2; the slot waits for the rest of its batch until step %3 "
              "(padding: computed, thrown away)")
               .arg(name)
               .arg(std::max(r.lastToken, r.admitted))
               .arg(padding.last)});
    }
  }
  return out;
}

}  // namespace servelab::ui
