#include "batching_tab.h"

#include <QEvent>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QRegularExpressionValidator>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <utility>

#include "chart_view.h"
#include "engine_controller.h"
#include "engine_session.h"
#include "form_widgets.h"

namespace servelab::ui {

namespace {

const QString kThroughput = QStringLiteral("throughput (tokens/ms)");
const QString kLatency = QStringLiteral("latency (ms per step)");
constexpr qint64 kMaxBatch = 4096;

const QStringList kCoursePrompts = {QStringLiteral("The quick brown fox jumped over the"),
                                    QStringLiteral("The rain in Spain falls"),
                                    QStringLiteral("What comes up must")};

// A token's text with its leading space and control characters made visible.
QString visiblePiece(const std::string& piece) {
  QString s = QString::fromStdString(piece);
  if (s.startsWith(QLatin1Char(' '))) s.replace(0, 1, QStringLiteral("\u2423"));
  s.replace(QLatin1Char('\n'), QStringLiteral("\\n"));
  s.replace(QLatin1Char('\t'), QStringLiteral("\\t"));
  return s;
}

QJsonArray matrixJson(const std::vector<std::vector<int64_t>>& m) {
  QJsonArray rows;
  for (const auto& row : m) {
    QJsonArray r;
    for (int64_t v : row) r.append(static_cast<qint64>(v));
    rows.append(r);
  }
  return rows;
}

QTableWidget* makeTensorTable(const QString& name, QWidget* parent) {
  auto* t = new QTableWidget(parent);
  t->setObjectName(name);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setSelectionMode(QAbstractItemView::NoSelection);
  t->setFocusPolicy(Qt::NoFocus);
  t->setWordWrap(false);
  t->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  t->horizontalHeader()->setMinimumSectionSize(26);
  // Sized to their cells (see fillTable); the area around the three scrolls when they are wide.
  t->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  t->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  t->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
  return t;
}

}  // namespace

BatchingTab::BatchingTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  // --- The padded batch ---
  prompts_ = new QPlainTextEdit(this);
  prompts_->setObjectName(QStringLiteral("batchingPrompts"));
  prompts_->setPlainText(kCoursePrompts.join(QLatin1Char('\n')));
  prompts_->setToolTip(tr("One prompt per line; blank lines are skipped"));
  prompts_->setTabChangesFocus(true);
  prompts_->setMinimumHeight(72);
  prompts_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Ignored);  // as tall as the tables beside it
  padTimer_ = new QTimer(this);
  padTimer_->setSingleShot(true);
  padTimer_->setInterval(250);
  connect(padTimer_, &QTimer::timeout, this, &BatchingTab::refreshPadding);
  connect(prompts_, &QPlainTextEdit::textChanged, padTimer_, qOverload<>(&QTimer::start));

  auto* promptBox = new QGroupBox(tr("Prompts (one per line)"), this);
  auto* pv = new QVBoxLayout(promptBox);
  pv->addWidget(prompts_, 1);
  promptBox->setMinimumWidth(300);
  promptBox->setMaximumWidth(380);

  inputIds_ = makeTensorTable(QStringLiteral("batchingInputIds"), this);
  attentionMask_ = makeTensorTable(QStringLiteral("batchingAttentionMask"), this);
  positionIds_ = makeTensorTable(QStringLiteral("batchingPositionIds"), this);
  auto* tensorContent = new QWidget(this);
  auto* tensors = new QHBoxLayout(tensorContent);
  tensors->setContentsMargins(0, 0, 0, 0);
  tensors->setSpacing(16);
  for (auto [table, name] : {std::pair{inputIds_, QStringLiteral("input_ids")},
                             std::pair{attentionMask_, QStringLiteral("attention_mask")},
                             std::pair{positionIds_, QStringLiteral("position_ids")}}) {
    auto* column = new QVBoxLayout;
    column->addWidget(new QLabel(QStringLiteral("<b><code>%1</code></b>").arg(name), this));
    column->addWidget(table);
    column->addStretch(1);
    tensors->addLayout(column);
  }
  tensors->addStretch(1);
  tensorScroll_ = new QScrollArea(this);
  tensorScroll_->setWidget(tensorContent);
  tensorScroll_->setWidgetResizable(true);
  tensorScroll_->setFrameShape(QFrame::NoFrame);
  tensorScroll_->setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  tensorScroll_->viewport()->setAutoFillBackground(false);
  tensorContent->setAutoFillBackground(false);
  padStatus_ = new QLabel(this);
  padStatus_->setObjectName(QStringLiteral("batchingPadCaption"));
  padStatus_->setWordWrap(true);
  padStatus_->setText(tr("Load a model to see the padded batch."));
  auto* tensorBox = new QGroupBox(tr("The padded batch the model sees"), this);
  auto* tv = new QVBoxLayout(tensorBox);
  tv->addWidget(tensorScroll_);
  tv->addWidget(padStatus_);

  auto* top = new QWidget(this);
  auto* topLayout = new QHBoxLayout(top);
  topLayout->setContentsMargins(0, 0, 0, 0);
  topLayout->addWidget(promptBox);
  topLayout->addWidget(tensorBox, 1);

  // --- The sweep ---
  sizes_ = new QLineEdit(QStringLiteral("1, 2, 4, 8, 16, 32, 64, 128"), this);
  sizes_->setObjectName(QStringLiteral("batchingSizes"));
  sizes_->setValidator(
      new QRegularExpressionValidator(QRegularExpression(QStringLiteral("[0-9,; ]*")), sizes_));
  sizes_->setToolTip(tr("Batch sizes to measure, separated by commas (each 1 to %1)").arg(kMaxBatch));
  connect(sizes_, &QLineEdit::textChanged, this, &BatchingTab::validateSizes);
  newTokens_ = new QSpinBox(this);
  newTokens_->setObjectName(QStringLiteral("batchingNewTokens"));
  newTokens_->setRange(1, 1000);
  newTokens_->setValue(10);
  repeats_ = new QSpinBox(this);
  repeats_->setObjectName(QStringLiteral("batchingRepeats"));
  repeats_->setRange(1, 20);
  repeats_->setValue(3);
  repeats_->setToolTip(tr("Each batch size runs this many times; the chart shows the median"));
  auto* form = new QFormLayout;
  form->addRow(tr("Batch sizes"), sizes_);
  form->addRow(tr("New tokens"), newTokens_);
  form->addRow(tr("Repeats"), repeats_);
  QHBoxLayout* buttons = makeRunButtons(QStringLiteral("batching"),
                                        tr("Generate with every batch size and time it (Ctrl+Return)"));
  progress_ = new RunProgressBar(this);
  summary_ = new QLabel(tr("Run to measure throughput and latency for each batch size."), this);
  summary_->setObjectName(QStringLiteral("batchingSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* controls = new QGroupBox(tr("Batch-size sweep"), this);
  auto* cv = new QVBoxLayout(controls);
  cv->addLayout(form);
  cv->addLayout(buttons);
  cv->addWidget(progress_);
  cv->addWidget(summary_);
  cv->addStretch();
  controls->setMinimumWidth(300);
  controls->setMaximumWidth(380);

  chart_ = new ChartView(this);
  chart_->setObjectName(QStringLiteral("batchingChart"));
  chart_->setTitle(tr("Throughput and latency vs batch size"));
  chart_->setAxisLabels(tr("batch size"), kThroughput, kLatency);
  chart_->setLogXBase2(true);
  chart_->addSeries(kThroughput, ChartView::Axis::Left);
  chart_->addSeries(kLatency, ChartView::Axis::Right);
  auto* explanation = new QLabel(
      tr("<b>Bigger batches, more tokens per millisecond:</b> a decode step reads all the model's weights "
         "once, whether it computes one row or many, so the rows of a batch share that cost. <b>But every "
         "user waits longer:</b> each step has more rows to compute and takes longer, so each user's next "
         "token arrives later. Throughput rises until the hardware is busy; latency per step keeps "
         "growing."),
      this);
  explanation->setObjectName(QStringLiteral("batchingExplanation"));
  explanation->setWordWrap(true);

  points_ = new QTableWidget(0, 6, this);
  points_->setObjectName(QStringLiteral("batchingPoints"));
  points_->setHorizontalHeaderLabels({tr("batch"), tr("tokens/ms"), tr("tokens/s"), tr("ms/step"),
                                      tr("decode\nstep (ms)"), tr("total (ms)")});
  points_->verticalHeader()->setVisible(false);
  points_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  points_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  points_->horizontalHeader()->setStretchLastSection(true);
  points_->setMinimumWidth(450);
  points_->setMaximumWidth(520);

  rooflineChart_ = new RooflineChart(this);
  rooflineChart_->setObjectName(QStringLiteral("batchingRooflineChart"));
  auto* chartPages = new QTabWidget(this);
  chartPages->setObjectName(QStringLiteral("batchingChartPages"));
  chartPages->addTab(chart_, tr("Throughput and latency"));
  chartPages->addTab(rooflineChart_, tr("Roofline"));
  auto* chartColumn = new QVBoxLayout;
  chartColumn->addWidget(chartPages, 1);
  chartColumn->addWidget(explanation);
  auto* bottom = new QWidget(this);
  auto* bottomLayout = new QHBoxLayout(bottom);
  bottomLayout->setContentsMargins(0, 0, 0, 0);
  bottomLayout->addWidget(controls);
  bottomLayout->addLayout(chartColumn, 1);
  bottomLayout->addWidget(points_);

  // The batch on top at its natural height; the sweep takes the rest.
  top->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(top);
  layout->addWidget(bottom, 1);
}

// --- Prompts and the padded tensors -----------------------------------------------------------

QStringList BatchingTab::prompts() const {
  QStringList out;
  for (const QString& line : prompts_->toPlainText().split(QLatin1Char('\n')))
    if (!line.trimmed().isEmpty()) out << line;
  return out;
}

void BatchingTab::setPrompts(const QStringList& prompts) { prompts_->setPlainText(prompts.join('\n')); }

void BatchingTab::refreshPadding() {
  padTimer_->stop();
  const QStringList p = prompts();
  if (p.isEmpty()) {
    padTicket_ = 0;
    onPadded(0, {}, tr("type at least one prompt"));
    return;
  }
  // Only the latest answer counts: prompts typed since make an earlier one stale.
  const quint64 ticket = ++padTicket_;
  const bool asked = engine_->ask(
      this, [p](const servelab::Engine& engine) { return padPrompts(engine, p); },
      [this, ticket](const servelab::PaddedPrompts& padded, const QString& error) {
        onPadded(ticket, padded, error);
      });
  if (!asked) padTicket_ = 0;  // no model yet: padded once one is loaded
}

void BatchingTab::onPadded(quint64 ticket, const servelab::PaddedPrompts& padded, const QString& error) {
  if (ticket != padTicket_) return;  // an older request
  padError_ = error;
  hasPadded_ = error.isEmpty();
  padded_ = hasPadded_ ? padded : servelab::PaddedPrompts{};
  fillTables();
  Q_EMIT paddingUpdated();
}

void BatchingTab::fillTables() {
  fillTable(inputIds_, padded_.input_ids);
  fillTable(attentionMask_, padded_.attention_mask);
  fillTable(positionIds_, padded_.position_ids);
  if (!hasPadded_) {
    padStatus_->setText(
        tr("<span style='color:#b00020'>Cannot pad these prompts: %1</span>").arg(padError_.toHtmlEscaped()));
    return;
  }
  padStatus_->setText(
      tr("A static batch is one rectangle of tokens. <b>pad</b> = EOS id %1 · <b>left padding</b>: every "
         "row ends at the last column, where its next token is predicted · <b>attention_mask</b>: 1 on real "
         "tokens, 0 on padding (grey, never attended to) · <b>position_ids</b> = cumsum(mask) − 1, with "
         "padding set to 1 · hover a cell for its token")
          .arg(padded_.pad_id));
}

void BatchingTab::fillTable(QTableWidget* table, const std::vector<std::vector<int64_t>>& values) {
  const int rows = static_cast<int>(values.size());
  const int columns = rows ? static_cast<int>(values.front().size()) : 0;
  table->clear();
  table->setRowCount(rows);
  table->setColumnCount(columns);
  QStringList columnLabels, rowLabels;
  for (int c = 0; c < columns; ++c) columnLabels << QString::number(c);
  for (int r = 0; r < rows; ++r) rowLabels << tr("prompt %1").arg(r + 1);
  table->setHorizontalHeaderLabels(columnLabels);
  table->setVerticalHeaderLabels(rowLabels);
  const QPalette pal = palette();
  const bool dark = pal.color(QPalette::Base).lightness() < 128;
  const QBrush padBackground(dark ? QColor(0x3c, 0x3c, 0x3c) : QColor(0xe4, 0xe4, 0xe4));
  const QBrush padText(dark ? QColor(0x8c, 0x8c, 0x8c) : QColor(0x80, 0x80, 0x80));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < columns && c < static_cast<int>(values[r].size()); ++c) {
      auto* item = new QTableWidgetItem(QString::number(values[r][c]));
      item->setTextAlignment(Qt::AlignCenter);
      const bool pad = padded_.attention_mask[r][c] == 0;
      const std::string piece =
          static_cast<size_t>(r) < padded_.pieces.size() && static_cast<size_t>(c) < padded_.pieces[r].size()
              ? padded_.pieces[r][c]
              : std::string();
      if (pad) {
        item->setBackground(padBackground);
        item->setForeground(padText);
        QFont f = table->font();
        f.setItalic(true);
        item->setFont(f);
        item->setToolTip(tr("padding (left): the EOS token %1 fills the row; attention_mask 0 hides it, "
                            "position_ids gives it 1")
                             .arg(padded_.pad_id));
      } else {
        item->setToolTip(tr("prompt %1, position %2: token \"%3\" (id %4)")
                             .arg(r + 1)
                             .arg(c)
                             .arg(visiblePiece(piece))
                             .arg(padded_.input_ids[r][c]));
      }
      table->setItem(r, c, item);
    }
  }
  table->resizeColumnsToContents();
  table->resizeRowsToContents();
  // Exactly as large as its cells: no inner scrolling, no empty space.
  int width = 2 * table->frameWidth() + table->verticalHeader()->sizeHint().width();
  for (int c = 0; c < columns; ++c) width += table->columnWidth(c);
  int height = 2 * table->frameWidth() + table->horizontalHeader()->sizeHint().height();
  for (int r = 0; r < rows; ++r) height += table->rowHeight(r);
  table->setFixedSize(width, height);
  if (table == positionIds_) {  // the last of the three: fit the area around them
    QLayout* content = tensorScroll_->widget()->layout();
    content->invalidate();  // the tables' new sizes, not the ones cached in the nested layouts
    content->activate();
    const int height = std::min(tensorScroll_->widget()->sizeHint().height() +
                                    tensorScroll_->horizontalScrollBar()->sizeHint().height() + 2,
                                260);
    tensorScroll_->setMinimumHeight(height);
    tensorScroll_->setMaximumHeight(height);
  }
}

