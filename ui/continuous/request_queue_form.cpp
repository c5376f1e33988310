#include "continuous/request_queue_form.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <algorithm>
#include <initializer_list>
#include <limits>

#include "form_widgets.h"

namespace servelab::ui {

RequestQueueForm::RequestQueueForm(QWidget* parent) : QWidget(parent) {
  prompt_ = new QLineEdit(QStringLiteral("The quick brown fox jumped over the"), this);
  prompt_->setObjectName(QStringLiteral("continuousPrompt"));
  prompt_->setCursorPosition(0);
  requests_ = makeSpin(this, QStringLiteral("continuousRequests"), 1, 1024, 32);
  maxBatch_ = makeSpin(this, QStringLiteral("continuousMaxBatch"), 1, 256, 8);
  maxBatch_->setToolTip(tr("Requests that run at once: the batch places (slots; vLLM's max_num_seqs)"));
  budget_ = makeSpin(this, QStringLiteral("continuousTokenBudget"), 0, 8192, 0, tr(" tokens"));
  budget_->setSpecialValueText(tr("off (whole prompts)"));
  budget_->setToolTip(
      tr("Chunked prefill (vLLM's max_num_batched_tokens): the tokens one scheduler step computes. Decodes "
         "go first, prompts fill the rest in chunks. Off: every prompt in one step (the course's scheduler); "
         "the course's merge/filter always runs so"));
  longEvery_ = makeSpin(this, QStringLiteral("continuousLongEvery"), 1, 1000, 8);
  longEvery_->setToolTip(tr("Request 0 and every n-th after it is a long one"));
  longTokens_ = makeSpin(this, QStringLiteral("continuousLongTokens"), 1, 1000, 100, tr(" tokens"));
  shortTokens_ = makeSpin(this, QStringLiteral("continuousShortTokens"), 1, 1000, 10, tr(" tokens"));
  randomPrompt_ = new QCheckBox(tr("Random prompt length"), this);
  randomPrompt_->setObjectName(QStringLiteral("continuousRandomPrompt"));
  randomPrompt_->setToolTip(
      tr("Each request's prompt is the prompt's tokens repeated to a random length "
         "(seeded)"));
  promptMin_ = makeSpin(this, QStringLiteral("continuousPromptMin"), 1, 1000, 4);
  promptMax_ = makeSpin(this, QStringLiteral("continuousPromptMax"), 1, 1000, 32, tr(" tokens"));
  connect(randomPrompt_, &QCheckBox::toggled, this, &RequestQueueForm::updatePromptLengthEnabled);
  connect(promptMin_, &QSpinBox::valueChanged, this, [this](int v) {
    if (promptMax_->value() < v) promptMax_->setValue(v);
  });
  connect(promptMax_, &QSpinBox::valueChanged, this, [this](int v) {
    if (promptMin_->value() > v) promptMin_->setValue(v);
  });
  arrivalRate_ = new QDoubleSpinBox(this);
  arrivalRate_->setObjectName(QStringLiteral("continuousArrivalRate"));
  arrivalRate_->setRange(0, 10000);
  arrivalRate_->setDecimals(1);
  arrivalRate_->setSingleStep(5);
  arrivalRate_->setSuffix(tr(" requests/s"));
  arrivalRate_->setSpecialValueText(tr("all at once"));
  arrivalRate_->setToolTip(
      tr("Poisson arrivals at this rate (seeded); 0: every request is waiting at the "
         "start"));
  seed_ = makeSpin(this, QStringLiteral("continuousSeed"), 0, std::numeric_limits<int>::max(), 42);
  naive_ = new QCheckBox(tr("Also the course's merge/filter"), this);
  naive_->setObjectName(QStringLiteral("continuousNaive"));
  naive_->setToolTip(
      tr("Also serve the queue with the course's continuous batching, which re-pads and copies "
         "the whole KV cache whenever a request joins or leaves"));
  paged_ = new QCheckBox(tr("Also paged KV"), this);
  paged_->setObjectName(QStringLiteral("continuousPaged"));
  paged_->setToolTip(
      tr("Also serve the queue with vLLM's paged KV: fixed-size blocks handed out as a request "
         "grows; when they run out the latest admitted request is preempted and recomputed"));
  blockSize_ = makeSpin(this, QStringLiteral("continuousKvBlockSize"), 1, 1024, 16, tr(" tokens"));
  blockSize_->setToolTip(tr("Token positions per KV block"));
  budgetMb_ = new QDoubleSpinBox(this);
  budgetMb_->setObjectName(QStringLiteral("continuousKvBudget"));
  budgetMb_->setRange(0, 100000);
  budgetMb_->setDecimals(2);
  budgetMb_->setSingleStep(0.5);
  budgetMb_->setSuffix(tr(" MB"));
  budgetMb_->setSpecialValueText(tr("as slot KV"));
  budgetMb_->setToolTip(
      tr("Memory of the block pool (MB = 10^6 bytes); 0: as much as slot KV reserves for max batch "
         "requests of the longest"));
  prefixCaching_ = new QCheckBox(tr("Prefix caching"), this);
  prefixCaching_->setObjectName(QStringLiteral("continuousPrefixCaching"));
  prefixCaching_->setChecked(true);
  prefixCaching_->setToolTip(tr("Requests whose prompts start alike share the full blocks of that prefix"));
  slotsInBudget_ = new QCheckBox(tr("Slot KV in the same budget"), this);
  slotsInBudget_->setObjectName(QStringLiteral("continuousSlotsInBudget"));
  slotsInBudget_->setToolTip(
      tr("The other methods get only the slots the KV budget holds, each as long as the longest "
         "request: how many requests fit in the same memory"));
  uncachedToo_ = new QCheckBox(tr("Also paged without prefix caching"), this);
  uncachedToo_->setObjectName(QStringLiteral("continuousPagedUncachedToo"));
  uncachedToo_->setToolTip(tr("Paged KV runs twice on the same pool, without and with prefix caching"));
  connect(paged_, &QCheckBox::toggled, this, &RequestQueueForm::updatePagedEnabled);
  connect(prefixCaching_, &QCheckBox::toggled, this, &RequestQueueForm::updatePagedEnabled);
  connect(budgetMb_, &QDoubleSpinBox::valueChanged, this, &RequestQueueForm::updatePagedEnabled);

  auto* lengthRow = new QHBoxLayout;
  lengthRow->addWidget(promptMin_);
  lengthRow->addWidget(new QLabel(QStringLiteral("–"), this));
  lengthRow->addWidget(promptMax_);
  auto* form = new QFormLayout(this);
  form->setContentsMargins(0, 0, 0, 0);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  form->addRow(tr("Prompt"), prompt_);
  form->addRow(tr("Requests"), requests_);
  form->addRow(tr("Max batch"), maxBatch_);
  form->addRow(tr("Token budget"), budget_);
  form->addRow(tr("Every n-th is long"), longEvery_);
  form->addRow(tr("Long requests"), longTokens_);
  form->addRow(tr("Short requests"), shortTokens_);
  form->addRow(randomPrompt_);
  form->addRow(tr("Prompt length"), lengthRow);
  form->addRow(tr("Arrivals"), arrivalRate_);
  form->addRow(tr("Seed"), seed_);
  form->addRow(naive_);
  form->addRow(paged_);
  form->addRow(tr("KV block size"), blockSize_);
  form->addRow(tr("KV budget"), budgetMb_);
  form->addRow(slotsInBudget_);
  form->addRow(prefixCaching_);
  form->addRow(uncachedToo_);
  updatePromptLengthEnabled();
  updatePagedEnabled();
}

void RequestQueueForm::updatePagedEnabled() {
  for (QWidget* w : std::initializer_list<QWidget*>{blockSize_, budgetMb_, prefixCaching_})
    w->setEnabled(paged_->isChecked());
  slotsInBudget_->setEnabled(paged_->isChecked() && budgetMb_->value() > 0);
  uncachedToo_->setEnabled(paged_->isChecked() && prefixCaching_->isChecked());
}

void RequestQueueForm::updatePromptLengthEnabled() {
  promptMin_->setEnabled(randomPrompt_->isChecked());
  promptMax_->setEnabled(randomPrompt_->isChecked());
}

void RequestQueueForm::setPrompt(const QString& prompt) { prompt_->setText(prompt); }
void RequestQueueForm::setRequests(int n) { requests_->setValue(n); }
void RequestQueueForm::setMaxBatch(int n) { maxBatch_->setValue(n); }
void RequestQueueForm::setTokenBudget(int tokens) { budget_->setValue(tokens); }
void RequestQueueForm::setLongEvery(int n) { longEvery_->setValue(n); }
void RequestQueueForm::setLongTokens(int n) { longTokens_->setValue(n); }
void RequestQueueForm::setShortTokens(int n) { shortTokens_->setValue(n); }
void RequestQueueForm::setPromptTokens(int min, int max) {
  randomPrompt_->setChecked(max > 0);
  if (max > 0) {
    promptMax_->setValue(max);
    promptMin_->setValue(std::max(1, min));
  }
}
void RequestQueueForm::setArrivalRate(double perSecond) { arrivalRate_->setValue(perSecond); }
void RequestQueueForm::setSeed(int seed) { seed_->setValue(seed); }
void RequestQueueForm::setNaive(bool on) { naive_->setChecked(on); }
void RequestQueueForm::setPaged(bool on, int blockSize, double budgetMb, bool prefixCaching) {
  paged_->setChecked(on);
  blockSize_->setValue(blockSize);
  budgetMb_->setValue(budgetMb);
  prefixCaching_->setChecked(prefixCaching);
}

void RequestQueueForm::setSlotsInBudget(bool on) { slotsInBudget_->setChecked(on); }
void RequestQueueForm::setPagedUncachedToo(bool on) { uncachedToo_->setChecked(on); }

servelab::SyncVsContinuousParams RequestQueueForm::params() const {
  servelab::SyncVsContinuousParams p;
  p.prompt = prompt_->text().toStdString();
  p.requests = requests_->value();
  p.max_batch = maxBatch_->value();
  p.max_num_batched_tokens = budget_->value();
  p.long_every = longEvery_->value();
  p.long_tokens = longTokens_->value();
  p.short_tokens = shortTokens_->value();
  p.prompt_tokens_min = randomPrompt_->isChecked() ? promptMin_->value() : 0;
  p.prompt_tokens_max = randomPrompt_->isChecked() ? promptMax_->value() : 0;
  p.arrival_rate = arrivalRate_->value();
  p.seed = static_cast<std::uint64_t>(seed_->value());
  p.naive = naive_->isChecked();
  p.paged = paged_->isChecked();
  p.kv_block_size = blockSize_->value();
  p.kv_budget_mb = budgetMb_->value();
  p.prefix_caching = prefixCaching_->isChecked();
  p.slots_in_budget = slotsInBudget_->isChecked();
  p.paged_uncached_too = uncachedToo_->isChecked();
  return p;
}

void RequestQueueForm::setModel(const ModelSummary& model) {
  if (model.positions > 1)
    for (QSpinBox* s : {longTokens_, shortTokens_, promptMin_, promptMax_})
      s->setMaximum(model.positions - 1);
  if (model.positions > 0) budget_->setMaximum(model.positions);
}

void RequestQueueForm::loadSettings(QSettings& s) {
  if (const auto prompt = settingString(s, QStringLiteral("prompt"))) prompt_->setText(*prompt);
  prompt_->setCursorPosition(0);
  const auto spin = [&s](QSpinBox* box, const char* key) { loadSpin(s, QLatin1String(key), box); };
  spin(requests_, "requests");
  spin(maxBatch_, "maxBatch");
  spin(budget_, "maxNumBatchedTokens");
  spin(longEvery_, "longEvery");
  spin(longTokens_, "longTokens");
  spin(shortTokens_, "shortTokens");
  spin(promptMin_, "promptTokensMin");
  spin(promptMax_, "promptTokensMax");
  spin(seed_, "seed");
  loadCheck(s, QStringLiteral("randomPromptLength"), randomPrompt_);
  loadSpin(s, QStringLiteral("arrivalRate"), arrivalRate_);
  loadCheck(s, QStringLiteral("naive"), naive_);
  loadCheck(s, QStringLiteral("paged"), paged_);
  spin(blockSize_, "kvBlockSize");
  loadSpin(s, QStringLiteral("kvBudgetMb"), budgetMb_);
  loadCheck(s, QStringLiteral("prefixCaching"), prefixCaching_);
  loadCheck(s, QStringLiteral("slotsInBudget"), slotsInBudget_);
  loadCheck(s, QStringLiteral("pagedUncachedToo"), uncachedToo_);
}

void RequestQueueForm::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("prompt"), prompt_->text());
  s.setValue(QStringLiteral("requests"), requests_->value());
  s.setValue(QStringLiteral("maxBatch"), maxBatch_->value());
  s.setValue(QStringLiteral("maxNumBatchedTokens"), budget_->value());
  s.setValue(QStringLiteral("longEvery"), longEvery_->value());
  s.setValue(QStringLiteral("longTokens"), longTokens_->value());
  s.setValue(QStringLiteral("shortTokens"), shortTokens_->value());
  s.setValue(QStringLiteral("randomPromptLength"), randomPrompt_->isChecked());
  s.setValue(QStringLiteral("promptTokensMin"), promptMin_->value());
  s.setValue(QStringLiteral("promptTokensMax"), promptMax_->value());
  s.setValue(QStringLiteral("arrivalRate"), arrivalRate_->value());
  s.setValue(QStringLiteral("seed"), seed_->value());
  s.setValue(QStringLiteral("naive"), naive_->isChecked());
  s.setValue(QStringLiteral("paged"), paged_->isChecked());
  s.setValue(QStringLiteral("kvBlockSize"), blockSize_->value());
  s.setValue(QStringLiteral("kvBudgetMb"), budgetMb_->value());
  s.setValue(QStringLiteral("prefixCaching"), prefixCaching_->isChecked());
  s.setValue(QStringLiteral("slotsInBudget"), slotsInBudget_->isChecked());
  s.setValue(QStringLiteral("pagedUncachedToo"), uncachedToo_->isChecked());
}

}  // namespace servelab::ui
