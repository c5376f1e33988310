#include "multi_lora/lora_math_panel.h"

#include <QComboBox>
#include <QCoreApplication>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QHash>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTextDocumentFragment>
#include <QVBoxLayout>

#include "form_widgets.h"
#include "text_format.h"

namespace servelab::ui {

namespace {
const QString kCourseModule = QStringLiteral("course-1024");

// GPT-2 small's matrices, shown until a model is loaded.
QList<ProjectionShape> gpt2SmallProjections() {
  return {{QStringLiteral("attn.c_attn"), 768, 3 * 768},
          {QStringLiteral("attn.c_proj"), 768, 768},
          {QStringLiteral("mlp.c_fc"), 768, 4 * 768},
          {QStringLiteral("mlp.c_proj"), 4 * 768, 768}};
}

// What a matrix does, for the module list.
QString roleOf(const QString& name) {
  static const QHash<QString, const char*> roles = {
      {QStringLiteral("attn.c_attn"), QT_TRANSLATE_NOOP("LoraMathPanel", "query, key, value")},
      {QStringLiteral("attn.c_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "attention output")},
      {QStringLiteral("mlp.c_fc"), QT_TRANSLATE_NOOP("LoraMathPanel", "MLP up")},
      {QStringLiteral("mlp.c_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "MLP down")},
      {QStringLiteral("self_attn.q_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "query")},
      {QStringLiteral("self_attn.k_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "key")},
      {QStringLiteral("self_attn.v_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "value")},
      {QStringLiteral("self_attn.o_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "attention output")},
      {QStringLiteral("mlp.gate_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "MLP gate")},
      {QStringLiteral("mlp.up_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "MLP up")},
      {QStringLiteral("mlp.down_proj"), QT_TRANSLATE_NOOP("LoraMathPanel", "MLP down")}};
  const auto it = roles.find(name);
  return it == roles.end() ? QString() : QCoreApplication::translate("LoraMathPanel", it.value());
}
}  // namespace

QString loraPercent(double ratio) {
  const double p = ratio * 100;
  return QString::number(p, 'f', p >= 10 ? 1 : (p >= 0.1 ? 2 : 3)) + QLatin1Char('%');
}

LoraMathPanel::LoraMathPanel(QWidget* parent) : QGroupBox(tr("LoRA in one matrix"), parent) {
  module_ = new QComboBox(this);
  module_->setObjectName(QStringLiteral("loraMathModule"));
  fillModules();
  rank_ = makeSpin(this, QStringLiteral("loraMathRank"), 1, 1024, 8);
  rank_->setToolTip(tr("The rank r of A and B"));
  alpha_ = new QDoubleSpinBox(this);
  alpha_->setObjectName(QStringLiteral("loraMathAlpha"));
  alpha_->setRange(0.01, 4096);
  alpha_->setValue(16);
  alpha_->setToolTip(tr("α: the update is scaled by α / r"));
  label_ = new QLabel(this);
  label_->setObjectName(QStringLiteral("loraMath"));
  label_->setTextFormat(Qt::RichText);
  label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  label_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  label_->setWordWrap(true);
  label_->setToolTip(
      tr("W is in × out; A is in × r and B is r × out, so (|A| + |B|) / |W| = r(in + out) / (in·out). x is a "
         "row "
         "of the batch, 1 × in."));
  connect(module_, &QComboBox::currentIndexChanged, this, [this] { refresh(); });
  connect(rank_, &QSpinBox::valueChanged, this, [this] { refresh(); });
  connect(alpha_, &QDoubleSpinBox::valueChanged, this, [this] { refresh(); });
  auto* pick = new QHBoxLayout;
  pick->addWidget(module_, 1);
  pick->addWidget(new QLabel(tr("r"), this));
  pick->addWidget(rank_);
  pick->addWidget(new QLabel(tr("α"), this));
  pick->addWidget(alpha_);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(6, 4, 6, 4);
  v->setSpacing(4);
  v->addLayout(pick);
  v->addWidget(label_, 1);
  setMinimumWidth(470);
  setMaximumWidth(500);
  refresh();
}

void LoraMathPanel::setModule(const QString& module) {
  const int i = module_->findData(module);
  if (i >= 0) module_->setCurrentIndex(i);
}
void LoraMathPanel::setRank(int rank) { rank_->setValue(rank); }
void LoraMathPanel::setAlpha(double alpha) { alpha_->setValue(alpha); }

void LoraMathPanel::setModel(const ModelSummary& model) {
  model_ = model;
  fillModules();
  refresh();
}

QList<ProjectionShape> LoraMathPanel::projections() const {
  return model_.projections.isEmpty() ? gpt2SmallProjections() : model_.projections;
}

void LoraMathPanel::fillModules() {
  // The loaded architecture's own matrices; the choice survives a reload of the same family.
  const QString current = module_->currentData().toString();
  const QSignalBlocker quiet(module_);
  module_->clear();
  for (const ProjectionShape& p : projections()) {
    const QString role = roleOf(p.name);
    module_->addItem(role.isEmpty() ? p.name : tr("%1 (%2)").arg(p.name, role), p.name);
  }
  module_->addItem(tr("the course's example (hidden 1024)"), kCourseModule);
  const int i = module_->findData(current);
  module_->setCurrentIndex(i >= 0 ? i : 0);
}

LoraMath LoraMathPanel::math() const {
  const QString module = module_->currentData().toString();
  LoraMath m;
  m.rank = rank_->value();
  m.in = 1024;  // the course's example
  m.out = 1024;
  for (const ProjectionShape& p : projections()) {
    if (p.name == module) {
      m.in = p.in;
      m.out = p.out;
    }
  }
  return m;
}

QString LoraMathPanel::text() const { return QTextDocumentFragment::fromHtml(label_->text()).toPlainText(); }

void LoraMathPanel::refresh() {
  const LoraMath m = math();
  const double alpha = alpha_->value();
  const bool course = module_->currentData().toString() == kCourseModule;
  const QString muted = palette().color(QPalette::Base).lightness() < 128 ? QStringLiteral("#a0a0a0")
                                                                          : QStringLiteral("#666666");
  const auto row = [&](const QString& name, const QString& shape, qint64 params, const QString& note) {
    return QStringLiteral(
               "<tr><td><b>%1</b></td><td style='padding-left:6px'>[%2]</td>"
               "<td align='right' style='padding-left:10px'>%3</td>"
               "<td style='padding-left:8px; color:%4'>%5</td></tr>")
        .arg(name, shape, formatCount(params), muted, note);
  };
  QString html = QStringLiteral("<table cellspacing='0' cellpadding='1'>");
  html +=
      row(QStringLiteral("W"), QStringLiteral("%1 × %2").arg(m.in).arg(m.out), m.wParameters(), tr("frozen"));
  html +=
      row(QStringLiteral("A"), QStringLiteral("%1 × %2").arg(m.in).arg(m.rank), m.in * m.rank, tr("trained"));
  html += row(QStringLiteral("B"), QStringLiteral("%1 × %2").arg(m.rank).arg(m.out), m.rank * m.out,
              tr("trained"));
  html += QStringLiteral("</table>");
  html += tr("<p style='margin-top:4px; margin-bottom:2px'>y = x·W + (α/r)·x·A·B &nbsp; with α/r = %1/%2 = "
             "<b>%3</b></p>")
              .arg(alpha, 0, 'g', 4)
              .arg(m.rank)
              .arg(alpha / static_cast<double>(m.rank), 0, 'g', 4);
  html += tr("<p style='margin-top:2px; margin-bottom:2px'>(|A| + |B|) / |W| = %1 / %2 = <b>%3</b></p>")
              .arg(formatCount(m.abParameters()), formatCount(m.wParameters()), loraPercent(m.ratio()));
  if (!course) {
    // Every module of every layer at this rank: what one adapter adds to the whole model.
    const QList<ProjectionShape> matrices = projections();
    const qint64 layers = model_.layers > 0 ? model_.layers : 12;
    qint64 perLayer = 0;
    for (const ProjectionShape& p : matrices) perLayer += m.rank * (p.in + p.out);
    const qint64 all = perLayer * layers;
    const qint64 total = model_.parameters > 0 ? model_.parameters : 124439808;
    html += tr("<p style='margin-top:2px; color:%1'>All %2 matrices at r = %3: %4 parameters, %5 of the "
               "model</p>")
                .arg(muted)
                .arg(matrices.size() * layers)
                .arg(m.rank)
                .arg(formatMillions(all), loraPercent(static_cast<double>(all) / static_cast<double>(total)));
  } else {
    html +=
        tr("<p style='margin-top:2px; color:%1'>The course's example: a 1024 × 1024 layer at rank 2 trains "
           "0.39% of its weights.</p>")
            .arg(muted);
  }
  label_->setText(html);
}

void LoraMathPanel::changeEvent(QEvent* event) {
  QGroupBox::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) refresh();  // text colours follow the theme
}

void LoraMathPanel::loadSettings(QSettings& s) {
  QString module = s.value(QStringLiteral("mathModule"), module_->currentData()).toString();
  if (module == QLatin1String("seed-1024")) module = kCourseModule;  // its name before the rename
  setModule(module);
  loadSpin(s, QStringLiteral("mathRank"), rank_);
  loadSpin(s, QStringLiteral("mathAlpha"), alpha_);
}

void LoraMathPanel::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("mathModule"), module_->currentData().toString());
  s.setValue(QStringLiteral("mathRank"), rank_->value());
  s.setValue(QStringLiteral("mathAlpha"), alpha_->value());
}

}  // namespace servelab::ui
