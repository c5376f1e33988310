#include "form_widgets.h"

#include <QAbstractButton>
#include <QComboBox>
#include <QEvent>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QScrollBar>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "engine_job.h"

namespace servelab::ui {

QStringList& settingsIssues() {
  static QStringList issues;
  return issues;
}

namespace {

QString settingsKey(const QSettings& s, const QString& key) {
  return s.group().isEmpty() ? key : s.group() + QLatin1Char('/') + key;
}

// The raw text of a value for a message: a list as INI wrote it.
QString rawText(const QVariant& v) {
  return v.typeId() == QMetaType::QStringList ? v.toStringList().join(QLatin1Char(',')) : v.toString();
}

}  // namespace

void reportSetting(const QSettings& s, const QString& key, const QString& value, const QString& problem) {
  settingsIssues() << QStringLiteral("%1 = \"%2\" %3").arg(settingsKey(s, key), value, problem);
}

void loadParsedText(QSettings& s, const QString& key, QLineEdit* edit, const QString& what,
                    const std::function<bool(QString*)>& parses) {
  const auto text = settingString(s, key);
  if (!text) return;
  const QString before = edit->text();
  edit->setText(*text);
  QString error;
  if (parses(&error)) return;
  reportSetting(s, key, *text, QStringLiteral("is not %1: %2").arg(what, error));
  edit->setText(before);
}

std::optional<QString> settingString(const QSettings& s, const QString& key) {
  if (!s.contains(key)) return std::nullopt;
  const QVariant v = s.value(key);
  // QSettings writes an empty list as "@Invalid()".
  if (!v.isValid()) return QString();
  if (v.typeId() == QMetaType::QStringList) return v.toStringList().join(QStringLiteral(", "));
  // Strings, byte arrays and numbers (a QSettings that wrote a value hands it back as it was set).
  if (v.canConvert<QString>()) return v.toString();
  settingsIssues() << QStringLiteral("%1 holds a %2, not text")
                          .arg(settingsKey(s, key), QString::fromLatin1(v.typeName()));
  return std::nullopt;
}

std::optional<bool> settingBool(const QSettings& s, const QString& key) {
  if (!s.contains(key)) return std::nullopt;
  const QVariant v = s.value(key);
  if (v.typeId() == QMetaType::Bool) return v.toBool();
  const QString text = rawText(v).trimmed().toLower();
  if (text == QLatin1String("true") || text == QLatin1String("1")) return true;
  if (text == QLatin1String("false") || text == QLatin1String("0")) return false;
  reportSetting(s, key, rawText(v), QStringLiteral("is not true or false"));
  return std::nullopt;
}

std::optional<QString> settingChoice(const QSettings& s, const QString& key, const QStringList& choices) {
  if (!s.contains(key)) return std::nullopt;
  const QString text = rawText(s.value(key));
  if (choices.contains(text)) return text;
  reportSetting(s, key, text, QStringLiteral("is not one of %1").arg(choices.join(QStringLiteral(", "))));
  return std::nullopt;
}

std::optional<QStringList> settingChoiceList(const QSettings& s, const QString& key,
                                             const QStringList& choices) {
  if (!s.contains(key)) return std::nullopt;
  const QString text = rawText(s.value(key));
  QStringList items;
  for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    const QString item = part.trimmed();
    if (item.isEmpty()) continue;
    if (!choices.contains(item)) {
      reportSetting(
          s, key, text,
          QStringLiteral("names \"%1\", not one of %2").arg(item, choices.join(QStringLiteral(", "))));
      return std::nullopt;
    }
    items << item;
  }
  return items;
}

std::optional<qint64> settingInteger(const QSettings& s, const QString& key, qint64 lo, qint64 hi) {
  if (!s.contains(key)) return std::nullopt;
  const QString text = rawText(s.value(key)).trimmed();
  bool ok = false;
  const qint64 v = text.toLongLong(&ok);
  if (!ok) {
    reportSetting(s, key, text, QStringLiteral("is not a whole number"));
    return std::nullopt;
  }
  if (v < lo || v > hi) {
    reportSetting(s, key, text, QStringLiteral("is outside %1..%2").arg(lo).arg(hi));
    return std::nullopt;
  }
  return v;
}

void loadCheck(QSettings& s, const QString& key, QAbstractButton* box) {
  if (const auto v = settingBool(s, key)) box->setChecked(*v);
}

QStringList comboData(const QComboBox* box) {
  QStringList data;
  for (int i = 0; i < box->count(); ++i) data << box->itemData(i).toString();
  return data;
}

void loadSpin(QSettings& s, const QString& key, QSpinBox* box) {
  if (!s.contains(key)) return;
  const QString text = s.value(key).toString().trimmed();
  bool ok = false;
  const qlonglong v = text.toLongLong(&ok);
  if (!ok) {
    settingsIssues() << QStringLiteral("%1 = \"%2\" is not a whole number").arg(settingsKey(s, key), text);
  } else if (v < box->minimum() || v > box->maximum()) {
    settingsIssues() << QStringLiteral("%1 = %2 is outside %3..%4")
                            .arg(settingsKey(s, key), text)
                            .arg(box->minimum())
                            .arg(box->maximum());
  } else {
    box->setValue(static_cast<int>(v));
  }
}

