#include "generate_tab.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTextCursor>
#include <QTimer>
#include <QVBoxLayout>

#include "chart_view.h"
#include "engine_controller.h"
#include "engine_session.h"
#include "form_widgets.h"
#include "generate/chat_view.h"

namespace servelab::ui {

namespace {

QJsonArray toJson(const QVector<int>& v) {
  QJsonArray a;
  for (int x : v) a.append(x);
  return a;
}
QJsonArray toJson(const QVector<double>& v) {
  QJsonArray a;
  for (double x : v) a.append(x);
  return a;
}

}  // namespace

GenerateTab::GenerateTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  prompt_ = new QPlainTextEdit(QStringLiteral("The quick brown fox jumped over the"), this);
  prompt_->setObjectName(QStringLiteral("generatePrompt"));
  prompt_->setPlaceholderText(tr("Type a prompt…"));
  prompt_->setMaximumHeight(110);

  maxTokens_ = new QSpinBox(this);
  maxTokens_->setObjectName(QStringLiteral("generateMaxTokens"));
  maxTokens_->setRange(1, 1024);
  maxTokens_->setValue(40);
  mode_ = new QComboBox(this);
  mode_->setObjectName(QStringLiteral("generateMode"));
  mode_->addItems({tr("Greedy"), tr("Sampling")});
  temperature_ = new QDoubleSpinBox(this);
  temperature_->setRange(0.05, 5.0);
  temperature_->setSingleStep(0.1);
  temperature_->setValue(0.8);
  topK_ = new QSpinBox(this);
  topK_->setRange(0, 100000);
  topK_->setValue(50);
  topK_->setSpecialValueText(tr("off"));
  topP_ = new QDoubleSpinBox(this);
  topP_->setRange(0.01, 1.0);
  topP_->setSingleStep(0.05);
  topP_->setValue(0.95);
  seed_ = new QSpinBox(this);
  seed_->setRange(0, 2147483647);
  seed_->setValue(42);
  stopAtEos_ = new QCheckBox(tr("Stop at the end-of-text token"), this);
  stopAtEos_->setChecked(true);
  chat_ = new QCheckBox(tr("Chat: the prompt is a user turn"), this);
  chat_->setObjectName(QStringLiteral("generateChat"));
  chat_->setToolTip(tr("Format the prompt with the model's own chat template before generating"));
  chat_->setChecked(true);  // a chat model answers a user turn best; GPT-2 disables the box

  connect(mode_, &QComboBox::currentIndexChanged, this, &GenerateTab::updateSamplingEnabled);

  singleMode_ = new QRadioButton(tr("Single prompt"), this);
  singleMode_->setObjectName(QStringLiteral("generateSingleMode"));
  singleMode_->setChecked(true);
  chatMode_ = new QRadioButton(tr("Chat"), this);
  chatMode_->setObjectName(QStringLiteral("generateChatMode"));
  connect(chatMode_, &QRadioButton::toggled, this, &GenerateTab::updateMode);
  chatView_ = new ChatView(this);
  chatView_->setObjectName(QStringLiteral("generateChatView"));
  connect(chatView_, &ChatView::sendRequested, this, [this] { run(); });
  connect(chatView_, &ChatView::regenerateRequested, this, [this] { regenerate(); });
  connect(chatView_, &ChatView::tokenClicked, this, &GenerateTab::inspectStep);
  // Every finished turn (and New chat, a stopped or failed one, an edited system prompt) is saved
  // at once, not only when the window closes.
  connect(chatView_, &ChatView::conversationChanged, this, &ExperimentTab::saveRequested);

