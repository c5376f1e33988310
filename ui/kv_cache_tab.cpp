#include "kv_cache_tab.h"

#include <QCheckBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QVBoxLayout>

#include "chart_view.h"
#include "engine_controller.h"
#include "form_widgets.h"
#include "util/limits.h"

namespace servelab::ui {

namespace {

const QString kWithout = QStringLiteral("without KV cache");
const QString kWith = QStringLiteral("with KV cache");
constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

KvCacheTab::KvCacheTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  prompt_ = new QLineEdit(QStringLiteral("The quick brown fox jumped over the"), this);
  prompt_->setObjectName(QStringLiteral("kvPrompt"));
  repeatPrompt_ = new QCheckBox(tr("Repeat the prompt to a length of"), this);
  repeatPrompt_->setObjectName(QStringLiteral("kvRepeatPrompt"));
  promptTokens_ = new QSlider(Qt::Horizontal, this);
  promptTokens_->setRange(1, 1000);
  promptTokens_->setValue(200);
  promptTokensSpin_ = new QSpinBox(this);
  promptTokensSpin_->setRange(1, 1000);
  promptTokensSpin_->setValue(200);
  promptTokensSpin_->setSuffix(tr(" tokens"));
  connect(promptTokens_, &QSlider::valueChanged, promptTokensSpin_, &QSpinBox::setValue);
  connect(promptTokensSpin_, &QSpinBox::valueChanged, promptTokens_, &QSlider::setValue);
  connect(repeatPrompt_, &QCheckBox::toggled, this, &KvCacheTab::updatePromptLengthEnabled);

  newTokens_ = new QSpinBox(this);
  newTokens_->setObjectName(QStringLiteral("kvNewTokens"));
  newTokens_->setRange(1, 1000);
  newTokens_->setValue(10);
  repeats_ = new QSpinBox(this);
  repeats_->setObjectName(QStringLiteral("kvRepeats"));
  repeats_->setRange(1, 20);
  repeats_->setValue(3);
  repeats_->setToolTip(
      tr("Runs without and with the cache alternate this many times; the chart ends on the "
         "median of each token."));

  progress_ = new RunProgressBar(this);

  auto* lengthRow = new QHBoxLayout;
  lengthRow->addWidget(promptTokens_, 1);
  lengthRow->addWidget(promptTokensSpin_);
  auto* form = new QFormLayout;
  form->addRow(tr("Prompt"), prompt_);
  form->addRow(repeatPrompt_);
  form->addRow(lengthRow);
  form->addRow(tr("New tokens"), newTokens_);
  form->addRow(tr("Repeats"), repeats_);
  QHBoxLayout* buttons = makeRunButtons(
      QStringLiteral("kv"), tr("Generate the same tokens without and with the KV cache (Ctrl+Return)"));

