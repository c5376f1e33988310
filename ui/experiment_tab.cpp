#include "experiment_tab.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QTextDocument>
#include <algorithm>

#include "chart_view.h"
#include "engine_controller.h"

namespace servelab::ui {

QString chartFootnote(const ModelSummary& m) {
  if (!m.valid()) return {};
  return QStringLiteral("%1 · %2 %3 · %4 threads")
      .arg(m.demo ? QStringLiteral("built-in model (random weights)") : m.name, m.device, m.dtype)
      .arg(m.threads);
}

double medianValue(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

QJsonObject toQJsonObject(const nlohmann::json& json) {
  return QJsonDocument::fromJson(QByteArray::fromStdString(json.dump())).object();
}

QString reportHtml(const QLabel* label) {
  if (!label || label->isHidden() || label->text().trimmed().isEmpty()) return {};
  const QString text = label->text();
  const bool rich = label->textFormat() == Qt::RichText ||
                    (label->textFormat() == Qt::AutoText && Qt::mightBeRichText(text));
  return rich ? text : text.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>"));
}

ReportTable reportTable(const QTableWidget* table, const QString& caption) {
  ReportTable t;
  t.caption = caption;
  const auto oneLine = [](const QTableWidgetItem* item) {
    return item ? item->text().simplified() : QString();
  };
  // Row names (the vertical header) when the table shows its own labels rather than numbers.
  t.rowHeaders = !table->verticalHeader()->isHidden() && table->rowCount() > 0 &&
                 table->verticalHeaderItem(0) != nullptr;
  QList<int> columns;
  if (t.rowHeaders) {
    t.headers << QString();
    t.numeric << false;
  }
  for (int c = 0; c < table->columnCount(); ++c) {
    if (table->isColumnHidden(c)) continue;
    columns << c;
    t.headers << oneLine(table->horizontalHeaderItem(c));
    t.numeric << false;
  }
  const int first = t.rowHeaders ? 1 : 0;
  for (int r = 0; r < table->rowCount(); ++r) {
    if (table->isRowHidden(r)) continue;
    ++t.totalRows;
    if (t.rows.size() >= ReportTable::kReportRows) continue;
    QStringList row;
    if (t.rowHeaders) row << oneLine(table->verticalHeaderItem(r));
    for (qsizetype i = 0; i < columns.size(); ++i) {
      const QTableWidgetItem* item = table->item(r, columns[i]);
      row << (item ? item->text() : QString());
      if (item && (item->textAlignment() & Qt::AlignRight)) t.numeric[first + i] = true;
    }
    t.rows << row;
  }
  return t;
}

QList<ChartView*> chartsWithData(const QList<ChartView*>& charts) {
  QList<ChartView*> out;
  for (ChartView* c : charts)
    if (c && c->hasData()) out << c;
  return out;
}

RunReport ExperimentTab::runReport() const {
  RunReport r;
  r.charts = chartsWithData(charts());
  return r;
}

QHBoxLayout* ExperimentTab::makeRunButtons(const QString& prefix, const QString& runToolTip) {
  runButton_ = new QPushButton(tr("Run"), this);
  runButton_->setObjectName(prefix + QStringLiteral("Run"));
  runButton_->setToolTip(runToolTip);
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setObjectName(prefix + QStringLiteral("Stop"));
  stopButton_->setToolTip(tr("Stop before the engine's next step (Esc)"));
  stopButton_->setEnabled(false);
  connect(runButton_, &QPushButton::clicked, this, [this] { run(); });
  connect(stopButton_, &QPushButton::clicked, engine_, &EngineController::stop);
  auto* row = new QHBoxLayout;
  row->addWidget(runButton_);
  row->addWidget(stopButton_);
  return row;
}

void ExperimentTab::runStarted() {
  running_ = true;
  Q_EMIT runBegan();
  runButton_->setEnabled(false);
  stopButton_->setEnabled(true);
}

void ExperimentTab::runEnded(bool ok, const QString& message) {
  running_ = false;
  runButton_->setEnabled(true);
  stopButton_->setEnabled(false);
  Q_EMIT runFinished(ok, message);
}

}  // namespace servelab::ui
