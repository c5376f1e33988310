#include "continuous_tab.h"

#include <QComboBox>
#include <QEvent>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextEdit>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <utility>

#include "chart_view.h"
#include "continuous/kv_memory_view.h"
#include "continuous/long_prompt.h"
#include "continuous/request_queue_form.h"
#include "continuous/result_tables.h"
#include "continuous/result_values.h"
#include "continuous/run_summary.h"
#include "engine_controller.h"
#include "form_widgets.h"
#include "text_format.h"

namespace servelab::ui {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kFlushMs = 100;  // live views redraw at most 10 times a second
const QString kCoursePrefix = QStringLiteral("course benchmark · ");

// The shared table plus centred headers.
QTableWidget* makeCentredTable(QWidget* parent, const QString& name, const QStringList& headers) {
  QTableWidget* t = makeTable(parent, name, headers);
  t->horizontalHeader()->setDefaultAlignment(Qt::AlignCenter);
  return t;
}

// The stream shows one line per request: line breaks inside a text are drawn as a symbol.
QString streamable(const QString& piece) {
  QString s = piece;
  s.replace(QLatin1Char('\r'), QString());
  s.replace(QLatin1Char('\n'), QStringLiteral("\u21b5"));
  s.replace(QChar::ParagraphSeparator, QStringLiteral("\u21b5"));
  s.replace(QChar::LineSeparator, QStringLiteral("\u21b5"));
  return s;
}

}  // namespace

