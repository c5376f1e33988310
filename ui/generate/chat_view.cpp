#include "chat_view.h"

#include <QFile>
#include <QFileDialog>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStackedWidget>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

namespace servelab::ui {

namespace {

bool writeText(const QString& path, const std::string& text, QString* why) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) ||
      f.write(text.data(), static_cast<qint64>(text.size())) != static_cast<qint64>(text.size())) {
    if (why) *why = QObject::tr("cannot write %1: %2").arg(path, f.errorString());
    return false;
  }
  return true;
}

}  // namespace

ChatView::ChatView(QWidget* parent) : QWidget(parent) {
  system_ = new QLineEdit(this);
  system_->setObjectName(QStringLiteral("chatSystem"));
  system_->setPlaceholderText(tr("empty: the chat template's own default, if it has one"));
  system_->setToolTip(tr("The system message: how the assistant should behave, sent before every turn"));
  connect(system_, &QLineEdit::textChanged, this,
          [this](const QString& text) { conversation_.system = text.toStdString(); });
  connect(system_, &QLineEdit::editingFinished, this, &ChatView::conversationChanged);

  transcript_ = new QTextBrowser(this);
  transcript_->setObjectName(QStringLiteral("chatTranscript"));
  transcript_->setOpenLinks(false);
  transcript_->setPlaceholderText(
      tr("The conversation shows here, turn by turn. Type a message below and Send (Ctrl+Return); click a "
         "token of the answer to inspect it."));
  QFont font = transcript_->font();
  font.setPointSizeF(font.pointSizeF() * 1.1);
  transcript_->setFont(font);
  connect(transcript_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == QLatin1String("tok")) Q_EMIT tokenClicked(url.path().toLongLong());
    if (url.scheme() == QLatin1String("edit")) editTurn(url.path().toInt());
  });
  templateView_ = new QPlainTextEdit(this);
  templateView_->setObjectName(QStringLiteral("chatTemplateText"));
  templateView_->setReadOnly(true);
  templateView_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  templateView_->setPlaceholderText(
      tr("After a turn, the text the chat template made of the conversation shows here: what the model "
         "actually reads, with its special tokens, and the answer it wrote after it."));
  pages_ = new QStackedWidget(this);
  pages_->addWidget(transcript_);
  pages_->addWidget(templateView_);

  tokens_ = new QLabel(tr("Tokens against the context appear after the first answer."), this);
  tokens_->setObjectName(QStringLiteral("chatTokens"));
  dropped_ = new QLabel(this);
  dropped_->setObjectName(QStringLiteral("chatDropped"));
  dropped_->setWordWrap(true);
  dropped_->setStyleSheet(QStringLiteral("QLabel { color: #b35900; }"));
  dropped_->hide();
  editBanner_ = new QLabel(this);
  editBanner_->setObjectName(QStringLiteral("chatEditing"));
  editBanner_->setWordWrap(true);
  editBanner_->hide();
  connect(editBanner_, &QLabel::linkActivated, this, [this] { cancelEdit(); });

  input_ = new QPlainTextEdit(this);
  input_->setObjectName(QStringLiteral("chatInput"));
  input_->setPlaceholderText(tr("Your message…"));
  input_->setMaximumHeight(input_->fontMetrics().lineSpacing() * 2 + 14);

  send_ = new QPushButton(tr("Send"), this);
  send_->setObjectName(QStringLiteral("chatSend"));
  send_->setToolTip(tr("Answer the message (Ctrl+Return)"));
  connect(send_, &QPushButton::clicked, this, &ChatView::sendRequested);
  regenerate_ = new QPushButton(tr("Regenerate"), this);
  regenerate_->setObjectName(QStringLiteral("chatRegenerate"));
  regenerate_->setToolTip(tr("Write the last answer again (with sampling, a different one)"));
  connect(regenerate_, &QPushButton::clicked, this, &ChatView::regenerateRequested);
  newChat_ = new QPushButton(tr("New chat"), this);
  newChat_->setObjectName(QStringLiteral("chatNew"));
  newChat_->setToolTip(tr("Forget the turns (the system prompt stays)"));
  connect(newChat_, &QPushButton::clicked, this, [this] {
    servelab::Conversation c;
    c.system = conversation_.system;
    setConversation(c);
    Q_EMIT conversationChanged();
  });
  showTemplate_ = new QToolButton(this);
  showTemplate_->setObjectName(QStringLiteral("chatShowTemplate"));
  showTemplate_->setText(tr("Template text"));
  showTemplate_->setCheckable(true);
  showTemplate_->setToolTip(
      tr("Show the prompt as the model reads it: the conversation in its chat template"));
  connect(showTemplate_, &QToolButton::toggled, this,
          [this](bool on) { pages_->setCurrentIndex(on ? 1 : 0); });
  export_ = new QToolButton(this);
  export_->setObjectName(QStringLiteral("chatExport"));
  export_->setText(tr("Export"));
  export_->setPopupMode(QToolButton::InstantPopup);
  auto* menu = new QMenu(export_);
  menu->addAction(tr("As JSON (OpenAI messages)…"), this, [this] { exportAs(false); });
  menu->addAction(tr("As Markdown…"), this, [this] { exportAs(true); });
  export_->setMenu(menu);

  auto* systemRow = new QHBoxLayout;
  systemRow->addWidget(new QLabel(tr("System prompt"), this));
  systemRow->addWidget(system_, 1);
  // One row under the message box, so that the transcript keeps the height.
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(send_);
  buttons->addWidget(regenerate_);
  buttons->addSpacing(12);
  buttons->addWidget(tokens_, 1);
  buttons->addWidget(showTemplate_);
  buttons->addWidget(export_);
  buttons->addWidget(newChat_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(systemRow);
  layout->addWidget(pages_, 1);
  layout->addWidget(dropped_);
  layout->addWidget(editBanner_);
  layout->addWidget(input_);
  layout->addLayout(buttons);
  setBusy(false);
}

