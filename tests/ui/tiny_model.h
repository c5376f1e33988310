#pragma once
// The tiny random GPT-2 folder (32 wide, the real GPT-2 tokenizer) that the UI suites load: written
// once per suite into its temporary folder; and a window with it loaded.
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

// A shown window with a settings file of its own and the model at folder loaded; nullptr when the
// load does not finish within timeoutMs.
inline std::unique_ptr<MainWindow> windowWithModel(const QString& settingsPath, const QString& folder,
                                                   int timeoutMs = 120000) {
  auto w = std::make_unique<MainWindow>(std::make_unique<QSettings>(settingsPath, QSettings::IniFormat));
  w->show();
  QSignalSpy ready(w.get(), &MainWindow::modelReady);
  w->loadFolder(folder);
  if (!ready.wait(timeoutMs)) return nullptr;
  return w;
}

}  // namespace servelab::ui
