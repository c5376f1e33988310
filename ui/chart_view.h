#pragma once
// The one chart component every tab uses: QCustomPlot underneath, live append, zoom/pan, hover
// readout, legend, themes for slides, and export (PNG, SVG, PDF, CSV, clipboard).
// The header does not include qcustomplot.h, so it can be used from code built with QT_NO_KEYWORDS.
#include <QColor>
#include <QImage>
#include <QPicture>
#include <QPointF>
#include <QSize>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>
#include <memory>

class QCustomPlot;
class QCPGraph;
class QCPBars;
class QCPTextElement;
class QCPItemText;
class QCPItemStraightLine;
class QCPLayerable;
class QMouseEvent;
class QTimer;

namespace servelab::ui {

enum class ChartTheme { Light, Dark };

// chart/: each kind of data a chart shows, answering for its own extent, hover readout and legend
// cost (one header each), and what they draw with.
namespace chart {
class ChartData;
class CellPlottable;
class CategoryBars;
class StackedBars;
}  // namespace chart

// Why a file cannot be written at path, when that can be told before trying (no name, a folder,
// a missing or read-only folder, a read-only file); empty otherwise.
QString fileWriteProblem(const QString& path);

class ChartView : public QWidget {
  Q_OBJECT
 public:
  enum class Axis { Left, Right };

  explicit ChartView(QWidget* parent = nullptr);
  ~ChartView() override;

  // Text that exports carry: a title on top, a footnote (model, device, dtype) at the bottom.
  void setTitle(const QString& title);
  QString title() const;
  void setFootnote(const QString& footnote);
  QString footnote() const;
  // The footnote as the chart draws it now: wrapped to the chart's width.
  QString footnoteAsDrawn() const;
  // Axis labels with units, e.g. "token index", "latency (ms)". A non-empty y2 shows the right axis.
  void setAxisLabels(const QString& x, const QString& y, const QString& y2 = QString());
  // x axis in log2 with ticks at powers of two (batch sizes).
  void setLogXBase2(bool on);
  // x axis in log10 with ticks at powers of ten (quantities that span decades: FLOP per byte).
  void setLogXBase10(bool on);
  // Ticks on whole numbers only (request ids, step numbers, counts) on a linear x and/or y axis.
  void setIntegerTicks(bool x, bool y);
  // Left y axis in log10 (counts that span decades); values <= 0 are left out of the fit and drop
  // to the bottom edge.
  void setLogY(bool on);
  bool logY() const { return logY_; }
  // The legend in rows under the plot instead of in a corner of it (charts whose data leave no
  // corner free); timelines always have it there.
  void setLegendBelow(bool on);
  // Entries per row of a legend below the plot (0: two, or four for a timeline's keys).
  void setLegendColumns(int columns);
  void setTheme(ChartTheme theme);
  ChartTheme theme() const;
  // Presenter mode, for projectors: fonts half again as large, lines and markers wider, text and
  // axes in full black (white on the dark theme). Exports draw what the chart shows.
  void setPresenter(bool on);
  bool presenter() const { return presenter_; }
  // The font and colour the axes' numbers are drawn in.
  QFont tickLabelFont() const;
  QColor tickLabelColor() const;

  // Line series with point markers; colour from a colour-blind-safe palette by index.
  int addSeries(const QString& name, Axis axis = Axis::Left);
  int seriesIndex(const QString& name) const;  // -1 when absent
  int seriesCount() const;
  QString seriesName(int series) const;
  QVector<QPointF> seriesPoints(int series) const;
  // How a series is drawn: a line through point markers (the default); markers alone (values of
  // categories on a bar chart); a histogram's steps centred on each x and filled down to the axis;
  // or a short level mark across each category without a line, in the text colour (a floor or a
  // resident size on a bar chart); or a bound: a line without markers in the text colour (a
  // roofline's slope and roof), solid or dashed (a second roof).
  enum class SeriesStyle { Line, Points, Steps, Ticks, Bound, DashedBound };
  void setSeriesStyle(int series, SeriesStyle style);
  SeriesStyle seriesStyle(int series) const;
  // Live append: rescales to fit unless the user has zoomed or panned since the last fit.
  void append(int series, double x, double y);
  void setSeriesData(int series, const QVector<double>& x, const QVector<double>& y);
  void clearSeries(int series);
  // Names for a series' points, one per point in the order of their x (the order the chart keeps
  // them in): the hover readout names a point by its own label (a roofline step) instead of the
  // series'. Cleared with the series' data.
  void setPointLabels(int series, const QStringList& labels);