void ChatView::setConversation(servelab::Conversation conversation) {
  conversation_ = std::move(conversation);
  system_->setText(QString::fromStdString(conversation_.system));
  cancelEdit();
  redraw();
  setBusy(busy_);
}

QString ChatView::systemPrompt() const { return system_->text(); }
void ChatView::setSystemPrompt(const QString& text) { system_->setText(text); }
QString ChatView::message() const { return input_->toPlainText(); }
void ChatView::setMessage(const QString& text) { input_->setPlainText(text); }

std::optional<servelab::Conversation> ChatView::outgoing(QString* why) const {
  servelab::Conversation c = conversation_;
  const QString text = input_->toPlainText().trimmed();
  if (text.isEmpty()) {
    if (editing_ < 0 && c.awaiting_answer()) return c;
    if (why) *why = tr("type a message first");
    return std::nullopt;
  }
  if (editing_ >= 0) {
    c.turns.resize(static_cast<size_t>(editing_));
  } else if (c.awaiting_answer()) {
    c.turns.pop_back();  // a turn left unanswered is replaced by the one typed now
  }
  c.add_user(text.toStdString());
  return c;
}

void ChatView::beginAnswer(const servelab::Conversation& conversation) {
  conversation_ = conversation;
  input_->clear();
  cancelEdit();
  redraw();
  openTurn(QStringLiteral("assistant"), -1);
  setBusy(true);
}

void ChatView::appendAnswer(const QString& piece, const QTextCharFormat& format) {
  QTextCursor c(transcript_->document());
  c.movePosition(QTextCursor::End);
  c.insertText(piece, format);
  transcript_->ensureCursorVisible();
}

void ChatView::endAnswer(const QString& text, const QString& templateText, qint64 promptTokens,
                         qint64 answerTokens, qint64 context, const QString& droppedNote) {
  conversation_.add_assistant(text.toStdString());
  setBusy(false);
  Q_EMIT conversationChanged();
  if (templateText.isEmpty()) return;  // stopped: the counts of the last complete turn stay
  templateText_ = templateText + text;
  templateView_->setPlainText(templateText_);
  tokens_->setText(tr("%1 / %2 tokens (prompt %3 + answer %4)")
                       .arg(promptTokens + answerTokens)
                       .arg(context)
                       .arg(promptTokens)
                       .arg(answerTokens));
  dropped_->setText(droppedNote.isEmpty() ? QString() : tr("Context full: %1.").arg(droppedNote));
  dropped_->setVisible(!droppedNote.isEmpty());
}

void ChatView::answerFailed() {
  if (conversation_.awaiting_answer()) {
    input_->setPlainText(QString::fromStdString(conversation_.turns.back().content));
    conversation_.turns.pop_back();
  }
  redraw();
  setBusy(false);
  Q_EMIT conversationChanged();
}

bool ChatView::takeLastAnswer() {
  if (busy_ || conversation_.turns.empty() || conversation_.awaiting_answer()) return false;
  conversation_.turns.pop_back();
  redraw();
  return true;
}

