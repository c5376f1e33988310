#include "speculative_tab.h"

#include <QComboBox>
#include <QEvent>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QVBoxLayout>
#include <utility>

#include "chart_view.h"
#include "engine_controller.h"
#include "form_widgets.h"
#include "speculative/spec_charts.h"
#include "speculative/spec_text_view.h"
#include "text_format.h"

namespace servelab::ui {

namespace {

QStringList workload(const char* name) {
  QStringList out;
  for (const std::string& s : servelab::speculative_workload(name, 8)) out << QString::fromStdString(s);
  return out;
}

// The engine thread's side of a live run: each step of the request with its proposals and the
// tokens it gave, as readable text, posted to the job's speculativeStep signal.
class StepRelay : public servelab::ForwardingBatchSink {
 public:
  StepRelay(JobContext& c, servelab::BatchSink* next) : ForwardingBatchSink(next), c_(c) {}
  void on_token(int64_t request, int32_t id, const std::string& piece, int64_t step, double ms) override {
    ForwardingBatchSink::on_token(request, id, piece, step, ms);
    if (request == 0) tokens_ << QString::fromStdString(piece);
  }
  void on_step(const servelab::BatchStep& s) override {
    ForwardingBatchSink::on_step(s);
    SpecStepInfo info;
    info.step = s.step;
    info.ms = s.ms;
    info.tokens = std::exchange(tokens_, {});
    for (const servelab::SpecRow& row : s.speculation) {
      if (row.request != 0) continue;
      for (int32_t id : row.proposed) info.proposed << tokenText(c_.readableToken(id).toStdString());
      info.accepted = static_cast<int>(row.accepted);
    }
    c_.post([info = std::move(info)](EngineJob* j) { Q_EMIT j->speculativeStep(info); });
  }

