#pragma once
// Serving (the course's last lesson): the LoRAX/TGI- and OpenAI-compatible server of core/serve
// started in-process on the loaded model, what it is doing live (a table of requests, time to
// first token, inter-token latency and batch occupancy over time, its Prometheus counters), and
// the load generator that replays the lesson's scenarios against it or against any other server: a
// saved target (serving/target_list.h) with its model, headers, API key and TLS settings. Every load
// run's TTFT and inter-token latency distributions come from what the client measured, whatever
// the server; a run can be saved, reopened and compared with another (serving/load_result_charts.h).
//
// The server runs as one long job on the engine controller's thread: that thread holds the Engine
// and only waits while the server's own scheduler thread runs the model, so nothing else touches
// the model while it serves (other tabs' runs are refused as busy until Stop). Every 250 ms the
// job hands the GUI a snapshot of the scheduler's metrics and requests. The load generator is an
// HTTP client only: it runs on a thread of its own and never touches the engine.
#include <QPointer>
#include <QSet>
#include <QVector>
#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "experiment_tab.h"
#include "serve/load_generator.h"
#include "serve/serve_scheduler.h"
#include "serve/server_scrape.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLayout;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTabWidget;

namespace servelab::ui {

class EngineJob;
class TargetEditor;

// What the server job hands the GUI every 250 ms.
struct ServeSnapshot {
  double seconds = 0;  // since the server started
  servelab::ServeMetrics metrics;
  std::vector<servelab::ServeRequestInfo> requests;
  QString prometheus;  // GET /metrics as a scraper reads it
};

class ServingTab : public ExperimentTab {
  Q_OBJECT
 public:
  explicit ServingTab(EngineController* engine, QWidget* parent = nullptr);
  ~ServingTab() override;

  QString tabId() const override { return QStringLiteral("serving"); }
  QString title() const override { return tr("Serving"); }
  ChartView* primaryChart() const override;
  QList<ChartView*> charts() const override;
  // Scripts: starts the server when it is not running, then runs the load generator against it
  // (or, when the load target is another server, only the load run); runFinished comes when the
  // load run has ended (the server keeps serving). Every load run, from here or from Run load,
  // begins with runBegan and ends with runFinished.
  bool run() override;
  void loadSettings(QSettings& settings) override;
  void saveSettings(QSettings& settings) const override;
  QJsonObject lastResult() const override;
  QStringList resultValueNames() const override;
  QMap<QString, double> resultValues() const override;
  void setModel(const ModelSummary& model) override;
  RunReport runReport() const override;

  // Where the adapters come from (the Multi-LoRA tab's list); called when the server starts.
  void setAdapterProvider(std::function<QVector<servelab::AdapterSource>()> provider);

  // The server.
  bool startServer();
  void stopServer();
  bool serverRunning() const { return !serverJob_.isNull(); }
  QString serverUrl() const { return url_; }  // empty until it listens
  QString serverError() const;                // the last start's failure, shown under the buttons
  void setPort(int port);
  void setMaxBatch(int n);
  void setMaxQueue(int n);
  void setUseAdapters(bool on);

  // The load generator.
  bool startLoad();
  void stopLoad();
  bool loadRunning() const { return loadRunning_; }
  void setLoadTarget(const QString& url, const QString& api, const QString& header = QString());
  TargetEditor* targetEditor() const { return targets_; }
  // The target the last load run went to, as startLoad built it (URL, API, model, headers, TLS).
  const servelab::LoadTarget& lastLoadTarget() const { return lastTarget_; }
  void setScenario(const QString& scenario);
  void setClients(const QString& levels);
  void setLoadRequests(int n);
  void setLoadNewTokens(int n);

  // Views the tests read.
  QTableWidget* requestTable() const { return table_; }
  QString metricsText() const;
  const servelab::LoadReport& lastReport() const { return report_; }

