#include "roofline_tab.h"

#include <QCheckBox>
#include <QFile>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "engine_controller.h"
#include "form_widgets.h"
#include "roofline_chart.h"
#include "util/limits.h"

namespace servelab::ui {

namespace {

constexpr double kGiga = 1e9;

// "32, 128,512" -> {32, 128, 512}; empty with *error set when an entry is not a whole number in
// [1, hi].
std::vector<int64_t> parseSizes(const QString& text, qint64 hi, const QString& what, QString* error) {
  std::vector<int64_t> out;
  for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    bool ok = false;
    const qint64 v = part.trimmed().toLongLong(&ok);
    if (!ok || v < 1 || v > hi) {
      *error = QObject::tr("%1: \"%2\" is not a whole number from 1 to %3").arg(what, part.trimmed()).arg(hi);
      return {};
    }
    out.push_back(v);
  }
  if (out.empty()) *error = QObject::tr("%1: give at least one size").arg(what);
  return out;
}

// Which kind of step a live point's label names ("prefill 128 tokens" -> "prefill").
QString kindSeries(const QString& label) {
  return label.startsWith(QLatin1String("prefill")) ? QStringLiteral("prefill") : label;
}

}  // namespace

RooflineTab::RooflineTab(EngineController* engine, QWidget* parent) : ExperimentTab(engine, parent) {
  cachePath_ = machineLimitsCachePath();
  prefillLengths_ = new QLineEdit(QStringLiteral("32, 128, 512"), this);
  prefillLengths_->setObjectName(QStringLiteral("rooflinePrefillLengths"));
  prefillLengths_->setToolTip(tr("Prompt lengths, one prefill step each"));
  decodeBatches_ = new QLineEdit(QStringLiteral("1, 8, 32"), this);
  decodeBatches_->setObjectName(QStringLiteral("rooflineDecodeBatches"));
  decodeBatches_->setToolTip(tr("Rows of a decode step, one point each"));
  decodeContext_ = new QSpinBox(this);
  decodeContext_->setObjectName(QStringLiteral("rooflineDecodeContext"));
  decodeContext_->setRange(1, 8192);
  decodeContext_->setValue(64);
  decodeContext_->setSuffix(tr(" tokens"));
  decodeSteps_ = new QSpinBox(this);
  decodeSteps_->setObjectName(QStringLiteral("rooflineDecodeSteps"));
  decodeSteps_->setRange(1, 64);
  decodeSteps_->setValue(4);
  remeasure_ = new QCheckBox(tr("Measure the machine again"), this);
  remeasure_->setObjectName(QStringLiteral("rooflineRemeasure"));
  remeasure_->setToolTip(tr("The limits are measured once and kept; tick to measure them again on this run"));

  auto* form = new QFormLayout;
  form->addRow(tr("Prefill lengths"), prefillLengths_);
  form->addRow(tr("Decode batches"), decodeBatches_);
  form->addRow(tr("Decode context"), decodeContext_);
  form->addRow(tr("Decode steps"), decodeSteps_);
  form->addRow(remeasure_);
  QHBoxLayout* buttons =
      makeRunButtons(QStringLiteral("roofline"), tr("Run the prefill and decode steps on the loaded model"));
  progress_ = new RunProgressBar(this);
  machine_ = new QLabel(tr("The machine's limits are measured on the first run."), this);
  machine_->setObjectName(QStringLiteral("rooflineMachine"));
  machine_->setWordWrap(true);
  machine_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_ = new QLabel(tr("Run to place prefill and decode steps under this machine's roof."), this);
  summary_->setObjectName(QStringLiteral("rooflineSummary"));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* controls = new QGroupBox(tr("Experiment"), this);
  auto* cv = new QVBoxLayout(controls);
  cv->addLayout(form);
  cv->addLayout(buttons);
  cv->addWidget(progress_);
  cv->addWidget(machine_);
  cv->addWidget(summary_);
  cv->addStretch();
  controls->setMinimumWidth(300);
  controls->setMaximumWidth(380);

  chart_ = new RooflineChart(this);
  chart_->setObjectName(QStringLiteral("rooflineChart"));

  auto* explanation = new QLabel(
      tr("A step that moves many bytes per FLOP is limited by memory: its point sits under the "
         "<b>slope</b> (bandwidth × intensity). One that does many FLOPs per byte is limited by "
         "arithmetic: under the flat <b>roof</b>. <b>Decode</b> reads every weight for one token per row, "
         "so it sits far left, on the slope, and a bigger batch moves it right almost for free; "
         "<b>prefill</b> reuses each weight for many positions and climbs towards the roof. Quantized "
         "weights move fewer bytes for the same FLOPs: the point moves right."),
      this);
  explanation->setWordWrap(true);
  explanation->setObjectName(QStringLiteral("rooflineExplanation"));
  auto* right = new QVBoxLayout;
  right->addWidget(chart_, 1);
  right->addWidget(explanation);
  auto* layout = new QHBoxLayout(this);
  layout->addWidget(controls);
  layout->addLayout(right, 1);
}

