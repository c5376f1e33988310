#pragma once
// The Continuous batching tab's summary of a finished run: a few HTML paragraphs under the queue
// saying what the methods did (times, speed-up, latency, KV memory, the prefix cache) and whether
// they agreed on the tokens.
#include <QString>

#include "engine_types.h"

namespace servelab::ui {

// The queue served synchronously and continuously: speed-up, rows per forward pass, median latency
// and time to first token, the course's merge/filter's KV copies, paged KV (pagedSummary) and
// whether every method generated the same tokens.
QString compareSummary(const servelab::SyncVsContinuousResult& r, const servelab::SyncVsContinuousParams& p);
// Slot KV against paged KV (requests held at once) and the prefix cache's hits, as HTML paragraphs;
// empty when paged KV did not run.
QString pagedSummary(const servelab::SyncVsContinuousResult& r, const servelab::SyncVsContinuousParams& p);
// The course benchmark (two rows: the baseline, then batched) with `newTokens` per query: the
// throughput ratio, times, inference calls, and whether the tokens agreed.
QString courseSummary(const servelab::CourseBenchmarkResult& r, int newTokens);

}  // namespace servelab::ui
