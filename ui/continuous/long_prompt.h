#pragma once
// The Continuous batching tab's "long prompt arrives" scenario (chunked prefill): streams are
// decoding when a long prompt joins; served without and with a token budget, the streams'
// inter-token latency over time shows the stall a whole-prompt prefill causes and the budget
// spreading it over steps, at the cost of the long request's first token.
#include <QString>

#include "engine_types.h"
#include "experiments/chunked_prefill.h"

namespace servelab::ui {

class ChartView;

// The scenario's parameters: the tab's token budget (0: vLLM's 128-token chunks here) and a long
// prompt that fits the model's context.
servelab::ChunkedPrefillParams longPromptParams(int budget, int context);
// The inter-token latency chart: time since the run's start against each stream token's gap.
void setupItlChart(ChartView* chart);
void drawItl(ChartView* chart, const servelab::ChunkedPrefillResult& result);
// Both ways in a few HTML paragraphs: the streams' ITL p50/p99/max, the long request's time to
// first token, throughput, and whether the greedy tokens agreed.
QString longPromptSummary(const servelab::ChunkedPrefillResult& result);

}  // namespace servelab::ui
