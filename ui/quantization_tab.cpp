#include "quantization_tab.h"

#include <QCheckBox>
#include <QComboBox>
#include <QEvent>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonObject>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include "chart_view.h"
#include "engine_controller.h"
#include "engine_session.h"
#include "form_widgets.h"
#include "quant/quant_spec.h"
#include "text_format.h"
#include "util/limits.h"

namespace servelab::ui {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMB = 1e6;

const QString kResident = QStringLiteral("resident while running");
const QString kFloor = QStringLiteral("memory floor (ms)");
const QString kTokensPerS = QStringLiteral("batched tokens/s");

// The table's rows, one metric each; a column per mode.
enum Row {
  RowExec,
  RowKernel,
  RowWeights,
  RowFraction,
  RowResident,
  RowMaxError,
  RowMeanError,
  RowKl,
  RowTop1,
  RowDecode,
  RowSpeedup,
  RowBatch,
  RowBatchRatio,
  RowPerplexity,
  RowCount
};

QString modeLabel(const std::string& mode) {
  return mode == "none" ? QStringLiteral("fp32") : QString::fromStdString(mode);
}

QString percent(double fraction) {
  const double p = fraction * 100;
  return QString::number(p, 'f', p < 10 ? 1 : 0) + QLatin1Char('%');
}

// Token boundaries show as a faint shade on every other token; differing tokens stand out.
QString tokenSpans(const std::vector<int32_t>& ids, const std::vector<std::string>& pieces,
                   const QVector<int>& differing, const QString& diffStyle, const QString& shade) {
  QString html;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int pos = static_cast<int>(k);
    const bool diff = differing.contains(pos);
    const QString text = k < pieces.size() ? tokenText(pieces[k]) : QStringLiteral("<id %1>").arg(ids[k]);
    const QString style = diff ? diffStyle : (k % 2 ? shade : QString());
    html += QStringLiteral("<span class=\"%1\" title=\"token %2: id %3\"%4>%5</span>")
                .arg(diff ? QStringLiteral("diff") : QStringLiteral("tok"))
                .arg(pos)
                .arg(ids[k])
                .arg(style.isEmpty() ? QString() : QStringLiteral(" style=\"%1\"").arg(style),
                     text.toHtmlEscaped());
  }
  return html;
}

}  // namespace

QVector<int> differingPositions(const servelab::GreedyComparison& g) {
  QVector<int> out;
  const size_t n = std::max(g.tokens.size(), g.reference_tokens.size());
  for (size_t k = 0; k < n; ++k) {
    const bool both = k < g.tokens.size() && k < g.reference_tokens.size();
    if (!both || g.tokens[k] != g.reference_tokens[k]) out << static_cast<int>(k);
  }
  return out;
}

QString greedyComparisonHtml(const servelab::GreedyComparison& g, const QString& mode, bool dark) {
  const QVector<int> differing = differingPositions(g);
  const QString muted = dark ? QStringLiteral("#a0a0a0") : QStringLiteral("#666666");
  // The mode's differing tokens in a strong tint, fp32's at the same positions in a lighter one.
  const QString modeDiff = dark ? QStringLiteral("background-color:#8a3b00; color:#ffffff")
                                : QStringLiteral("background-color:#ffc08a; color:#000000");
  const QString refDiff = dark ? QStringLiteral("background-color:#5a4a3a; color:#ffffff")
                               : QStringLiteral("background-color:#ffe6cc; color:#000000");
  const QString shade =
      dark ? QStringLiteral("background-color:#2e2e2e") : QStringLiteral("background-color:#eef2f6");
  QString verdict;
  if (differing.isEmpty())
    verdict = QObject::tr("same tokens as fp32");
  else
    verdict = QObject::tr("differs from token %1 on (%2 of %3 positions differ)")
                  .arg(differing.front())
                  .arg(differing.size())
                  .arg(std::max(g.tokens.size(), g.reference_tokens.size()));
  QString html = QStringLiteral(
                     "<p style=\"margin-top:6px; margin-bottom:2px\"><span style=\"color:%1\">%2</span> "
                     "<b>%3</b> <span style=\"color:%1\">· %4</span></p>")
                     .arg(muted, QObject::tr("prompt").toHtmlEscaped(),
                          QString::fromStdString(g.prompt).toHtmlEscaped(), verdict.toHtmlEscaped());
  html += QStringLiteral("<table cellspacing=\"0\" cellpadding=\"1\">");
  html +=
      QStringLiteral(
          "<tr><td style=\"color:%1; padding-right:8px\">fp32</td><td style=\"white-space:pre-wrap\">%2</td>"
          "</tr>")
          .arg(muted, tokenSpans(g.reference_tokens, g.reference_pieces, differing, refDiff, shade));
  html +=
      QStringLiteral(
          "<tr><td style=\"color:%1; padding-right:8px\">%2</td><td style=\"white-space:pre-wrap\">%3</td>"
          "</tr>")
          .arg(muted, mode.toHtmlEscaped(), tokenSpans(g.tokens, g.pieces, differing, modeDiff, shade));
  html += QStringLiteral("</table>");
  return html;
}