 private:
  JobContext& c_;
  QStringList tokens_;
};

}  // namespace

QStringList SpeculativeTab::groundedPrompts() { return workload("grounded"); }
QStringList SpeculativeTab::openPrompts() { return workload("open"); }

SpeculativeTab::SpeculativeTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  // --- Controls ---
  presets_ = new QComboBox(this);
  presets_->setObjectName(QStringLiteral("speculativePresets"));
  presets_->setToolTip(
      tr("Input-grounded prompts copy their input (prompt lookup's best case); open-ended "
         "ones have little to copy"));
  presets_->addItem(tr("Choose a preset prompt…"));
  for (const QString& p : groundedPrompts())
    presets_->addItem(tr("grounded: %1").arg(p.simplified().left(60)), p);
  for (const QString& p : openPrompts())
    presets_->addItem(tr("open-ended: %1").arg(p.simplified().left(60)), p);
  presets_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  presets_->setMinimumContentsLength(16);
  connect(presets_, &QComboBox::activated, this, &SpeculativeTab::applyPresetPrompt);
  prompt_ = new QPlainTextEdit(groundedPrompts().value(1), this);
  prompt_->setObjectName(QStringLiteral("speculativePrompt"));
  prompt_->setMinimumHeight(80);
  prompt_->setMaximumHeight(110);
  method_ = new QComboBox(this);
  method_->setObjectName(QStringLiteral("speculativeMethod"));
  method_->addItem(tr("n-gram (prompt lookup)"), QStringLiteral("ngram"));
  method_->addItem(tr("draft model (int4 copy)"), QStringLiteral("draft"));
  method_->setToolTip(
      tr("n-gram: the last tokens matched earlier in the prompt and output, what followed proposed (no "
         "second model). Draft model: a cheaper copy of the loaded model proposes (for the built-in GGUF, "
         "its Q4 blocks draft for the file dequantized to fp32; a dense model drafts with its int4 copy)"));
  k_ = makeSpin(this, QStringLiteral("speculativeK"), 1, 16, 4);
  k_->setToolTip(tr("Tokens proposed per step (k)"));
  newTokens_ = makeSpin(this, QStringLiteral("speculativeNewTokens"), 1, 1000, 96);
  QHBoxLayout* buttons = makeRunButtons(
      QStringLiteral("speculative"),
      tr("Decode the prompt with speculation (live), then plainly for comparison (Ctrl+Return)"));
  sweepButton_ = new QPushButton(tr("Sweep k = 1, 2, 4, 8"), this);
  sweepButton_->setObjectName(QStringLiteral("speculativeSweep"));
  sweepButton_->setToolTip(
      tr("Plain decoding and the drafter at each k on this prompt, in interleaved rounds: the speed-up "
         "against k"));
  connect(sweepButton_, &QPushButton::clicked, this, [this] { runSweep(); });
  progress_ = new RunProgressBar(this, QStringLiteral("speculativeProgress"));
  summary_ = new QLabel(tr("Run to watch the drafter propose and the model verify."), this);
  summary_->setObjectName(QStringLiteral("speculativeSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* explanation = new QLabel(
      tr("<p><b>Why it helps.</b> Decoding one token reads every weight once to do a little arithmetic: "
         "it is memory-bound, so checking k proposed tokens in one forward costs about as much as making "
         "one. Each accepted proposal is a token for free, and greedy output stays exactly the model's.</p>"
         "<p><b>Why it can lose.</b> On a CPU the k-token verify is not free: its arithmetic grows with k, "
         "and a draft model costs time of its own. When few proposals are accepted (open-ended text, "
         "prompt lookup finding nothing to copy), that extra work buys nothing and speculation is slower "
         "than plain decoding.</p>"),
      this);
  explanation->setObjectName(QStringLiteral("speculativeExplanation"));
  explanation->setWordWrap(true);
  QFont small = explanation->font();
  small.setPointSizeF(small.pointSizeF() * 0.92);
  explanation->setFont(small);

  auto* box = new QGroupBox(tr("Speculative decoding"), this);
  auto* bv = new QVBoxLayout(box);
  bv->addWidget(presets_);
  bv->addWidget(prompt_);
  auto* form = new QGridLayout;
  form->addWidget(new QLabel(tr("Drafter"), this), 0, 0);
  form->addWidget(method_, 0, 1, 1, 3);
  form->addWidget(new QLabel(tr("k"), this), 1, 0);
  form->addWidget(k_, 1, 1);
  form->addWidget(new QLabel(tr("New tokens"), this), 1, 2);
  form->addWidget(newTokens_, 1, 3);
  bv->addLayout(form);
  bv->addLayout(buttons);
  bv->addWidget(sweepButton_);
  bv->addWidget(progress_);
  bv->addWidget(summary_);
  QScrollArea* leftScroll = makeSidePanel(this, {box, explanation}, 320, 380);

  // --- Text and charts ---
  text_ = new SpecTextView(this);
  legend_ = new QLabel(this);
  legend_->setObjectName(QStringLiteral("speculativeLegend"));
  legend_->setWordWrap(true);
  legend_->setText(SpecTextView::legendHtml(palette().color(QPalette::Base).lightness() < 128));
  auto* textPanel = new QWidget(this);
  auto* tv = new QVBoxLayout(textPanel);
  tv->setContentsMargins(0, 0, 0, 0);
  tv->setSpacing(2);
  tv->addWidget(legend_);
  tv->addWidget(text_, 1);
  acceptedChart_ = makeAcceptedLengthChart(this);
  throughputChart_ = makeThroughputChart(this);
  speedupChart_ = makeSpeedupChart(this);
  timeChart_ = makeTimeSplitChart(this);
  rooflineChart_ = new RooflineChart(this);
  rooflineChart_->setObjectName(QStringLiteral("specRooflineChart"));
  rooflineChart_->setTitle(tr("Plain decode and verify steps on the roofline"));
  // The roofline a page of its own beside the four charts: a quarter of the grid is too small for
  // a log-log plot, its roofs and its legend.
  auto* chartPages = new QTabWidget(this);
  chartPages->setObjectName(QStringLiteral("specChartPages"));
  chartPages->addTab(makeGrid(this, {acceptedChart_, throughputChart_, speedupChart_, timeChart_}),
                     tr("Acceptance and speed"));
  chartPages->addTab(rooflineChart_, tr("Roofline"));
  QWidget* chartGrid = chartPages;
  auto* right = new QSplitter(Qt::Vertical, this);
  right->addWidget(textPanel);
  right->addWidget(chartGrid);
  right->setStretchFactor(0, 1);
  right->setStretchFactor(1, 3);
  right->setSizes({190, 700});
  auto* layout = new QHBoxLayout(this);
  layout->addWidget(leftScroll);
  layout->addWidget(right, 1);
}

void SpeculativeTab::changeEvent(QEvent* event) {
  ExperimentTab::changeEvent(event);
  // The legend's colours follow the theme (the text keeps the colours it was written in).
  if (event->type() == QEvent::PaletteChange && legend_)
    legend_->setText(SpecTextView::legendHtml(palette().color(QPalette::Base).lightness() < 128));
}

void SpeculativeTab::applyPresetPrompt(int index) {
  const QString p = presets_->itemData(index).toString();
  if (!p.isEmpty()) prompt_->setPlainText(p);
}

void SpeculativeTab::setPrompt(const QString& prompt) { prompt_->setPlainText(prompt); }
QString SpeculativeTab::prompt() const { return prompt_->toPlainText(); }
void SpeculativeTab::setMethod(servelab::SpeculativeMethod m) {
  method_->setCurrentIndex(m == servelab::SpeculativeMethod::DraftModel ? 1 : 0);
}
void SpeculativeTab::setK(int k) { k_->setValue(k); }
void SpeculativeTab::setNewTokens(int n) { newTokens_->setValue(n); }
void SpeculativeTab::setSweepKs(const QVector<int>& ks) { sweepKs_ = ks; }
QString SpeculativeTab::summaryText() const { return summary_->text(); }

void SpeculativeTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  if (model.positions > 1) newTokens_->setMaximum(model.positions - 1);
}

