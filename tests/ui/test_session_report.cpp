// The session report on the offscreen platform, after real runs on the tiny test model: the HTML
// holds one section per run in the order they ran, each with its settings, summary and a valid
// inline SVG per chart, and the model, the machine and its measured limits; the PDF is a PDF of as
// many pages as its layout said, its charts vectors; the scripted --report x.html and x.pdf write
// them; a path that cannot be written fails with one line (scripted) or the banner (in the window)
// and loses nothing of the session. No assertion depends on how long anything takes.
#include <QCoreApplication>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QXmlStreamReader>
#include <QtWidgets>
#include <memory>

#include "batching_tab.h"
#include "kv_cache_tab.h"
#include "main_window.h"
#include "quantization_tab.h"
#include "roofline_tab.h"
#include "session_log.h"
#include "session_report.h"
#include "tiny_model.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

// The page objects of a PDF (QPdfWriter writes each as "/Type /Page", the tree as "/Type /Pages").
int pdfPages(const QByteArray& pdf) {
  static const QRegularExpression page(QStringLiteral("/Type\\s*/Page(?![s\\w])"));
  int n = 0;
  for (auto it = page.globalMatch(QString::fromLatin1(pdf)); it.hasNext(); it.next()) ++n;
  return n;
}

// The inline <svg> elements of an HTML text, each parsed as XML: its root's attributes, or an
// empty list and *error when one is not well-formed SVG.
QList<QXmlStreamAttributes> parseSvgs(const QString& html, QString* error) {
  QList<QXmlStreamAttributes> out;
  for (qsizetype at = html.indexOf(QLatin1String("<svg")); at >= 0;
       at = html.indexOf(QLatin1String("<svg"), at + 1)) {
    const qsizetype end = html.indexOf(QLatin1String("</svg>"), at);
    if (end < 0) {
      *error = QStringLiteral("an <svg> without </svg>");
      return {};
    }
    QXmlStreamReader xml(html.mid(at, end + 6 - at));
    QXmlStreamAttributes root;
    int elements = 0;
    while (!xml.atEnd()) {
      if (xml.readNext() == QXmlStreamReader::StartElement) {
        if (elements++ == 0) {
          if (xml.name() != QLatin1String("svg")) *error = QStringLiteral("root is not svg");
          root = xml.attributes();
        }
      }
    }
    if (xml.hasError()) *error = xml.errorString();
    if (!error->isEmpty()) return {};
    if (elements < 10) {  // a chart draws axes, ticks, labels and data
      *error = QStringLiteral("an <svg> with only %1 elements").arg(elements);
      return {};
    }
    out << root;
  }
  return out;
}

}  // namespace