ContinuousTab::ContinuousTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  // --- Request queue ---
  queue_ = new RequestQueueForm(this);
  QHBoxLayout* buttons =
      makeRunButtons(QStringLiteral("continuous"),
                     tr("Serve the queue synchronously, then with continuous batching (Ctrl+Return)"));
  progress_ = new RunProgressBar(this, QStringLiteral("continuousProgress"));
  summary_ = new QLabel(tr("Run to serve the queue both ways."), this);
  summary_->setObjectName(QStringLiteral("continuousSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* presetFit = new QPushButton(tr("How many requests fit in N MB?"), this);
  presetFit->setObjectName(QStringLiteral("continuousPresetFit"));
  presetFit->setToolTip(
      tr("One queue served by slot KV and by paged KV under the same KV budget (the budget box; "
         "%1 MB when it is 0): how many requests each holds at once")
          .arg(kPresetBudgetMb));
  connect(presetFit, &QPushButton::clicked, this, [this] { runPreset(Preset::FitInBudget); });
  auto* presetShared = new QPushButton(tr("Shared system prompt"), this);
  presetShared->setObjectName(QStringLiteral("continuousPresetShared"));
  presetShared->setToolTip(
      tr("Requests whose prompts share a long system prompt, served by paged KV without and with "
         "prefix caching: cache hits and time to first token"));
  connect(presetShared, &QPushButton::clicked, this, [this] { runPreset(Preset::SharedSystemPrompt); });
  auto* presetLong = new QPushButton(tr("Long prompt arrives (chunked prefill)"), this);
  presetLong->setObjectName(QStringLiteral("continuousPresetLongPrompt"));
  presetLong->setToolTip(
      tr("Four streams are decoding when a long prompt joins: served without a token budget (its whole "
         "prefill in one step) and with the budget box's (decodes first, the prompt in chunks)"));
  connect(presetLong, &QPushButton::clicked, this, [this] { runLongPrompt(); });
  auto* presets = new QVBoxLayout;
  presets->setSpacing(2);
  presets->addWidget(new QLabel(tr("Experiment presets (set the queue, then run):"), this));
  presets->addWidget(presetFit);
  presets->addWidget(presetShared);
  presets->addWidget(presetLong);
  auto* queueBox = new QGroupBox(tr("Request queue"), this);
  auto* qv = new QVBoxLayout(queueBox);
  qv->addLayout(presets);
  qv->addWidget(queue_);
  qv->addLayout(buttons);
  qv->addWidget(progress_);
  qv->addWidget(summary_);

  // --- Course benchmark ---
  courseQueries_ = makeSpin(this, QStringLiteral("courseQueries"), 1, 10000, 100);
  courseNewTokens_ = makeSpin(this, QStringLiteral("courseNewTokens"), 1, 1000, 64);
  courseMaxBatch_ = makeSpin(this, QStringLiteral("courseMaxBatch"), 1, 512, 32);
  courseRun_ = new QPushButton(tr("Run course benchmark"), this);
  courseRun_->setObjectName(QStringLiteral("continuousCourseRun"));
  courseRun_->setToolTip(
      tr("The course's table: every query alone with the KV cache, then all of them through "
         "continuous batching (Stop ends it)"));
  connect(courseRun_, &QPushButton::clicked, this, [this] { runCourseBenchmark(); });
  QHBoxLayout* courseForm = makeControlRow(this, {{tr("Queries"), courseQueries_},
                                                  {tr("New tokens"), courseNewTokens_},
                                                  {tr("Max batch"), courseMaxBatch_}});
  courseForm->addWidget(courseRun_);
  courseForm->addStretch(1);
  QScrollArea* leftScroll = makeSidePanel(this, {queueBox}, 300, 360);

  // --- Gantt ---
  selector_ = new QComboBox(this);
  selector_->setObjectName(QStringLiteral("continuousTimelineSelector"));
  selector_->setToolTip(tr("Which run's timeline to show"));
  selector_->setMinimumContentsLength(26);
  selector_->setEnabled(false);
  selector_->setPlaceholderText(tr("the stopped run"));
  connect(selector_, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (!running_ && i >= 0) showTimeline(i);
  });
  auto* caption = new QLabel(
      tr("One row per batch slot, one column per scheduler step, a colour per request. Hover a cell for "
         "details."),
      this);
  caption->setWordWrap(true);
  caption->setObjectName(QStringLiteral("continuousGanttCaption"));
  QFont small = caption->font();
  small.setPointSizeF(small.pointSizeF() * 0.92);
  caption->setFont(small);
  gantt_ = new ChartView(this);
  gantt_->setObjectName(QStringLiteral("continuousGantt"));
  gantt_->setTitle(tr("Requests over scheduler steps"));
  gantt_->setAxisLabels(tr("scheduler step"), QString());
  gantt_->setCellRows(BatchTimeline().rowLabels());
  gantt_->setCellKeys(BatchTimeline::legend());
  gantt_->setLegendColumns(static_cast<int>(BatchTimeline::legend().size()));
  auto* selectorRow = new QHBoxLayout;
  selectorRow->addWidget(new QLabel(tr("Timeline of"), this));
  selectorRow->addWidget(selector_);
  selectorRow->addWidget(caption, 1);
  auto* ganttPanel = new QWidget(this);
  auto* gv = new QVBoxLayout(ganttPanel);
  gv->setContentsMargins(0, 0, 0, 0);
  gv->setSpacing(2);
  gv->addLayout(selectorRow);
  gv->addWidget(gantt_, 1);

  // --- Token stream, occupancy, latency ---
  stream_ = new QTextEdit(this);
  stream_->setObjectName(QStringLiteral("continuousTokens"));
  stream_->setReadOnly(true);
  stream_->setUndoRedoEnabled(false);
  stream_->setPlaceholderText(tr("Each request's text streams here in its own colour."));
  occupancy_ = new ChartView(this);
  occupancy_->setObjectName(QStringLiteral("continuousOccupancy"));
  occupancy_->setTitle(tr("Batch occupancy"));
  occupancy_->setAxisLabels(tr("scheduler step"), tr("requests generating"));
  occupancy_->setIntegerTicks(true, true);
  latency_ = new ChartView(this);
  latency_->setObjectName(QStringLiteral("continuousLatency"));
  latency_->setTitle(tr("Latency per request"));
  latency_->setAxisLabels(tr("request"), tr("latency (ms)"));
  latency_->setIntegerTicks(true, false);
  chartTabs_ = new QTabWidget(this);
  chartTabs_->setObjectName(QStringLiteral("continuousCharts"));
  chartTabs_->setDocumentMode(true);
  chartTabs_->addTab(occupancy_, tr("Batch occupancy"));
  chartTabs_->addTab(latency_, tr("Latency per request"));
  kvView_ = new KvMemoryView(this);
  chartTabs_->addTab(kvView_, tr("KV memory"));
  kvUsage_ = new ChartView(this);
  kvUsage_->setObjectName(QStringLiteral("continuousKvUsage"));
  kvUsage_->setTitle(tr("KV memory held vs used"));
  kvUsage_->setAxisLabels(tr("scheduler step"), tr("KV memory (MiB)"));
  kvUsage_->setLegendBelow(true);
  chartTabs_->addTab(kvUsage_, tr("KV utilisation"));
  itl_ = new ChartView(this);
  setupItlChart(itl_);
  chartTabs_->addTab(itl_, tr("Inter-token latency"));

  // --- Results ---
  comparison_ = makeCentredTable(this, QStringLiteral("continuousComparison"), {});
  comparison_->verticalHeader()->setVisible(true);
  comparison_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  comparison_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  comparison_->setSelectionBehavior(QAbstractItemView::SelectItems);
  courseTable_ =
      makeCentredTable(this, QStringLiteral("continuousCourseTable"),
                       {tr("method"), tr("queries"), tr("time (s)"), tr("throughput\nvs baseline"),
                        tr("max\nbatch"), tr("avg\nbatch"), tr("generated\ntokens"), tr("inference\ncalls")});
  courseTable_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  auto* coursePage = new QWidget(this);
  auto* courseLayout = new QVBoxLayout(coursePage);
  courseLayout->setContentsMargins(4, 4, 4, 4);
  courseLayout->addLayout(courseForm);
  courseLayout->addWidget(courseTable_, 1);
  resultTabs_ = new QTabWidget(this);
  resultTabs_->setObjectName(QStringLiteral("continuousResults"));
  resultTabs_->setDocumentMode(true);
  resultTabs_->addTab(stream_, tr("Token stream"));
  resultTabs_->addTab(comparison_, tr("Synchronous vs continuous"));
  resultTabs_->addTab(coursePage, tr("Course benchmark"));

  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->addWidget(resultTabs_);
  bottom->addWidget(chartTabs_);
  bottom->setStretchFactor(0, 9);
  bottom->setStretchFactor(1, 11);
  bottom->setSizes({450, 550});
  bottom->setChildrenCollapsible(false);
  auto* right = new QSplitter(Qt::Vertical, this);
  right->addWidget(ganttPanel);
  right->addWidget(bottom);
  right->setStretchFactor(0, 1);
  right->setStretchFactor(1, 1);
  right->setChildrenCollapsible(false);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(leftScroll);
  layout->addWidget(right, 1);

  flushTimer_ = new QTimer(this);
  flushTimer_->setSingleShot(true);
  flushTimer_->setInterval(kFlushMs);
  connect(flushTimer_, &QTimer::timeout, this, &ContinuousTab::flush);
}

