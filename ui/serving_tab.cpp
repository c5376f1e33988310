#include "serving_tab.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "chart_view.h"
#include "engine_controller.h"
#include "form_widgets.h"
#include "model/engine.h"
#include "serve/serve_session.h"
#include "serving/load_result_charts.h"
#include "serving/target_list.h"
#include "util/errors.h"

namespace servelab::ui {

namespace {

constexpr int kSnapshotMs = 250;

// What the server job returns when Stop ends it.
struct ServeSessionResult {
  int port = 0;
  servelab::ServeStats stats;
  int64_t cancelledAtStop = 0;
};

QString ms(double v, int decimals = 0) {
  return v < 0 ? QStringLiteral("–") : QString::number(v, 'f', decimals);
}

// The counters of a Prometheus text, without its comments and histogram buckets (the sums and
// counts stay): what a person reads; scrapers read GET /metrics.
QString readableCounters(const QString& text) {
  QStringList out;
  for (const QString& line : text.split(QLatin1Char('\n'))) {
    if (line.isEmpty() || line.startsWith(QLatin1Char('#')) || line.contains(QLatin1String("_bucket{")))
      continue;
    QString l = line;
    l.remove(QRegularExpression(QStringLiteral("model_name=\"[^\"]*\",?")));
    l.replace(QStringLiteral("{}"), QString());
    out << l;
  }
  return out.join(QLatin1Char('\n'));
}

QComboBox* makeCombo(QWidget* parent, const QString& name, const QStringList& items) {
  auto* c = new QComboBox(parent);
  c->setObjectName(name);
  c->addItems(items);
  return c;
}

QLineEdit* makeLine(QWidget* parent, const QString& name, const QString& text, const QString& placeholder) {
  auto* e = new QLineEdit(text, parent);
  e->setObjectName(name);
  e->setPlaceholderText(placeholder);
  return e;
}

ChartView* makeChart(QWidget* parent, const QString& name, const QString& title, const QString& x,
                     const QString& y) {
  auto* c = new ChartView(parent);
  c->setObjectName(name);
  c->setTitle(title);
  c->setAxisLabels(x, y);
  c->setMinimumHeight(180);
  return c;
}

}  // namespace

ServingTab::ServingTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  // --- Server ---
  port_ = makeSpin(this, QStringLiteral("servingPort"), 0, 65535, 8080);
  port_->setSpecialValueText(tr("any free"));
  port_->setToolTip(tr("Port on 127.0.0.1 (this machine only); 0 picks a free one"));
  maxBatch_ = makeSpin(this, QStringLiteral("servingMaxBatch"), 1, 256, 8);
  maxBatch_->setToolTip(tr("Requests running at once (batch places, each with its KV slot)"));
  tokenBudget_ = makeSpin(this, QStringLiteral("servingTokenBudget"), 0, 8192, 0, tr(" tokens"));
  tokenBudget_->setSpecialValueText(tr("off (whole prompts)"));
  tokenBudget_->setToolTip(
      tr("Chunked prefill (--max-num-batched-tokens): tokens one engine step computes, decodes first and "
         "prompts in chunks; off: every prompt in one step"));
  maxQueue_ = makeSpin(this, QStringLiteral("servingMaxQueue"), 0, 4096, 64);
  maxQueue_->setToolTip(tr("Requests waiting at most; one more gets 429 with Retry-After"));
  positions_ = makeSpin(this, QStringLiteral("servingPositions"), 0, 8192, 1024);
  positions_->setSpecialValueText(tr("model's"));
  positions_->setToolTip(tr("Prompt + new tokens per request (each KV slot holds this many)"));
  useAdapters_ = new QCheckBox(tr("Adapters from the Multi-LoRA tab"), this);
  useAdapters_->setObjectName(QStringLiteral("servingUseAdapters"));
  useAdapters_->setChecked(true);
  useAdapters_->setToolTip(
      tr("Register the Multi-LoRA tab's adapters: requests name them as adapter_id or model"));
  start_ = new QPushButton(tr("Start server"), this);
  start_->setObjectName(QStringLiteral("servingStart"));
  stop_ = new QPushButton(tr("Stop"), this);
  stop_->setObjectName(QStringLiteral("servingStop"));
  stop_->setToolTip(tr("Stop accepting, cancel what still runs, free the engine"));
  connect(start_, &QPushButton::clicked, this, [this] { startServer(); });
  connect(stop_, &QPushButton::clicked, this, [this] { stopServer(); });
  url_edit_ = makeLine(this, QStringLiteral("servingUrl"), QString(), tr("not serving"));
  url_edit_->setReadOnly(true);
  copy_ = new QPushButton(tr("Copy"), this);
  copy_->setObjectName(QStringLiteral("servingCopyUrl"));
  copy_->setToolTip(tr("Copy the URL (endpoint_url in the lesson's client code)"));
  connect(copy_, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(url_); });
  serverStatus_ = new QLabel(tr("Start the server on the loaded model."), this);
  serverStatus_->setObjectName(QStringLiteral("servingStatus"));
  serverStatus_->setWordWrap(true);
  serverStatus_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* serverBox = new QGroupBox(tr("Server (LoRAX/TGI + OpenAI API)"), this);
  auto* sf = new QFormLayout(serverBox);
  sf->addRow(tr("Port"), port_);
  sf->addRow(tr("Max batch"), maxBatch_);
  sf->addRow(tr("Token budget"), tokenBudget_);
  sf->addRow(tr("Max queue"), maxQueue_);
  sf->addRow(tr("Positions"), positions_);
  sf->addRow(useAdapters_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  sf->addRow(buttons);
  // The URL gets the panel's whole width: it is the one thing people copy from here.
  auto* urlRow = new QHBoxLayout;
  urlRow->addWidget(url_edit_, 1);
  urlRow->addWidget(copy_);
  sf->addRow(urlRow);
  sf->addRow(serverStatus_);

  // --- Load generator ---
  targets_ = new TargetEditor(QStringLiteral("ServeLab"), this);
  scenario_ = makeCombo(this, QStringLiteral("servingScenario"),
                        {QStringLiteral("single"), QStringLiteral("three_streams"),
                         QStringLiteral("adapters"), QStringLiteral("structured"), QStringLiteral("sweep")});
  scenario_->setToolTip(
      tr("single: one stream's per-token times; three_streams: 100/10/10 tokens at once; adapters: the "
         "prompt through every adapter at once; structured: the Person schema; sweep: throughput against "
         "latency"));
  clients_ =
      makeLine(this, QStringLiteral("servingClients"), QStringLiteral("1,2,4,8"), QStringLiteral("1,2,4"));
  clients_->setToolTip(tr("Sweep levels: clients (closed loop) or requests per second (Poisson)"));
  arrival_ = makeCombo(this, QStringLiteral("servingArrival"),
                       {QStringLiteral("closed"), QStringLiteral("poisson")});
  loadRequests_ = makeSpin(this, QStringLiteral("servingLoadRequests"), 1, 1000, 8);
  loadRequests_->setToolTip(tr("Sweep: requests per level"));
  loadTokens_ = makeSpin(this, QStringLiteral("servingLoadTokens"), 1, 4096, 32);
  slo_ = makeLine(this, QStringLiteral("servingSlo"), QString(), QStringLiteral("ttft:500 tpot:50"));
  slo_->setToolTip(
      tr("Goodput SLOs in ms (vLLM's --goodput): ttft, tpot, e2el; a sweep then draws the "
         "requests per second that met them all against load"));
  loadRun_ = new QPushButton(tr("Run load"), this);
  loadRun_->setObjectName(QStringLiteral("servingLoadRun"));
  loadStop_ = new QPushButton(tr("Stop load"), this);
  loadStop_->setObjectName(QStringLiteral("servingLoadStop"));
  connect(loadRun_, &QPushButton::clicked, this, [this] { startLoad(); });
  connect(loadStop_, &QPushButton::clicked, this, [this] { stopLoad(); });
  loadSummary_ = new QLabel(tr("Replay the lesson's scenarios against a server."), this);
  loadSummary_->setObjectName(QStringLiteral("servingLoadSummary"));
  loadSummary_->setWordWrap(true);
  loadSummary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* loadBox = new QGroupBox(tr("Load generator"), this);
  auto* lf = new QFormLayout(loadBox);
  lf->addRow(targets_);
  lf->addRow(tr("Scenario"), scenario_);
  lf->addRow(tr("New tokens"), loadTokens_);
  lf->addRow(tr("Levels"), clients_);
  lf->addRow(tr("Arrival"), arrival_);
  lf->addRow(tr("Requests"), loadRequests_);
  lf->addRow(tr("SLOs"), slo_);
  auto* loadButtons = new QHBoxLayout;
  loadButtons->addWidget(loadRun_);
  loadButtons->addWidget(loadStop_);
  lf->addRow(loadButtons);
  lf->addRow(loadSummary_);
  lf->addRow(makeRunButtons());
  lf->addRow(runNote_);

  QScrollArea* leftScroll = makeSidePanel(this, {serverBox, loadBox}, 300, 340);

  // --- Views ---
  table_ = makeCompactTable(this, QStringLiteral("servingRequests"),
                            {tr("id"), tr("state"), tr("adapter"), tr("prompt"), tr("TTFT (ms)"),
                             tr("tokens"), tr("tokens/s"), tr("finish")});
  table_->setToolTip(tr("Waiting and running requests and the last ones to end, newest first"));
  metrics_ = new QPlainTextEdit(this);
  metrics_->setObjectName(QStringLiteral("servingMetrics"));
  metrics_->setReadOnly(true);
  metrics_->setLineWrapMode(QPlainTextEdit::NoWrap);
  metrics_->setPlaceholderText(tr("GET /metrics (Prometheus) while serving"));
  QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  mono.setPointSizeF(mono.pointSizeF() * 0.85);
  metrics_->setFont(mono);
  ttftChart_ = makeChart(this, QStringLiteral("servingTtftChart"), tr("Time to first token"), tr("time (s)"),
                         tr("TTFT (ms)"));
  itlChart_ = makeChart(this, QStringLiteral("servingItlChart"), tr("Inter-token latency (mean per 250 ms)"),
                        tr("time (s)"), tr("latency (ms)"));
  occupancyChart_ = makeChart(this, QStringLiteral("servingOccupancyChart"), tr("Batch occupancy"),
                              tr("time (s)"), tr("requests"));
  loadChart_ = makeChart(this, QStringLiteral("servingLoadChart"), tr("Load generator"), tr("token index"),
                         tr("ms since the request was sent"));
  ttftDistChart_ = makeChart(this, QStringLiteral("servingTtftDistChart"), QString(), QString(), QString());
  itlDistChart_ = makeChart(this, QStringLiteral("servingItlDistChart"), QString(), QString(), QString());
  goodputChart_ = makeChart(this, QStringLiteral("servingGoodputChart"), QString(), QString(), QString());
  resetLiveCharts();
  drawRuns();

  auto* top = new QSplitter(Qt::Horizontal, this);
  top->addWidget(table_);
  top->addWidget(metrics_);
  top->setStretchFactor(0, 3);
  top->setStretchFactor(1, 2);
  auto* server = new QSplitter(Qt::Vertical, this);
  server->addWidget(top);
  QWidget* live = makeGrid(this, {ttftChart_, itlChart_, occupancyChart_}, 3);
  server->addWidget(live);
  server->setStretchFactor(0, 2);
  server->setStretchFactor(1, 3);
  server->setSizes({190, 460});  // the charts need the height; the table scrolls
  table_->setMinimumHeight(120);
  // Two pages: the server's side over time (ours, or the target's /metrics), and what the client
  // measured of load runs (any target's, or saved ones), each chart large enough to read.
  views_ = new QTabWidget(this);
  views_->setObjectName(QStringLiteral("servingViews"));
  views_->setDocumentMode(true);
  views_->addTab(server, tr("Server"));
  QWidget* runs = makeGrid(this, {loadChart_, goodputChart_, ttftDistChart_, itlDistChart_});
  for (QWidget* grid : {live, runs}) {  // columns of equal width, whatever their charts' legends
    auto* cells = static_cast<QGridLayout*>(grid->layout());
    for (int column = 0; column < cells->columnCount(); ++column) cells->setColumnStretch(column, 1);
  }
  views_->addTab(runs, tr("Load runs"));

  auto* layout = new QHBoxLayout(this);
  layout->addWidget(leftScroll);
  layout->addWidget(views_, 1);
  updateButtons();
}

