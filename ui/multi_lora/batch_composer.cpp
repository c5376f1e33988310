#include "multi_lora/batch_composer.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QRegularExpressionValidator>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "form_widgets.h"
#include "lora/builtin_adapters.h"
#include "multi_lora/adapter_list.h"
#include "text_format.h"

namespace servelab::ui {

namespace {
constexpr qint64 kMaxBatch = 4096;
const QString kBaseChoice = QStringLiteral("(base)");
}  // namespace

BatchComposer::BatchComposer(const AdapterList* adapters, QWidget* parent)
    : QWidget(parent), adapters_(adapters) {
  workload_ = new QComboBox(this);
  workload_->setObjectName(QStringLiteral("loraWorkload"));
  workload_->addItem(tr("the loaded model"), QStringLiteral("gpt2"));
  workload_->addItem(tr("the course's toy model"), QStringLiteral("toy"));
  workload_->setToolTip(
      tr("GPT-2: one decode step of the loaded model with an adapter per row, the base model beside it. "
         "Toy: the course's model (embedding 10, one 10×10 linear with LoRA, lm_head 10×10)."));
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
    const QStringList names = adapters_->names();
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
  for (QSpinBox* s : {randomCount_, randomRank_})
    connect(s, &QSpinBox::valueChanged, this,
            [this] { Q_EMIT fallbackChanged(randomCount_->value(), randomRank_->value()); });

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
  loop_->setToolTip(tr("The course's loop: one row at a time, y[i] += x[i]·A_i·B_i"));
  gathered_ = new QCheckBox(tr("gathered"), this);
  gathered_->setObjectName(QStringLiteral("loraGathered"));
  gathered_->setToolTip(
      tr("The course's gathered matmul: every row's A and B picked from one stack, one batched product"));
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

  auto* form = new QFormLayout(this);
  form->setContentsMargins(0, 0, 0, 0);
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

  connect(workload_, &QComboBox::currentIndexChanged, this, [this] { updateVisibility(); });
  connect(assignment_, &QComboBox::currentIndexChanged, this, [this] { updateVisibility(); });
  updateVisibility();
}

void BatchComposer::updateVisibility() {
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

void BatchComposer::addRow(const QString& adapter) {
  const int row = rowsTable_->rowCount();
  rowsTable_->insertRow(row);
  rowsTable_->setVerticalHeaderItem(row, new QTableWidgetItem(tr("row %1").arg(row)));
  auto* combo = new QComboBox(rowsTable_);
  combo->addItem(kBaseChoice, QString());
  for (const QString& n : adapters_->names()) combo->addItem(n, n);
  const int i = combo->findData(adapter);
  combo->setCurrentIndex(std::max(0, i));
  rowsTable_->setCellWidget(row, 0, combo);
}

void BatchComposer::rebuildRowCombos() {
  const QStringList chosen = rowAdapters();
  const QStringList names = adapters_->names();
  for (int r = 0; r < rowsTable_->rowCount(); ++r) {
    auto* combo = qobject_cast<QComboBox*>(rowsTable_->cellWidget(r, 0));
    if (!combo) continue;
    combo->clear();
    combo->addItem(kBaseChoice, QString());
    for (const QString& n : names) combo->addItem(n, n);
    combo->setCurrentIndex(std::max(0, combo->findData(chosen.value(r))));
  }
}

QStringList BatchComposer::rowAdapters() const {
  QStringList out;
  for (int r = 0; r < rowsTable_->rowCount(); ++r) {
    auto* combo = qobject_cast<QComboBox*>(rowsTable_->cellWidget(r, 0));
    out << (combo ? combo->currentData().toString() : QString());
  }
  return out;
}

void BatchComposer::setRowAdapters(const QStringList& names) {
  while (rowsTable_->rowCount() > 0) rowsTable_->removeRow(0);
  for (const QString& n : names) addRow(n == kBaseChoice ? QString() : n);
  if (names.isEmpty()) addRow(QString());
}

void BatchComposer::setWorkload(const QString& workload) {
  const int i = workload_->findData(workload);
  if (i >= 0) workload_->setCurrentIndex(i);
}
void BatchComposer::setAssignment(const QString& assignment) {
  const int i = assignment_->findData(assignment);
  if (i >= 0) assignment_->setCurrentIndex(i);
}
void BatchComposer::setSharedAdapters(int n) { shared_->setValue(n); }
void BatchComposer::setBatchSizes(const QString& sizes) { sizes_->setText(sizes); }
void BatchComposer::setStrategies(const QStringList& strategies) {
  QStringList names;
  for (const QString& s : strategies)
    for (const QString& part : s.split(QLatin1Char(','), Qt::SkipEmptyParts)) names << part.trimmed();
  loop_->setChecked(names.contains(QStringLiteral("loop")));
  gathered_->setChecked(names.contains(QStringLiteral("gathered")));
  segmented_->setChecked(names.contains(QStringLiteral("segmented")));
}
QStringList BatchComposer::strategies() const {
  QStringList s;
  if (loop_->isChecked()) s << QStringLiteral("loop");
  if (gathered_->isChecked()) s << QStringLiteral("gathered");
  if (segmented_->isChecked()) s << QStringLiteral("segmented");
  return s;
}
void BatchComposer::setRandomAdapters(int count, int rank) {
  randomCount_->setValue(count);
  randomRank_->setValue(rank);
}
int BatchComposer::randomCount() const { return randomCount_->value(); }
int BatchComposer::randomRank() const { return randomRank_->value(); }
void BatchComposer::setContext(int tokens) { context_->setValue(tokens); }
void BatchComposer::setDecodeSteps(int steps) { decodeSteps_->setValue(steps); }
void BatchComposer::setRepeats(int repeats) { repeats_->setValue(repeats); }
void BatchComposer::setToySamples(int samples) { toySamples_->setValue(samples); }
void BatchComposer::setPrompt(const QString& prompt) {
  prompt_->setText(prompt);
  prompt_->setCursorPosition(0);
}
QString BatchComposer::prompt() const { return prompt_->text(); }
void BatchComposer::setNewTokens(int n) { newTokens_->setValue(n); }

QVector<qint64> BatchComposer::batchSizes(QString* error) const {
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

servelab::MultiLoraParams BatchComposer::params() const {
  servelab::MultiLoraParams p;
  p.workload = workload_->currentData().toString().toStdString();
  p.strategies.clear();
  for (const QString& s : strategies()) p.strategies.push_back(s.toStdString());
  const QVector<qint64> sizes = batchSizes();
  p.batch_sizes.assign(sizes.begin(), sizes.end());
  p.toy_samples = toySamples_->value();
  for (const servelab::AdapterSource& s : adapters_->sources()) p.adapters.push_back(s);
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
  // The built-in adapters continue the course's example in their own prompt format, with room for
  // their answers (they stop at end of text).
  for (const servelab::AdapterSource& s : p.adapters)
    if (const servelab::BuiltinAdapter* b = servelab::builtin_adapter_of(s)) {
      p.adapter_prompts[s.name] = servelab::builtin_adapter_prompt(*b, b->example_input);
      p.new_tokens = std::max<int64_t>(p.new_tokens, b->max_new_tokens);
    }
  return p;
}

void BatchComposer::setModel(const ModelSummary& model) {
  // The engine's model, named: "gpt2" is only the workload's key from before Llama.
  const int loaded = workload_->findData(QStringLiteral("gpt2"));
  if (loaded >= 0 && model.valid())
    workload_->setItemText(loaded, tr("the loaded model (%1)").arg(model.name));
  if (model.positions > 1) {
    context_->setMaximum(std::max(1, model.positions - 1));
    newTokens_->setMaximum(std::max(1, model.positions - 1));
  }
}

void BatchComposer::loadSettings(QSettings& s) {
  const auto spin = [&s](QSpinBox* box, const char* key) { loadSpin(s, QLatin1String(key), box); };
  if (const auto workload = settingChoice(s, QStringLiteral("workload"), comboData(workload_)))
    setWorkload(*workload);
  if (const auto assignment = settingChoice(s, QStringLiteral("assignment"), comboData(assignment_)))
    setAssignment(*assignment);
  spin(shared_, "sharedAdapters");
  loadParsedText(s, QStringLiteral("batchSizes"), sizes_, QStringLiteral("a list of batch sizes"),
                 [this](QString* error) { return !batchSizes(error).isEmpty(); });
  if (const auto strategies = settingChoiceList(
          s, QStringLiteral("strategies"),
          {QStringLiteral("loop"), QStringLiteral("gathered"), QStringLiteral("segmented")}))
    setStrategies(*strategies);
  spin(randomCount_, "randomAdapters");
  spin(randomRank_, "randomRank");
  spin(context_, "context");
  spin(decodeSteps_, "decodeSteps");
  spin(repeats_, "repeats");
  spin(toySamples_, "toySamples");
  if (const auto prompt = settingString(s, QStringLiteral("prompt"))) setPrompt(*prompt);
  spin(newTokens_, "newTokens");
  if (s.contains(QStringLiteral("rowAdapters")))
    setRowAdapters(s.value(QStringLiteral("rowAdapters")).toStringList());
  rebuildRowCombos();
  updateVisibility();
}

void BatchComposer::saveSettings(QSettings& s) const {
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
}

}  // namespace servelab::ui
