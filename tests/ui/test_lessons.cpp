// The Lessons panel on the offscreen platform: every lesson file parses and names only tabs,
// settings keys, presets and result values that exist (a deliberately broken lesson is refused),
// the notice templates, one real step run on the tiny test model with its notice filled from the
// tab's result values, a stopped step, progress kept in QSettings (garbage reported), the dock's
// toggles and keys, and the scripted --lesson/--step mode with its failures.
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QtWidgets>
#include <memory>

#include "engine_controller.h"
#include "engine_job.h"
#include "experiment_tab.h"
#include "form_widgets.h"
#include "job_spy.h"
#include "kv_cache_tab.h"
#include "lessons/lesson.h"
#include "lessons/lessons_panel.h"
#include "main_window.h"
#include "tiny_model.h"

using namespace servelab::ui;

namespace {

constexpr int kRunTimeoutMs = 300000;

// The course's lessons first, in its order, then those beyond it.
const QStringList kCourseOrder = {
    QStringLiteral("kv-cache"),     QStringLiteral("batching"),   QStringLiteral("continuous-batching"),
    QStringLiteral("quantization"), QStringLiteral("multi-lora"), QStringLiteral("serving")};

// A lesson whose every field is well formed, with the given step fields spliced in.
QByteArray lessonJson(const QString& stepFields) {
  return QStringLiteral(R"({"title": "Broken on purpose", "narrative": "For the test.", "steps": [
      {"title": "One", "text": "A step.", %1}]})")
      .arg(stepFields)
      .toUtf8();
}

std::optional<Lesson> parsed(const QString& stepFields, QString* error) {
  return parseLesson(lessonJson(stepFields), QStringLiteral("99-broken.json"), error);
}

}  // namespace

