#pragma once
// "LoRA in one matrix": the shapes and parameter counts of W, A and B for one module of the loaded
// model at a chosen rank, the update's scale α/r, and what one adapter adds to the whole model.
#include <QGroupBox>
#include <QSettings>

#include "engine_types.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace servelab::ui {

// The LoRA arithmetic of one in x out matrix at rank r: |W| = in * out, |A| + |B| = r * (in + out).
struct LoraMath {
  qint64 in = 0, out = 0, rank = 0;
  qint64 wParameters() const { return in * out; }
  qint64 abParameters() const { return rank * (in + out); }
  double ratio() const {
    return wParameters() > 0 ? static_cast<double>(abParameters()) / static_cast<double>(wParameters()) : 0;
  }
};

// A parameter ratio as a percentage: "0.39%", "1.39%", "0.049%".
QString loraPercent(double ratio);

class LoraMathPanel : public QGroupBox {
  Q_OBJECT
 public:
  explicit LoraMathPanel(QWidget* parent = nullptr);

  // module: a matrix of the loaded model as Hugging Face names it (attn.c_attn, self_attn.q_proj,
  // mlp.down_proj, ...), or "course-1024" (the course's example, a 1024 x 1024 matrix).
  void setModule(const QString& module);
  void setRank(int rank);
  void setAlpha(double alpha);
  LoraMath math() const;
  QString text() const;  // the panel as plain text
  // The model's own matrices (GPT-2 small's until a model is loaded).
  void setModel(const ModelSummary& model);
  // Keys of the tab's settings group.
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void refresh();
  void fillModules();
  QList<ProjectionShape> projections() const;

  QComboBox* module_;
  QSpinBox* rank_;
  QDoubleSpinBox* alpha_;
  QLabel* label_;
  ModelSummary model_;
};

}  // namespace servelab::ui
