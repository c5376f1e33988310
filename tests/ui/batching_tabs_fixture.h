#pragma once
// What the Batching tab's and the Continuous batching tab's suites share (test_batching_tab,
// test_continuous_tab): the time limits, a file's bytes, and a fixture holding a temporary folder
// with the tiny model, windows with a settings file of their own and the app's scripted run of a tab.
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSettings>
#include <QTemporaryDir>
#include <QTest>
#include <memory>

#include "main_window.h"
#include "tiny_model.h"

namespace servelab::ui {

inline constexpr int kLoadTimeoutMs = 120000;
inline constexpr int kRunTimeoutMs = 300000;

inline QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// The suites' test classes derive from it (after QObject) and call initTiny() in initTestCase.
class BatchingTabsFixture {
 protected:
  QTemporaryDir tmp_;
  QString tiny_;

  void initTiny() {
    QVERIFY(tmp_.isValid());
    tiny_ = tmp_.filePath(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }
  QString settingsPath(const QString& name) { return tmp_.filePath(name + QStringLiteral(".ini")); }

  std::unique_ptr<MainWindow> makeWindow(const QString& settingsName) {
    auto w = std::make_unique<MainWindow>(
        std::make_unique<QSettings>(settingsPath(settingsName), QSettings::IniFormat));
    w->show();
    return w;
  }
  std::unique_ptr<MainWindow> tinyWindow(const QString& settingsName) {
    return windowWithModel(settingsPath(settingsName), tiny_, kLoadTimeoutMs);
  }

  // The app's scripted mode on `tab` (--tab TAB --run --screenshot --export-chart --report) with a
  // small run's settings for both tabs: it exits 0 with a screenshot, an SVG chart and a report
  // that says ok. The report and the chart's bytes come back for the tab's own checks.
  void runScripted(const QString& tab, QJsonObject* reportJson, QByteArray* chartBytes) {
    const QString ini = settingsPath(QStringLiteral("script-") + tab);
    {
      QSettings s(ini, QSettings::IniFormat);
      s.setValue(QStringLiteral("batching/batchSizes"), QStringLiteral("1,2"));
      s.setValue(QStringLiteral("batching/newTokens"), 3);
      s.setValue(QStringLiteral("batching/repeats"), 1);
      s.setValue(QStringLiteral("continuous/requests"), 4);
      s.setValue(QStringLiteral("continuous/maxBatch"), 2);
      s.setValue(QStringLiteral("continuous/longEvery"), 2);
      s.setValue(QStringLiteral("continuous/longTokens"), 6);
      s.setValue(QStringLiteral("continuous/shortTokens"), 2);
    }
    const QString shot = tmp_.filePath(tab + QStringLiteral(".png")),
                  chart = tmp_.filePath(tab + QStringLiteral("-chart.svg")),
                  report = tmp_.filePath(tab + QStringLiteral(".json"));
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI),
              {QStringLiteral("--settings"), ini, QStringLiteral("--model"), tiny_, QStringLiteral("--tab"),
               tab, QStringLiteral("--run"), QStringLiteral("--screenshot"), shot,
               QStringLiteral("--export-chart"), chart, QStringLiteral("--report"), report});
    QVERIFY(app.waitForFinished(kRunTimeoutMs));
    QVERIFY2(app.exitCode() == 0, app.readAllStandardError().constData());
    QVERIFY(!QImage(shot).isNull());
    QVERIFY(readAll(chart).contains("<svg"));
    *reportJson = QJsonDocument::fromJson(readAll(report)).object();
    QCOMPARE((*reportJson)[QStringLiteral("ok")].toBool(), true);
    *chartBytes = readAll(chart);
  }
};

}  // namespace servelab::ui
