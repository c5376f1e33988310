#pragma once
// The Continuous batching tab's result tables, filled from a finished run (its summary paragraphs:
// run_summary.h).
#include <QString>

#include "engine_types.h"

class QTableWidget;

namespace servelab::ui {

// The methods side by side: a column each, a row per figure.
void fillComparison(QTableWidget* table, const servelab::SyncVsContinuousResult& r);
// The course benchmark's table: a row per method.
void fillCourseTable(QTableWidget* table, const servelab::CourseBenchmarkResult& r);

}  // namespace servelab::ui
