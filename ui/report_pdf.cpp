// The session report as a PDF: the print flavour of its HTML laid out by QTextDocument on A4 pages,
// in 96 units to the inch (the unit the charts were recorded in), each chart an object in the text
// that replays its recorded drawing (vectors), headings and captions kept with what follows them,
// the contents given each section's page, and a footer on every page.
#include <QAbstractTextDocumentLayout>
#include <QGuiApplication>
#include <QLocale>
#include <QPainter>
#include <QPdfWriter>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSet>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextObjectInterface>
#include <cmath>
#include <memory>

#include "session_report.h"

namespace servelab::ui {

namespace {

constexpr double kDpi = 96;
constexpr double kMm = kDpi / 25.4;
constexpr double kMarginX = 20 * kMm, kMarginTop = 18 * kMm, kMarginBottom = 20 * kMm;
const QColor kText(0x1f, 0x23, 0x28), kMuted(0x57, 0x60, 0x6a), kRule(0xc9, 0xd1, 0xd9);

// A chart in the text: as wide as the text, as tall as its aspect says; drawn by replaying the
// drawing recorded when its run ended.
class ChartObject : public QObject, public QTextObjectInterface {
  Q_OBJECT
  Q_INTERFACES(QTextObjectInterface)
 public:
  ChartObject(QList<const ChartView::Snapshot*> charts, double width)
      : charts_(std::move(charts)), width_(width) {}

  QSizeF intrinsicSize(QTextDocument*, int, const QTextFormat& format) override {
    const ChartView::Snapshot* c = chart(format);
    if (!c || c->size.isEmpty()) return {};
    return {width_, width_ * c->size.height() / c->size.width()};
  }

  void drawObject(QPainter* painter, const QRectF& rect, QTextDocument*, int,
                  const QTextFormat& format) override {
    const ChartView::Snapshot* c = chart(format);
    if (!c || c->size.isEmpty()) return;
    painter->save();
    painter->translate(rect.topLeft());
    painter->scale(rect.width() / c->size.width(), rect.height() / c->size.height());
    painter->setClipRect(QRect(QPoint(0, 0), c->size), Qt::IntersectClip);  // within the page's clip
    painter->drawPicture(0, 0, c->picture);
    painter->restore();
    painter->save();
    painter->setPen(QPen(kRule, 0.75));
    painter->setBrush(Qt::NoBrush);
    painter->drawRect(rect);
    painter->restore();
  }

 private:
  // The report's HTML names chart N "servelab-chart:N".
  const ChartView::Snapshot* chart(const QTextFormat& format) const {
    const QString name = format.toImageFormat().name();
    if (!name.startsWith(QLatin1String("servelab-chart:"))) return nullptr;
    const int i = name.mid(15).toInt();
    return i >= 0 && i < charts_.size() ? charts_[i] : nullptr;
  }
  QList<const ChartView::Snapshot*> charts_;
  double width_;
};

// The page (from 0) a position is on; a line placed at the top of a page is on it.
int pageOf(double y, double pageHeight) { return static_cast<int>(std::floor((y + 0.5) / pageHeight)); }

// Where a block's text starts in the document: its first line, which the layout moves to the next
// page when it does not fit (blockBoundingRect stays where the block began).
double textTop(const QTextBlock& block) {
  const double top = block.document()->documentLayout()->blockBoundingRect(block).top();
  const QTextLayout* layout = block.layout();
  return layout && layout->lineCount() > 0 ? top + layout->lineAt(0).y() : top;
}

// The document laid out on pages of `body` size for device, its images drawn by charts.
std::unique_ptr<QTextDocument> layOut(const QString& html, QPaintDevice* device, const QSizeF& body,
                                      ChartObject* charts) {
  auto doc = std::make_unique<QTextDocument>();
  doc->documentLayout()->setPaintDevice(device);
  doc->documentLayout()->registerHandler(QTextFormat::ImageObject, charts);
  doc->setUseDesignMetrics(true);
  QFont font = QGuiApplication::font();
  font.setPointSizeF(9.5);
  doc->setDefaultFont(font);
  doc->setDocumentMargin(0);
  doc->setPageSize(body);
  doc->setHtml(html);
  (void)doc->pageCount();  // the whole layout now (it is lazy)
  return doc;
}

// The HTML with a page break before the headings numbered in breaks (from 0, in document order).
QString withBreaks(QString html, const QSet<int>& breaks) {
  static const QRegularExpression heading(QStringLiteral("<h[1-6] style=\""));
  int n = 0;
  qsizetype at = 0;
  for (QRegularExpressionMatch m = heading.match(html); m.hasMatch(); m = heading.match(html, at)) {
    at = m.capturedEnd();
    if (breaks.contains(n++)) {
      html.insert(at, QStringLiteral("page-break-before: always; "));
      at += 27;
    }
  }
  return html;
}

// The first heading (or caption) left at the foot of a page without what it introduces, which
// starts the next page: its number among the headings; -1 when there is none.
int orphanHeading(const QTextDocument& doc, double pageHeight) {
  int n = 0;
  for (QTextBlock b = doc.begin(); b.isValid() && b.next().isValid(); b = b.next()) {
    if (b.blockFormat().headingLevel() == 0) continue;
    const double here = textTop(b), next = textTop(b.next());
    const double top = here - pageOf(here, pageHeight) * pageHeight;
    if (pageOf(next, pageHeight) > pageOf(here, pageHeight) && top > 1) return n;
    ++n;
  }
  return -1;
}

// The document laid out with each heading kept with what follows it: laid out afresh with a page
// break before each orphan, one at a time (the pages after one move when it does).
std::unique_ptr<QTextDocument> layOutKeepingHeadings(const QString& html, QPaintDevice* device,
                                                     const QSizeF& body, ChartObject* charts) {
  QSet<int> breaks;
  std::unique_ptr<QTextDocument> doc = layOut(html, device, body, charts);
  for (int orphan = orphanHeading(*doc, body.height()); orphan >= 0 && !breaks.contains(orphan);
       orphan = orphanHeading(*doc, body.height())) {
    breaks.insert(orphan);
    doc = layOut(withBreaks(html, breaks), device, body, charts);
  }
  return doc;
}

// The page each anchored section ("setup", "run-1", ...) starts on, from 1.
QHash<QString, int> sectionPages(const QTextDocument& doc, double pageHeight) {
  QHash<QString, int> pages;
  for (QTextBlock b = doc.begin(); b.isValid(); b = b.next()) {
    for (auto it = b.begin(); !it.atEnd(); ++it) {
      for (const QString& name : it.fragment().charFormat().anchorNames())
        if (!pages.contains(name)) pages.insert(name, pageOf(textTop(b), pageHeight) + 1);
    }
  }
  return pages;
}

}  // namespace

int writeSessionReportPdf(const QString& path, const QList<RunRecord>& runs, const ReportContext& context,
                          QString* error) {
  const auto fail = [&](const QString& why) {
    if (error) *error = QObject::tr("cannot write the report to %1: %2").arg(path, why);
    return 0;
  };
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) return fail(file.errorString());
  QPdfWriter writer(&file);
  writer.setResolution(static_cast<int>(kDpi));
  writer.setPageSize(QPageSize(QPageSize::A4));
  writer.setPageMargins(QMarginsF(0, 0, 0, 0));
  writer.setTitle(QObject::tr("ServeLab session report"));
  writer.setCreator(QStringLiteral("ServeLab %1").arg(context.version));
  const QSizeF page = writer.pageLayout().fullRectPixels(static_cast<int>(kDpi)).size();
  const QSizeF body(page.width() - 2 * kMarginX, page.height() - kMarginTop - kMarginBottom);

