#pragma once
// The Continuous batching tab's result tables and the paged-KV paragraph of its summary, filled
// from a finished run.
#include <QString>

#include "engine_types.h"

class QTableWidget;

namespace servelab::ui {

// The methods side by side: a column each, a row per figure.
void fillComparison(QTableWidget* table, const servelab::SyncVsContinuousResult& r);
// Slot KV against paged KV (requests held at once) and the prefix cache's hits, as HTML paragraphs;
// empty when paged KV did not run.
QString pagedSummary(const servelab::SyncVsContinuousResult& r, const servelab::SyncVsContinuousParams& p);
// The course benchmark's table: a row per method.
void fillCourseTable(QTableWidget* table, const servelab::CourseBenchmarkResult& r);

}  // namespace servelab::ui