class TestLessons : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString tiny_;
  QString settingsPath(const QString& name) { return tmp_.filePath(name + QStringLiteral(".ini")); }

  std::unique_ptr<MainWindow> makeWindow(const QString& settingsName) {
    return shownWindow(settingsPath(settingsName));
  }

  // The app as a script runs it; its exit code and the lines it wrote on stderr.
  int runApp(const QStringList& args, QStringList* errLines) {
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI), args);
    if (!app.waitForFinished(kRunTimeoutMs)) return -1;
    if (app.exitStatus() != QProcess::NormalExit) return -2;
    for (const QString& l :
         QString::fromUtf8(app.readAllStandardError()).split(QLatin1Char('\n'), Qt::SkipEmptyParts))
      if (l.startsWith(QStringLiteral("servelab: "))) *errLines << l;
    return app.exitCode();
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    tiny_ = tmp_.filePath(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  void everyLessonFileParses() {
    // Every file of resources/lessons is compiled in, and nothing else is.
    auto w = makeWindow(QStringLiteral("parse"));  // registers the resources
    const QStringList onDisk = QDir(QStringLiteral(SERVELAB_SOURCE_DIR "/resources/lessons"))
                                   .entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name);
    const QStringList compiled =
        QDir(QStringLiteral(":/servelab/lessons")).entryList(QDir::Files, QDir::Name);
    QVERIFY(onDisk.size() >= 10);
    QCOMPARE(compiled, onDisk);
    QStringList errors;
    const QList<Lesson> lessons = loadLessons(QStringLiteral(":/servelab/lessons"), &errors);
    QVERIFY2(errors.isEmpty(), qPrintable(errors.join(QLatin1Char('\n'))));
    QCOMPARE(lessons.size(), onDisk.size());
    QStringList ids;
    for (const Lesson& l : lessons) {
      ids << l.id;
      QVERIFY(!l.title.isEmpty() && !l.narrative.isEmpty());
      QVERIFY2(!l.steps.isEmpty(), qPrintable(l.id));
      for (const LessonStep& s : l.steps)
        QVERIFY(!s.title.isEmpty() && !s.text.isEmpty() && !s.notice.isEmpty());
    }
    QCOMPARE(ids.mid(0, kCourseOrder.size()), kCourseOrder);
    for (const char* beyond : {"paged-kv", "chunked-prefill", "speculative", "roofline"})
      QVERIFY2(ids.contains(QLatin1String(beyond)), beyond);
    // The window's panel offers them all (it leaves out a lesson that names what its tab lacks), in
    // the same order.
    QVERIFY2(w->lessonProblems().isEmpty(), qPrintable(w->lessonProblems().join(QLatin1Char('\n'))));
    QCOMPARE(w->lessons()->lessonIds(), ids);
  }

  void everyStepNamesWhatItsTabHas() {
    auto w = makeWindow(QStringLiteral("check"));
    const TabCatalog catalog = tabCatalog(w->tabs());
    QCOMPARE(catalog.keys().size(), w->tabIds().size());
    // Each tab has a fixed set of named result values, without repeats.
    for (ExperimentTab* t : w->tabs()) {
      const QStringList names = t->resultValueNames();
      QVERIFY2(!names.isEmpty(), qPrintable(t->tabId()));
      QCOMPARE(QSet<QString>(names.begin(), names.end()).size(), names.size());
      QVERIFY2(t->resultValues().isEmpty(), qPrintable(t->tabId()));  // nothing before a run
    }
    QStringList usedTabs;
    // Every file, not only those the panel took.
    QStringList errors;
    const QList<Lesson> lessons = loadLessons(QStringLiteral(":/servelab/lessons"), &errors);
    QVERIFY(errors.isEmpty() && !lessons.isEmpty());
    for (const Lesson& l : lessons) {
      const QStringList problems = checkLesson(l, catalog);
      QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QLatin1Char('\n'))));
      for (const LessonStep& s : l.steps) {
        usedTabs << s.tab;
        ExperimentTab* tab = w->tab(s.tab);
        QVERIFY2(tab, qPrintable(s.tab));
        const QStringList keys = tabSettingsKeys(*tab);
        for (const auto& [key, value] : s.settings)
          QVERIFY2(keys.contains(key), qPrintable(QStringLiteral("%1: %2.%3").arg(l.id, s.tab, key)));
        // The values too: the tab takes each as it takes a settings file's.
        QString error;
        QVERIFY2(applyStepSettings(*tab, s, &error), qPrintable(QStringLiteral("%1: %2").arg(l.id, error)));
        if (!s.preset.isEmpty()) QVERIFY(tab->presetIds().contains(s.preset));
      }
    }
    QVERIFY(settingsIssues().isEmpty());
    // Every tab of the app is visited by some lesson.
    for (const QString& id : w->tabIds()) QVERIFY2(usedTabs.contains(id), qPrintable(id));
  }

  void aBrokenLessonIsRefused() {
    auto w = makeWindow(QStringLiteral("broken"));
    const TabCatalog catalog = tabCatalog(w->tabs());
    QString error;
    // A control the tab does not have: the file parses (its shape is right), the check names it.
    auto missing =
        parsed(QStringLiteral(R"("tab": "kv-cache", "settings": {"newTokens": 8, "noSuchControl": 3},
        "notice": "{decode_speedup}x")"),
               &error);
    QVERIFY2(missing, qPrintable(error));
    QCOMPARE(missing->id, QStringLiteral("broken"));
    QStringList problems = checkLesson(*missing, catalog);
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems.front().contains(QStringLiteral("kv-cache tab has no setting \"noSuchControl\"")),
             qPrintable(problems.front()));
    QVERIFY(problems.front().contains(QStringLiteral("newTokens")));  // it lists what exists
    // Nor can it be applied to the tab.
    QVERIFY(!applyStepSettings(*w->tab(QStringLiteral("kv-cache")), missing->steps.front(), &error));
    QVERIFY2(error.contains(QStringLiteral("noSuchControl")), qPrintable(error));
    // A tab that does not exist, a preset the tab does not have, a value it does not give.
    auto noTab = parsed(QStringLiteral(R"("tab": "warp-drive", "notice": "x")"), &error);
    QVERIFY(noTab);
    problems = checkLesson(*noTab, catalog);
    QVERIFY(problems.size() == 1 && problems.front().contains(QStringLiteral("no tab \"warp-drive\"")));
    auto noPreset = parsed(QStringLiteral(R"("tab": "batching", "preset": "faster", "notice": "x")"), &error);
    QVERIFY(noPreset);
    problems = checkLesson(*noPreset, catalog);
    QVERIFY2(problems.size() == 1 && problems.front().contains(QStringLiteral("no preset \"faster\"")),
             qPrintable(problems.join(QLatin1Char('\n'))));
    auto noValue = parsed(
        QStringLiteral(R"("tab": "kv-cache", "notice": "{decode_speedup} and {warp_factor:1}")"), &error);
    QVERIFY(noValue);
    problems = checkLesson(*noValue, catalog);
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems.front().contains(QStringLiteral("{warp_factor}")) &&
                 problems.front().contains(QStringLiteral("first_token_steps")),
             qPrintable(problems.front()));
    // A value the tab cannot take is refused the way a settings file's is (named by key).
    auto badValue = parsed(
        QStringLiteral(R"("tab": "kv-cache", "settings": {"newTokens": "many"}, "notice": "x")"), &error);
    QVERIFY(badValue);
    QVERIFY(checkLesson(*badValue, catalog).isEmpty());
    QVERIFY(!applyStepSettings(*w->tab(QStringLiteral("kv-cache")), badValue->steps.front(), &error));
    QVERIFY2(error.contains(QStringLiteral("kv-cache/newTokens")) && error.contains(QStringLiteral("many")),
             qPrintable(error));
    QVERIFY(settingsIssues().isEmpty());  // the check leaves the app's list as it was

    // Files that are not lessons: each refused with one line naming the file and the problem.
    const struct {
      QByteArray json;
      const char* name;
      const char* expected;
    } bad[] = {
        {"{\"title\": \"x\", \"narrative\": \"y\", \"steps\": []}", "01-empty.json", "non-empty array"},
        {"{\"title\": \"x\", \"narrative\": \"y\", \"steps\": [], \"extra\": 1}", "01-extra.json",
         "unknown field \"extra\""},
        {"{\"title\": \"x\"", "01-cut.json", "not JSON"},
        {"{\"title\": \"x\", \"narrative\": \"y\", \"steps\": [{\"title\": \"t\", \"text\": \"t\", \"tab\": "
         "\"kv-cache\", "
         "\"notice\": \"{decode_speedup\"}]}",
         "01-brace.json", "without its \"}\""},
        {"{\"title\": \"x\", \"narrative\": \"y\", \"steps\": [{\"title\": \"t\", \"text\": \"t\", \"tab\": "
         "\"kv-cache\", "
         "\"notice\": \"{Speed Up}\"}]}",
         "01-name.json", "is not a placeholder"},
        {"{\"title\": \"x\", \"narrative\": \"y\", \"steps\": [{\"title\": \"t\", \"tab\": \"kv-cache\", "
         "\"notice\": \"n\"}]}",
         "01-notext.json", "\"text\" is missing"},
        {"{\"title\": \"x\", \"narrative\": \"y\", \"steps\": [{\"title\": \"t\", \"text\": \"t\", \"tab\": "
         "\"kv-cache\", "
         "\"settings\": {\"newTokens\": {\"a\": 1}}, \"notice\": \"n\"}]}",
         "01-nested.json", "must be a string, number"},
        {"{}", "kv-cache.json", "named NN-id.json"},
    };
    for (const auto& b : bad) {
      QVERIFY2(!parseLesson(b.json, QLatin1String(b.name), &error), b.name);
      QVERIFY2(error.startsWith(QLatin1String(b.name)) && error.contains(QLatin1String(b.expected)),
               qPrintable(error));
    }
    // The loader leaves a file that is not a lesson out and says why; the others load, and the one
    // naming a control its tab lacks is caught by the check, as the window's check catches it.
    QTemporaryDir dir;
    const auto write = [&dir](const char* name, const QByteArray& text) {
      QFile f(dir.filePath(QLatin1String(name)));
      return f.open(QIODevice::WriteOnly) && f.write(text) == text.size();
    };
    QVERIFY(write("01-good.json", lessonJson(QStringLiteral(R"("tab": "kv-cache", "notice": "{speedup}")"))));
    QVERIFY(write("02-broken.json", "{\"title\": 3}"));
    QVERIFY(write(
        "03-missing-control.json",
        lessonJson(QStringLiteral(R"("tab": "batching", "settings": {"turboMode": true}, "notice": "x")"))));
    QStringList errors;
    const QList<Lesson> loaded = loadLessons(dir.path(), &errors);
    QCOMPARE(loaded.size(), 2);
    QCOMPARE(loaded.front().id, QStringLiteral("good"));
    QCOMPARE(errors.size(), 1);
    QVERIFY2(errors.front().startsWith(QStringLiteral("02-broken.json: \"title\"")),
             qPrintable(errors.front()));
    QVERIFY(checkLesson(loaded.front(), catalog).isEmpty());
    problems = checkLesson(loaded.back(), catalog);
    QVERIFY2(problems.size() == 1 &&
                 problems.front().startsWith(QStringLiteral(
                     "lesson missing-control, step 1: the batching tab has no setting \"turboMode\"")),
             qPrintable(problems.join(QLatin1Char('\n'))));
  }

  void noticeTemplatesFillFromValues() {
    QString error;
    const QMap<QString, double> values{{QStringLiteral("decode_speedup"), 5.271},
                                       {QStringLiteral("first_token_steps"), 9.04},
                                       {QStringLiteral("kv_cache_mib"), 123.456}};
    QCOMPARE(
        fillNotice(QStringLiteral(
                       "decode {decode_speedup:1}x; first {first_token_steps:0} steps; {kv_cache_mib} MiB; "
                       "{first_token_steps}"),
                   values, &error)
            .value_or(error),
        QStringLiteral("decode 5.3x; first 9 steps; 123 MiB; 9.04"));
    QVERIFY(!fillNotice(QStringLiteral("{speedup}"), values, &error));
    QCOMPARE(error, QStringLiteral("the run gave no value for {speedup}"));
    QCOMPARE(noticePlaceholders(QStringLiteral("a {x} b {y_2:3}"), &error).value_or(QStringList{error}),
             (QStringList{QStringLiteral("x"), QStringLiteral("y_2")}));
    for (const char* bad : {"{x", "x}", "{x:7}", "{}", "{x{y}}"})
      QVERIFY2(!noticePlaceholders(QLatin1String(bad), &error), bad);
  }

  void panelTogglesAndStepKeys() {
    auto w = makeWindow(QStringLiteral("toggle"));
    QDockWidget* dock = w->lessonsDock();
    QVERIFY(!dock->isVisible());  // hidden until asked for
    QAction* toggle = dock->toggleViewAction();
    QCOMPARE(toggle->objectName(), QStringLiteral("lessonsAction"));
    // In the View menu and on the toolbar.
    bool inMenu = false;
    for (QAction* menu : w->menuBar()->actions())
      if (menu->menu() && menu->menu()->actions().contains(toggle)) inMenu = true;
    QVERIFY(inMenu);
    QVERIFY(w->findChild<QToolBar*>(QStringLiteral("modelBar"))->actions().contains(toggle));
    toggle->trigger();
    QVERIFY(dock->isVisible());
    LessonsPanel* panel = w->lessons();
    QCOMPARE(panel->currentLessonId(), QStringLiteral("kv-cache"));
    QCOMPARE(panel->currentStep(), 1);
    // Alt+Right / Alt+Left walk the steps, crossing into the next lesson at the end of one.
    auto* next = w->findChild<QAction*>(QStringLiteral("lessonNextAction"));
    auto* previous = w->findChild<QAction*>(QStringLiteral("lessonPreviousAction"));
    QCOMPARE(next->shortcut(), QKeySequence(Qt::ALT | Qt::Key_Right));
    QVERIFY(next->isEnabled());
    const int steps = static_cast<int>(panel->lessons().front().steps.size());
    for (int i = 1; i < steps; ++i) next->trigger();
    QCOMPARE(panel->currentStep(), steps);
    next->trigger();
    QCOMPARE(panel->currentLessonId(), QStringLiteral("batching"));
    QCOMPARE(panel->currentStep(), 1);
    previous->trigger();
    QCOMPARE(panel->currentLessonId(), QStringLiteral("kv-cache"));
    QCOMPARE(panel->currentStep(), steps);
    // The step box names the tab and the values the step sets.
    const QString settings = w->findChild<QLabel*>(QStringLiteral("lessonStepSettings"))->text();
    QVERIFY2(settings.contains(QStringLiteral("Generate")) &&
                 settings.contains(QStringLiteral("maxNewTokens = 32")),
             qPrintable(settings));
    // No model: Run is off until one is loaded.
    QVERIFY(!w->findChild<QPushButton*>(QStringLiteral("lessonRun"))->isEnabled());
    toggle->trigger();
    QVERIFY(!dock->isVisible());
    QVERIFY(!next->isEnabled());  // the step keys only while the panel is shown
  }

  void runningTheFirstKvCacheStepFillsTheNotice() {
    auto w = windowWithModel(settingsPath(QStringLiteral("run")), tiny_);
    QVERIFY(w);
    LessonsPanel* panel = w->lessons();
    w->lessonsDock()->show();
    QVERIFY(panel->showLesson(QStringLiteral("kv-cache"), 1));
    auto* kv = qobject_cast<KvCacheTab*>(w->tab(QStringLiteral("kv-cache")));
    kv->setNewTokens(5);  // the step sets its own values over these
    kv->setRepeats(7);
    w->selectTab(QStringLiteral("generate"));
    QSignalSpy finished(panel, &LessonsPanel::stepFinished);
    QVERIFY(panel->runStep());
    QCOMPARE(w->currentTab(), kv);  // Run switched to the step's tab
    QVERIFY(panel->noticeText().contains(QStringLiteral("Running")));
    QVERIFY(finished.wait(kRunTimeoutMs));
    QVERIFY2(finished.front().at(0).toBool(), qPrintable(finished.front().at(1).toString()));

    // The step's values were loaded into the tab's controls and ran.
    const LessonStep& step = panel->lessons().front().steps.front();
    const servelab::KvCacheTimingResult& r = kv->result();
    QCOMPARE(static_cast<int>(r.tokens.size()), 24);
    QCOMPARE(static_cast<int>(r.repeats), 3);
    QCOMPARE(w->findChild<QSpinBox*>(QStringLiteral("kvNewTokens"))->value(), 24);

    // The tab's values are its result's, computed here again independently.
    const QMap<QString, double> values = kv->resultValues();
    QCOMPARE(values.value(QStringLiteral("decode_speedup")), r.decode_speedup);
    QVector<double> decode(r.cache_ms.begin() + 1, r.cache_ms.end());
    std::sort(decode.begin(), decode.end());
    const double median = decode.size() % 2 ? decode[decode.size() / 2]
                                            : (decode[decode.size() / 2 - 1] + decode[decode.size() / 2]) / 2;
    QCOMPARE(values.value(QStringLiteral("first_token_steps")), r.cache_ms.front() / median);
    QCOMPARE(values.value(QStringLiteral("prompt_tokens")), static_cast<double>(r.prompt_ids.size()));

    // The notice is the template filled from those values, numbers as the template asks.
    const QString notice = panel->noticeText();
    QString error;
    QCOMPARE(notice, fillNotice(step.notice, values, &error).value_or(error));
    for (const QString& number :
         {QString::number(r.decode_speedup, 'f', 1), QString::number(r.cache_ms.front() / median, 'f', 1),
          QString::number(r.prompt_ids.size())})
      QVERIFY2(notice.contains(number), qPrintable(QStringLiteral("%1 not in: %2").arg(number, notice)));
    QVERIFY(!notice.contains(QLatin1Char('{')));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("lessonNotice"))->text().contains(notice.toHtmlEscaped()));
    QVERIFY(panel->isDone(QStringLiteral("kv-cache"), 1));
    QVERIFY(panel->progressText().startsWith(QStringLiteral("1 of ")));

    // Navigating away and back keeps the step's notice.
    panel->nextStep();
    QVERIFY(panel->noticeText().isEmpty());
    panel->previousStep();
    QCOMPARE(panel->noticeText(), notice);

    // A stopped run says so instead of quoting numbers.
    QVERIFY(panel->showLesson(QStringLiteral("kv-cache"), 2));
    onEveryJob(w->engine(), &EngineJob::point, w.get(), [&] { w->stopCurrent(); });
    QSignalSpy stopped(panel, &LessonsPanel::stepFinished);
    QVERIFY(panel->runStep());
    QVERIFY(stopped.wait(kRunTimeoutMs));
    QCOMPARE(stopped.front().at(0).toBool(), false);
    QVERIFY2(panel->noticeText().contains(QStringLiteral("stopped")), qPrintable(panel->noticeText()));
    QVERIFY(!panel->isDone(QStringLiteral("kv-cache"), 2));
    w->close();  // saves the progress
  }

  void progressPersists() {
    {
      auto w = makeWindow(QStringLiteral("run"));  // the file the run above saved
      LessonsPanel* panel = w->lessons();
      QVERIFY2(w->settingsWarningText().isEmpty(), qPrintable(w->settingsWarningText()));
      QCOMPARE(panel->currentLessonId(), QStringLiteral("kv-cache"));
      QCOMPARE(panel->currentStep(), 2);
      QCOMPARE(panel->doneSteps(), QStringList{QStringLiteral("kv-cache:1")});
      QVERIFY(w->lessonsDock()->isVisible());  // the window's layout, as it was left
      QVERIFY(panel->showLesson(QStringLiteral("quantization"), 2));
      w->close();
    }
    QSettings s(settingsPath(QStringLiteral("run")), QSettings::IniFormat);
    QCOMPARE(s.value(QStringLiteral("lessons/lesson")).toString(), QStringLiteral("quantization"));
    QCOMPARE(s.value(QStringLiteral("lessons/step")).toInt(), 2);
    auto again = makeWindow(QStringLiteral("run"));
    QCOMPARE(again->lessons()->currentLessonId(), QStringLiteral("quantization"));
    QCOMPARE(again->lessons()->currentStep(), 2);
    QVERIFY(again->lessons()->isDone(QStringLiteral("kv-cache"), 1));

    // Garbage is reported by key, like every other setting, and the defaults are kept.
    {
      QFile f(settingsPath(QStringLiteral("garbage")));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("[lessons]\nlesson=warp-drive\nstep=banana\ndone=kv-cache:1, kv-cache:99\n");
    }
    auto w = makeWindow(QStringLiteral("garbage"));
    const QString banner = w->settingsWarningText();
    for (const char* expected :
         {"lessons/lesson", "warp-drive", "lessons/step", "banana", "lessons/done", "kv-cache:99"})
      QVERIFY2(banner.contains(QLatin1String(expected)), qPrintable(banner));
    QCOMPARE(w->lessons()->currentLessonId(), QStringLiteral("kv-cache"));
    QCOMPARE(w->lessons()->currentStep(), 1);
    QVERIFY(w->lessons()->doneSteps().isEmpty());
    // A step beyond the saved lesson's is reported too.
    {
      QFile f(settingsPath(QStringLiteral("range")));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("[lessons]\nlesson=batching\nstep=7\n");
    }
    auto range = makeWindow(QStringLiteral("range"));
    QVERIFY2(range->settingsWarningText().contains(QStringLiteral("lessons/step")),
             qPrintable(range->settingsWarningText()));
    QCOMPARE(range->lessons()->currentLessonId(), QStringLiteral("batching"));
    QCOMPARE(range->lessons()->currentStep(), 1);
  }

  void scriptedLessonStep() {
    const QString shot = tmp_.filePath(QStringLiteral("lesson.png")),
                  report = tmp_.filePath(QStringLiteral("lesson.json"));
    QStringList err;
    const int code =
        runApp({QStringLiteral("--settings"), settingsPath(QStringLiteral("script")),
                QStringLiteral("--model"), tiny_, QStringLiteral("--lesson"), QStringLiteral("kv-cache"),
                QStringLiteral("--step"), QStringLiteral("1"), QStringLiteral("--run"),
                QStringLiteral("--screenshot"), shot, QStringLiteral("--report"), report},
               &err);
    QVERIFY2(code == 0, qPrintable(err.join(QLatin1Char('\n'))));
    QVERIFY(!QImage(shot).isNull());
    QFile rf(report);
    QVERIFY(rf.open(QIODevice::ReadOnly));
    const QJsonObject r = QJsonDocument::fromJson(rf.readAll()).object();
    QCOMPARE(r[QStringLiteral("ok")].toBool(), true);
    QCOMPARE(r[QStringLiteral("lesson")].toString(), QStringLiteral("kv-cache"));
    QCOMPARE(r[QStringLiteral("step")].toInt(), 1);
    QCOMPARE(r[QStringLiteral("experiment")].toString(), QStringLiteral("kv-cache"));
    const QString notice = r[QStringLiteral("notice")].toString();
    const QString speedup = QString::number(r[QStringLiteral("decode_speedup")].toDouble(), 'f', 1);
    QVERIFY2(notice.contains(QStringLiteral("%1x faster").arg(speedup)), qPrintable(notice));
  }

  void scriptedLessonFailsWithOneLine_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("exitCode");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown lesson")
        << QStringList{QStringLiteral("--lesson"), QStringLiteral("warp-drive"), QStringLiteral("--run")} << 1
        << QStringLiteral("unknown lesson \"warp-drive\" (lessons: kv-cache, batching");
    QTest::newRow("step past the end")
        << QStringList{QStringLiteral("--lesson"), QStringLiteral("kv-cache"), QStringLiteral("--step"),
                       QStringLiteral("9"), QStringLiteral("--run")}
        << 1 << QStringLiteral("lesson kv-cache has steps 1 to 3, not 9");
    QTest::newRow("step not a number")
        << QStringList{QStringLiteral("--lesson"), QStringLiteral("kv-cache"), QStringLiteral("--step"),
                       QStringLiteral("two"), QStringLiteral("--run")}
        << 2 << QStringLiteral("--step must be a whole number from 1, not \"two\"");
    QTest::newRow("step without lesson")
        << QStringList{QStringLiteral("--step"), QStringLiteral("2"), QStringLiteral("--tab"),
                       QStringLiteral("kv-cache"), QStringLiteral("--run")}
        << 2 << QStringLiteral("--step needs --lesson");
    QTest::newRow("lesson and tab") << QStringList{QStringLiteral("--lesson"), QStringLiteral("kv-cache"),
                                                   QStringLiteral("--tab"), QStringLiteral("batching"),
                                                   QStringLiteral("--run")}
                                    << 2 << QStringLiteral("without --tab and --preset");
  }
  void scriptedLessonFailsWithOneLine() {
    QFETCH(QStringList, args);
    QFETCH(int, exitCode);
    QFETCH(QString, message);
    QStringList err;
    const int code = runApp(QStringList{QStringLiteral("--settings"), settingsPath(QStringLiteral("fail")),
                                        QStringLiteral("--model"), tiny_} +
                                args,
                            &err);
    QCOMPARE(code, exitCode);
    QCOMPARE(err.size(), 1);
    QVERIFY2(err.front().contains(message), qPrintable(err.front()));
  }
};

QTEST_MAIN(TestLessons)
#include "test_lessons.moc"
