#pragma once
// The Continuous batching tab's result values (ExperimentTab::resultValues): the figures of its last
// runs by name, for session reports and scripts.
#include <QMap>
#include <QString>
#include <QStringList>

#include "engine_types.h"
#include "experiments/chunked_prefill.h"

namespace servelab::ui {

// Every name continuousValues() may give, in report order.
QStringList continuousValueNames();
// The values of the runs given (null: that kind of run has no result). The queue's run: total
// times, forward passes and median request latency (arrival to last token) of the synchronous and
// the slot-KV continuous run. Each kind of run gives its own values (a run of one kind clears only
// that kind's). Paged values: the last run when it is paged KV, against the slot-KV continuous run;
// prefix_speedup is the uncached paged run's time over the cached one's (when both ran). The long
// prompt (chunked prefill): ITL cuts, TTFT cost, throughput. The course benchmark: its speed-up and
// average batch.
QMap<QString, double> continuousValues(const servelab::SyncVsContinuousResult* compare,
                                       const servelab::ChunkedPrefillResult* longPrompt,
                                       const servelab::CourseBenchmarkResult* course);

}  // namespace servelab::ui
