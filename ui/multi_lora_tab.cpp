#include "multi_lora_tab.h"

#include <QEvent>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "chart_view.h"
#include "engine_controller.h"
#include "form_widgets.h"
#include "lora/builtin_adapters.h"
#include "multi_lora/adapter_list.h"
#include "multi_lora/adapter_serving_page.h"
#include "multi_lora/batch_composer.h"
#include "text_format.h"

namespace servelab::ui {

namespace {

const QString kBase = QStringLiteral("base");
// Every series in this order on both charts, so a strategy has one colour throughout the tab.
const QStringList kSeries = {kBase, QStringLiteral("loop"), QStringLiteral("gathered"),
                             QStringLiteral("segmented")};

// The legend's name of a series the experiment reports.
QString seriesLabel(const QString& series) { return series == kBase ? QObject::tr("base model") : series; }

}  // namespace

MultiLoraTab::MultiLoraTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  adapters_ = new AdapterList(engine_, this);
  math_ = new LoraMathPanel(this);
  composer_ = new BatchComposer(adapters_, this);
  serving_ = new AdapterServingPage(engine_, adapters_, composer_, this);
  QWidget* sweepBox = buildSweepBox();

  views_ = new QTabWidget(this);
  views_->setObjectName(QStringLiteral("loraViews"));
  views_->addTab(buildStrategiesPage(), tr("Strategies against batch size"));
  views_->addTab(serving_, tr("Serve with adapters (continuous batching)"));

  auto* top = new QWidget(this);
  auto* topRow = new QHBoxLayout(top);
  topRow->setContentsMargins(0, 0, 0, 0);
  topRow->addWidget(adapters_, 1);
  topRow->addWidget(math_);

  auto* right = new QSplitter(Qt::Vertical, this);
  right->setObjectName(QStringLiteral("loraSplitter"));
  right->addWidget(top);
  right->addWidget(views_);
  right->setStretchFactor(0, 0);
  right->setStretchFactor(1, 1);
  right->setSizes({150, 600});
  right->setChildrenCollapsible(false);

  auto* controlScroll = new QScrollArea(this);
  controlScroll->setWidget(sweepBox);
  controlScroll->setWidgetResizable(true);
  controlScroll->setFrameShape(QFrame::NoFrame);
  controlScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  controlScroll->setMinimumWidth(340);
  controlScroll->setMaximumWidth(360);

  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(controlScroll);
  layout->addWidget(right, 1);

  // The Run button runs the sweep whichever view is in front (Ctrl+Return runs the view's job).
  disconnect(runButton_, nullptr, this, nullptr);
  connect(runButton_, &QPushButton::clicked, this, [this] { runSweep(); });

  connect(adapters_, &AdapterList::changed, this, [this] {
    composer_->rebuildRowCombos();
    Q_EMIT adaptersChanged();
  });
  connect(composer_, &BatchComposer::fallbackChanged, adapters_, &AdapterList::setFallback);
  adapters_->setFallback(composer_->randomCount(), composer_->randomRank());
  connect(serving_, &AdapterServingPage::started, this, [this] {
    showView(QStringLiteral("serve"));
    startRun();
  });
  connect(serving_, &AdapterServingPage::finished, this, [this](bool ok, const QString& message) {
    if (!ok) lastError_ = message;
    endRun(ok, message);
  });
}

// --- Building the tab -------------------------------------------------------------------------

