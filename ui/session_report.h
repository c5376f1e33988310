#pragma once
// The session report (File → Export report…, --report x.html or x.pdf): the runs SessionLog
// recorded, as a document: a title, the contents, the setup (the model, the machine, its measured
// limits), then one section per run in the order they ran: its time, settings, summary, tables
// and charts. One self-contained HTML file (the charts as inline SVG), or a PDF of the same laid
// out on A4 pages (the charts drawn as vectors).
#include <QDateTime>
#include <QHash>
#include <QList>
#include <QString>

#include "engine_types.h"
#include "session_log.h"

namespace servelab::ui {

struct ReportContext {
  QString version;     // the app's; empty: a development build
  QDateTime written;   // when the report is written
  ModelSummary model;  // the model loaded now (the setup's when no run recorded one)
  Facts machine;       // machineFacts()
  Facts limits;        // RooflineTab::measuredLimits(); empty when the probe has not measured them
};

// For a browser: CSS and each chart as inline SVG. For print: the rich text QTextDocument reads,
// each chart an image "servelab-chart:N" (N counts the charts of all runs in order; report_pdf.cpp
// draws them) and the contents
// with each section's page (pages: by anchor, "setup", "run-1", ...).
enum class ReportFlavor { Browser, Print };
QString sessionReportHtml(const QList<RunRecord>& runs, const ReportContext& context,
                          ReportFlavor flavor = ReportFlavor::Browser, const QHash<QString, int>& pages = {});

// The report as a PDF at path, A4; the number of pages written, or 0 with *error set (naming the
// path). The file is replaced only once the whole report is written.
int writeSessionReportPdf(const QString& path, const QList<RunRecord>& runs, const ReportContext& context,
                          QString* error);

// Whether path names a report this module writes (.html, .htm or .pdf, in any case).
bool isSessionReportPath(const QString& path);
// Writes the HTML or PDF report by path's suffix; false with *error (one line naming the path)
// when it cannot. *pages: the PDF's pages (1 for HTML).
bool writeSessionReport(const QString& path, const QList<RunRecord>& runs, const ReportContext& context,
                        QString* error, int* pages = nullptr);

}  // namespace servelab::ui