QuantizationTab::QuantizationTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  // --- Controls ---
  zp_ = new QCheckBox(tr("course zero-point uint8"), this);
  zp_->setObjectName(QStringLiteral("quantModeZp"));
  zp_->setToolTip(tr("zp-uint8, the lesson's method: one scale and zero point per tensor, values 0..255"));
  int8_ = new QCheckBox(tr("per-channel int8"), this);
  int8_->setObjectName(QStringLiteral("quantModeInt8"));
  int8_->setToolTip(tr("int8-channel: symmetric int8, one scale per output row"));
  int4_ = new QCheckBox(tr("int4, group of"), this);
  int4_->setObjectName(QStringLiteral("quantModeInt4"));
  int4_->setToolTip(tr("int4-gN: two weights per byte, a scale and a minimum per group of N weights"));
  group_ = new QComboBox(this);
  group_->setObjectName(QStringLiteral("quantGroupSize"));
  group_->addItems({QStringLiteral("32"), QStringLiteral("64"), QStringLiteral("128")});
  group_->setCurrentText(QStringLiteral("64"));
  group_->setToolTip(tr("Weights per int4 group; a matrix's input size must be a multiple of it"));
  fp16_ = new QCheckBox(tr("fp16"), this);
  fp16_->setObjectName(QStringLiteral("quantModeFp16"));
  bf16_ = new QCheckBox(tr("bf16"), this);
  bf16_->setObjectName(QStringLiteral("quantModeBf16"));
  for (QCheckBox* box : {zp_, int8_, int4_, fp16_, bf16_}) box->setChecked(true);
  auto* modesBox = new QGroupBox(tr("Modes, each measured against fp32"), this);
  modesBox->setToolTip(tr("fp32, the loaded weights, is always measured first as the reference"));
  auto* mg = new QGridLayout(modesBox);
  mg->setVerticalSpacing(2);
  mg->addWidget(zp_, 0, 0, 1, 3);
  mg->addWidget(int8_, 1, 0, 1, 3);
  mg->addWidget(int4_, 2, 0);
  mg->addWidget(group_, 2, 1);
  mg->addWidget(fp16_, 3, 0);
  mg->addWidget(bf16_, 3, 1);
  mg->setColumnStretch(2, 1);

  exec_ = new QComboBox(this);
  exec_->setObjectName(QStringLiteral("quantExec"));
  exec_->addItem(tr("auto (native where it is faster)"), QStringLiteral("auto"));
  exec_->addItem(tr("dequantize once"), QStringLiteral("dequant-once"));
  exec_->addItem(tr("JIT (dequantize inside matmuls)"), QStringLiteral("jit"));
  exec_->addItem(tr("JIT, int8 activations (int4-g32, as llama.cpp)"), QStringLiteral("jit-int8"));
  exec_->addItem(tr("native kernels"), QStringLiteral("native"));
  exec_->setToolTip(tr("How the quantized weights are used while the model runs"));
  // The longest item would otherwise widen the whole control column past its scroll area, which
  // then clips every row on its right; the open list still shows each item whole.
  exec_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  exec_->setMinimumContentsLength(16);
  // JIT by default: it runs every mode on every model, where auto's native int4 kernel cannot pack
  // GPT-2's tied output matrix (50257 rows; the kernel wants a multiple of 16).
  setExec(QStringLiteral("jit"));
  newTokens_ = new QSpinBox(this);
  newTokens_->setObjectName(QStringLiteral("quantNewTokens"));
  newTokens_->setRange(1, 200);
  newTokens_->setValue(20);
  newTokens_->setToolTip(tr("Greedy tokens generated per prompt, by fp32 and by each mode"));
  repeats_ = new QSpinBox(this);
  repeats_->setObjectName(QStringLiteral("quantRepeats"));
  repeats_->setRange(1, 20);
  repeats_->setValue(3);
  repeats_->setToolTip(tr("Speed: fp32 and the mode alternate this many times; the table shows medians"));
  speed_ = new QCheckBox(tr("measure speed"), this);
  speed_->setObjectName(QStringLiteral("quantMeasureSpeed"));
  speed_->setChecked(true);
  speed_->setToolTip(tr("Time batch-1 decode and batched generation of each mode against fp32"));
  auto* form = new QFormLayout;
  form->addRow(tr("Execution"), exec_);
  form->addRow(tr("Greedy tokens"), newTokens_);
  form->addRow(tr("Repeats"), repeats_);
  form->addRow(QString(), speed_);

  QHBoxLayout* buttons = makeRunButtons(
      QStringLiteral("quant"), tr("Quantize the model in every chosen mode and measure it (Ctrl+Return)"));
  progress_ = new RunProgressBar(this, QStringLiteral("quantProgress"));
  summary_ = new QLabel(tr("Run to quantize the loaded model in each mode and compare it with fp32."), this);
  summary_->setObjectName(QStringLiteral("quantSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_->setAlignment(Qt::AlignTop | Qt::AlignLeft);

  auto* explanation = new QLabel(
      tr("<b>Zero-point quantization</b> (the course's) maps a tensor's [min, max] linearly onto 0…255: "
         "scale = (max − min) / 255, zero point = min; one byte per weight instead of four. <b>Per-channel "
         "int8</b> keeps a scale per output row; <b>int4</b> a scale and a minimum per group of 64 weights. "
         "<b>Dequantize once</b> rebuilds fp32 weights at load: it saves disk only, not memory or time while "
         "running (the marks across the bars). <b>JIT</b> keeps weights quantized and dequantizes blocks "
         "inside each "
         "matmul; <b>native</b> kernels are libtorch's (a weight-only int8 GEMM, an int4 kernel). Batch-1 "
         "decode "
         "reads every weight "
         "per token: fewer bytes, faster tokens, down to the memory floor."),
      this);
  explanation->setObjectName(QStringLiteral("quantExplanation"));
  explanation->setWordWrap(true);
  explanation->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  QFont small = explanation->font();
  if (small.pointSizeF() > 0) small.setPointSizeF(small.pointSizeF() * 0.92);
  explanation->setFont(small);

  auto* controls = new QWidget(this);
  auto* cv = new QVBoxLayout(controls);
  cv->setContentsMargins(0, 0, 0, 0);
  cv->addWidget(modesBox);
  cv->addLayout(form);
  cv->addLayout(buttons);
  cv->addWidget(progress_);
  cv->addWidget(summary_);
  cv->addStretch(1);
  cv->addWidget(explanation);
  auto* controlScroll = new QScrollArea(this);
  controlScroll->setWidget(controls);
  controlScroll->setWidgetResizable(true);
  controlScroll->setFrameShape(QFrame::NoFrame);
  controlScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  controlScroll->setMinimumWidth(290);
  controlScroll->setMaximumWidth(330);

  // --- Memory and speed ---
  memoryChart_ = new ChartView(this);
  memoryChart_->setObjectName(QStringLiteral("quantMemoryChart"));
  memoryChart_->setTitle(tr("Weights per mode: stored and resident"));
  memoryChart_->setLegendBelow(true);
  memoryChart_->setAxisLabels(QString(), tr("weights (MB)"));
  memoryChart_->setSeriesStyle(memoryChart_->addSeries(kResident), ChartView::SeriesStyle::Ticks);

  speedChart_ = new ChartView(this);
  speedChart_->setObjectName(QStringLiteral("quantSpeedChart"));
  speedChart_->setTitle(tr("Batch-1 decode and batched throughput"));
  speedChart_->setLegendBelow(true);
  speedChart_->setAxisLabels(QString(), tr("decode step, batch 1 (ms)"), tr("batched (tokens/s)"));
  speedChart_->setSeriesStyle(speedChart_->addSeries(kFloor), ChartView::SeriesStyle::Ticks);
  speedChart_->setSeriesStyle(speedChart_->addSeries(kTokensPerS, ChartView::Axis::Right),
                              ChartView::SeriesStyle::Points);

  auto* charts = new QWidget(this);
  auto* chartRow = new QHBoxLayout(charts);
  chartRow->setContentsMargins(0, 0, 0, 0);
  chartRow->addWidget(memoryChart_, 1);
  chartRow->addWidget(speedChart_, 1);

  // --- Results and details ---
  table_ = new QTableWidget(RowCount, 0, this);
  table_->setObjectName(QStringLiteral("quantTable"));
  table_->setVerticalHeaderLabels({tr("execution"), tr("kernel"), tr("weights (MB)"), tr("of fp32"),
                                   tr("resident running (MB)"), tr("max |error|"), tr("mean |error|"),
                                   tr("KL mean (nats)"), tr("top-1 agreement"), tr("decode ms (fp32)"),
                                   tr("decode speed-up"), tr("batch tokens/s (fp32)"), tr("batch ratio"),
                                   tr("perplexity")});
  table_->verticalHeaderItem(RowDecode)->setToolTip(
      tr("Median batch-1 decode step of the mode, and of fp32 timed alternately with it"));
  table_->verticalHeaderItem(RowResident)
      ->setToolTip(tr("Bytes of weights the model holds while it runs under the execution used"));
  table_->verticalHeaderItem(RowKl)->setToolTip(
      tr("KL(fp32 ‖ mode) of the next-token distributions, mean over every position of every prompt"));
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionBehavior(QAbstractItemView::SelectColumns);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->horizontalHeader()->setMinimumSectionSize(70);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->setWordWrap(false);
  QFont tableFont = table_->font();
  if (tableFont.pointSizeF() > 0) tableFont.setPointSizeF(tableFont.pointSizeF() * 0.92);
  table_->setFont(tableFont);

  detail_ = new QComboBox(this);
  detail_->setObjectName(QStringLiteral("quantDetailMode"));
  detail_->setToolTip(tr("The mode whose greedy text and errors are shown (or click its column)"));
  detail_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  caveat_ = new QLabel(this);
  caveat_->setObjectName(QStringLiteral("quantCaveat"));
  caveat_->setStyleSheet(QStringLiteral("QLabel { color: #b35900; font-weight: bold; }"));
  caveat_->setWordWrap(true);
  caveat_->hide();
  greedy_ = new QTextBrowser(this);
  greedy_->setObjectName(QStringLiteral("quantGreedy"));
  greedy_->setOpenLinks(false);
  greedy_->setPlaceholderText(tr("fp32's greedy text and each mode's, token by token, after a run."));
  auto* textPage = new QWidget(this);
  auto* tv = new QVBoxLayout(textPage);
  tv->setContentsMargins(2, 2, 2, 2);
  tv->addWidget(caveat_);
  tv->addWidget(greedy_, 1);

  histogramChart_ = new ChartView(this);
  histogramChart_->setObjectName(QStringLiteral("quantHistogram"));
  histogramChart_->setTitle(tr("Reconstruction error"));
  histogramChart_->setAxisLabels(tr("dequantized − fp32 weight"), tr("weights per bin (log scale)"));
  histogramChart_->setLogY(true);
  histogramChart_->setSeriesStyle(histogramChart_->addSeries(tr("weights per bin")),
                                  ChartView::SeriesStyle::Steps);
  blockChart_ = new ChartView(this);
  blockChart_->setObjectName(QStringLiteral("quantBlocks"));
  blockChart_->setTitle(tr("Relative RMS error per block"));
  blockChart_->setAxisLabels(tr("block"), tr("‖dequantized − w‖ / ‖w‖ (%)"));

  detailTabs_ = new QTabWidget(this);
  detailTabs_->setObjectName(QStringLiteral("quantDetailTabs"));
  detailTabs_->addTab(textPage, tr("Greedy text vs fp32"));
  detailTabs_->addTab(histogramChart_, tr("Error histogram"));
  detailTabs_->addTab(blockChart_, tr("Error per block"));
  rooflineChart_ = new RooflineChart(this);
  rooflineChart_->setObjectName(QStringLiteral("quantRooflineChart"));
  detailTabs_->addTab(rooflineChart_, tr("Roofline"));
  auto* detailPanel = new QWidget(this);
  auto* dv = new QVBoxLayout(detailPanel);
  dv->setContentsMargins(0, 0, 0, 0);
  auto* detailRow = new QHBoxLayout;
  detailRow->addWidget(new QLabel(tr("Details of"), this));
  detailRow->addWidget(detail_);
  detailRow->addStretch(1);
  dv->addLayout(detailRow);
  dv->addWidget(detailTabs_, 1);

  auto* bottom = new QSplitter(Qt::Horizontal, this);
  bottom->addWidget(table_);
  bottom->addWidget(detailPanel);
  bottom->setStretchFactor(0, 1);
  bottom->setStretchFactor(1, 1);
  bottom->setSizes({600, 480});
  bottom->setChildrenCollapsible(false);

  auto* right = new QSplitter(Qt::Vertical, this);
  right->setObjectName(QStringLiteral("quantSplitter"));
  right->addWidget(charts);
  right->addWidget(bottom);
  right->setStretchFactor(0, 5);
  right->setStretchFactor(1, 4);
  right->setSizes({350, 290});
  right->setChildrenCollapsible(false);

  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(controlScroll);
  layout->addWidget(right, 1);

  connect(detail_, &QComboBox::currentIndexChanged, this, [this] { drawDetails(); });
  connect(table_, &QTableWidget::currentCellChanged, this, [this](int, int column) {
    if (column > 0) showDetailMode(column);
  });
}

QList<ChartView*> QuantizationTab::charts() const {
  return {memoryChart_, speedChart_, histogramChart_, blockChart_, rooflineChart_};
}

// --- Parameters -------------------------------------------------------------------------------

QStringList QuantizationTab::requestedModes() const {
  QStringList m;
  if (zp_->isChecked()) m << QStringLiteral("zp-uint8");
  if (int8_->isChecked()) m << QStringLiteral("int8-channel");
  if (int4_->isChecked()) m << QStringLiteral("int4-g") + group_->currentText();
  if (fp16_->isChecked()) m << QStringLiteral("fp16");
  if (bf16_->isChecked()) m << QStringLiteral("bf16");
  return m;
}

QStringList QuantizationTab::modes() const { return requestedModes(); }

void QuantizationTab::setModes(const QStringList& modes) {
  QStringList names;
  for (const QString& m : modes)
    for (const QString& part : m.split(QLatin1Char(','), Qt::SkipEmptyParts)) names << part.trimmed();
  zp_->setChecked(names.contains(QStringLiteral("zp-uint8")));
  int8_->setChecked(names.contains(QStringLiteral("int8-channel")));
  fp16_->setChecked(names.contains(QStringLiteral("fp16")));
  bf16_->setChecked(names.contains(QStringLiteral("bf16")));
  int4_->setChecked(false);
  for (const QString& n : names) {
    if (!n.startsWith(QLatin1String("int4-g"))) continue;
    const int i = group_->findText(n.mid(6));
    if (i < 0) continue;
    group_->setCurrentIndex(i);
    int4_->setChecked(true);
  }
}

void QuantizationTab::setExec(const QString& exec) {
  const int i = exec_->findData(exec);
  if (i >= 0) exec_->setCurrentIndex(i);
}

QString QuantizationTab::exec() const { return exec_->currentData().toString(); }
void QuantizationTab::setNewTokens(int n) { newTokens_->setValue(n); }
void QuantizationTab::setRepeats(int n) { repeats_->setValue(n); }
void QuantizationTab::setMeasureSpeed(bool on) { speed_->setChecked(on); }

void QuantizationTab::setSpeedWorkload(int decodeTokens, int batch, int batchTokens) {
  workload_.decode_tokens = decodeTokens;
  workload_.batch = batch;
  workload_.batch_tokens = batchTokens;
}

servelab::QuantizationParams QuantizationTab::params() const {
  servelab::QuantizationParams p = workload_;
  p.modes.clear();
  for (const QString& m : requestedModes()) p.modes.push_back(m.toStdString());
  p.exec = exec().toStdString();
  p.new_tokens = newTokens_->value();
  p.repeats = repeats_->value();
  p.measure_speed = speed_->isChecked();
  return p;
}

void QuantizationTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  caveat_->setText(model.caveat.isEmpty() ? QString() : tr("Built-in demo model: %1.").arg(model.caveat));
  caveat_->setVisible(!model.caveat.isEmpty());
  if (model.positions > 1) newTokens_->setMaximum(std::max(1, model.positions - 16));
}