servelab::SpeculativeDemoParams SpeculativeTab::params() const {
  servelab::SpeculativeDemoParams p;
  p.text = prompt_->toPlainText().toStdString();
  // A model without a chat template (the GPT-2 shape) continues the text as it is.
  p.chat = !model_.chatFamily.isEmpty();
  p.method = servelab::parse_speculative_method(method_->currentData().toString().toStdString());
  p.k = k_->value();
  p.new_tokens = newTokens_->value();
  return p;
}

// --- Runs ------------------------------------------------------------------------------------

bool SpeculativeTab::run() { return startDemo(false); }
bool SpeculativeTab::runSweep() { return startSweep(false); }

QStringList SpeculativeTab::presetIds() const {
  return {QStringLiteral("grounded"), QStringLiteral("open"), QStringLiteral("draft")};
}

bool SpeculativeTab::runPresetId(const QString& id) {
  if (!presetIds().contains(id))
    return refuseRun(tr("no preset \"%1\" (presets: %2)").arg(id, presetIds().join(QStringLiteral(", "))));
  setPrompt(id == QLatin1String("open") ? openPrompts().value(1) : groundedPrompts().value(1));
  setMethod(id == QLatin1String("draft") ? servelab::SpeculativeMethod::DraftModel
                                         : servelab::SpeculativeMethod::Ngram);
  return startDemo(true);
}

bool SpeculativeTab::startDemo(bool sweepAfter) {
  if (prompt_->toPlainText().trimmed().isEmpty()) return refuseRun(tr("the prompt is empty"));
  const servelab::SpeculativeDemoParams p = params();
  auto limits = std::make_shared<RooflineLimits>();
  EngineJob* job = engine_->submit(tr("speculative decoding"), [p, limits](JobContext& c) {
    servelab::ExperimentControl control = c.control();
    StepRelay relay(c, control.batch);
    control.batch = &relay;
    servelab::SpeculativeDemoResult r = servelab::run_speculative_demo(c.engine(), p, control);
    limits->measure(c.engine());
    return r;
  });
  if (!job) return false;
  follow(job);
  connect(job, &EngineJob::speculativeStep, this, &SpeculativeTab::onStep);
  job->onResult<servelab::SpeculativeDemoResult>(
      this, [this, limits](const auto& r) { onDemoFinished(r, limits->limits()); });
  runStarted();
  job_ = Job::Demo;
  sweepAfter_ = sweepAfter;
  hasResult_ = false;
  lastError_.clear();
  liveTokens_ = 0;
  liveMs_ = 0;
  for (ChartView* c : {acceptedChart_, throughputChart_}) {
    for (int i = 0; i < c->seriesCount(); ++i) c->clearSeries(i);
    c->rescale();
  }
  timeChart_->clearAll();
  rooflineChart_->startRun();
  text_->reset(prompt_->toPlainText());
  progress_->start();
  summary_->setText(tr("Decoding %1 tokens with %2 speculation, k = %3, and plainly, %4 rounds each way…")
                        .arg(p.new_tokens)
                        .arg(QString::fromUtf8(servelab::speculative_method_name(p.method)))
                        .arg(p.k)
                        .arg(p.rounds));
  return true;
}