  // Saved runs (serving/saved_runs.cpp): the last run written as load_report_json's text; a saved run
  // (this tab's or servelab-cli loadgen --save-result's) reopened as the current one; or drawn beside
  // the current one. False, the reason on the runs' line and nothing changed, when the file cannot be
  // written or is not a saved run.
  bool saveRun(const QString& path);
  bool openRun(const QString& path);
  bool compareWith(const QString& path);
  void clearComparison();
  const servelab::LoadReport& comparedReport() const { return compared_; }
  QString runNote() const;

 Q_SIGNALS:
  void serverStarted(const QString& url);
  // The server job ended: ok is false when it could not start or failed (message says why).
  void serverStopped(bool ok, const QString& message);
  void loadFinished(bool ok, const QString& message);

 private:
  void onListening(int port);
  void onSnapshot(const ServeSnapshot& snap);
  void onLoadStream(const servelab::StreamTiming& stream);
  void onLoadLevel(const servelab::LoadLevel& level);
  void onLoadDone(const servelab::LoadReport& report, const QString& error);
  // The target's own figures from its /metrics (a server other than ours), or why there are none.
  void onRemoteLoad(double seconds, const servelab::ServerLoad& load, const QString& error);
  void startRemoteScrape(const servelab::LoadTarget& target);
  void stopRemoteScrape();
  // One point of the occupancy chart: running, waiting and KV use, whichever server they come from.
  void appendOccupancy(double seconds, const servelab::ServerLoad& load);
  void updateButtons();
  void resetLiveCharts();
  // The charts of the current run and the one compared with it (load_result_charts.h).
  void drawRuns();
  QLayout* makeRunButtons();  // Open run…, Compare…, Save run…

  // Server form.
  QSpinBox* port_;
  QSpinBox* maxBatch_;
  QSpinBox* tokenBudget_;
  QSpinBox* maxQueue_;
  QSpinBox* positions_;
  QCheckBox* useAdapters_;
  QPushButton* start_;
  QPushButton* stop_;
  QLineEdit* url_edit_;
  QPushButton* copy_;
  QLabel* serverStatus_;
  // Load generator form.
  TargetEditor* targets_;
  QComboBox* scenario_;
  QLineEdit* clients_;
  QComboBox* arrival_;
  QSpinBox* loadRequests_;
  QSpinBox* loadTokens_;
  QLineEdit* slo_;
  QPushButton* loadRun_;
  QPushButton* loadStop_;
  QLabel* loadSummary_;
  QLabel* runNote_;
  // Views.
  QTableWidget* table_;
  QPlainTextEdit* metrics_;
  ChartView* ttftChart_;
  ChartView* itlChart_;
  ChartView* occupancyChart_;
  ChartView* loadChart_;
  ChartView* ttftDistChart_;
  ChartView* itlDistChart_;
  ChartView* goodputChart_;
  QTabWidget* views_;  // Server | Load runs

  std::function<QVector<servelab::AdapterSource>()> adapters_;
  ModelSummary model_;
  QPointer<EngineJob> serverJob_;
  QString url_, serverError_;
  servelab::ServeMetrics last_;  // the previous snapshot's, for per-interval means
  double lastSeconds_ = 0;
  QSet<qint64> ttftSeen_;
  int tableRows_ = 0;

  // The target's /metrics, read while a load run goes to a server other than ours.
  std::thread scrapeThread_;
  std::atomic<bool> scrapeStop_{false};
  bool scrapingRemote_ = false;
  QString remoteUrl_;

  std::thread loadThread_;
  std::atomic<bool> loadCancel_{false};
  bool loadRunning_ = false;
  bool scripted_ = false;  // run() started the load: its end is the run's end
  servelab::LoadReport report_;
  servelab::LoadTarget lastTarget_;
  QString runName_;  // the current run's name beside a compared one (its file's, or "this run")
  servelab::LoadReport compared_;
  QString comparedName_;  // empty: nothing compared
};

}  // namespace servelab::ui
