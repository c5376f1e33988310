// The Generate tab's chat mode end to end on the offscreen platform, on the tiny test model given a
// ChatML template: turns and their streamed, inspectable answers, the earlier exchange in the next
// prompt, regenerate, edit and resend, the context policy when it fires, the conversation kept
// across windows and saved after every turn, JSON and Markdown export, a model without a template, and the
// scripted preset. Greedy answers of a few tokens; no assertion depends on how long anything takes.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QtWidgets>
#include <memory>

#include "generate/chat_view.h"
#include "generate_tab.h"
#include "job_spy.h"
#include "main_window.h"
#include "tiny_model.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 240000;

// ChatML without a default system message: tokenizer_config.json's chat_template.
const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
    "endif "
    "%}";

QString answerOf(const QString& row) { return row.mid(QStringLiteral("assistant: ").size()); }

}  // namespace

class TestGenerateChat : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString chatModel_, plainModel_;

  static GenerateTab* generateTab(MainWindow& w) {
    return qobject_cast<GenerateTab*>(w.tab(QStringLiteral("generate")));
  }
  // Runs one turn (or regenerate, when message is null) and waits for it to end well.
  static bool turn(GenerateTab* tab, const QString& message, QString* why) {
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    if (!message.isNull()) tab->chatView()->setMessage(message);
    const bool started = message.isNull() ? tab->regenerate() : tab->run();
    if (!started) {
      *why = tab->refusal();
      return false;
    }
    if (!done.wait(kRunTimeoutMs)) {
      *why = QStringLiteral("the turn did not end");
      return false;
    }
    *why = done.front().at(1).toString();
    return done.front().at(0).toBool();
  }
  std::unique_ptr<MainWindow> chatWindow(const QString& settings, int maxNewTokens = 5) {
    auto w = windowWithModel(settings, chatModel_, kLoadTimeoutMs);
    if (!w) return w;
    GenerateTab* tab = generateTab(*w);
    w->selectTab(tab->tabId());
    tab->setGreedy(true);
    tab->setMaxNewTokens(maxNewTokens);
    return w;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    chatModel_ = tmp_.filePath(QStringLiteral("tiny-chat"));
    plainModel_ = tmp_.filePath(QStringLiteral("tiny"));
    for (const QString& folder : {chatModel_, plainModel_}) {
      const QString error = writeTinyModel(folder);
      QVERIFY2(error.isEmpty(), qPrintable(error));
    }
    QFile config(chatModel_ + QStringLiteral("/tokenizer_config.json"));
    QVERIFY(config.open(QIODevice::WriteOnly));
    config.write(
        QJsonDocument(QJsonObject{{QStringLiteral("chat_template"), QString::fromUtf8(kChatMl)}}).toJson());
  }

  void twoTurnsRegenerateEditAndKeep() {
    const QString settings = tmp_.filePath(QStringLiteral("chat.ini"));
    auto w = chatWindow(settings);
    QVERIFY(w);
    GenerateTab* tab = generateTab(*w);
    ChatView* chat = tab->chatView();
    QVERIFY(tab->setChatMode(true));
    QString why;
    QVERIFY2(turn(tab, QStringLiteral("Hello there"), &why), qPrintable(why));
    QStringList rows = chat->transcriptRows();
    QCOMPARE(rows.size(), 2);
    QCOMPARE(rows[0], QStringLiteral("user: Hello there"));
    const QString first = answerOf(rows[1]);
    QCOMPARE(first, tab->summary().text);
    // The answer streamed token by token, each one inspectable as in single-prompt mode.
    QString streamed;
    for (const TokenInfo& t : tab->tokens()) streamed += t.piece;
    QCOMPARE(streamed, first);
    QVERIFY(!tab->tokens().isEmpty());
    QCOMPARE(tab->tokens().size(), tab->summary().generatedIds.size());
    QVERIFY(!tab->tokens().front().top.isEmpty());
    QCOMPARE(tab->summary().promptText,
             QStringLiteral("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"));

    QVERIFY2(turn(tab, QStringLiteral("And again"), &why), qPrintable(why));
    rows = chat->transcriptRows();
    QCOMPARE(rows.size(), 4);
    QCOMPARE(rows[2], QStringLiteral("user: And again"));
    const QString second = answerOf(rows[3]);
    // The second prompt holds the first exchange.
    const QString secondPrompt = tab->summary().promptText;
    QVERIFY2(
        secondPrompt.startsWith(
            QStringLiteral("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n%1<|im_end|>\n"
                           "<|im_start|>user\nAnd again<|im_end|>")
                .arg(first)),
        qPrintable(secondPrompt));
    const qsizetype used = tab->summary().promptIds.size() + tab->summary().generatedIds.size();
    QCOMPARE(chat->tokenCountText(), QStringLiteral("%1 / 256 tokens (prompt %2 + answer %3)")
                                         .arg(used)
                                         .arg(tab->summary().promptIds.size())
                                         .arg(tab->summary().generatedIds.size()));
    QVERIFY(chat->droppedText().isEmpty());
    QCOMPARE(chat->templateText(), secondPrompt + second);

    // Regenerate: the same prompt again, and greedy gives the same answer in the same place; a
    // draft in the message box is neither sent nor lost.
    chat->setMessage(QStringLiteral("a draft"));
    QVERIFY2(turn(tab, QString(), &why), qPrintable(why));
    QCOMPARE(chat->transcriptRows(), rows);
    QCOMPARE(tab->summary().promptText, secondPrompt);
    QCOMPARE(chat->message(), QStringLiteral("a draft"));

    // Edit the first user turn and resend: the turns after it are gone.
    chat->editTurn(0);
    QCOMPARE(chat->message(), QStringLiteral("Hello there"));
    QVERIFY2(turn(tab, QStringLiteral("Hi instead"), &why), qPrintable(why));
    rows = chat->transcriptRows();
    QCOMPARE(rows.size(), 2);
    QCOMPARE(rows[0], QStringLiteral("user: Hi instead"));
    QVERIFY(tab->summary().promptText.startsWith(QStringLiteral("<|im_start|>user\nHi instead<|im_end|>")));

    // Export: OpenAI messages and Markdown of exactly these turns.
    chat->setSystemPrompt(QStringLiteral("Be brief."));
    const QString json = tmp_.filePath(QStringLiteral("chat.json"));
    const QString md = tmp_.filePath(QStringLiteral("chat.md"));
    QVERIFY2(chat->exportJson(json, &why), qPrintable(why));
    QVERIFY2(chat->exportMarkdown(md, &why), qPrintable(why));
    QFile jf(json);
    QVERIFY(jf.open(QIODevice::ReadOnly));
    const QJsonArray messages = QJsonDocument::fromJson(jf.readAll()).array();
    QCOMPARE(messages.size(), 3);
    QCOMPARE(messages[0].toObject().value(QStringLiteral("role")).toString(), QStringLiteral("system"));
    QCOMPARE(messages[0].toObject().value(QStringLiteral("content")).toString(), QStringLiteral("Be brief."));
    QCOMPARE(messages[1].toObject().value(QStringLiteral("content")).toString(),
             QStringLiteral("Hi instead"));
    QCOMPARE(messages[2].toObject().value(QStringLiteral("role")).toString(), QStringLiteral("assistant"));
    QCOMPARE(messages[2].toObject().value(QStringLiteral("content")).toString(), answerOf(rows[1]));
    QFile mf(md);
    QVERIFY(mf.open(QIODevice::ReadOnly));
    const QString markdown = QString::fromUtf8(mf.readAll());
    QVERIFY2(markdown.startsWith(
                 QStringLiteral("# Conversation\n\n## System\n\nBe brief.\n\n## User\n\nHi instead\n\n"
                                "## Assistant\n\n")),
             qPrintable(markdown));

    // A new window on the same settings: chat mode, the system prompt and the turns are back.
    w->close();
    w.reset();
    auto w2 = chatWindow(settings);
    QVERIFY(w2);
    GenerateTab* tab2 = generateTab(*w2);
    QVERIFY(tab2->chatMode());
    QCOMPARE(tab2->chatView()->transcriptRows(), rows);
    QCOMPARE(tab2->chatView()->systemPrompt(), QStringLiteral("Be brief."));
  }

  // Each finished turn is in the settings file at once, with the window still open (a crash loses
  // nothing): after a turn, a regenerated answer, an edited and resent turn, and New chat.
  void everyTurnIsSavedAtOnce() {
    const QString settings = tmp_.filePath(QStringLiteral("saved.ini"));
    auto w = chatWindow(settings);
    QVERIFY(w);
    GenerateTab* tab = generateTab(*w);
    ChatView* chat = tab->chatView();
    QVERIFY(tab->setChatMode(true));
    chat->setConversation(servelab::Conversation());
    // The conversation as a fresh QSettings reads it from a copy of the file on disk.
    const auto saved = [&] {
      const QString copy = tmp_.filePath(QStringLiteral("saved-copy.ini"));
      QFile::remove(copy);
      if (!QFile::copy(settings, copy)) return QStringList{QStringLiteral("(no settings file)")};
      const QSettings s(copy, QSettings::IniFormat);
      QStringList rows;
      const QJsonArray messages =
          QJsonDocument::fromJson(s.value(QStringLiteral("generate/chatConversation")).toString().toUtf8())
              .array();
      for (const QJsonValue& m : messages)
        rows << QStringLiteral("%1: %2").arg(m.toObject().value(QStringLiteral("role")).toString(),
                                             m.toObject().value(QStringLiteral("content")).toString());
      return rows;
    };
    QString why;
    QVERIFY2(turn(tab, QStringLiteral("Hello there"), &why), qPrintable(why));
    QCOMPARE(chat->transcriptRows().size(), 2);
    QCOMPARE(saved(), chat->transcriptRows());
    QVERIFY2(turn(tab, QStringLiteral("And again"), &why), qPrintable(why));
    QCOMPARE(saved(), chat->transcriptRows());
    QCOMPARE(saved().size(), 4);
    // Regenerate (greedy: the same answer again) and still saved.
    QVERIFY2(turn(tab, QString(), &why), qPrintable(why));
    QCOMPARE(saved(), chat->transcriptRows());
    QCOMPARE(saved().size(), 4);
    // Edit the first turn and resend: saved without the turns that were dropped.
    chat->editTurn(0);
    QVERIFY2(turn(tab, QStringLiteral("Hi instead"), &why), qPrintable(why));
    QCOMPARE(saved().size(), 2);
    QCOMPARE(saved().front(), QStringLiteral("user: Hi instead"));
    QCOMPARE(saved(), chat->transcriptRows());
    // New chat: saved empty, the system prompt kept.
    chat->setSystemPrompt(QStringLiteral("Be brief."));
    auto* newChat = chat->findChild<QPushButton*>(QStringLiteral("chatNew"));
    QVERIFY(newChat);
    newChat->click();
    QCOMPARE(saved(), QStringList{QStringLiteral("system: Be brief.")});
    QVERIFY(w->isVisible());
  }

  void contextPolicyLeavesOutTheOldestExchange() {
    auto w = chatWindow(tmp_.filePath(QStringLiteral("policy.ini")));
    QVERIFY(w);
    GenerateTab* tab = generateTab(*w);
    ChatView* chat = tab->chatView();
    QVERIFY(tab->setChatMode(true));
    chat->setConversation(servelab::Conversation());
    QString why;
    QVERIFY2(turn(tab, QStringLiteral("The first question"), &why), qPrintable(why));
    QVERIFY2(turn(tab, QStringLiteral("The second question"), &why), qPrintable(why));
    // Keep free for the answer all the context but the second prompt's tokens: the third prompt,
    // holding both exchanges, cannot fit whole.
    const auto secondPrompt = static_cast<int>(tab->summary().promptIds.size());
    tab->setMaxNewTokens(256 - secondPrompt);
    QVERIFY2(turn(tab, QStringLiteral("Third"), &why), qPrintable(why));
    QVERIFY2(chat->droppedText().contains(QStringLiteral("left out the 1 oldest exchange (2 turns)")) ||
                 chat->droppedText().contains(QStringLiteral("left out the 2 oldest exchanges (4 turns)")),
             qPrintable(chat->droppedText()));
    QVERIFY(!tab->summary().promptText.contains(QStringLiteral("The first question")));
    QVERIFY(tab->summary().promptText.endsWith(
        QStringLiteral("<|im_start|>user\nThird<|im_end|>\n<|im_start|>assistant\n")));
    // The transcript keeps every turn; only the prompt left some out.
    QCOMPARE(chat->transcriptRows().size(), 6);
    QCOMPARE(chat->transcriptRows().front(), QStringLiteral("user: The first question"));
  }

  void stopKeepsTheAnswerSoFar() {
    auto w = chatWindow(tmp_.filePath(QStringLiteral("stop.ini")), 200);
    QVERIFY(w);
    GenerateTab* tab = generateTab(*w);
    ChatView* chat = tab->chatView();
    QVERIFY(tab->setChatMode(true));
    chat->setConversation(servelab::Conversation());
    // Stop as soon as the second token reaches the GUI.
    int seen = 0;
    onEveryJob(w->engine(), &EngineJob::token, w.get(), [&] {
      if (++seen == 2) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    chat->setMessage(QStringLiteral("Tell me a long story"));
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    if (done.front().at(0).toBool())
      QSKIP("the tiny model wrote all its tokens before Stop reached the engine");
    QVERIFY(tab->tokens().size() >= 2 && tab->tokens().size() < 200);
    QString streamed;
    for (const TokenInfo& t : tab->tokens()) streamed += t.piece;
    QCOMPARE(chat->transcriptRows(), (QStringList{QStringLiteral("user: Tell me a long story"),
                                                  QStringLiteral("assistant: ") + streamed}));
    // What was written is the answer: Regenerate writes it again, whole this time.
    tab->setMaxNewTokens(3);
    QString why;
    QVERIFY2(turn(tab, QString(), &why), qPrintable(why));
    QCOMPARE(chat->transcriptRows().size(), 2);
    QCOMPARE(tab->tokens().size(), tab->summary().generatedIds.size());
  }

  void modelWithoutATemplateCannotChat() {
    auto w = windowWithModel(tmp_.filePath(QStringLiteral("plain.ini")), plainModel_, kLoadTimeoutMs);
    QVERIFY(w);
    GenerateTab* tab = generateTab(*w);
    auto* chatMode = tab->findChild<QRadioButton*>(QStringLiteral("generateChatMode"));
    QVERIFY(chatMode);
    QVERIFY(!chatMode->isEnabled());
    QVERIFY2(chatMode->toolTip().contains(QStringLiteral("no chat template")),
             qPrintable(chatMode->toolTip()));
    QVERIFY(!tab->setChatMode(true));
    QVERIFY(!tab->chatMode());
  }

  void badKeptConversationIsReported() {
    const QString settings = tmp_.filePath(QStringLiteral("bad.ini"));
    {
      QSettings s(settings, QSettings::IniFormat);
      s.setValue(QStringLiteral("generate/chatConversation"),
                 QStringLiteral(R"([{"role": "tool", "content": "x"}])"));
    }
    auto w = windowWithModel(settings, chatModel_, kLoadTimeoutMs);
    QVERIFY(w);
    const QString warning = w->settingsWarningText();
    QVERIFY2(
        warning.contains(QStringLiteral("generate/chatConversation")) &&
            warning.contains(QStringLiteral("is not a conversation: messages[0].role must be system, user or "
                                            "assistant, got &quot;tool&quot;")),
        qPrintable(warning));
    QVERIFY(generateTab(*w)->chatView()->transcriptRows().isEmpty());
  }

  void scriptedTwoTurnPreset() {
    const QString report = tmp_.filePath(QStringLiteral("report.json"));
    const QString settings = tmp_.filePath(QStringLiteral("script.ini"));
    {
      QSettings s(settings, QSettings::IniFormat);
      s.setValue(QStringLiteral("generate/maxNewTokens"), 3);
    }
    QString failure;
    const QJsonObject o =
        runScriptedReport(QStringLiteral(SERVELAB_GUI),
                          {QStringLiteral("--settings"), settings, QStringLiteral("--model"), chatModel_,
                           QStringLiteral("--tab"), QStringLiteral("generate"), QStringLiteral("--run"),
                           QStringLiteral("--preset"), QStringLiteral("chat")},
                          report, kRunTimeoutMs, &failure);
    QVERIFY2(failure.isEmpty(), qPrintable(failure));
    QVERIFY(o.value(QStringLiteral("ok")).toBool());
    const QJsonArray messages = o.value(QStringLiteral("messages")).toArray();
    QCOMPARE(messages.size(), 4);
    QCOMPARE(messages[0].toObject().value(QStringLiteral("content")).toString(),
             QStringLiteral("What is deep learning?"));
    QCOMPARE(messages[3].toObject().value(QStringLiteral("role")).toString(), QStringLiteral("assistant"));
    // The second answer's prompt (the report's) holds the first exchange.
    QVERIFY(o.value(QStringLiteral("prompt")).toString().contains(QStringLiteral("What is deep learning?")));
  }
};

QTEST_MAIN(TestGenerateChat)
#include "test_generate_chat.moc"