  auto* form = new QFormLayout;
  form->addRow(tr("Max new tokens"), maxTokens_);
  form->addRow(tr("Decoding"), mode_);
  form->addRow(tr("Temperature"), temperature_);
  form->addRow(tr("Top-k"), topK_);
  form->addRow(tr("Top-p"), topP_);
  form->addRow(tr("Seed"), seed_);
  form->addRow(QString(), stopAtEos_);
  form->addRow(QString(), chat_);
  auto* modeRow = new QHBoxLayout;
  modeRow->addWidget(new QLabel(tr("Mode"), this));
  modeRow->addWidget(singleMode_);
  modeRow->addWidget(chatMode_);
  modeRow->addStretch();
  QHBoxLayout* buttons = makeRunButtons(QStringLiteral("generate"), tr("Generate (Ctrl+Return)"));
  auto* settingsBox = new QGroupBox(tr("Settings"), this);
  auto* sv = new QVBoxLayout(settingsBox);
  sv->addLayout(form);
  sv->addLayout(buttons);
  sv->addStretch();

  caveat_ = new QLabel(this);
  caveat_->setObjectName(QStringLiteral("generateCaveat"));
  caveat_->setStyleSheet(QStringLiteral("QLabel { color: #b35900; font-weight: bold; }"));
  caveat_->setWordWrap(true);
  output_ = new QTextBrowser(this);
  output_->setObjectName(QStringLiteral("generateOutput"));
  output_->setOpenLinks(false);
  output_->setPlaceholderText(
      tr("Generated tokens appear here as they are made. Click a token to inspect it."));
  QFont mono = output_->font();
  mono.setPointSizeF(mono.pointSizeF() * 1.15);
  output_->setFont(mono);
  connect(output_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == QLatin1String("tok")) inspectStep(url.path().toLongLong());
  });
  metrics_ =
      new QLabel(tr("Time to first token, decode speed and total time appear here after a run."), this);
  metrics_->setObjectName(QStringLiteral("generateMetrics"));
  metrics_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  metrics_->setWordWrap(true);

  tokenTable_ = new QTableWidget(0, 5, this);
  tokenTable_->setObjectName(QStringLiteral("generateTokens"));
  tokenTable_->setHorizontalHeaderLabels({tr("step"), tr("id"), tr("token"), tr("ms"), tr("p")});
  tokenTable_->verticalHeader()->setVisible(false);
  tokenTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  tokenTable_->setSelectionBehavior(QAbstractItemView::SelectRows);
  tokenTable_->setSelectionMode(QAbstractItemView::SingleSelection);
  tokenTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  tokenTable_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::Stretch);
  tokenTable_->verticalHeader()->setDefaultSectionSize(tokenTable_->fontMetrics().height() + 6);
  connect(tokenTable_, &QTableWidget::cellClicked, this, [this](int row, int) { inspectStep(row); });

  topChart_ = new ChartView(this);
  topChart_->setObjectName(QStringLiteral("generateTopChart"));
  topChart_->setTitle(tr("Top-10 next tokens"));
  topChart_->setAxisLabels(tr("candidate token"), tr("probability"));
  latencyChart_ = new ChartView(this);
  latencyChart_->setObjectName(QStringLiteral("generateLatencyChart"));
  latencyChart_->setTitle(tr("Per-token latency"));
  latencyChart_->setAxisLabels(tr("generated token"), tr("step time (ms)"));
  latencyChart_->addSeries(tr("step time"));

  auto* outputBox = new QWidget(this);
  auto* ov = new QVBoxLayout(outputBox);
  ov->setContentsMargins(0, 0, 0, 0);
  ov->addWidget(caveat_);
  outputPages_ = new QStackedWidget(this);
  outputPages_->addWidget(output_);
  outputPages_->addWidget(chatView_);
  ov->addWidget(outputPages_, 1);
  ov->addWidget(metrics_);

  auto* left = new QWidget(this);
  auto* lv = new QVBoxLayout(left);
  lv->setContentsMargins(0, 0, 0, 0);
  lv->addLayout(modeRow);
  promptBox_ = new QWidget(this);
  auto* pv = new QVBoxLayout(promptBox_);
  pv->setContentsMargins(0, 0, 0, 0);
  pv->addWidget(new QLabel(tr("Prompt"), this));
  pv->addWidget(prompt_);
  lv->addWidget(promptBox_);
  lv->addWidget(settingsBox);
  lv->addWidget(tokenTable_, 1);

  auto* charts = new QSplitter(Qt::Horizontal, this);
  charts->addWidget(topChart_);
  charts->addWidget(latencyChart_);
  right_ = new QSplitter(Qt::Vertical, this);
  right_->addWidget(outputBox);
  right_->addWidget(charts);
  right_->setStretchFactor(0, 2);
  right_->setStretchFactor(1, 3);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(left);
  split->addWidget(right_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 3);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(split);

  flushTimer_ = new QTimer(this);
  flushTimer_->setSingleShot(true);
  flushTimer_->setInterval(100);
  connect(flushTimer_, &QTimer::timeout, this, &GenerateTab::flushTokens);
  updateSamplingEnabled();
  updateMode();
}

