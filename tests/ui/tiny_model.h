#pragma once
// The tiny random GPT-2 folder (32 wide, the real GPT-2 tokenizer) that the UI suites load: written
// once per suite into its temporary folder; and a window with it loaded.
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QString>
#include <cstdint>
#include <exception>
#include <memory>

#include "main_window.h"
#include "model/model_export.h"

namespace servelab::ui {

// Writes the model to folder; empty on success, else the reason in one line.
inline QString writeTinyModel(const QString& folder, uint64_t seed = 11) {
  try {
    servelab::export_random_gpt2_folder(folder.toStdString(), servelab::tiny_gpt2_config(), seed);
  } catch (const std::exception& e) {
    return QStringLiteral(
               "cannot write the tiny test model (run scripts/bootstrap for the GPT-2 tokenizer): %1")
        .arg(QString::fromUtf8(e.what()));
  }
  return {};
}

// A shown window with a settings file of its own, no model loaded yet.
inline std::unique_ptr<MainWindow> shownWindow(const QString& settingsPath) {
  auto w = std::make_unique<MainWindow>(std::make_unique<QSettings>(settingsPath, QSettings::IniFormat));
  w->show();
  return w;
}

// A file's bytes; empty when it cannot be read.
inline QByteArray fileBytes(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// A shown window with a settings file of its own and the model at folder loaded; nullptr when the
// load does not finish within timeoutMs.
inline std::unique_ptr<MainWindow> windowWithModel(const QString& settingsPath, const QString& folder,
                                                   int timeoutMs = 120000) {
  auto w = shownWindow(settingsPath);
  QSignalSpy ready(w.get(), &MainWindow::modelReady);
  w->loadFolder(folder);
  if (!ready.wait(timeoutMs)) return nullptr;
  return w;
}

// The app run as a script would (--run and friends in args, --report reportPath added) on the
// offscreen platform, and the report it wrote; an empty object, with *failure saying why, when it
// did not end within timeoutMs, exited non-zero or wrote no report.
inline QJsonObject runScriptedReport(const QString& app, QStringList args, const QString& reportPath,
                                     int timeoutMs, QString* failure) {
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
  p.setProcessEnvironment(env);
  p.start(app, args << QStringLiteral("--report") << reportPath);
  if (!p.waitForFinished(timeoutMs) || p.exitCode() != 0) {
    *failure = QStringLiteral("exit code %1: %2").arg(p.exitCode()).arg(QString::fromUtf8(p.readAll()));
    return {};
  }
  QFile f(reportPath);
  if (!f.open(QIODevice::ReadOnly)) {
    *failure = QStringLiteral("no report at %1").arg(reportPath);
    return {};
  }
  return QJsonDocument::fromJson(f.readAll()).object();
}

}  // namespace servelab::ui
