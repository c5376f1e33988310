#include "multi_lora_tab.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QRegularExpressionValidator>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTextDocumentFragment>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "chart_view.h"
#include "engine_worker.h"
#include "form_widgets.h"

namespace servelab::ui {

namespace {

constexpr qint64 kMaxBatch = 4096;
// The adapter-cache chart's series, in the order resetCacheChart() adds them.
enum CacheSeries { CacheResident, CacheLoads, CacheHits, CacheEvictions, CacheInStep };
constexpr double kMB = 1e6;
const QString kBase = QStringLiteral("base");
const QString kSeedModule = QStringLiteral("seed-1024");
const QString kBaseChoice = QStringLiteral("(base)");
// Every series in this order on both charts, so a strategy has one colour throughout the tab.
const QStringList kSeries = {kBase, QStringLiteral("loop"), QStringLiteral("gathered"),
                             QStringLiteral("segmented")};

// The legend's name of a series the experiment reports.
QString seriesLabel(const QString& series) { return series == kBase ? QObject::tr("base model") : series; }

QString number(qint64 v) { return QLocale().toString(v); }

QString millions(qint64 v) {
  const double m = static_cast<double>(v) / 1e6;
  return m >= 1 ? QObject::tr("%1 M").arg(m, 0, 'f', 2) : number(v);
}

// A text setting; an INI file written by hand turns "1,2,4" into a list, which is joined back.
QString settingText(const QSettings& s, const char* key, const QString& fallback) {
  const QVariant v = s.value(QLatin1String(key), fallback);
  return v.typeId() == QMetaType::QStringList ? v.toStringList().join(QStringLiteral(", ")) : v.toString();
}

QString ms(double v) { return QString::number(v, 'f', v < 10 ? 2 : 1); }

// The shared table with rows one line of text high.
QTableWidget* makeCompactTable(QWidget* parent, const QString& name, const QStringList& headers) {
  QTableWidget* t = makeTable(parent, name, headers);
  t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 6);
  return t;
}

QTableWidgetItem* cell(const QString& text, bool right = true) {
  auto* item = new QTableWidgetItem(text);
  item->setTextAlignment(right ? (Qt::AlignRight | Qt::AlignVCenter) : (Qt::AlignLeft | Qt::AlignVCenter));
  return item;
}

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

// A readable token as running text: its leading open box back to a space.
QString tokenText(const std::string& piece) {
  QString s = QString::fromStdString(piece);
  if (s.startsWith(QChar(0x2423))) s[0] = QLatin1Char(' ');
  return s;
}

}  // namespace

QString loraPercent(double ratio) {
  const double p = ratio * 100;
  return QString::number(p, 'f', p >= 10 ? 1 : (p >= 0.1 ? 2 : 3)) + QLatin1Char('%');
}

MultiLoraTab::MultiLoraTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  QWidget* adapters = buildAdapterBox();
  QWidget* mathBox = buildMathBox();
  QWidget* composer = buildComposer();

  views_ = new QTabWidget(this);
  views_->setObjectName(QStringLiteral("loraViews"));
  views_->addTab(buildStrategiesPage(), tr("Strategies against batch size"));
  views_->addTab(buildServePage(), tr("Serve with adapters (continuous batching)"));

  auto* top = new QWidget(this);
  auto* topRow = new QHBoxLayout(top);
  topRow->setContentsMargins(0, 0, 0, 0);
  topRow->addWidget(adapters, 1);
  topRow->addWidget(mathBox);

  auto* right = new QSplitter(Qt::Vertical, this);
  right->setObjectName(QStringLiteral("loraSplitter"));
  right->addWidget(top);
  right->addWidget(views_);
  right->setStretchFactor(0, 0);
  right->setStretchFactor(1, 1);
  right->setSizes({150, 600});
  right->setChildrenCollapsible(false);

  auto* controlScroll = new QScrollArea(this);
  controlScroll->setWidget(composer);
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

  connect(engine_, &EngineController::point, this, [this](const QString& s, double x, double y) {
    if (running_ && job_ == Job::Sweep) onPoint(s, x, y);
  });
  connect(engine_, &EngineController::seriesReset, this, [this](const QString& s) {
    if (running_ && job_ == Job::Sweep) onReset(s);
  });
  connect(engine_, &EngineController::progress, this, [this](double f, const QString& stage) {
    if (!running_ || job_ != Job::Sweep) return;
    progress_->setValue(static_cast<int>(f * 1000));
    progress_->setFormat(tr("%1 · %p%").arg(stage));
  });
  connect(engine_, &EngineController::multiLoraFinished, this, [this](const servelab::MultiLoraResult& r) {
    if (running_ && job_ == Job::Sweep) onFinished(r);
  });
  connect(engine_, &EngineController::adapterDescribed, this, &MultiLoraTab::onDescribed);
  connect(engine_, &EngineController::batchRunStarted, this, [this](const QString&, qint64 n, qint64 slots) {
    if (running_ && job_ == Job::Serve) onServeStarted(n, slots);
  });
  connect(engine_, &EngineController::batchAdmitted, this,
          [this](qint64 r, qint64 slot, qint64 step, double) {
            if (running_ && job_ == Job::Serve) onServeAdmitted(r, slot, step);
          });
  connect(engine_, &EngineController::batchRetired, this, [this](const servelab::RequestResult& r) {
    if (running_ && job_ == Job::Serve) onServeRetired(r);
  });
  connect(engine_, &EngineController::batchStep, this, [this](const servelab::BatchStep& s) {
    if (running_ && job_ == Job::Serve) onServeStep(s);
  });
  connect(engine_, &EngineController::adapterServingFinished, this,
          [this](const servelab::BatchRunResult& r) {
            if (running_ && job_ == Job::Serve) onServeFinished(r);
          });
  connect(engine_, &EngineController::failed, this, [this](const QString& kind, const QString& m) {
    if (running_) onFailed(kind, m);
  });

  fillAdapterTable();
  updateComposer();
  updateMath();
  showCache({}, -1, 0);
}

// --- Building the tab -------------------------------------------------------------------------

QWidget* MultiLoraTab::buildAdapterBox() {
  adapterTable_ = makeCompactTable(this, QStringLiteral("loraAdapterTable"),
                                   {tr("name"), tr("source"), tr("r"), tr("α"), tr("α/r"), tr("matrices"),
                                    tr("parameters"), tr("% of W")});
  adapterTable_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  adapterTable_->horizontalHeader()->setStretchLastSection(true);
  adapterTable_->horizontalHeaderItem(2)->setToolTip(tr("Rank r: the largest over the adapter's matrices"));
  adapterTable_->horizontalHeaderItem(3)->setToolTip(tr("α, the LoRA alpha"));
  adapterTable_->horizontalHeaderItem(4)->setToolTip(
      tr("The scale of the update: α / r (α / √r with rsLoRA)"));
  adapterTable_->horizontalHeaderItem(5)->setToolTip(
      tr("Weight matrices the adapter wraps (modules × layers)"));
  adapterTable_->horizontalHeaderItem(6)->setToolTip(tr("|A| + |B| over every wrapped matrix"));
  adapterTable_->horizontalHeaderItem(7)->setToolTip(
      tr("The adapter's parameters as a share of the base matrices it wraps (|A| + |B|) / |W|"));
  adapterTable_->setMinimumHeight(70);

  loadPeft_ = new QPushButton(tr("Load PEFT folder…"), this);
  loadPeft_->setObjectName(QStringLiteral("loraLoadPeft"));
  loadPeft_->setToolTip(
      tr("A folder with adapter_config.json and adapter_model.safetensors (Hugging Face PEFT)"));
  connect(loadPeft_, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Open a PEFT LoRA adapter folder"), QDir::homePath());
    if (!dir.isEmpty()) loadPeftFolder(dir);
  });
  makeRandom_ = new QPushButton(tr("Make random…"), this);
  makeRandom_->setObjectName(QStringLiteral("loraMakeRandom"));
  makeRandom_->setToolTip(tr("Adapters with seeded random A and B on every module, for timing"));
  connect(makeRandom_, &QPushButton::clicked, this, [this] {
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Make random adapters"));
    auto* rank = makeSpin(&dialog, QStringLiteral("randomRank"), 1, 256, 8);
    auto* alpha = new QDoubleSpinBox(&dialog);
    alpha->setRange(0.01, 4096);
    alpha->setValue(16);
    auto* count = makeSpin(&dialog, QStringLiteral("randomCount"), 1, 256, 4);
    auto* form = new QFormLayout(&dialog);
    form->addRow(tr("Rank r"), rank);
    form->addRow(tr("Alpha α"), alpha);
    form->addRow(tr("How many"), count);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() == QDialog::Accepted) addRandomAdapters(rank->value(), alpha->value(), count->value());
  });
  remove_ = new QPushButton(tr("Remove"), this);
  remove_->setObjectName(QStringLiteral("loraRemove"));
  remove_->setToolTip(tr("Remove the selected adapters from the list"));
  connect(remove_, &QPushButton::clicked, this, [this] {
    QList<int> rows;
    for (const QModelIndex& i : adapterTable_->selectionModel()->selectedRows()) rows << i.row();
    std::sort(rows.begin(), rows.end(), std::greater<int>());
    for (int r : rows) removeAdapter(r);
  });
  adapterHint_ = new QLabel(this);
  adapterHint_->setObjectName(QStringLiteral("loraAdapterHint"));
  adapterHint_->setWordWrap(true);
  adapterError_ = new QLabel(this);
  adapterError_->setObjectName(QStringLiteral("loraAdapterError"));
  adapterError_->setWordWrap(true);
  adapterError_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  adapterError_->setStyleSheet(QStringLiteral(
      "QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #e0a0a0; padding: 3px; }"));
  adapterError_->hide();

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(loadPeft_);
  buttons->addWidget(makeRandom_);
  buttons->addWidget(remove_);
  buttons->addWidget(adapterHint_, 1);
  auto* box = new QGroupBox(tr("Adapters"), this);
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(6, 4, 6, 4);
  v->setSpacing(4);
  v->addWidget(adapterTable_, 1);
  v->addLayout(buttons);
  v->addWidget(adapterError_);
  return box;
}