QWidget* MultiLoraTab::buildSweepBox() {
  QHBoxLayout* buttons = makeRunButtons(
      QStringLiteral("lora"), tr("Time every strategy and the base model at each batch size (Ctrl+Return)"));
  progress_ = new RunProgressBar(this, QStringLiteral("loraProgress"));
  summary_ = new QLabel(tr("Run to time the strategies against the base model at each batch size."), this);
  summary_->setObjectName(QStringLiteral("loraSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  agreement_ = new QLabel(this);
  agreement_->setObjectName(QStringLiteral("loraAgreement"));
  agreement_->setWordWrap(true);
  agreement_->hide();

  auto* box = new QGroupBox(tr("A batch of adapters"), this);
  auto* v = new QVBoxLayout(box);
  v->addWidget(composer_);
  v->addLayout(buttons);
  v->addWidget(progress_);
  v->addWidget(summary_);
  v->addWidget(agreement_);
  auto* explanation = new QLabel(
      tr("<b>LoRA</b> freezes a weight matrix W and adds a low-rank update, y = xW + (α/r)·xAB, so one base "
         "model can serve many small fine-tuned adapters. When the rows of a batch use different adapters, "
         "the "
         "course's <b>loop</b> does one tiny product pair per row and leaves the hardware idle; "
         "<b>gathered</b> "
         "picks every row's A and B from one stack for one batched matmul, and <b>segmented</b> (Punica's "
         "SGMV) does one product pair per adapter for the rows that share it."),
      this);
  explanation->setObjectName(QStringLiteral("loraExplanation"));
  explanation->setWordWrap(true);
  QFont small = explanation->font();
  small.setPointSizeF(small.pointSizeF() * 0.95);
  explanation->setFont(small);
  explanation->setContentsMargins(4, 0, 4, 0);
  auto* column = new QWidget(this);
  auto* cv = new QVBoxLayout(column);
  cv->setContentsMargins(0, 0, 0, 0);
  cv->addWidget(box);
  cv->addWidget(explanation);
  cv->addStretch(1);
  return column;
}

QWidget* MultiLoraTab::buildStrategiesPage() {
  latencyChart_ = new ChartView(this);
  latencyChart_->setObjectName(QStringLiteral("loraLatencyChart"));
  latencyChart_->setTitle(tr("Decode step per strategy vs batch size"));
  latencyChart_->setAxisLabels(tr("batch size (rows)"), tr("decode step, median (ms)"));
  latencyChart_->setLogXBase2(true);
  ratioChart_ = new ChartView(this);
  ratioChart_->setObjectName(QStringLiteral("loraRatioChart"));
  ratioChart_->setTitle(tr("Step time ÷ the base model's"));
  ratioChart_->setAxisLabels(tr("batch size (rows)"), tr("× the base model's step"));
  ratioChart_->setLogXBase2(true);
  latencyChart_->setLegendBelow(true);
  latencyChart_->setLegendColumns(4);  // one row: the plot keeps its height
  ratioChart_->setLegendBelow(true);
  for (const QString& s : kSeries) {
    latencyChart_->addSeries(seriesLabel(s));
    ratioChart_->addSeries(seriesLabel(s));
  }

  caveat_ = new QLabel(this);
  caveat_->setObjectName(QStringLiteral("loraCaveat"));
  caveat_->setStyleSheet(QStringLiteral("QLabel { color: #b35900; font-weight: bold; }"));
  caveat_->setWordWrap(true);
  caveat_->hide();
  outputs_ = new QTextBrowser(this);
  outputs_->setObjectName(QStringLiteral("loraOutputs"));
  outputs_->setOpenLinks(false);
  outputs_->setPlaceholderText(
      tr("After a run: the prompt's greedy continuation through each adapter, base first."));
  auto* outputsPage = new QWidget(this);
  auto* ov = new QVBoxLayout(outputsPage);
  ov->setContentsMargins(2, 2, 2, 2);
  ov->addWidget(caveat_);
  ov->addWidget(outputs_, 1);

  pointsTable_ = makeCompactTable(this, QStringLiteral("loraPoints"), {tr("batch")});
  shapesTable_ = makeCompactTable(this, QStringLiteral("loraShapes"),
                                  {tr("module"), tr("W [in × out]"), tr("A [in × r]"), tr("B [r × out]"),
                                   tr("|W|"), tr("|A| + |B|"), tr("(|A| + |B|) / |W|")});

  detailTabs_ = new QTabWidget(this);
  detailTabs_->setObjectName(QStringLiteral("loraDetailTabs"));
  detailTabs_->addTab(outputsPage, tr("Text per adapter"));
  detailTabs_->addTab(pointsTable_, tr("Times and ratios"));
  detailTabs_->addTab(shapesTable_, tr("LoRA shapes of the run"));

  auto* charts = new QWidget(this);
  auto* chartRow = new QHBoxLayout(charts);
  chartRow->setContentsMargins(0, 0, 0, 0);
  chartRow->addWidget(latencyChart_, 3);
  chartRow->addWidget(ratioChart_, 2);
  auto* top = new QWidget(this);
  auto* tv = new QVBoxLayout(top);
  tv->setContentsMargins(0, 0, 0, 0);
  tv->addWidget(charts, 1);

  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName(QStringLiteral("loraChartsSplitter"));
  chartsSplit_ = split;
  split->addWidget(top);
  split->addWidget(detailTabs_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({330, 170});
  split->setChildrenCollapsible(false);
  return split;
}

ChartView* MultiLoraTab::primaryChart() const {
  return currentView() == QLatin1String("serve") ? serving_->chart() : latencyChart_;
}

QList<ChartView*> MultiLoraTab::charts() const { return {latencyChart_, ratioChart_, serving_->chart()}; }

// --- The pieces, as one tab -------------------------------------------------------------------

void MultiLoraTab::setMathModule(const QString& module) { math_->setModule(module); }
void MultiLoraTab::setMathRank(int rank) { math_->setRank(rank); }
void MultiLoraTab::setMathAlpha(double alpha) { math_->setAlpha(alpha); }
LoraMath MultiLoraTab::math() const { return math_->math(); }
QString MultiLoraTab::mathText() const { return math_->text(); }

void MultiLoraTab::loadPeftFolder(const QString& dir) { adapters_->loadPeftFolder(dir); }
void MultiLoraTab::addRandomAdapters(int rank, double alpha, int count) {
  adapters_->addRandomAdapters(rank, alpha, count);
}
void MultiLoraTab::removeAdapter(int row) { adapters_->removeAdapter(row); }
void MultiLoraTab::clearAdapters() { adapters_->clear(); }
int MultiLoraTab::adapterCount() const { return adapters_->count(); }
QVector<servelab::AdapterSource> MultiLoraTab::adapterSources() const { return adapters_->sources(); }
std::optional<servelab::AdapterInfo> MultiLoraTab::adapterInfo(int row) const { return adapters_->info(row); }
int MultiLoraTab::pendingAdapters() const { return adapters_->pending(); }
QString MultiLoraTab::adapterError() const { return adapters_->error(); }

void MultiLoraTab::setWorkload(const QString& workload) { composer_->setWorkload(workload); }
void MultiLoraTab::setAssignment(const QString& assignment) { composer_->setAssignment(assignment); }
void MultiLoraTab::setSharedAdapters(int n) { composer_->setSharedAdapters(n); }
void MultiLoraTab::setRowAdapters(const QStringList& names) { composer_->setRowAdapters(names); }
QStringList MultiLoraTab::rowAdapters() const { return composer_->rowAdapters(); }
void MultiLoraTab::setBatchSizes(const QString& sizes) { composer_->setBatchSizes(sizes); }
QVector<qint64> MultiLoraTab::batchSizes(QString* error) const { return composer_->batchSizes(error); }
void MultiLoraTab::setStrategies(const QStringList& strategies) { composer_->setStrategies(strategies); }
QStringList MultiLoraTab::strategies() const { return composer_->strategies(); }
void MultiLoraTab::setRandomAdapters(int count, int rank) { composer_->setRandomAdapters(count, rank); }
void MultiLoraTab::setContext(int tokens) { composer_->setContext(tokens); }
void MultiLoraTab::setDecodeSteps(int steps) { composer_->setDecodeSteps(steps); }
void MultiLoraTab::setRepeats(int repeats) { composer_->setRepeats(repeats); }
void MultiLoraTab::setToySamples(int samples) { composer_->setToySamples(samples); }
void MultiLoraTab::setPrompt(const QString& prompt) { composer_->setPrompt(prompt); }
void MultiLoraTab::setNewTokens(int n) { composer_->setNewTokens(n); }
servelab::MultiLoraParams MultiLoraTab::params() const { return composer_->params(); }

void MultiLoraTab::setServeRequests(int n) { serving_->setRequests(n); }
void MultiLoraTab::setServeMaxBatch(int n) { serving_->setMaxBatch(n); }
void MultiLoraTab::setServeNewTokens(int n) { serving_->setNewTokens(n); }
void MultiLoraTab::setCacheCapacity(int n) { serving_->setCacheCapacity(n); }
void MultiLoraTab::setServeStrategy(const QString& strategy) { serving_->setStrategy(strategy); }
servelab::AdapterServingParams MultiLoraTab::serveParams() const { return serving_->params(); }
bool MultiLoraTab::hasServeResult() const { return serving_->hasResult(); }
const servelab::BatchRunResult& MultiLoraTab::serveResult() const { return serving_->result(); }
const servelab::AdapterCacheStats& MultiLoraTab::liveCache() const { return serving_->liveCache(); }

// --- Views ------------------------------------------------------------------------------------

void MultiLoraTab::showView(const QString& view) {
  views_->setCurrentIndex(view == QLatin1String("serve") ? 1 : 0);
}

QString MultiLoraTab::currentView() const {
  return views_->currentIndex() == 1 ? QStringLiteral("serve") : QStringLiteral("strategies");
}

void MultiLoraTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  caveat_->setText(model.caveat.isEmpty() ? QString() : tr("Built-in demo model: %1.").arg(model.caveat));
  caveat_->setVisible(!model.caveat.isEmpty());
  composer_->setModel(model);
  serving_->setModel(model);
  math_->setModel(model);
  adapters_->setModel(model);
}

// --- Runs -------------------------------------------------------------------------------------

bool MultiLoraTab::run() { return currentView() == QLatin1String("serve") ? serve() : runSweep(); }

bool MultiLoraTab::serve() { return serving_->serve(); }

bool MultiLoraTab::runSweep() {
  QString error;
  const QVector<qint64> sizes = batchSizes(&error);
  if (sizes.isEmpty()) {
    summary_->setText(tr("<b>Cannot run:</b> %1.").arg(error.toHtmlEscaped()));
    return refuseRun(error);
  }
  if (strategies().isEmpty()) {
    summary_->setText(tr("<b>Cannot run:</b> choose at least one strategy."));
    return refuseRun(tr("choose at least one strategy"));
  }
  if (adapters_->joining() > 0) {
    summary_->setText(tr("<b>Cannot run yet:</b> adapters are still being loaded."));
    return refuseRun(tr("adapters are still being loaded"));
  }
  const servelab::MultiLoraParams p = params();
  EngineJob* job = engine_->submit(tr("multi-LoRA"), [p](JobContext& c) {
    servelab::MultiLoraResult r = servelab::run_multi_lora(c.engine(), p, c.control());
    // The texts' tokens as the other tabs show tokens (their own bytes, a leading space as an open
    // box), not the vocabulary's spellings. The toy workload's outputs have no GPT-2 tokens.
    if (r.workload != "toy")
      for (servelab::AdapterOutput& o : r.outputs) {
        o.pieces.clear();
        for (int32_t id : o.tokens) o.pieces.push_back(c.readableToken(id).toStdString());
      }
    return r;
  });
  if (!job) return false;
  connect(job, &EngineJob::point, this, &MultiLoraTab::onPoint);
  connect(job, &EngineJob::seriesReset, this, &MultiLoraTab::onReset);
  progress_->follow(job);
  job->onResult<servelab::MultiLoraResult>(this, [this](const auto& r) { onFinished(r); });
  connect(job, &EngineJob::failed, this, &MultiLoraTab::onFailed);
  startRun();
  hasResult_ = false;
  runParams_ = p;
  liveToy_ = p.workload == "toy";
  resultPrompt_ = liveToy_ ? tr("(the toy model's tokens)") : composer_->prompt();
  live_.clear();
  drawLive();
  latencyChart_->rescale();
  ratioChart_->rescale();
  latencyChart_->setAxisLabels(tr("batch size (rows)"),
                               liveToy_ ? tr("forward pass, mean (ms)") : tr("decode step, median (ms)"));
  latencyChart_->setTitle(liveToy_ ? tr("Toy model: forward pass per strategy vs batch size")
                                   : tr("Decode step per strategy vs batch size"));
  ratioChart_->setTitle(liveToy_ ? tr("Forward pass ÷ the base model's")
                                 : tr("Step time ÷ the base model's"));
  pointsTable_->setRowCount(0);
  shapesTable_->setRowCount(0);
  outputs_->clear();
  outputs_->setProperty("sourceHtml", QString());
  agreement_->hide();
  progress_->start();
  const QString adapters = liveToy_ ? tr("%1 random adapters of rank %2").arg(p.toy_adapters).arg(p.toy_rank)
                           : p.adapters.empty()
                               ? tr("%1 random adapters of rank %2").arg(p.random_adapters).arg(p.random_rank)
                               : tr("%n listed adapter(s)", nullptr, static_cast<int>(p.adapters.size()));
  summary_->setText(
      tr("Running: %1 batch sizes, %2, rows %3, %4…")
          .arg(sizes.size())
          .arg(strategies().join(QStringLiteral(", ")), QString::fromStdString(p.assignment), adapters));
  return true;
}

void MultiLoraTab::startRun() {
  runStarted();
  lastError_.clear();
  adapters_->setEditable(false);
}

void MultiLoraTab::endRun(bool ok, const QString& message) {
  adapters_->setEditable(true);
  runEnded(ok, message);
}

void MultiLoraTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The points measured so far stay on the charts."));
  endRun(false, message);
}

// --- The sweep's results ----------------------------------------------------------------------

void MultiLoraTab::onPoint(const QString& series, double x, double y) {
  if (!kSeries.contains(series)) return;
  live_[series][std::llround(x)] = y;
  drawLive();
}

void MultiLoraTab::onReset(const QString& series) {
  live_.remove(series);
  drawLive();
}

void MultiLoraTab::drawLive() {
  const QMap<qint64, double> base = live_.value(kBase);
  for (const QString& s : kSeries) {
    const QMap<qint64, double> points = live_.value(s);
    QVector<double> xs, ys, rx, ry;
    for (auto it = points.begin(); it != points.end(); ++it) {
      xs << static_cast<double>(it.key());
      ys << it.value();
      if (base.contains(it.key()) && base.value(it.key()) > 0) {
        rx << static_cast<double>(it.key());
        ry << it.value() / base.value(it.key());
      }
    }
    latencyChart_->setSeriesData(latencyChart_->seriesIndex(seriesLabel(s)), xs, ys);
    ratioChart_->setSeriesData(ratioChart_->seriesIndex(seriesLabel(s)), rx, ry);
  }
}

void MultiLoraTab::onFinished(const servelab::MultiLoraResult& r) {
  result_ = r;
  hasResult_ = true;
  liveToy_ = r.workload == "toy";
  // Drawn again from the result, so the charts, the table and the report agree exactly.
  live_.clear();
  QMap<QString, QMap<qint64, double>> ratios;
  for (const servelab::MultiLoraPoint& p : r.points) {
    const QString s = QString::fromStdString(p.strategy);
    live_[s][p.batch] = p.ms;
    if (s == kBase)
      ratios[s][p.batch] = 1.0;
    else if (p.ratio_to_base > 0)
      ratios[s][p.batch] = p.ratio_to_base;
  }
  for (const QString& s : kSeries) {
    QVector<double> xs, ys, rx, ry;
    const QMap<qint64, double> points = live_.value(s);
    for (auto it = points.begin(); it != points.end(); ++it) {
      xs << static_cast<double>(it.key());
      ys << it.value();
    }
    const QMap<qint64, double> rs = ratios.value(s);
    for (auto it = rs.begin(); it != rs.end(); ++it) {
      rx << static_cast<double>(it.key());
      ry << it.value();
    }
    latencyChart_->setSeriesData(latencyChart_->seriesIndex(seriesLabel(s)), xs, ys);
    ratioChart_->setSeriesData(ratioChart_->seriesIndex(seriesLabel(s)), rx, ry);
  }
  latencyChart_->rescale();
  ratioChart_->rescale();
  const QString note = liveToy_ ? tr("the course's toy model, %1 forward passes").arg(runParams_.toy_samples)
                                : tr("%1 rows · context %2 · median of %3×%4 steps")
                                      .arg(QString::fromStdString(r.assignment))
                                      .arg(runParams_.context)
                                      .arg(runParams_.repeats)
                                      .arg(runParams_.decode_steps);
  latencyChart_->setFootnote(note + QStringLiteral(" · ") + chartFootnote(model_));
  ratioChart_->setFootnote(chartFootnote(model_));

  fillPointsTable(r);
  fillShapes(r);
  drawOutputs();
  setAgreement(r);
  detailTabs_->setCurrentIndex(r.outputs.empty() ? 1 : 0);
  // Adapters on prompts of their own (the built-in ones): their texts are the point, so the text
  // gets at least half of the height the charts share with it.
  if (!runParams_.adapter_prompts.empty()) {
    const QList<int> sizes = chartsSplit_->sizes();
    const int total = sizes.value(0) + sizes.value(1), text = total / 2;
    if (sizes.size() == 2 && sizes[1] < text) chartsSplit_->setSizes({total - text, text});
  }

  // The headline: at the largest batch, each strategy against the base model (or the loop).
  int64_t largest = 0;
  for (const servelab::MultiLoraPoint& p : r.points) largest = std::max(largest, p.batch);
  QMap<QString, double> at;
  for (const servelab::MultiLoraPoint& p : r.points)
    if (p.batch == largest) at[QString::fromStdString(p.strategy)] = p.ms;
  QStringList parts;
  for (const QString& s : kSeries.mid(1)) {
    if (!at.contains(s)) continue;
    if (at.contains(kBase) && at.value(kBase) > 0)
      parts << tr("%1 <b>×%2</b>").arg(s).arg(at.value(s) / at.value(kBase), 0, 'f', 2);
    else
      parts << tr("%1 %2 ms").arg(s, formatMs(at.value(s)));
  }
  QString text = at.contains(kBase)
                     ? tr("At batch %1, step time ÷ the base model's %2 ms: %3.")
                           .arg(largest)
                           .arg(formatMs(at.value(kBase)), parts.join(QStringLiteral(", ")))
                     : tr("At batch %1: %2.").arg(largest).arg(parts.join(QStringLiteral(", ")));
  if (at.contains(QStringLiteral("loop"))) {
    QString best;
    double bestMs = 0;
    for (const QString& s : {QStringLiteral("gathered"), QStringLiteral("segmented")})
      if (at.contains(s) && (best.isEmpty() || at.value(s) < bestMs)) {
        best = s;
        bestMs = at.value(s);
      }
    const double loopMs = at.value(QStringLiteral("loop"));
    if (!best.isEmpty() && bestMs > 0 && loopMs >= bestMs)
      text += tr("<br><b>%1 is %2× as fast as the loop</b> there.").arg(best).arg(loopMs / bestMs, 0, 'f', 2);
    else if (!best.isEmpty() && loopMs > 0)
      text +=
          tr("<br><b>The loop is %1× as fast as %2</b> there: with few rows its small products cost little.")
              .arg(bestMs / loopMs, 0, 'f', 2)
              .arg(best);
  }
  summary_->setText(text);
  progress_->finish();
  endRun(true, QString());
}

void MultiLoraTab::fillPointsTable(const servelab::MultiLoraResult& r) {
  QStringList present;
  for (const QString& s : kSeries)
    for (const servelab::MultiLoraPoint& p : r.points)
      if (QString::fromStdString(p.strategy) == s && !present.contains(s)) present << s;
  QVector<qint64> batches;
  for (const servelab::MultiLoraPoint& p : r.points)
    if (!batches.contains(p.batch)) batches << p.batch;
  std::sort(batches.begin(), batches.end());
  QStringList headers{tr("batch")};
  for (const QString& s : present) headers << (s == kBase ? tr("base (ms)") : tr("%1 ms (× base)").arg(s));
  headers << tr("distinct adapters");
  pointsTable_->clear();
  pointsTable_->setColumnCount(static_cast<int>(headers.size()));
  pointsTable_->setHorizontalHeaderLabels(headers);
  pointsTable_->setRowCount(static_cast<int>(batches.size()));
  for (int row = 0; row < batches.size(); ++row) {
    pointsTable_->setItem(row, 0, tableCell(QString::number(batches[row])));
    int64_t distinct = 0;
    for (int c = 0; c < present.size(); ++c) {
      for (const servelab::MultiLoraPoint& p : r.points) {
        if (p.batch != batches[row] || QString::fromStdString(p.strategy) != present[c]) continue;
        const QString text =
            p.ratio_to_base > 0 && present[c] != kBase
                ? QStringLiteral("%1 (×%2)").arg(formatMs(p.ms)).arg(p.ratio_to_base, 0, 'f', 2)
                : formatMs(p.ms);
        pointsTable_->setItem(row, c + 1, tableCell(text));
        distinct = std::max(distinct, p.distinct_adapters);
      }
    }
    pointsTable_->setItem(row, static_cast<int>(present.size()) + 1, tableCell(QString::number(distinct)));
  }
}

void MultiLoraTab::fillShapes(const servelab::MultiLoraResult& r) {
  shapesTable_->setRowCount(static_cast<int>(r.shapes.size()));
  for (int i = 0; i < static_cast<int>(r.shapes.size()); ++i) {
    const servelab::LoraShapes& s = r.shapes[size_t(i)];
    const QStringList cells = {QString::fromStdString(s.module),
                               QStringLiteral("%1 × %2").arg(s.in).arg(s.out),
                               QStringLiteral("%1 × %2").arg(s.in).arg(s.rank),
                               QStringLiteral("%1 × %2").arg(s.rank).arg(s.out),
                               formatCount(s.w_parameters),
                               formatCount(s.ab_parameters),
                               loraPercent(s.ratio)};
    for (int c = 0; c < cells.size(); ++c) shapesTable_->setItem(i, c, tableCell(cells[c], c > 0));
  }
}

void MultiLoraTab::drawOutputs() {
  if (!hasResult_ || result_.outputs.empty()) {
    outputs_->clear();
    outputs_->setProperty("sourceHtml", QString());
    return;
  }
  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  const QString muted = dark ? QStringLiteral("#a0a0a0") : QStringLiteral("#666666");
  const QString shade = dark ? QStringLiteral("#2e2e2e") : QStringLiteral("#eef2f6");
  const QString border = dark ? QStringLiteral("#555555") : QStringLiteral("#c8c8c8");
  const auto adapterName = [this](const servelab::AdapterOutput& o) {
    return o.adapter.empty() ? tr("base model") : QString::fromStdString(o.adapter).toHtmlEscaped();
  };
  // maxChars > 0: the tokens up to about that many characters, then an ellipsis.
  const auto textHtml = [&](const servelab::AdapterOutput& o, int maxChars) {
    // Token boundaries as a faint shade on every other token; the ids in the tooltip.
    QString text;
    if (!o.pieces.empty()) {
      int shown = 0;
      for (size_t k = 0; k < o.pieces.size(); ++k) {
        if (maxChars > 0 && shown >= maxChars) {
          text += QStringLiteral("<span style='color:%1'> … (%2 tokens in all)</span>")
                      .arg(muted)
                      .arg(o.pieces.size());
          break;
        }
        shown += static_cast<int>(tokenText(o.pieces[k]).size());
        const QString piece = tokenText(o.pieces[k]).toHtmlEscaped();
        const QString id = k < o.tokens.size() ? QString::number(o.tokens[k]) : QString();
        // A control token (<|im_end|>, <|endoftext|>: where the text ended) faint.
        if (o.pieces[k].size() > 4 && o.pieces[k].rfind("<|", 0) == 0 && o.pieces[k].ends_with("|>")) {
          text += QStringLiteral("<span title='id %1' style='color:%2; white-space:nowrap'>%3</span>")
                      .arg(id, muted, piece);
          continue;
        }
        text += k % 2 ? QStringLiteral("<span title='id %1' style='background-color:%2'>%3</span>")
                            .arg(id, shade, piece)
                      : QStringLiteral("<span title='id %1'>%2</span>").arg(id, piece);
      }
    } else if (!o.text.empty()) {
      text = QString::fromStdString(o.text).toHtmlEscaped();
    } else {
      QStringList ids;
      for (int32_t t : o.tokens) ids << QString::number(t);
      text = tr("token ids %1").arg(ids.join(QStringLiteral(" ")));
    }
    return text;
  };
  const auto ownPrompt = [this](const servelab::AdapterOutput& o) {
    return !o.prompt.empty() && o.prompt != runParams_.prompt;
  };
  // The rows that continued the composer's prompt, side by side.
  QString html;
  QList<const servelab::AdapterOutput*> plain;
  for (const servelab::AdapterOutput& o : result_.outputs)
    if (!ownPrompt(o)) plain << &o;
  if (!plain.isEmpty()) {
    html +=
        tr("<p style='margin:2px'><span style='color:%1'>prompt</span> <b>%2</b> <span style='color:%1'>· "
           "greedy, the same prompt through each adapter</span></p>")
            .arg(muted, resultPrompt_.toHtmlEscaped());
    html += QStringLiteral(
        "<table width='100%' cellspacing='0' cellpadding='4' style='border-collapse:collapse'><tr>");
    for (const servelab::AdapterOutput* o : plain)
      html += QStringLiteral("<th align='left' style='border-bottom:1px solid %1'>%2</th>")
                  .arg(border, adapterName(*o));
    html += QStringLiteral("</tr><tr>");
    for (const servelab::AdapterOutput* o : plain)
      html += QStringLiteral("<td valign='top' style='white-space:pre-wrap'>%1</td>").arg(textHtml(*o, 0));
    html += QStringLiteral("</tr></table>");
  }
  // Adapters with a prompt format of their own (the built-in ones): one row each, the base model's
  // continuation of the very same prompt beside the adapter's.
  QString own;
  for (size_t i = 0; i < result_.outputs.size(); ++i) {
    const servelab::AdapterOutput& o = result_.outputs[i];
    if (o.adapter.empty() || !ownPrompt(o)) continue;
    const servelab::AdapterOutput* base = nullptr;
    for (const servelab::AdapterOutput& b : result_.outputs)
      if (b.adapter.empty() && b.prompt == o.prompt) base = &b;
    const servelab::BuiltinAdapter* builtin = servelab::find_builtin_adapter(o.adapter);
    QString input = QString::fromStdString(o.prompt);
    QString job;
    if (builtin && o.prompt == servelab::builtin_adapter_prompt(*builtin, builtin->example_input)) {
      input = QString::fromStdString(builtin->example_input);
      job = QString::fromStdString(builtin->job);
    }
    if (input.size() > 90) input = input.left(90) + QStringLiteral("…");
    own +=
        QStringLiteral(
            "<tr><td valign='top'><b>%1</b><br><span style='color:%2; font-size:small'>%3</span></td>"
            "<td valign='top' title=\"%4\"><span style='color:%2; font-size:small'>%5</span></td>"
            "<td valign='top' style='white-space:pre-wrap'>%6</td>"
            "<td valign='top' style='white-space:pre-wrap'><span style='color:%2; "
            "font-size:small'>%7</span></td></tr>")
            .arg(adapterName(o), muted, job.toHtmlEscaped(), QString::fromStdString(o.prompt).toHtmlEscaped(),
                 input.toHtmlEscaped(), textHtml(o, 0), base ? textHtml(*base, 80) : QString());
  }
  if (!own.isEmpty()) {
    html += tr("<p style='margin:2px'><span style='color:%1'>greedy · each adapter on its own prompt format, "
               "the course's example as input (the whole prompt in the tooltip), the base model on the same "
               "prompt beside it</span></p>")
                .arg(muted);
    html += QStringLiteral(
                "<table width='100%' cellspacing='0' cellpadding='4' style='border-collapse:collapse'><tr>"
                "<th align='left' width='22%' style='border-bottom:1px solid %1'>%2</th>"
                "<th align='left' width='24%' style='border-bottom:1px solid %1'>%3</th>"
                "<th align='left' width='30%' style='border-bottom:1px solid %1'>%4</th>"
                "<th align='left' width='24%' style='border-bottom:1px solid %1'>%5</th></tr>")
                .arg(border, tr("adapter"), tr("input"), tr("through the adapter"),
                     tr("base model, same prompt"));
    html += own + QStringLiteral("</table>");
  }
  outputs_->setProperty("sourceHtml", html);
  outputs_->setHtml(html);
}

void MultiLoraTab::setAgreement(const servelab::MultiLoraResult& r) {
  // The toy workload compares tokens only; GPT-2's also measures how far the logits drift.
  const bool logits = r.workload != "toy";
  if (r.strategies_agree) {
    agreement_->setText(logits ? tr("✓ All strategies gave identical tokens (logits within %1).")
                                     .arg(r.max_strategy_difference, 0, 'g', 2)
                               : tr("✓ All strategies gave identical tokens."));
    agreement_->setStyleSheet(QStringLiteral("QLabel { color: #1b7f3b; font-weight: bold; }"));
  } else {
    agreement_->setText(logits ? tr("✗ The strategies gave different tokens (logits differ by up to %1).")
                                     .arg(r.max_strategy_difference, 0, 'g', 3)
                               : tr("✗ The strategies gave different tokens."));
    agreement_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; font-weight: bold; }"));
  }
  agreement_->show();
}

