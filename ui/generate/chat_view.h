#pragma once
// The Generate tab's chat mode: a system prompt, the transcript as turns (user and assistant
// visually apart, the answer being written streaming in with its tokens clickable), the message
// box, and what to do with the conversation (send, regenerate the last answer, edit and resend a
// user turn, start over, export as OpenAI messages or Markdown, view the template's text). It holds
// the conversation; the tab runs the engine and tells it how the answer goes.
#include <QString>
#include <QStringList>
#include <QWidget>
#include <optional>

#include "generate/conversation.h"

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QStackedWidget;
class QTextBrowser;
class QTextCharFormat;
class QToolButton;

namespace servelab::ui {

class ChatView : public QWidget {
  Q_OBJECT
 public:
  explicit ChatView(QWidget* parent = nullptr);

  const servelab::Conversation& conversation() const { return conversation_; }
  // Replaces the conversation (one kept from the last session) and shows it.
  void setConversation(servelab::Conversation conversation);
  QString systemPrompt() const;
  void setSystemPrompt(const QString& text);
  QString message() const;
  void setMessage(const QString& text);

  // The conversation the next answer is for: the turns so far (cut before the user turn being
  // edited) and the typed message; with nothing typed, the turns so far when they end with a user
  // turn. Nothing, with *why, when there is nothing to answer.
  std::optional<servelab::Conversation> outgoing(QString* why) const;
  // An answer to conversation (from outgoing()) has started: it is shown, the box cleared, and the
  // answer's turn opened for the pieces that stream in.
  void beginAnswer(const servelab::Conversation& conversation);
  void appendAnswer(const QString& piece, const QTextCharFormat& format);
  // The answer is complete (or stopped: the text so far is the answer). templateText is the prompt
  // the model read; the counts are in tokens.
  void endAnswer(const QString& text, const QString& templateText, qint64 promptTokens, qint64 answerTokens,
                 qint64 context, const QString& droppedNote);
  // The answer failed: its user turn goes back into the message box.
  void answerFailed();
  // Removes the last answer so that it can be generated again; false when there is none.
  bool takeLastAnswer();
  // Puts user turn `index` (into conversation().turns) into the message box: the next answer is for
  // the edited turn, and the turns after it are dropped.
  void editTurn(int index);
  int editingTurn() const { return editing_; }
  void setBusy(bool busy);

  // The transcript as shown: "user: text" / "assistant: text", one row per turn.
  QStringList transcriptRows() const;
  QString tokenCountText() const;
  QString droppedText() const;
  QString templateText() const { return templateText_; }
  bool exportJson(const QString& path, QString* why) const;
  bool exportMarkdown(const QString& path, QString* why) const;

 Q_SIGNALS:
  // The conversation has changed for good, to be kept now: an answer ended (or was stopped), a
  // failed turn went back into the message box, New chat, or the system prompt was edited. Not
  // while an answer streams in, nor for takeLastAnswer() and editTurn(), which only prepare one.
  void conversationChanged();
  void sendRequested();
  void regenerateRequested();
  // A token of the answer was clicked: its step in the run.
  void tokenClicked(qsizetype step);

 private:
  void redraw();
  void openTurn(const QString& role, int index);
  void cancelEdit();
  void exportAs(bool markdown);

  servelab::Conversation conversation_;
  int editing_ = -1;  // the user turn being edited, or -1
  bool busy_ = false;
  QString templateText_;
  QLineEdit* system_;
  QStackedWidget* pages_;
  QTextBrowser* transcript_;
  QPlainTextEdit* templateView_;
  QLabel* tokens_;
  QLabel* dropped_;
  QLabel* editBanner_;
  QPlainTextEdit* input_;
  QPushButton* send_;
  QPushButton* regenerate_;
  QPushButton* newChat_;
  QToolButton* showTemplate_;
  QToolButton* export_;
};

}  // namespace servelab::ui