// --- Parameters ------------------------------------------------------------------------------

void ContinuousTab::setPrompt(const QString& prompt) { queue_->setPrompt(prompt); }
void ContinuousTab::setRequests(int n) { queue_->setRequests(n); }
void ContinuousTab::setMaxBatch(int n) { queue_->setMaxBatch(n); }
void ContinuousTab::setTokenBudget(int tokens) { queue_->setTokenBudget(tokens); }
void ContinuousTab::setLongEvery(int n) { queue_->setLongEvery(n); }
void ContinuousTab::setLongTokens(int n) { queue_->setLongTokens(n); }
void ContinuousTab::setShortTokens(int n) { queue_->setShortTokens(n); }
void ContinuousTab::setPromptTokens(int min, int max) { queue_->setPromptTokens(min, max); }
void ContinuousTab::setArrivalRate(double perSecond) { queue_->setArrivalRate(perSecond); }
void ContinuousTab::setSeed(int seed) { queue_->setSeed(seed); }
void ContinuousTab::setNaive(bool on) { queue_->setNaive(on); }
void ContinuousTab::setPaged(bool on, int blockSize, double budgetMb, bool prefixCaching) {
  queue_->setPaged(on, blockSize, budgetMb, prefixCaching);
}
void ContinuousTab::setSlotsInBudget(bool on) { queue_->setSlotsInBudget(on); }
void ContinuousTab::setPagedUncachedToo(bool on) { queue_->setPagedUncachedToo(on); }
void ContinuousTab::setCourseQueries(int n) { courseQueries_->setValue(n); }
void ContinuousTab::setCourseNewTokens(int n) { courseNewTokens_->setValue(n); }
void ContinuousTab::setCourseMaxBatch(int n) { courseMaxBatch_->setValue(n); }
QString ContinuousTab::summaryText() const { return summary_->text(); }
QString ContinuousTab::streamText() const { return stream_->toPlainText(); }

servelab::SyncVsContinuousParams ContinuousTab::params() const { return queue_->params(); }

servelab::CourseBenchmarkParams ContinuousTab::courseParams() const {
  servelab::CourseBenchmarkParams p;
  p.queries = courseQueries_->value();
  p.new_tokens = courseNewTokens_->value();
  p.max_batch = courseMaxBatch_->value();
  return p;
}

void ContinuousTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  queue_->setModel(model);
  if (model.positions > 1) courseNewTokens_->setMaximum(model.positions - 1);
}

// --- Runs ------------------------------------------------------------------------------------

void ContinuousTab::applyPreset(Preset preset) {
  setArrivalRate(0);
  setSeed(42);
  setNaive(false);
  if (preset == Preset::FitInBudget) {
    // The course's mix of short and long requests: slot KV reserves the longest for each of them.
    const double budget = params().kv_budget_mb > 0 ? params().kv_budget_mb : kPresetBudgetMb;
    setPrompt(QStringLiteral("The quick brown fox jumped over the"));
    setRequests(24);
    setMaxBatch(16);
    setLongEvery(6);
    setLongTokens(48);
    setShortTokens(8);
    setPromptTokens(4, 20);
    // No prefix caching: the prompts repeat one sentence, and hits would blur the memory contrast.
    setPaged(true, 16, budget, false);
    setSlotsInBudget(true);
    setPagedUncachedToo(false);
  } else {
    // Every prompt is the system prompt repeated to 128-160 tokens: the first 128 are shared.
    setPrompt(QStringLiteral(
        "You are a careful assistant for a university library. Answer in plain words, cite the "
        "catalogue entry you used, and say so when you do not know."));
    setRequests(16);
    setMaxBatch(4);
    setLongEvery(4);
    setLongTokens(24);
    setShortTokens(8);
    setPromptTokens(128, 160);
    setPaged(true, 16, 0, true);
    setSlotsInBudget(false);
    setPagedUncachedToo(true);
  }
}

bool ContinuousTab::runPreset(Preset preset) {
  if (running_) return false;
  applyPreset(preset);
  return run();
}

bool ContinuousTab::run() {
  EngineJob* job = engine_->submit(tr("synchronous vs continuous batching"), [p = params()](JobContext& c) {
    return servelab::run_sync_vs_continuous(c.engine(), p, c.control());
  });
  if (!job) return false;
  job->onResult<servelab::SyncVsContinuousResult>(this, [this](const auto& r) { onCompareFinished(r); });
  return startJob(Job::Compare, job);
}

bool ContinuousTab::runCourseBenchmark() {
  EngineJob* job = engine_->submit(tr("the course benchmark"), [p = courseParams()](JobContext& c) {
    return servelab::run_course_benchmark(c.engine(), p, c.control());
  });
  if (!job) return false;
  job->onResult<servelab::CourseBenchmarkResult>(this, [this](const auto& r) { onCourseFinished(r); });
  return startJob(Job::Course, job);
}

QStringList ContinuousTab::presetIds() const {
  return {QStringLiteral("fit-in-budget"), QStringLiteral("shared-system-prompt"),
          QStringLiteral("long-prompt")};
}

bool ContinuousTab::runPresetId(const QString& id) {
  if (id == QLatin1String("fit-in-budget")) return runPreset(Preset::FitInBudget);
  if (id == QLatin1String("shared-system-prompt")) return runPreset(Preset::SharedSystemPrompt);
  if (id == QLatin1String("long-prompt")) return runLongPrompt();
  return refuseRun(tr("no preset \"%1\" (presets: %2)").arg(id, presetIds().join(QStringLiteral(", "))));
}

bool ContinuousTab::runLongPrompt() {
  const servelab::ChunkedPrefillParams p =
      longPromptParams(static_cast<int>(params().max_num_batched_tokens), model_.positions);
  EngineJob* job = engine_->submit(tr("chunked prefill: a long prompt arrives"), [p](JobContext& c) {
    return servelab::run_chunked_prefill(c.engine(), p, c.control());
  });
  if (!job) return false;
  job->onResult<servelab::ChunkedPrefillResult>(this, [this](const auto& r) { onLongPromptFinished(r); });
  return startJob(Job::LongPrompt, job);
}