  QList<const ChartView::Snapshot*> charts;
  for (const RunRecord& r : runs)
    for (const ChartView::Snapshot& c : r.charts) charts << &c;
  ChartObject chartObject(charts, body.width() - 2);

  // The contents name each section's page: laid out again with them until they hold.
  QHash<QString, int> pages;
  std::unique_ptr<QTextDocument> doc;
  for (int pass = 0; pass < 3; ++pass) {
    doc = layOutKeepingHeadings(sessionReportHtml(runs, context, ReportFlavor::Print, pages), &writer, body,
                                &chartObject);
    const QHash<QString, int> found = sectionPages(*doc, body.height());
    if (found == pages) break;
    pages = found;
  }
  const int count = doc->pageCount();

  QPainter painter;
  if (!painter.begin(&writer)) return fail(QObject::tr("the PDF writer failed"));
  QFont small = QGuiApplication::font();
  small.setPointSizeF(7.5);
  const QString footer =
      QObject::tr("ServeLab session report · %1")
          .arg(QLocale(QLocale::English).toString(context.written, QStringLiteral("d MMMM yyyy, HH:mm")));
  for (int p = 0; p < count; ++p) {
    if (p > 0) writer.newPage();
    painter.save();
    painter.translate(kMarginX, kMarginTop - p * body.height());
    const QRectF clip(0, p * body.height(), body.width(), body.height());
    painter.setClipRect(clip);
    QAbstractTextDocumentLayout::PaintContext ctx;
    ctx.clip = clip;
    ctx.palette.setColor(QPalette::Text, kText);  // not the app's: a dark theme's text is light
    ctx.palette.setColor(QPalette::Link, QColor(0x00, 0x72, 0xB2));
    doc->documentLayout()->draw(&painter, ctx);
    painter.restore();

    const double y = page.height() - kMarginBottom + 6 * kMm;
    painter.setPen(QPen(kRule, 0.75));
    painter.drawLine(QPointF(kMarginX, y), QPointF(page.width() - kMarginX, y));
    painter.setPen(kMuted);
    painter.setFont(small);
    const QRectF line(kMarginX, y + 2 * kMm, body.width(), 5 * kMm);
    painter.drawText(line, Qt::AlignLeft | Qt::AlignTop, footer);
    painter.drawText(line, Qt::AlignRight | Qt::AlignTop, QObject::tr("page %1 of %2").arg(p + 1).arg(count));
  }
  if (!painter.end()) return fail(QObject::tr("the PDF writer failed"));
  if (!file.commit()) return fail(file.errorString());
  return count;
}

}  // namespace servelab::ui

#include "report_pdf.moc"