ServingTab::~ServingTab() {
  loadCancel_ = true;
  if (loadThread_.joinable()) loadThread_.join();
  scrapeStop_ = true;
  if (scrapeThread_.joinable()) scrapeThread_.join();
}

ChartView* ServingTab::primaryChart() const { return loadChart_; }

QList<ChartView*> ServingTab::charts() const {
  return {ttftChart_, itlChart_, occupancyChart_, loadChart_, ttftDistChart_, itlDistChart_, goodputChart_};
}

void ServingTab::setAdapterProvider(std::function<QVector<servelab::AdapterSource>()> provider) {
  adapters_ = std::move(provider);
}

QString ServingTab::serverError() const { return serverError_; }
QString ServingTab::metricsText() const { return metrics_->toPlainText(); }
void ServingTab::setPort(int port) { port_->setValue(port); }
void ServingTab::setMaxBatch(int n) { maxBatch_->setValue(n); }
void ServingTab::setMaxQueue(int n) { maxQueue_->setValue(n); }
void ServingTab::setUseAdapters(bool on) { useAdapters_->setChecked(on); }

void ServingTab::setLoadTarget(const QString& url, const QString& api, const QString& header) {
  targets_->setTarget(url, api, header);
}
void ServingTab::setScenario(const QString& scenario) { scenario_->setCurrentText(scenario); }
void ServingTab::setClients(const QString& levels) { clients_->setText(levels); }
void ServingTab::setLoadRequests(int n) { loadRequests_->setValue(n); }
void ServingTab::setLoadNewTokens(int n) { loadTokens_->setValue(n); }

void ServingTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
}

void ServingTab::updateButtons() {
  const bool serving = serverRunning();
  start_->setEnabled(!serving);
  stop_->setEnabled(serving);
  copy_->setEnabled(!url_.isEmpty());
  for (QWidget* w : {static_cast<QWidget*>(port_), static_cast<QWidget*>(maxBatch_),
                     static_cast<QWidget*>(tokenBudget_), static_cast<QWidget*>(maxQueue_),
                     static_cast<QWidget*>(positions_), static_cast<QWidget*>(useAdapters_)})
    w->setEnabled(!serving);
  loadRun_->setEnabled(!loadRunning_);
  loadStop_->setEnabled(loadRunning_);
}

void ServingTab::resetLiveCharts() {
  for (ChartView* c : {ttftChart_, itlChart_, occupancyChart_}) c->clearAll();
  ttftChart_->addSeries(tr("TTFT"));
  ttftChart_->setSeriesStyle(0, ChartView::SeriesStyle::Points);
  itlChart_->addSeries(tr("inter-token latency"));
  occupancyChart_->setTitle(tr("Batch occupancy"));
  occupancyChart_->setFootnote(QString());
  // Three series would cover a small plot: their legend goes in two rows under it (the chart is a
  // third of the Server page's width).
  occupancyChart_->setLegendColumns(2);
  occupancyChart_->setLegendBelow(true);
  occupancyChart_->setAxisLabels(tr("time (s)"), tr("requests"), tr("KV cache used (%)"));
  occupancyChart_->addSeries(tr("running"));
  occupancyChart_->addSeries(tr("waiting"));
  occupancyChart_->addSeries(tr("KV cache used"), ChartView::Axis::Right);
  occupancyChart_->setSeriesStyle(0, ChartView::SeriesStyle::Steps);
  occupancyChart_->setSeriesStyle(1, ChartView::SeriesStyle::Steps);
  occupancyChart_->setSeriesStyle(2, ChartView::SeriesStyle::Steps);
  occupancyChart_->setIntegerTicks(false, true);
  ttftSeen_.clear();
  last_ = servelab::ServeMetrics();
  lastSeconds_ = 0;
}

