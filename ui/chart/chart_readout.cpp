// ChartView: the hover readout and the mouse (drag, zoom, double-click to fit).
#include <qcustomplot.h>

#include <QBuffer>
#include <QClipboard>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QRegularExpression>
#include <QSaveFile>
#include <QStandardPaths>
#include <QSvgGenerator>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <limits>

#include "chart/category_bars.h"
#include "chart/cell_plottable.h"
#include "chart/chart_data.h"
#include "chart/chart_style.h"
#include "chart/series_graph.h"
#include "chart/stacked_bars.h"
#include "chart/svg_clip_marker.h"
#include "chart_view.h"

namespace servelab::ui {

using namespace chart;

// ---------------------------------------------------------------------------------------------
// Hover readout

QString ChartView::readoutAt(const QPoint& pos) const {
  Pick pick;
  pick.at = plot_->mapFrom(this, pos);
  pick.area = QRectF(plot_->axisRect()->rect()).adjusted(-4, -4, 4, 4);
  if (!pick.area.contains(pick.at)) return QString();
  if (categorical()) pick.categories = barLabels_;
  for (const ChartData* item : dataItems()) item->pick(pick);
  return pick.tickText.isEmpty() ? pick.text : pick.tickText;
}

QPoint ChartView::pixelFor(int series, int index) const {
  if (series < 0 || series >= seriesCount()) return QPoint(-1, -1);
  const QCPGraph* graph = graphs_[series];
  const auto data = graph->data();
  if (index < 0 || index >= data->size()) return QPoint(-1, -1);
  const auto it = data->at(index);
  const QPointF q(graph->keyAxis()->coordToPixel(it->key), graph->valueAxis()->coordToPixel(it->value));
  if (!QRectF(plot_->axisRect()->rect()).contains(q)) return QPoint(-1, -1);
  return plot_->mapTo(this, q.toPoint());
}

QPoint ChartView::barPixelFor(int index) const {
  if (!bars_ || index < 0 || index >= barLabels_.size()) return QPoint(-1, -1);
  const auto it = bars_->data()->findBegin(index + 1 - 0.25, false);
  if (it == bars_->data()->constEnd() || std::fabs(it->key - (index + 1)) > 0.25) return QPoint(-1, -1);
  const QPointF q(plot_->xAxis->coordToPixel(it->key), plot_->yAxis->coordToPixel(it->value));
  if (!QRectF(plot_->axisRect()->rect()).contains(q)) return QPoint(-1, -1);
  return plot_->mapTo(this, q.toPoint());
}

QPoint ChartView::cellPixelFor(int index) const {
  if (!cells_ || index < 0 || index >= cells_->cells.size()) return QPoint(-1, -1);
  const QPointF q = cells_->pixelRect(cells_->cells[index]).center();
  if (!QRectF(plot_->axisRect()->rect()).contains(q)) return QPoint(-1, -1);
  return plot_->mapTo(this, q.toPoint());
}

void ChartView::setReadout(const QPoint& plotPos) {
  const QString text = readoutAt(plot_->mapTo(this, plotPos));
  if (text.isEmpty()) {
    hideReadout();
    return;
  }
  Qt::Alignment align;
  QPointF at(plotPos);
  if (plotPos.x() > plot_->width() * 0.6) {
    align |= Qt::AlignRight;
    at.rx() -= 14;
  } else {
    align |= Qt::AlignLeft;
    at.rx() += 14;
  }
  if (plotPos.y() > plot_->height() * 0.6) {
    align |= Qt::AlignBottom;
    at.ry() -= 12;
  } else {
    align |= Qt::AlignTop;
    at.ry() += 16;
  }
  readout_->setText(text);
  readout_->setPositionAlignment(align);
  readout_->position->setPixelPosition(at);
  readout_->setVisible(true);
  readout_->layer()->replot();
}

void ChartView::hideReadout() {
  if (!readout_->visible()) return;
  readout_->setVisible(false);
  readout_->layer()->replot();
}

bool ChartView::eventFilter(QObject* watched, QEvent* event) {
  if (watched != plot_) return QWidget::eventFilter(watched, event);
  switch (event->type()) {
    case QEvent::MouseButtonPress: {
      auto* e = static_cast<QMouseEvent*>(event);
      dragging_ = e->button() == Qt::LeftButton;
      dragStart_ = e->position().toPoint();
      break;
    }
    case QEvent::MouseMove: {
      auto* e = static_cast<QMouseEvent*>(event);
      if (dragging_ && (e->buttons() & Qt::LeftButton)) {
        if ((e->position().toPoint() - dragStart_).manhattanLength() > 2) {
          userZoomed_ = true;
          hideReadout();
        }
      } else if (e->buttons() == Qt::NoButton) {
        setReadout(e->position().toPoint());
      }
      break;
    }
    case QEvent::MouseButtonRelease:
      dragging_ = false;
      break;
    case QEvent::MouseButtonDblClick:
      if (static_cast<QMouseEvent*>(event)->button() == Qt::LeftButton) rescale();
      break;
    case QEvent::Wheel:
      if (plot_->axisRect()->rect().contains(static_cast<QWheelEvent*>(event)->position().toPoint())) {
        userZoomed_ = true;
        hideReadout();
      }
      break;
    case QEvent::Leave:
      hideReadout();
      break;
    case QEvent::Resize:
      replotSoon();  // bar labels and the legend corner depend on the size
      break;
    case QEvent::Show:
    case QEvent::ScreenChangeInternal:
      if (!qFuzzyCompare(plot_->bufferDevicePixelRatio(), plot_->devicePixelRatioF())) {
        plot_->setBufferDevicePixelRatio(plot_->devicePixelRatioF());
      }
      if (replotPending_) replotSoon();
      break;
    default:
      break;
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace servelab::ui
