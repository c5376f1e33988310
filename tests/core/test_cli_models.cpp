// servelab-cli models on the computer in miniature (model_catalog_tree.h): --json prints what the
// catalog finds, field for field; the table names every model and says why not; a bad --dir is one
// stderr line and exit 1.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>
#include <filesystem>

#include "cli_runner.h"
#include "model/model_catalog.h"
#include "model_catalog_tree.h"

using namespace servelab;
using namespace servelab::test;
namespace fs = std::filesystem;

class TestCliModels : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  CatalogTree tree_;
  QString mine_;

  CliRun cli(const QStringList& args) { return run_cli(QStringLiteral(SERVELAB_CLI), args); }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    if (!have_builtin_model()) QSKIP(kNoBuiltinModel);
    tree_ = catalog_environment(tmp_.path().toStdString());  // the child process inherits it
    mine_ = QString::fromStdString(tree_.mine().string());
  }

  void jsonIsTheCatalog() {
    const CliRun r =
        cli({QStringLiteral("models"), QStringLiteral("--json"), QStringLiteral("--dir"), mine_});
    QCOMPARE(r.code, 0);
    QVERIFY2(r.err.isEmpty(), qPrintable(r.err));
    QJsonParseError error;
    const QJsonArray got = QJsonDocument::fromJson(r.out.toUtf8(), &error).array();
    QCOMPARE(error.error, QJsonParseError::NoError);
    CatalogRoots roots = default_catalog_roots();
    roots.folders = {tree_.mine().string()};
    const std::vector<CatalogEntry> expected = scan_models(roots);
    QCOMPARE(got.size(), static_cast<qsizetype>(expected.size()));
    QCOMPARE(expected.size(), size_t{10});
    for (qsizetype i = 0; i < got.size(); ++i) {
      const QJsonObject o = got[i].toObject();
      const CatalogEntry& e = expected[static_cast<size_t>(i)];
      QCOMPARE(o.keys().size(), qsizetype{10});
      QCOMPARE(o["name"].toString().toStdString(), e.name);
      QCOMPARE(o["source"].toString().toStdString(), std::string(model_source_name(e.source)));
      QCOMPARE(o["root"].toString().toStdString(), e.root);
      QCOMPARE(o["path"].toString().toStdString(), e.path);
      QCOMPARE(o["architecture"].toString().toStdString(), e.architecture);
      QCOMPARE(o["format"].toString().toStdString(), e.format);
      QCOMPARE(o["quantization"].toString().toStdString(), e.quantization);
      QCOMPARE(static_cast<std::uint64_t>(o["size_bytes"].toInteger()), e.size_bytes);
      QCOMPARE(o["loadable"].toBool(), e.loadable);
      QCOMPARE(o["why_not"].toString().toStdString(), e.why_not);
    }
  }

  void tableForPeople() {
    const CliRun r = cli({QStringLiteral("models"), QStringLiteral("--dir"), mine_});
    QCOMPARE(r.code, 0);
    const QStringList lines = r.out.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QVERIFY(lines.front().startsWith(QLatin1String("name")));
    // One line per model and one "why not" line under each that does not load (6 of 10).
    QCOMPARE(lines.size(), 1 + 10 + 6);
    QVERIFY(r.out.contains(QStringLiteral("smollm2:135m")));
    QVERIFY(r.out.contains(QStringLiteral("why not: config.json at ") +
                           QString::fromStdString((tree_.bert_snapshot() / "config.json").string())));
  }

  void badDirectory() {
    const QString nowhere = tmp_.filePath(QStringLiteral("nowhere"));
    const CliRun r = cli({QStringLiteral("models"), QStringLiteral("--dir"), nowhere});
    QCOMPARE(r.code, 1);
    QCOMPARE(r.err,
             QStringLiteral("servelab-cli: input error: model folder %1 does not exist\n").arg(nowhere));
    const CliRun usage = cli({QStringLiteral("models"), QStringLiteral("--bogus")});
    QCOMPARE(usage.code, 2);
    QCOMPARE(usage.err.count(QLatin1Char('\n')), 1);
  }
};

QTEST_GUILESS_MAIN(TestCliModels)
#include "test_cli_models.moc"