void BatchingTab::changeEvent(QEvent* event) {
  ExperimentTab::changeEvent(event);
  if (event->type() == QEvent::PaletteChange && hasPadded_) fillTables();  // pad colours follow the theme
}

void BatchingTab::setModel(const ModelSummary& model) {
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  if (model.positions > 1) newTokens_->setMaximum(model.positions - 1);
  refreshPadding();
}

// --- The sweep ------------------------------------------------------------------------------

void BatchingTab::setBatchSizes(const QString& sizes) { sizes_->setText(sizes); }
void BatchingTab::setNewTokens(int n) { newTokens_->setValue(n); }
void BatchingTab::setRepeats(int n) { repeats_->setValue(n); }
QString BatchingTab::summaryText() const { return summary_->text(); }

QVector<qint64> BatchingTab::batchSizes(QString* error) const {
  QVector<qint64> sizes;
  static const QRegularExpression separators(QStringLiteral("[,; ]+"));
  for (const QString& part : sizes_->text().split(separators, Qt::SkipEmptyParts)) {
    bool ok = false;
    const qint64 b = part.toLongLong(&ok);
    if (!ok || b < 1 || b > kMaxBatch) {
      if (error) *error = tr("batch size \"%1\" is not a whole number from 1 to %2").arg(part).arg(kMaxBatch);
      return {};
    }
    sizes << b;
  }
  if (sizes.isEmpty() && error) *error = tr("give at least one batch size");
  return sizes;
}