QString QuantizationTab::summaryText() const { return summary_->text(); }
QString QuantizationTab::greedyHtml() const { return greedy_->property("sourceHtml").toString(); }

// --- The run ----------------------------------------------------------------------------------

bool QuantizationTab::run() {
  const servelab::QuantizationParams p = params();
  if (p.modes.empty()) {
    summary_->setText(tr("<b>Cannot run:</b> choose at least one mode to compare with fp32."));
    return refuseRun(tr("choose at least one mode to compare with fp32"));
  }
  auto limits = std::make_shared<RooflineLimits>();
  EngineJob* job = engine_->submit(tr("quantization"), [p, limits](JobContext& c) {
    servelab::QuantizationResult r = servelab::run_quantization(c.engine(), p, c.control());
    for (servelab::QuantModeResult& m : r.modes) makeReadable(c.engine(), m);
    if (p.measure_speed) limits->measure(c.engine());
    return r;
  });
  if (!job) return false;
  connect(job, &EngineJob::point, this, &QuantizationTab::onPoint);
  progress_->follow(job);
  connect(job, &EngineJob::quantizationMode, this, &QuantizationTab::onMode);
  job->onResult<servelab::QuantizationResult>(
      this, [this, limits](const auto& r) { onFinished(r, limits->limits()); });
  connect(job, &EngineJob::failed, this, &QuantizationTab::onFailed);
  runStarted();
  hasResult_ = false;
  lastError_.clear();
  labels_ = QStringList{QStringLiteral("fp32")};
  for (const std::string& m : p.modes) labels_ << QString::fromStdString(m);
  resetView();
  rooflineChart_->startRun();
  progress_->start();
  summary_->setText(
      tr("Running: fp32 and %n mode(s), execution %1%2…", nullptr, static_cast<int>(p.modes.size()))
          .arg(exec(), p.measure_speed ? tr(", with speed") : tr(", no speed")));
  return true;
}