void GenerateTab::updateMode() {
  const bool chat = chatMode();
  promptBox_->setVisible(!chat);
  chat_->setVisible(!chat);  // chat mode always formats with the template
  outputPages_->setCurrentIndex(chat ? 1 : 0);
  // A conversation needs more height than one output; the charts keep the rest (proportions: the
  // splitter scales them to its height).
  right_->setSizes(chat ? QList<int>{3, 2} : QList<int>{2, 3});
  if (runButton_) runButton_->setText(chat ? tr("Send (Ctrl+Return)") : tr("Generate (Ctrl+Return)"));
}

bool GenerateTab::chatMode() const { return chatMode_->isChecked(); }

bool GenerateTab::setChatMode(bool chat) {
  if (chat && !chatMode_->isEnabled()) return false;
  (chat ? chatMode_ : singleMode_)->setChecked(true);
  return true;
}

void GenerateTab::updateSamplingEnabled() {
  const bool sampling = mode_->currentIndex() == 1;
  for (QWidget* w : {static_cast<QWidget*>(temperature_), static_cast<QWidget*>(topK_),
                     static_cast<QWidget*>(topP_), static_cast<QWidget*>(seed_)})
    w->setEnabled(sampling);
}

void GenerateTab::setPrompt(const QString& prompt) { prompt_->setPlainText(prompt); }
void GenerateTab::setMaxNewTokens(int n) { maxTokens_->setValue(n); }
void GenerateTab::setGreedy(bool greedy) { mode_->setCurrentIndex(greedy ? 0 : 1); }
QString GenerateTab::outputText() const { return output_->toPlainText(); }
QString GenerateTab::metricsText() const { return metrics_->text(); }

void GenerateTab::setModel(const ModelSummary& model) {
  model_ = model;
  caveat_->setText(model.caveat.isEmpty() ? QString() : tr("Built-in demo model: %1.").arg(model.caveat));
  caveat_->setVisible(!model.caveat.isEmpty());
  chat_->setEnabled(!model.chatFamily.isEmpty());
  chatMode_->setEnabled(!model.chatFamily.isEmpty());
  chatMode_->setToolTip(model.chatFamily.isEmpty()
                            ? tr("This model has no chat template we recognise, so it cannot chat")
                            : tr("A conversation in the model's %1 chat template").arg(model.chatFamily));
  if (model.chatFamily.isEmpty()) singleMode_->setChecked(true);
  chat_->setToolTip(model.chatFamily.isEmpty()
                        ? tr("This model has no chat template we recognise")
                        : tr("Format the prompt with the model's %1 chat template before generating")
                              .arg(model.chatFamily));
  for (ChartView* c : charts()) c->setFootnote(chartFootnote(model));
}

servelab::GenerateOptions GenerateTab::options() const {
  servelab::GenerateOptions o;
  o.max_new_tokens = maxTokens_->value();
  o.sampling.greedy = mode_->currentIndex() == 0;
  o.sampling.temperature = temperature_->value();
  o.sampling.top_k = topK_->value();
  o.sampling.top_p = topP_->value();
  o.sampling.seed = static_cast<std::uint64_t>(seed_->value());
  o.stop_at_eos = stopAtEos_->isChecked();
  o.report_top = 10;
  return o;
}