  // Categorical bars (e.g. the top-10 next tokens). Replaces any previous bars. A value that is not
  // finite leaves its category empty (a result still to come). Categories sit at x = 1, 2, ...: a
  // series can mark them too.
  void setBars(const QStringList& labels, const QVector<double>& values, const QString& valueName);
  QStringList barLabels() const;
  QVector<double> barValues() const;

  // Parts of a whole per category, stacked on one bar, the first set at the bottom; each set has
  // its own colour (the palette's when invalid) and legend entry. Replaces any previous bars.
  // annotations (optional, one per category) are drawn above each stack. Values that are not
  // finite leave that part empty.
  struct BarSet {
    QString name;
    QVector<double> values;
    QColor color;
  };
  void setStackedBars(const QStringList& labels, const QVector<BarSet>& sets, const QString& valueName,
                      const QStringList& annotations = QStringList());
  int barSetCount() const;
  QString barSetName(int set) const;
  QVector<double> barSetValues(int set) const;  // one per category, NaN where it is empty
  QStringList barAnnotations() const;

  // A labelled vertical line, e.g. "prefill" at x = 0.
  void addVerticalMarker(double x, const QString& label);

  // Timeline cells (a Gantt chart): rectangles from x0 to x1 on a row, in a colour and a style,
  // labelled inside when the label fits. Rows are categories on the y axis, the first on top.
  enum class CellStyle {
    Solid,      // the colour itself
    Tint,       // the colour lightened towards the background, outlined in the colour
    Muted,      // grey and dashed, whatever the colour: time a row holds without doing work
    Cached,     // the colour, hatched: work the row skipped because it was already done (a cache hit)
    Preempted,  // crossed out: the row's work was thrown away here, to be done again later
  };
  struct Cell {
    double x0 = 0, x1 = 0;
    int row = 0;
    QColor color;
    CellStyle style = CellStyle::Solid;
    QString label;  // drawn inside the cell when it fits
    QString info;   // the hover readout and the CSV's description
  };
  struct CellKey {  // a legend entry explaining a style
    QString name;
    QColor color;
    CellStyle style = CellStyle::Solid;
  };
  // Row labels of the y axis ("slot 0", ...); an empty list leaves timeline mode.
  void setCellRows(const QStringList& labels);
  QStringList cellRows() const;
  // Replaces the cells (live updates call it again with the grown list).
  void setCells(const QVector<Cell>& cells);
  QVector<Cell> cells() const;
  // Legend entries for the cell styles; shown in a row below the plot.
  void setCellKeys(const QVector<CellKey>& keys);

  // Removes every series, bar and marker (titles, labels and theme stay).
  void clearAll();
  // Fits the axes to the data and resumes auto-fit on append.
  void rescale();

  // Export. The format follows the suffix: .png (2x scale for slides), .svg, .pdf. Returns false
  // and sets *error (naming the path) when the file cannot be written.
  bool exportImage(const QString& path, QString* error = nullptr);
  // CSV of the data: "series,<x label>,<y label>" rows for series; "label,<value name>" for bars;
  // "row,start,end,label,info" for cells.
  bool exportCsv(const QString& path, QString* error = nullptr) const;
  QString toCsv() const;
  QImage renderImage(int width = 1280, int height = 720, double scale = 2.0);
  void copyImageToClipboard();
  // The chart as the session report keeps it when a run ends: laid out at `size` in the light
  // theme, as an SVG document (the .svg export's) and as the same drawing recorded through
  // QCustomPlot's painter export (a QPicture: a PDF replays it as vectors).
  struct Snapshot {
    QString title;
    QSize size;
    QByteArray svg;
    QPicture picture;
  };
  Snapshot snapshot(const QSize& size = QSize(960, 540));
  // Whether the chart shows any data: a point, a bar or a timeline cell.
  bool hasData() const;

  // The hover readout text for a widget position ("series: x, y"), empty when no point is near.
  QString readoutAt(const QPoint& pos) const;
  // Where a data point is drawn, in the same (ChartView) coordinates as readoutAt; (-1, -1) when the
  // point does not exist or is outside the plot area. For tests and for tutorials pointing at data.
  QPoint pixelFor(int series, int index) const;
  QPoint barPixelFor(int index) const;   // the middle of the top edge of a bar
  QPoint cellPixelFor(int index) const;  // the middle of a timeline cell