QString RooflineTab::roofSeriesName() { return RooflineChart::roofSeriesName(); }
QString RooflineTab::int8RoofSeriesName() { return RooflineChart::int8RoofSeriesName(); }

QString RooflineTab::seriesFor(const servelab::RooflinePoint& point) {
  const QString kind =
      point.kind == "prefill" ? QStringLiteral("prefill") : QString::fromStdString(point.label);
  return RooflineChart::quantShown(point)
             ? QStringLiteral("%1 · %2").arg(kind, QString::fromStdString(point.quant))
             : kind;
}

void RooflineTab::setWorkload(const QString& prefillLengths, const QString& decodeBatches, int decodeContext,
                              int decodeSteps) {
  prefillLengths_->setText(prefillLengths);
  decodeBatches_->setText(decodeBatches);
  decodeContext_->setValue(decodeContext);
  decodeSteps_->setValue(decodeSteps);
}

void RooflineTab::setRemeasure(bool on) { remeasure_->setChecked(on); }

QString RooflineTab::summaryText() const { return summary_->text(); }

void RooflineTab::setModel(const ModelSummary& model) {
  model_ = model;
  chart_->setFootnote(chartFootnote(model));
  if (model.positions > 2) decodeContext_->setMaximum(model.positions - 2);
}

bool RooflineTab::run() {
  QString error;
  servelab::RooflineParams p;
  p.prefill_lengths =
      parseSizes(prefillLengths_->text(), servelab::limits::kMaxTokens, tr("prefill lengths"), &error);
  if (!error.isEmpty()) return refuseRun(error);
  p.decode_batches =
      parseSizes(decodeBatches_->text(), servelab::limits::kMaxBatch, tr("decode batches"), &error);
  if (!error.isEmpty()) return refuseRun(error);
  p.decode_context = decodeContext_->value();
  p.decode_steps = decodeSteps_->value();
  const bool remeasure = remeasure_->isChecked();
  const std::string cache = cachePath_.toStdString();
  EngineJob* job = engine_->submit(tr("Roofline"), [p, remeasure, cache](JobContext& c) {
    servelab::check_roofline_params(c.engine(), p);
    const servelab::MachineLimits limits = servelab::machine_limits(c.engine(), cache, remeasure);
    return servelab::run_roofline(c.engine(), p, limits, c.control());
  });
  if (!job) return false;
  connect(job, &EngineJob::point, this, &RooflineTab::onPoint);
  progress_->follow(job);
  job->onResult<servelab::RooflineResult>(this, [this](const auto& r) { onFinished(r); });
  connect(job, &EngineJob::failed, this, &RooflineTab::onFailed);
  runStarted();
  hasResult_ = false;
  lastError_.clear();
  chart_->startRun();
  progress_->start();
  summary_->setText(tr("Running %1 prefill and %2 decode steps…")
                        .arg(p.prefill_lengths.size())
                        .arg(p.decode_batches.size()));
  return true;
}

void RooflineTab::onPoint(const QString& label, double intensity, double flopPerSecond) {
  chart_->appendLive(kindSeries(label), intensity, flopPerSecond);
}

