#pragma once
// Paged KV made visible: the block pool as a grid, one cell per block, coloured by the request
// that holds it (the Gantt chart's colours). A block several requests share (a cached prompt
// prefix) is hatched; free blocks and cached blocks nobody uses (kept for the prefix cache,
// evicted least recently used) look different; hovering a cell names the block, its holders and
// their block tables. It shows one scheduler step's snapshot (BatchStep::kv_block_tables).
#include <QMap>
#include <QVector>
#include <QWidget>

#include "engine_types.h"

namespace servelab::ui {

class KvMemoryView : public QWidget {
  Q_OBJECT
 public:
  explicit KvMemoryView(QWidget* parent = nullptr);

  // A paged step's pool; a step with no blocks (slot KV, merge/filter) clears the view.
  void showStep(const servelab::BatchStep& step);
  void clear();

  // Per block: the requests holding it (ascending; empty for free and cached-unused blocks).
  const QVector<QVector<qint64>>& holders() const { return holders_; }
  // Per block: whether it is a cached block nobody uses.
  const QVector<bool>& cachedUnused() const { return cached_; }
  qint64 step() const { return step_; }
  // The tooltip text of block b.
  QString describeBlock(int block) const;
  // The block under a point of the widget, or -1.
  int blockAt(const QPoint& pos) const;

  QSize sizeHint() const override { return {420, 240}; }
  QSize minimumSizeHint() const override { return {200, 120}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct Layout {
    QRect grid;
    int columns = 1, cell = 8;
  };
  Layout layout() const;

  qint64 step_ = -1;
  QVector<QVector<qint64>> holders_;
  QVector<bool> cached_;
  QMap<qint64, QVector<qint64>> tables_;  // request -> its block table
};

}  // namespace servelab::ui
