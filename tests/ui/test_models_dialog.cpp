// File → Models on this computer on the offscreen platform: the catalog of a temporary Hugging Face
// cache (HF_HUB_CACHE) in the table, the scan off the GUI thread, a folder added and remembered,
// a model that does not load refused with its reason, and Open loading the one that does.
#include <QAction>
#include <QImage>
#include <QLabel>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <filesystem>
#include <memory>

#include "../core/model_catalog_tree.h"
#include "main_window.h"
#include "model/model_catalog.h"
#include "models_dialog.h"

using namespace servelab::ui;
namespace fs = std::filesystem;

namespace {

constexpr int kScanTimeoutMs = 120000;
constexpr int kLoadTimeoutMs = 120000;

QString cell(QTableWidget* t, int row, int column) { return t->item(row, column)->text(); }

}  // namespace

class TestModelsDialog : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path root_, tinySnapshot_, bertSnapshot_, mine_;
  QString settingsPath_;

  std::unique_ptr<MainWindow> makeWindow() {
    auto w = std::make_unique<MainWindow>(std::make_unique<QSettings>(settingsPath_, QSettings::IniFormat));
    w->show();
    return w;
  }
  // The dialog File → Models opens, once its scan has filled the table.
  ModelsDialog* openModels(MainWindow& w) {
    auto* action = w.findChild<QAction*>(QStringLiteral("modelsAction"));
    if (!action) return nullptr;
    action->trigger();
    auto* d = w.findChild<ModelsDialog*>(QStringLiteral("modelsDialog"));
    if (!d) return nullptr;
    // The scan is a thread's: the dialog is up and the GUI thread free before it ends.
    if (!d->scanning() || !d->progressShown()) return nullptr;  // the busy bar while it runs
    QSignalSpy done(d, &ModelsDialog::scanFinished);
    if (!done.wait(kScanTimeoutMs)) return nullptr;
    if (d->progressShown()) return nullptr;  // and not after
    return d;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    root_ = tmp_.path().toStdString();
    settingsPath_ = tmp_.filePath(QStringLiteral("settings.ini"));
    // A Hugging Face cache of two models: the tiny GPT-2 (refs/main's snapshot) and a bert.
    const fs::path hub = root_ / "hub";
    tinySnapshot_ = hub / "models--org--tiny-gpt2" / "snapshots" / "abc";
    bertSnapshot_ = hub / "models--org--bert" / "snapshots" / "def";
    try {
      servelab::test::write_tiny_gpt2(tinySnapshot_);
      servelab::test::write_text(hub / "models--org--tiny-gpt2" / "refs" / "main", "abc");
      servelab::test::write_text(bertSnapshot_ / "config.json", R"({"model_type": "bert"})");
      servelab::test::write_text(bertSnapshot_ / "model.safetensors", "never read");
      mine_ = root_ / "mine";
      servelab::test::write_tiny_gpt2(mine_ / "tiny-copy");
    } catch (const std::exception& e) {
      QFAIL(qPrintable(QStringLiteral("cannot write the tiny test model (run scripts/bootstrap): %1")
                           .arg(QString::fromUtf8(e.what()))));
    }
    ::setenv("HF_HUB_CACHE", hub.c_str(), 1);
    ::setenv("HOME", (root_ / "home").c_str(), 1);  // no LM Studio folder there
    ::setenv("OLLAMA_MODELS", (root_ / "no-ollama").c_str(), 1);
    ::unsetenv("HF_HOME");
  }

  void rowsAndOpen() {
    auto w = makeWindow();
    ModelsDialog* d = openModels(*w);
    QVERIFY(d);
    auto* table = d->findChild<QTableWidget*>(QStringLiteral("modelsTable"));
    QVERIFY(table);
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(cell(table, 0, 0), QStringLiteral("org/bert"));
    QCOMPARE(cell(table, 0, 1), QStringLiteral("hf-cache"));
    QCOMPARE(cell(table, 0, 2), QStringLiteral("bert"));
    QVERIFY(cell(table, 0, 6).contains(QStringLiteral("model_type \"bert\" is not supported")));
    QCOMPARE(cell(table, 1, 0), QStringLiteral("org/tiny-gpt2"));
    QCOMPARE(cell(table, 1, 2), QStringLiteral("gpt2"));
    QCOMPARE(cell(table, 1, 3), QStringLiteral("safetensors"));
    QCOMPARE(cell(table, 1, 4), QStringLiteral("F32"));
    QCOMPARE(cell(table, 1, 5), QString::fromStdString(servelab::human_size(d->entries()[1].size_bytes)));
    QCOMPARE(cell(table, 1, 6), QStringLiteral("yes"));
    QVERIFY(d->statusText().startsWith(QStringLiteral("2 models found, 1 loads")));

    // The model that does not load: Open is off, and a double-click says why instead of loading.
    auto* open = d->findChild<QPushButton*>(QStringLiteral("openModelButton"));
    QVERIFY(open);
    // The first model that loads is selected at first, its path under the table.
    QCOMPARE(table->currentRow(), 1);
    QCOMPARE(d->detailsText(), QString::fromStdString(tinySnapshot_.string()));
    table->selectRow(0);
    QVERIFY(!open->isEnabled());
    // In the cell the model's path gives way to the reason; under the table, the whole of both.
    QVERIFY2(cell(table, 0, 6).startsWith(QStringLiteral("no: config.json at …/config.json: model_type")),
             qPrintable(cell(table, 0, 6)));
    QCOMPARE(d->detailsText(), QString::fromStdString(bertSnapshot_.string()) +
                                   QStringLiteral("\nDoes not load: ") +
                                   QString::fromStdString(d->entries()[0].why_not));
    QSignalSpy asked(d, &ModelsDialog::openRequested);
    d->openRow(0);
    QCOMPARE(asked.count(), 0);
    QVERIFY(d->statusText().contains(QStringLiteral("org/bert does not load: config.json at")));

    // Open loads the other through File → Open's path, and the dialog closes.
    table->selectRow(1);
    QVERIFY(open->isEnabled());
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    QPointer<ModelsDialog> alive(d);
    open->click();
    QCOMPARE(asked.count(), 1);
    QCOMPARE(asked.at(0).at(0).toString(), QString::fromStdString(tinySnapshot_.string()));
    QVERIFY(ready.wait(kLoadTimeoutMs));
    QCOMPARE(w->recentModels().front(), QString::fromStdString(tinySnapshot_.string()));
    QVERIFY(w->errorText().isEmpty());
    QTRY_VERIFY(alive.isNull());  // closed and deleted
  }

  void addedFolderIsRemembered() {
    {
      auto w = makeWindow();
      ModelsDialog* d = openModels(*w);
      QVERIFY(d);
      QSignalSpy done(d, &ModelsDialog::scanFinished);
      d->addFolder(QString::fromStdString(mine_.string()));
      QVERIFY(done.wait(kScanTimeoutMs));
      QCOMPARE(d->entries().size(), size_t{3});
      QCOMPARE(d->entries()[2].name, std::string("tiny-copy"));
      QCOMPARE(d->entries()[2].source, servelab::ModelSource::Folder);
      QVERIFY(d->entries()[2].loadable);
      QVERIFY(d->statusText().contains(QString::fromStdString(mine_.string())));
    }
    // A new window's dialog searches the remembered folder; one that is gone is named, not an error.
    QSettings(settingsPath_, QSettings::IniFormat)
        .setValue(QStringLiteral("models/folders"),
                  QStringList{QString::fromStdString(mine_.string()), tmp_.filePath(QStringLiteral("gone"))});
    auto w = makeWindow();
    ModelsDialog* d = openModels(*w);
    QVERIFY(d);
    QCOMPARE(d->entries().size(), size_t{3});
    QVERIFY2(d->statusText().contains(QStringLiteral("Not found: ") + tmp_.filePath(QStringLiteral("gone"))),
             qPrintable(d->statusText()));
    // Removed, it is searched no more, and the settings forget it.
    QSignalSpy done(d, &ModelsDialog::scanFinished);
    d->removeFolder(QString::fromStdString(mine_.string()));
    QVERIFY(done.wait(kScanTimeoutMs));
    QCOMPARE(d->entries().size(), size_t{2});
    QCOMPARE(
        QSettings(settingsPath_, QSettings::IniFormat).value(QStringLiteral("models/folders")).toStringList(),
        QStringList{tmp_.filePath(QStringLiteral("gone"))});
  }

  // servelab --dialog models --screenshot: the picture is of the dialog, once its table is filled;
  // a dialog it does not know, or --dialog without --screenshot, is one line and a failure.
  void scriptedScreenshotOfTheDialog() {
    const auto run = [&](const QStringList& args) {
      QProcess p;
      p.start(QStringLiteral(SERVELAB_GUI),
              QStringList{QStringLiteral("--settings"), tmp_.filePath(QStringLiteral("script.ini")),
                          QStringLiteral("--model"), QString::fromStdString(tinySnapshot_.string())} +
                  args);
      p.waitForFinished(kLoadTimeoutMs);
      // Our lines only: Qt's platform plugins add their own warnings.
      QString ours;
      for (const QString& l : QString::fromUtf8(p.readAllStandardError()).split(QLatin1Char('\n')))
        if (l.startsWith(QStringLiteral("servelab: "))) ours += l + QLatin1Char('\n');
      return std::make_pair(p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, ours);
    };
    const QString png = tmp_.filePath(QStringLiteral("models.png"));
    const auto ok =
        run({QStringLiteral("--dialog"), QStringLiteral("models"), QStringLiteral("--screenshot"), png});
    QVERIFY2(ok.first == 0, qPrintable(ok.second));
    const QImage shot(png);
    QVERIFY(!shot.isNull());
    QCOMPARE(shot.size(), QSize(1200, 560));  // the dialog's size, not the window's
    const auto unknown =
        run({QStringLiteral("--dialog"), QStringLiteral("nope"), QStringLiteral("--screenshot"), png});
    QCOMPARE(unknown.first, 1);
    QCOMPARE(unknown.second, QStringLiteral("servelab: unknown dialog \"nope\" (dialogs: models)\n"));
    const auto alone = run({QStringLiteral("--dialog"), QStringLiteral("models")});
    QCOMPARE(alone.first, 2);
    QCOMPARE(alone.second, QStringLiteral("servelab: --dialog needs --screenshot\n"));
  }
};

QTEST_MAIN(TestModelsDialog)
#include "test_models_dialog.moc"
