#include "continuous/kv_memory_view.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "batch_timeline.h"

namespace servelab::ui {

namespace {

constexpr int kMargin = 6;
constexpr int kGap = 1;

QColor freeColor(const QPalette& p) { return p.color(QPalette::Base); }
QColor cachedColor(const QPalette& p) {
  return p.color(QPalette::Base).lightness() < 128 ? QColor(90, 90, 90) : QColor(200, 200, 200);
}

}  // namespace

KvMemoryView::KvMemoryView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("continuousKvMemory"));
  setMouseTracking(true);
  setToolTip(tr("Run with paged KV to see its block pool"));
}

void KvMemoryView::clear() {
  step_ = -1;
  holders_.clear();
  cached_.clear();
  tables_.clear();
  update();
}

void KvMemoryView::showStep(const servelab::BatchStep& s) {
  if (s.kv_blocks_total <= 0) {
    clear();
    return;
  }
  step_ = s.step;
  const int n = static_cast<int>(s.kv_blocks_total);
  holders_ = QVector<QVector<qint64>>(n);
  cached_ = QVector<bool>(n, false);
  tables_.clear();
  for (const servelab::KvBlockTable& t : s.kv_block_tables) {
    QVector<qint64>& table = tables_[t.request];
    for (int64_t b : t.blocks) {
      table << b;
      if (b >= 0 && b < n && !holders_[static_cast<int>(b)].contains(t.request))
        holders_[static_cast<int>(b)] << t.request;
    }
  }
  for (QVector<qint64>& h : holders_) std::sort(h.begin(), h.end());
  for (int64_t b : s.kv_cached_blocks)
    if (b >= 0 && b < n) cached_[static_cast<int>(b)] = true;
  update();
}

KvMemoryView::Layout KvMemoryView::layout() const {
  Layout l;
  const int n = std::max<int>(1, static_cast<int>(holders_.size()));
  const QFontMetrics fm(font());
  const int legend = fm.height() + 8;
  const QRect area = rect().adjusted(kMargin, kMargin + fm.height() + 4, -kMargin, -kMargin - legend);
  // The largest square cell that fits every block in the area.
  int cell = std::max(3, static_cast<int>(std::sqrt(static_cast<double>(area.width()) * area.height() / n)));
  while (cell > 3) {
    const int cols = std::max(1, (area.width() + kGap) / cell);
    const int rows = (n + cols - 1) / cols;
    if (rows * cell <= area.height()) break;
    --cell;
  }
  l.cell = cell;
  l.columns = std::max(1, (area.width() + kGap) / cell);
  const int rows = (n + l.columns - 1) / l.columns;
  l.grid = QRect(area.left(), area.top(), l.columns * cell, rows * cell);
  return l;
}

int KvMemoryView::blockAt(const QPoint& pos) const {
  if (holders_.isEmpty()) return -1;
  const Layout l = layout();
  if (!l.grid.contains(pos)) return -1;
  const int c = (pos.x() - l.grid.left()) / l.cell, r = (pos.y() - l.grid.top()) / l.cell;
  const int b = r * l.columns + c;
  return b < holders_.size() ? b : -1;
}

QString KvMemoryView::describeBlock(int b) const {
  if (b < 0 || b >= holders_.size()) return {};
  QString text = tr("Block %1").arg(b);
  const QVector<qint64>& h = holders_[b];
  if (h.isEmpty())
    return text + (cached_[b] ? tr(": cached, unused (prefix cache, evictable)") : tr(": free"));
  QStringList who;
  for (qint64 r : h) who << QStringLiteral("#%1").arg(r);
  text += h.size() > 1 ? tr(": shared prefix of %1").arg(who.join(QStringLiteral(", ")))
                       : tr(": request %1").arg(who.first());
  for (qint64 r : h) {
    QStringList blocks;
    for (qint64 x : tables_.value(r)) blocks << QString::number(x);
    text += tr("\n#%1 block table: [%2]").arg(r).arg(blocks.join(QStringLiteral(", ")));
  }
  return text;
}

bool KvMemoryView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const int b = blockAt(help->pos());
    if (b >= 0)
      QToolTip::showText(help->globalPos(), describeBlock(b), this);
    else
      QToolTip::showText(help->globalPos(), toolTip(), this);
    return true;
  }
  return QWidget::event(e);
}

void KvMemoryView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QPalette pal = palette();
  p.fillRect(rect(), pal.color(QPalette::Window));
  const QFontMetrics fm(font());
  p.setPen(pal.color(QPalette::WindowText));
  int used = 0, cached = 0, shared = 0;
  for (int b = 0; b < holders_.size(); ++b) {
    used += holders_[b].isEmpty() ? 0 : 1;
    shared += holders_[b].size() > 1 ? 1 : 0;
    cached += cached_[b] ? 1 : 0;
  }
  const QString title = holders_.isEmpty()
                            ? tr("KV block pool: run with paged KV to see it")
                            : tr("Step %1: %2 of %3 blocks held (%4 shared), %5 cached, %6 free")
                                  .arg(step_)
                                  .arg(used)
                                  .arg(holders_.size())
                                  .arg(shared)
                                  .arg(cached)
                                  .arg(holders_.size() - used - cached);
  p.drawText(QRect(kMargin, kMargin, width() - 2 * kMargin, fm.height()), Qt::AlignLeft | Qt::AlignVCenter,
             fm.elidedText(title, Qt::ElideRight, width() - 2 * kMargin));
  const Layout l = layout();
  const QColor border = pal.color(QPalette::Mid);
  for (int b = 0; b < holders_.size(); ++b) {
    const QRect cell(l.grid.left() + (b % l.columns) * l.cell, l.grid.top() + (b / l.columns) * l.cell,
                     l.cell - kGap, l.cell - kGap);
    const QVector<qint64>& h = holders_[b];
    const QColor fill = !h.isEmpty() ? BatchTimeline::requestColor(h.first())
                        : cached_[b] ? cachedColor(pal)
                                     : freeColor(pal);
    p.fillRect(cell, fill);
    if (h.size() > 1) p.fillRect(cell, QBrush(Qt::black, Qt::BDiagPattern));
    if (l.cell >= 6) {
      p.setPen(border);
      p.drawRect(cell.adjusted(0, 0, -1, -1));
    }
  }
  // Legend.
  const int y = height() - kMargin - fm.height();
  int x = kMargin;
  const auto key = [&](const QColor& c, Qt::BrushStyle style, const QString& label) {
    const QRect box(x, y + 2, fm.height() - 4, fm.height() - 4);
    p.fillRect(box, c);
    if (style != Qt::SolidPattern) p.fillRect(box, QBrush(Qt::black, style));
    p.setPen(border);
    p.drawRect(box.adjusted(0, 0, -1, -1));
    p.setPen(pal.color(QPalette::WindowText));
    x += box.width() + 4;
    p.drawText(QPoint(x, y + fm.ascent()), label);
    x += fm.horizontalAdvance(label) + 12;
  };
  key(BatchTimeline::requestColor(0), Qt::SolidPattern, tr("held (request colour)"));
  key(BatchTimeline::requestColor(0), Qt::BDiagPattern, tr("shared prefix"));
  key(cachedColor(pal), Qt::SolidPattern, tr("cached unused"));
  key(freeColor(pal), Qt::SolidPattern, tr("free"));
}

}  // namespace servelab::ui
