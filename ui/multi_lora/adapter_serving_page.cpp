#include "multi_lora/adapter_serving_page.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include "chart_view.h"
#include "engine_controller.h"
#include "experiment_tab.h"
#include "form_widgets.h"
#include "multi_lora/adapter_list.h"
#include "multi_lora/batch_composer.h"
#include "text_format.h"

namespace servelab::ui {

namespace {

// The adapter-cache chart's series, in the order resetChart() adds them.
enum CacheSeries { CacheResident, CacheLoads, CacheHits, CacheEvictions, CacheInStep };
constexpr double kMB = 1e6;
const QString kBaseChoice = QStringLiteral("(base)");

// A counter of the adapter cache: the number large, its name under it.
QLabel* makeCounter(QWidget* parent, const QString& name, const QString& tip) {
  auto* l = new QLabel(parent);
  l->setObjectName(name);
  l->setToolTip(tip);
  l->setAlignment(Qt::AlignCenter);
  l->setTextFormat(Qt::RichText);
  l->setMinimumWidth(96);
  l->setFrameShape(QFrame::StyledPanel);
  l->setContentsMargins(6, 2, 6, 2);
  return l;
}

QString counterHtml(const QString& value, const QString& name) {
  return QStringLiteral("<span style='font-size:15pt; font-weight:bold'>%1</span><br>%2")
      .arg(value.toHtmlEscaped(), name.toHtmlEscaped());
}

}  // namespace

AdapterServingPage::AdapterServingPage(EngineController* engine, const AdapterList* adapters,
                                       const BatchComposer* composer, QWidget* parent)
    : QWidget(parent), engine_(engine), adapters_(adapters), composer_(composer) {
  requests_ = makeSpin(this, QStringLiteral("loraServeRequests"), 1, 1024, 16);
  maxBatch_ = makeSpin(this, QStringLiteral("loraServeMaxBatch"), 1, 256, 4);
  maxBatch_->setToolTip(tr("Requests that run at once (batch places)"));
  newTokens_ = makeSpin(this, QStringLiteral("loraServeNewTokens"), 1, 1000, 8);
  cacheCapacity_ = makeSpin(this, QStringLiteral("loraCacheCapacity"), 0, 1024, 2);
  cacheCapacity_->setSpecialValueText(tr("all"));
  cacheCapacity_->setToolTip(
      tr("Adapters held in memory at once. When it is full, the least recently used adapter that no running "
         "request needs is evicted; a request whose adapter cannot be loaded waits."));
  strategy_ = new QComboBox(this);
  strategy_->setObjectName(QStringLiteral("loraServeStrategy"));
  for (const std::string& s : servelab::multi_lora_strategy_names())
    strategy_->addItem(QString::fromStdString(s), QString::fromStdString(s));
  strategy_->setCurrentText(QStringLiteral("segmented"));
  run_ = new QPushButton(tr("Serve with adapters"), this);
  run_->setObjectName(QStringLiteral("loraServe"));
  run_->setToolTip(
      tr("Serve the requests by continuous batching, request i with adapter i mod n of the list (Ctrl+Return "
         "on this page)"));
  connect(run_, &QPushButton::clicked, this, [this] { serve(); });
  stop_ = new QPushButton(tr("Stop"), this);
  stop_->setObjectName(QStringLiteral("loraServeStop"));
  stop_->setEnabled(false);
  connect(stop_, &QPushButton::clicked, engine_, &EngineController::stop);

  QHBoxLayout* controls = makeControlRow(this, {{tr("Requests"), requests_},
                                                {tr("Max batch"), maxBatch_},
                                                {tr("New tokens"), newTokens_},
                                                {tr("Adapter cache"), cacheCapacity_},
                                                {tr("Strategy"), strategy_}});
  controls->addWidget(run_);
  controls->addWidget(stop_);
  controls->addStretch(1);

  adapterLine_ = new QLabel(this);
  adapterLine_->setObjectName(QStringLiteral("loraServeAdapters"));
  adapterLine_->setWordWrap(true);

  loads_ = makeCounter(this, QStringLiteral("loraCacheLoads"),
                       tr("Adapters read from a folder or made from a seed"));
  hits_ = makeCounter(this, QStringLiteral("loraCacheHits"), tr("Requests whose adapter was already loaded"));
  evictions_ = makeCounter(this, QStringLiteral("loraCacheEvictions"),
                           tr("Adapters dropped to make room for another one"));
  resident_ = makeCounter(this, QStringLiteral("loraCacheResident"), tr("Adapters loaded now / capacity"));
  inStep_ = makeCounter(this, QStringLiteral("loraAdaptersInStep"),
                        tr("Distinct adapters among the requests of the last step"));
  progress_ = new RunProgressBar(this, QStringLiteral("loraServeProgress"));
  auto* counters = new QHBoxLayout;
  for (QLabel* l : {loads_, hits_, evictions_, resident_, inStep_}) counters->addWidget(l);
  counters->addSpacing(8);
  auto* progressColumn = new QVBoxLayout;
  progressColumn->addWidget(progress_);
  summary_ = new QLabel(tr("Serve the queue to see the adapter cache at work."), this);
  summary_->setObjectName(QStringLiteral("loraServeSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  progressColumn->addWidget(summary_, 1);
  counters->addLayout(progressColumn, 1);

  cacheChart_ = new ChartView(this);
  cacheChart_->setObjectName(QStringLiteral("loraCacheChart"));
  cacheChart_->setTitle(tr("Adapter cache over scheduler steps"));
  cacheChart_->setAxisLabels(tr("scheduler step"), tr("adapters (count)"));
  cacheChart_->setIntegerTicks(true, true);
  cacheChart_->setLegendBelow(true);
  cacheChart_->setLegendColumns(3);
  resetChart();

  requestTable_ = makeCompactTable(this, QStringLiteral("loraRequests"),
                                   {tr("#"), tr("adapter"), tr("state"), tr("slot"), tr("admitted\n(step)"),
                                    tr("finished\n(step)"), tr("tokens"), tr("latency\n(ms)"), tr("text")});

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(cacheChart_);
  split->addWidget(requestTable_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  split->setSizes({520, 520});
  split->setChildrenCollapsible(false);

  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(controls);
  v->addWidget(adapterLine_);
  v->addLayout(counters);
  v->addWidget(split, 1);
  showCache({}, -1, 0);
}

void AdapterServingPage::setRequests(int n) { requests_->setValue(n); }
void AdapterServingPage::setMaxBatch(int n) { maxBatch_->setValue(n); }
void AdapterServingPage::setNewTokens(int n) { newTokens_->setValue(n); }
void AdapterServingPage::setCacheCapacity(int n) { cacheCapacity_->setValue(n); }
void AdapterServingPage::setStrategy(const QString& strategy) {
  const int i = strategy_->findData(strategy);
  if (i >= 0) strategy_->setCurrentIndex(i);
}
QString AdapterServingPage::summaryText() const { return summary_->text(); }

servelab::AdapterServingParams AdapterServingPage::params() const {
  servelab::AdapterServingParams p;
  p.prompt = composer_->prompt().toStdString();
  p.requests = requests_->value();
  p.new_tokens = newTokens_->value();
  p.max_batch = maxBatch_->value();
  for (const servelab::AdapterSource& s : adapters_->sources()) p.adapters.push_back(s);
  p.random_adapters = composer_->randomCount();
  p.random_rank = composer_->randomRank();
  p.cache_capacity = cacheCapacity_->value();
  p.strategy = servelab::parse_multi_lora_strategy(strategy_->currentData().toString().toStdString());
  return p;
}

void AdapterServingPage::setModel(const ModelSummary& model) {
  model_ = model;
  cacheChart_->setFootnote(chartFootnote(model));
  if (model.positions > 1) newTokens_->setMaximum(std::max(1, model.positions - 1));
}

void AdapterServingPage::setRunning(bool running) {
  run_->setEnabled(!running);
  stop_->setEnabled(running);
}

bool AdapterServingPage::serve() {
  if (adapters_->joining() > 0) {
    summary_->setText(tr("<b>Cannot serve yet:</b> adapters are still being loaded."));
    return false;
  }
  const servelab::AdapterServingParams p = params();
  EngineJob* job = engine_->submit(tr("serving with adapters"), [p](JobContext& c) {
    return servelab::run_adapter_serving(c.engine(), p, c.control());
  });
  if (!job) return false;
  connect(job, &EngineJob::batchRunStarted, this,
          [this](const QString&, qint64 n, qint64 slots) { onRunStarted(n, slots); });
  connect(job, &EngineJob::batchAdmitted, this,
          [this](qint64 r, qint64 slot, qint64 step, double) { onAdmitted(r, slot, step); });
  connect(job, &EngineJob::batchRetired, this, &AdapterServingPage::onRetired);
  connect(job, &EngineJob::batchStep, this, &AdapterServingPage::onStep);
  job->onResult<servelab::AdapterServingResult>(this, [this](const auto& r) { onFinished(r); });
  connect(job, &EngineJob::failed, this, &AdapterServingPage::onFailed);
  Q_EMIT started();
  setRunning(true);

  serving_ = p;
  hasResult_ = false;
  liveCache_ = servelab::AdapterCacheStats{};
  liveCache_.capacity = p.cache_capacity;
  const std::vector<std::string> requestAdapters = servelab::adapter_serving_assignment(p);
  const std::vector<servelab::AdapterSource> adapters = servelab::adapter_serving_adapters(p);
  requestsTotal_ = static_cast<qint64>(requestAdapters.size());
  retired_ = 0;
  resetChart();
  requestTable_->clearContents();
  requestTable_->setRowCount(static_cast<int>(requestAdapters.size()));
  for (int i = 0; i < requestTable_->rowCount(); ++i) {
    const QString adapter = QString::fromStdString(requestAdapters[size_t(i)]);
    setRequestRow(i, {QString::number(i), adapter.isEmpty() ? kBaseChoice : adapter, tr("waiting"), QString(),
                      QString(), QString(), QString(), QString(), QString()});
  }
  showCache(liveCache_, -1, 0);
  QStringList names;
  for (const servelab::AdapterSource& s : adapters) names << QString::fromStdString(s.name);
  adapterLine_->setText(tr("%1 requests, request i with adapter i mod %2: %3%4")
                            .arg(requestAdapters.size())
                            .arg(adapters.size())
                            .arg(names.mid(0, 8).join(QStringLiteral(", ")).toHtmlEscaped(),
                                 names.size() > 8 ? QStringLiteral(", …") : QString()) +
                        (adapters_->count() == 0 ? tr(" (random: the list is empty)") : QString()));
  progress_->start();
  summary_->setText(tr("Serving %1 requests of %2 tokens in batches of %3, adapter cache %4, %5…")
                        .arg(requestAdapters.size())
                        .arg(p.new_tokens)
                        .arg(p.max_batch)
                        .arg(p.cache_capacity > 0 ? QString::number(p.cache_capacity) : tr("unbounded"),
                             strategy_->currentText()));
  return true;
}

void AdapterServingPage::onFailed(const QString& kind, const QString& message) {
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The counters and requests so far stay on screen."));
  setRunning(false);
  Q_EMIT finished(false, message);
}

void AdapterServingPage::setRequestRow(int row, const QStringList& cells) {
  for (int c = 0; c < cells.size(); ++c) {
    if (cells[c].isNull() && requestTable_->item(row, c)) continue;  // keep what is there
    requestTable_->setItem(row, c, tableCell(cells[c], c != 1 && c != 2 && c != 8));
  }
}

void AdapterServingPage::resetChart() {
  cacheChart_->clearAll();
  // The adapters resident as a filled area under the counters: it often equals the adapters a step
  // runs, which a line would hide.
  cacheChart_->setSeriesStyle(cacheChart_->addSeries(tr("resident")), ChartView::SeriesStyle::Steps);
  for (const QString& s : {tr("loads"), tr("hits"), tr("evictions"), tr("adapters in step")})
    cacheChart_->addSeries(s);
}

void AdapterServingPage::onRunStarted(qint64 requests, qint64 slots) {
  progress_->setFormat(tr("%1 requests, %2 slots · %p%").arg(requests).arg(slots));
}

void AdapterServingPage::onAdmitted(qint64 request, qint64 slot, qint64 step) {
  if (request < 0 || request >= requestTable_->rowCount()) return;
  setRequestRow(static_cast<int>(request),
                {QString(), QString(), tr("running"), QString::number(slot), QString::number(step)});
}

void AdapterServingPage::onRetired(const servelab::RequestResult& r) {
  if (r.id < 0 || r.id >= requestTable_->rowCount()) return;
  QString text = QString::fromStdString(r.text);
  text.replace(QLatin1Char('\n'), QStringLiteral("\u21b5"));
  setRequestRow(static_cast<int>(r.id),
                {QString::number(r.id), r.adapter.empty() ? kBaseChoice : QString::fromStdString(r.adapter),
                 QString::fromStdString(r.finish_reason), QString::number(r.slot),
                 QString::number(r.admitted_step), QString::number(r.finished_step),
                 QString::number(static_cast<qint64>(r.generated_ids.size())), formatMs(r.latency_ms), text});
  ++retired_;
  if (requestsTotal_ > 0) {
    progress_->setValue(static_cast<int>(1000 * retired_ / requestsTotal_));
    progress_->setFormat(tr("%1 of %2 requests done · %p%").arg(retired_).arg(requestsTotal_));
  }
}

void AdapterServingPage::showCache(const servelab::AdapterCacheStats& c, qint64 step, qint64 adaptersInStep) {
  loads_->setText(counterHtml(QString::number(c.loads), tr("loads")));
  hits_->setText(counterHtml(QString::number(c.hits), tr("hits")));
  evictions_->setText(counterHtml(QString::number(c.evictions), tr("evictions")));
  resident_->setText(counterHtml(
      QStringLiteral("%1 / %2").arg(c.resident).arg(c.capacity > 0 ? QString::number(c.capacity) : tr("all")),
      c.resident_bytes > 0
          ? tr("resident (%1 MB)").arg(static_cast<double>(c.resident_bytes) / kMB, 0, 'f', 1)
          : tr("resident / capacity")));
  inStep_->setText(counterHtml(step >= 0 ? QString::number(adaptersInStep) : QStringLiteral("–"),
                               step >= 0 ? tr("adapters in step %1").arg(step) : tr("adapters in step")));
}

void AdapterServingPage::onStep(const servelab::BatchStep& s) {
  liveCache_ = s.adapter_cache;
  showCache(s.adapter_cache, s.step, s.adapters_in_step);
  const double x = static_cast<double>(s.step);
  cacheChart_->append(CacheLoads, x, static_cast<double>(s.adapter_cache.loads));
  cacheChart_->append(CacheHits, x, static_cast<double>(s.adapter_cache.hits));
  cacheChart_->append(CacheEvictions, x, static_cast<double>(s.adapter_cache.evictions));
  cacheChart_->append(CacheResident, x, static_cast<double>(s.adapter_cache.resident));
  cacheChart_->append(CacheInStep, x, static_cast<double>(s.adapters_in_step));
}

void AdapterServingPage::onFinished(const servelab::AdapterServingResult& result) {
  result_ = result;
  hasResult_ = true;
  const servelab::BatchRunResult& r = result.run;
  liveCache_ = r.adapter_cache;
  // Drawn again from the result: exactly what is reported.
  QVector<double> steps, loads, hits, evictions, resident, inStep;
  for (const servelab::BatchStep& s : r.steps) {
    steps << static_cast<double>(s.step);
    loads << static_cast<double>(s.adapter_cache.loads);
    hits << static_cast<double>(s.adapter_cache.hits);
    evictions << static_cast<double>(s.adapter_cache.evictions);
    resident << static_cast<double>(s.adapter_cache.resident);
    inStep << static_cast<double>(s.adapters_in_step);
  }
  cacheChart_->setSeriesData(CacheLoads, steps, loads);
  cacheChart_->setSeriesData(CacheHits, steps, hits);
  cacheChart_->setSeriesData(CacheEvictions, steps, evictions);
  cacheChart_->setSeriesData(CacheResident, steps, resident);
  cacheChart_->setSeriesData(CacheInStep, steps, inStep);
  cacheChart_->rescale();
  cacheChart_->setFootnote(tr("%1 requests, max batch %2, strategy %3")
                               .arg(r.requests.size())
                               .arg(serving_.max_batch)
                               .arg(QString::fromStdString(result.strategy)) +
                           QStringLiteral(" · ") + chartFootnote(model_));
  showCache(r.adapter_cache, r.steps.empty() ? -1 : r.steps.back().step,
            r.steps.empty() ? 0 : r.steps.back().adapters_in_step);
  for (const servelab::RequestResult& rr : r.requests) onRetired(rr);
  retired_ = static_cast<qint64>(r.requests.size());

  const servelab::AdapterCacheStats& c = r.adapter_cache;
  double tokensPerS = r.total_ms > 0 ? 1000.0 * static_cast<double>(r.generated_tokens) / r.total_ms : 0;
  summary_->setText(
      tr("<b>%1 requests served in %2 ms</b> (%3 tokens/s, %4 steps, %5 rows per forward pass on average). "
         "Adapter cache of %6: <b>%7 loads, %8 hits, %9 evictions</b>.")
          .arg(r.requests.size())
          .arg(formatMs(r.total_ms))
          .arg(tokensPerS, 0, 'f', 0)
          .arg(r.steps.size())
          .arg(r.average_batch, 0, 'f', 1)
          .arg(c.capacity > 0 ? QString::number(c.capacity) : tr("every adapter"))
          .arg(c.loads)
          .arg(c.hits)
          .arg(c.evictions));
  progress_->finish();
  setRunning(false);
  Q_EMIT finished(true, QString());
}

QJsonObject AdapterServingPage::report() const {
  if (!hasResult_) return {};
  const servelab::BatchRunResult& run = result_.run;
  QJsonObject serve;
  const servelab::AdapterCacheStats& c = run.adapter_cache;
  serve[QStringLiteral("adapter_cache")] =
      QJsonObject{{QStringLiteral("capacity"), static_cast<qint64>(c.capacity)},
                  {QStringLiteral("loads"), static_cast<qint64>(c.loads)},
                  {QStringLiteral("hits"), static_cast<qint64>(c.hits)},
                  {QStringLiteral("evictions"), static_cast<qint64>(c.evictions)},
                  {QStringLiteral("resident"), static_cast<qint64>(c.resident)},
                  {QStringLiteral("resident_bytes"), static_cast<qint64>(c.resident_bytes)}};
  serve[QStringLiteral("strategy")] = QString::fromStdString(result_.strategy);
  serve[QStringLiteral("total_ms")] = run.total_ms;
  serve[QStringLiteral("steps")] = static_cast<qint64>(run.steps.size());
  QJsonArray requests;
  for (const servelab::RequestResult& r : run.requests)
    requests.append(QJsonObject{{QStringLiteral("id"), static_cast<qint64>(r.id)},
                                {QStringLiteral("adapter"), QString::fromStdString(r.adapter)},
                                {QStringLiteral("text"), QString::fromStdString(r.text)},
                                {QStringLiteral("latency_ms"), r.latency_ms}});
  serve[QStringLiteral("requests")] = requests;
  return serve;
}

void AdapterServingPage::loadSettings(QSettings& s) {
  const auto spin = [&s](QSpinBox* box, const char* key) { loadSpin(s, QLatin1String(key), box); };
  spin(requests_, "serveRequests");
  spin(maxBatch_, "serveMaxBatch");
  spin(newTokens_, "serveNewTokens");
  spin(cacheCapacity_, "cacheCapacity");
  if (const auto strategy = settingChoice(s, QStringLiteral("serveStrategy"), comboData(strategy_)))
    setStrategy(*strategy);
}

void AdapterServingPage::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("serveRequests"), requests_->value());
  s.setValue(QStringLiteral("serveMaxBatch"), maxBatch_->value());
  s.setValue(QStringLiteral("serveNewTokens"), newTokens_->value());
  s.setValue(QStringLiteral("cacheCapacity"), cacheCapacity_->value());
  s.setValue(QStringLiteral("serveStrategy"), strategy_->currentData().toString());
}

}  // namespace servelab::ui