void QuantizationTab::resetView() {
  modes_.clear();
  liveDecodeMs_.fill(kNaN, labels_.size());
  liveTokensPerS_.fill(kNaN, labels_.size());
  detail_->blockSignals(true);
  detail_->clear();
  detail_->blockSignals(false);
  drawMemory();
  drawSpeed();
  fillTable();
  drawDetails();
}

void QuantizationTab::onPoint(const QString& series, double x, double y) {
  const qsizetype i = std::lround(x);
  if (i < 0 || i >= labels_.size()) return;
  if (series == QLatin1String("decode ms"))
    liveDecodeMs_[i] = y;
  else if (series == QLatin1String("batch tokens/s"))
    liveTokensPerS_[i] = y;
  else
    return;
  drawSpeed();
}

void QuantizationTab::onMode(const servelab::QuantModeResult& m) {
  if (modes_.size() >= labels_.size()) return;
  modes_.append(m);
  const int index = static_cast<int>(modes_.size()) - 1;
  drawMemory();
  drawSpeed();
  fillTable();
  // The first quantized mode is shown as it arrives (the combo's first item becomes current).
  if (index > 0) detail_->addItem(modeLabel(m.mode), index);
}

void QuantizationTab::onFinished(const servelab::QuantizationResult& r,
                                 const servelab::MachineLimits& limits) {
  result_ = r;
  hasResult_ = true;
  // Drawn again from the result, so the charts, the table and the report agree exactly.
  const int shown = detailMode();
  labels_.clear();
  modes_.clear();
  for (const servelab::QuantModeResult& m : r.modes) {
    labels_ << modeLabel(m.mode);
    modes_.append(m);
  }
  liveDecodeMs_.fill(kNaN, labels_.size());
  liveTokensPerS_.fill(kNaN, labels_.size());
  detail_->blockSignals(true);
  detail_->clear();
  for (int i = 1; i < modes_.size(); ++i) detail_->addItem(labels_[i], i);
  detail_->setCurrentIndex(std::max(0, detail_->findData(shown)));
  detail_->blockSignals(false);
  drawMemory();
  drawSpeed();
  fillTable();
  drawDetails();
  drawRoofline(limits);

  // The headline: smallest, closest to fp32, fastest.
  QStringList lines;
  if (!modes_.isEmpty())
    lines << tr("fp32 weights: <b>%1 MB</b>.").arg(formatMegabytes(modes_.front().memory.total_bytes));
  const servelab::QuantModeResult* smallest = nullptr;
  const servelab::QuantModeResult* closest = nullptr;
  const servelab::QuantModeResult* fastest = nullptr;
  bool dequantOnce = false;
  for (int i = 1; i < modes_.size(); ++i) {
    const servelab::QuantModeResult& m = modes_[i];
    if (!smallest || m.memory.total_bytes < smallest->memory.total_bytes) smallest = &m;
    if (!closest || m.kl_mean < closest->kl_mean) closest = &m;
    if (m.speed && (!fastest || m.speed->decode_speedup > fastest->speed->decode_speedup)) fastest = &m;
    dequantOnce = dequantOnce || m.exec == "dequant-once";
  }
  if (smallest)
    lines << tr("Smallest: <b>%1</b>, %2 of fp32 (%3 MB).")
                 .arg(modeLabel(smallest->mode), percent(smallest->memory.fraction_of_fp32),
                      formatMegabytes(smallest->memory.total_bytes));
  if (closest)
    lines << tr("Closest to fp32: <b>%1</b> (KL %2, top-1 %3).")
                 .arg(modeLabel(closest->mode), QString::number(closest->kl_mean, 'g', 2),
                      percent(closest->top1_agreement));
  if (fastest)
    lines << tr("Fastest batch-1 decode: <b>%1</b>, ×%2 of fp32's speed.")
                 .arg(modeLabel(fastest->mode))
                 .arg(fastest->speed->decode_speedup, 0, 'f', 2);
  if (dequantOnce) lines << tr("Dequantized once: each mode holds fp32's bytes again while it runs.");
  if (!r.perplexity_note.empty())
    lines << QStringLiteral("<span style='color:#888'>%1.</span>")
                 .arg(QString::fromStdString(r.perplexity_note).toHtmlEscaped());
  summary_->setText(lines.join(QStringLiteral("<br>")));
  memoryChart_->setFootnote(chartFootnote(model_));
  const servelab::QuantizationParams& p = workload_;
  speedChart_->setFootnote(tr("batch %1×%2 · %n repeat(s) · floor at %3 GB/s", nullptr, repeats_->value())
                               .arg(p.batch)
                               .arg(p.batch_tokens)
                               .arg(r.copy_bandwidth_gbs, 0, 'f', 1) +
                           QStringLiteral(" · ") + chartFootnote(model_));
  progress_->finish();
  runEnded(true, QString());
}

void QuantizationTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The modes measured so far stay on the charts and in the table."));
  runEnded(false, message);
}

// --- Drawing ----------------------------------------------------------------------------------

void QuantizationTab::drawMemory() {
  const qsizetype n = labels_.size();
  QVector<double> values(n, kNaN), states(n, kNaN), other(n, kNaN), xs, resident;
  QStringList notes;
  for (qsizetype i = 0; i < n; ++i) {
    if (i >= modes_.size()) {
      notes << QString();
      continue;
    }
    const servelab::QuantMemory& m = modes_[i].memory;
    values[i] = static_cast<double>(m.quantized_bytes) / kMB;
    states[i] = static_cast<double>(m.state_bytes) / kMB;
    other[i] = static_cast<double>(m.other_bytes) / kMB;
    notes << percent(m.fraction_of_fp32);
    xs << static_cast<double>(i + 1);
    resident << static_cast<double>(m.resident_bytes) / kMB;
  }
  memoryChart_->setStackedBars(labels_,
                               {{tr("quantized values"), values, QColor(0x00, 0x72, 0xB2)},
                                {tr("states (scales, offsets)"), states, QColor(0xE6, 0x9F, 0x00)},
                                {tr("kept in fp32"), other, QColor(0x99, 0x99, 0x99)}},
                               tr("weights (MB)"), notes);
  memoryChart_->setSeriesData(memoryChart_->seriesIndex(kResident), xs, resident);
}

