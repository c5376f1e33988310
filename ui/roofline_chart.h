#pragma once
// The roofline as a chart any tab can show: this machine's measured limits (the read-bandwidth
// slope, the fp32 compute roof, the ridge point where they meet, our int8 kernel's roof where it
// runs) and a run's steps as points of arithmetic intensity against achieved FLOP/s, one series
// per kind of step, each point named for the hover readout with how close it came to the roof.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chart_view.h"
#include "experiments/roofline.h"

namespace servelab::ui {

// The machine-limits cache every roofline shares: machine_limits.json in the app's cache folder.
QString machineLimitsCachePath();

// This machine's limits for a tab's roofline, read from the shared cache or measured (once per
// machine) on the engine thread after the tab's run. Made on the GUI thread when the run starts
// (std::make_shared), filled by the job's function, read in the result's handler: the job's result
// signal orders the two.
class RooflineLimits {
 public:
  RooflineLimits();
  // A probe that fails leaves the limits zero: the steps are drawn without a roof.
  void measure(const servelab::Engine& engine) noexcept;
  const servelab::MachineLimits& limits() const { return limits_; }

 private:
  std::string cache_;
  servelab::MachineLimits limits_;
};

class RooflineChart : public ChartView {
  Q_OBJECT
 public:
  explicit RooflineChart(QWidget* parent = nullptr);

  // The series a step is drawn in.
  using SeriesOf = std::function<QString(const servelab::RooflinePoint&)>;
  // Its kind and, for weights quantized after loading, the quantization ("decode", "prefill ·
  // int8-channel"). A file's own blocks run as stored are the model as loaded (the footnote names it).
  static QString kindSeries(const servelab::RooflinePoint& point);
  // Whether a step's series names its quantization.
  static bool quantShown(const servelab::RooflinePoint& point);
  static QString roofSeriesName();
  static QString int8RoofSeriesName();

  // A run begins: the steps go, the roof's series comes first so that each kind keeps its colour
  // from the live points to the result.
  void startRun();
  // A step measured live, in the series named.
  void appendLive(const QString& series, double intensity, double flopPerSecond);
  // Replaces what is shown with the machine's roof and the steps (series in the order the steps
  // come, each one's points in the order of their intensity). Limits not measured (zero) draw the
  // steps alone.
  void showSteps(const servelab::MachineLimits& machine, const std::vector<servelab::RooflinePoint>& points,
                 const SeriesOf& seriesOf = kindSeries);
  // The machine the shown roof was measured on (zero limits when none is drawn).
  const servelab::MachineLimits& machine() const { return machine_; }

 private:
  int seriesNamed(const QString& name);
  void drawRoof(double x0, double x1);
  void drawInt8Roof(double x0, double x1);

  servelab::MachineLimits machine_;
};

}  // namespace servelab::ui
