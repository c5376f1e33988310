// The scripted mode of the main window (--tab/--lesson, --run, --page, --screenshot, --export-chart,
// --report): one run or picture from the command line, then exit with its status.
#include <QApplication>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QTabBar>
#include <QTabWidget>
#include <QTimer>
#include <cstdio>

#include "chart_view.h"
#include "engine_controller.h"
#include "experiment_tab.h"
#include "lessons/lessons_panel.h"
#include "main_window.h"
#include "models_dialog.h"
#include "session_report.h"

namespace servelab::ui {

namespace {

// A page's name as its tab shows it, without the mnemonic's ampersand.
QString pageName(const QTabWidget* pages, int i) { return pages->tabText(i).remove(QLatin1Char('&')); }

// Brings the page named (a tab of one of the tab's page widgets: "Roofline") to the front; *chart is
// the chart on it, if the page is one. false with *error naming the pages there are.
bool showPage(QWidget* tab, const QString& name, ChartView** chart, QString* error) {
  QStringList names;
  for (QTabWidget* pages : tab->findChildren<QTabWidget*>()) {
    for (int i = 0; i < pages->count(); ++i) {
      names << pageName(pages, i);
      if (pageName(pages, i).compare(name, Qt::CaseInsensitive) != 0) continue;
      pages->setCurrentIndex(i);
      *chart = qobject_cast<ChartView*>(pages->widget(i));
      return true;
    }
  }
  *error =
      names.isEmpty()
          ? QObject::tr("no page \"%1\": this tab has no pages").arg(name)
          : QObject::tr("no page \"%1\" in this tab (pages: %2)").arg(name, names.join(QStringLiteral(", ")));
  return false;
}

}  // namespace

void MainWindow::runScript(const ScriptOptions& options) {
  script_ = options;
  // A script runs what the settings file says, or nothing: a value it cannot take is an error.
  if (!settingsIssues_.isEmpty()) {
    finishScript(
        false,
        tr("settings file %1: %2").arg(settings_->fileName(), settingsIssues_.join(QStringLiteral("; "))));
    return;
  }
  if (!options.exportChart.isEmpty()) {
    const QString suffix = QFileInfo(options.exportChart).suffix().toLower();
    if (!QStringList{QStringLiteral("png"), QStringLiteral("svg"), QStringLiteral("pdf"),
                     QStringLiteral("csv")}
             .contains(suffix)) {
      finishScript(false, tr("--export-chart %1: the file must end in .png, .svg, .pdf or .csv, not \".%2\"")
                              .arg(options.exportChart, suffix));
      return;
    }
  }
  if (!options.report.isEmpty()) {
    // Before the run, rather than after it: the report is what the script is for.
    if (const QString problem = fileWriteProblem(options.report); !problem.isEmpty()) {
      script_.report.clear();  // nothing to try again when the script ends
      finishScript(false, tr("cannot write the report to %1: %2").arg(options.report, problem));
      return;
    }
  }
  if (!options.dialog.isEmpty() && options.dialog != QLatin1String("models")) {
    finishScript(false, tr("unknown dialog \"%1\" (dialogs: models)").arg(options.dialog));
    return;
  }
  connect(engine_, &EngineController::rejected, this, [this](const QString& why) { lastRejection_ = why; });
  if (!options.lesson.isEmpty()) {
    QString why;
    if (!openLesson(options.lesson, options.step, &why)) {
      finishScript(false, why);
      return;
    }
  }
  if (!options.tab.isEmpty() && !selectTab(options.tab)) {
    finishScript(false,
                 tr("unknown tab \"%1\" (tabs: %2)").arg(options.tab, tabIds().join(QStringLiteral(", "))));
    return;
  }
  if (!options.page.isEmpty()) {
    QString why;
    ChartView* chart = nullptr;
    if (!currentTab() || !showPage(currentTab(), options.page, &chart, &why)) {
      finishScript(false, tr("--page: %1").arg(why));
      return;
    }
    scriptChart_ = chart;
  }
  auto start = [this] {
    if (scriptStarted_) return;
    scriptStarted_ = true;
    ExperimentTab* t = currentTab();
    if (!script_.dialog.isEmpty()) {
      // The picture is of the dialog once its scan has filled the table.
      scriptDialog_ = showModels();
      connect(scriptDialog_, &ModelsDialog::scanFinished, this,
              [this] { QTimer::singleShot(400, this, [this] { finishScript(true, QString()); }); });
      return;
    }
    if (!script_.lesson.isEmpty() && script_.run) {
      // The panel's Run: the step's settings into its tab, the run, then the notice line.
      connect(
          lessons_, &LessonsPanel::stepFinished, this,
          [this](bool ok, const QString& message) {
            QTimer::singleShot(400, this, [this, ok, message] { finishScript(ok, message); });
          },
          Qt::SingleShotConnection);
      lessons_->runStep();
      return;
    }
    if (!script_.run) {
      // Give the window a moment to lay out and paint before the picture is taken.
      QTimer::singleShot(400, this, [this] { finishScript(true, QString()); });
      return;
    }
    connect(t, &ExperimentTab::runFinished, this, [this](bool ok, const QString& message) {
      QTimer::singleShot(400, this, [this, ok, message] { finishScript(ok, message); });
    });
    if (!(script_.preset.isEmpty() ? t->run() : t->runPresetId(script_.preset))) {
      // The tab's own words (or the engine's), not only that it did not start.
      const QString why = !t->refusal().isEmpty() ? t->refusal() : lastRejection_;
      finishScript(false, why.isEmpty() ? tr("the %1 experiment could not start").arg(t->tabId())
                                        : tr("the %1 experiment could not start: %2").arg(t->tabId(), why));
    }
  };
  if (engine_->state() == EngineController::State::Idle)
    start();
  else
    connect(this, &MainWindow::modelReady, this, start);
}

void MainWindow::finishScript(bool ok, const QString& message) {
  ExperimentTab* t = currentTab();
  QString error = message;
  if (ok && !script_.screenshot.isEmpty()) {
    const QPixmap shot = scriptDialog_ ? scriptDialog_->grab() : grab();
    if (!shot.save(script_.screenshot)) {
      ok = false;
      error = tr("cannot write the screenshot to %1").arg(script_.screenshot);
    }
  }
  if (ok && !script_.exportChart.isEmpty() && t) {
    QString why;
    const bool csv = script_.exportChart.endsWith(QLatin1String(".csv"), Qt::CaseInsensitive);
    ChartView* chart = scriptChart_ ? scriptChart_.data() : t->primaryChart();
    if (!(csv ? chart->exportCsv(script_.exportChart, &why)
              : chart->exportImage(script_.exportChart, &why))) {
      ok = false;
      error = why;
    }
  }
  if (!script_.report.isEmpty() && isSessionReportPath(script_.report)) {
    QString why;
    if (!exportReport(script_.report, &why)) {
      ok = false;
      error = why;
    }
  } else if (!script_.report.isEmpty() && t) {
    QFile f(script_.report);
    QJsonObject o = t->lastResult();
    if (!script_.lesson.isEmpty()) {
      o[QStringLiteral("lesson")] = script_.lesson;
      o[QStringLiteral("step")] = script_.step;
      o[QStringLiteral("notice")] = lessons_->noticeText();
    }
    o[QStringLiteral("ok")] = ok;
    if (!ok) o[QStringLiteral("error")] = error;
    if (!f.open(QIODevice::WriteOnly) || f.write(QJsonDocument(o).toJson(QJsonDocument::Compact)) < 0) {
      ok = false;
      error = tr("cannot write the report to %1").arg(script_.report);
    }
  }
  if (!ok) std::fprintf(stderr, "servelab: %s\n", qPrintable(error.simplified()));
  // Queued: a script can fail before the event loop runs, and exit() before exec() is lost.
  QTimer::singleShot(0, qApp, [ok] { QCoreApplication::exit(ok ? 0 : 1); });
}

}  // namespace servelab::ui