void QuantizationTab::drawSpeed() {
  const qsizetype n = labels_.size();
  QVector<double> decode(n, kNaN), xs, floors, tokenXs, tokens;
  for (qsizetype i = 0; i < n; ++i) {
    const bool have = i < modes_.size() && modes_[i].speed.has_value();
    const double d = have ? modes_[i].speed->decode_ms : liveDecodeMs_.value(i, kNaN);
    const double t = have ? modes_[i].speed->batch_tokens_per_s : liveTokensPerS_.value(i, kNaN);
    decode[i] = d;
    if (std::isfinite(t)) {
      tokenXs << static_cast<double>(i + 1);
      tokens << t;
    }
    if (have) {
      xs << static_cast<double>(i + 1);
      floors << modes_[i].speed->floor_ms;
    }
  }
  speedChart_->setBars(labels_, decode, tr("decode step, batch 1 (ms)"));
  speedChart_->setSeriesData(speedChart_->seriesIndex(kFloor), xs, floors);
  speedChart_->setSeriesData(speedChart_->seriesIndex(kTokensPerS), tokenXs, tokens);
}

void QuantizationTab::fillTable() {
  const int n = static_cast<int>(labels_.size());
  table_->clearContents();
  table_->setColumnCount(n);
  table_->setHorizontalHeaderLabels(labels_);
  const auto set = [this](int row, int column, const QString& text, const QString& tip = QString()) {
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    if (!tip.isEmpty()) item->setToolTip(tip);
    table_->setItem(row, column, item);
  };
  for (int c = 0; c < n; ++c) {
    if (c >= modes_.size()) {
      for (int r = 0; r < RowCount; ++r) set(r, c, QStringLiteral("…"));
      continue;
    }
    const servelab::QuantModeResult& m = modes_[c];
    set(RowExec, c, QString::fromStdString(m.exec));
    set(RowKernel, c, QString::fromStdString(m.kernel), QString::fromStdString(m.kernel));
    set(RowWeights, c, formatMegabytes(m.memory.total_bytes),
        tr("%1 values + %2 states + %3 kept in fp32 (MB)")
            .arg(formatMegabytes(m.memory.quantized_bytes), formatMegabytes(m.memory.state_bytes),
                 formatMegabytes(m.memory.other_bytes)));
    set(RowFraction, c, percent(m.memory.fraction_of_fp32));
    set(RowResident, c, formatMegabytes(m.memory.resident_bytes));
    set(RowMaxError, c, QString::number(m.max_abs_error, 'g', 3));
    set(RowMeanError, c, QString::number(m.mean_abs_error, 'g', 3));
    set(RowKl, c, QString::number(m.kl_mean, 'g', 3),
        tr("max %1 over %2 positions").arg(m.kl_max, 0, 'g', 3).arg(m.positions));
    set(RowTop1, c, percent(m.top1_agreement));
    if (m.speed) {
      const servelab::QuantSpeed& s = *m.speed;
      set(RowDecode, c,
          QStringLiteral("%1 (%2)").arg(s.decode_ms, 0, 'f', 1).arg(s.fp32_decode_ms, 0, 'f', 1),
          tr("floor %1 ms, fp32's %2 ms").arg(s.floor_ms, 0, 'f', 2).arg(s.fp32_floor_ms, 0, 'f', 2));
      set(RowSpeedup, c, QStringLiteral("×%1").arg(s.decode_speedup, 0, 'f', 2));
      set(RowBatch, c,
          QStringLiteral("%1 (%2)")
              .arg(s.batch_tokens_per_s, 0, 'f', 0)
              .arg(s.fp32_batch_tokens_per_s, 0, 'f', 0));
      set(RowBatchRatio, c, QStringLiteral("×%1").arg(s.batch_ratio, 0, 'f', 2));
    } else {
      for (int r : {RowDecode, RowSpeedup, RowBatch, RowBatchRatio}) set(r, c, tr("not measured"));
    }
    if (m.perplexity) {
      set(RowPerplexity, c, QString::number(*m.perplexity, 'f', 2),
          hasResult_ && result_.fp32_perplexity ? tr("fp32: %1").arg(*result_.fp32_perplexity, 0, 'f', 2)
                                                : QString());
    } else {
      set(RowPerplexity, c, QStringLiteral("—"),
          hasResult_ && !result_.perplexity_note.empty() ? QString::fromStdString(result_.perplexity_note)
                                                         : tr("perplexity needs a real checkpoint"));
    }
  }
}

