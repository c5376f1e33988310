#pragma once
// What an experiment reports while it runs; the GUI worker turns each call into a queued signal,
// the CLI ignores it or prints progress. Calls come from the engine thread.
#include <atomic>
#include <string>

namespace servelab {

class BatchSink;         // generate/continuous_batching.h
class QuantizationSink;  // experiments/quantization.h

class ExperimentSink {
 public:
  virtual ~ExperimentSink() = default;
  // A new point of a named series (e.g. "with cache", token index, milliseconds).
  virtual void on_point(const std::string& series, double x, double y) {}
  // The named series starts over (a new repeat, or the final medians replacing the live run).
  virtual void on_reset(const std::string& series) {}
  // Fraction done in [0, 1] with a short description of the current stage.
  virtual void on_progress(double fraction, const std::string& stage) {}
};

struct ExperimentControl {
  ExperimentSink* sink = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  // Live scheduler events of the batching experiments (each run starts with on_run_start).
  BatchSink* batch = nullptr;
  // Each quantization mode's result as soon as it is measured.
  QuantizationSink* quant = nullptr;
};

}  // namespace servelab
