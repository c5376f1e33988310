// servelab: the desktop face. Opens the main window on the last (or the built-in) model; with
// --tab/--run/--screenshot/--export-chart (or --lesson/--step instead of --tab) it runs one
// experiment, saves what was asked and exits (0 on success, 1 with one line on stderr otherwise).
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QIcon>
#include <QSettings>
#include <QStringDecoder>
#include <cstdio>
#include <memory>

#include "main_window.h"

int main(int argc, char** argv) {
  Q_INIT_RESOURCE(servelab);  // resources live in the static servelab_ui library
  QApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
  QApplication app(argc, argv);
  QApplication::setOrganizationName(QStringLiteral("ServeLab"));
  QApplication::setApplicationName(QStringLiteral("ServeLab"));
  QApplication::setApplicationVersion(QStringLiteral(SERVELAB_VERSION));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/servelab/icons/servelab.svg")));

  QCommandLineParser cli;
  cli.setApplicationDescription(QStringLiteral("ServeLab: watch what LLM serving techniques do, live."));
  cli.addHelpOption();
  cli.addVersionOption();
  const QCommandLineOption tab(QStringLiteral("tab"),
                               QStringLiteral("Tab to open: generate, kv-cache, batching, continuous."),
                               QStringLiteral("id"));
  const QCommandLineOption run(QStringLiteral("run"),
                               QStringLiteral("Run the tab's experiment with its saved or "
                                              "default parameters, then exit."));
  const QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                      QStringLiteral("Save a window screenshot when done, then exit."),
                                      QStringLiteral("png"));
  const QCommandLineOption exportChart(
      QStringLiteral("export-chart"),
      QStringLiteral("Save the tab's main chart (.png, .svg, .pdf or .csv) when "
                     "done, then exit."),
      QStringLiteral("file"));
  const QCommandLineOption report(
      QStringLiteral("report"),
      QStringLiteral("When done, write the run's result as JSON, or, for a file ending in .html or .pdf, "
                     "the session report (settings, summaries, tables and charts of the run)."),
      QStringLiteral("file"));
  const QCommandLineOption model(
      QStringLiteral("model"),
      QStringLiteral("Hugging Face model folder or .gguf file to load (default: the "
                     "built-in SmolLM2-135M-Instruct)."),
      QStringLiteral("path"));
  const QCommandLineOption demo(
      QStringLiteral("demo"),
      QStringLiteral("Start on the GPT-2 small shape with random weights (the course's exact "
                     "tensors; its text is noise)."));
  const QCommandLineOption settings(QStringLiteral("settings"),
                                    QStringLiteral("Read and write settings in this INI file instead of the "
                                                   "user's (for scripts and reproducible screenshots)."),
                                    QStringLiteral("ini"));
  const QCommandLineOption theme(QStringLiteral("theme"), QStringLiteral("light or dark."),
                                 QStringLiteral("name"));
  const QCommandLineOption presenter(
      QStringLiteral("presenter"),
      QStringLiteral("Presenter mode (View → Presenter mode): larger text, charts in full contrast, the log "
                     "hidden; on or off (saved like --theme)."),
      QStringLiteral("on|off"));
  const QCommandLineOption page(
      QStringLiteral("page"),
      QStringLiteral("Bring this page of the tab to the front (a chart behind another, e.g. Roofline); "
                     "--export-chart then saves its chart."),
      QStringLiteral("name"));
  const QCommandLineOption preset(
      QStringLiteral("preset"),
      QStringLiteral(
          "With --run: run the tab's named preset (continuous: fit-in-budget, shared-system-prompt, "
          "long-prompt; speculative: grounded, open, draft)."),
      QStringLiteral("name"));
  const QCommandLineOption dialog(
      QStringLiteral("dialog"),
      QStringLiteral("With --screenshot: open this dialog (models: File → Models on this computer) and save "
                     "it instead of the window."),
      QStringLiteral("name"));
  const QCommandLineOption lesson(
      QStringLiteral("lesson"),
      QStringLiteral("Open the Lessons panel on this lesson (kv-cache, batching, ...); with --run, run its "
                     "step (--step) as the panel's Run button does."),
      QStringLiteral("name"));
  const QCommandLineOption step(QStringLiteral("step"),
                                QStringLiteral("With --lesson: the step, from 1 (default 1)."),
                                QStringLiteral("n"));
  cli.addOptions({tab, run, screenshot, exportChart, report, model, demo, settings, theme, presenter, preset,
                  page, dialog, lesson, step});
  // The file a desktop opens with us (servelab.desktop's Exec=servelab %f), as --model.
  cli.addPositionalArgument(QStringLiteral("file"),
                            QStringLiteral("A .gguf file or model folder to load (as --model)."),
                            QStringLiteral("[file]"));
  cli.process(app);
  const QStringList files = cli.positionalArguments();
  if (files.size() > 1 || (files.size() == 1 && cli.isSet(model))) {
    std::fprintf(stderr, "servelab: give one model, either as --model or as the one file argument\n");
    return 2;
  }
  const bool modelGiven = cli.isSet(model) || !files.isEmpty();
  const QString modelPath = files.isEmpty() ? cli.value(model) : files.front();

  if (cli.isSet(settings)) {
    // A file that is not INI text, or a folder, would be read as no settings and overwritten.
    const QFileInfo file(cli.value(settings));
    if (file.isDir()) {
      std::fprintf(stderr, "servelab: --settings %s is a folder, not an INI file\n",
                   qPrintable(file.filePath()));
      return 2;
    }
    if (file.exists()) {
      // QSettings reads anything as INI, random bytes included: text is what a settings file is.
      QFile f(file.filePath());
      const bool readable = f.open(QIODevice::ReadOnly);
      const QByteArray bytes = readable ? f.read(64 << 20) : QByteArray();
      QStringDecoder utf8(QStringDecoder::Utf8);
      [[maybe_unused]] const QString text = utf8(bytes);
      QSettings probe(file.filePath(), QSettings::IniFormat);
      const char* problem =
          !readable || probe.status() == QSettings::AccessError ? "cannot be read"
          : bytes.contains('\0') || utf8.hasError() ? "not an INI settings file (it is not UTF-8 text)"
          : probe.status() != QSettings::NoError    ? "not an INI settings file (QSettings cannot parse it)"
                                                    : nullptr;
      if (problem) {
        std::fprintf(stderr, "servelab: --settings %s: %s\n", qPrintable(file.filePath()), problem);
        return 1;
      }
    }
  }
  std::unique_ptr<QSettings> store =
      cli.isSet(settings) ? std::make_unique<QSettings>(cli.value(settings), QSettings::IniFormat)
                          : std::make_unique<QSettings>();
  if (cli.isSet(demo)) {
    store->remove(QStringLiteral("model/folder"));
    store->setValue(QStringLiteral("model/demo"), true);
  } else if (modelGiven) {
    store->setValue(QStringLiteral("model/demo"), false);
  }
  if (cli.isSet(theme)) {
    const QString t = cli.value(theme);
    if (t != QLatin1String("light") && t != QLatin1String("dark")) {
      std::fprintf(stderr, "servelab: --theme must be light or dark, got \"%s\"\n", qPrintable(t));
      return 2;
    }
    store->setValue(QStringLiteral("ui/theme"), t);
  }
  if (cli.isSet(presenter)) {
    const QString p = cli.value(presenter);
    if (p != QLatin1String("on") && p != QLatin1String("off")) {
      std::fprintf(stderr, "servelab: --presenter must be on or off, got \"%s\"\n", qPrintable(p));
      return 2;
    }
    store->setValue(QStringLiteral("ui/presenter"), p == QLatin1String("on"));
  }

  servelab::ui::MainWindow window(std::move(store));
  window.show();
  servelab::ui::ScriptOptions script;
  script.tab = cli.value(tab);
  script.run = cli.isSet(run);
  script.screenshot = cli.value(screenshot);
  script.exportChart = cli.value(exportChart);
  script.report = cli.value(report);
  script.preset = cli.value(preset);
  script.page = cli.value(page);
  script.dialog = cli.value(dialog);
  script.lesson = cli.value(lesson);
  if (cli.isSet(step)) {
    bool ok = false;
    script.step = cli.value(step).toInt(&ok);
    if (!ok || script.step < 1) {
      std::fprintf(stderr, "servelab: --step must be a whole number from 1, not \"%s\"\n",
                   qPrintable(cli.value(step)));
      return 2;
    }
    if (script.lesson.isEmpty()) {
      std::fprintf(stderr, "servelab: --step needs --lesson\n");
      return 2;
    }
  }
  if (!script.lesson.isEmpty() && (!script.tab.isEmpty() || !script.preset.isEmpty())) {
    std::fprintf(
        stderr, "servelab: --lesson picks its step's tab and settings: give it without --tab and --preset\n");
    return 2;
  }
  if (!script.dialog.isEmpty() && script.screenshot.isEmpty()) {
    std::fprintf(stderr, "servelab: --dialog needs --screenshot\n");
    return 2;
  }
  if (!script.preset.isEmpty() && !script.run) {
    std::fprintf(stderr, "servelab: --preset needs --run\n");
    return 2;
  }
  if (!script.active()) window.warnSettingsIssues();
  window.loadInitialModel(cli.isSet(demo) ? QString() : modelPath);
  if (script.active() || !script.tab.isEmpty() || !script.lesson.isEmpty()) {
    QString why;
    if (script.active()) {
      window.runScript(script);
    } else if (!script.lesson.isEmpty()) {
      if (!window.openLesson(script.lesson, script.step, &why)) {
        std::fprintf(stderr, "servelab: %s\n", qPrintable(why));
        return 2;
      }
    } else if (!window.selectTab(script.tab)) {
      std::fprintf(stderr, "servelab: unknown tab \"%s\" (tabs: %s)\n", qPrintable(script.tab),
                   qPrintable(window.tabIds().join(QStringLiteral(", "))));
      return 2;
    }
  }
  return app.exec();
}