int QuantizationTab::detailMode() const {
  const QVariant v = detail_->currentData();
  return v.isValid() ? v.toInt() : -1;
}

void QuantizationTab::showDetailMode(int index) {
  const int i = detail_->findData(index);
  if (i >= 0) detail_->setCurrentIndex(i);
}

void QuantizationTab::drawRoofline(const servelab::MachineLimits& limits) {
  std::vector<servelab::RooflinePoint> steps;
  for (const servelab::QuantModeResult& m : modes_) {
    if (!m.speed) continue;
    if (steps.empty()) steps.push_back(m.speed->fp32_decode);
    if (m.speed->decode.quant != "none" && m.speed->decode.quant != m.speed->fp32_decode.quant)
      steps.push_back(m.speed->decode);
  }
  rooflineChart_->showSteps(limits, steps, [](const servelab::RooflinePoint& p) {
    return p.quant == "none" ? QStringLiteral("fp32") : QString::fromStdString(p.quant);
  });
}

void QuantizationTab::drawDetails() {
  const int index = detailMode();
  if (index < 1 || index >= modes_.size()) {
    histogramChart_->clearSeries(0);
    histogramChart_->setTitle(tr("Reconstruction error"));
    blockChart_->setBars({}, {}, QString());
    blockChart_->setTitle(tr("Relative RMS error per block"));
    greedy_->clear();
    greedy_->setProperty("sourceHtml", QString());
    return;
  }
  const servelab::QuantModeResult& m = modes_[index];
  const QString name = modeLabel(m.mode);

  const servelab::ErrorHistogram& h = m.histogram;
  QVector<double> centres, counts;
  const qsizetype bins = static_cast<qsizetype>(h.counts.size());
  for (qsizetype k = 0; k < bins; ++k) {
    centres << h.lo + (static_cast<double>(k) + 0.5) * (h.hi - h.lo) / static_cast<double>(bins);
    counts << static_cast<double>(h.counts[static_cast<size_t>(k)]);
  }
  histogramChart_->setTitle(tr("Reconstruction error of %1 (dequantized − fp32)").arg(name));
  histogramChart_->setSeriesData(0, centres, counts);
  histogramChart_->rescale();

  QStringList blocks;
  QVector<double> rel;
  for (const servelab::BlockError& b : m.blocks) {
    blocks << QString::fromStdString(b.block);
    rel << b.rel_rms * 100;
  }
  blockChart_->setTitle(tr("Relative RMS error per block of %1").arg(name));
  blockChart_->setBars(blocks, rel, tr("relative RMS error (%)"));

  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  QString html = tr("<p><b>%1</b> against fp32: top-1 agreement <b>%2</b>, KL mean <b>%3</b> nats over %4 "
                    "positions. Greedy tokens that differ from fp32's are highlighted.</p>")
                     .arg(name.toHtmlEscaped(), percent(m.top1_agreement), QString::number(m.kl_mean, 'g', 3))
                     .arg(m.positions);
  for (const servelab::GreedyComparison& g : m.greedy) html += greedyComparisonHtml(g, name, dark);
  greedy_->setProperty("sourceHtml", html);
  greedy_->setHtml(html);
}

void QuantizationTab::changeEvent(QEvent* event) {
  ExperimentTab::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) drawDetails();  // highlight colours follow the theme
}

// --- Report and settings ----------------------------------------------------------------------