void ChatView::editTurn(int index) {
  if (busy_ || index < 0 || index >= static_cast<int>(conversation_.turns.size()) ||
      conversation_.turns[static_cast<size_t>(index)].role != "user")
    return;
  editing_ = index;
  input_->setPlainText(QString::fromStdString(conversation_.turns[static_cast<size_t>(index)].content));
  const auto after = static_cast<int>(conversation_.turns.size()) - index - 1;
  editBanner_->setText(tr("Editing turn %1: Send answers the edited turn and drops the %2 turn(s) after it. "
                          "<a href=\"cancel\">Cancel</a>")
                           .arg(index + 1)
                           .arg(after));
  editBanner_->show();
  input_->setFocus();
}

void ChatView::cancelEdit() {
  if (editing_ >= 0) input_->clear();
  editing_ = -1;
  editBanner_->hide();
}

void ChatView::setBusy(bool busy) {
  busy_ = busy;
  send_->setEnabled(!busy);
  newChat_->setEnabled(!busy);
  regenerate_->setEnabled(!busy && !conversation_.turns.empty() && !conversation_.awaiting_answer());
}

void ChatView::redraw() {
  transcript_->clear();
  QTextCursor c(transcript_->document());
  for (size_t i = 0; i < conversation_.turns.size(); ++i) {
    const servelab::ChatMessage& m = conversation_.turns[i];
    openTurn(QString::fromStdString(m.role), static_cast<int>(i));
    c.movePosition(QTextCursor::End);
    c.insertText(QString::fromStdString(m.content), QTextCharFormat());
  }
}

void ChatView::openTurn(const QString& role, int index) {
  const bool user = role == QLatin1String("user");
  const bool dark = palette().color(QPalette::Base).lightness() < 128;
  QTextBlockFormat block;
  block.setBackground(user ? (dark ? QColor(0x1f, 0x33, 0x47) : QColor(0xe4, 0xef, 0xfb))
                           : (dark ? QColor(0x2d, 0x2d, 0x2d) : QColor(0xf2, 0xf2, 0xef)));
  // User turns sit to the right and answers to the left, as in a messaging app.
  block.setLeftMargin(user ? 48 : 0);
  block.setRightMargin(user ? 0 : 48);
  block.setTopMargin(6);
  QTextCursor c(transcript_->document());
  c.movePosition(QTextCursor::End);
  if (transcript_->document()->characterCount() <= 1)
    c.setBlockFormat(block);
  else
    c.insertBlock(block, QTextCharFormat());
  QTextCharFormat heading;
  heading.setFontWeight(QFont::Bold);
  heading.setForeground(user ? (dark ? QColor(0x56, 0xB4, 0xE9) : QColor(0x00, 0x55, 0x99))
                             : (dark ? QColor(0x7f, 0xd1, 0x8b) : QColor(0x1b, 0x6e, 0x20)));
  c.insertText(user ? tr("You") : tr("Assistant"), heading);
  if (user && index >= 0) {
    QTextCharFormat link;
    link.setAnchor(true);
    link.setAnchorHref(QStringLiteral("edit:%1").arg(index));
    link.setForeground(palette().color(QPalette::Link));
    link.setToolTip(tr("Edit this turn and answer it again (the turns after it are dropped)"));
    c.insertText(QStringLiteral("   "), QTextCharFormat());
    c.insertText(tr("edit"), link);
  }
  block.setTopMargin(2);
  c.insertBlock(block, QTextCharFormat());
}

QStringList ChatView::transcriptRows() const {
  QStringList rows;
  for (const servelab::ChatMessage& m : conversation_.turns)
    rows << QStringLiteral("%1: %2").arg(QString::fromStdString(m.role), QString::fromStdString(m.content));
  return rows;
}

QString ChatView::tokenCountText() const { return tokens_->text(); }
QString ChatView::droppedText() const { return dropped_->isVisible() ? dropped_->text() : QString(); }

bool ChatView::exportJson(const QString& path, QString* why) const {
  return writeText(path, servelab::conversation_to_json(conversation_).dump(2) + "\n", why);
}

bool ChatView::exportMarkdown(const QString& path, QString* why) const {
  return writeText(path, servelab::conversation_to_markdown(conversation_), why);
}

void ChatView::exportAs(bool markdown) {
  const QString path = QFileDialog::getSaveFileName(
      this, markdown ? tr("Export the conversation as Markdown") : tr("Export the conversation as JSON"),
      markdown ? QStringLiteral("conversation.md") : QStringLiteral("conversation.json"),
      markdown ? tr("Markdown (*.md)") : tr("JSON, OpenAI messages (*.json)"));
  if (path.isEmpty()) return;
  QString why;
  if (!(markdown ? exportMarkdown(path, &why) : exportJson(path, &why)))
    QMessageBox::warning(this, tr("Export"), why);
}

}  // namespace servelab::ui