class TestSessionReport : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString tiny_;
  std::unique_ptr<MainWindow> window_;  // two runs done: KV cache, then Roofline

  QString path(const QString& name) { return tmp_.filePath(name); }
  // SERVELAB_REPORT_DIR=folder keeps a copy of each report written, to look at.
  static void keep(const QString& file) {
    const QString dir = qEnvironmentVariable("SERVELAB_REPORT_DIR");
    if (dir.isEmpty()) return;
    const QString copy = QDir(dir).filePath(QFileInfo(file).fileName());
    QFile::remove(copy);
    QFile::copy(file, copy);
  }

  // The app as a script, with a settings file that keeps the KV-cache run short.
  QProcess* scripted(const QStringList& args) {
    const QString ini = path(QStringLiteral("script.ini"));
    {
      QSettings s(ini, QSettings::IniFormat);
      s.setValue(QStringLiteral("kv-cache/newTokens"), 4);
      s.setValue(QStringLiteral("kv-cache/repeats"), 1);
    }
    auto* p = new QProcess(this);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    p->setProcessEnvironment(env);
    p->start(QStringLiteral(SERVELAB_GUI),
             QStringList{QStringLiteral("--settings"), ini, QStringLiteral("--model"), tiny_,
                         QStringLiteral("--tab"), QStringLiteral("kv-cache"), QStringLiteral("--run")} +
                 args);
    return p;
  }

 private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setApplicationVersion(QStringLiteral("9.8.7"));
    QVERIFY(tmp_.isValid());
    tiny_ = path(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_);
    QVERIFY2(error.isEmpty(), qPrintable(error));

    window_ = windowWithModel(path(QStringLiteral("window.ini")), tiny_, kLoadTimeoutMs);
    QVERIFY(window_);
    QVERIFY(!window_->findChild<QAction*>(QStringLiteral("exportReportAction"))->isEnabled());
    auto* kv = qobject_cast<KvCacheTab*>(window_->tab(QStringLiteral("kv-cache")));
    auto* roofline = qobject_cast<RooflineTab*>(window_->tab(QStringLiteral("roofline")));
    QVERIFY(kv && roofline);
    kv->setNewTokens(5);
    kv->setRepeats(1);
    QSignalSpy kvDone(kv, &ExperimentTab::runFinished);
    QVERIFY(kv->run());
    QVERIFY(kvDone.wait(kRunTimeoutMs));
    QVERIFY2(kvDone.front().at(0).toBool(), qPrintable(kvDone.front().at(1).toString()));
    // Changed after the run: the report keeps the settings the run had.
    kv->setNewTokens(7);

    roofline->setLimitsCachePath(path(QStringLiteral("limits.json")));
    roofline->setWorkload(QStringLiteral("8, 16"), QStringLiteral("1, 2"), 8, 2);
    QSignalSpy rooflineDone(roofline, &ExperimentTab::runFinished);
    QVERIFY(roofline->run());
    QVERIFY(rooflineDone.wait(kRunTimeoutMs));
    QVERIFY2(rooflineDone.front().at(0).toBool(), qPrintable(rooflineDone.front().at(1).toString()));
    QCOMPARE(window_->sessionLog()->runs().size(), 2);
    QVERIFY(window_->findChild<QAction*>(QStringLiteral("exportReportAction"))->isEnabled());
  }

  void cleanupTestCase() { window_.reset(); }

  void logRecordsEachRun() {
    const QList<RunRecord>& runs = window_->sessionLog()->runs();
    QCOMPARE(runs[0].tabId, QStringLiteral("kv-cache"));
    QCOMPARE(runs[1].tabId, QStringLiteral("roofline"));
    QCOMPARE(runs[0].number, 1);
    QCOMPARE(runs[1].number, 2);
    QVERIFY(runs[0].started <= runs[0].finished);
    QVERIFY(runs[0].finished <= runs[1].started);
    QVERIFY(runs[0].settings.contains(qMakePair(QStringLiteral("newTokens"), QStringLiteral("5"))));
    QVERIFY(runs[1].settings.contains(qMakePair(QStringLiteral("prefillLengths"), QStringLiteral("8, 16"))));
    QCOMPARE(runs[0].charts.size(), 3);  // latency, KV memory and its steps on the roofline
    QCOMPARE(runs[1].charts.size(), 1);  // the roofline
    for (const RunRecord& r : runs) {
      QVERIFY(r.ok);
      QVERIFY(!r.html.isEmpty());
      QCOMPARE(r.model.name, window_->engine()->model().name);
      for (const ChartView::Snapshot& c : r.charts) {
        QVERIFY(!c.svg.isEmpty());
        QVERIFY(!c.picture.isNull());
      }
    }
    QVERIFY(runs[0].html.join(QString()).contains(QStringLiteral("Speed-up")));
  }

  // A report is printed on white: a chart in the dark theme is kept in the light one, and stays dark.
  void snapshotIsLightInTheDarkTheme() {
    window_->setTheme(ChartTheme::Dark);
    ChartView* chart = window_->tab(QStringLiteral("kv-cache"))->primaryChart();
    QCOMPARE(chart->theme(), ChartTheme::Dark);
    const ChartView::Snapshot s = chart->snapshot();
    QCOMPARE(chart->theme(), ChartTheme::Dark);
    window_->setTheme(ChartTheme::Light);
    QCOMPARE(s.size, QSize(960, 540));
    const QString svg = QString::fromUtf8(s.svg);
    QVERIFY(svg.contains(QLatin1String("#ffffff")));
    QVERIFY(!svg.contains(QLatin1String("#1e1e1e")));  // the dark theme's background
  }

  void settingLabelsRead() {
    QCOMPARE(settingLabel(QStringLiteral("maxNumBatchedTokens")), QStringLiteral("max num batched tokens"));
    QCOMPARE(settingLabel(QStringLiteral("kvBudgetMb")), QStringLiteral("KV budget MB"));
    QCOMPARE(settingLabel(QStringLiteral("adapters/1/peftDir")), QStringLiteral("adapters 1 PEFT dir"));
    QCOMPARE(settingLabel(QStringLiteral("topK")), QStringLiteral("top k"));
  }

  void htmlHoldsEveryRunInOrder() {
    const QString file = path(QStringLiteral("session.html"));
    QString error;
    QVERIFY2(window_->exportReport(file, &error), qPrintable(error));
    keep(file);
    const QString html = QString::fromUtf8(fileBytes(file));
    QVERIFY(html.startsWith(QLatin1String("<!DOCTYPE html>")));
    QVERIFY(!html.contains(QLatin1String("<?xml")));  // each SVG is inline, without its prologue
    QVERIFY(!html.contains(QLatin1String("<img")));   // self-contained: nothing to fetch

    const qsizetype first = html.indexOf(QLatin1String("<section class=\"run\" id=\"run-1\">"));
    const qsizetype second = html.indexOf(QLatin1String("<section class=\"run\" id=\"run-2\">"));
    QVERIFY(first > 0 && second > first);
    const QString kv = html.mid(first, second - first), roof = html.mid(second);
    QVERIFY(kv.contains(QLatin1String("KV cache")));
    QVERIFY(roof.contains(QLatin1String("Roofline")));
    // The contents link both, in order, after the setup.
    const qsizetype toc1 = html.indexOf(QLatin1String("href=\"#run-1\"")),
                    toc2 = html.indexOf(QLatin1String("href=\"#run-2\""));
    QVERIFY(html.indexOf(QLatin1String("href=\"#setup\"")) < toc1 && toc1 < toc2 && toc2 < first);

    // Each run's own settings, as the run had them.
    QVERIFY(kv.contains(QLatin1String("<th>new tokens</th><td class=\"value\">5</td>")));
    QVERIFY(kv.contains(QLatin1String("<th>repeats</th><td class=\"value\">1</td>")));
    QVERIFY(roof.contains(QLatin1String("<th>prefill lengths</th><td class=\"value\">8, 16</td>")));
    QVERIFY(roof.contains(QLatin1String("<th>decode batches</th><td class=\"value\">1, 2</td>")));
    QVERIFY(!roof.contains(QLatin1String("new tokens")));
    // Summaries as the tabs show them.
    QVERIFY(kv.contains(QLatin1String("Speed-up")));
    QVERIFY(roof.contains(QLatin1String("FLOP/B")));

    // One valid inline SVG per chart, each section its own.
    QString why;
    const QList<QXmlStreamAttributes> kvSvgs = parseSvgs(kv, &why);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    QCOMPARE(kvSvgs.size(), 3);
    const QList<QXmlStreamAttributes> roofSvgs = parseSvgs(roof, &why);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    QCOMPARE(roofSvgs.size(), 1);
    for (const QXmlStreamAttributes& a : kvSvgs + roofSvgs) {
      QVERIFY(a.hasAttribute(QLatin1String("viewBox")));
      QVERIFY(!a.hasAttribute(QLatin1String("width")));  // the page sizes it
    }
    QVERIFY(kv.contains(QLatin1String("Per-token latency")));
    // Ids stay unique on the page (every chart's clip was "plotArea").
    static const QRegularExpression id(QStringLiteral("\\bid=\"([^\"]+)\""));
    QStringList ids;
    for (auto it = id.globalMatch(html); it.hasNext();) ids << it.next().captured(1);
    QCOMPARE(QSet<QString>(ids.begin(), ids.end()).size(), ids.size());

    // The model, the machine and its limits (the roofline run measured them), and the version.
    const ModelSummary& m = window_->engine()->model();
    QVERIFY(html.contains(m.name.toHtmlEscaped()));
    QVERIFY(html.contains(QStringLiteral("%1, %2").arg(m.architecture, m.format)));
    QVERIFY(html.contains(m.cpuModel.toHtmlEscaped()));
    QVERIFY(html.contains(QStringLiteral("<td>%1</td>").arg(m.cpuIsa)));
    QVERIFY(html.contains(QLatin1String("Logical cores")));
    QVERIFY(html.contains(QLatin1String("Memory read bandwidth")));
    QVERIFY(!html.contains(QLatin1String("Not measured yet")));
    QVERIFY(html.contains(QLatin1String("ServeLab 9.8.7")));
  }

  void pdfHasTheLayoutsPages() {
    const QString file = path(QStringLiteral("session.pdf"));
    QString error;
    int pages = 0;
    QVERIFY2(window_->exportReport(file, &error, &pages), qPrintable(error));
    keep(file);
    const QByteArray pdf = fileBytes(file);
    QVERIFY(pdf.startsWith("%PDF-"));
    // Title and contents, the setup, then a page or more per run (each run starts a page).
    QVERIFY2(pages >= 3, qPrintable(QString::number(pages)));
    QCOMPARE(pdfPages(pdf), pages);
    // The charts are drawn, not pasted: no raster image in the file.
    QVERIFY(!pdf.contains("/Subtype /Image"));
  }

  void unwritablePathFailsInTheWindowAndLosesNothing() {
    const QString bad = path(QStringLiteral("no-such-folder/report.pdf"));
    QVERIFY(!window_->exportReportTo(bad));
    QVERIFY2(window_->errorText().contains(QLatin1String("cannot write the report")),
             qPrintable(window_->errorText()));
    QVERIFY(window_->errorText().contains(QLatin1String("does not exist")));
    QVERIFY(!QFile::exists(bad));
    QCOMPARE(window_->sessionLog()->runs().size(), 2);
    // The same session, somewhere writable.
    const QString good = path(QStringLiteral("again.html"));
    QVERIFY(window_->exportReportTo(good));
    QVERIFY(QString::fromUtf8(fileBytes(good)).contains(QLatin1String("id=\"run-2\"")));
    QVERIFY(!window_->exportReportTo(path(QStringLiteral("report.txt"))));  // neither HTML nor PDF
  }

  void scriptedReportWritesHtmlAndPdf_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("html") << QStringLiteral("scripted.html");
    QTest::newRow("pdf") << QStringLiteral("scripted.pdf");
  }
  void scriptedReportWritesHtmlAndPdf() {
    QFETCH(QString, name);
    const QString file = path(name);
    QProcess* app = scripted({QStringLiteral("--report"), file});
    QVERIFY(app->waitForFinished(kRunTimeoutMs));
    QVERIFY2(app->exitCode() == 0, app->readAllStandardError().constData());
    const QByteArray bytes = fileBytes(file);
    if (name.endsWith(QLatin1String(".pdf"))) {
      QVERIFY(bytes.startsWith("%PDF-"));
      QVERIFY(pdfPages(bytes) >= 2);
    } else {
      const QString html = QString::fromUtf8(bytes);
      QVERIFY(html.contains(QLatin1String("id=\"run-1\"")));
      QVERIFY(!html.contains(QLatin1String("id=\"run-2\"")));
      QVERIFY(html.contains(QLatin1String("<th>new tokens</th><td class=\"value\">4</td>")));
      QString why;
      QCOMPARE(parseSvgs(html, &why).size(), 3);  // the KV-cache run: latency, memory, roofline
      QVERIFY2(why.isEmpty(), qPrintable(why));
    }
  }

  void scriptedUnwritableReportFailsWithOneLine() {
    const QString bad = path(QStringLiteral("no-such-folder/report.html"));
    QProcess* app = scripted({QStringLiteral("--report"), bad});
    QVERIFY(app->waitForFinished(kRunTimeoutMs));
    QCOMPARE(app->exitStatus(), QProcess::NormalExit);
    QCOMPARE(app->exitCode(), 1);
    QStringList ours;
    for (const QString& l : QString::fromUtf8(app->readAllStandardError()).split(QLatin1Char('\n')))
      if (l.startsWith(QLatin1String("servelab: "))) ours << l;
    QCOMPARE(ours.size(), 1);
    QVERIFY2(ours.front().contains(QLatin1String("cannot write the report to")), qPrintable(ours.front()));
    QVERIFY2(ours.front().contains(QLatin1String("does not exist")), qPrintable(ours.front()));
    QVERIFY(!QFile::exists(bad));
  }

  // SERVELAB_REPORT_EXAMPLE=path.pdf (or .html) writes a report of a short session on the built-in
  // model there: the docs' example (docs/report-example.pdf). Skipped otherwise.
  void exampleForTheDocs() {
    const QString out = qEnvironmentVariable("SERVELAB_REPORT_EXAMPLE");
    if (out.isEmpty()) QSKIP("SERVELAB_REPORT_EXAMPLE not set");
    auto w = std::make_unique<MainWindow>(
        std::make_unique<QSettings>(path(QStringLiteral("example.ini")), QSettings::IniFormat));
    w->show();
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadBuiltin();
    QVERIFY(ready.wait(kLoadTimeoutMs));
    auto* roofline = qobject_cast<RooflineTab*>(w->tab(QStringLiteral("roofline")));
    roofline->setLimitsCachePath(path(QStringLiteral("example-limits.json")));
    qobject_cast<BatchingTab*>(w->tab(QStringLiteral("batching")))->setBatchSizes(QStringLiteral("1,2,4,8"));
    auto* quant = qobject_cast<QuantizationTab*>(w->tab(QStringLiteral("quantization")));
    quant->setModes({QStringLiteral("zp-uint8"), QStringLiteral("int8-channel")});
    quant->setMeasureSpeed(false);
    for (const char* id : {"kv-cache", "batching", "quantization", "roofline"}) {
      ExperimentTab* t = w->tab(QLatin1String(id));
      w->selectTab(t->tabId());
      QSignalSpy done(t, &ExperimentTab::runFinished);
      QVERIFY(t->run());
      QVERIFY(done.wait(kRunTimeoutMs));
      QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    }
    QString error;
    QCoreApplication::setApplicationVersion(QStringLiteral(SERVELAB_VERSION));
    for (const QString& file : out.split(QLatin1Char(',')))
      QVERIFY2(w->exportReport(file, &error), qPrintable(error));
    QCoreApplication::setApplicationVersion(QStringLiteral("9.8.7"));
  }
};

QTEST_MAIN(TestSessionReport)
#include "test_session_report.moc"