bool SpeculativeTab::startSweep(bool chained) {
  if (prompt_->toPlainText().trimmed().isEmpty()) return refuseRun(tr("the prompt is empty"));
  const servelab::SpeculativeDemoParams d = params();
  servelab::SpeculativeBenchParams p;
  p.texts = {d.text};
  p.chat = d.chat;
  p.ks.clear();
  for (int k : sweepKs_) p.ks.push_back(k);
  p.new_tokens = d.new_tokens;
  p.rounds = 2;
  p.prompt_lookup_max = d.prompt_lookup_max;
  const servelab::SpeculativeMethod method = d.method;
  EngineJob* job = engine_->submit(tr("speculative decoding: k sweep"), [method, p](JobContext& c) {
    return servelab::run_speculative_sweep(c.engine(), method, p, c.control());
  });
  if (!job) return false;
  follow(job);
  job->onResult<servelab::SpeculativeBenchResult>(this, [this](const auto& r) { onSweepFinished(r); });
  if (!chained) {
    runStarted();
    lastError_.clear();
  }
  job_ = Job::Sweep;
  sweepAfter_ = false;
  hasSweep_ = false;
  sweepButton_->setEnabled(false);
  for (int i = 0; i < speedupChart_->seriesCount(); ++i) speedupChart_->clearSeries(i);
  progress_->start();
  return true;
}

void SpeculativeTab::follow(EngineJob* job) {
  connect(job, &EngineJob::failed, this, &SpeculativeTab::onFailed);
  progress_->follow(job);
  sweepButton_->setEnabled(false);
}

void SpeculativeTab::onStep(const SpecStepInfo& s) {
  text_->addStep(s);
  const double x = static_cast<double>(s.step);
  if (!s.proposed.isEmpty())
    acceptedChart_->append(acceptedChart_->seriesIndex(specProposedSeries()), x,
                           static_cast<double>(s.proposed.size()));
  acceptedChart_->append(acceptedChart_->seriesIndex(specGainedSeries()), x,
                         s.proposed.isEmpty() ? 1.0 : static_cast<double>(s.accepted + 1));
  if (s.step > 0) {
    liveTokens_ += s.tokens.size();
    liveMs_ += s.ms;
    if (liveMs_ > 0)
      throughputChart_->append(throughputChart_->seriesIndex(specSpeculativeSeries()),
                               static_cast<double>(liveTokens_ + 1),
                               static_cast<double>(liveTokens_) / liveMs_ * 1000.0);
  }
}

QString SpeculativeTab::demoSummary(const servelab::SpeculativeDemoResult& r) const {
  const servelab::SpecDecodeStats& st = r.speculative.speculative;
  const double speedup = r.plain_tokens_per_s > 0 ? r.speculative_tokens_per_s / r.plain_tokens_per_s : 0;
  return tr("<p><b>%1 tokens/s with speculation, %2 plain: %3×</b> (decode after the first token, median of "
            "%13 "
            "rounds each way).</p>"
            "<p>%4 of %5 proposed tokens accepted (%6%) over %7 verified steps: %8 tokens per verify. "
            "Drafting took %9 ms of %10 ms.</p><p>Drafter: %11</p><p>%12</p>")
      .arg(r.speculative_tokens_per_s, 0, 'f', 1)
      .arg(r.plain_tokens_per_s, 0, 'f', 1)
      .arg(speedup, 0, 'f', 2)
      .arg(st.num_accepted_tokens)
      .arg(st.num_draft_tokens)
      .arg(100.0 * st.acceptance_rate(), 0, 'f', 0)
      .arg(st.num_drafts)
      .arg(st.mean_accepted_length(), 0, 'f', 2)
      .arg(formatMsCoarse(st.draft_ms), formatMsCoarse(r.speculative.total_ms))
      .arg(QString::fromStdString(r.pairing).toHtmlEscaped(),
           r.identical ? tr("Same tokens as plain greedy decoding ✓")
                       : tr("<b>The tokens differ from plain greedy decoding.</b>"))
      .arg(r.params.rounds);
}

void SpeculativeTab::onDemoFinished(const servelab::SpeculativeDemoResult& r,
                                    const servelab::MachineLimits& limits) {
  result_ = r;
  hasResult_ = true;
  drawAcceptedLength(acceptedChart_, r.speculative);
  drawThroughput(throughputChart_, r);
  drawTimeSplit(timeChart_, r);
  rooflineChart_->showSteps(limits, r.roofline);
  summary_->setText(demoSummary(r));
  if (sweepAfter_ && startSweep(true)) return;
  progress_->finish();
  finish(true, QString());
}