bool GenerateTab::run() {
  if (chatMode()) return runChat();
  GenerateRequest r;
  r.prompt = prompt_->toPlainText();
  r.chat = chat_->isEnabled() && chat_->isChecked();
  r.options = options();
  EngineJob* job = engine_->submit(
      tr("generation"), [r](JobContext& c) { return generateText(c.engine(), r, c.tokens(), c.cancel()); });
  if (!job) return false;
  job->onResult<GenerateSummary>(this, [this](const GenerateSummary& s) { onFinished(s); });
  startRun(job, r.prompt);
  return true;
}

bool GenerateTab::runChat() {
  QString why;
  const std::optional<servelab::Conversation> conversation = chatView_->outgoing(&why);
  if (!conversation) return refuseRun(why);
  ChatTurnRequest r;
  r.conversation = *conversation;
  r.options = options();
  EngineJob* job = engine_->submit(
      tr("chat turn"), [r](JobContext& c) { return chatTurn(c.engine(), r, c.tokens(), c.cancel()); });
  if (!job) return false;
  job->onResult<ChatTurnSummary>(this, [this](const ChatTurnSummary& s) { onChatFinished(s); });
  chatView_->beginAnswer(r.conversation);
  startRun(job, QString::fromStdString(r.conversation.turns.back().content));
  return true;
}

bool GenerateTab::regenerate() {
  const servelab::Conversation before = chatView_->conversation();
  if (!chatMode() || isRunning() || !chatView_->takeLastAnswer())
    return refuseRun(tr("there is no answer to generate again"));
  // The answer is for the last user turn, not for a draft in the message box: the draft stays.
  const QString draft = chatView_->message();
  chatView_->setMessage(QString());
  const bool started = run();
  chatView_->setMessage(draft);
  if (!started) chatView_->setConversation(before);
  return started;
}

bool GenerateTab::runPresetId(const QString& id) {
  if (id != QLatin1String("chat")) return ExperimentTab::runPresetId(id);
  if (!setChatMode(true)) return refuseRun(tr("the chat preset needs a model with a chat template"));
  chatView_->setConversation(servelab::Conversation());
  queuedTurns_ = {tr("What is deep learning?"), tr("Give me one example of it in everyday life.")};
  chatView_->setMessage(queuedTurns_.takeFirst());
  return run();
}

void GenerateTab::startRun(EngineJob* job, const QString& shownPrompt) {
  connect(job, &EngineJob::token, this, &GenerateTab::onToken);
  connect(job, &EngineJob::failed, this, &GenerateTab::onFailed);
  if (!isRunning()) runStarted();
  lastPrompt_ = shownPrompt;
  lastError_.clear();
  tokens_.clear();
  drawn_ = 0;
  summary_ = GenerateSummary();
  tokenTable_->setRowCount(0);
  latencyChart_->clearSeries(0);
  latencyChart_->rescale();
  topChart_->setBars({}, {}, tr("probability"));
  output_->clear();
  QTextCursor c(output_->document());
  QTextCharFormat promptFormat;
  promptFormat.setForeground(palette().color(QPalette::PlaceholderText));
  c.insertText(shownPrompt, promptFormat);
  metrics_->setText(tr("Generating…"));
}

void GenerateTab::onToken(const TokenInfo& t) {
  // Tokens are kept at once but drawn in batches a few times a second: drawing each one as it
  // comes would take CPU time from the engine on a small machine.
  tokens_.push_back(t);
  if (!flushTimer_->isActive()) flushTimer_->start();
}

void GenerateTab::flushTokens() {
  flushTimer_->stop();
  const qsizetype from = drawn_;
  drawn_ = tokens_.size();
  for (qsizetype step = from; step < drawn_; ++step) drawToken(step);
  if (drawn_ > from) {
    output_->ensureCursorVisible();
    inspectStep(drawn_ - 1);
  }
}