bool ContinuousTab::startJob(Job job, EngineJob* engineJob) {
  connect(engineJob, &EngineJob::batchRunStarted, this, &ContinuousTab::onRunStarted);
  connect(engineJob, &EngineJob::batchAdmitted, this,
          [this](qint64 r, qint64 slot, qint64 step, double) { onAdmitted(r, slot, step); });
  connect(engineJob, &EngineJob::batchToken, this,
          [this](qint64 r, int, const QString& piece, qint64 step, double) { onToken(r, piece, step); });
  connect(engineJob, &EngineJob::batchRetired, this, &ContinuousTab::onRetired);
  connect(engineJob, &EngineJob::batchStep, this, &ContinuousTab::onStep);
  connect(engineJob, &EngineJob::batchPrefixHit, this, [this](qint64 r, qint64 cached, qint64) {
    live_.prefixHit(r, cached);
    timelineDirty_ = true;
    scheduleFlush();
  });
  connect(engineJob, &EngineJob::failed, this, &ContinuousTab::onFailed);
  progress_->follow(engineJob);
  runStarted();
  job_ = job;
  courseRun_->setEnabled(false);
  lastError_.clear();
  flushTimer_->stop();
  timelineDirty_ = false;
  pendingAny_ = false;
  if (job == Job::Compare) {
    hasResult_ = false;
    occupancy_->clearAll();
    latency_->clearAll();
    kvUsage_->clearAll();
  } else if (job == Job::Course) {
    hasCourseResult_ = false;
  } else {
    hasLongPrompt_ = false;
    itl_->clearAll();
  }
  selector_->blockSignals(true);
  selector_->clear();
  selector_->addItem(tr("the run in progress"));
  selector_->blockSignals(false);
  selector_->setEnabled(false);
  progress_->start();
  if (job == Job::Compare) {
    const servelab::SyncVsContinuousParams p = params();
    summary_->setText(tr("Serving %1 requests (every %2th long: %3 tokens, the others %4) in batches of %5…")
                          .arg(p.requests)
                          .arg(p.long_every)
                          .arg(p.long_tokens)
                          .arg(p.short_tokens)
                          .arg(p.max_batch));
  } else if (job == Job::LongPrompt) {
    summary_->setText(
        tr("Four streams decoding, then a long prompt arrives: served without a token budget, "
           "then with one…"));
  } else {
    // The baseline sends no batch events: say so until the batched run starts.
    drawTimeline(BatchTimeline(), tr("course benchmark, the baseline first (one query at a time)"));
    resetStream({});
    summary_->setText(tr("Course benchmark: %1 queries of %2 tokens, one at a time, then batched (max %3)…")
                          .arg(courseQueries_->value())
                          .arg(courseNewTokens_->value())
                          .arg(courseMaxBatch_->value()));
  }
  resultTabs_->setCurrentWidget(stream_);
  return true;
}

QString ContinuousTab::seriesFor(const QString& method) const {
  return job_ == Job::Course ? kCoursePrefix + method : method;
}

int ContinuousTab::ensureSeries(ChartView* chart, const QString& name) {
  const int i = chart->seriesIndex(name);
  return i >= 0 ? i : chart->addSeries(name);
}

void ContinuousTab::onRunStarted(const QString& method, qint64 requests, qint64 slots) {
  flush();  // the previous run's last events
  live_.start(method, requests, slots);
  kvView_->clear();
  liveTexts_ = QStringList(requests, QString());
  pendingText_ = QVector<QString>(requests);
  drawTimeline(live_, tr("%1 (running)").arg(seriesFor(method)));
  resetStream(liveTexts_);
  occupancy_->clearSeries(ensureSeries(occupancy_, seriesFor(method)));
  if (job_ == Job::Compare) latency_->clearSeries(ensureSeries(latency_, seriesFor(method)));
  selector_->setItemText(0, tr("%1 (running)").arg(seriesFor(method)));
}

void ContinuousTab::onAdmitted(qint64 request, qint64 slot, qint64 step) {
  live_.admit(request, slot, step);
  timelineDirty_ = true;
  scheduleFlush();
}

void ContinuousTab::onToken(qint64 request, const QString& piece, qint64 step) {
  live_.token(request, step);
  if (request >= 0 && request < pendingText_.size()) {
    liveTexts_[request] += piece;
    pendingText_[request] += piece;
    pendingAny_ = pendingAny_ || !piece.isEmpty();
  }
  timelineDirty_ = true;
  scheduleFlush();
}

void ContinuousTab::onRetired(const servelab::RequestResult& r) {
  live_.retire(r);
  if (job_ == Job::Compare) {
    latency_->append(ensureSeries(latency_, seriesFor(live_.method())), static_cast<double>(r.id),
                     r.latency_ms);
  }
  timelineDirty_ = true;
  scheduleFlush();
}