bool ServingTab::startServer() {
  if (serverRunning()) return refuseRun(tr("the server is already running at %1").arg(url_));
  if (!model_.valid()) {
    serverError_ = tr("load a model first");
    serverStatus_->setText(serverError_);
    return refuseRun(serverError_);
  }
  servelab::ServeOptions so;
  so.max_batch = maxBatch_->value();
  so.max_num_batched_tokens = tokenBudget_->value();
  so.max_queue = maxQueue_->value();
  so.max_total_tokens = positions_->value();
  if (model_.positions > 0 && so.max_total_tokens > model_.positions) so.max_total_tokens = model_.positions;
  if (useAdapters_->isChecked() && adapters_)
    for (const servelab::AdapterSource& a : adapters_()) so.adapters.push_back(a);
  servelab::HttpServerOptions ho;
  ho.host = "127.0.0.1";
  ho.port = port_->value();
  ho.threads = servelab::default_http_threads(so.max_batch, so.max_queue);
  QPointer<ServingTab> self(this);
  // The engine serves on this job's thread, the one whose OpenMP team already runs the model: a
  // scheduler thread of its own would bring a second team, more OpenMP threads than CPUs, and
  // libgomp sleeping at every barrier (a decode step about twice as long). Snapshots and the stop
  // come from a watcher thread instead.
  so.engine_on_caller = true;
  EngineJob* job = engine_->submit(tr("Serving"), [so, ho, self](JobContext& c) mutable {
    const servelab::Engine& e = c.engine();
    servelab::ServeSession session(ho);  // a port in use: InputError, the job's failure
    const std::string model_id = e.is_demo() ? "servelab-demo-gpt2" : e.name();
    servelab::ServeScheduler& scheduler =
        session.attach(e.model(), e.tokenizer(), so, model_id, e.info().dump());
    const int port = session.port();
    c.post([self, port](EngineJob*) {
      if (self) self->onListening(port);
    });
    const auto t0 = std::chrono::steady_clock::now();
    auto snapshot = [&] {
      ServeSnapshot s;
      s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      s.metrics = scheduler.metrics();
      s.requests = scheduler.requests(200);
      s.prometheus = QString::fromStdString(servelab::prometheus_text(s.metrics, model_id));
      c.post([self, s](EngineJob*) {
        if (self) self->onSnapshot(s);
      });
    };
    ServeSessionResult r;
    r.port = port;
    std::atomic<bool> engine_ended{false};
    std::thread watcher([&] {
      while (!c.cancel()->load() && !engine_ended.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kSnapshotMs));
        snapshot();
      }
      if (engine_ended.load()) {  // it failed: nothing left to drain
        session.stop(std::nullopt);
        return;
      }
      r.cancelledAtStop = session.stop(std::chrono::milliseconds(0));
      scheduler.stop_engine();
    });
    std::exception_ptr failure;
    try {
      scheduler.run();  // until the watcher stops it
    } catch (...) {
      failure = std::current_exception();
    }
    engine_ended = true;
    watcher.join();
    if (failure) std::rethrow_exception(failure);
    snapshot();
    r.stats = scheduler.stats();
    return r;
  });
  if (!job) {
    serverError_ = tr("the engine is busy: stop its run first");
    serverStatus_->setText(serverError_);
    return refuseRun(serverError_);
  }
  serverJob_ = job;
  serverError_.clear();
  serverStatus_->setText(
      tr("starting on port %1…").arg(ho.port == 0 ? tr("(any free)") : QString::number(ho.port)));
  stopRemoteScrape();
  scrapingRemote_ = false;
  resetLiveCharts();
  table_->setRowCount(0);
  metrics_->clear();
  connect(job, &EngineJob::failed, this, [this](const QString& kind, const QString& message) {
    serverJob_ = nullptr;
    url_.clear();
    url_edit_->clear();
    targets_->setLocalUrl(QString());
    serverError_ = message;
    serverStatus_->setText(QStringLiteral("<span style='color:#c0392b'><b>%1</b></span>")
                               .arg(tr("Could not serve (%1): %2").arg(kind, message).toHtmlEscaped()));
    updateButtons();
    Q_EMIT serverStopped(false, message);
    if (scripted_) {
      scripted_ = false;
      running_ = false;
      Q_EMIT runFinished(false, message);
    }
  });
  job->onResult<ServeSessionResult>(this, [this](const ServeSessionResult& r) {
    serverJob_ = nullptr;
    url_.clear();
    url_edit_->clear();
    targets_->setLocalUrl(QString());
    serverStatus_->setText(tr("Stopped (port %1): %2 requests finished, %3 cancelled at Stop, %4 failed.")
                               .arg(r.port)
                               .arg(r.stats.finished)
                               .arg(r.cancelledAtStop)
                               .arg(r.stats.failed));
    updateButtons();
    Q_EMIT serverStopped(true, QString());
  });
  updateButtons();
  return true;
}