void GenerateTab::drawToken(qsizetype step) {
  const TokenInfo& t = tokens_[step];
  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  if (!t.piece.isEmpty()) {
    QTextCursor c(output_->document());
    c.movePosition(QTextCursor::End);
    QTextCharFormat f;
    f.setAnchor(true);
    f.setAnchorHref(QStringLiteral("tok:%1").arg(step));
    f.setForeground(dark ? QColor(0x56, 0xB4, 0xE9) : QColor(0x00, 0x55, 0x99));
    // Alternate backgrounds so token boundaries are visible.
    f.setBackground(step % 2 ? (dark ? QColor(0x2a, 0x3a, 0x4a) : QColor(0xe3, 0xf0, 0xfb))
                             : (dark ? QColor(0x22, 0x30, 0x3c) : QColor(0xf3, 0xf8, 0xfd)));
    f.setToolTip(
        tr("step %1 · id %2 · %3 · %4 ms").arg(step).arg(t.id).arg(t.display).arg(t.stepMs, 0, 'f', 2));
    if (chatMode())
      chatView_->appendAnswer(t.piece, f);
    else
      c.insertText(t.piece, f);
  }
  const int row = tokenTable_->rowCount();
  tokenTable_->insertRow(row);
  const double p = t.top.isEmpty() ? 0.0 : [&] {
    for (const TopCandidate& c : t.top)
      if (c.id == t.id) return c.probability;
    return 0.0;
  }();
  const QStringList cells{QString::number(step), QString::number(t.id), t.display,
                          QString::number(t.stepMs, 'f', 2),
                          t.top.isEmpty() ? QString() : QString::number(p, 'g', 3)};
  for (int col = 0; col < cells.size(); ++col)
    tokenTable_->setItem(row, col, new QTableWidgetItem(cells[col]));
  latencyChart_->append(0, static_cast<double>(step), t.stepMs);
}

void GenerateTab::inspectStep(qsizetype step) {
  if (step < 0 || step >= tokens_.size()) return;
  const TokenInfo& t = tokens_[step];
  QStringList labels;
  QVector<double> values;
  for (const TopCandidate& c : t.top) {
    labels << c.text;
    values << c.probability;
  }
  topChart_->setBars(labels, values, tr("probability"));
  topChart_->setTitle(tr("Top-10 next tokens at step %1 (chose “%2”)").arg(step).arg(t.display));
  if (tokenTable_->currentRow() != step) tokenTable_->selectRow(static_cast<int>(step));
}

void GenerateTab::onFinished(const GenerateSummary& s) {
  flushTokens();
  summary_ = s;
  // Bytes of an unfinished character at the very end are only decoded (as U+FFFD) when the run
  // ends; show them too, so the output is exactly the text the run produced.
  QString streamed;
  for (const TokenInfo& t : tokens_) streamed += t.piece;
  if (s.text.size() > streamed.size() && s.text.startsWith(streamed)) {
    QTextCursor c(output_->document());
    c.movePosition(QTextCursor::End);
    QTextCharFormat f;
    f.setForeground(QColor(0xD5, 0x5E, 0x00));
    f.setToolTip(tr("bytes of an unfinished UTF-8 character at the end of the output"));
    c.insertText(s.text.mid(streamed.size()), f);
  }
  showMetrics(s);
  runEnded(true, QString());
}

void GenerateTab::onChatFinished(const ChatTurnSummary& s) {
  flushTokens();
  summary_ = s.generation;
  chatView_->endAnswer(s.generation.text, s.generation.promptText, s.generation.promptIds.size(),
                       s.generation.generatedIds.size(), s.context, s.droppedNote);
  showMetrics(s.generation);
  if (!queuedTurns_.isEmpty()) {
    chatView_->setMessage(queuedTurns_.takeFirst());
    if (runChat()) return;
    queuedTurns_.clear();
    runEnded(false, refusal());
    return;
  }
  runEnded(true, QString());
}