void ContinuousTab::onStep(const servelab::BatchStep& s) {
  live_.step(s);
  if (s.kv_blocks_total > 0) {
    if (kvView_->step() < 0) chartTabs_->setCurrentWidget(kvView_);
    kvView_->showStep(s);
  }
  if (job_ == Job::Compare) appendKvUsage(live_.method(), s);
  if (s.step >= 0 && s.step < live_.occupancy().size()) {
    occupancy_->append(ensureSeries(occupancy_, seriesFor(live_.method())), static_cast<double>(s.step),
                       live_.occupancy()[s.step]);
  }
  timelineDirty_ = true;
  scheduleFlush();
}

QString ContinuousTab::kvUsageSeries(const QString& method, bool used) {
  // Every series here is continuous batching, and the chart sits in a narrow panel: "continuous
  // (paged KV)" is "paged KV" in its legend.
  QString m = method;
  const QString prefix = QStringLiteral("continuous (");
  if (m.startsWith(prefix) && m.endsWith(QLatin1Char(')'))) m = m.mid(prefix.size()).chopped(1);
  return used ? tr("%1: used").arg(m) : tr("%1: held").arg(m);
}

void ContinuousTab::appendKvUsage(const QString& method, const servelab::BatchStep& s) {
  // Synchronous batching keeps no running batch's memory worth comparing.
  if (s.kv_total_bytes <= 0 || method == QLatin1String("synchronous")) return;
  const double x = static_cast<double>(s.step);
  kvUsage_->append(ensureSeries(kvUsage_, kvUsageSeries(method, false)), x,
                   static_cast<double>(s.kv_reserved_bytes) / kMiB);
  kvUsage_->append(ensureSeries(kvUsage_, kvUsageSeries(method, true)), x,
                   static_cast<double>(s.kv_used_bytes) / kMiB);
}

void ContinuousTab::scheduleFlush() {
  if (!flushTimer_->isActive()) flushTimer_->start();
}

void ContinuousTab::flush() {
  flushTimer_->stop();
  if (timelineDirty_) {
    timelineDirty_ = false;
    drawn_ = live_;
    gantt_->setCells(live_.cells());
  }
  flushStream();
}

void ContinuousTab::drawTimeline(const BatchTimeline& timeline, const QString& title) {
  drawn_ = timeline;
  gantt_->setCellRows(timeline.rowLabels());
  gantt_->setCells(timeline.cells());
  gantt_->setTitle(tr("Requests over scheduler steps: %1").arg(title));
  gantt_->rescale();
}

// --- Token stream ----------------------------------------------------------------------------

namespace {

QColor streamColor(qint64 request, bool dark) {
  const float hue = std::max(0.0f, BatchTimeline::requestColor(request).hsvHueF());
  return dark ? QColor::fromHsvF(hue, 0.45f, 0.95f) : QColor::fromHsvF(hue, 0.9f, 0.6f);
}

}  // namespace

void ContinuousTab::resetStream(const QStringList& texts) {
  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  stream_->clear();
  QTextCursor c(stream_->document());
  c.beginEditBlock();
  for (qsizetype i = 0; i < texts.size(); ++i) {
    if (i > 0) c.insertBlock();
    QTextCharFormat label;
    label.setForeground(streamColor(i, dark));
    label.setFontWeight(QFont::Bold);
    c.insertText(QStringLiteral("#%1 ").arg(i), label);
    QTextCharFormat text;
    text.setForeground(streamColor(i, dark));
    c.insertText(streamable(texts[i]), text);
  }
  c.endEditBlock();
  for (QString& p : pendingText_) p.clear();
  pendingAny_ = false;
}

void ContinuousTab::flushStream() {
  if (!pendingAny_) return;
  pendingAny_ = false;
  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  QTextDocument* doc = stream_->document();
  QTextCursor c(doc);
  c.beginEditBlock();
  for (qsizetype i = 0; i < pendingText_.size(); ++i) {
    if (pendingText_[i].isEmpty()) continue;
    const QTextBlock block = doc->findBlockByNumber(static_cast<int>(i));
    if (!block.isValid()) continue;
    c.setPosition(block.position() + block.length() - 1);
    QTextCharFormat text;
    text.setForeground(streamColor(i, dark));
    c.insertText(streamable(pendingText_[i]), text);
    pendingText_[i].clear();
  }
  c.endEditBlock();
}