QWidget* MultiLoraTab::buildMathBox() {
  mathModule_ = new QComboBox(this);
  mathModule_->setObjectName(QStringLiteral("loraMathModule"));
  mathModule_->addItem(tr("attn.c_attn (query, key, value)"), QStringLiteral("attn.c_attn"));
  mathModule_->addItem(tr("attn.c_proj (attention output)"), QStringLiteral("attn.c_proj"));
  mathModule_->addItem(tr("mlp.c_fc (MLP up)"), QStringLiteral("mlp.c_fc"));
  mathModule_->addItem(tr("mlp.c_proj (MLP down)"), QStringLiteral("mlp.c_proj"));
  mathModule_->addItem(tr("the seed's example (hidden 1024)"), kSeedModule);
  mathRank_ = makeSpin(this, QStringLiteral("loraMathRank"), 1, 1024, 8);
  mathRank_->setToolTip(tr("The rank r of A and B"));
  mathAlpha_ = new QDoubleSpinBox(this);
  mathAlpha_->setObjectName(QStringLiteral("loraMathAlpha"));
  mathAlpha_->setRange(0.01, 4096);
  mathAlpha_->setValue(16);
  mathAlpha_->setToolTip(tr("α: the update is scaled by α / r"));
  mathLabel_ = new QLabel(this);
  mathLabel_->setObjectName(QStringLiteral("loraMath"));
  mathLabel_->setTextFormat(Qt::RichText);
  mathLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  mathLabel_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  mathLabel_->setWordWrap(true);
  mathLabel_->setToolTip(
      tr("W is in × out; A is in × r and B is r × out, so (|A| + |B|) / |W| = r(in + out) / (in·out). x is a "
         "row "
         "of the batch, 1 × in."));
  connect(mathModule_, &QComboBox::currentIndexChanged, this, [this] { updateMath(); });
  connect(mathRank_, &QSpinBox::valueChanged, this, [this] { updateMath(); });
  connect(mathAlpha_, &QDoubleSpinBox::valueChanged, this, [this] { updateMath(); });
  auto* pick = new QHBoxLayout;
  pick->addWidget(mathModule_, 1);
  pick->addWidget(new QLabel(tr("r"), this));
  pick->addWidget(mathRank_);
  pick->addWidget(new QLabel(tr("α"), this));
  pick->addWidget(mathAlpha_);
  auto* box = new QGroupBox(tr("LoRA in one matrix"), this);
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(6, 4, 6, 4);
  v->setSpacing(4);
  v->addLayout(pick);
  v->addWidget(mathLabel_, 1);
  box->setMinimumWidth(470);
  box->setMaximumWidth(500);
  return box;
}