void GenerateTab::showMetrics(const GenerateSummary& s) {
  const qsizetype n = s.generatedIds.size();
  metrics_->setText(
      tr("<b>Time to first token</b> %1 ms &nbsp;·&nbsp; <b>decode</b> %2 tokens/s &nbsp;·&nbsp; "
         "<b>total</b> %3 ms for %4 tokens &nbsp;·&nbsp; finished: %5")
          .arg(s.ttftMs, 0, 'f', 1)
          .arg(s.decodeTokensPerSecond, 0, 'f', 1)
          .arg(s.totalMs, 0, 'f', 1)
          .arg(n)
          .arg(s.finishReason == QLatin1String("eos")    ? tr("end of text")
               : s.finishReason == QLatin1String("stop") ? tr("stop string")
                                                         : tr("max new tokens")));
}

void GenerateTab::onFailed(const QString& kind, const QString& message) {
  flushTokens();
  lastError_ = message;
  queuedTurns_.clear();
  summary_.cancelled = kind == QLatin1String("cancelled");
  if (chatMode()) {
    // Stopped: what was written is the answer (Regenerate writes it again). Failed: the turn goes
    // back into the message box, to change and send again.
    QString partial;
    for (const TokenInfo& t : tokens_) partial += t.piece;
    if (summary_.cancelled)
      chatView_->endAnswer(partial, QString(), 0, tokens_.size(), 0, QString());
    else
      chatView_->answerFailed();
  }
  summary_.promptText = lastPrompt_;
  for (const TokenInfo& t : tokens_) {
    summary_.generatedIds.push_back(t.id);
    summary_.stepMs.push_back(t.stepMs);
  }
  summary_.ttftMs = summary_.stepMs.isEmpty() ? 0 : summary_.stepMs.front();
  summary_.decodeTokensPerSecond = decodeTokensPerSecond(summary_.stepMs);
  metrics_->setText(
      summary_.cancelled
          ? tr("<b>Stopped</b> after %1 tokens; what was generated stays above.").arg(tokens_.size())
          : tr("<b>Failed</b> (%1): %2").arg(kind, message.toHtmlEscaped()));
  runEnded(false, message);
}

QStringList GenerateTab::resultValueNames() const {
  return {QStringLiteral("prompt_tokens"),     QStringLiteral("new_tokens"),
          QStringLiteral("ttft_ms"),           QStringLiteral("decode_ms"),
          QStringLiteral("first_token_steps"), QStringLiteral("tokens_per_s")};
}

// ttft_ms is step 0 (the prefill and the first token), decode_ms the median step after it.
QMap<QString, double> GenerateTab::resultValues() const {
  if (isRunning() || summary_.cancelled || summary_.stepMs.isEmpty()) return {};
  QMap<QString, double> v{{QStringLiteral("prompt_tokens"), static_cast<double>(summary_.promptIds.size())},
                          {QStringLiteral("new_tokens"), static_cast<double>(summary_.generatedIds.size())},
                          {QStringLiteral("ttft_ms"), summary_.ttftMs},
                          {QStringLiteral("tokens_per_s"), summary_.decodeTokensPerSecond}};
  const double decode = medianValue(std::vector<double>(summary_.stepMs.begin() + 1, summary_.stepMs.end()));
  if (decode > 0) {
    v[QStringLiteral("decode_ms")] = decode;
    v[QStringLiteral("first_token_steps")] = summary_.ttftMs / decode;
  }
  return v;
}

