// The session report as HTML: for a browser (CSS, inline SVG) and for print (the rich text that
// report_pdf.cpp lays out on pages). One builder writes both, so that they say the same.
#include "session_report.h"

#include <QFileInfo>
#include <QLocale>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSet>

#include "chart_view.h"
#include "experiment_tab.h"
#include "text_format.h"

namespace servelab::ui {

namespace {

QString esc(const QString& s) { return s.toHtmlEscaped(); }

QString clock(const QDateTime& t) { return t.toString(QStringLiteral("HH:mm:ss")); }

QString day(const QDateTime& t) {
  return QLocale(QLocale::English).toString(t.date(), QStringLiteral("d MMMM yyyy"));
}

QString duration(const QDateTime& from, const QDateTime& to) {
  const double s = static_cast<double>(from.msecsTo(to)) / 1000.0;
  if (s < 60) return QStringLiteral("%1 s").arg(s, 0, 'f', 1);
  const auto whole = static_cast<qint64>(s);
  return QStringLiteral("%1 min %2 s").arg(whole / 60).arg(whole % 60);
}

Facts modelFacts(const ModelSummary& m) {
  Facts f;
  f << qMakePair(QObject::tr("Name"), m.name);
  if (!m.caveat.isEmpty()) f << qMakePair(QObject::tr("Note"), m.caveat);
  f << qMakePair(QObject::tr("Format"), QStringLiteral("%1, %2").arg(m.architecture, m.format))
    << qMakePair(QObject::tr("Parameters"),
                 QStringLiteral("%1 (%2)").arg(formatCount(m.parameters), formatMillions(m.parameters)))
    << qMakePair(QObject::tr("Shape"), QObject::tr("%1 layers, %2 heads, width %3, context %4, vocabulary %5")
                                           .arg(m.layers)
                                           .arg(m.heads)
                                           .arg(m.width)
                                           .arg(m.positions)
                                           .arg(m.vocab))
    << qMakePair(QObject::tr("Weights"), formatMemory(m.weightBytes))
    << qMakePair(QObject::tr("Device"),
                 QObject::tr("%1, %2, %3 threads").arg(m.device, m.dtype).arg(m.threads));
  if (!m.folder.isEmpty()) f << qMakePair(QObject::tr("File"), m.folder);
  return f;
}

// The identity of a model for the report: runs on the same model, device, dtype and threads share it.
QString modelKey(const ModelSummary& m) {
  return QStringLiteral("%1|%2|%3|%4|%5").arg(m.name, m.folder, m.device, m.dtype).arg(m.threads);
}

// An SVG document as an element of the page: without its XML prologue, sized by the page (its
// viewBox kept), and with ids made unique to this chart (every chart names its clip "plotArea").
QString inlineSvg(const QByteArray& svg, const QString& prefix, const QString& label) {
  QString s = QString::fromUtf8(svg);
  const qsizetype start = s.indexOf(QLatin1String("<svg"));
  if (start < 0) return {};
  s = s.mid(start).trimmed();
  static const QRegularExpression idAttr(QStringLiteral("\\bid=\"([^\"]+)\""));
  QSet<QString> ids;
  for (auto it = idAttr.globalMatch(s); it.hasNext();) ids.insert(it.next().captured(1));
  for (const QString& id : ids) {
    const QString renamed = prefix + QLatin1Char('-') + id;
    s.replace(QStringLiteral("id=\"%1\"").arg(id), QStringLiteral("id=\"%1\"").arg(renamed));
    s.replace(QStringLiteral("url(#%1)").arg(id), QStringLiteral("url(#%1)").arg(renamed));
    s.replace(QStringLiteral("href=\"#%1\"").arg(id), QStringLiteral("href=\"#%1\"").arg(renamed));
  }
  // The root element's fixed size (in mm) gives way to the figure's width.
  const qsizetype rootEnd = s.indexOf(QLatin1Char('>'));
  QString root = s.left(rootEnd);
  static const QRegularExpression size(QStringLiteral("\\s(width|height)=\"[^\"]*\""));
  root.replace(size, QString());
  root += QStringLiteral(" role=\"img\" aria-label=\"%1\"").arg(esc(label));
  return root + s.mid(rootEnd);
}

const char* kCss = R"(
:root { color-scheme: light; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "DejaVu Sans", sans-serif;
       color: #1f2328; background: #fff; max-width: 960px; margin: 0 auto; padding: 32px 28px 64px; }
header { border-bottom: 3px solid #0072B2; padding-bottom: 10px; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 34px 0 4px; }
h3 { font-size: 16px; margin: 22px 0 6px; }
.subtitle, .when, .note, figcaption { color: #57606a; }
.subtitle { margin: 0; }
.note, figcaption { font-size: 13px; }
nav ol { padding-left: 1.6em; margin: 4px 0; }
nav li { margin: 2px 0; }
section.run { border-top: 1px solid #d0d7de; margin-top: 44px; }
h2 .num { color: #0072B2; margin-right: 4px; }
table { border-collapse: collapse; margin: 4px 0 14px; font-size: 14px; }
table.grid th, table.grid td, table.facts th, table.facts td {
  border: 1px solid #d0d7de; padding: 3px 10px; text-align: left; vertical-align: top; }
table.grid thead th, table.facts th { background: #f3f6f9; font-weight: 600; }
table.facts { width: 100%; }
table.facts th { width: 13em; }
table.grid td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.value { white-space: pre-wrap; word-break: break-word; }
.summary { background: #f6f8fa; border-left: 4px solid #0072B2; padding: 6px 14px; margin: 6px 0 14px; }
.summary p { margin: 6px 0; }
.summary table { margin: 4px 0; }
.summary td { padding: 1px 10px 1px 0; }
.caption { font-weight: 600; font-size: 14px; margin: 14px 0 2px; }
.failed { background: #fdecea; color: #8a1c1c; border: 1px solid #e0a0a0; padding: 6px 10px; }
figure { margin: 12px 0 22px; }
figure svg { display: block; width: 100%; height: auto; border: 1px solid #d0d7de; }
footer { margin-top: 48px; padding-top: 8px; border-top: 1px solid #d0d7de; color: #57606a; font-size: 13px; }
@media print {
  body { max-width: none; padding: 0; }
  section.run { break-before: page; border-top: none; margin-top: 0; }
  figure, tr { break-inside: avoid; }
  h2, h3, .caption { break-after: avoid; }
}
)";

// Writes the report's HTML in one flavour; each element's look is the CSS class for a browser and
// inline style for QTextDocument (whose CSS has no class rules for tables and cells).
class Builder {
 public:
  Builder(const QList<RunRecord>& runs, const ReportContext& context, ReportFlavor flavor,
          const QHash<QString, int>& pages)
      : runs_(runs), context_(context), print_(flavor == ReportFlavor::Print), pages_(pages) {}

  QString build() {
    if (print_) {
      out_ += QStringLiteral("<html><body style=\"font-size: 10pt; color: #1f2328\">");
    } else {
      out_ += QStringLiteral(
                  "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                  "<meta name=\"generator\" content=\"ServeLab %1\">\n<title>%2</title>\n<style>%3</style>\n"
                  "</head>\n<body>\n")
                  .arg(esc(version()), esc(title()), QString::fromUtf8(kCss));
    }
    header();
    contents();
    setup();
    for (const RunRecord& r : runs_) run(r);
    footer();
    out_ += QStringLiteral("</body>\n</html>\n");
    return out_;
  }

 private:
  QString version() const {
    return context_.version.isEmpty() ? QObject::tr("(development build)") : context_.version;
  }
  QString title() const {
    return QObject::tr("ServeLab session report, %1 %2")
        .arg(day(context_.written), context_.written.toString(QStringLiteral("HH:mm")));
  }

  void heading(int level, const QString& html, const QString& anchor = QString()) {
    static const char* sizes[] = {"", "21pt", "15pt", "11.5pt", "10pt"};
    if (print_) {
      // Sections start a page; the anchor is a named link QTextDocument keeps, for the contents' pages.
      const QString style =
          QStringLiteral("font-size: %1; margin-top: %2px; margin-bottom: 4px%3")
              .arg(QLatin1String(sizes[level]))
              .arg(level == 1   ? 0
                   : level == 2 ? 10
                                : 12)
              .arg(anchor.startsWith(QLatin1String("run-")) ? QStringLiteral("; page-break-before: always")
                                                            : QString());
      const QString text =
          anchor.isEmpty() ? html : QStringLiteral("<a name=\"%1\">%2</a>").arg(anchor, html);
      out_ += QStringLiteral("<h%1 style=\"%2\">%3</h%1>\n").arg(level).arg(style, text);
    } else {
      out_ += QStringLiteral("<h%1>%2</h%1>\n").arg(level).arg(html);  // its <section> has the id
    }
  }

  void paragraph(const QString& html, const QString& cls = QString()) {
    if (print_) {
      const QString style = cls == QLatin1String("failed")
                                ? QStringLiteral(" style=\"color: #8a1c1c; background-color: #fdecea\"")
                            : cls.isEmpty() ? QString()
                                            : QStringLiteral(" style=\"color: #57606a\"");
      out_ += QStringLiteral("<p%1>%2</p>\n").arg(style, html);
    } else {
      out_ += cls.isEmpty() ? QStringLiteral("<p>%1</p>\n").arg(html)
                            : QStringLiteral("<p class=\"%1\">%2</p>\n").arg(cls, html);
    }
  }

  QString tableOpen(const QString& cls) const {
    if (!print_) return QStringLiteral("<table class=\"%1\">").arg(cls);
    return QStringLiteral(
               "<table%1 border=\"0\" cellspacing=\"0\" cellpadding=\"3\" "
               "style=\"border-collapse: collapse; margin-bottom: 8px\">")
        .arg(cls == QLatin1String("facts") ? QStringLiteral(" width=\"100%\"") : QString());
  }
  // Print: rows ruled below, headers shaded (QTextDocument takes cell borders, not table classes).
  static constexpr const char* kRule = "border-bottom: 1px solid #d8dee4";
  QString th(const QString& html, bool right = false, const QString& extra = QString()) const {
    if (!print_) return QStringLiteral("<th%1>%2</th>").arg(extra, html);
    return QStringLiteral("<th align=\"%1\" style=\"background-color: #eef2f5; %2\"%3>%4</th>")
        .arg(right ? QStringLiteral("right") : QStringLiteral("left"), QLatin1String(kRule), extra, html);
  }
  enum class Cell { Text, Number, Value };  // Value: a setting, its line breaks kept
  QString td(const QString& html, Cell kind = Cell::Text) const {
    if (!print_) {
      return kind == Cell::Number  ? QStringLiteral("<td class=\"num\">%1</td>").arg(html)
             : kind == Cell::Value ? QStringLiteral("<td class=\"value\">%1</td>").arg(html)
                                   : QStringLiteral("<td>%1</td>").arg(html);
    }
    return QStringLiteral("<td%1 style=\"%2%3\">%4</td>")
        .arg(kind == Cell::Number ? QStringLiteral(" align=\"right\"") : QString(), QLatin1String(kRule),
             kind == Cell::Value ? QStringLiteral("; white-space: pre-wrap") : QString(), html);
  }

  void facts(const Facts& rows, bool settings = false) {
    out_ += tableOpen(QStringLiteral("facts"));
    for (const auto& [name, value] : rows) {
      out_ += QStringLiteral("<tr>%1%2</tr>")
                  .arg(th(esc(name), false, print_ ? QStringLiteral(" width=\"30%\"") : QString()),
                       td(esc(value), settings ? Cell::Value : Cell::Text));
    }
    out_ += QStringLiteral("</table>\n");
  }

  // A table's caption, or a figure's number (grey: the chart carries its title). For print a
  // heading, which the layout keeps with the table or chart below it.
  void caption(const QString& html, bool figure = false) {
    if (print_) {
      out_ += QStringLiteral("<h4 style=\"font-size: %1; margin-top: 10px; margin-bottom: 2px%2\">%3</h4>\n")
                  .arg(figure ? QStringLiteral("8.5pt") : QStringLiteral("9.5pt"),
                       figure ? QStringLiteral("; font-weight: normal; color: #57606a") : QString(), html);
    } else {
      out_ += QStringLiteral("<p class=\"caption\">%1</p>\n").arg(html);
    }
  }

  void header() {
    if (!print_) out_ += QStringLiteral("<header>\n");
    heading(1, esc(QObject::tr("ServeLab session report")));
    QString when;
    if (runs_.isEmpty()) {
      when = QObject::tr("No experiment has run in this session yet.");
    } else {
      when = (runs_.size() == 1 ? QObject::tr("One run on %1, from %2 to %3.")
                                : QObject::tr("%1 runs on %2, from %3 to %4.").arg(runs_.size()))
                 .arg(day(runs_.front().started), clock(runs_.front().started), clock(runs_.back().finished));
    }
    paragraph(esc(QObject::tr("%1 Written %2 at %3 by ServeLab %4.")
                      .arg(when, day(context_.written), clock(context_.written), version())),
              QStringLiteral("subtitle"));
    if (!print_) out_ += QStringLiteral("</header>\n");
  }

  void contents() {
    if (!print_) out_ += QStringLiteral("<nav>\n");
    heading(2, esc(QObject::tr("Contents")));
    struct Entry {
      QString anchor, number, text;
    };
    QList<Entry> entries{{QStringLiteral("setup"), QString(), esc(QObject::tr("Setup: model and machine"))}};
    for (const RunRecord& r : runs_) {
      entries << Entry{QStringLiteral("run-%1").arg(r.number), QString::number(r.number),
                       QObject::tr("%1, %2%3")
                           .arg(esc(r.title), clock(r.started),
                                r.ok ? QString() : QObject::tr(" (%1)").arg(endedWord(r)))};
    }
    if (print_) {
      out_ += QStringLiteral("<table width=\"100%\" cellspacing=\"0\" cellpadding=\"2\">");
      for (const Entry& e : entries) {
        const int page = pages_.value(e.anchor, 0);
        out_ += QStringLiteral("<tr><td width=\"6%\">%1</td><td>%2</td><td align=\"right\">%3</td></tr>")
                    .arg(e.number, e.text, page > 0 ? QString::number(page) : QString());
      }
      out_ += QStringLiteral("</table>\n");
    } else {
      // The setup first, then the runs numbered as their sections are.
      out_ += QStringLiteral("<p><a href=\"#%1\">%2</a></p>\n<ol>\n").arg(entries[0].anchor, entries[0].text);
      for (qsizetype i = 1; i < entries.size(); ++i) {
        out_ += QStringLiteral("<li value=\"%1\"><a href=\"#%2\">%3</a></li>\n")
                    .arg(entries[i].number, entries[i].anchor, entries[i].text);
      }
      out_ += QStringLiteral("</ol>\n</nav>\n");
    }
  }

  static QString endedWord(const RunRecord& r) {
    return r.message == QLatin1String("stopped") || r.message.contains(QLatin1String("cancel"))
               ? QObject::tr("stopped")
               : QObject::tr("failed");
  }

  void setup() {
    if (!print_) out_ += QStringLiteral("<section id=\"setup\">\n");
    heading(2, esc(QObject::tr("Setup")), QStringLiteral("setup"));
    // Every model the runs used (one, unless the model changed during the session).
    QList<ModelSummary> models;
    QStringList keys;
    for (const RunRecord& r : runs_) {
      if (!r.model.valid() || keys.contains(modelKey(r.model))) continue;
      keys << modelKey(r.model);
      models << r.model;
    }
    if (models.isEmpty() && context_.model.valid()) models << context_.model;
    if (models.isEmpty()) paragraph(esc(QObject::tr("No model was loaded.")), QStringLiteral("note"));
    for (qsizetype i = 0; i < models.size(); ++i) {
      heading(3, esc(models.size() == 1 ? QObject::tr("Model") : QObject::tr("Model %1").arg(i + 1)));
      facts(modelFacts(models[i]));
    }
    heading(3, esc(QObject::tr("Machine")));
    facts(context_.machine);
    heading(3, esc(QObject::tr("Measured limits")));
    if (context_.limits.isEmpty()) {
      paragraph(esc(QObject::tr("Not measured yet on this machine: the Roofline tab measures its memory "
                                "bandwidth and peak arithmetic once, and keeps them.")),
                QStringLiteral("note"));
    } else {
      facts(context_.limits);
    }
    if (!print_) out_ += QStringLiteral("</section>\n");
  }

  void run(const RunRecord& r) {
    const QString anchor = QStringLiteral("run-%1").arg(r.number);
    if (!print_) out_ += QStringLiteral("<section class=\"run\" id=\"%1\">\n").arg(anchor);
    heading(2, QStringLiteral("<span class=\"num\">%1</span> %2").arg(r.number).arg(esc(r.title)), anchor);
    QString when = QObject::tr("Ran at %1 on %2 for %3, on %4.")
                       .arg(clock(r.started), day(r.started), duration(r.started, r.finished),
                            esc(chartFootnote(r.model)));
    paragraph(when, QStringLiteral("when"));
    if (!r.ok) {
      paragraph(esc(r.message.isEmpty() ? QObject::tr("The run did not finish.")
                                        : QObject::tr("The run did not finish: %1.").arg(r.message)),
                QStringLiteral("failed"));
    }

    heading(3, esc(QObject::tr("Settings")));
    if (r.settings.isEmpty()) {
      paragraph(esc(QObject::tr("This tab saves no settings.")), QStringLiteral("note"));
    } else {
      Facts labelled;
      for (const auto& [key, value] : r.settings) labelled << qMakePair(settingLabel(key), value);
      facts(labelled, true);
    }

    if (!r.html.isEmpty() || !r.tables.isEmpty()) heading(3, esc(QObject::tr("Results")));
    for (const QString& html : r.html) {
      if (print_)
        out_ += QStringLiteral("<div>%1</div>\n").arg(html);
      else
        out_ += QStringLiteral("<div class=\"summary\">%1</div>\n").arg(html);
    }
    for (qsizetype i = 0; i < r.tables.size(); ++i) table(r, static_cast<int>(i));

    if (!r.charts.isEmpty()) heading(3, esc(QObject::tr("Charts")));
    for (qsizetype i = 0; i < r.charts.size(); ++i) {
      const ChartView::Snapshot& c = r.charts[i];
      const QString label = QObject::tr("Figure %1.%2").arg(r.number).arg(i + 1);
      const QString& text = label;  // the chart carries its own title
      if (print_) {
        caption(text, true);
        out_ += QStringLiteral(
                    "<p align=\"center\" style=\"margin-top: 2px; margin-bottom: 8px\">"
                    "<img src=\"servelab-chart:%1\"></p>\n")
                    .arg(chartIndex_++);
      } else {
        out_ += QStringLiteral("<figure>\n<figcaption>%1</figcaption>\n%2\n</figure>\n")
                    .arg(text, inlineSvg(c.svg, QStringLiteral("c%1-%2").arg(r.number).arg(i + 1), c.title));
      }
    }
    if (!print_) out_ += QStringLiteral("</section>\n");
  }

  void table(const RunRecord& r, int index) {
    const ReportTable& t = r.tables[index];
    QString text = QObject::tr("Table %1.%2 · %3").arg(r.number).arg(index + 1).arg(esc(t.caption));
    if (t.totalRows > t.rows.size())
      text += esc(QObject::tr(" (the first %1 of %2 rows)").arg(t.rows.size()).arg(t.totalRows));
    caption(text);
    out_ += tableOpen(QStringLiteral("grid"));
    // The header row repeats on each page a long table spans.
    out_ += QStringLiteral("<thead><tr>");
    for (qsizetype c = 0; c < t.headers.size(); ++c) out_ += th(esc(t.headers[c]), t.numeric.value(c));
    out_ += QStringLiteral("</tr></thead>");
    out_ += QStringLiteral("<tbody>");
    for (const QStringList& row : t.rows) {
      out_ += QStringLiteral("<tr>");
      for (qsizetype c = 0; c < row.size(); ++c) {
        out_ += c == 0 && t.rowHeaders ? th(esc(row[c]))
                                       : td(esc(row[c]), t.numeric.value(c) ? Cell::Number : Cell::Text);
      }
      out_ += QStringLiteral("</tr>\n");
    }
    out_ += QStringLiteral("</tbody></table>\n");
  }

  void footer() {
    if (print_) return;  // the PDF has a footer on every page
    out_ += QStringLiteral("<footer>%1</footer>\n")
                .arg(esc(QObject::tr("Written by ServeLab %1 on %2 at %3. The charts are the runs' own, "
                                     "as SVG; the settings are each tab's as the app saves them.")
                             .arg(version(), day(context_.written), clock(context_.written))));
  }

  const QList<RunRecord>& runs_;
  const ReportContext& context_;
  const bool print_;
  const QHash<QString, int>& pages_;
  int chartIndex_ = 0;
  QString out_;
};

}  // namespace

QString sessionReportHtml(const QList<RunRecord>& runs, const ReportContext& context, ReportFlavor flavor,
                          const QHash<QString, int>& pages) {
  return Builder(runs, context, flavor, pages).build();
}

bool isSessionReportPath(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  return suffix == QLatin1String("html") || suffix == QLatin1String("htm") || suffix == QLatin1String("pdf");
}

bool writeSessionReport(const QString& path, const QList<RunRecord>& runs, const ReportContext& context,
                        QString* error, int* pages) {
  const auto fail = [&](const QString& why) {
    if (error) *error = QObject::tr("cannot write the report to %1: %2").arg(path, why);
    return false;
  };
  if (!isSessionReportPath(path)) return fail(QObject::tr("the file must end in .html or .pdf"));
  if (const QString problem = fileWriteProblem(path); !problem.isEmpty()) return fail(problem);
  if (QFileInfo(path).suffix().compare(QLatin1String("pdf"), Qt::CaseInsensitive) == 0) {
    const int n = writeSessionReportPdf(path, runs, context, error);
    if (pages) *pages = n;
    return n > 0;
  }
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) return fail(file.errorString());
  file.write(sessionReportHtml(runs, context).toUtf8());
  if (!file.commit()) return fail(file.errorString());
  if (pages) *pages = 1;
  return true;
}

}  // namespace servelab::ui
