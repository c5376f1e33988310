#pragma once
// The Speculative decoding tab's charts: one setup function per chart, and the drawing of a
// finished run's result on it (what is shown is exactly what is reported and exported).
#include <QString>

#include "experiments/speculative.h"

class QWidget;

namespace servelab::ui {

class ChartView;

// Series names, shared by the live updates and the final drawing.
QString specProposedSeries();
QString specGainedSeries();
QString specPlainSeries();
QString specSpeculativeSeries();
QString specSpeedupSeries();
QString specBreakEvenSeries();

// Tokens each step gave (accepted proposals + the target's own) and the proposals, per step.
ChartView* makeAcceptedLengthChart(QWidget* parent);
void drawAcceptedLength(ChartView* chart, const servelab::BatchRunResult& run);
// Decode tokens/s so far against generated tokens, speculative and plain.
ChartView* makeThroughputChart(QWidget* parent);
void drawThroughput(ChartView* chart, const servelab::SpeculativeDemoResult& result);
// The k sweep: speed-up over plain decoding against k (log2), with the break-even line.
ChartView* makeSpeedupChart(QWidget* parent);
void drawSpeedup(ChartView* chart, const servelab::SpeculativeBenchResult& result);
// Where each run's time went: prefill, drafting, verification (plain: decode).
ChartView* makeTimeSplitChart(QWidget* parent);
void drawTimeSplit(ChartView* chart, const servelab::SpeculativeDemoResult& result);

}  // namespace servelab::ui