void RooflineTab::onFinished(const servelab::RooflineResult& r) {
  result_ = r;
  hasResult_ = true;
  const servelab::MachineLimits& m = r.machine;
  chart_->showSteps(m, r.points, &RooflineTab::seriesFor);
  QString rows;
  for (const servelab::RooflinePoint& pt : r.points)
    rows +=
        QStringLiteral("<tr><td>%1</td><td align='right'>%2</td><td align='right'>%3</td><td>%4</td></tr>")
            .arg(QString::fromStdString(pt.label).toHtmlEscaped())
            .arg(pt.intensity(), 0, 'f', 1)
            .arg(pt.flop_s() / kGiga, 0, 'f', 1)
            .arg(pt.intensity() < m.ridge() ? tr("memory-bound") : tr("compute-bound"));
  const QString int8 = m.int8_gop_s > 0 ? tr(" · int8 %1 GOP/s").arg(m.int8_gop_s, 0, 'f', 1) : QString();
  machine_->setText(
      tr("<b>%1</b> · %2 · %3 threads on %4<br>read %5 GB/s<br>fp32 %6 GFLOP/s%7<br>ridge %8 "
         "FLOP/byte<br><small>GEMM: %9 · measured %10</small>")
          .arg(QString::fromStdString(m.cpu).toHtmlEscaped(), QString::fromStdString(m.isa))
          .arg(m.threads)
          .arg(QString::fromStdString(m.device))
          .arg(m.read_gb_s, 0, 'f', 1)
          .arg(m.fp32_gflop_s, 0, 'f', 1)
          .arg(int8)
          .arg(m.ridge(), 0, 'f', 1)
          .arg(QString::fromStdString(m.gemm).toHtmlEscaped(), QString::fromStdString(m.measured_at)));
  summary_->setText(tr("<table cellspacing='3'><tr><td><b>step</b></td><td align='right'><b>FLOP/B</b></td>"
                       "<td align='right'><b>GFLOP/s</b></td><td></td></tr>%1</table>")
                        .arg(rows));
  progress_->finish();
  runEnded(true, QString());
}

void RooflineTab::onFailed(const QString& kind, const QString& message) {
  lastError_ = message;
  showRunFailure(progress_, summary_, kind, message,
                 tr("<b>Stopped.</b> The steps measured so far stay on the chart."));
  runEnded(false, message);
}

QStringList RooflineTab::resultValueNames() const {
  return {QStringLiteral("read_gb_s"),
          QStringLiteral("peak_gflop_s"),
          QStringLiteral("ridge"),
          QStringLiteral("decode_intensity"),
          QStringLiteral("decode_gb_s"),
          QStringLiteral("decode_bandwidth_percent"),
          QStringLiteral("largest_decode_batch"),
          QStringLiteral("largest_decode_intensity"),
          QStringLiteral("prefill_intensity"),
          QStringLiteral("prefill_gflop_s"),
          QStringLiteral("prefill_peak_percent")};
}

// The steps of the weights as loaded (the run's first quantization). This machine's limits (read bandwidth,
// fp32 peak, the ridge between them in FLOP/byte), the smallest decode batch's intensity and the bandwidth it
// reached (GB/s and percent of the measured read bandwidth), the largest decode batch's intensity, and the
// longest prefill's intensity and FLOP/s (GFLOP/s and percent of the peak).
QMap<QString, double> RooflineTab::resultValues() const {
  if (!hasResult_) return {};
  const servelab::MachineLimits& m = result_.machine;
  QMap<QString, double> v{{QStringLiteral("read_gb_s"), m.read_gb_s},
                          {QStringLiteral("peak_gflop_s"), m.fp32_gflop_s},
                          {QStringLiteral("ridge"), m.ridge()}};
  const servelab::RooflinePoint *decode = nullptr, *widest = nullptr, *prefill = nullptr;
  // The weights as loaded (the run's first points); a quantized variant's points are another roof's.
  const std::string quant = result_.points.empty() ? std::string() : result_.points.front().quant;
  for (const servelab::RooflinePoint& p : result_.points) {
    if (p.quant != quant) continue;
    if (p.kind == "decode") {
      if (!decode || p.rows < decode->rows) decode = &p;
      if (!widest || p.rows > widest->rows) widest = &p;
    } else if (p.kind == "prefill" && (!prefill || p.positions > prefill->positions)) {
      prefill = &p;
    }
  }
  if (decode && decode->ms > 0) {
    const double gbs = decode->bytes / (decode->ms * 1e-3) / 1e9;
    v[QStringLiteral("decode_intensity")] = decode->intensity();
    v[QStringLiteral("decode_gb_s")] = gbs;
    if (m.read_gb_s > 0) v[QStringLiteral("decode_bandwidth_percent")] = 100.0 * gbs / m.read_gb_s;
  }
  if (widest) {
    v[QStringLiteral("largest_decode_batch")] = static_cast<double>(widest->rows);
    v[QStringLiteral("largest_decode_intensity")] = widest->intensity();
  }
  if (prefill && prefill->ms > 0) {
    v[QStringLiteral("prefill_intensity")] = prefill->intensity();
    v[QStringLiteral("prefill_gflop_s")] = prefill->flop_s() / 1e9;
    if (m.fp32_gflop_s > 0)
      v[QStringLiteral("prefill_peak_percent")] = 100.0 * prefill->flop_s() / 1e9 / m.fp32_gflop_s;
  }
  return v;
}