  summary_ = new QLabel(tr("Run to compare the two ways of generating."), this);
  summary_->setObjectName(QStringLiteral("kvSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* explanation = new QLabel(
      tr("<b>Prefill</b> (token 0) reads the whole prompt at once and makes the first token: about the same "
         "cost either way. <b>Decode</b> is every step after it, one new token each. Without a cache the "
         "model "
         "recomputes keys and values for every earlier token at every step, so steps slow down as the text "
         "grows; with the KV cache it keeps them and computes only the newest token, so steps stay short and "
         "flat. The price is memory: a key and a value vector per layer for every position (<i>KV "
         "memory</i>). <i>Roofline</i> shows why a cached step is still not free: it reads every weight "
         "for one token, so it sits far left, on the memory-bandwidth slope."),
      this);
  explanation->setWordWrap(true);
  explanation->setObjectName(QStringLiteral("kvExplanation"));

  auto* controls = new QGroupBox(tr("Experiment"), this);
  auto* cv = new QVBoxLayout(controls);
  cv->addLayout(form);
  cv->addLayout(buttons);
  cv->addWidget(progress_);
  cv->addWidget(summary_);
  cv->addStretch();
  controls->setMinimumWidth(300);
  controls->setMaximumWidth(380);

  latencyChart_ = new ChartView(this);
  latencyChart_->setObjectName(QStringLiteral("kvLatencyChart"));
  latencyChart_->setTitle(tr("Per-token latency: without vs with KV cache"));
  latencyChart_->setAxisLabels(tr("generated token (0 = prefill + first token)"), tr("latency (ms)"));
  latencyChart_->addSeries(kWithout);
  latencyChart_->addSeries(kWith);
  latencyChart_->addVerticalMarker(0, tr("prefill"));
  memoryChart_ = new ChartView(this);
  memoryChart_->setObjectName(QStringLiteral("kvMemoryChart"));
  memoryChart_->setTitle(tr("KV-cache memory"));
  memoryChart_->setAxisLabels(tr("generated token"), tr("memory (MiB)"));
  memoryChart_->addSeries(tr("KV cache in use"));
  memoryChart_->addSeries(tr("KV cache preallocated"));

  rooflineChart_ = new RooflineChart(this);
  rooflineChart_->setObjectName(QStringLiteral("kvRooflineChart"));
  auto* side = new QTabWidget(this);
  side->setObjectName(QStringLiteral("kvSideCharts"));
  side->addTab(memoryChart_, tr("KV memory"));
  side->addTab(rooflineChart_, tr("Roofline"));
  auto* charts = new QSplitter(Qt::Horizontal, this);
  charts->addWidget(latencyChart_);
  charts->addWidget(side);
  charts->setStretchFactor(0, 3);
  charts->setStretchFactor(1, 2);
  charts->setSizes({600, 400});
  auto* right = new QVBoxLayout;
  right->addWidget(charts, 1);
  right->addWidget(explanation);
  auto* layout = new QHBoxLayout(this);
  layout->addWidget(controls);
  layout->addLayout(right, 1);

  updatePromptLengthEnabled();
}

void KvCacheTab::updatePromptLengthEnabled() {
  promptTokens_->setEnabled(repeatPrompt_->isChecked());
  promptTokensSpin_->setEnabled(repeatPrompt_->isChecked());
}

void KvCacheTab::setPrompt(const QString& prompt) { prompt_->setText(prompt); }
void KvCacheTab::setNewTokens(int n) { newTokens_->setValue(n); }
void KvCacheTab::setRepeats(int n) { repeats_->setValue(n); }
void KvCacheTab::setPromptTokens(int n) {
  repeatPrompt_->setChecked(n > 0);
  if (n > 0) promptTokensSpin_->setValue(n);
}
QString KvCacheTab::summaryText() const { return summary_->text(); }

void KvCacheTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  if (model.positions > 1) {
    promptTokens_->setMaximum(model.positions - 1);
    promptTokensSpin_->setMaximum(model.positions - 1);
    newTokens_->setMaximum(model.positions - 1);
  }
}

bool KvCacheTab::run() {
  servelab::KvCacheTimingParams p;
  p.prompt = prompt_->text().toStdString();
  p.prompt_tokens = repeatPrompt_->isChecked() ? promptTokensSpin_->value() : 0;
  p.new_tokens = newTokens_->value();
  p.repeats = repeats_->value();
  auto limits = std::make_shared<RooflineLimits>();
  EngineJob* job = engine_->submit(tr("KV-cache timing"), [p, limits](JobContext& c) {
    servelab::KvCacheTimingResult r = servelab::run_kv_cache_timing(c.engine(), p, c.control());
    limits->measure(c.engine());
    return r;
  });
  if (!job) return false;
  connect(job, &EngineJob::point, this, &KvCacheTab::onPoint);
  connect(job, &EngineJob::seriesReset, this, &KvCacheTab::onReset);
  progress_->follow(job);
  job->onResult<servelab::KvCacheTimingResult>(
      this, [this, limits](const auto& r) { onFinished(r, limits->limits()); });
  connect(job, &EngineJob::failed, this, &KvCacheTab::onFailed);
  runStarted();
  hasResult_ = false;
  lastError_.clear();
  promptLength_ = 0;
  for (ChartView* c : {latencyChart_, memoryChart_})
    for (int i = 0; i < c->seriesCount(); ++i) c->clearSeries(i);
  for (ChartView* c : {latencyChart_, memoryChart_}) c->rescale();
  rooflineChart_->startRun();
  progress_->start();
  summary_->setText(tr("Running: %1 new tokens, %2 repeats each way…").arg(p.new_tokens).arg(p.repeats));
  return true;
}

void KvCacheTab::onReset(const QString& series) {
  const int i = latencyChart_->seriesIndex(series);
  if (i >= 0) latencyChart_->clearSeries(i);
}

void KvCacheTab::onPoint(const QString& series, double x, double y) {
  const int i = latencyChart_->seriesIndex(series);
  if (i >= 0) latencyChart_->append(i, x, y);
}

void KvCacheTab::onFinished(const servelab::KvCacheTimingResult& r, const servelab::MachineLimits& limits) {
  result_ = r;
  hasResult_ = true;
  // The chart already holds the medians (the experiment streamed them last); draw them again from
  // the result so that what is shown is exactly what is reported and exported.
  QVector<double> xs, without, with;
  for (size_t i = 0; i < r.cache_ms.size(); ++i) {
    xs << static_cast<double>(i);
    without << r.no_cache_ms[i];
    with << r.cache_ms[i];
  }
  latencyChart_->setSeriesData(latencyChart_->seriesIndex(kWithout), xs, without);
  latencyChart_->setSeriesData(latencyChart_->seriesIndex(kWith), xs, with);
  latencyChart_->rescale();
  const double prompt = static_cast<double>(r.prompt_ids.size());
  QVector<double> used, allocated;
  for (double x : xs) {
    used << (prompt + x + 1) * static_cast<double>(r.kv_bytes_per_token) / kMiB;
    allocated << static_cast<double>(r.kv_cache_bytes) / kMiB;
  }
  memoryChart_->setSeriesData(0, xs, used);
  memoryChart_->setSeriesData(1, xs, allocated);
  memoryChart_->rescale();
  rooflineChart_->showSteps(limits, r.roofline);
  const QString setup = tr("%1-token prompt, %2 new tokens, median of %3 runs each way")
                            .arg(r.prompt_ids.size())
                            .arg(r.tokens.size())
                            .arg(r.repeats);
  latencyChart_->setFootnote(setup + QStringLiteral(" · ") + chartFootnote(model_));
  summary_->setText(tr("<table cellspacing='4'>"
                       "<tr><td></td><td><b>without cache</b></td><td><b>with cache</b></td></tr>"
                       "<tr><td>total</td><td>%1 ms</td><td>%2 ms</td></tr>"
                       "<tr><td>time to first token</td><td>%3 ms</td><td>%4 ms</td></tr>"
                       "<tr><td>last token</td><td>%5 ms</td><td>%6 ms</td></tr>"
                       "</table>"
                       "<p><b>Speed-up %7×</b> overall, %8× on decode steps · %9 prompt tokens, %10 new · "
                       "KV cache %11 MiB</p>")
                        .arg(r.no_cache_total_ms, 0, 'f', 1)
                        .arg(r.cache_total_ms, 0, 'f', 1)
                        .arg(r.no_cache_ms.front(), 0, 'f', 1)
                        .arg(r.cache_ms.front(), 0, 'f', 1)
                        .arg(r.no_cache_ms.back(), 0, 'f', 1)
                        .arg(r.cache_ms.back(), 0, 'f', 1)
                        .arg(r.speedup, 0, 'f', 2)
                        .arg(r.decode_speedup, 0, 'f', 2)
                        .arg(r.prompt_ids.size())
                        .arg(r.tokens.size())
                        .arg(static_cast<double>(r.kv_cache_bytes) / kMiB, 0, 'f', 2));
  progress_->finish();
  runEnded(true, QString());
}

void KvCacheTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The points measured so far stay on the chart."));
  runEnded(false, message);
}