void loadSpin(QSettings& s, const QString& key, QDoubleSpinBox* box) {
  if (!s.contains(key)) return;
  const QString text = s.value(key).toString().trimmed();
  bool ok = false;
  const double v = text.toDouble(&ok);
  if (!ok || !std::isfinite(v)) {
    settingsIssues() << QStringLiteral("%1 = \"%2\" is not a number").arg(settingsKey(s, key), text);
  } else if (v < box->minimum() || v > box->maximum()) {
    settingsIssues() << QStringLiteral("%1 = %2 is outside %3..%4")
                            .arg(settingsKey(s, key), text)
                            .arg(box->minimum())
                            .arg(box->maximum());
  } else {
    box->setValue(v);
  }
}

QSpinBox* makeSpin(QWidget* parent, const QString& name, int lo, int hi, int value, const QString& suffix) {
  auto* s = new QSpinBox(parent);
  s->setObjectName(name);
  s->setRange(lo, hi);
  s->setValue(value);
  s->setSuffix(suffix);
  return s;
}

QTableWidget* makeTable(QWidget* parent, const QString& name, const QStringList& headers) {
  auto* t = new QTableWidget(0, static_cast<int>(headers.size()), parent);
  t->setObjectName(name);
  t->setHorizontalHeaderLabels(headers);
  t->verticalHeader()->setVisible(false);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setWordWrap(false);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setStretchLastSection(true);
  return t;
}

QTableWidget* makeCompactTable(QWidget* parent, const QString& name, const QStringList& headers) {
  QTableWidget* t = makeTable(parent, name, headers);
  t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 6);
  return t;
}

QTableWidgetItem* tableCell(const QString& text, bool right) {
  auto* item = new QTableWidgetItem(text);
  item->setTextAlignment(right ? (Qt::AlignRight | Qt::AlignVCenter) : (Qt::AlignLeft | Qt::AlignVCenter));
  return item;
}

namespace {

// Keeps a side panel at least as wide as its controls need, whenever its content's layout changes
// (the content's minimum width is only known once it is polished and shown).
class SidePanelFit : public QObject {
 public:
  SidePanelFit(QScrollArea* scroll, int minWidth, int maxWidth)
      : QObject(scroll), scroll_(scroll), min_(minWidth), max_(maxWidth) {}
  bool eventFilter(QObject*, QEvent* e) override {
    if (e->type() == QEvent::LayoutRequest || e->type() == QEvent::Show) fit();
    return false;
  }
  void fit() {
    const int needed =
        scroll_->widget()->minimumSizeHint().width() + scroll_->verticalScrollBar()->sizeHint().width();
    scroll_->setMinimumWidth(std::max(min_, needed));
    scroll_->setMaximumWidth(std::max(max_, needed));
  }

 private:
  QScrollArea* scroll_;
  int min_, max_;
};

}  // namespace

QScrollArea* makeSidePanel(QWidget* parent, std::initializer_list<QWidget*> widgets, int minWidth,
                           int maxWidth) {
  auto* content = new QWidget(parent);
  auto* v = new QVBoxLayout(content);
  v->setContentsMargins(0, 0, 0, 0);
  for (QWidget* w : widgets) v->addWidget(w);
  v->addStretch(1);
  auto* scroll = new QScrollArea(parent);
  scroll->setWidget(content);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // Never narrower than the controls need: with no horizontal scroll bar, a panel narrower than its
  // content clips the right-hand column of its forms (the Serving tab's target editor did).
  auto* fit = new SidePanelFit(scroll, minWidth, maxWidth);
  content->installEventFilter(fit);
  fit->fit();
  return scroll;
}

QWidget* makeGrid(QWidget* parent, std::initializer_list<QWidget*> widgets, int columns) {
  auto* grid = new QWidget(parent);
  auto* g = new QGridLayout(grid);
  g->setContentsMargins(0, 0, 0, 0);
  int i = 0;
  for (QWidget* w : widgets) {
    g->addWidget(w, i / columns, i % columns);
    ++i;
  }
  return grid;
}

QHBoxLayout* makeControlRow(QWidget* parent, std::initializer_list<std::pair<QString, QWidget*>> pairs) {
  auto* row = new QHBoxLayout;
  for (const auto& [label, widget] : pairs) {
    row->addWidget(new QLabel(label, parent));
    row->addWidget(widget);
    row->addSpacing(6);
  }
  return row;
}

void showRunFailure(QProgressBar* progress, QLabel* summary, const QString& kind, const QString& message,
                    const QString& stoppedText) {
  const bool stopped = kind == QLatin1String("cancelled");
  progress->setFormat(stopped ? QObject::tr("stopped") : QObject::tr("failed"));
  summary->setText(stopped ? stoppedText
                           : QObject::tr("<b>Failed</b> (%1): %2").arg(kind, message.toHtmlEscaped()));
}

RunProgressBar::RunProgressBar(QWidget* parent, const QString& name) : QProgressBar(parent) {
  if (!name.isEmpty()) setObjectName(name);
  setRange(0, 1000);
  setValue(0);
  setFormat(tr("idle"));
}

void RunProgressBar::start() {
  setValue(0);
  setFormat(tr("starting · %p%"));
}

void RunProgressBar::follow(EngineJob* job) {
  connect(job, &EngineJob::progress, this, [this](double fraction, const QString& stage) {
    showFraction(fraction, tr("%1 · %p%").arg(stage));
  });
}

void RunProgressBar::showFraction(double fraction, const QString& format) {
  setValue(static_cast<int>(fraction * 1000));
  setFormat(format);
}

void RunProgressBar::finish() {
  setValue(1000);
  setFormat(tr("done"));
}

}  // namespace servelab::ui
