#pragma once
// Generate: a prompt, greedy or sampling, tokens streamed into the output as they are made (each
// one inspectable), the top-10 next-token probabilities of the current step, step latencies, and
// time to first token / decode tokens per second / total time under the output. In chat mode the
// output is a conversation (generate/chat_view.h) whose every answer streams and inspects the same
// way.
#include <QVector>

#include "experiment_tab.h"

class QPlainTextEdit;
class QSpinBox;
class QDoubleSpinBox;
class QComboBox;
class QCheckBox;
class QRadioButton;
class QSplitter;
class QStackedWidget;
class QLabel;
class QTextBrowser;
class QTableWidget;
class QTimer;

namespace servelab::ui {

class ChatView;
class EngineJob;

class GenerateTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit GenerateTab(EngineController* engine, QWidget* parent = nullptr);

  QString tabId() const override { return QStringLiteral("generate"); }
  QString title() const override { return tr("Generate"); }
  ChartView* primaryChart() const override { return topChart_; }
  QList<ChartView*> charts() const override { return {topChart_, latencyChart_}; }
  bool run() override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;
  // "chat": a two-turn conversation from a new chat (the chat screenshot).
  QStringList presetIds() const override { return {QStringLiteral("chat")}; }
  bool runPresetId(const QString& id) override;

  // For tests and scripts.
  void setPrompt(const QString& prompt);
  void setMaxNewTokens(int n);
  void setGreedy(bool greedy);
  // Chat mode (false: single prompt); refused (false) when the model has no chat template.
  bool setChatMode(bool chat);
  bool chatMode() const;
  ChatView* chatView() const { return chatView_; }
  // Generates the last answer of the conversation again.
  bool regenerate();
  const QVector<TokenInfo>& tokens() const { return tokens_; }
  const GenerateSummary& summary() const { return summary_; }
  QString outputText() const;
  QString metricsText() const;
  // Shows the top-10 candidates of a step in the bar chart and selects its row.
  void inspectStep(qsizetype step);

 private:
  bool runChat();
  servelab::GenerateOptions options() const;
  void startRun(EngineJob* job, const QString& shownPrompt);
  void onChatFinished(const ChatTurnSummary& summary);
  void showMetrics(const GenerateSummary& s);
  void updateMode();
  void onToken(const TokenInfo& token);
  void flushTokens();
  void drawToken(qsizetype step);
  void onFinished(const GenerateSummary& summary);
  void onFailed(const QString& kind, const QString& message);
  void updateSamplingEnabled();

  QRadioButton* singleMode_;
  QRadioButton* chatMode_;
  QWidget* promptBox_;
  QStackedWidget* outputPages_;
  QSplitter* right_;
  ChatView* chatView_;
  QStringList queuedTurns_;  // a preset's turns still to send, each after the answer before it
  QPlainTextEdit* prompt_;
  QSpinBox* maxTokens_;
  QComboBox* mode_;
  QDoubleSpinBox* temperature_;
  QSpinBox* topK_;
  QDoubleSpinBox* topP_;
  QSpinBox* seed_;
  QCheckBox* stopAtEos_;
  QCheckBox* chat_;
  QLabel* caveat_;
  QTextBrowser* output_;
  QLabel* metrics_;
  QTableWidget* tokenTable_;
  ChartView* topChart_;
  ChartView* latencyChart_;

  ModelSummary model_;
  QVector<TokenInfo> tokens_;
  qsizetype drawn_ = 0;  // tokens_ drawn so far
  QTimer* flushTimer_;
  GenerateSummary summary_;
  QString lastPrompt_;
  QString lastError_;
};

}  // namespace servelab::ui