void ContinuousTab::changeEvent(QEvent* event) {
  ExperimentTab::changeEvent(event);
  // Text colours follow the theme: write the shown run's texts again.
  if (event->type() == QEvent::PaletteChange && !running_) {
    const int i = shownTimeline();
    if (i >= 0 && i < shown_.size()) resetStream(shown_[i].texts);
  }
}

// --- Results ---------------------------------------------------------------------------------

ContinuousTab::Shown ContinuousTab::shownOf(const servelab::BatchRunResult& run) {
  Shown s{QString::fromStdString(run.method), BatchTimeline::fromResult(run), {}, false, {}};
  for (const servelab::RequestResult& rr : run.requests) s.texts << QString::fromStdString(rr.text);
  for (const servelab::BatchStep& step : run.steps)
    if (step.kv_blocks_total > 0 && (!s.hasKvBlocks || step.kv_blocks_used > s.kvStep.kv_blocks_used)) {
      s.hasKvBlocks = true;
      s.kvStep = step;
    }
  return s;
}

void ContinuousTab::onLongPromptFinished(const servelab::ChunkedPrefillResult& r) {
  flush();
  longPrompt_ = r;
  hasLongPrompt_ = true;
  // The two runs' timelines replace the queue's: the chunked one shown, its prompt in pieces.
  shown_ = {shownOf(r.run_unchunked), shownOf(r.run_chunked)};
  compareShown_ = static_cast<int>(shown_.size());
  rebuildSelector(1);
  drawItl(itl_, r);
  chartTabs_->setCurrentWidget(itl_);
  summary_->setText(longPromptSummary(r));
  progress_->finish();
  finishJob(true, QString());
}

void ContinuousTab::onCompareFinished(const servelab::SyncVsContinuousResult& r) {
  flush();
  result_ = r;
  hasResult_ = true;
  QVector<Shown> next;
  for (const servelab::BatchRunResult& run : r.runs) next << shownOf(run);
  const QVector<Shown> course = shown_.mid(compareShown_);
  compareShown_ = static_cast<int>(next.size());
  shown_ = next + course;

  // The charts drawn again from the result: exactly what is reported and exported.
  for (const Shown& s : next) {
    QVector<double> steps, occupancy;
    for (qsizetype i = 0; i < s.timeline.occupancy().size(); ++i) {
      steps << static_cast<double>(i);
      occupancy << s.timeline.occupancy()[i];
    }
    occupancy_->setSeriesData(ensureSeries(occupancy_, s.name), steps, occupancy);
  }
  occupancy_->rescale();
  for (const servelab::ServeSummary& m : r.methods) {
    QVector<double> ids, latency;
    for (size_t i = 0; i < m.latency_ms.size(); ++i) {
      ids << static_cast<double>(i);
      latency << m.latency_ms[i];
    }
    latency_->setSeriesData(ensureSeries(latency_, QString::fromStdString(m.method)), ids, latency);
  }
  latency_->rescale();
  kvUsage_->clearAll();
  for (const servelab::BatchRunResult& run : r.runs)
    for (const servelab::BatchStep& step : run.steps) appendKvUsage(QString::fromStdString(run.method), step);
  kvUsage_->rescale();
  fillComparison(comparison_, r);
  resultTabs_->setCurrentWidget(comparison_);
  chartTabs_->setCurrentWidget(occupancy_);

  // Continuous batching (slot KV) is what the tab is about: show its timeline first, unless paged
  // KV ran too, whose block pool is then shown.
  int select = 0;
  for (int i = 0; i < compareShown_; ++i)
    if (shown_[i].name == QLatin1String("continuous (slot KV)")) select = i;
  for (int i = 0; i < compareShown_; ++i)
    if (shown_[i].hasKvBlocks) {
      select = i;
      chartTabs_->setCurrentWidget(kvView_);
    }
  rebuildSelector(select);

  summary_->setText(compareSummary(r, params()));
  progress_->finish();
  finishJob(true, QString());
}

void ContinuousTab::onCourseFinished(const servelab::CourseBenchmarkResult& r) {
  flush();
  courseResult_ = r;
  hasCourseResult_ = true;
  shown_ = shown_.mid(0, compareShown_);
  shown_ << Shown{seriesFor(live_.method()), live_, liveTexts_, false, {}};
  rebuildSelector(static_cast<int>(shown_.size()) - 1);
  fillCourseTable(courseTable_, r);
  resultTabs_->setCurrentIndex(2);
  if (r.rows.size() == 2) summary_->setText(courseSummary(r, courseNewTokens_->value()));
  progress_->finish();
  finishJob(true, QString());
}