QWidget* MultiLoraTab::buildComposer() {
  workload_ = new QComboBox(this);
  workload_->setObjectName(QStringLiteral("loraWorkload"));
  workload_->addItem(tr("GPT-2 (the loaded model)"), QStringLiteral("gpt2"));
  workload_->addItem(tr("the seed's toy model"), QStringLiteral("toy"));
  workload_->setToolTip(
      tr("GPT-2: one decode step of the loaded model with an adapter per row, the base model beside it. "
         "Toy: the seed's model (embedding 10, one 10×10 linear with LoRA, lm_head 10×10)."));
  assignment_ = new QComboBox(this);
  assignment_->setObjectName(QStringLiteral("loraAssignment"));
  assignment_->addItem(tr("distinct: every row its own adapter"), QStringLiteral("distinct"));
  assignment_->addItem(tr("shared: a few adapters, many rows each"), QStringLiteral("shared"));
  assignment_->addItem(tr("mixed: every other row the base model"), QStringLiteral("mixed"));
  assignment_->addItem(tr("rows: pick each row's adapter"), QStringLiteral("rows"));
  for (QComboBox* c : {workload_, assignment_}) {
    c->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    c->setMinimumContentsLength(14);
  }
  assignment_->setToolTip(tr("Which adapter each row of a batch uses (rows repeat to fill larger batches)"));
  shared_ = makeSpin(this, QStringLiteral("loraSharedAdapters"), 1, 256, 4, tr(" adapters"));
  sharedRow_ = new QWidget(this);
  auto* sh = new QHBoxLayout(sharedRow_);
  sh->setContentsMargins(0, 0, 0, 0);
  sh->addWidget(new QLabel(tr("Shared by the rows"), this));
  sh->addWidget(shared_, 1);

  rowsTable_ = new QTableWidget(0, 1, this);
  rowsTable_->setObjectName(QStringLiteral("loraRowsTable"));
  rowsTable_->setHorizontalHeaderLabels({tr("adapter of the row")});
  rowsTable_->horizontalHeader()->setStretchLastSection(true);
  rowsTable_->setMinimumHeight(110);
  rowsTable_->setMaximumHeight(170);
  auto* addRowButton = new QPushButton(tr("Add row"), this);
  addRowButton->setObjectName(QStringLiteral("loraAddRow"));
  connect(addRowButton, &QPushButton::clicked, this, [this] {
    const QStringList names = adapterNames();
    addRow(names.isEmpty() ? QString() : names[rowsTable_->rowCount() % names.size()]);
  });
  auto* removeRowButton = new QPushButton(tr("Remove row"), this);
  connect(removeRowButton, &QPushButton::clicked, this, [this] {
    if (rowsTable_->rowCount() > 1) rowsTable_->removeRow(rowsTable_->rowCount() - 1);
  });
  rowsPanel_ = new QWidget(this);
  auto* rp = new QVBoxLayout(rowsPanel_);
  rp->setContentsMargins(0, 0, 0, 0);
  rp->addWidget(rowsTable_);
  auto* rowButtons = new QHBoxLayout;
  rowButtons->addWidget(addRowButton);
  rowButtons->addWidget(removeRowButton);
  rp->addLayout(rowButtons);
  for (int i = 0; i < 4; ++i) addRow(QString());

  randomCount_ = makeSpin(this, QStringLiteral("loraRandomCount"), 1, 1024, 32);
  randomRank_ = makeSpin(this, QStringLiteral("loraRandomRank"), 1, 256, 8);
  randomRow_ = new QWidget(this);
  auto* rr = new QHBoxLayout(randomRow_);
  rr->setContentsMargins(0, 0, 0, 0);
  rr->addWidget(randomCount_, 1);
  rr->addWidget(new QLabel(tr("of rank"), this));
  rr->addWidget(randomRank_, 1);
  randomRow_->setToolTip(
      tr("When the adapter list is empty, the experiment makes this many random adapters"));

  sizes_ = new QLineEdit(QStringLiteral("1, 2, 4, 8, 16, 32"), this);
  sizes_->setObjectName(QStringLiteral("loraBatchSizes"));
  sizes_->setValidator(
      new QRegularExpressionValidator(QRegularExpression(QStringLiteral("[0-9,; ]*")), sizes_));
  sizes_->setToolTip(tr("Batch sizes to measure, separated by commas (each 1 to %1)").arg(kMaxBatch));
  connect(sizes_, &QLineEdit::textChanged, this, [this] {
    QString error;
    const bool ok = !batchSizes(&error).isEmpty();
    sizes_->setStyleSheet(ok ? QString() : QStringLiteral("QLineEdit { border: 1px solid #c0392b; }"));
    sizes_->setToolTip(ok ? tr("Batch sizes to measure, separated by commas (each 1 to %1)").arg(kMaxBatch)
                          : error);
  });
  loop_ = new QCheckBox(tr("loop"), this);
  loop_->setObjectName(QStringLiteral("loraLoop"));
  loop_->setToolTip(tr("The seed's loop: one row at a time, y[i] += x[i]·A_i·B_i"));
  gathered_ = new QCheckBox(tr("gathered"), this);
  gathered_->setObjectName(QStringLiteral("loraGathered"));
  gathered_->setToolTip(
      tr("The seed's gathered matmul: every row's A and B picked from one stack, one batched product"));
  segmented_ = new QCheckBox(tr("segmented"), this);
  segmented_->setObjectName(QStringLiteral("loraSegmented"));
  segmented_->setToolTip(tr("Rows grouped by adapter, one product pair per group (Punica's SGMV)"));
  for (QCheckBox* c : {loop_, gathered_, segmented_}) c->setChecked(true);
  auto* strategyRow = new QGridLayout;
  strategyRow->setContentsMargins(0, 0, 0, 0);
  strategyRow->setVerticalSpacing(2);
  strategyRow->addWidget(loop_, 0, 0);
  strategyRow->addWidget(gathered_, 0, 1);
  strategyRow->addWidget(segmented_, 1, 0);

  context_ = makeSpin(this, QStringLiteral("loraContext"), 1, 4096, 32, tr(" tokens"));
  context_->setToolTip(tr("Positions in the KV cache before the timed decode steps"));
  decodeSteps_ = makeSpin(this, QStringLiteral("loraDecodeSteps"), 1, 256, 4);
  decodeSteps_->setToolTip(tr("Timed decode steps per repeat"));
  repeats_ = makeSpin(this, QStringLiteral("loraRepeats"), 1, 50, 3);
  repeats_->setToolTip(
      tr("Strategies and the base model alternate within each repeat; the chart shows medians"));
  toySamples_ = makeSpin(this, QStringLiteral("loraToySamples"), 1, 100000, 500);
  toySamples_->setToolTip(tr("Forward passes the toy workload averages over"));
  prompt_ = new QLineEdit(QStringLiteral("The quick brown fox jumped over the"), this);
  prompt_->setObjectName(QStringLiteral("loraPrompt"));
  prompt_->setCursorPosition(0);
  prompt_->setToolTip(tr("Generated through every adapter and the base model after the timing"));
  newTokens_ = makeSpin(this, QStringLiteral("loraNewTokens"), 1, 1000, 12);

  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  form->addRow(tr("Workload"), workload_);
  form->addRow(tr("Rows use"), assignment_);
  form->addRow(sharedRow_);
  form->addRow(rowsPanel_);
  form->addRow(tr("Batch sizes"), sizes_);
  form->addRow(tr("Strategies"), strategyRow);
  // Rows only the GPT-2 workload has.
  gpt2Rows_ = new QWidget(this);
  auto* g2 = new QFormLayout(gpt2Rows_);
  g2->setContentsMargins(0, 0, 0, 0);
  g2->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  g2->addRow(tr("Without a list"), randomRow_);
  g2->addRow(tr("Context"), context_);
  // Decode steps per repeat have no control (the core's default suits the lesson); scripts and
  // tests set them through the settings.
  decodeSteps_->hide();
  toyRow_ = new QWidget(this);
  auto* toyForm = new QFormLayout(toyRow_);
  toyForm->setContentsMargins(0, 0, 0, 0);
  toyForm->addRow(tr("Forward passes"), toySamples_);
  form->addRow(gpt2Rows_);
  form->addRow(toyRow_);
  form->addRow(tr("Repeats"), repeats_);
  form->addRow(tr("Prompt"), prompt_);
  form->addRow(tr("New tokens"), newTokens_);

  QHBoxLayout* buttons = makeRunButtons(
      QStringLiteral("lora"), tr("Time every strategy and the base model at each batch size (Ctrl+Return)"));
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("loraProgress"));
  progress_->setRange(0, 1000);
  progress_->setValue(0);
  progress_->setFormat(tr("idle"));
  summary_ = new QLabel(tr("Run to time the strategies against the base model at each batch size."), this);
  summary_->setObjectName(QStringLiteral("loraSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  agreement_ = new QLabel(this);
  agreement_->setObjectName(QStringLiteral("loraAgreement"));
  agreement_->setWordWrap(true);
  agreement_->hide();

  connect(workload_, &QComboBox::currentIndexChanged, this, [this] { updateComposer(); });
  connect(assignment_, &QComboBox::currentIndexChanged, this, [this] { updateComposer(); });

  auto* box = new QGroupBox(tr("A batch of adapters"), this);
  auto* v = new QVBoxLayout(box);
  v->addLayout(form);
  v->addLayout(buttons);
  v->addWidget(progress_);
  v->addWidget(summary_);
  v->addWidget(agreement_);
  auto* explanation = new QLabel(
      tr("<b>LoRA</b> freezes a weight matrix W and adds a low-rank update, y = xW + (α/r)·xAB, so one base "
         "model can serve many small fine-tuned adapters. When the rows of a batch use different adapters, "
         "the "
         "seed's <b>loop</b> does one tiny product pair per row and leaves the hardware idle; "
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
  split->addWidget(top);
  split->addWidget(detailTabs_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({330, 170});
  split->setChildrenCollapsible(false);
  return split;
}

QWidget* MultiLoraTab::buildServePage() {
  serveRequests_ = makeSpin(this, QStringLiteral("loraServeRequests"), 1, 1024, 16);
  serveMaxBatch_ = makeSpin(this, QStringLiteral("loraServeMaxBatch"), 1, 256, 4);
  serveMaxBatch_->setToolTip(tr("Requests that run at once (batch places)"));
  serveNewTokens_ = makeSpin(this, QStringLiteral("loraServeNewTokens"), 1, 1000, 8);
  cacheCapacity_ = makeSpin(this, QStringLiteral("loraCacheCapacity"), 0, 1024, 2);
  cacheCapacity_->setSpecialValueText(tr("all"));
  cacheCapacity_->setToolTip(
      tr("Adapters held in memory at once. When it is full, the least recently used adapter that no running "
         "request needs is evicted; a request whose adapter cannot be loaded waits."));
  serveStrategy_ = new QComboBox(this);
  serveStrategy_->setObjectName(QStringLiteral("loraServeStrategy"));
  for (const std::string& s : servelab::multi_lora_strategy_names())
    serveStrategy_->addItem(QString::fromStdString(s), QString::fromStdString(s));
  serveStrategy_->setCurrentText(QStringLiteral("segmented"));
  serveRun_ = new QPushButton(tr("Serve with adapters"), this);
  serveRun_->setObjectName(QStringLiteral("loraServe"));
  serveRun_->setToolTip(
      tr("Serve the requests by continuous batching, request i with adapter i mod n of the list (Ctrl+Return "
         "on this page)"));
  connect(serveRun_, &QPushButton::clicked, this, [this] { serve(); });
  serveStop_ = new QPushButton(tr("Stop"), this);
  serveStop_->setObjectName(QStringLiteral("loraServeStop"));
  serveStop_->setEnabled(false);
  connect(serveStop_, &QPushButton::clicked, engine_, &EngineController::stop);

  auto* controls = new QHBoxLayout;
  for (auto [label, widget] : {std::pair<QString, QWidget*>{tr("Requests"), serveRequests_},
                               {tr("Max batch"), serveMaxBatch_},
                               {tr("New tokens"), serveNewTokens_},
                               {tr("Adapter cache"), cacheCapacity_},
                               {tr("Strategy"), serveStrategy_}}) {
    controls->addWidget(new QLabel(label, this));
    controls->addWidget(widget);
    controls->addSpacing(6);
  }
  controls->addWidget(serveRun_);
  controls->addWidget(serveStop_);
  controls->addStretch(1);

  serveAdapters_ = new QLabel(this);
  serveAdapters_->setObjectName(QStringLiteral("loraServeAdapters"));
  serveAdapters_->setWordWrap(true);

  loadsLabel_ = makeCounter(this, QStringLiteral("loraCacheLoads"),
                            tr("Adapters read from a folder or made from a seed"));
  hitsLabel_ =
      makeCounter(this, QStringLiteral("loraCacheHits"), tr("Requests whose adapter was already loaded"));
  evictionsLabel_ = makeCounter(this, QStringLiteral("loraCacheEvictions"),
                                tr("Adapters dropped to make room for another one"));
  residentLabel_ =
      makeCounter(this, QStringLiteral("loraCacheResident"), tr("Adapters loaded now / capacity"));
  inStepLabel_ = makeCounter(this, QStringLiteral("loraAdaptersInStep"),
                             tr("Distinct adapters among the requests of the last step"));
  serveProgress_ = new QProgressBar(this);
  serveProgress_->setObjectName(QStringLiteral("loraServeProgress"));
  serveProgress_->setRange(0, 1000);
  serveProgress_->setValue(0);
  serveProgress_->setFormat(tr("idle"));
  auto* counters = new QHBoxLayout;
  for (QLabel* l : {loadsLabel_, hitsLabel_, evictionsLabel_, residentLabel_, inStepLabel_})
    counters->addWidget(l);
  counters->addSpacing(8);
  auto* progressColumn = new QVBoxLayout;
  progressColumn->addWidget(serveProgress_);
  serveSummary_ = new QLabel(tr("Serve the queue to see the adapter cache at work."), this);
  serveSummary_->setObjectName(QStringLiteral("loraServeSummary"));
  serveSummary_->setWordWrap(true);
  serveSummary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  progressColumn->addWidget(serveSummary_, 1);
  counters->addLayout(progressColumn, 1);

  cacheChart_ = new ChartView(this);
  cacheChart_->setObjectName(QStringLiteral("loraCacheChart"));
  cacheChart_->setTitle(tr("Adapter cache over scheduler steps"));
  cacheChart_->setAxisLabels(tr("scheduler step"), tr("adapters (count)"));
  cacheChart_->setIntegerTicks(true, true);
  cacheChart_->setLegendBelow(true);
  cacheChart_->setLegendColumns(3);
  resetCacheChart();

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

  auto* page = new QWidget(this);
  auto* v = new QVBoxLayout(page);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(controls);
  v->addWidget(serveAdapters_);
  v->addLayout(counters);
  v->addWidget(split, 1);
  return page;
}

ChartView* MultiLoraTab::primaryChart() const {
  return currentView() == QLatin1String("serve") ? cacheChart_ : latencyChart_;
}

QList<ChartView*> MultiLoraTab::charts() const { return {latencyChart_, ratioChart_, cacheChart_}; }

// --- The math panel ---------------------------------------------------------------------------

void MultiLoraTab::setMathModule(const QString& module) {
  const int i = mathModule_->findData(module);
  if (i >= 0) mathModule_->setCurrentIndex(i);
}
void MultiLoraTab::setMathRank(int rank) { mathRank_->setValue(rank); }
void MultiLoraTab::setMathAlpha(double alpha) { mathAlpha_->setValue(alpha); }

LoraMath MultiLoraTab::math() const {
  // GPT-2 small's shapes until a model is loaded.
  const qint64 width = model_.width > 0 ? model_.width : 768;
  const qint64 inner = model_.inner > 0 ? model_.inner : 4 * width;
  const QString module = mathModule_->currentData().toString();
  LoraMath m;
  m.rank = mathRank_->value();
  if (module == QLatin1String("attn.c_attn")) {
    m.in = width;
    m.out = 3 * width;
  } else if (module == QLatin1String("attn.c_proj")) {
    m.in = width;
    m.out = width;
  } else if (module == QLatin1String("mlp.c_fc")) {
    m.in = width;
    m.out = inner;
  } else if (module == QLatin1String("mlp.c_proj")) {
    m.in = inner;
    m.out = width;
  } else {
    m.in = 1024;
    m.out = 1024;
  }
  return m;
}

QString MultiLoraTab::mathText() const {
  return QTextDocumentFragment::fromHtml(mathLabel_->text()).toPlainText();
}

void MultiLoraTab::updateMath() {
  const LoraMath m = math();
  const double alpha = mathAlpha_->value();
  const bool seed = mathModule_->currentData().toString() == kSeedModule;
  const QString muted = palette().color(QPalette::Base).lightness() < 128 ? QStringLiteral("#a0a0a0")
                                                                          : QStringLiteral("#666666");
  const auto row = [&](const QString& name, const QString& shape, qint64 params, const QString& note) {
    return QStringLiteral(
               "<tr><td><b>%1</b></td><td style='padding-left:6px'>[%2]</td>"
               "<td align='right' style='padding-left:10px'>%3</td>"
               "<td style='padding-left:8px; color:%4'>%5</td></tr>")
        .arg(name, shape, number(params), muted, note);
  };
  QString html = QStringLiteral("<table cellspacing='0' cellpadding='1'>");
  html +=
      row(QStringLiteral("W"), QStringLiteral("%1 × %2").arg(m.in).arg(m.out), m.wParameters(), tr("frozen"));
  html +=
      row(QStringLiteral("A"), QStringLiteral("%1 × %2").arg(m.in).arg(m.rank), m.in * m.rank, tr("trained"));
  html += row(QStringLiteral("B"), QStringLiteral("%1 × %2").arg(m.rank).arg(m.out), m.rank * m.out,
              tr("trained"));
  html += QStringLiteral("</table>");
  html += tr("<p style='margin-top:4px; margin-bottom:2px'>y = x·W + (α/r)·x·A·B &nbsp; with α/r = %1/%2 = "
             "<b>%3</b></p>")
              .arg(alpha, 0, 'g', 4)
              .arg(m.rank)
              .arg(alpha / static_cast<double>(m.rank), 0, 'g', 4);
  html += tr("<p style='margin-top:2px; margin-bottom:2px'>(|A| + |B|) / |W| = %1 / %2 = <b>%3</b></p>")
              .arg(number(m.abParameters()), number(m.wParameters()), loraPercent(m.ratio()));
  if (!seed) {
    // Every module of every layer at this rank: what one adapter adds to the whole model.
    const qint64 width = model_.width > 0 ? model_.width : 768;
    const qint64 inner = model_.inner > 0 ? model_.inner : 4 * width;
    const qint64 layers = model_.layers > 0 ? model_.layers : 12;
    const qint64 perLayer =
        m.rank * ((width + 3 * width) + (width + width) + (width + inner) + (inner + width));
    const qint64 all = perLayer * layers;
    const qint64 total = model_.parameters > 0 ? model_.parameters : 124439808;
    html += tr("<p style='margin-top:2px; color:%1'>All %2 matrices at r = %3: %4 parameters, %5 of the "
               "model</p>")
                .arg(muted)
                .arg(4 * layers)
                .arg(m.rank)
                .arg(millions(all), loraPercent(static_cast<double>(all) / static_cast<double>(total)));
  } else {
    html += tr("<p style='margin-top:2px; color:%1'>The seed's example: a 1024 × 1024 layer at rank 2 trains "
               "0.39% of its weights.</p>")
                .arg(muted);
  }
  mathLabel_->setText(html);
}

// --- The adapter list -------------------------------------------------------------------------

int MultiLoraTab::joining() const {
  return static_cast<int>(
      std::count_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.refresh; }));
}

QStringList MultiLoraTab::adapterNames() const {
  QStringList names;
  for (const Entry& e : entries_) names << QString::fromStdString(e.source.name);
  for (const Pending& p : pending_)
    if (!p.refresh) names << QString::fromStdString(p.source.name);
  return names;
}

QString MultiLoraTab::uniqueName(const QString& base) const {
  const QStringList taken = adapterNames();
  if (!taken.contains(base)) return base;
  for (int i = 2;; ++i) {
    const QString name = QStringLiteral("%1-%2").arg(base).arg(i);
    if (!taken.contains(name)) return name;
  }
}

quint64 MultiLoraTab::nextSeed() const {
  quint64 seed = 0;
  for (const Entry& e : entries_) seed = std::max<quint64>(seed, e.source.seed);
  for (const Pending& p : pending_) seed = std::max<quint64>(seed, p.source.seed);
  return seed + 1;
}

void MultiLoraTab::requestDescription(const servelab::AdapterSource& source, bool refresh, int id) {
  const quint64 ticket = engine_->describeAdapter(source);
  if (ticket == 0) {
    // No model yet: the adapter joins now and is described once a model is loaded.
    if (!refresh) {
      entries_.append(Entry{nextEntryId_++, source, std::nullopt, QString()});
      fillAdapterTable();
      rebuildRowCombos();
      Q_EMIT adaptersChanged();
    }
    return;
  }
  pending_.insert(ticket, Pending{refresh, id, source});
  fillAdapterTable();
}

void MultiLoraTab::loadPeftFolder(const QString& dir) {
  servelab::AdapterSource s;
  s.peft_dir = QDir::cleanPath(QFileInfo(dir).absoluteFilePath()).toStdString();
  s.name =
      uniqueName(QFileInfo(dir).fileName().isEmpty() ? QStringLiteral("peft") : QFileInfo(dir).fileName())
          .toStdString();
  s.rank = 0;
  s.alpha = 0;
  s.modules.clear();
  requestDescription(s, false, 0);
}

void MultiLoraTab::addRandomAdapters(int rank, double alpha, int count) {
  for (int k = 0; k < count; ++k) {
    servelab::AdapterSource s;
    s.rank = rank;
    s.alpha = alpha;
    s.seed = nextSeed();
    const QString base = QStringLiteral("rand-r%1-").arg(rank);
    QStringList taken = adapterNames();
    int n = 1;
    while (taken.contains(base + QString::number(n))) ++n;
    s.name = (base + QString::number(n)).toStdString();
    requestDescription(s, false, 0);
  }
}

void MultiLoraTab::removeAdapter(int row) {
  if (row < 0 || row >= entries_.size()) return;
  entries_.removeAt(row);
  fillAdapterTable();
  rebuildRowCombos();
  Q_EMIT adaptersChanged();
}

void MultiLoraTab::clearAdapters() {
  entries_.clear();
  pending_.clear();
  fillAdapterTable();
  rebuildRowCombos();
  Q_EMIT adaptersChanged();
}

QVector<servelab::AdapterSource> MultiLoraTab::adapterSources() const {
  QVector<servelab::AdapterSource> out;
  for (const Entry& e : entries_) out << e.source;
  return out;
}

std::optional<servelab::AdapterInfo> MultiLoraTab::adapterInfo(int row) const {
  if (row < 0 || row >= entries_.size()) return std::nullopt;
  return entries_[row].info;
}

QString MultiLoraTab::adapterError() const {
  return adapterError_->isVisible() ? adapterError_->text() : QString();
}

void MultiLoraTab::showAdapterError(const QString& message) {
  adapterError_->setText(message);
  adapterError_->setVisible(!message.isEmpty());
}

void MultiLoraTab::describeAll() {
  // Answers about the previous model no longer matter (adapters still joining stay pending).
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->refresh ? pending_.erase(it) : std::next(it);
  for (const Entry& e : entries_) requestDescription(e.source, true, e.id);
}

void MultiLoraTab::onDescribed(quint64 ticket, const servelab::AdapterInfo& info, const QString& error) {
  const auto it = pending_.find(ticket);
  if (it == pending_.end()) return;  // another tab's, or about a model no longer loaded
  const Pending p = *it;
  pending_.erase(it);
  const QString name = QString::fromStdString(p.source.name);
  if (p.refresh) {
    for (Entry& e : entries_) {
      if (e.id != p.id) continue;
      e.info = error.isEmpty() ? std::optional<servelab::AdapterInfo>(info) : std::nullopt;
      e.error = error;
    }
    if (!error.isEmpty())
      showAdapterError(tr("Adapter %1 does not fit the loaded model: %2").arg(name, error));
  } else if (error.isEmpty()) {
    entries_.append(Entry{nextEntryId_++, p.source, info, QString()});
    showAdapterError(QString());
    rebuildRowCombos();
  } else {
    showAdapterError(
        p.source.peft_dir.empty()
            ? tr("Cannot make adapter %1: %2").arg(name, error)
            : tr("Cannot load %1: %2")
                  .arg(QDir::toNativeSeparators(QString::fromStdString(p.source.peft_dir)), error));
  }
  fillAdapterTable();
  Q_EMIT adaptersChanged();
}

void MultiLoraTab::fillAdapterTable() {
  const int rows = static_cast<int>(entries_.size());
  adapterTable_->setRowCount(rows);
  const QColor bad(0xb0, 0x00, 0x20);
  for (int r = 0; r < rows; ++r) {
    const Entry& e = entries_[r];
    const servelab::AdapterSource& s = e.source;
    // A PEFT folder by its name (the whole path in the tooltip), a random adapter by its seed.
    const QString path = QDir::toNativeSeparators(QString::fromStdString(s.peft_dir));
    QString source = s.peft_dir.empty() ? tr("random (seed %1)").arg(s.seed)
                                        : tr("peft …/%1").arg(QFileInfo(path).fileName());
    const QString sourceTip = s.peft_dir.empty() ? source : tr("PEFT folder %1").arg(path);
    QStringList cells;
    if (e.info) {
      const servelab::AdapterInfo& i = *e.info;
      if (s.peft_dir.empty() && !i.source.empty()) source = QString::fromStdString(i.source);
      cells = {QString::fromStdString(s.name),
               source,
               QString::number(i.rank),
               QString::number(i.alpha, 'g', 4),
               QString::number(i.scale, 'g', 4),
               QString::number(static_cast<qint64>(i.modules.size())),
               number(i.parameters),
               i.base_parameters > 0
                   ? loraPercent(static_cast<double>(i.parameters) / static_cast<double>(i.base_parameters))
                   : QStringLiteral("—")};
    } else {
      const QString unknown = e.error.isEmpty() ? QStringLiteral("…") : QStringLiteral("—");
      cells = {QString::fromStdString(s.name),
               source,
               s.peft_dir.empty() ? QString::number(s.rank) : unknown,
               s.peft_dir.empty() ? QString::number(s.alpha, 'g', 4) : unknown,
               unknown,
               unknown,
               unknown,
               unknown};
    }
    for (int c = 0; c < cells.size(); ++c) {
      QTableWidgetItem* item = cell(cells[c], c >= 2);
      if (c == 1) item->setToolTip(sourceTip);
      if (c == 5 && e.info) {
        QStringList modules;
        for (const std::string& m : e.info->modules) modules << QString::fromStdString(m);
        item->setToolTip(modules.join(QStringLiteral(", ")));
      }
      if (c == 7 && e.info && model_.parameters > 0)
        item->setToolTip(tr("%1 of the whole model's %2 parameters")
                             .arg(loraPercent(static_cast<double>(e.info->parameters) /
                                              static_cast<double>(model_.parameters)),
                                  number(model_.parameters)));
      if (!e.error.isEmpty()) {
        item->setForeground(bad);
        item->setToolTip(e.error);
      }
      adapterTable_->setItem(r, c, item);
    }
  }
  const int waiting = joining();
  QString hint;
  if (rows == 0 && waiting == 0)
    hint = tr("The list is empty: the experiment makes %1 random adapters of rank %2 itself, and serving "
              "uses as many.")
               .arg(randomCount_->value())
               .arg(randomRank_->value());
  else
    hint = tr("%n adapter(s)", nullptr, rows) +
           (waiting > 0 ? tr(", %1 being loaded…").arg(waiting) : QString()) +
           tr(". The experiment and serving use this list.");
  adapterHint_->setText(hint);
  remove_->setEnabled(rows > 0);
}

// --- The batch composer -----------------------------------------------------------------------

void MultiLoraTab::updateComposer() {
  const bool toy = workload_->currentData().toString() == QLatin1String("toy");
  const QString a = assignment_->currentData().toString();
  gpt2Rows_->setVisible(!toy);
  toyRow_->setVisible(toy);
  // The toy workload gives each row a random adapter of its own: no assignment to choose.
  assignment_->setEnabled(!toy);
  sharedRow_->setVisible(!toy && a == QLatin1String("shared"));
  rowsPanel_->setVisible(!toy && a == QLatin1String("rows"));
  context_->setEnabled(!toy);
  prompt_->setEnabled(!toy);
  newTokens_->setEnabled(!toy);
}

void MultiLoraTab::addRow(const QString& adapter) {
  const int row = rowsTable_->rowCount();
  rowsTable_->insertRow(row);
  rowsTable_->setVerticalHeaderItem(row, new QTableWidgetItem(tr("row %1").arg(row)));
  auto* combo = new QComboBox(rowsTable_);
  combo->addItem(kBaseChoice, QString());
  for (const QString& n : adapterNames()) combo->addItem(n, n);
  const int i = combo->findData(adapter);
  combo->setCurrentIndex(std::max(0, i));
  rowsTable_->setCellWidget(row, 0, combo);
}

void MultiLoraTab::rebuildRowCombos() {
  const QStringList chosen = rowAdapters();
  const QStringList names = adapterNames();
  for (int r = 0; r < rowsTable_->rowCount(); ++r) {
    auto* combo = qobject_cast<QComboBox*>(rowsTable_->cellWidget(r, 0));
    if (!combo) continue;
    combo->clear();
    combo->addItem(kBaseChoice, QString());
    for (const QString& n : names) combo->addItem(n, n);
    combo->setCurrentIndex(std::max(0, combo->findData(chosen.value(r))));
  }
}

QStringList MultiLoraTab::rowAdapters() const {
  QStringList out;
  for (int r = 0; r < rowsTable_->rowCount(); ++r) {
    auto* combo = qobject_cast<QComboBox*>(rowsTable_->cellWidget(r, 0));
    out << (combo ? combo->currentData().toString() : QString());
  }
  return out;
}

void MultiLoraTab::setRowAdapters(const QStringList& names) {
  while (rowsTable_->rowCount() > 0) rowsTable_->removeRow(0);
  for (const QString& n : names) addRow(n == kBaseChoice ? QString() : n);
  if (names.isEmpty()) addRow(QString());
}

void MultiLoraTab::setWorkload(const QString& workload) {
  const int i = workload_->findData(workload);
  if (i >= 0) workload_->setCurrentIndex(i);
}
void MultiLoraTab::setAssignment(const QString& assignment) {
  const int i = assignment_->findData(assignment);
  if (i >= 0) assignment_->setCurrentIndex(i);
}
void MultiLoraTab::setSharedAdapters(int n) { shared_->setValue(n); }
void MultiLoraTab::setBatchSizes(const QString& sizes) { sizes_->setText(sizes); }
void MultiLoraTab::setStrategies(const QStringList& strategies) {
  QStringList names;
  for (const QString& s : strategies)
    for (const QString& part : s.split(QLatin1Char(','), Qt::SkipEmptyParts)) names << part.trimmed();
  loop_->setChecked(names.contains(QStringLiteral("loop")));
  gathered_->setChecked(names.contains(QStringLiteral("gathered")));
  segmented_->setChecked(names.contains(QStringLiteral("segmented")));
}
QStringList MultiLoraTab::strategies() const {
  QStringList s;
  if (loop_->isChecked()) s << QStringLiteral("loop");
  if (gathered_->isChecked()) s << QStringLiteral("gathered");
  if (segmented_->isChecked()) s << QStringLiteral("segmented");
  return s;
}
void MultiLoraTab::setRandomAdapters(int count, int rank) {
  randomCount_->setValue(count);
  randomRank_->setValue(rank);
  fillAdapterTable();
}
void MultiLoraTab::setContext(int tokens) { context_->setValue(tokens); }
void MultiLoraTab::setDecodeSteps(int steps) { decodeSteps_->setValue(steps); }
void MultiLoraTab::setRepeats(int repeats) { repeats_->setValue(repeats); }
void MultiLoraTab::setToySamples(int samples) { toySamples_->setValue(samples); }
void MultiLoraTab::setPrompt(const QString& prompt) {
  prompt_->setText(prompt);
  prompt_->setCursorPosition(0);
}
void MultiLoraTab::setNewTokens(int n) { newTokens_->setValue(n); }

QVector<qint64> MultiLoraTab::batchSizes(QString* error) const {
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

servelab::MultiLoraParams MultiLoraTab::params() const {
  servelab::MultiLoraParams p;
  p.workload = workload_->currentData().toString().toStdString();
  p.strategies.clear();
  for (const QString& s : strategies()) p.strategies.push_back(s.toStdString());
  const QVector<qint64> sizes = batchSizes();
  p.batch_sizes.assign(sizes.begin(), sizes.end());
  p.toy_samples = toySamples_->value();
  for (const Entry& e : entries_) p.adapters.push_back(e.source);
  p.random_adapters = randomCount_->value();
  p.random_rank = randomRank_->value();
  p.assignment = assignment_->currentData().toString().toStdString();
  p.shared_adapters = shared_->value();
  p.row_adapters.clear();
  if (p.assignment == "rows")
    for (const QString& r : rowAdapters()) p.row_adapters.push_back(r.toStdString());
  p.context = context_->value();
  p.decode_steps = decodeSteps_->value();
  p.repeats = repeats_->value();
  p.prompt = prompt_->text().toStdString();
  p.new_tokens = newTokens_->value();
  return p;
}

// --- Serving ----------------------------------------------------------------------------------

void MultiLoraTab::setServeRequests(int n) { serveRequests_->setValue(n); }
void MultiLoraTab::setServeMaxBatch(int n) { serveMaxBatch_->setValue(n); }
void MultiLoraTab::setServeNewTokens(int n) { serveNewTokens_->setValue(n); }
void MultiLoraTab::setCacheCapacity(int n) { cacheCapacity_->setValue(n); }
void MultiLoraTab::setServeStrategy(const QString& strategy) {
  const int i = serveStrategy_->findData(strategy);
  if (i >= 0) serveStrategy_->setCurrentIndex(i);
}

std::vector<servelab::AdapterSource> MultiLoraTab::serveAdapters() const {
  std::vector<servelab::AdapterSource> out;
  for (const Entry& e : entries_) out.push_back(e.source);
  if (!out.empty()) return out;
  for (int i = 1; i <= randomCount_->value(); ++i) {
    servelab::AdapterSource s;
    s.name = QStringLiteral("rand-r%1-%2").arg(randomRank_->value()).arg(i).toStdString();
    s.rank = randomRank_->value();
    s.alpha = 2.0 * randomRank_->value();
    s.seed = static_cast<uint64_t>(i);
    out.push_back(s);
  }
  return out;
}

AdapterServeParams MultiLoraTab::serveParams() const {
  AdapterServeParams p;
  p.prompt = prompt_->text();
  p.maxNewTokens = serveNewTokens_->value();
  p.maxBatch = serveMaxBatch_->value();
  p.adapters = serveAdapters();
  // Request i asks for adapter i mod n: every adapter in turn, as many times as the queue allows.
  const size_t n = p.adapters.size();
  const int requests = serveRequests_->value();
  for (int i = 0; i < requests; ++i)
    p.requestAdapters.push_back(n ? p.adapters[size_t(i) % n].name : std::string());
  // Adapters no request names would only be loaded for nothing.
  if (n > static_cast<size_t>(requests)) p.adapters.resize(static_cast<size_t>(requests));
  p.cacheCapacity = cacheCapacity_->value();
  p.strategy = servelab::parse_multi_lora_strategy(serveStrategy_->currentData().toString().toStdString());
  return p;
}

// --- Views ------------------------------------------------------------------------------------

void MultiLoraTab::showView(const QString& view) {
  views_->setCurrentIndex(view == QLatin1String("serve") ? 1 : 0);
}

QString MultiLoraTab::currentView() const {
  return views_->currentIndex() == 1 ? QStringLiteral("serve") : QStringLiteral("strategies");
}

void MultiLoraTab::setModel(const ModelSummary& model) {
  const bool changed = model.name != model_.name || model.width != model_.width ||
                       model.folder != model_.folder || model.dtype != model_.dtype ||
                       model.device != model_.device;
  model_ = model;
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
  caveat_->setText(model.caveat.isEmpty() ? QString() : tr("Built-in demo model: %1.").arg(model.caveat));
  caveat_->setVisible(!model.caveat.isEmpty());
  if (model.positions > 1) {
    context_->setMaximum(std::max(1, model.positions - 1));
    newTokens_->setMaximum(std::max(1, model.positions - 1));
    serveNewTokens_->setMaximum(std::max(1, model.positions - 1));
  }
  updateMath();
  // The list follows the model: every adapter is described again for it.
  if (changed || std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.info; }))
    describeAll();
  fillAdapterTable();
}

// --- Runs -------------------------------------------------------------------------------------

bool MultiLoraTab::run() { return currentView() == QLatin1String("serve") ? serve() : runSweep(); }

bool MultiLoraTab::runSweep() {
  QString error;
  const QVector<qint64> sizes = batchSizes(&error);
  if (sizes.isEmpty()) {
    summary_->setText(tr("<b>Cannot run:</b> %1.").arg(error.toHtmlEscaped()));
    return false;
  }
  if (strategies().isEmpty()) {
    summary_->setText(tr("<b>Cannot run:</b> choose at least one strategy."));
    return false;
  }
  if (joining() > 0) {
    summary_->setText(tr("<b>Cannot run yet:</b> adapters are still being loaded."));
    return false;
  }
  const servelab::MultiLoraParams p = params();
  if (!engine_->runMultiLora(p)) return false;
  startJob(Job::Sweep);
  hasResult_ = false;
  runParams_ = p;
  liveToy_ = p.workload == "toy";
  resultPrompt_ = liveToy_ ? tr("(the toy model's tokens)") : prompt_->text();
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
  progress_->setValue(0);
  progress_->setFormat(tr("starting · %p%"));
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

bool MultiLoraTab::serve() {
  if (joining() > 0) {
    serveSummary_->setText(tr("<b>Cannot serve yet:</b> adapters are still being loaded."));
    return false;
  }
  const AdapterServeParams p = serveParams();
  if (!engine_->serveWithAdapters(p)) return false;
  showView(QStringLiteral("serve"));
  startJob(Job::Serve);
  serving_ = p;
  hasServeResult_ = false;
  liveCache_ = servelab::AdapterCacheStats{};
  liveCache_.capacity = p.cacheCapacity;
  serveRequestsTotal_ = static_cast<qint64>(p.requestAdapters.size());
  serveRetired_ = 0;
  resetCacheChart();
  requestTable_->clearContents();
  requestTable_->setRowCount(static_cast<int>(p.requestAdapters.size()));
  for (int i = 0; i < requestTable_->rowCount(); ++i) {
    const QString adapter = QString::fromStdString(p.requestAdapters[size_t(i)]);
    setRequestRow(i, {QString::number(i), adapter.isEmpty() ? kBaseChoice : adapter, tr("waiting"), QString(),
                      QString(), QString(), QString(), QString(), QString()});
  }
  showCache(liveCache_, -1, 0);
  QStringList names;
  for (const servelab::AdapterSource& s : p.adapters) names << QString::fromStdString(s.name);
  serveAdapters_->setText(tr("%1 requests, request i with adapter i mod %2: %3%4")
                              .arg(p.requestAdapters.size())
                              .arg(p.adapters.size())
                              .arg(names.mid(0, 8).join(QStringLiteral(", ")).toHtmlEscaped(),
                                   names.size() > 8 ? QStringLiteral(", …") : QString()) +
                          (entries_.isEmpty() ? tr(" (random: the list is empty)") : QString()));
  serveProgress_->setValue(0);
  serveProgress_->setFormat(tr("starting · %p%"));
  serveSummary_->setText(tr("Serving %1 requests of %2 tokens in batches of %3, adapter cache %4, %5…")
                             .arg(p.requestAdapters.size())
                             .arg(p.maxNewTokens)
                             .arg(p.maxBatch)
                             .arg(p.cacheCapacity > 0 ? QString::number(p.cacheCapacity) : tr("unbounded"),
                                  serveStrategy_->currentText()));
  return true;
}

bool MultiLoraTab::startJob(Job job) {
  runStarted();
  job_ = job;
  lastError_.clear();
  serveRun_->setEnabled(false);
  serveStop_->setEnabled(true);
  for (QPushButton* b : {loadPeft_, makeRandom_, remove_}) b->setEnabled(false);
  return true;
}

void MultiLoraTab::finishJob(bool ok, const QString& message) {
  job_ = Job::None;
  serveRun_->setEnabled(true);
  serveStop_->setEnabled(false);
  loadPeft_->setEnabled(true);
  makeRandom_->setEnabled(true);
  remove_->setEnabled(!entries_.isEmpty());
  runEnded(ok, message);
}

void MultiLoraTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  if (job_ == Job::Serve) {
    showRunFailure(serveProgress_, serveSummary_, kind, message,
                   tr("<b>Stopped.</b> The counters and requests so far stay on screen."));
  } else {
    showRunFailure(progress_, summary_, kind, message,
                   tr("<b>Stopped.</b> The points measured so far stay on the charts."));
  }
  finishJob(false, message);
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
  const QString note = liveToy_ ? tr("the seed's toy model, %1 forward passes").arg(runParams_.toy_samples)
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
      parts << tr("%1 %2 ms").arg(s, ms(at.value(s)));
  }
  QString text = at.contains(kBase)
                     ? tr("At batch %1, step time ÷ the base model's %2 ms: %3.")
                           .arg(largest)
                           .arg(ms(at.value(kBase)), parts.join(QStringLiteral(", ")))
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
  progress_->setValue(1000);
  progress_->setFormat(tr("done"));
  finishJob(true, QString());
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
    pointsTable_->setItem(row, 0, cell(QString::number(batches[row])));
    int64_t distinct = 0;
    for (int c = 0; c < present.size(); ++c) {
      for (const servelab::MultiLoraPoint& p : r.points) {
        if (p.batch != batches[row] || QString::fromStdString(p.strategy) != present[c]) continue;
        const QString text = p.ratio_to_base > 0 && present[c] != kBase
                                 ? QStringLiteral("%1 (×%2)").arg(ms(p.ms)).arg(p.ratio_to_base, 0, 'f', 2)
                                 : ms(p.ms);
        pointsTable_->setItem(row, c + 1, cell(text));
        distinct = std::max(distinct, p.distinct_adapters);
      }
    }
    pointsTable_->setItem(row, static_cast<int>(present.size()) + 1, cell(QString::number(distinct)));
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
                               number(s.w_parameters),
                               number(s.ab_parameters),
                               loraPercent(s.ratio)};
    for (int c = 0; c < cells.size(); ++c) shapesTable_->setItem(i, c, cell(cells[c], c > 0));
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
  QString html =
      tr("<p style='margin:2px'><span style='color:%1'>prompt</span> <b>%2</b> <span style='color:%1'>· "
         "greedy, the same prompt through each adapter</span></p>")
          .arg(muted, resultPrompt_.toHtmlEscaped());
  html += QStringLiteral(
      "<table width='100%' cellspacing='0' cellpadding='4' style='border-collapse:collapse'><tr>");
  for (const servelab::AdapterOutput& o : result_.outputs)
    html += QStringLiteral("<th align='left' style='border-bottom:1px solid %1'>%2</th>")
                .arg(border, o.adapter.empty() ? tr("base model")
                                               : QString::fromStdString(o.adapter).toHtmlEscaped());
  html += QStringLiteral("</tr><tr>");
  for (const servelab::AdapterOutput& o : result_.outputs) {
    // Token boundaries as a faint shade on every other token; the ids in the tooltip.
    QString text;
    if (!o.pieces.empty()) {
      for (size_t k = 0; k < o.pieces.size(); ++k) {
        const QString piece = tokenText(o.pieces[k]).toHtmlEscaped();
        const QString id = k < o.tokens.size() ? QString::number(o.tokens[k]) : QString();
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
    html += QStringLiteral("<td valign='top' style='white-space:pre-wrap'>%1</td>").arg(text);
  }
  html += QStringLiteral("</tr></table>");
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

// --- Serving with adapters --------------------------------------------------------------------

void MultiLoraTab::setRequestRow(int row, const QStringList& cells) {
  for (int c = 0; c < cells.size(); ++c) {
    if (cells[c].isNull() && requestTable_->item(row, c)) continue;  // keep what is there
    requestTable_->setItem(row, c, cell(cells[c], c != 1 && c != 2 && c != 8));
  }
}

void MultiLoraTab::resetCacheChart() {
  cacheChart_->clearAll();
  // The adapters resident as a filled area under the counters: it often equals the adapters a step
  // runs, which a line would hide.
  cacheChart_->setSeriesStyle(cacheChart_->addSeries(tr("resident")), ChartView::SeriesStyle::Steps);
  for (const QString& s : {tr("loads"), tr("hits"), tr("evictions"), tr("adapters in step")})
    cacheChart_->addSeries(s);
}

void MultiLoraTab::onServeStarted(qint64 requests, qint64 slots) {
  serveProgress_->setFormat(tr("%1 requests, %2 slots · %p%").arg(requests).arg(slots));
}

void MultiLoraTab::onServeAdmitted(qint64 request, qint64 slot, qint64 step) {
  if (request < 0 || request >= requestTable_->rowCount()) return;
  setRequestRow(static_cast<int>(request),
                {QString(), QString(), tr("running"), QString::number(slot), QString::number(step)});
}

void MultiLoraTab::onServeRetired(const servelab::RequestResult& r) {
  if (r.id < 0 || r.id >= requestTable_->rowCount()) return;
  QString text = QString::fromStdString(r.text);
  text.replace(QLatin1Char('\n'), QStringLiteral("\u21b5"));
  setRequestRow(static_cast<int>(r.id),
                {QString::number(r.id), r.adapter.empty() ? kBaseChoice : QString::fromStdString(r.adapter),
                 QString::fromStdString(r.finish_reason), QString::number(r.slot),
                 QString::number(r.admitted_step), QString::number(r.finished_step),
                 QString::number(static_cast<qint64>(r.generated_ids.size())), ms(r.latency_ms), text});
  ++serveRetired_;
  if (serveRequestsTotal_ > 0) {
    serveProgress_->setValue(static_cast<int>(1000 * serveRetired_ / serveRequestsTotal_));
    serveProgress_->setFormat(tr("%1 of %2 requests done · %p%").arg(serveRetired_).arg(serveRequestsTotal_));
  }
}

void MultiLoraTab::showCache(const servelab::AdapterCacheStats& c, qint64 step, qint64 adaptersInStep) {
  loadsLabel_->setText(counterHtml(QString::number(c.loads), tr("loads")));
  hitsLabel_->setText(counterHtml(QString::number(c.hits), tr("hits")));
  evictionsLabel_->setText(counterHtml(QString::number(c.evictions), tr("evictions")));
  residentLabel_->setText(counterHtml(
      QStringLiteral("%1 / %2").arg(c.resident).arg(c.capacity > 0 ? QString::number(c.capacity) : tr("all")),
      c.resident_bytes > 0
          ? tr("resident (%1 MB)").arg(static_cast<double>(c.resident_bytes) / kMB, 0, 'f', 1)
          : tr("resident / capacity")));
  inStepLabel_->setText(
      counterHtml(step >= 0 ? QString::number(adaptersInStep) : QStringLiteral("–"),
                  step >= 0 ? tr("adapters in step %1").arg(step) : tr("adapters in step")));
}

void MultiLoraTab::onServeStep(const servelab::BatchStep& s) {
  liveCache_ = s.adapter_cache;
  showCache(s.adapter_cache, s.step, s.adapters_in_step);
  const double x = static_cast<double>(s.step);
  cacheChart_->append(CacheLoads, x, static_cast<double>(s.adapter_cache.loads));
  cacheChart_->append(CacheHits, x, static_cast<double>(s.adapter_cache.hits));
  cacheChart_->append(CacheEvictions, x, static_cast<double>(s.adapter_cache.evictions));
  cacheChart_->append(CacheResident, x, static_cast<double>(s.adapter_cache.resident));
  cacheChart_->append(CacheInStep, x, static_cast<double>(s.adapters_in_step));
}

void MultiLoraTab::onServeFinished(const servelab::BatchRunResult& r) {
  serveResult_ = r;
  hasServeResult_ = true;
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
  cacheChart_->setFootnote(
      tr("%1 requests, max batch %2, strategy %3")
          .arg(r.requests.size())
          .arg(serving_.maxBatch)
          .arg(QString::fromUtf8(servelab::multi_lora_strategy_name(serving_.strategy))) +
      QStringLiteral(" · ") + chartFootnote(model_));
  showCache(r.adapter_cache, r.steps.empty() ? -1 : r.steps.back().step,
            r.steps.empty() ? 0 : r.steps.back().adapters_in_step);
  for (const servelab::RequestResult& rr : r.requests) onServeRetired(rr);
  serveRetired_ = static_cast<qint64>(r.requests.size());

  const servelab::AdapterCacheStats& c = r.adapter_cache;
  double tokensPerS = r.total_ms > 0 ? 1000.0 * static_cast<double>(r.generated_tokens) / r.total_ms : 0;
  serveSummary_->setText(
      tr("<b>%1 requests served in %2 ms</b> (%3 tokens/s, %4 steps, %5 rows per forward pass on average). "
         "Adapter cache of %6: <b>%7 loads, %8 hits, %9 evictions</b>.")
          .arg(r.requests.size())
          .arg(ms(r.total_ms))
          .arg(tokensPerS, 0, 'f', 0)
          .arg(r.steps.size())
          .arg(r.average_batch, 0, 'f', 1)
          .arg(c.capacity > 0 ? QString::number(c.capacity) : tr("every adapter"))
          .arg(c.loads)
          .arg(c.hits)
          .arg(c.evictions));
  serveProgress_->setValue(1000);
  serveProgress_->setFormat(tr("done"));
  finishJob(true, QString());
}

// --- Reports, theme and settings --------------------------------------------------------------

QString MultiLoraTab::summaryText() const { return summary_->text(); }
QString MultiLoraTab::agreementText() const {
  return agreement_->isVisible() ? agreement_->text() : QString();
}
QString MultiLoraTab::outputsHtml() const { return outputs_->property("sourceHtml").toString(); }
QString MultiLoraTab::serveSummaryText() const { return serveSummary_->text(); }

void MultiLoraTab::changeEvent(QEvent* event) {
  ExperimentTab::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {  // text colours follow the theme
    updateMath();
    drawOutputs();
  }
}

QJsonObject MultiLoraTab::lastResult() const {
  QJsonObject o;
  if (hasResult_) {
    o = toQJsonObject(result_.to_json());
  } else {
    o[QStringLiteral("experiment")] = QStringLiteral("multi-lora");
  }
  if (hasServeResult_) {
    QJsonObject serve;
    const servelab::AdapterCacheStats& c = serveResult_.adapter_cache;
    serve[QStringLiteral("adapter_cache")] =
        QJsonObject{{QStringLiteral("capacity"), static_cast<qint64>(c.capacity)},
                    {QStringLiteral("loads"), static_cast<qint64>(c.loads)},
                    {QStringLiteral("hits"), static_cast<qint64>(c.hits)},
                    {QStringLiteral("evictions"), static_cast<qint64>(c.evictions)},
                    {QStringLiteral("resident"), static_cast<qint64>(c.resident)},
                    {QStringLiteral("resident_bytes"), static_cast<qint64>(c.resident_bytes)}};
    serve[QStringLiteral("strategy")] =
        QString::fromUtf8(servelab::multi_lora_strategy_name(serving_.strategy));
    serve[QStringLiteral("total_ms")] = serveResult_.total_ms;
    serve[QStringLiteral("steps")] = static_cast<qint64>(serveResult_.steps.size());
    QJsonArray requests;
    for (const servelab::RequestResult& r : serveResult_.requests)
      requests.append(QJsonObject{{QStringLiteral("id"), static_cast<qint64>(r.id)},
                                  {QStringLiteral("adapter"), QString::fromStdString(r.adapter)},
                                  {QStringLiteral("text"), QString::fromStdString(r.text)},
                                  {QStringLiteral("latency_ms"), r.latency_ms}});
    serve[QStringLiteral("requests")] = requests;
    o[QStringLiteral("serve")] = serve;
  }
  if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  return o;
}

void MultiLoraTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  const auto spin = [&s](QSpinBox* box, const char* key) {
    box->setValue(s.value(QLatin1String(key), box->value()).toInt());
  };
  setWorkload(s.value(QStringLiteral("workload"), workload_->currentData()).toString());
  setAssignment(s.value(QStringLiteral("assignment"), assignment_->currentData()).toString());
  spin(shared_, "sharedAdapters");
  sizes_->setText(settingText(s, "batchSizes", sizes_->text()));
  if (s.contains(QStringLiteral("strategies")))
    setStrategies(s.value(QStringLiteral("strategies")).toStringList());
  spin(randomCount_, "randomAdapters");
  spin(randomRank_, "randomRank");
  spin(context_, "context");
  spin(decodeSteps_, "decodeSteps");
  spin(repeats_, "repeats");
  spin(toySamples_, "toySamples");
  setPrompt(settingText(s, "prompt", prompt_->text()));
  spin(newTokens_, "newTokens");
  spin(serveRequests_, "serveRequests");
  spin(serveMaxBatch_, "serveMaxBatch");
  spin(serveNewTokens_, "serveNewTokens");
  spin(cacheCapacity_, "cacheCapacity");
  setServeStrategy(s.value(QStringLiteral("serveStrategy"), serveStrategy_->currentData()).toString());
  setMathModule(s.value(QStringLiteral("mathModule"), mathModule_->currentData()).toString());
  spin(mathRank_, "mathRank");
  mathAlpha_->setValue(s.value(QStringLiteral("mathAlpha"), mathAlpha_->value()).toDouble());
  // The adapter list: its sources (described again once a model is loaded).
  const int n = s.beginReadArray(QStringLiteral("adapters"));
  if (n > 0) entries_.clear();
  for (int i = 0; i < n; ++i) {
    s.setArrayIndex(i);
    servelab::AdapterSource a;
    a.name = s.value(QStringLiteral("name")).toString().toStdString();
    a.peft_dir = s.value(QStringLiteral("peftDir")).toString().toStdString();
    a.rank = s.value(QStringLiteral("rank"), 8).toLongLong();
    a.alpha = s.value(QStringLiteral("alpha"), 16.0).toDouble();
    a.seed = s.value(QStringLiteral("seed"), i + 1).toULongLong();
    if (s.contains(QStringLiteral("modules")))
      for (const QString& m : s.value(QStringLiteral("modules")).toStringList())
        a.modules.push_back(m.toStdString());
    if (!a.peft_dir.empty()) {
      a.rank = 0;
      a.alpha = 0;
    }
    if (a.name.empty()) a.name = QStringLiteral("adapter-%1").arg(i + 1).toStdString();
    entries_.append(Entry{nextEntryId_++, a, std::nullopt, QString()});
  }
  s.endArray();
  if (s.contains(QStringLiteral("rowAdapters")))
    setRowAdapters(s.value(QStringLiteral("rowAdapters")).toStringList());
  showView(s.value(QStringLiteral("view"), currentView()).toString());
  s.endGroup();
  fillAdapterTable();
  rebuildRowCombos();
  updateComposer();
  updateMath();
}

void MultiLoraTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("workload"), workload_->currentData().toString());
  s.setValue(QStringLiteral("assignment"), assignment_->currentData().toString());
  s.setValue(QStringLiteral("sharedAdapters"), shared_->value());
  s.setValue(QStringLiteral("rowAdapters"), rowAdapters());
  s.setValue(QStringLiteral("batchSizes"), sizes_->text());
  s.setValue(QStringLiteral("strategies"), strategies());
  s.setValue(QStringLiteral("randomAdapters"), randomCount_->value());
  s.setValue(QStringLiteral("randomRank"), randomRank_->value());
  s.setValue(QStringLiteral("context"), context_->value());
  s.setValue(QStringLiteral("decodeSteps"), decodeSteps_->value());
  s.setValue(QStringLiteral("repeats"), repeats_->value());
  s.setValue(QStringLiteral("toySamples"), toySamples_->value());
  s.setValue(QStringLiteral("prompt"), prompt_->text());
  s.setValue(QStringLiteral("newTokens"), newTokens_->value());
  s.setValue(QStringLiteral("serveRequests"), serveRequests_->value());
  s.setValue(QStringLiteral("serveMaxBatch"), serveMaxBatch_->value());
  s.setValue(QStringLiteral("serveNewTokens"), serveNewTokens_->value());
  s.setValue(QStringLiteral("cacheCapacity"), cacheCapacity_->value());
  s.setValue(QStringLiteral("serveStrategy"), serveStrategy_->currentData().toString());
  s.setValue(QStringLiteral("mathModule"), mathModule_->currentData().toString());
  s.setValue(QStringLiteral("mathRank"), mathRank_->value());
  s.setValue(QStringLiteral("mathAlpha"), mathAlpha_->value());
  s.setValue(QStringLiteral("view"), currentView());
  s.remove(QStringLiteral("adapters"));
  s.beginWriteArray(QStringLiteral("adapters"), static_cast<int>(entries_.size()));
  for (int i = 0; i < entries_.size(); ++i) {
    s.setArrayIndex(i);
    const servelab::AdapterSource& a = entries_[i].source;
    s.setValue(QStringLiteral("name"), QString::fromStdString(a.name));
    if (!a.peft_dir.empty()) {
      s.setValue(QStringLiteral("peftDir"), QString::fromStdString(a.peft_dir));
      continue;
    }
    s.setValue(QStringLiteral("rank"), static_cast<qint64>(a.rank));
    s.setValue(QStringLiteral("alpha"), a.alpha);
    s.setValue(QStringLiteral("seed"), static_cast<quint64>(a.seed));
    QStringList modules;
    for (const std::string& m : a.modules) modules << QString::fromStdString(m);
    s.setValue(QStringLiteral("modules"), modules);
  }
  s.endArray();
  s.endGroup();
}

}  // namespace servelab::ui