QJsonObject KvCacheTab::lastResult() const {
  if (!hasResult_) {
    QJsonObject o{{QStringLiteral("experiment"), QStringLiteral("kv-cache")}};
    if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
    return o;
  }
  return toQJsonObject(result_.to_json());
}

QStringList KvCacheTab::resultValueNames() const {
  return {QStringLiteral("speedup"),           QStringLiteral("decode_speedup"),
          QStringLiteral("prompt_tokens"),     QStringLiteral("new_tokens"),
          QStringLiteral("first_token_ms"),    QStringLiteral("decode_ms"),
          QStringLiteral("first_token_steps"), QStringLiteral("no_cache_first_decode_ms"),
          QStringLiteral("no_cache_last_ms"),  QStringLiteral("no_cache_growth"),
          QStringLiteral("kv_cache_mib"),      QStringLiteral("kv_kib_per_token")};
}

// With the cache: first_token_ms is step 0 (prefill and the first token), decode_ms the median of
// the steps after it, first_token_steps their ratio. Without: the first and last decode step and
// how much the last grew over the first (each re-reads the whole sequence so far).
QMap<QString, double> KvCacheTab::resultValues() const {
  if (!hasResult_ || result_.cache_ms.empty()) return {};
  const servelab::KvCacheTimingResult& r = result_;
  QMap<QString, double> v{
      {QStringLiteral("speedup"), r.speedup},
      {QStringLiteral("decode_speedup"), r.decode_speedup},
      {QStringLiteral("prompt_tokens"), static_cast<double>(r.prompt_ids.size())},
      {QStringLiteral("new_tokens"), static_cast<double>(r.tokens.size())},
      {QStringLiteral("first_token_ms"), r.cache_ms.front()},
      {QStringLiteral("kv_cache_mib"), static_cast<double>(r.kv_cache_bytes) / kMiB},
      {QStringLiteral("kv_kib_per_token"), static_cast<double>(r.kv_bytes_per_token) / 1024.0}};
  const double decode = medianValue(std::vector<double>(r.cache_ms.begin() + 1, r.cache_ms.end()));
  if (decode > 0) {
    v[QStringLiteral("decode_ms")] = decode;
    v[QStringLiteral("first_token_steps")] = r.cache_ms.front() / decode;
  }
  if (r.no_cache_ms.size() >= 2 && r.no_cache_ms[1] > 0) {
    v[QStringLiteral("no_cache_first_decode_ms")] = r.no_cache_ms[1];
    v[QStringLiteral("no_cache_last_ms")] = r.no_cache_ms.back();
    v[QStringLiteral("no_cache_growth")] = r.no_cache_ms.back() / r.no_cache_ms[1];
  }
  return v;
}

void KvCacheTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  if (const auto prompt = settingString(s, QStringLiteral("prompt"))) prompt_->setText(*prompt);
  // 0 means "the prompt as typed"; more repeats it to that many tokens.
  if (const auto promptTokens =
          settingInteger(s, QStringLiteral("promptTokens"), 0, servelab::limits::kMaxTokens))
    setPromptTokens(static_cast<int>(*promptTokens));
  loadSpin(s, QStringLiteral("newTokens"), newTokens_);
  loadSpin(s, QStringLiteral("repeats"), repeats_);
  s.endGroup();
}

void KvCacheTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("prompt"), prompt_->text());
  s.setValue(QStringLiteral("promptTokens"), repeatPrompt_->isChecked() ? promptTokensSpin_->value() : 0);
  s.setValue(QStringLiteral("newTokens"), newTokens_->value());
  s.setValue(QStringLiteral("repeats"), repeats_->value());
  s.endGroup();
}

RunReport KvCacheTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(summary_);
  return r;
}

}  // namespace servelab::ui