void SpeculativeTab::onSweepFinished(const servelab::SpeculativeBenchResult& r) {
  sweep_ = r;
  hasSweep_ = true;
  drawSpeedup(speedupChart_, r);
  QStringList parts;
  for (const servelab::SpeculativeBenchRun& run : r.runs)
    if (run.method != servelab::SpeculativeMethod::None)
      parts << tr("k %1: %2×").arg(run.k).arg(run.speedup, 0, 'f', 2);
  const QString sweep = tr("<p><b>Sweep</b> (median of %1 rounds): %2.</p>")
                            .arg(r.params.rounds)
                            .arg(parts.join(QStringLiteral(" · ")));
  summary_->setText((hasResult_ ? demoSummary(result_) : QString()) + sweep);
  progress_->finish();
  finish(true, QString());
}

void SpeculativeTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The steps shown so far stay in the text and the charts."));
  finish(false, message);
}

void SpeculativeTab::finish(bool ok, const QString& message) {
  job_ = Job::None;
  sweepAfter_ = false;
  sweepButton_->setEnabled(true);
  runEnded(ok, message);
}

// --- Reports and settings --------------------------------------------------------------------

QStringList SpeculativeTab::resultValueNames() const {
  return {
      QStringLiteral("k"),       QStringLiteral("tokens_per_s"),       QStringLiteral("plain_tokens_per_s"),
      QStringLiteral("speedup"), QStringLiteral("acceptance_percent"), QStringLiteral("mean_accepted"),
      QStringLiteral("best_k"),  QStringLiteral("best_speedup")};
}

// The live run against plain decoding (decode tokens/s after the first token), its drafts'
// acceptance and the tokens a verified step gave on average; the k sweep's best k (presets run it).
QMap<QString, double> SpeculativeTab::resultValues() const {
  if (isRunning()) return {};
  QMap<QString, double> v;
  if (hasResult_) {
    const servelab::SpecDecodeStats& st = result_.speculative.speculative;
    v[QStringLiteral("k")] = static_cast<double>(result_.params.k);
    v[QStringLiteral("tokens_per_s")] = result_.speculative_tokens_per_s;
    v[QStringLiteral("plain_tokens_per_s")] = result_.plain_tokens_per_s;
    if (result_.plain_tokens_per_s > 0)
      v[QStringLiteral("speedup")] = result_.speculative_tokens_per_s / result_.plain_tokens_per_s;
    v[QStringLiteral("acceptance_percent")] = 100.0 * st.acceptance_rate();
    v[QStringLiteral("mean_accepted")] = st.mean_accepted_length();
  }
  if (hasSweep_) {
    const servelab::SpeculativeBenchRun* best = nullptr;
    for (const servelab::SpeculativeBenchRun& run : sweep_.runs)
      if (run.method != servelab::SpeculativeMethod::None && (!best || run.speedup > best->speedup))
        best = &run;
    if (best) {
      v[QStringLiteral("best_k")] = static_cast<double>(best->k);
      v[QStringLiteral("best_speedup")] = best->speedup;
    }
  }
  return v;
}

QJsonObject SpeculativeTab::lastResult() const {
  QJsonObject o = hasResult_
                      ? toQJsonObject(result_.to_json())
                      : QJsonObject{{QStringLiteral("experiment"), QStringLiteral("speculative-decoding")}};
  if (hasSweep_) o[QStringLiteral("sweep")] = toQJsonObject(sweep_.to_json());
  if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  return o;
}

void SpeculativeTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  if (const auto prompt = settingString(s, QStringLiteral("prompt"))) prompt_->setPlainText(*prompt);
  if (const auto method = settingChoice(s, QStringLiteral("method"), comboData(method_)))
    method_->setCurrentIndex(method_->findData(*method));
  loadSpin(s, QStringLiteral("k"), k_);
  loadSpin(s, QStringLiteral("newTokens"), newTokens_);
  s.endGroup();
}

void SpeculativeTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("prompt"), prompt_->toPlainText());
  s.setValue(QStringLiteral("method"), method_->currentData().toString());
  s.setValue(QStringLiteral("k"), k_->value());
  s.setValue(QStringLiteral("newTokens"), newTokens_->value());
  s.endGroup();
}

RunReport SpeculativeTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(summary_);
  return r;
}

}  // namespace servelab::ui