QJsonObject RooflineTab::lastResult() const {
  if (!hasResult_) {
    QJsonObject o{{QStringLiteral("experiment"), QStringLiteral("roofline")}};
    if (!lastError_.isEmpty()) o[QStringLiteral("error")] = lastError_;
    return o;
  }
  return toQJsonObject(result_.to_json());
}

void RooflineTab::loadSettings(QSettings& s) {
  s.beginGroup(tabId());
  if (const auto v = settingString(s, QStringLiteral("prefillLengths"))) prefillLengths_->setText(*v);
  if (const auto v = settingString(s, QStringLiteral("decodeBatches"))) decodeBatches_->setText(*v);
  loadSpin(s, QStringLiteral("decodeContext"), decodeContext_);
  loadSpin(s, QStringLiteral("decodeSteps"), decodeSteps_);
  s.endGroup();
}

void RooflineTab::saveSettings(QSettings& s) const {
  s.beginGroup(tabId());
  s.setValue(QStringLiteral("prefillLengths"), prefillLengths_->text());
  s.setValue(QStringLiteral("decodeBatches"), decodeBatches_->text());
  s.setValue(QStringLiteral("decodeContext"), decodeContext_->value());
  s.setValue(QStringLiteral("decodeSteps"), decodeSteps_->value());
  s.endGroup();
}

Facts RooflineTab::measuredLimits() const {
  servelab::MachineLimits m = result_.machine;
  if (!hasResult_) {
    QFile file(cachePath_);
    if (!file.open(QIODevice::ReadOnly)) return {};
    const nlohmann::json j = nlohmann::json::parse(file.readAll().toStdString(), nullptr, false);
    if (!j.is_object()) return {};
    m = servelab::MachineLimits::from_json(j);
    servelab::MachineLimits now;
    now.cpu = model_.cpuModel.toStdString();
    now.isa = model_.cpuIsa.toStdString();
    now.device = model_.device.toStdString();
    now.threads = model_.threads;
    if (!model_.valid() || !m.same_machine(now)) return {};
  }
  if (m.read_gb_s <= 0 || m.fp32_gflop_s <= 0) return {};
  Facts f;
  f << qMakePair(tr("Memory read bandwidth"), tr("%1 GB/s").arg(m.read_gb_s, 0, 'f', 1))
    << qMakePair(
           tr("Peak fp32"),
           tr("%1 GFLOP/s (GEMM: %2)").arg(m.fp32_gflop_s, 0, 'f', 1).arg(QString::fromStdString(m.gemm)));
  if (m.int8_gop_s > 0)
    f << qMakePair(
        tr("Peak int8"),
        tr("%1 GOP/s (%2)").arg(m.int8_gop_s, 0, 'f', 1).arg(QString::fromStdString(m.int8_kernel)));
  f << qMakePair(tr("Ridge point"), tr("%1 FLOP per byte").arg(m.ridge(), 0, 'f', 1))
    << qMakePair(tr("Measured with"),
                 tr("%1 threads on %2 (%3)")
                     .arg(m.threads)
                     .arg(QString::fromStdString(m.device), QString::fromStdString(m.isa)))
    << qMakePair(tr("Measured at"), QString::fromStdString(m.measured_at));
  return f;
}

RunReport RooflineTab::runReport() const {
  RunReport r = ExperimentTab::runReport();
  r.html << reportHtml(machine_) << reportHtml(summary_);
  return r;
}

}  // namespace servelab::ui