void BatchingTab::validateSizes() {
  QString error;
  const bool ok = !batchSizes(&error).isEmpty();
  sizes_->setStyleSheet(ok ? QString() : QStringLiteral("QLineEdit { border: 1px solid #c0392b; }"));
  sizes_->setToolTip(ok ? tr("Batch sizes to measure, separated by commas (each 1 to %1)").arg(kMaxBatch)
                        : error);
}

bool BatchingTab::run() {
  QString error;
  const QVector<qint64> sizes = batchSizes(&error);
  if (sizes.isEmpty()) {
    summary_->setText(tr("<b>Cannot run:</b> %1.").arg(error.toHtmlEscaped()));
    return refuseRun(error);
  }
  const QStringList texts = prompts();
  if (texts.isEmpty()) {
    summary_->setText(tr("<b>Cannot run:</b> type at least one prompt."));
    return refuseRun(tr("type at least one prompt"));
  }
  servelab::BatchSweepParams p;
  p.prompts.clear();
  for (const QString& t : texts) p.prompts.push_back(t.toStdString());
  p.batch_sizes.assign(sizes.begin(), sizes.end());
  p.new_tokens = newTokens_->value();
  p.repeats = repeats_->value();
  auto limits = std::make_shared<RooflineLimits>();
  EngineJob* job = engine_->submit(tr("the batch sweep"), [p, limits](JobContext& c) {
    servelab::BatchSweepResult r = servelab::run_batch_sweep(c.engine(), p, c.control());
    limits->measure(c.engine());
    return r;
  });
  if (!job) return false;
  connect(job, &EngineJob::point, this, &BatchingTab::onPoint);
  progress_->follow(job);
  job->onResult<servelab::BatchSweepResult>(
      this, [this, limits](const auto& r) { onFinished(r, limits->limits()); });
  connect(job, &EngineJob::failed, this, &BatchingTab::onFailed);
  runStarted();
  hasResult_ = false;
  lastError_.clear();
  for (int i = 0; i < chart_->seriesCount(); ++i) chart_->clearSeries(i);
  chart_->rescale();
  rooflineChart_->startRun();
  points_->setRowCount(0);
  progress_->start();
  summary_->setText(tr("Running: %1 batch sizes, %2 new tokens, %3 repeats each…")
                        .arg(sizes.size())
                        .arg(p.new_tokens)
                        .arg(p.repeats));
  return true;
}