QJsonObject GenerateTab::lastResult() const {
  QJsonObject o;
  o[QStringLiteral("experiment")] = QStringLiteral("generate");
  o[QStringLiteral("prompt")] = summary_.promptText;
  o[QStringLiteral("prompt_ids")] = toJson(summary_.promptIds);
  o[QStringLiteral("generated_ids")] = toJson(summary_.generatedIds);
  o[QStringLiteral("text")] = summary_.text;
  o[QStringLiteral("step_ms")] = toJson(summary_.stepMs);
  o[QStringLiteral("total_ms")] = summary_.totalMs;
  o[QStringLiteral("ttft_ms")] = summary_.ttftMs;
  o[QStringLiteral("decode_tokens_per_s")] = summary_.decodeTokensPerSecond;
  o[QStringLiteral("finish_reason")] =
      summary_.cancelled ? QStringLiteral("cancelled") : summary_.finishReason;
  if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
  if (chatMode())
    o[QStringLiteral("messages")] =
        QJsonDocument::fromJson(
            QByteArray::fromStdString(servelab::conversation_to_json(chatView_->conversation()).dump()))
            .array();
  return o;
}

void GenerateTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  if (const auto prompt = settingString(s, QStringLiteral("prompt"))) prompt_->setPlainText(*prompt);
  loadSpin(s, QStringLiteral("maxNewTokens"), maxTokens_);
  if (const auto sampling = settingBool(s, QStringLiteral("sampling")))
    mode_->setCurrentIndex(*sampling ? 1 : 0);
  loadSpin(s, QStringLiteral("temperature"), temperature_);
  loadSpin(s, QStringLiteral("topK"), topK_);
  loadSpin(s, QStringLiteral("topP"), topP_);
  loadSpin(s, QStringLiteral("seed"), seed_);
  loadCheck(s, QStringLiteral("stopAtEos"), stopAtEos_);
  loadCheck(s, QStringLiteral("chat"), chat_);
  // The conversation of the last session, as OpenAI messages; one that does not read is reported.
  if (const auto text = settingString(s, QStringLiteral("chatConversation")); text && !text->isEmpty()) {
    try {
      chatView_->setConversation(servelab::conversation_from_json_text(text->toStdString()));
    } catch (const servelab::Error& e) {
      reportSetting(s, QStringLiteral("chatConversation"), text->left(40),
                    tr("is not a conversation: %1").arg(QString::fromUtf8(e.what())));
    }
  }
  if (const auto chat = settingBool(s, QStringLiteral("chatMode"))) setChatMode(*chat);
  s.endGroup();
  updateSamplingEnabled();
}

void GenerateTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("prompt"), prompt_->toPlainText());
  s.setValue(QStringLiteral("maxNewTokens"), maxTokens_->value());
  s.setValue(QStringLiteral("sampling"), mode_->currentIndex() == 1);
  s.setValue(QStringLiteral("temperature"), temperature_->value());
  s.setValue(QStringLiteral("topK"), topK_->value());
  s.setValue(QStringLiteral("topP"), topP_->value());
  s.setValue(QStringLiteral("seed"), seed_->value());
  s.setValue(QStringLiteral("stopAtEos"), stopAtEos_->isChecked());
  s.setValue(QStringLiteral("chat"), chat_->isChecked());
  s.setValue(QStringLiteral("chatMode"), chatMode());
  s.setValue(QStringLiteral("chatConversation"),
             QString::fromStdString(servelab::conversation_to_json(chatView_->conversation()).dump()));
  s.endGroup();
}

RunReport GenerateTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(caveat_);
  QString text;
  if (chatMode()) {
    for (const QString& row : chatView_->transcriptRows()) {
      const qsizetype colon = row.indexOf(QLatin1Char(':'));
      text += QStringLiteral("<p style='white-space: pre-wrap'><b>%1</b>%2</p>")
                  .arg(row.left(colon + 1).toHtmlEscaped(), row.mid(colon + 1).toHtmlEscaped());
    }
  } else if (!output_->toPlainText().isEmpty()) {
    text =
        QStringLiteral("<p style='white-space: pre-wrap'>%1</p>").arg(output_->toPlainText().toHtmlEscaped());
  }
  r.html << text << reportHtml(metrics_);
  r.tables << reportTable(tokenTable_, tr("Generated tokens"));
  return r;
}

}  // namespace servelab::ui
