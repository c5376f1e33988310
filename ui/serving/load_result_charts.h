#pragma once
// The Serving tab's charts of load runs, drawn from what the client measured (the load generator's
// per-request timings), so that they are the same whatever server ran the requests: ours, another
// machine's, a vLLM, TGI or LoRAX cluster, or a run saved earlier and reopened. One setup function
// per chart; each takes the runs to draw (the current one, and the one it is compared with).
#include <QString>
#include <QStringList>
#include <QVector>

#include "serve/load_generator.h"

namespace servelab::ui {

class ChartView;

// A run with the name its series carry when two are drawn side by side ("" when alone).
struct NamedRun {
  QString name;
  const servelab::LoadReport* report = nullptr;
};

// Time to first token of every measured request as a distribution (the share of requests that had
// their first token by x ms), one curve per run, or per level of a sweep; p50, p90 and p99 marked
// (lines when one curve is drawn, else in each curve's name). A sweep saved without its requests
// draws the percentiles it saved, as points of the same curve.
void setupTtftDistribution(ChartView* chart, const QVector<NamedRun>& runs);
// The same for inter-token latency: every gap between tokens of every measured request.
void setupItlDistribution(ChartView* chart, const QVector<NamedRun>& runs);
// A sweep's latency against throughput: TTFT and inter-token latency p50 and p99 per level at the
// level's output tokens/s, each point labelled with its level (c=4 clients, λ=2/s); two runs
// side by side, each series named after its run. A run without levels yet makes the live series
// (0 to 3: TTFT p50, TTFT p99, ITL p50, ITL p99) that appendLevel fills.
void setupLatencyThroughput(ChartView* chart, const QVector<NamedRun>& runs);
void appendLevel(ChartView* chart, const servelab::LoadLevel& level);
// Goodput (requests per second that met every SLO) and request throughput against each level's
// load, for sweeps run with SLOs; a note instead when no run has any.
void setupGoodput(ChartView* chart, const QVector<NamedRun>& runs);
// Per-token arrival times of a scenario's streams (not a sweep): one series per stream.
void setupTokenTimes(ChartView* chart, const QString& scenario);
void addStreamTimes(ChartView* chart, const servelab::StreamTiming& stream);

// A level's name as the charts label it: "c=4" (closed-loop clients) or "λ=2/s" (a rate).
QString levelLabel(const servelab::LoadLevel& level);
// One line per stream or level of a run, as the tab's summary shows it; *failed and *total count
// the requests.
QStringList runSummaryLines(const servelab::LoadReport& report, int64_t* failed, int64_t* total);

}  // namespace servelab::ui