void BatchingTab::onPoint(const QString& series, double x, double y) {
  if (series == QLatin1String("throughput"))
    chart_->append(chart_->seriesIndex(kThroughput), x, y);
  else if (series == QLatin1String("latency"))
    chart_->append(chart_->seriesIndex(kLatency), x, y);
}

void BatchingTab::onFinished(const servelab::BatchSweepResult& r, const servelab::MachineLimits& limits) {
  result_ = r;
  hasResult_ = true;
  // Drawn again from the result, so the chart, the table and the report agree exactly.
  QVector<double> xs, throughput, latency;
  for (const servelab::BatchSweepPoint& p : r.points) {
    xs << static_cast<double>(p.batch_size);
    throughput << p.tokens_per_ms;
    latency << p.step_ms;
  }
  chart_->setSeriesData(chart_->seriesIndex(kThroughput), xs, throughput);
  chart_->setSeriesData(chart_->seriesIndex(kLatency), xs, latency);
  chart_->rescale();
  chart_->setFootnote(
      tr("%1 new tokens, median of %2 runs per batch size").arg(r.new_tokens).arg(repeats_->value()) +
      QStringLiteral(" · ") + chartFootnote(model_));
  std::vector<servelab::RooflinePoint> steps;
  for (const servelab::BatchSweepPoint& p : r.points) {
    steps.push_back(p.prefill);
    steps.push_back(p.decode);
  }
  rooflineChart_->showSteps(limits, steps);

  points_->setRowCount(static_cast<int>(r.points.size()));
  for (int i = 0; i < static_cast<int>(r.points.size()); ++i) {
    const servelab::BatchSweepPoint& p = r.points[static_cast<size_t>(i)];
    const QStringList cells = {QString::number(p.batch_size),
                               QString::number(p.tokens_per_ms, 'f', 3),
                               QString::number(p.tokens_per_s, 'f', 0),
                               QString::number(p.step_ms, 'f', 2),
                               QString::number(p.decode_step_ms, 'f', 2),
                               QString::number(p.total_ms, 'f', 1)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      points_->setItem(i, c, item);
    }
  }
  if (!r.points.empty()) {
    const auto [lo, hi] =
        std::minmax_element(r.points.begin(), r.points.end(),
                            [](const auto& a, const auto& b) { return a.batch_size < b.batch_size; });
    const double throughputGain = lo->tokens_per_ms > 0 ? hi->tokens_per_ms / lo->tokens_per_ms : 0;
    const double latencyGrowth = lo->step_ms > 0 ? hi->step_ms / lo->step_ms : 0;
    summary_->setText(tr("<p>From batch %1 to batch %2:</p>"
                         "<p><b>throughput ×%3</b> (%4 → %5 tokens/ms)<br>"
                         "<b>latency per step ×%6</b> (%7 → %8 ms)</p>")
                          .arg(lo->batch_size)
                          .arg(hi->batch_size)
                          .arg(throughputGain, 0, 'f', 1)
                          .arg(lo->tokens_per_ms, 0, 'f', 3)
                          .arg(hi->tokens_per_ms, 0, 'f', 3)
                          .arg(latencyGrowth, 0, 'f', 1)
                          .arg(lo->step_ms, 0, 'f', 2)
                          .arg(hi->step_ms, 0, 'f', 2));
  }
  progress_->finish();
  runEnded(true, QString());
}

void BatchingTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The batch sizes measured so far stay on the chart."));
  runEnded(false, message);
}

QStringList BatchingTab::resultValueNames() const {
  return {QStringLiteral("smallest_batch"),       QStringLiteral("largest_batch"),
          QStringLiteral("smallest_step_ms"),     QStringLiteral("largest_step_ms"),
          QStringLiteral("step_growth"),          QStringLiteral("smallest_tokens_per_s"),
          QStringLiteral("largest_tokens_per_s"), QStringLiteral("throughput_gain"),
          QStringLiteral("batch_within_2x")};
}

// The sweep's two ends: the median decode step (prefill excluded) and throughput at the smallest and
// the largest batch, their ratios, and the largest batch whose decode step took under twice the
// smallest batch's (up to where batching is nearly free).
QMap<QString, double> BatchingTab::resultValues() const {
  if (!hasResult_ || result_.points.empty()) return {};
  std::vector<servelab::BatchSweepPoint> p = result_.points;
  std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.batch_size < b.batch_size; });
  const servelab::BatchSweepPoint &lo = p.front(), &hi = p.back();
  QMap<QString, double> v{{QStringLiteral("smallest_batch"), static_cast<double>(lo.batch_size)},
                          {QStringLiteral("largest_batch"), static_cast<double>(hi.batch_size)},
                          {QStringLiteral("smallest_step_ms"), lo.decode_step_ms},
                          {QStringLiteral("largest_step_ms"), hi.decode_step_ms},
                          {QStringLiteral("smallest_tokens_per_s"), lo.tokens_per_s},
                          {QStringLiteral("largest_tokens_per_s"), hi.tokens_per_s}};
  if (lo.decode_step_ms > 0) {
    v[QStringLiteral("step_growth")] = hi.decode_step_ms / lo.decode_step_ms;
    double within = static_cast<double>(lo.batch_size);
    for (const servelab::BatchSweepPoint& q : p)
      if (q.decode_step_ms < 2 * lo.decode_step_ms) within = static_cast<double>(q.batch_size);
    v[QStringLiteral("batch_within_2x")] = within;
  }
  if (lo.tokens_per_s > 0) v[QStringLiteral("throughput_gain")] = hi.tokens_per_s / lo.tokens_per_s;
  return v;
}

