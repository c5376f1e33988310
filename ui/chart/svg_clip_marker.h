#pragma once
// SvgClipMarker: the invisible markers ChartView::svgDocument turns into a clip group.
#include <qcustomplot.h>

#include <QString>

namespace servelab::ui::chart {

// Draws a token that svgDocument finds and replaces; visible only while an SVG is written.
class SvgClipMarker : public QCPLayerable {
 public:
  SvgClipMarker(QCustomPlot* plot, const QString& token) : QCPLayerable(plot), token_(token) {
    setVisible(false);
  }

 protected:
  void applyDefaultAntialiasingHint(QCPPainter*) const override {}
  void draw(QCPPainter* painter) override {
    painter->setPen(QColor(1, 2, 3));  // a pen nothing else uses, so the token gets a group of its own
    painter->drawText(QPointF(0, 0), token_);
  }

 private:
  QString token_;
};

}  // namespace servelab::ui::chart