namespace {

// The result values' prefix of a mode ("int4-g64" -> "int4"), empty for fp32.
QString valuePrefix(const std::string& mode) {
  const QString m = QString::fromStdString(mode);
  if (m == QLatin1String("zp-uint8")) return QStringLiteral("zp_uint8");
  if (m == QLatin1String("int8-channel")) return QStringLiteral("int8");
  if (m.startsWith(QLatin1String("int4-g"))) return QStringLiteral("int4");
  if (m == QLatin1String("fp16") || m == QLatin1String("bf16")) return m;
  return {};
}

const QStringList kModeValueSuffixes = {QStringLiteral("_mb"),
                                        QStringLiteral("_size_percent"),
                                        QStringLiteral("_top1_percent"),
                                        QStringLiteral("_kl"),
                                        QStringLiteral("_decode_ms"),
                                        QStringLiteral("_fp32_decode_ms"),
                                        QStringLiteral("_decode_speedup")};

}  // namespace

QStringList QuantizationTab::resultValueNames() const {
  QStringList names = {QStringLiteral("fp32_mb")};
  for (const char* prefix : {"zp_uint8", "int8", "int4", "fp16", "bf16"})
    for (const QString& suffix : kModeValueSuffixes) names << QLatin1String(prefix) + suffix;
  return names;
}

// Per mode measured (zp_uint8, int8 for int8-channel, int4 for any group size, fp16, bf16): its
// weights in MB (10^6 bytes, as the tab shows them) and as a percentage of fp32's, top-1 agreement with fp32
// in percent, the mean KL divergence of its logits from fp32's, and (when speed was measured) its median
// batch-1 decode step, fp32's timed alongside it (each mode has its own, interleaved with its runs)
// and their ratio.
QMap<QString, double> QuantizationTab::resultValues() const {
  if (!hasResult_ || result_.modes.empty()) return {};
  constexpr double kMB = 1e6;  // as the tab shows weights
  QMap<QString, double> v{
      {QStringLiteral("fp32_mb"), static_cast<double>(result_.modes.front().memory.total_bytes) / kMB}};
  for (const servelab::QuantModeResult& m : result_.modes) {
    const QString p = valuePrefix(m.mode);
    if (p.isEmpty()) continue;
    v[p + QStringLiteral("_mb")] = static_cast<double>(m.memory.total_bytes) / kMB;
    v[p + QStringLiteral("_size_percent")] = 100.0 * m.memory.fraction_of_fp32;
    v[p + QStringLiteral("_top1_percent")] = 100.0 * m.top1_agreement;
    v[p + QStringLiteral("_kl")] = m.kl_mean;
    if (m.speed) {
      v[p + QStringLiteral("_decode_ms")] = m.speed->decode_ms;
      v[p + QStringLiteral("_fp32_decode_ms")] = m.speed->fp32_decode_ms;
      v[p + QStringLiteral("_decode_speedup")] = m.speed->decode_speedup;
    }
  }
  return v;
}

QJsonObject QuantizationTab::lastResult() const {
  if (hasResult_) return toQJsonObject(result_.to_json());
  QJsonObject o;
  o[QStringLiteral("experiment")] = QStringLiteral("quantization");
  if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  return o;
}

void QuantizationTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  QStringList groups;
  for (int i = 0; i < group_->count(); ++i) groups << group_->itemText(i);
  if (const auto group = settingChoice(s, QStringLiteral("int4Group"), groups))
    group_->setCurrentText(*group);
  QStringList modes = {QStringLiteral("zp-uint8"), QStringLiteral("int8-channel"), QStringLiteral("fp16"),
                       QStringLiteral("bf16")};
  for (const QString& g : groups) modes << QStringLiteral("int4-g") + g;
  if (const auto saved = settingChoiceList(s, QStringLiteral("modes"), modes)) setModes(*saved);
  if (const auto e = settingChoice(s, QStringLiteral("exec"), comboData(exec_))) setExec(*e);
  loadSpin(s, QStringLiteral("newTokens"), newTokens_);
  loadSpin(s, QStringLiteral("repeats"), repeats_);
  loadCheck(s, QStringLiteral("measureSpeed"), speed_);
  // The speed workload has no controls (the core's defaults suit a lesson); scripts set it here.
  const auto count = [&s](const char* key, int64_t current, int64_t hi) {
    return static_cast<int>(settingInteger(s, QLatin1String(key), 1, hi).value_or(current));
  };
  setSpeedWorkload(count("decodeTokens", workload_.decode_tokens, servelab::limits::kMaxSteps),
                   count("batch", workload_.batch, servelab::limits::kMaxBatch),
                   count("batchTokens", workload_.batch_tokens, servelab::limits::kMaxTokens));
  s.endGroup();
}

void QuantizationTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("modes"), requestedModes());
  s.setValue(QStringLiteral("int4Group"), group_->currentText().toInt());
  s.setValue(QStringLiteral("exec"), exec());
  s.setValue(QStringLiteral("newTokens"), newTokens_->value());
  s.setValue(QStringLiteral("repeats"), repeats_->value());
  s.setValue(QStringLiteral("measureSpeed"), speed_->isChecked());
  s.setValue(QStringLiteral("decodeTokens"), static_cast<int>(workload_.decode_tokens));
  s.setValue(QStringLiteral("batch"), static_cast<int>(workload_.batch));
  s.setValue(QStringLiteral("batchTokens"), static_cast<int>(workload_.batch_tokens));
  s.endGroup();
}

RunReport QuantizationTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(caveat_) << reportHtml(summary_);
  r.tables << reportTable(table_, tr("Modes compared with fp32"));
  return r;
}

}  // namespace servelab::ui