// --- Reports, theme and settings --------------------------------------------------------------

QString MultiLoraTab::summaryText() const { return summary_->text(); }
QString MultiLoraTab::agreementText() const {
  return agreement_->isVisible() ? agreement_->text() : QString();
}
QString MultiLoraTab::outputsHtml() const { return outputs_->property("sourceHtml").toString(); }
QString MultiLoraTab::serveSummaryText() const { return serving_->summaryText(); }

void MultiLoraTab::changeEvent(QEvent* event) {
  ExperimentTab::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) drawOutputs();  // text colours follow the theme
}

QStringList MultiLoraTab::resultValueNames() const {
  return {// The strategy sweep.
          QStringLiteral("largest_batch"), QStringLiteral("base_ms"), QStringLiteral("loop_ratio"),
          QStringLiteral("gathered_ratio"), QStringLiteral("segmented_ratio"), QStringLiteral("rank"),
          QStringLiteral("adapter_percent"),
          // Serving with an adapter per request.
          QStringLiteral("serve_tokens_per_s"), QStringLiteral("serve_avg_batch"),
          QStringLiteral("cache_loads"), QStringLiteral("cache_hits"), QStringLiteral("cache_evictions")};
}

// The sweep: at its largest batch, the base model's decode step and each strategy's step over it;
// the first module's adapter size as a percentage of its weight matrix, at the first adapter's rank.
// Serving: generated tokens per second, rows per step, and the adapter cache's counters.
QMap<QString, double> MultiLoraTab::resultValues() const {
  if (isRunning()) return {};
  QMap<QString, double> v;
  if (hasResult_ && !result_.points.empty()) {
    int64_t largest = 0;
    for (const servelab::MultiLoraPoint& p : result_.points) largest = std::max(largest, p.batch);
    v[QStringLiteral("largest_batch")] = static_cast<double>(largest);
    for (const servelab::MultiLoraPoint& p : result_.points) {
      if (p.batch != largest) continue;
      if (p.strategy == "base")
        v[QStringLiteral("base_ms")] = p.ms;
      else if (p.strategy == "loop" || p.strategy == "gathered" || p.strategy == "segmented")
        v[QString::fromStdString(p.strategy) + QStringLiteral("_ratio")] = p.ratio_to_base;
    }
    if (!result_.shapes.empty()) {
      v[QStringLiteral("rank")] = static_cast<double>(result_.shapes.front().rank);
      v[QStringLiteral("adapter_percent")] = 100.0 * result_.shapes.front().ratio;
    }
  }
  if (serving_->hasResult()) {
    const servelab::BatchRunResult& r = serving_->result();
    if (r.total_ms > 0)
      v[QStringLiteral("serve_tokens_per_s")] = static_cast<double>(r.generated_tokens) / (r.total_ms / 1000);
    v[QStringLiteral("serve_avg_batch")] = r.average_batch;
    v[QStringLiteral("cache_loads")] = static_cast<double>(r.adapter_cache.loads);
    v[QStringLiteral("cache_hits")] = static_cast<double>(r.adapter_cache.hits);
    v[QStringLiteral("cache_evictions")] = static_cast<double>(r.adapter_cache.evictions);
  }
  return v;
}