void ServingTab::stopServer() {
  if (serverRunning()) engine_->stop();
}

void ServingTab::onListening(int port) {
  url_ = QStringLiteral("http://127.0.0.1:%1").arg(port);
  url_edit_->setText(url_);
  targets_->setLocalUrl(url_);
  serverStatus_->setText(tr("Serving %1 at %2: POST / (LoRAX), /generate, /generate_stream, /v1/completions, "
                            "/v1/chat/completions; GET /metrics.")
                             .arg(model_.name, url_));
  updateButtons();
  Q_EMIT serverStarted(url_);
}

void ServingTab::onSnapshot(const ServeSnapshot& snap) {
  const servelab::ServeMetrics& m = snap.metrics;
  // Requests: newest first.
  const int n = static_cast<int>(snap.requests.size());
  table_->setRowCount(n);
  for (int i = 0; i < n; ++i) {
    const servelab::ServeRequestInfo& r = snap.requests[static_cast<size_t>(n - 1 - i)];
    const QStringList cells = {
        QString::number(r.id),
        QString::fromStdString(r.state),
        r.adapter.empty() ? tr("base") : QString::fromStdString(r.adapter),
        QString::number(r.prompt_tokens),
        ms(r.ttft_ms, 1),
        QString::number(r.generated),
        r.generated > 1 ? QString::number(r.tokens_per_s, 'f', 1) : QStringLiteral("–"),
        QString::fromStdString(r.finish_reason)};
    for (int col = 0; col < cells.size(); ++col) {
      QTableWidgetItem* item = table_->item(i, col);
      if (!item) {
        item = tableCell(cells[col], col != 1 && col != 2 && col != 7);
        table_->setItem(i, col, item);
      } else if (item->text() != cells[col]) {
        item->setText(cells[col]);
      }
    }
    if (r.ttft_ms >= 0 && !ttftSeen_.contains(r.id)) {
      ttftSeen_.insert(r.id);
      ttftChart_->append(0, r.submitted_s + r.ttft_ms / 1000.0, r.ttft_ms);
    }
  }
  // Inter-token latency: the histogram's mean over the last interval.
  const int64_t tokens = m.inter_token.count - last_.inter_token.count;
  if (tokens > 0)
    itlChart_->append(0, snap.seconds, (m.inter_token.sum - last_.inter_token.sum) * 1000.0 / tokens);
  // Read back from the server's own /metrics text, as a remote server's are: one path for both.
  if (!scrapingRemote_) {
    try {
      appendOccupancy(snap.seconds,
                      servelab::server_load(servelab::parse_prometheus_text(snap.prometheus.toStdString())));
    } catch (const servelab::InputError& e) {
      occupancyChart_->setFootnote(QString::fromUtf8(e.what()));
    }
  }
  last_ = m;
  lastSeconds_ = snap.seconds;
  const int scroll = metrics_->verticalScrollBar() ? metrics_->verticalScrollBar()->value() : 0;
  metrics_->setPlainText(readableCounters(snap.prometheus));
  if (metrics_->verticalScrollBar()) metrics_->verticalScrollBar()->setValue(scroll);
}

