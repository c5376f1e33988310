#pragma once
// The ServeLab window: a model bar, one tab per experiment, a status bar and a log dock, over an
// EngineController whose engine runs on its own thread.
#include <QMainWindow>
#include <QPointer>
#include <QSettings>
#include <memory>

#include "chart_view.h"
#include "engine_controller.h"

class QTabWidget;
class QComboBox;
class QSpinBox;
class QCheckBox;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QToolButton;
class QMenu;
class QAction;
class QDockWidget;

namespace servelab::ui {

class ExperimentTab;

// What `servelab --tab X --run --screenshot a.png --export-chart b.svg --report c.json` asks for
// (or `--lesson NAME --step N --run ...`: the Lessons panel's step N of that lesson instead of a tab).
struct ScriptOptions {
  QString tab;
  QString lesson;  // a lesson id: the panel is shown on it, and --run runs its step
  int step = 1;    // with lesson: 1-based
  bool run = false;
  QString screenshot;
  QString exportChart;
  QString report;  // .html or .pdf: the session report; any other name: the run's result as JSON
  QString preset;  // with run: the tab's named preset instead of its Run button
  QString dialog;  // "models": open File → Models on this computer; the screenshot is of it
  QString page;    // a page of the tab to bring to the front ("Roofline"); --export-chart takes its chart
  bool active() const { return run || !screenshot.isEmpty() || !exportChart.isEmpty(); }
};

class AboutDialog;
class LessonsPanel;
class ModelsDialog;
class SessionLog;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // settings: where parameters, the last model and the window geometry persist.
  explicit MainWindow(std::unique_ptr<QSettings> settings, QWidget* parent = nullptr);
  // One warning line on stderr per settings value a tab could not take (the default was kept).
  void warnSettingsIssues() const;
  ~MainWindow() override;

  EngineController* engine() const { return engine_; }
  QList<ExperimentTab*> tabs() const { return tabs_; }
  ExperimentTab* tab(const QString& id) const;
  ExperimentTab* currentTab() const;
  bool selectTab(const QString& id);
  QStringList tabIds() const;

  // The Lessons panel (View → Lessons, the toolbar's Lessons button) and its dock.
  LessonsPanel* lessons() const { return lessons_; }
  QDockWidget* lessonsDock() const { return lessonsDock_; }
  // Shows the panel on a lesson's step (1-based); false with *error (one line) when there is no
  // such lesson or step.
  bool openLesson(const QString& id, int step, QString* error);
  // Problems of the built-in lesson files (a lesson with any is left out of the panel; the tests
  // keep this empty).
  QStringList lessonProblems() const { return lessonProblems_; }

  // Loads the model of the saved settings (or the built-in one); called once after show().
  void loadInitialModel(const QString& folderOverride = QString());
  // The GPT-2 small shape with random weights (the course's exact tensors; its text is noise).
  void loadDemo();
  // The built-in real model, SmolLM2-135M-Instruct.
  void loadBuiltin();
  // A Hugging Face folder or a .gguf file.
  void loadFolder(const QString& folder);
  // The text of the error banner (empty when hidden) and of the log.
  QString errorText() const;
  // The banner listing the settings file's values the app could not take (empty when hidden).
  QString settingsWarningText() const;
  QString logText() const;
  QStringList recentModels() const { return recent_; }

  ChartTheme theme() const { return theme_; }
  void setTheme(ChartTheme theme);
  // View → Presenter mode, for projectors: the application's text and every chart's fonts larger,
  // the charts in full contrast with wider lines, the log panel hidden (shown again after, if it
  // was). Saved with the settings.
  bool presenter() const { return presenter_; }
  void setPresenter(bool on);
  // Help → About ServeLab: the version, the licences and the machine (as the engine reports it);
  // the dialog deletes itself when closed.
  AboutDialog* showAbout();
  // File → Models on this computer: the catalog of models on disk; opening one loads it as File →
  // Open does. The dialog deletes itself when closed.
  ModelsDialog* showModels();

  // Runs a scripted session and quits the application with 0 on success, 1 on failure.
  void runScript(const ScriptOptions& options);

  // The runs of this session, as the report tells them.
  SessionLog* sessionLog() const { return sessionLog_; }
  // Writes the session report (.html or .pdf by the suffix); false with *error (one line) when it
  // cannot. *pages: the PDF's pages. The session's runs stay recorded either way.
  bool exportReport(const QString& path, QString* error = nullptr, int* pages = nullptr);

 public Q_SLOTS:
  void runCurrent();
  void stopCurrent();
  void exportCurrentChart();
  // File → Export report…: asks for a file (PDF or HTML) and writes the session report there.
  void exportReportWithDialog();
  // Writes the session report to path, as File → Export report… does: a failure shows in the error
  // banner (and the log), a success in the status bar.
  bool exportReportTo(const QString& path);

 Q_SIGNALS:
  void modelReady(const servelab::ui::ModelSummary& model);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildModelBar();
  void buildMenus();
  void buildStatusBar();
  void buildLessons();
  void onModelLoaded(const ModelSummary& model);
  void onModelLoadFailed(const QString& message);
  void onStateChanged();
  void showError(const QString& message);
  void showSettingsIssues();
  void appendLog(const QString& line);
  void addRecent(const QString& folder);
  void rebuildRecentMenu();
  ModelRequest requestFor(const QString& folder) const;
  void saveSettings();
  void finishScript(bool ok, const QString& message);

  std::unique_ptr<QSettings> settings_;
  EngineController* engine_;
  QTabWidget* tabWidget_;
  QList<ExperimentTab*> tabs_;

  QLabel* modelLabel_;
  QComboBox* device_;
  QComboBox* dtype_;
  QSpinBox* threads_;
  QCheckBox* cudaGraphs_;
  QToolButton* recentButton_;
  QMenu* recentMenu_;
  QProgressBar* loadProgress_;
  QLabel* errorBanner_;
  QLabel* settingsBanner_;
  bool savedDemo_ = false;  // the settings' model/demo and model/folder, for loadInitialModel()
  QString savedFolder_;
  QPlainTextEdit* log_;
  QLabel* deviceStatus_;
  QLabel* dtypeStatus_;
  QLabel* threadsStatus_;
  QLabel* memoryStatus_;
  QLabel* stateStatus_;
  QAction* runAction_;
  QAction* stopAction_;
  QAction* darkAction_;
  QAction* presenterAction_ = nullptr;
  QAction* reportAction_;
  SessionLog* sessionLog_;
  LessonsPanel* lessons_ = nullptr;
  QDockWidget* lessonsDock_ = nullptr;
  QStringList lessonProblems_;

  QStringList recent_;
  QString currentFolder_;
  bool currentDemo_ = false;
  QString pendingFolder_;
  ChartTheme theme_ = ChartTheme::Light;
  bool presenter_ = false;
  double normalPointSize_ = 0;  // the application font's size outside presenter mode
  bool logShownBeforePresenter_ = true;
  ScriptOptions script_;
  bool scriptStarted_ = false;
  QStringList settingsIssues_;           // settings values the tabs could not take (form_widgets.h)
  QString lastRejection_;                // the engine's last reason for refusing a job
  QPointer<ChartView> scriptChart_;      // the chart on the page a script brought to the front
  QPointer<ModelsDialog> scriptDialog_;  // the dialog a script opened (its screenshot is of it)
};

}  // namespace servelab::ui