QJsonObject MultiLoraTab::lastResult() const {
  QJsonObject o;
  if (hasResult_) {
    o = toQJsonObject(result_.to_json());
  } else {
    o[QStringLiteral("experiment")] = QStringLiteral("multi-lora");
  }
  if (serving_->hasResult()) o[QStringLiteral("serve")] = serving_->report();
  if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  return o;
}

void MultiLoraTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  adapters_->loadSettings(s);
  composer_->loadSettings(s);
  serving_->loadSettings(s);
  math_->loadSettings(s);
  if (const auto view =
          settingChoice(s, QStringLiteral("view"), {QStringLiteral("strategies"), QStringLiteral("serve")}))
    showView(*view);
  s.endGroup();
}

void MultiLoraTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  composer_->saveSettings(s);
  serving_->saveSettings(s);
  math_->saveSettings(s);
  s.setValue(QStringLiteral("view"), currentView());
  adapters_->saveSettings(s);
  s.endGroup();
}

RunReport MultiLoraTab::runReport() const {
  RunReport r;
  if (currentView() == QLatin1String("serve")) {
    const QString text = serving_->summaryText();
    r.html << (Qt::mightBeRichText(text) ? text : text.toHtmlEscaped());
    r.charts = chartsWithData({serving_->chart()});
    return r;
  }
  r.html << reportHtml(caveat_) << reportHtml(summary_) << reportHtml(agreement_);
  r.tables << reportTable(pointsTable_, tr("Decode-step latency per strategy"))
           << reportTable(shapesTable_, tr("Shapes"));
  r.charts = chartsWithData({latencyChart_, ratioChart_});
  return r;
}

}  // namespace servelab::ui