// ---- load generator ----------------------------------------------------------------------------

bool ServingTab::startLoad() {
  if (loadRunning_) return refuseRun(tr("a load run is in progress"));
  QString why;
  const std::optional<servelab::LoadTarget> formTarget = targets_->target(&why);
  if (!formTarget) {
    loadSummary_->setText(why);
    return refuseRun(why);
  }
  servelab::LoadTarget target = *formTarget;
  if (target.url.empty()) target.url = url_.toStdString();
  if (target.url.empty()) {
    loadSummary_->setText(tr("Start the server, or give the URL of another one."));
    return refuseRun(loadSummary_->text());
  }
  servelab::LoadOptions o;
  try {
    o.scenario = scenario_->currentText().toStdString();
    o.arrival = arrival_->currentText().toStdString();
    o.requests = loadRequests_->value();
    o.request.max_new_tokens = loadTokens_->value();
    o.levels.clear();
    for (const QString& item : clients_->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
      bool ok = false;
      const double v = item.trimmed().toDouble(&ok);
      if (!ok) throw servelab::InputError("levels must be numbers separated by commas");
      o.levels.push_back(v);
    }
    std::vector<std::string> slos;
    for (const QString& item :
         slo_->text().split(QRegularExpression(QStringLiteral("[\\s,]+")), Qt::SkipEmptyParts))
      slos.push_back(item.toStdString());
    o.goodput = servelab::parse_goodput(slos);
  } catch (const servelab::InputError& e) {
    loadSummary_->setText(QString::fromUtf8(e.what()));
    return refuseRun(loadSummary_->text());
  }
  o.max_seconds = 600;
  if (loadThread_.joinable()) loadThread_.join();
  loadCancel_ = false;
  loadRunning_ = true;
  report_ = servelab::LoadReport();
  lastTarget_ = target;
  if (o.scenario == "sweep")
    setupLatencyThroughput(loadChart_, {{QString(), &report_}});  // the live series, filled per level
  else
    setupTokenTimes(loadChart_, scenario_->currentText());
  loadSummary_->setText(
      tr("Running %1 against %2…").arg(scenario_->currentText(), QString::fromStdString(target.url)));
  updateButtons();

  struct Relay : servelab::LoadSink {
    ServingTab* tab;
    explicit Relay(ServingTab* t) : tab(t) {}
    void on_stream(const servelab::StreamTiming& s) override {
      QMetaObject::invokeMethod(
          tab, [t = tab, s] { t->onLoadStream(s); }, Qt::QueuedConnection);
    }
    void on_level(const servelab::LoadLevel& l) override {
      QMetaObject::invokeMethod(
          tab, [t = tab, l] { t->onLoadLevel(l); }, Qt::QueuedConnection);
    }
  };
  views_->setCurrentIndex(1);  // what the client measures; the server's side is a click away
  // Our own server's figures come from its snapshots; any other server's from its /metrics.
  if (!serverRunning() || target.url != url_.toStdString()) {
    startRemoteScrape(target);
  } else if (scrapingRemote_) {
    stopRemoteScrape();
    scrapingRemote_ = false;
    resetLiveCharts();
  }
  loadThread_ = std::thread([this, target, o] {
    Relay relay(this);
    servelab::LoadReport report;
    QString error;
    try {
      report = servelab::run_load(target, o, &loadCancel_, &relay);
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        this, [this, report, error] { onLoadDone(report, error); }, Qt::QueuedConnection);
  });
  Q_EMIT runBegan();
  return true;
}

void ServingTab::stopLoad() { loadCancel_ = true; }

void ServingTab::onLoadStream(const servelab::StreamTiming& s) {
  if (scenario_->currentText() != QLatin1String("sweep")) addStreamTimes(loadChart_, s);
}

void ServingTab::onLoadLevel(const servelab::LoadLevel& l) { appendLevel(loadChart_, l); }