QJsonObject BatchingTab::lastResult() const {
  QJsonObject o;
  if (hasResult_) {
    o = toQJsonObject(result_.to_json());
  } else {
    o[QStringLiteral("experiment")] = QStringLiteral("batch-sweep");
    if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  }
  if (hasPadded_) {
    o[QStringLiteral("padded")] =
        QJsonObject{{QStringLiteral("pad_id"), padded_.pad_id},
                    {QStringLiteral("input_ids"), matrixJson(padded_.input_ids)},
                    {QStringLiteral("attention_mask"), matrixJson(padded_.attention_mask)},
                    {QStringLiteral("position_ids"), matrixJson(padded_.position_ids)}};
  }
  return o;
}

void BatchingTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  // One prompt per list item (a prompt holding a comma is quoted by QSettings); none keeps the default.
  if (settingString(s, QStringLiteral("prompts"))) {
    const QStringList saved = s.value(QStringLiteral("prompts")).toStringList();
    if (!saved.isEmpty()) setPrompts(saved);
  }
  loadParsedText(s, QStringLiteral("batchSizes"), sizes_, QStringLiteral("a list of batch sizes"),
                 [this](QString* error) { return !batchSizes(error).isEmpty(); });
  loadSpin(s, QStringLiteral("newTokens"), newTokens_);
  loadSpin(s, QStringLiteral("repeats"), repeats_);
  s.endGroup();
}

void BatchingTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("prompts"), prompts());
  s.setValue(QStringLiteral("batchSizes"), sizes_->text());
  s.setValue(QStringLiteral("newTokens"), newTokens_->value());
  s.setValue(QStringLiteral("repeats"), repeats_->value());
  s.endGroup();
}

RunReport BatchingTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(summary_);
  r.tables << reportTable(points_, tr("Batch sizes measured"));
  return r;
}

}  // namespace servelab::ui