 public Q_SLOTS:
  // Asks for a file name and format (PNG, SVG, PDF, CSV) and exports.
  void exportWithDialog();

 Q_SIGNALS:
  void exported(const QString& path);
  void exportFailed(const QString& message);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  struct Series;
  void applyTheme();
  void showContextMenu(const QPoint& pos);
  void replotSoon();
  void flushPending();                // runs a pending fit and replot now (before exports and renders)
  void fitToData();                   // sets the axis ranges from the data, markers included
  void applyXAxisMode();              // ticker and scale type of the x axis: bars, log2 or linear
  void applyYAxisMode();              // row labels in timeline mode, numbers otherwise
  void placeLegendBelow(bool below);  // timeline legends sit in a row under the plot
  void labelCellRows();               // row labels, thinned out when rows are too close for them
  void updateLegendVisibility();
  void styleGraph(int series);
  bool categorical() const;
  // The data in the order the hover readout considers it: series, cells, bars, stacked bars.
  QVector<const chart::ChartData*> dataItems() const;
  void removeBars();
  void raiseSeries();  // series drawn over bars made after them
  // The annotation above each stack, at the stack's total.
  void placeStackAnnotations();
  void setReadout(const QPoint& plotPos);
  void hideReadout();
  void placeMarkerLabels();  // keeps marker labels inside the plot area (left or right of the line)
  // Lays the plot out for its current viewport (the widget or an export size) and adapts to it:
  // bar label rotation, bar value labels, and the legend corner that hides the least data.
  void adaptToSize();
  void placeLegend();
  // Raises the value range when the label above the tallest bar would not fit under the top.
  void keepBarLabelsInside();
  void restoreAfterExport(const QRect& viewport, bool readoutShown);
  // SVG with the data clipped to the plot area. Qt's SVG generator ignores clipping, so two invisible
  // markers drawn around the data layer are replaced by a group with a clipPath afterwards.
  QByteArray svgDocument(const QSize& size, QString* reason);
  void exportWithDialogAs(bool csv);
  bool validSeries(int series, const char* where) const;
  bool failExport(const QString& path, const QString& reason, QString* error) const;

  QCustomPlot* plot_ = nullptr;
  QCPTextElement* titleElement_ = nullptr;
  QCPTextElement* footnoteElement_ = nullptr;
  chart::CategoryBars* bars_ = nullptr;
  std::unique_ptr<chart::StackedBars> stack_;  // setStackedBars
  QStringList stackAnnotations_;
  QStringList barLabels_;
  QString barValueName_;
  QVector<QCPGraph*> graphs_;
  QStringList seriesNames_;
  QVector<int> seriesAxis_;
  QVector<SeriesStyle> seriesStyles_;
  struct Marker {
    double x;
    QString label;
  };
  QVector<Marker> markers_;
  QVector<QCPItemStraightLine*> markerLines_;
  QVector<QCPItemText*> markerTexts_;
  QVector<QCPItemText*> barTexts_;  // value labels above the bars
  chart::CellPlottable* cells_ = nullptr;
  QVector<chart::CellPlottable*> cellKeys_;
  QStringList cellRows_;
  int cellRowStride_ = 1;  // every n-th row labelled
  bool legendBelow_ = false;
  bool legendBelowWanted_ = false;
  int legendColumns_ = 0;
  // The y ranges of the last fit, before adaptToSize makes room for the legend.
  struct FitRange {
    bool valid = false;
    double lower = 0, upper = 0;
  };
  FitRange fitLeft_, fitRight_;
  QString title_, footnote_;
  QTimer* replotTimer_ = nullptr;
  bool fitPending_ = false;
  QPoint dragStart_;
  bool dragging_ = false;
  QString xLabel_, yLabel_, y2Label_;
  ChartTheme theme_ = ChartTheme::Light;
  bool presenter_ = false;
  bool userZoomed_ = false;
  bool logX_ = false;
  int logXBase_ = 2;
  bool logY_ = false;
  bool integerX_ = false, integerY_ = false;
  bool replotPending_ = false;
  QCPItemText* readout_ = nullptr;
  QCPLayerable* svgClipBegin_ = nullptr;
  QCPLayerable* svgClipEnd_ = nullptr;
};

}  // namespace servelab::ui