void ContinuousTab::onFailed(const QString& kind, const QString& message) {
  flush();
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The timeline shows how far the run got."));
  // The earlier results stay on offer; the partial timeline stays drawn until one is picked.
  rebuildSelector(-1);
  finishJob(false, message);
}

void ContinuousTab::finishJob(bool ok, const QString& message) {
  ended_ = job_;
  job_ = Job::None;
  courseRun_->setEnabled(true);
  runEnded(ok, message);
}

void ContinuousTab::rebuildSelector(int select) {
  selector_->blockSignals(true);
  selector_->clear();
  for (const Shown& s : shown_) selector_->addItem(s.name);
  selector_->setCurrentIndex(select);
  selector_->blockSignals(false);
  selector_->setEnabled(!shown_.isEmpty());
  if (select >= 0) showTimeline(select);
}

QStringList ContinuousTab::timelineNames() const {
  QStringList names;
  for (const Shown& s : shown_) names << s.name;
  return names;
}

int ContinuousTab::shownTimeline() const { return selector_->isEnabled() ? selector_->currentIndex() : -1; }

void ContinuousTab::showTimeline(int index) {
  if (index < 0 || index >= shown_.size()) return;
  if (selector_->currentIndex() != index) {
    selector_->blockSignals(true);
    selector_->setCurrentIndex(index);
    selector_->blockSignals(false);
  }
  const Shown& s = shown_[index];
  drawTimeline(s.timeline, s.name);
  if (s.hasKvBlocks)
    kvView_->showStep(s.kvStep);
  else
    kvView_->clear();
  pendingText_ = QVector<QString>(s.texts.size());
  resetStream(s.texts);
}

// --- Reports and settings --------------------------------------------------------------------

QStringList ContinuousTab::resultValueNames() const { return continuousValueNames(); }

QMap<QString, double> ContinuousTab::resultValues() const {
  if (isRunning()) return {};
  return continuousValues(hasResult_ ? &result_ : nullptr, hasLongPrompt_ ? &longPrompt_ : nullptr,
                          hasCourseResult_ ? &courseResult_ : nullptr);
}

QJsonObject ContinuousTab::lastResult() const {
  QJsonObject o;
  if (hasResult_) {
    o = toQJsonObject(result_.to_json());
  } else {
    o[QStringLiteral("experiment")] = QStringLiteral("sync-vs-continuous");
  }
  if (hasCourseResult_) {
    o[QStringLiteral("course_benchmark")] = toQJsonObject(courseResult_.to_json());
  }
  if (hasLongPrompt_) o[QStringLiteral("chunked_prefill")] = toQJsonObject(longPrompt_.to_json());
  if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  return o;
}

void ContinuousTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  queue_->loadSettings(s);
  // Settings written before the rename used "seed..." for these keys: read them as a fallback.
  const auto spin = [&s](QSpinBox* box, const char* key, const char* oldKey) {
    loadSpin(s, QLatin1String(s.contains(QLatin1String(key)) ? key : oldKey), box);
  };
  spin(courseQueries_, "courseQueries", "seedQueries");
  spin(courseNewTokens_, "courseNewTokens", "seedNewTokens");
  spin(courseMaxBatch_, "courseMaxBatch", "seedMaxBatch");
  s.endGroup();
}

void ContinuousTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  queue_->saveSettings(s);
  s.setValue(QStringLiteral("courseQueries"), courseQueries_->value());
  s.setValue(QStringLiteral("courseNewTokens"), courseNewTokens_->value());
  s.setValue(QStringLiteral("courseMaxBatch"), courseMaxBatch_->value());
  s.endGroup();
}

RunReport ContinuousTab::runReport() const {
  RunReport r;
  r.html << reportHtml(summary_);
  if (ended_ == Job::Compare) {
    r.tables << reportTable(comparison_, tr("Methods compared"));
    r.charts = chartsWithData({gantt_, occupancy_, latency_, kvUsage_});
  } else if (ended_ == Job::Course) {
    r.tables << reportTable(courseTable_, tr("Course benchmark"));
    r.charts = chartsWithData({gantt_});
  } else {
    r.charts = chartsWithData({gantt_, itl_});
  }
  return r;
}

}  // namespace servelab::ui