void ServingTab::startRemoteScrape(const servelab::LoadTarget& target) {
  stopRemoteScrape();
  scrapingRemote_ = true;
  remoteUrl_ = QString::fromStdString(target.url);
  resetLiveCharts();
  occupancyChart_->setTitle(tr("Server side (its /metrics)"));
  occupancyChart_->setFootnote(remoteUrl_);
  scrapeStop_ = false;
  servelab::LoadTarget t = target;
  t.connect_timeout_s = 2;  // a scrape must not hold the end of a run
  scrapeThread_ = std::thread([this, t] {
    const auto t0 = std::chrono::steady_clock::now();
    // One scrape at once, then every snapshot interval, and one more after the run ended.
    for (bool last = false; !last;) {
      last = scrapeStop_.load();
      servelab::ServerLoad load;
      QString error;
      try {
        load = servelab::scrape_server_load(t);
      } catch (const std::exception& e) {
        error = QString::fromUtf8(e.what());
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      QMetaObject::invokeMethod(
          this, [this, seconds, load, error] { onRemoteLoad(seconds, load, error); }, Qt::QueuedConnection);
      if (!error.isEmpty()) return;  // a server without /metrics: said once
      for (int waited = 0; waited < kSnapshotMs && !scrapeStop_.load(); waited += 10)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
}

void ServingTab::stopRemoteScrape() {
  scrapeStop_ = true;
  if (scrapeThread_.joinable()) scrapeThread_.join();
}

void ServingTab::onRemoteLoad(double seconds, const servelab::ServerLoad& load, const QString& error) {
  if (!scrapingRemote_) return;
  if (!error.isEmpty()) {
    occupancyChart_->setFootnote(tr("No server-side figures from %1: %2").arg(remoteUrl_, error));
    return;
  }
  if (load.engine.empty()) {
    occupancyChart_->setFootnote(
        tr("%1: its /metrics names no running or waiting requests that we know (vLLM, SGLang, TGI, "
           "llama.cpp)")
            .arg(remoteUrl_));
    return;
  }
  appendOccupancy(seconds, load);
  QString note = tr("%1 · %2's metric names").arg(remoteUrl_, QString::fromStdString(load.engine));
  if (load.preemptions_total) note += tr("; preemptions so far: %1").arg(*load.preemptions_total);
  if (!load.kv_usage) note += tr("; it publishes no KV-cache use");
  occupancyChart_->setFootnote(note);
}

void ServingTab::appendOccupancy(double seconds, const servelab::ServerLoad& load) {
  if (load.running) occupancyChart_->append(0, seconds, *load.running);
  if (load.waiting) occupancyChart_->append(1, seconds, *load.waiting);
  if (load.kv_usage) occupancyChart_->append(2, seconds, *load.kv_usage * 100.0);
}

void ServingTab::onLoadDone(const servelab::LoadReport& report, const QString& error) {
  if (loadThread_.joinable()) loadThread_.join();
  scrapeStop_ = true;  // its last scrape shows the server after the run; joined at the next run
  loadRunning_ = false;
  report_ = report;
  runName_ = tr("this run");
  int64_t failed = 0, total = 0;
  const QStringList lines = runSummaryLines(report, &failed, &total);
  const bool ok = error.isEmpty() && failed == 0 && !report.cancelled;
  QString message = !error.isEmpty()   ? error
                    : report.cancelled ? tr("stopped")
                    : failed           ? tr("%1 of %2 requests failed").arg(failed).arg(total)
                                       : QString();
  loadSummary_->setText((message.isEmpty() ? QString() : message + QLatin1Char('\n')) +
                        lines.join(QLatin1Char('\n')));
  drawRuns();
  updateButtons();
  Q_EMIT loadFinished(ok, message);
  // Every load run is a run of the tab (the session log records each); a script's is one of them.
  scripted_ = false;
  running_ = false;
  Q_EMIT runFinished(ok, message);
}

bool ServingTab::run() {
  refusal_.clear();
  if (loadRunning_) return refuseRun(tr("a load run is in progress"));
  scripted_ = true;
  running_ = true;
  // A target other than our server: its load runs alone, without starting ours.
  const QString target = targets_->url();
  if ((serverRunning() && !url_.isEmpty()) || (!target.isEmpty() && target != url_)) {
    if (startLoad()) return true;
  } else if (!serverRunning() && startServer()) {
    // The load starts once the server listens.
    connect(
        this, &ServingTab::serverStarted, this,
        [this] {
          if (scripted_ && !startLoad()) {
            scripted_ = running_ = false;
            Q_EMIT runFinished(false, refusal_);
          }
        },
        Qt::SingleShotConnection);
    return true;
  }
  scripted_ = running_ = false;
  return false;
}

// ---- settings and results -------------------------------------------------------------------------

void ServingTab::loadSettings(QSettings& s) {
  s.beginGroup(QStringLiteral("serving"));
  loadSpin(s, QStringLiteral("port"), port_);
  loadSpin(s, QStringLiteral("maxBatch"), maxBatch_);
  loadSpin(s, QStringLiteral("maxNumBatchedTokens"), tokenBudget_);
  loadSpin(s, QStringLiteral("maxQueue"), maxQueue_);
  loadSpin(s, QStringLiteral("positions"), positions_);
  loadSpin(s, QStringLiteral("requests"), loadRequests_);
  loadSpin(s, QStringLiteral("newTokens"), loadTokens_);
  if (const auto slo = settingString(s, QStringLiteral("slo"))) slo_->setText(*slo);
  loadCheck(s, QStringLiteral("useAdapters"), useAdapters_);
  targets_->loadSettings(s);
  // QSettings' INI format reads "1,2,4" as a list of three strings.
  if (const auto levels = settingString(s, QStringLiteral("levels"))) {
    QStringList items = levels->split(QLatin1Char(','), Qt::SkipEmptyParts);
    bool ok = !items.isEmpty();
    for (QString& item : items) {
      item = item.trimmed();
      bool number = false;
      const double v = item.toDouble(&number);
      ok = ok && number && std::isfinite(v) && v > 0;
    }
    if (ok)
      clients_->setText(items.join(QLatin1Char(',')));
    else
      reportSetting(s, QStringLiteral("levels"), *levels,
                    QStringLiteral("is not a list of positive numbers"));
  }
  for (auto [key, box] :
       {std::pair{QStringLiteral("scenario"), scenario_}, std::pair{QStringLiteral("arrival"), arrival_}}) {
    if (!s.contains(key)) continue;
    const QString v = s.value(key).toString();
    if (box->findText(v) < 0)
      settingsIssues() << QStringLiteral("serving/%1 = %2 is not one of the choices").arg(key, v);
    else
      box->setCurrentText(v);
  }
  s.endGroup();
}

void ServingTab::saveSettings(QSettings& s) const {
  s.beginGroup(QStringLiteral("serving"));
  s.setValue(QStringLiteral("port"), port_->value());
  s.setValue(QStringLiteral("maxBatch"), maxBatch_->value());
  s.setValue(QStringLiteral("maxNumBatchedTokens"), tokenBudget_->value());
  s.setValue(QStringLiteral("maxQueue"), maxQueue_->value());
  s.setValue(QStringLiteral("positions"), positions_->value());
  s.setValue(QStringLiteral("requests"), loadRequests_->value());
  s.setValue(QStringLiteral("newTokens"), loadTokens_->value());
  s.setValue(QStringLiteral("useAdapters"), useAdapters_->isChecked());
  targets_->saveSettings(s);
  s.setValue(QStringLiteral("levels"), clients_->text());
  s.setValue(QStringLiteral("slo"), slo_->text());
  s.setValue(QStringLiteral("scenario"), scenario_->currentText());
  s.setValue(QStringLiteral("arrival"), arrival_->currentText());
  s.endGroup();
}

QStringList ServingTab::resultValueNames() const {
  return {QStringLiteral("streams"),           QStringLiteral("ttft_ms"),
          QStringLiteral("tokens_per_s"),      QStringLiteral("shortest_s"),
          QStringLiteral("longest_s"),         QStringLiteral("levels"),
          QStringLiteral("peak_tokens_per_s"), QStringLiteral("first_level_ttft_ms"),
          QStringLiteral("last_level_ttft_ms")};
}

// The last load run: for a scenario of streams, how many ended well, their median time to first token
// and tokens/s, and the quickest and slowest stream end to end; for a sweep, its levels, the best
// throughput and the median TTFT at the lowest and the highest level.
QMap<QString, double> ServingTab::resultValues() const {
  if (loadRunning_) return {};
  QMap<QString, double> v;
  std::vector<double> ttft, tps, e2e;
  for (const servelab::StreamTiming& s : report_.streams) {
    if (!s.ok) continue;
    if (s.ttft_ms >= 0) ttft.push_back(s.ttft_ms);
    if (s.tokens_per_s() > 0) tps.push_back(s.tokens_per_s());
    if (s.e2el_ms >= 0) e2e.push_back(s.e2el_ms);
  }
  if (!report_.streams.empty()) {
    v[QStringLiteral("streams")] = static_cast<double>(e2e.size());
    if (!ttft.empty()) v[QStringLiteral("ttft_ms")] = medianValue(ttft);
    if (!tps.empty()) v[QStringLiteral("tokens_per_s")] = medianValue(tps);
    if (!e2e.empty()) {
      v[QStringLiteral("shortest_s")] = *std::min_element(e2e.begin(), e2e.end()) / 1000;
      v[QStringLiteral("longest_s")] = *std::max_element(e2e.begin(), e2e.end()) / 1000;
    }
  }
  if (!report_.levels.empty()) {
    double peak = 0;
    for (const servelab::LoadLevel& l : report_.levels) peak = std::max(peak, l.tokens_per_s);
    v[QStringLiteral("levels")] = static_cast<double>(report_.levels.size());
    v[QStringLiteral("peak_tokens_per_s")] = peak;
    v[QStringLiteral("first_level_ttft_ms")] = report_.levels.front().ttft_p50_ms;
    v[QStringLiteral("last_level_ttft_ms")] = report_.levels.back().ttft_p50_ms;
  }
  return v;
}

QJsonObject ServingTab::lastResult() const {
  nlohmann::json j = nlohmann::json::parse(servelab::load_report_json(report_));
  j["server_url"] = url_.toStdString();
  j["server_metrics"] = {{"generation_tokens", last_.generation_tokens},
                         {"prompt_tokens", last_.prompt_tokens},
                         {"running", last_.running},
                         {"waiting", last_.waiting}};
  return toQJsonObject(j);
}

RunReport ServingTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(loadSummary_);
  r.tables << reportTable(table_, tr("Requests (newest first)"));
  return r;
}

}  // namespace servelab::ui
